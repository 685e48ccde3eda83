"""Batch mode on CPU threads: the masks of all the sequences of a step in one nogil call, the sequences split into
groups over numba's threads (``prange``), each group computed by one thread without Python in between.

One ``fill_host`` call per sequence from a pool of Python threads left each thread to take the GIL back after every
mask (20-100 µs), and on a 2-core VM the GIL's hand-offs cost more than the second core gave (issue 29: 2 threads
ran 0.44-1.22x as fast as one). Here each sequence's store arrays sit in typed lists, one list per array, and one
parallel call a step (:func:`fill_groups`) runs every group; with numba's OpenMP or TBB layer its threads wait for
the next step spinning, not asleep. The lists are refreshed only for the sequences whose store changed since the
last step (a new store at a reset, or arrays replaced: ``ChartStore.gen``)."""
from __future__ import annotations

import numba
import numpy as np
from numba.typed import List

from .chart_store import ARRAYS as STORE_FIELDS
from .kernels_common import fill_host

#: the per-sequence arrays of :func:`fill_group`, in its order: the chart store's (``chart_store.ARRAYS``), then
#: the engine fork's
FORK_FIELDS = ("_flags", "_tot")


@numba.njit(cache=True, nogil=True)
def fill_group(out, idx, mem, nodes, hdr, kept, medge, memo, work, scr, cfg, flags, tot, status, eos, ac_rows,
               ac_keys, su, si, sl, dense):
    """The masks of sequences ``idx`` into the rows of ``out`` (uint32 [B, words]), one ``fill_host`` each; the
    per-sequence arrays are typed lists indexed by sequence. ``status[i]``: 0, or -1 where sequence i's store ran out
    of room (grow it and compute that mask again)."""
    for j in range(idx.size):
        i = idx[j]
        status[i] = fill_host(out[i], mem[i], nodes[i], hdr[i], kept[i], medge[i], memo[i], work[i], scr[i], cfg[i],
                              flags[i], tot[i], eos, ac_rows, ac_keys, su, si, sl, dense)


@numba.njit(cache=True, nogil=True, parallel=True)
def fill_groups(out, T, mem, nodes, hdr, kept, medge, memo, work, scr, cfg, flags, tot, status, eos, ac_rows, ac_keys,
                su, si, sl, dense):
    """:func:`fill_group` for the ``T`` groups g, g + T, g + 2 T, ... of the sequences on numba's threads, group g
    with the assembled-token cache ``ac_rows[g], ac_keys[g]`` (typed lists: no two threads share a cache)."""
    B = status.size
    for p in numba.prange(T):
        g = np.int64(p)     # prange's index is unsigned; typed lists take a signed one
        fill_group(out, np.arange(g, B, T), mem, nodes, hdr, kept, medge, memo, work, scr, cfg, flags, tot, status,
                   eos, ac_rows[g], ac_keys[g], su, si, sl, dense)


class Lanes:
    """The typed lists of a fixed list of sequences (an engine and its forks), kept in step with their stores, and
    ``T`` assembled-token caches (``new_cache()``: (rows, keys)), one per group."""

    def __init__(self, seqs, T: int, new_cache):
        self.seqs = list(seqs)
        self.key = tuple(map(id, seqs))
        self.T = int(T)
        self.lists = []
        for name in STORE_FIELDS + FORK_FIELDS:
            lst = List()
            for s in self.seqs:
                lst.append(getattr(s.store, name) if name in STORE_FIELDS else getattr(s, name))
            self.lists.append(lst)
        self.caches = (List(), List())
        for _ in range(self.T):
            for lst, a in zip(self.caches, new_cache()):
                lst.append(a)
        self.stamp = [(s.store, s.store.gen) for s in self.seqs]
        self.status = np.zeros(len(self.seqs), dtype=np.int64)

    def refresh(self) -> None:
        """Point the lists at the current arrays of every sequence whose store changed since the last call."""
        for i, s in enumerate(self.seqs):
            st = s.store
            old, gen = self.stamp[i]
            if old is st and gen == st.gen:
                continue
            for lst, name in zip(self.lists, STORE_FIELDS):
                lst[i] = getattr(st, name)
            self.stamp[i] = (st, st.gen)

    def fill(self, out: np.ndarray, eos: int, statics: tuple) -> None:
        """Every sequence's mask into its row of ``out`` (uint32), one parallel call; then, one by one, again for the
        sequences whose store ran out of room, after growing it."""
        self.refresh()
        fill_groups(out, self.T, *self.lists, self.status, eos, *self.caches, *statics)
        for i in np.flatnonzero(self.status < 0):
            s = self.seqs[i]
            s.store.grow()
            s._fill(out[i], 1)
