"""The git state of this checkout (commit, dirty tree), for every file that records what code produced it.

It sits in ``parsers.common``, the bottom layer (beside ``limited``), because both the dataset generators
(``datasets/sampled.py``) and the experiment layer (``experiments/provenance.py``) stamp their outputs with it;
the machine and package provenance of a run stays in ``experiments/provenance.py``.
"""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

#: this project's checkout (the folder above parsers/)
REPO = Path(__file__).resolve().parents[2]

#: written into a wheel by its build (setup.py): ``{"commit", "dirty"}`` of the tree the wheel was built from
BUILT_FROM = Path(__file__).with_name("built_from.json")

#: folders whose changes never make a run's tree dirty: result files are data, not code (a bench that rewrites a
#: committed result file before a sweep starts must not mark the sweep's cells as run on a dirty tree)
RESULT_FOLDERS = ("results",)


def git_state(ignore: tuple[str, ...] = (), repo: Path | None = None) -> dict:
    """``{"commit": sha or None, "dirty": tracked files differ from the commit (None: not a git checkout)}``.
    ``ignore``: folders (relative to the repository) whose changes do not count, e.g. a generator's own output
    folder, which its earlier outputs in the same session have already changed. ``repo``: this project's.
    Installed from a wheel, this code is no checkout (no pyproject.toml beside the package folders): the state of
    the tree the wheel was built from (:data:`BUILT_FROM`), else unknown, even where the environment lies inside
    some other git checkout (a virtual environment in a project folder)."""
    if repo is None and not (REPO / "pyproject.toml").is_file():
        return built_from()
    repo = repo or REPO
    try:
        out = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
        if out.returncode != 0:
            return {"commit": None, "dirty": None}
        dirty = subprocess.run(["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=no", "--", ".",
                                *(f":(exclude){p}" for p in ignore)],
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return {"commit": out.stdout.strip(), "dirty": bool(dirty)}
    except (OSError, subprocess.SubprocessError):
        return {"commit": None, "dirty": None}


def built_from() -> dict:
    """The git state a wheel's build recorded (:data:`BUILT_FROM`); unknown without that file or from a tree
    that was no git checkout."""
    try:
        got = json.loads(BUILT_FROM.read_text())
        return {"commit": got.get("commit"), "dirty": got.get("dirty")}
    except (OSError, ValueError, AttributeError):
        return {"commit": None, "dirty": None}


def repo_folders(*paths) -> tuple[str, ...]:
    """Those of ``paths`` that lie in this repository, relative to it (for ``git_state(ignore=...)``): a
    program's own output folder, e.g. a run's ``out_dir`` (result files are not code, and ``fresh=true`` deletes
    committed ones before the run starts) or the sampled-sequence generator's folder."""
    out = []
    for p in paths:
        try:
            out.append(Path(p).resolve().relative_to(REPO).as_posix())
        except ValueError:
            pass
    return tuple(out)


def git_commit(ignore: tuple[str, ...] = ()) -> str | None:
    """The commit as one string, ``<sha>-dirty`` for a dirty tree (benchmark files); ``ignore`` as ``git_state``."""
    g = git_state(ignore)
    return None if g["commit"] is None else g["commit"] + ("-dirty" if g["dirty"] else "")
