"""The CUDA backends' host plumbing without a device: ``parsers.cuda_launch`` (launches specialized to their first
argument types, grow-only buffers) and, from dry runs that record launches instead of running them, that Valiant's
and Pre³'s kernels get the same argument types at every step (a specialized kernel does not type its arguments
again, so a type that changed between steps would be marshalled wrongly on a GPU)."""
from __future__ import annotations

import numba
import numpy as np

from gcdbench.parsers.cuda_launch import Launcher, grown


def _types(launched) -> dict:
    """kernel -> list of the argument-type tuples of its launches."""
    out: dict = {}
    for kernel, args in launched:
        out.setdefault(kernel, []).append(tuple(numba.typeof(a) for a in args))
    return out


def test_launcher_specializes_once_and_dry_records():
    calls = []

    class Kernel:
        def specialize(self, *args):
            calls.append(("specialize", args))
            return self

        def __getitem__(self, cfg):
            return lambda *args: calls.append(("launch", cfg, args))

    k = Kernel()
    lau = Launcher()
    lau(k, 4, 32, 1, 2)
    lau(k, 8, 32, 3, 4)
    assert [c[0] for c in calls] == ["specialize", "launch", "launch"] and calls[2] == ("launch", (8, 32), (3, 4))
    dry = Launcher(dry=True)
    dry(k, 1, 1, "x")
    assert dry.launched == [(k, ("x",))] and len(calls) == 3


def test_grown_keeps_a_buffer_that_fits_and_doubles_one_that_does_not():
    made = []

    def alloc(shape, dtype):
        made.append(shape)
        return np.zeros(shape, dtype)

    a = grown(None, (5, 3), np.uint32, alloc)
    assert a.shape == (5, 3)
    assert grown(a, (4, 3), np.uint32, alloc) is a
    b = grown(a, (6, 3), np.uint32, alloc)
    assert b.shape == (10, 3)
    c = grown(b, (2, 4), np.uint32, alloc)          # another row width: a new buffer of the asked size
    assert c.shape == (2, 4)
    assert grown(c, (2, 4), np.int64, alloc).dtype == np.int64
    assert made == [(5, 3), (10, 3), (2, 4), (2, 4)]


def test_grown_along_the_second_axis_keeps_the_rows_and_doubles_the_width():
    a = grown(None, (4, 5), np.uint64, np.zeros, axis=1)
    assert grown(a, (4, 3), np.uint64, np.zeros, axis=1) is a
    assert grown(a, (4, 7), np.uint64, np.zeros, axis=1).shape == (4, 10)
    assert grown(a, (2, 7), np.uint64, np.zeros, axis=1).shape == (2, 7)   # other rows: the asked size
    assert grown(a, (4, 7), np.uint64, np.zeros).shape == (4, 7)           # axis 0 grows only rows


def test_valiant_search_launches_keep_their_types_across_depths():
    from gcdbench.parsers.base import GrammarSpec
    from gcdbench.parsers.tokenizers import byte_level
    from gcdbench.parsers.valiant.cuda_kernels import CudaSearch
    from gcdbench.parsers.valiant.cuda_signatures import _PTX_GRAMMAR
    from gcdbench.parsers.valiant.engine import ChartStore, build

    comp = build(GrammarSpec(name="launch_types", lark=_PTX_GRAMMAR), byte_level())
    cs = CudaSearch(comp, workers=2, bfs_depth=1, threads=4, dry=True)
    store = ChartStore(comp.grammar)
    node = 0
    for _ in range(3):       # searches from charts of 0, 1 and 2 tiers (the arena grows between them)
        cs.search(store, node)
        node = store.child(node, store.expected(node)[0])
    got = _types(cs.launched)
    assert got and all(len(v) == 3 for v in got.values())
    for kernel, sigs in got.items():
        assert all(s == sigs[0] for s in sigs), (kernel, sigs)


def test_pre3_step_launches_keep_their_types_across_batches():
    from gcdbench.parsers.base import GrammarSpec
    from gcdbench.parsers.pre3.cuda_kernels import CudaMasks
    from gcdbench.parsers.pre3.engine import Pre3Engine
    from gcdbench.parsers.tokenizers import byte_level

    from test_pre3 import CASES

    tok = byte_level()
    eng = Pre3Engine(cache=False)
    eng.compile(GrammarSpec("calc", CASES["calc"][0]), tok)
    sh = eng._shared
    cm = CudaMasks(sh, threads=256, block=128, dry=True)
    W = (tok.vocab_size + 31) // 32
    for B, L in ((2, 1), (5, 3), (3, 7)):
        base = np.full((B, L), sh.start_state, dtype=np.int32)
        cm.masks(base, np.ones(B, np.int64), np.full(B, sh.qclass[0], np.int32), np.zeros((B, W), np.uint32))
    got = _types(cm.launched)
    assert len(got) == 3 and all(len(v) == 3 for v in got.values())
    for kernel, sigs in got.items():
        assert all(s == sigs[0] for s in sigs), (kernel, sigs)
    assert cm.stats["steps"] == 3 and cm.stats["h2d"] == 3
