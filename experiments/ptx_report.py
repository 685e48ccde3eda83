"""Compile every CUDA kernel of the project for real GPUs, with no GPU, and report their resources.

    python -m gcdbench.experiments.ptx_report [--cc 80 90] [--engine NAME ...] [--out results/ptx.json]

The kernels are those of every registered engine that declares them (``Engine.cuda_kernels()``: kernel name ->
dispatcher and the argument types of its real launches, which the engine reads from a dry run that records
launches instead of running them). Each kernel is compiled to PTX by numba-cuda's real CUDA target (NVVM, from
the ``nvidia-nvvm`` wheel) for those types. With ``nvidia-nvjitlink`` installed, the PTX is also assembled to SASS and ptxas's report is kept:
registers per thread, stack frame (local memory) bytes, spill stores and loads. One record per kernel and
compute capability (with its engine); a kernel that fails to compile makes the command exit non-zero.

No GPU is needed: typing a kernel that calls device functions asks the current device for its compute capability,
so for the duration of the compile that query answers the capability being compiled for.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import re
import sys
import time


@contextlib.contextmanager
def compute_capability(cc: tuple[int, int]):
    """Answer numba-cuda's 'current device' queries with ``cc`` (there is no device)."""
    import numba.cuda.dispatcher as disp

    class _Device:
        compute_capability = cc

    saved = disp.get_current_device
    disp.get_current_device = lambda: _Device()
    try:
        yield
    finally:
        disp.get_current_device = saved


def cuda_engines(only=None) -> list[str]:
    """Registered engines that declare CUDA kernels (``Engine.cuda_signatures`` set), optionally only those
    named in ``only``; engines whose module does not import here are passed over."""
    from gcdbench.parsers.registry import ENGINES, engine_class

    names = list(ENGINES) if not only else list(only)
    out = []
    for name in names:
        try:
            cls = engine_class(name)
        except ValueError:
            if only:
                raise
            continue
        if cls.cuda_signatures:
            out.append(name)
        elif only:
            raise ValueError(f"engine {name!r} declares no CUDA kernels (Engine.cuda_signatures)")
    return out


def launch_signatures(engines) -> dict:
    """(engine, kernel name) -> (dispatcher, argument types of a real launch), from each engine's
    ``cuda_kernels()``."""
    from gcdbench.parsers.registry import engine_class

    out = {}
    for name in engines:
        kernels = engine_class(name).cuda_kernels()
        if not kernels:
            raise RuntimeError(f"engine {name!r} declared CUDA kernels but cuda_kernels() returned none")
        for kernel_name, (kernel, argtypes) in kernels.items():
            out[(name, kernel_name)] = (kernel, tuple(argtypes))
    return out


def _helper_ptx(ptx: str, cc: tuple[int, int]) -> list[tuple[str, bytes]]:
    """The helper library numba-cuda links into a kernel whose PTX calls it (``reshape_funcs.cu``: an array
    reshape inside a kernel), compiled to PTX with NVRTC as the dispatcher does at a launch; [] if none is called."""
    import os

    from numba.cuda import dispatcher

    if not any(fn in ptx for fn in dispatcher.reshape_funcs):
        return []
    from cuda.bindings import nvrtc

    path = os.path.join(os.path.dirname(dispatcher.__file__), "reshape_funcs.cu")
    with open(path, "rb") as f:
        src = f.read()
    _, prog = nvrtc.nvrtcCreateProgram(src, b"reshape_funcs.cu", 0, [], [])
    opts = [f"--gpu-architecture=compute_{cc[0]}{cc[1]}".encode(), b"-rdc=true"]
    (err,) = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        raise RuntimeError(f"NVRTC could not compile {path}: {err}")
    _, size = nvrtc.nvrtcGetPTXSize(prog)
    buf = b" " * size
    nvrtc.nvrtcGetPTX(prog, buf)
    nvrtc.nvrtcDestroyProgram(prog)
    return [("reshape_funcs.ptx", buf.rstrip(b"\x00"))]


def _nvjitlink_report(ptx: str, cc: tuple[int, int]) -> dict | None:
    """ptxas's resource report for the kernel in ``ptx`` linked with the helpers it calls (nvJitLink, -verbose),
    or None without nvJitLink."""
    try:
        from cuda.bindings import nvjitlink as nj

        h = nj.create(2, [f"-arch=sm_{cc[0]}{cc[1]}", "-verbose"])
    except Exception:      # no libnvJitLink (wheel nvidia-nvjitlink) on this machine
        return None
    try:
        data = ptx.encode()
        nj.add_data(h, nj.InputType.PTX, data, len(data), "kernel.ptx")
        for name, code in _helper_ptx(ptx, cc):
            nj.add_data(h, nj.InputType.PTX, code, len(code), name)
        nj.complete(h)
        size = nj.get_info_log_size(h)
        buf = bytearray(size)
        nj.get_info_log(h, buf)
        log = buf.decode(errors="replace").rstrip("\x00")
    finally:
        nj.destroy(h)

    def num(pattern):
        m = re.search(pattern, log)
        return int(m.group(1)) if m else None

    return {
        "registers": num(r"ptxas info\s*: Used (\d+) registers"),
        "stack_frame_bytes": num(r"(\d+) bytes stack frame"),
        "spill_stores_bytes": num(r"(\d+) bytes spill stores"),
        "spill_loads_bytes": num(r"(\d+) bytes spill loads"),
        "shared_bytes": num(r"(\d+) bytes smem"),
        "local_memory_bytes": num(r"(\d+) bytes lmem"),
        "barriers": num(r"used (\d+) barriers"),
        "ptxas_log": log.strip(),
    }


def _ptx_local_depot(ptx: str) -> int:
    """Bytes of the per-thread local arrays the PTX declares (before ptxas places them)."""
    return sum(int(m) for m in re.findall(r"__local_depot\d+\[(\d+)\]", ptx))


def compile_all(ccs, engines=None) -> list[dict]:
    from numba.cuda import compile_ptx

    sigs = launch_signatures(cuda_engines(engines))
    records = []
    for cc in ccs:
        for (engine, name), (kernel, argtypes) in sorted(sigs.items()):
            t0 = time.perf_counter()
            with compute_capability(cc):
                ptx, _ = compile_ptx(kernel.py_func, argtypes, cc=cc)
            rec = {"engine": engine, "kernel": name, "cc": f"sm_{cc[0]}{cc[1]}", "compile_s": round(time.perf_counter() - t0, 2),
                   "ptx_bytes": len(ptx), "ptx_local_depot_bytes": _ptx_local_depot(ptx),
                   "args": len(argtypes)}
            rep = _nvjitlink_report(ptx, cc)
            rec["toolchain"] = "nvvm+nvjitlink" if rep else "nvvm"
            rec.update(rep or {"registers": None, "stack_frame_bytes": None, "spill_stores_bytes": None,
                               "spill_loads_bytes": None, "local_memory_bytes": None})
            records.append(rec)
            print(json.dumps({k: v for k, v in rec.items() if k != "ptxas_log"}), flush=True)
    return records


def versions() -> dict:
    from importlib import metadata

    out = {}
    for p in ("numba", "numba-cuda", "nvidia-nvvm", "nvidia-cuda-nvrtc", "nvidia-nvjitlink", "cuda-bindings"):
        try:
            out[p] = metadata.version(p)
        except metadata.PackageNotFoundError:
            out[p] = None
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cc", nargs="+", default=["80", "90"], help="compute capabilities, e.g. 80 90")
    ap.add_argument("--engine", nargs="+", default=None,
                    help="only these engines (default: every engine that declares CUDA kernels)")
    ap.add_argument("--out", default="results/ptx.json")
    args = ap.parse_args(argv)
    from numba import config

    if config.ENABLE_CUDASIM:
        print("error: NUMBA_ENABLE_CUDASIM is set; the simulator compiles nothing. Unset it.", file=sys.stderr)
        return 2
    ccs = [(int(c[:-1]), int(c[-1])) for c in args.cc]
    try:
        records = compile_all(ccs, args.engine)
    except Exception as err:    # the toolchain is missing, or a kernel no longer compiles
        hint = ""
        if "NVVM" in str(err) or "nvvm" in str(err).lower():
            hint = ("\nhint: the CUDA compiler comes from PyPI: pip install -e '.[test]' "
                    "(nvidia-nvvm, nvidia-cuda-nvrtc, nvidia-nvjitlink)")
        print(f"error: {type(err).__name__}: {err}{hint}", file=sys.stderr)
        return 1
    from gcdbench.experiments.benchfile import write_bench

    path = write_bench(args.out, records, toolchain=versions())
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
