"""Batch mode on CPU threads: the masks of all the sequences of a step in one nogil call (:func:`fill_claimed`), on
numba's threads (``prange`` over T threads), each thread claiming the next sequence from one atomic counter and
computing its mask (``fill_host``) without Python in between.

One ``fill_host`` call per sequence from a pool of Python threads left each thread to take the GIL back after every
mask (20-100 µs), and on a 2-core VM the GIL's hand-offs cost more than the second core gave (issue 29: 2 threads
ran 0.44-1.22x as fast as one). Here each sequence's store arrays sit in typed lists, one list per array, and one
parallel call a step runs them all; with numba's OpenMP or TBB layer its threads wait for the next step spinning,
not asleep. Fixed shares (sequences g, g + T, ...) left the step waiting for the unluckier thread (its span 1.18-1.25x
the mean over Spider and TreeBank steps, rdtsc per mask); claimed one at a time, 1.04-1.06x. The lists are
refreshed only for the sequences whose store changed since the last step (arrays replaced: ``ChartStore.gen``; a
reset keeps the store and its arrays)."""
from __future__ import annotations

import numba
import numpy as np
from numba.typed import List

from ..targets import fetch_add
from .chart_store import ARRAYS as STORE_FIELDS
from .kernels_common import fill_host

#: the per-sequence arrays of :func:`fill_claimed`, in its order: the chart store's (``chart_store.ARRAYS``), then
#: the engine fork's
FORK_FIELDS = ("_flags", "_tot")


@numba.njit(cache=True, nogil=True, parallel=True)
def fill_claimed(out, T, mem, nodes, hdr, kept, medge, memo, work, scr, cfg, flags, tot, status, eos, ac_rows, ac_keys,
                 su, si, sl, dense, claim):
    """Every sequence's mask, one ``fill_host`` each, on ``T`` of numba's threads: each thread claims the next
    sequence from the counter ``claim[0]`` until none is left (a thread whose masks were cheap takes more of them:
    the step ends when the last mask does, not when the unluckiest fixed share does), thread p with the
    assembled-token cache ``ac_rows[p], ac_keys[p]`` (typed lists: no two threads share a cache). The per-sequence
    arrays are typed lists indexed by sequence; ``status[i]``: 0, or -1 where sequence i's store ran out of room
    (grow it and compute that mask again)."""
    B = status.size
    claim[0] = 0
    for p in numba.prange(T):
        g = np.int64(p)     # prange's index is unsigned; typed lists take a signed one
        rows, keys = ac_rows[g], ac_keys[g]
        while True:
            i = fetch_add(claim, 0)
            if i >= B:
                break
            status[i] = fill_host(out[i], mem[i], nodes[i], hdr[i], kept[i], medge[i], memo[i], work[i], scr[i],
                                  cfg[i], flags[i], tot[i], eos, rows, keys, su, si, sl, dense)


class Lanes:
    """The typed lists of a fixed list of sequences (an engine and its forks), kept in step with their stores, and
    ``T`` assembled-token caches (``new_cache()``: (rows, keys)), one per thread."""

    def __init__(self, seqs, T: int, new_cache):
        self.seqs = list(seqs)
        self.key = tuple(map(id, seqs))
        self.T = int(T)
        self.lists = []
        for name in STORE_FIELDS + FORK_FIELDS:
            lst = List()
            for s in self.seqs:
                lst.append(getattr(s.store, name) if name in STORE_FIELDS else getattr(s, name))
            lst[0] = lst[0]     # a typed list's first setitem compiles it (0.25-0.35 s a type): here, not mid-run
            self.lists.append(lst)
        self.caches = (List(), List())
        for _ in range(self.T):
            for lst, a in zip(self.caches, new_cache()):
                lst.append(a)
        self.stamp = [(s.store, s.store.gen) for s in self.seqs]
        self.status = np.zeros(len(self.seqs), dtype=np.int64)
        self.claim = np.zeros(1, dtype=np.int64)

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
        fill_claimed(out, self.T, *self.lists, self.status, eos, *self.caches, *statics, self.claim)
        for i in np.flatnonzero(self.status < 0):
            s = self.seqs[i]
            s.store.grow()
            s._fill(out[i], 1)
