"""The argument types of Pre³'s CUDA kernels' real launches, for compiling them without a GPU (named by
``Pre3Engine.cuda_signatures``, read by ``experiments/ptx_report.py``)."""
from __future__ import annotations


def launch_signatures() -> dict:
    """kernel name -> (dispatcher, argument types) of a real launch (``Pre3Engine.cuda_kernels``): one dry batch
    step of two sequences over the Spider grammar and the byte vocabulary (types depend on dtypes and ranks only,
    not on the grammar). No GPU is needed."""
    import numba
    import numpy as np

    from gcdbench.parsers.grammar import shipped_grammar as load_grammar
    from gcdbench.parsers.pre3.cuda_kernels import KERNELS, CudaMasks
    from gcdbench.parsers.pre3.engine import Pre3Engine
    from gcdbench.parsers.tokenizers import byte_level

    tok = byte_level()
    eng = Pre3Engine(cache=False)
    eng.compile(load_grammar("spider"), tok)
    sh = eng._shared
    cm = CudaMasks(sh, threads=256, block=128, dry=True)
    base = np.full((2, 1), sh.start_state, dtype=np.int32)
    cm.masks(base, np.ones(2, np.int64), np.full(2, sh.qclass[0], np.int32),
             np.zeros((2, (tok.vocab_size + 31) // 32), np.uint32))
    names = {v: k for k, v in KERNELS.items()}
    out = {names[k]: (k, tuple(numba.typeof(a) for a in args)) for k, args in cm.launched}
    missing = set(KERNELS) - set(out)
    if missing:
        raise RuntimeError(f"no dry launch reached kernels {sorted(missing)}")
    return out
