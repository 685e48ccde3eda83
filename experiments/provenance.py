"""What a result was produced with: the machine, the installed package versions and the git state of the code
(the last from ``parsers/common/gitstate.py``, re-exported here). Runs (``runner``) and benchmark files (``benchfile``)
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

from gcdbench.parsers.common.gitstate import RESULT_FOLDERS, git_commit, git_state, repo_folders

__all__ = ["RESULT_FOLDERS", "git_commit", "git_state", "machine_info", "machine_snapshot", "machine_state",
           "cell_not_alone", "not_alone_text", "package_versions", "repo_folders"]


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


# --------------------------------------------------------------------------------------------------------------
# the machine's state during a session (issue 66): was the machine alone, at what clock speed
# --------------------------------------------------------------------------------------------------------------
#: The threshold of "not alone": other processes (everything but this run's own process tree: the runner and its
#: workers) using more than this share of one core on average over a session's timed part -- their busy CPU
#: seconds (user, nice, system, irq, softirq, steal, from /proc/stat via psutil) over its wall time -- make it "not
#: alone". 0.10 core: an idle Linux machine's daemons stay well below it, while one other busy process (a compile,
#: a test suite, a second benchmark) on any core is above it; such a process takes a core the run's worker could
#: be scheduled on, and its cache and memory traffic slow the worker even where cores are free.
NOT_ALONE_CORES = 0.10
_BUSY_FIELDS = ("user", "nice", "system", "irq", "softirq", "steal")


def _cpufreq() -> dict:
    """Current CPU clock (MHz: min, mean, max over the cores) and the governors, where ``/sys`` exposes them."""
    mhz, governors = [], set()
    for d in sorted(Path("/sys/devices/system/cpu").glob("cpu[0-9]*/cpufreq")):
        try:
            mhz.append(int((d / "scaling_cur_freq").read_text()) / 1000.0)
        except (OSError, ValueError):
            pass
        try:
            governors.add((d / "scaling_governor").read_text().strip())
        except OSError:
            pass
    out = {}
    if mhz:
        out["cpu_mhz"] = {"min": round(min(mhz)), "mean": round(sum(mhz) / len(mhz)), "max": round(max(mhz))}
    if governors:
        out["governor"] = sorted(governors)
    return out


def _own_cpu_s() -> float:
    """CPU seconds of this process and its live descendants, each with the children it has waited for: a worker
    that ended, and a descendant's own helper that ended (an engine's compile child, a table build, a killed
    preprocessor), whose time the kernel adds to the descendant that reaped it, not to this process."""
    me = psutil.Process()
    total = 0.0
    for proc in [me, *me.children(recursive=True)]:
        try:
            c = proc.cpu_times()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        total += c.user + c.system + getattr(c, "children_user", 0.0) + getattr(c, "children_system", 0.0)
    return total


def machine_snapshot() -> dict:
    """The machine at one moment: load average, CPU clock and governor, and the busy CPU seconds of the whole
    machine and of this process tree (what :func:`machine_state` subtracts)."""
    import time

    times = psutil.cpu_times()
    snap = {"t": time.monotonic(), "busy_s": sum(getattr(times, f, 0.0) for f in _BUSY_FIELDS),
            "own_s": _own_cpu_s()}
    try:
        snap["load"] = [round(x, 2) for x in os.getloadavg()]
    except OSError:
        pass
    snap.update(_cpufreq())
    return snap


def machine_state(before: dict, after: dict) -> dict:
    """What run.json keeps per session (``machine_state``): load average and CPU clock before and after, the
    governors, and the CPU time other processes used meanwhile (``others_cpu_s``; ``others_cores``: its average
    in cores); ``alone`` is False when they used more than :data:`NOT_ALONE_CORES` of a core on average."""
    wall = max(after["t"] - before["t"], 1e-9)
    others = max(0.0, (after["busy_s"] - before["busy_s"]) - (after["own_s"] - before["own_s"]))
    out = {"wall_s": round(wall, 3), "others_cpu_s": round(others, 3), "others_cores": round(others / wall, 3)}
    out["alone"] = out["others_cores"] <= NOT_ALONE_CORES
    for key in ("load", "cpu_mhz"):
        if key in before or key in after:
            out[f"{key}_before"], out[f"{key}_after"] = before.get(key), after.get(key)
    governors = sorted(set(before.get("governor", [])) | set(after.get("governor", [])))
    if governors:
        out["governor"] = governors
    return out


def not_alone_text(state: dict | None) -> str | None:
    """``the machine was not alone (...)`` for a session whose :func:`machine_state` says so, else None."""
    if not state or state.get("alone", True):
        return None
    load = state.get("load_before"), state.get("load_after")
    load_text = f", load {load[0][0]:.2f} -> {load[1][0]:.2f}" if all(load) else ""
    return (f"the machine was not alone (other processes used {state['others_cores']:.2f} cores on average over "
            f"{state['wall_s']:.0f} s{load_text}): timings may be slow or noisy; run it again with the machine alone")


def cell_not_alone(sessions) -> str:
    """The short warning a cell's line carries when the machine was not alone during the cell: ``not alone: other
    processes used 12.3 s CPU during the cell (0.45 cores on average, above 0.10)`` -- summed over the cell's
    sessions whose :func:`machine_state` says ``alone: false`` (the average over their wall time); ``""`` when
    every session was alone or none recorded its state (cells run before issue 66)."""
    states = [s.get("machine_state") for s in sessions or [] if isinstance(s, dict) and s.get("machine_state")]
    busy = [st for st in states if not st.get("alone", True)]
    if not busy:
        return ""
    cpu = sum(float(st.get("others_cpu_s") or 0.0) for st in busy)
    wall = sum(float(st.get("wall_s") or 0.0) for st in busy)
    cores = cpu / wall if wall > 0 else max(float(st.get("others_cores") or 0.0) for st in busy)
    of = f" in {len(busy)} of its {len(states)} sessions" if len(states) > 1 else ""
    return (f"not alone: other processes used {cpu:.1f} s CPU during the cell{of} ({cores:.2f} cores on average, "
            f"above {NOT_ALONE_CORES:.2f})")
