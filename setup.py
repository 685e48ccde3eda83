"""The package list of ``gcdbench``, found rather than written out (everything else is in pyproject.toml).

The top-level folders parsers/, datasets/ and experiments/ are the subpackages ``gcdbench.parsers`` etc.
([tool.setuptools.package-dir] maps them). setuptools' ``[tool.setuptools.packages.find]`` names what it finds
after its folders (``parsers.lr``), with no way to put them under ``gcdbench``, so this file adds the prefix. A
package is every folder below them that holds a Python module, with or without ``__init__.py``: datasets/ has
none on purpose (it never shadows Hugging Face's ``datasets`` from the repository root), and its data folders
(grammars/, sample/, sampled/) hold no module, so they stay package data of ``gcdbench.datasets``. ``conf/``
(Hydra's configs) ships as the data-only package ``gcdbench.conf``, so ``experiments/run.py``'s
``parents[1] / "conf"`` is the repository's ``conf/`` in an editable install and ``gcdbench/conf/`` in a wheel.
"""
from pathlib import Path

from setuptools import find_namespace_packages, setup

TOP = ("parsers", "datasets", "experiments")
HERE = Path(__file__).resolve().parent


def packages() -> list[str]:
    found = find_namespace_packages(str(HERE), include=[f"{t}{s}" for t in TOP for s in ("", ".*")],
                                    exclude=["*.__pycache__"])
    with_code = [p for p in found if any((HERE / p.replace(".", "/")).glob("*.py"))]
    return sorted(f"gcdbench.{p}" for p in with_code) + ["gcdbench.conf"]


setup(packages=packages())
