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
import importlib.util
import json
from pathlib import Path

from setuptools import find_namespace_packages, setup
from setuptools.command.build_py import build_py

TOP = ("parsers", "datasets", "experiments")
HERE = Path(__file__).resolve().parent


def packages() -> list[str]:
    found = find_namespace_packages(str(HERE), include=[f"{t}{s}" for t in TOP for s in ("", ".*")],
                                    exclude=["*.__pycache__"])
    with_code = [p for p in found if any((HERE / p.replace(".", "/")).glob("*.py"))]
    return sorted(f"gcdbench.{p}" for p in with_code) + ["gcdbench.conf"]


class BuildWithCommit(build_py):
    """The usual build, plus ``gcdbench/parsers/common/built_from.json``: the commit and dirty state of the tree
    the wheel is built from (``parsers/common/gitstate.py`` computes it, ``results/`` not counted), which installed
    code, being no checkout, reports as its own (``gitstate.git_state``); null where the tree is no git checkout."""

    def run(self):
        super().run()
        spec = importlib.util.spec_from_file_location("_gitstate", HERE / "parsers" / "common" / "gitstate.py")
        gitstate = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(gitstate)
        state = gitstate.git_state(ignore=gitstate.RESULT_FOLDERS, repo=HERE) if (HERE / ".git").exists() \
            else {"commit": None, "dirty": None}
        target = Path(self.build_lib) / "gcdbench" / "parsers" / "common" / gitstate.BUILT_FROM.name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(state) + "\n")


setup(packages=packages(), cmdclass={"build_py": BuildWithCommit})
