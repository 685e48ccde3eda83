"""An engine and a dataset kept in another pip-installable package appear by name with no edit to the project:
``tests/plugins/gcdbench_toy`` is installed into a temporary folder and a cell runs with ``engine=toy
dataset=toy_words`` in a process that has that folder on its path."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PLUGIN = REPO / "tests" / "plugins" / "gcdbench_toy"
# what pip says when it cannot fetch the build backend (setuptools) for an isolated build: no package index here
NO_INDEX = ("Could not find a version that satisfies the requirement setuptools", "No matching distribution found")


@pytest.fixture(scope="module")
def plugin_path(tmp_path_factory) -> str:
    """The toy package installed with pip (its own build, no dependencies) into a folder of its own."""
    tmp = tmp_path_factory.mktemp("plugin")
    src = tmp / "src"
    shutil.copytree(PLUGIN, src)   # pip builds in the source tree: keep the checkout clean
    r = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(tmp / "site"),
                        str(src)], capture_output=True, text=True, timeout=300)
    if r.returncode and any(m in r.stdout + r.stderr for m in NO_INDEX):
        pytest.skip("pip cannot fetch setuptools to build the toy package (no package index reachable)")
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    return str(tmp / "site")


def _python(plugin_path: str, *args, **kw):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [plugin_path, os.environ.get("PYTHONPATH")]))}
    return subprocess.run([sys.executable, *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=300, **kw)


@pytest.mark.slow
def test_an_installed_engine_and_dataset_run_a_cell(plugin_path, tmp_path):
    r = _python(plugin_path, "-m", "experiments.run", "engine=toy", "engine.flavour=spicy", "dataset=toy_words",
                "dataset.count=4", "tokenizer=bytes", "samples=2", "audit.per_sample=1", "progress=false",
                f"out_dir={tmp_path}")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    (run_json,) = tmp_path.glob("toy_words/bytes/*/run.json")
    meta = json.loads(run_json.read_text())
    assert run_json.parent.name == "toy__flavour-spicy" and meta["engine"] == "toy"
    assert meta["outcomes"] == {"ok": 2} and meta["inits"][0]["engine_info"] == {"flavour": "spicy"}


@pytest.mark.slow
def test_an_installed_engine_has_a_schema_and_an_option_table(plugin_path):
    bad = _python(plugin_path, "-m", "experiments.run", "engine=toy", "engine.flavor=x", "tokenizer=bytes")
    assert bad.returncode != 0 and "Key 'flavor' not in 'engine toy (options: flavour)'" in bad.stderr, bad.stderr
    table = _python(plugin_path, "-m", "gcdbench.parsers.registry", "--options", "toy")
    assert table.returncode == 0 and "| `flavour` | str | `plain` | `plain`, `spicy` | what info() reports |" \
        in table.stdout, table.stdout + table.stderr
