"""Installing gcdbench neither shadows nor overwrites Hugging Face's `datasets`; both import side by side. The wheel
holds every module, config and data file, and an environment with only the wheel runs and reports from any folder.

The wheel is built from a copy of the build's inputs in a temporary folder (setuptools writes build/ and an
egg-info folder beside the sources), so these tests write nothing inside the repository."""
from __future__ import annotations

import json
import os
import shutil
import site
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

try:
    import tomllib
except ModuleNotFoundError:   # Python 3.10
    import tomli as tomllib

REPO = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
#: the import package's folders in the repository: {"parsers": "gcdbench.parsers", ..., "conf": "gcdbench.conf"}
PACKAGE_DIRS = {folder: pkg for pkg, folder in PYPROJECT["tool"]["setuptools"]["package-dir"].items()}
#: folders whose every file ships (code, the loaders' data files beside their modules, Hydra's configs); of the
#: other package folders only the modules ship (parsers/*/README.md and experiments/*.sh are the checkout's)
WHOLE = ("datasets", "conf")


def _files(folder: str) -> list[str]:
    return sorted(p.relative_to(REPO).as_posix() for p in (REPO / folder).rglob("*")
                  if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc")


def _in_wheel(path: str) -> str:
    folder, _, rest = path.partition("/")
    return PACKAGE_DIRS[folder].replace(".", "/") + "/" + rest


def _git(src: Path, *args) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t"}
    return subprocess.run(["git", "-C", str(src), *args], capture_output=True, text=True, check=True, env=env,
                          timeout=60).stdout.strip()


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> tuple[Path, str]:
    """The wheel of the working tree, built with this interpreter's setuptools (no build isolation: no index),
    from a copy committed to a git repository of its own; (the wheel, that commit)."""
    src, out = tmp_path_factory.mktemp("src"), tmp_path_factory.mktemp("wheel")
    for name in ("pyproject.toml", "setup.py", PYPROJECT["project"]["readme"]):
        shutil.copy2(REPO / name, src / name)
    for folder in PACKAGE_DIRS:
        shutil.copytree(REPO / folder, src / folder, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    _git(src, "init", "-q")
    _git(src, "add", "-A")
    _git(src, "commit", "-q", "-m", "the copy")
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q",
                        "-w", str(out), str(src)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    (whl,) = out.glob("gcdbench-*.whl")
    return whl, _git(src, "rev-parse", "HEAD")


def test_both_datasets_packages_import_from_the_repo_root():
    code = ("import datasets, gcdbench.datasets.base as ours; "
            "assert hasattr(datasets, 'load_dataset'), datasets.__file__; "
            "assert 'site-packages' in datasets.__file__; "
            "print(datasets.__file__, ours.__file__)")
    r = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert str(REPO / "datasets") in r.stdout


def test_wheel_installs_only_the_gcdbench_package(wheel):
    wheel, commit = wheel
    names = zipfile.ZipFile(wheel).namelist()
    # the build recorded the tree it was built from (setup.py), which installed code reports as its commit
    built = json.loads(zipfile.ZipFile(wheel).read("gcdbench/parsers/common/built_from.json"))
    assert built == {"commit": commit, "dirty": False}
    assert any(n.startswith("gcdbench/datasets/") for n in names)
    assert all(n.startswith(("gcdbench/", "gcdbench-")) for n in names), [n for n in names if "/" in n][:5]
    assert not any("__pycache__" in n or n.endswith(".pyc") for n in names)
    # every module of every package folder (subpackages found, not listed: parsers/jsonschema/ once was missing),
    # every grammar, sample and sampled file the loaders read, and every Hydra config and bench recipe
    shipped = [f for folder in PACKAGE_DIRS for f in _files(folder) if folder in WHOLE or f.endswith(".py")]
    for f in ("parsers/jsonschema/convert.py", "datasets/grammars/spider.lark", "datasets/sample/queries.sql",
              "conf/config.yaml", "conf/experiment/main.yaml", "conf/bench/edge.recipe"):
        assert f in shipped, f
    missing = [f for f in shipped if _in_wheel(f) not in names]
    assert not missing, missing


#: run in the fresh environment: where gcdbench comes from, then every module of the installed package imported
#: (``__main__`` modules are commands: importing one runs it). The engines of the optional extras (genlm,
#: transformers_cfg, llamacpp, syncode) and the CUDA kernels import their libraries or a GPU only when used, so
#: every module must import without them.
IMPORT_ALL = r"""
import importlib, importlib.metadata, json, pkgutil, sys
from pathlib import Path
import gcdbench.parsers
root = Path(gcdbench.parsers.__file__).resolve().parents[1]
names, failed = [], {}
for top in ("parsers", "datasets", "experiments"):
    pkg = importlib.import_module("gcdbench." + top)
    names += [pkg.__name__] + [m.name for m in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + ".")]
for name in names:
    if name.rpartition(".")[2] == "__main__":
        continue
    try:
        importlib.import_module(name)
    except BaseException as e:
        failed[name] = f"{type(e).__name__}: {e}"
files = sorted({m.__file__ for n, m in sys.modules.items()
                if n.startswith("gcdbench.") and getattr(m, "__file__", None)})
dist = importlib.metadata.distribution("gcdbench")
print(json.dumps({"root": str(root), "names": names, "failed": failed, "files": files,
                  "dist": str(dist.locate_file("")), "run": dist.entry_points.select(name="gcdbench-run")[0].value}))
"""


def _fresh_venv(path: Path) -> tuple[Path, Path]:
    """A virtual environment with none of this one's packages installed; a .pth file puts this interpreter's
    site-packages (the dependencies) after its own, with the other .pth files found there (e.g. numba-cuda's
    redirector) except this checkout's editable-install finder. Returns (its python, its site-packages)."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True, timeout=120)
    py = path / "bin" / "python"
    sp = Path(subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip())
    deps = [Path(p) for p in site.getsitepackages() if Path(p).is_dir()]
    (sp / "00-gcdbench-test-deps.pth").write_text("".join(f"{p}\n" for p in deps))
    for d in deps:
        for pth in d.glob("*.pth"):
            text = pth.read_text(errors="replace")
            if "gcdbench" not in pth.name and "gcdbench" not in text and str(REPO) not in text:
                shutil.copy2(pth, sp / pth.name)
    return py, sp


@pytest.mark.slow
def test_the_wheel_runs_and_reports_from_any_folder(wheel, tmp_path):
    wheel, commit = wheel
    py, sp = _fresh_venv(tmp_path / "venv")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP")}
    env.update(PATH=f"{py.parent}{os.pathsep}{env.get('PATH', '')}", PIP_DISABLE_PIP_VERSION_CHECK="1")
    r = subprocess.run([str(py), "-m", "pip", "install", "--no-deps", "--ignore-installed", "--no-index", "-q",
                        str(wheel)], capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert not any(sp.glob("__editable__*")), "the fresh environment must not see the checkout"
    here = tmp_path / "elsewhere"   # an empty folder: no conf/, no datasets/, no repository around it
    here.mkdir()
    out, report = tmp_path / "out", tmp_path / "report"

    def command(*args, timeout=600):
        r = subprocess.run([str(a) for a in args], cwd=here, capture_output=True, text=True, timeout=timeout,
                           env=env)
        assert r.returncode == 0, f"{args[0]} exited {r.returncode}:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
        return r

    # the installed package is the wheel's, not the checkout's
    got = json.loads(command(py, "-c", IMPORT_ALL).stdout)
    assert Path(got["root"]) == sp / "gcdbench", got["root"]
    assert Path(got["dist"]).resolve() == sp.resolve(), got["dist"]
    assert got["run"] == "gcdbench.experiments.run:main"
    assert all(Path(f).resolve().is_relative_to(sp.resolve()) for f in got["files"]), \
        [f for f in got["files"] if not Path(f).resolve().is_relative_to(sp.resolve())][:5]
    # pkgutil saw every module file of the installed tree (datasets/ is a namespace package), and each imported
    on_disk = {".".join(("gcdbench", *p.relative_to(sp / "gcdbench").with_suffix("").parts)).removesuffix(".__init__")
               for p in (sp / "gcdbench").rglob("*.py")}
    assert on_disk <= set(got["names"]), sorted(on_disk - set(got["names"]))
    assert "gcdbench.parsers.jsonschema.convert" in got["names"] and "gcdbench.datasets.maskbench" in got["names"]
    assert not got["failed"], got["failed"]

    # a run from that folder: Hydra's configs, the sample's grammar and queries all come from the wheel
    command(py.parent / "gcdbench-run", "engine=psc", "dataset=sample", "samples=2", "audit.per_sample=1",
            f"out_dir={out}")
    cell = out / "sample" / "qwen3" / "psc" / "run.json"
    text = cell.read_text()
    meta = json.loads(text)
    assert meta["outcomes"] == {"ok": 2} and meta["audit"]["agree"] == meta["audit"]["steps"] > 0, meta["outcomes"]
    assert Path(meta["dataset_meta"]["source"]).resolve().is_relative_to(sp.resolve() / "gcdbench" / "datasets")
    # installed code is no checkout: the commit is the one its wheel was built from (not the checkout around)
    assert meta["git_commit"] == commit, meta["git_commit"]     # clean: no "-dirty" suffix
    assert str(REPO) not in text
    (hydra_yaml,) = out.glob(".hydra/*/.hydra/hydra.yaml")
    assert f"path: {sp.resolve() / 'gcdbench' / 'conf'}\n" in hydra_yaml.read_text()

    command(py.parent / "gcdbench-report", "--results", out, "--out", report)
    table = (report / "table1.md").read_text()
    assert "psc" in table and "2/2" in table, table
    assert not any(here.iterdir()), sorted(p.name for p in here.iterdir())   # nothing written where it ran
