"""What a result was produced with: the machine, the installed package versions and the git state of the code
(the last from ``parsers/gitstate.py``, re-exported here). Runs (``runner``) and benchmark files (``benchfile``)
record these; nothing here depends on a cell or an engine."""
from __future__ import annotations

import os
import platform
import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import psutil

from gcdbench.parsers.gitstate import RESULT_FOLDERS, git_commit, git_state, repo_folders

__all__ = ["RESULT_FOLDERS", "git_commit", "git_state", "machine_info", "package_versions", "repo_folders"]


def machine_info() -> dict:
    """Host name, platform, Python, CPU model and count, memory (GB) and the GPU nvidia-smi names (or None)."""
    info = {"hostname": platform.node(), "platform": platform.platform(), "python": sys.version.split()[0],
            "cpu_count": os.cpu_count(), "memory_gb": round(psutil.virtual_memory().total / 2**30, 1)}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                info["cpu"] = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=10)
        info["gpu"] = out.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        info["gpu"] = None
    return info


def package_versions() -> dict:
    """Installed versions of gcdbench and every package it depends on (its own metadata, extras left out)."""
    names = ["gcdbench"]
    try:
        names += [re.split(r"[ ;<>=!~\[]", r, maxsplit=1)[0] for r in metadata.requires("gcdbench") or []
                  if "extra ==" not in r]
    except metadata.PackageNotFoundError:
        pass
    out = {}
    for p in names:
        try:
            out[p] = metadata.version(p)
        except metadata.PackageNotFoundError:
            pass
    return out
