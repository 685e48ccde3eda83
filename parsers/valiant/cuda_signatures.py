"""The argument types of every Valiant CUDA kernel's real launches, for compiling them without a GPU
(``ValiantEngine.cuda_kernels``, read by ``experiments/ptx_report.py``): read from dry runs of ``CudaSearch``,
which record launches instead of running them, on the Spider grammar (types depend on dtypes and ranks only)."""
from __future__ import annotations


def launch_signatures() -> dict:
    """kernel name -> (dispatcher, argument types) of a real launch."""
    import numba
    import numpy as np

    from gcdbench.parsers.grammar import shipped_grammar as load_grammar
    from gcdbench.parsers.tokenizers import byte_level
    from gcdbench.parsers.valiant import cuda_kernels as ck
    from gcdbench.parsers.valiant.engine import ChartStore, build

    comp = build(load_grammar("spider"), byte_level())
    out = {}
    for bfs_depth in (1, 0):
        cs = ck.CudaSearch(comp, workers=2, bfs_depth=bfs_depth, threads=ck.THREADS, dry=True)
        store = ChartStore(comp.grammar)
        cs.search(store, 0)
        for kernel, args in cs.launched:
            name = next(k for k, v in ck.KERNELS.items() if v is kernel)
            out.setdefault(name, (kernel, tuple(numba.typeof(a) for a in args)))
    # step_kernel: one chart step, as the tests launch it
    g = comp.grammar
    store = ChartStore(g)
    tiers, ps = store.path(0, extra=1)
    w = np.zeros(4, np.uint64)
    step_args = (store.mem, tiers, ps, 0, 0, 0, 0, 0, w, w, g.dev, -1, np.zeros(1, np.int64))
    out["step_kernel"] = (ck.step_kernel, tuple(numba.typeof(a) for a in step_args))
    missing = set(ck.KERNELS) - set(out)
    if missing:
        raise RuntimeError(f"no dry launch reached kernels {sorted(missing)}")
    return out
