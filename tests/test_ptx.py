"""Every CUDA kernel of the project (every engine that declares them: Valiant's and Pre³'s) compiles for real GPUs (sm_80 and sm_90) with numba-cuda's CUDA target, on a
machine without a GPU (the compiler comes from the ``nvidia-nvvm`` / ``nvidia-cuda-nvrtc`` / ``nvidia-nvjitlink``
wheels of the ``test`` extra). The report (registers, local memory per kernel) must be well formed; its numbers
are recorded, not asserted (``results/ptx.json`` is this command's output)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def test_engines_with_cuda_kernels_are_found_by_their_declaration():
    from gcdbench.experiments.ptx_report import cuda_engines

    found = cuda_engines()
    assert {"valiant", "pre3"} <= set(found)
    assert "psc" not in found and "xgrammar" not in found      # no CUDA kernels: not compiled, not in the agenda
    with pytest.raises(ValueError, match="declares no CUDA kernels"):
        cuda_engines(["psc"])


@pytest.mark.slow
@pytest.mark.first
def test_every_kernel_compiles_to_ptx_for_sm80_and_sm90(tmp_path):
    from gcdbench.parsers.pre3.cuda_kernels import KERNELS as PRE3
    from gcdbench.parsers.valiant.cuda_kernels import KERNELS as VALIANT

    out = tmp_path / "ptx.json"
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    r = subprocess.run([sys.executable, "-m", "gcdbench.experiments.ptx_report", "--cc", "80", "90", "--out", str(out)],
                       cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-4000:]
    doc = json.loads(out.read_text())
    recs = {(x["engine"], x["kernel"], x["cc"]): x for x in doc["records"]}
    want = {(e, k) for e, ks in (("valiant", VALIANT), ("pre3", PRE3)) for k in ks}
    assert set(recs) == {(e, k, cc) for e, k in want for cc in ("sm_80", "sm_90")}
    for rec in recs.values():
        assert rec["ptx_bytes"] > 1000 and rec["ptx_local_depot_bytes"] >= 0
        if rec["toolchain"] == "nvvm+nvjitlink":    # ptxas's own report, read through nvJitLink
            assert rec["registers"] > 0 and rec["stack_frame_bytes"] >= 0 and rec["spill_stores_bytes"] >= 0
    assert doc["toolchain"]["nvidia-nvvm"], "the NVVM wheel is what compiled the kernels"


RESHAPE_KERNEL = r'''
import json
from numba import cuda, types
from numba.cuda import compile_ptx
from gcdbench.experiments.ptx_report import _nvjitlink_report, compute_capability

def kern(flat, out):
    a = flat[0:6].reshape((2, 3))     # a reshape inside a kernel calls numba-cuda's helper library
    out[0] = a[1, 2]

with compute_capability((9, 0)):
    ptx, _ = compile_ptx(kern, (types.int64[::1], types.int64[::1]), cc=(9, 0))
assert "numba_attempt_nocopy_reshape" in ptx
print(json.dumps({k: v for k, v in (_nvjitlink_report(ptx, (9, 0)) or {}).items() if k != "ptxas_log"}))
'''


@pytest.mark.slow
def test_report_links_the_helper_a_kernel_with_a_reshape_calls():
    """A kernel that reshapes an array calls a helper (``numba_attempt_nocopy_reshape``) that numba-cuda links
    from ``reshape_funcs.cu`` at a launch; the report links it too, so ptxas's report reads the kernel (nvJitLink
    stopped with ERROR_INTERNAL on the undefined reference before)."""
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    r = subprocess.run([sys.executable, "-c", RESHAPE_KERNEL], cwd=REPO, env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    rep = json.loads(r.stdout.strip().splitlines()[-1])
    assert rep, "no nvJitLink report: the test extra installs nvidia-nvjitlink"
    assert rep["registers"] > 0
