"""The argument types of every Valiant CUDA kernel's real launches, for compiling them without a GPU
(``ValiantEngine.cuda_signatures`` names :func:`launch_signatures`; ``experiments/ptx_report.py`` reads it)."""
from __future__ import annotations

import numba
import numpy as np

_PTX_GRAMMAR = r"""
start: item+
item: NAME | "(" start ")"
NAME: /[a-z]+/
%ignore " "
"""


def launch_signatures() -> dict:
    """kernel name -> (dispatcher, argument types) of every kernel in ``KERNELS``, typed as its real launches are: the
    search kernels from dry runs of :class:`CudaSearch` (launches recorded, not run), :func:`step_kernel` as the
    tests launch it. A small grammar is enough: the types depend on dtypes and ranks only. For
    ``experiments/ptx_report.py``, which compiles each to PTX with no GPU."""
    from gcdbench.parsers.base import GrammarSpec
    from gcdbench.parsers.tokenizers import byte_level
    from gcdbench.parsers.valiant.cuda_kernels import KERNELS, THREADS, CudaSearch, Step, step_kernel
    from gcdbench.parsers.valiant.engine import ChartStore, build

    comp = build(GrammarSpec(name="ptx_example", lark=_PTX_GRAMMAR), byte_level())
    out = {}
    for bfs_depth in (1, 0):     # a BFS level, then the DFS at level 1
        cs = CudaSearch(comp, workers=2, bfs_depth=bfs_depth, threads=THREADS, dry=True)
        cs.search(ChartStore(comp.grammar), 0)
        for kernel, args in cs.launched:
            name = next(k for k, v in KERNELS.items() if v is kernel)
            out.setdefault(name, (kernel, args))
    g = comp.grammar
    store = ChartStore(g)
    tiers, ps = store.path(0, extra=1)
    w = np.zeros(4, np.uint64)
    out["step_kernel"] = (step_kernel, (store.mem, tuple(Step(tiers, ps, 0, 0, -1, 0, 0, 0, w, w,
                                                              np.zeros(1, np.int64))), g.dev))
    missing = set(KERNELS) - set(out)
    if missing:
        raise RuntimeError(f"no dry launch reached kernels {sorted(missing)}")
    return {name: (kernel, tuple(numba.typeof(a) for a in args)) for name, (kernel, args) in out.items()}
