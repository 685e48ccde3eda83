"""CUDA helpers the CUDA tests share: a child process's environment with numba's CUDA simulator on or off, and
whether a real device is visible (asked in a child, so this process's ``numba.cuda`` stays unset: the simulator
switch must be set before ``numba.cuda`` starts)."""
from __future__ import annotations

import functools
import os
import subprocess
import sys

import pytest


def cuda_env(simulator: bool) -> dict:
    """This process's environment with numba's CUDA simulator switched on or off."""
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    if simulator:
        env["NUMBA_ENABLE_CUDASIM"] = "1"
    return env


@functools.lru_cache(maxsize=1)
def gpu_present() -> bool:
    """A real CUDA device (not the simulator) is visible to numba."""
    r = subprocess.run([sys.executable, "-c", "from numba import cuda; print(cuda.is_available())"],
                       env=cuda_env(False), capture_output=True, text=True, timeout=120)
    return r.stdout.strip().endswith("True")


def require_gpu() -> None:
    """Skip the calling test, saying why, when no real CUDA device is visible."""
    if not gpu_present():
        pytest.skip("no CUDA GPU visible to numba (cuda.is_available() is False)")
