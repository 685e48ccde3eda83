"""Batch mode on CPU threads: the masks of all the sequences of a step in one nogil call (:func:`fill_claimed`), on
numba's threads (``prange`` over T threads), each thread claiming the next sequence from one atomic counter and
computing its mask (``fill_host``) without Python in between.

One ``fill_host`` call per sequence from a pool of Python threads left each thread to take the GIL back after every
mask (20-100 µs), and on a 2-core VM the GIL's hand-offs cost more than the second core gave (issue 29: 2 threads ran
0.44-1.22x as fast as one). Here each sequence's arrays sit in one typed list (a tuple a sequence: one list to unbox a
call, where one list per array cost 1 µs each), and one parallel call a step runs them all; with numba's OpenMP or TBB
layer its threads wait for the next step spinning, not asleep. Fixed shares (sequences g, g + T, ...) left the step
waiting for the unluckier thread (its span 1.18-1.25x the mean over Spider and TreeBank steps, rdtsc per mask);
claimed one at a time, 1.04-1.06x. The list is refreshed only for the sequences whose store changed since the last
step (arrays replaced: ``ChartStore.gen``; a reset keeps the store and its arrays).

The step's commits go the same way (:func:`walk_claimed`, ``ValiantEngine.commit_many``): one parallel call walks
every sequence's token (``walk_bytes``), each on the thread that claims it, instead of B calls from Python between
the mask calls (as long as the masks together, and serial)."""
from __future__ import annotations

import numba
import numpy as np
from numba.typed import List

from ..targets import fetch_add
from .chart_store import ARRAYS as STORE_FIELDS
from .store_kernels import H_NCFG, walk_bytes
from .store_mask import fill_host

#: each sequence's arrays, in the order of the tuple :func:`fill_claimed` and :func:`walk_claimed` read: the chart
#: store's (``chart_store.ARRAYS``), then the engine fork's
FORK_FIELDS = ("_flags", "_tot")
MEM, NODES, HDR, KEPT, MEDGE, MEMO, WORK, SCR, CFG, FLAGS, TOT = range(len(STORE_FIELDS) + len(FORK_FIELDS))


@numba.njit(cache=True, nogil=True, parallel=True)
def fill_claimed(out, T, seqs, status, eos, ac_rows, ac_keys, su, si, sl, dense, claim):
    """Every sequence's mask, one ``fill_host`` each, on ``T`` of numba's threads: each thread claims the next
    sequence from the counter ``claim[0]`` until none is left (a thread whose masks were cheap takes more of them:
    the step ends when the last mask does, not when the unluckiest fixed share does), thread p with the
    assembled-token cache ``ac_rows[p], ac_keys[p]`` (typed lists: no two threads share a cache). ``seqs``: a typed
    list of each sequence's arrays (a tuple, in the order of ``MEM`` ... ``TOT``); ``status[i]``: 0, or -1 where
    sequence i's store ran out of room (grow it and compute that mask again)."""
    B = status.size
    claim[0] = 0
    for p in numba.prange(T):
        g = np.int64(p)     # prange's index is unsigned; typed lists take a signed one
        rows, keys = ac_rows[g], ac_keys[g]
        while True:
            i = fetch_add(claim, 0)
            if i >= B:
                break
            a = seqs[i]
            status[i] = fill_host(out[i], a[MEM], a[NODES], a[HDR], a[KEPT], a[MEDGE], a[MEMO], a[WORK], a[SCR],
                                  a[CFG], a[FLAGS], a[TOT], eos, rows, keys, su, si, sl, dense)


@numba.njit(cache=True, nogil=True, parallel=True)
def walk_claimed(T, seqs, which, ids, data, start, status, su, si, sl, claim):
    """Every commit of a step, one ``walk_bytes`` each, on ``T`` of numba's threads claiming them as
    :func:`fill_claimed` does: commit j walks token ``ids[j]``'s bytes, ``data[start[t]:start[t + 1]]``, on
    sequence ``which[j]`` (an index of ``seqs``). ``status[j]``: the configurations left (0: the token is refused,
    the sequence is dead, as ``commit`` leaves it), or -1 where the store ran out of room (grow it and commit
    again)."""
    J = status.size
    claim[0] = 0
    for p in numba.prange(T):
        while True:
            j = fetch_add(claim, 0)
            if j >= J:
                break
            a, t = seqs[which[j]], ids[j]
            r = walk_bytes(a[MEM], a[NODES], a[HDR], a[KEPT], a[MEDGE], a[SCR], a[CFG], data[start[t]:start[t + 1]],
                           su, si, sl)
            if r == 0:
                a[HDR][H_NCFG] = 0
            status[j] = r


class Lanes:
    """A typed list of the arrays of a fixed list of sequences (an engine and its forks), kept in step with their
    stores, and ``T`` assembled-token caches (``new_cache()``: (rows, keys)), one per thread."""

    def __init__(self, seqs, T: int, new_cache):
        self.seqs = list(seqs)
        self.key = tuple(map(id, seqs))
        self.T = int(T)
        self.arrays = List()
        for s in self.seqs:
            self.arrays.append(self._arrays(s))
        self.arrays[0] = self.arrays[0]     # a typed list's first setitem compiles it (0.3 s): here, not mid-run
        self.caches = (List(), List())
        for _ in range(self.T):
            for lst, a in zip(self.caches, new_cache()):
                lst.append(a)
        self.index = {id(s): i for i, s in enumerate(self.seqs)}
        self.stamp = [(s.store, s.store.gen) for s in self.seqs]
        self.status = np.zeros(len(self.seqs), dtype=np.int64)
        self.claim = np.zeros(1, dtype=np.int64)

    @staticmethod
    def _arrays(s) -> tuple:
        return tuple(getattr(s.store, k) for k in STORE_FIELDS) + tuple(getattr(s, k) for k in FORK_FIELDS)

    def refresh(self) -> None:
        """Point the list at the current arrays of every sequence whose store changed since the last call."""
        for i, s in enumerate(self.seqs):
            st = s.store
            old, gen = self.stamp[i]
            if old is st and gen == st.gen:
                continue
            self.arrays[i] = self._arrays(s)
            self.stamp[i] = (st, st.gen)

    def fill(self, out: np.ndarray, eos: int, statics: tuple) -> None:
        """Every sequence's mask into its row of ``out`` (uint32), one parallel call; then, one by one, again for the
        sequences whose store ran out of room, after growing it."""
        self.refresh()
        fill_claimed(out, self.T, self.arrays, self.status, eos, *self.caches, *statics, self.claim)
        for i in np.flatnonzero(self.status < 0):
            s = self.seqs[i]
            s.store.grow()
            s._fill(out[i], 1)

    def commit(self, which: np.ndarray, ids: np.ndarray, data: np.ndarray, start: np.ndarray,
               statics: tuple) -> np.ndarray:
        """Commit to each sequence ``which[j]`` (an index of ``seqs``) token ``ids[j]``, whose bytes are
        ``data[start[t]:start[t + 1]]`` (every one a live sequence and a non-empty token), one parallel call; then,
        one by one, again for the sequences whose store ran out of room (their own ``_walk``, which grows it; the
        chart nodes made before are found again). Returns the configurations left per commit (0: refused)."""
        self.refresh()
        status = np.empty(which.size, dtype=np.int64)
        walk_claimed(min(self.T, which.size), self.arrays, which, ids, data, start, status, *statics[:3], self.claim)
        for j in np.flatnonzero(status < 0):
            status[j] = self.seqs[which[j]]._walk(data[start[ids[j]]:start[ids[j] + 1]])
        return status
