"""The import contracts of pyproject.toml ([tool.importlinter]: layers import downwards only, no cycles) hold;
`.ci/run` runs `lint-imports` too, this test repeats it for whoever runs pytest alone."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_import_contracts_are_kept():
    lint = Path(sys.executable).with_name("lint-imports")
    r = subprocess.run([str(lint), "--no-cache"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-6000:] + r.stderr[-2000:]


def _layered_modules() -> set[str]:
    """Every module named by a layer of a `layers` contract, with its container prefixed."""
    import tomllib

    conf = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]
    named: set[str] = set()
    for contract in conf["contracts"]:
        if contract["type"] != "layers":
            continue
        prefixes = [c + "." for c in contract.get("containers", [])] or [""]
        for layer in contract["layers"]:
            for name in layer.split("|"):
                name = name.strip().strip("()").strip()
                named.update(prefix + name for prefix in prefixes)
    return named


def _package_modules() -> list[str]:
    import importlib
    import pkgutil

    found = []
    for root in ("gcdbench.parsers", "gcdbench.datasets", "gcdbench.experiments"):
        package = importlib.import_module(root)
        found += [m.name for m in pkgutil.walk_packages(package.__path__, root + ".")]
    return found


def test_every_module_sits_in_a_layer():
    """The contracts are exhaustive: each module of parsers, datasets and experiments (and of their sub-packages) is
    named by a layer of the contract of its own package, so a module added without a place fails here."""
    modules = _package_modules()
    assert "gcdbench.parsers.pre3.kernels" in modules and "gcdbench.datasets.registry" in modules  # the walk sees both
    unplaced = sorted(set(modules) - _layered_modules())
    assert not unplaced, (f"modules in no import-linter layer: {unplaced}; place each in a layer of its package's "
                          "`layers` contract in pyproject.toml [tool.importlinter] (and run .venv/bin/lint-imports)")
