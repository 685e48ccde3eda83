"""Context-independent tokens per LR state (character level): most of a mask decided at build time.

At the character level every token is one job (its byte-class sequence) and a mask ran all of them, about
150k DPDA runs per step on a 150k vocabulary. But a run often never looks below the state on top of the stack:
inside a JSON string every byte is a shift, after ``{`` every token but those starting a key fails on its first
byte. Such a token's fate depends on the top state alone. So, for every LR state ``s``, each job is run at build
time on a stack known only as ``[s]`` (anything may lie below it) and sorted into

* **accepted**: the run finished without reading or popping below ``s``: allowed on every stack with ``s`` on top;
* **rejected**: no edge matched, and no condition that decided it read below ``s``: refused on every such stack;
* **context**: the run read or popped below ``s`` (or hit the iteration guard): decided at mask time, as before.

A mask then ORs one precomputed row (the accepted tokens of the top state) and runs only the context jobs of
that state, on the real stack, with the kernels unchanged: the accepted tokens form one more job whose terminal
sequence is empty (always allowed). States with equal sorts share a class; the engine picks the class by the
state on top of its stack. Sorting errs only towards *context* (an unknown read ends the run there), which is
always exact. The walk follows the trie of class sequences (``SeqTrie``), so a prefix shared by many jobs runs
once and a refused or context prefix ends its whole subtree.
"""
from __future__ import annotations

import time

import numpy as np

from gcdbench.parsers.base import CompileError, CompileTimeout
from gcdbench.parsers.pre3.kernels import DPDA
from gcdbench.parsers.pre3.sort_kernels import ACCEPTED, CONTEXT, sort_jobs, sort_jobs_shared, walk_scratch


class SeqWalk:
    """The trie of class sequences restricted to the jobs' sequences, as arrays for ``sort_jobs``."""

    def __init__(self, parent: list[int], last: list[int], job_seq_ids: np.ndarray):
        n = len(parent)
        need = np.zeros(n, dtype=bool)   # nodes on the path to some job's sequence
        for s in job_seq_ids.tolist():
            while s > 0 and not need[s]:
                need[s] = True
                s = parent[s]
        need[0] = True
        kids: list[list[int]] = [[] for _ in range(n)]
        for x in np.flatnonzero(need).tolist():
            if x > 0:
                kids[parent[x]].append(x)
        # preorder numbers and subtree sizes, iteratively
        pre = np.full(n, -1, dtype=np.int64)
        size = np.zeros(n, dtype=np.int64)
        order: list[int] = []
        stack = [0]
        while stack:
            x = stack.pop()
            pre[x] = len(order)
            order.append(x)
            stack.extend(reversed(kids[x]))
        for x in reversed(order):
            size[x] = 1 + sum(size[k] for k in kids[x])
        self.child_ptr = np.zeros(n + 1, dtype=np.int64)
        self.child_ptr[1:] = np.cumsum([len(k) for k in kids])
        flat = [k for ks in kids for k in ks]
        self.child_node = np.asarray(flat, dtype=np.int64)
        self.child_term = np.asarray([last[k] for k in flat], dtype=np.int64)
        jpre = pre[job_seq_ids]
        self.job_by_pre = np.argsort(jpre, kind="stable").astype(np.int64)
        self.rank_of_node = np.full(n, -1, dtype=np.int64)   # a job's place in job_by_pre, by its node
        self.rank_of_node[job_seq_ids[self.job_by_pre]] = np.arange(job_seq_ids.size)
        sorted_pre = jpre[self.job_by_pre]
        self.sub_lo = np.searchsorted(sorted_pre, pre).astype(np.int64)
        self.sub_hi = np.searchsorted(sorted_pre, pre + size).astype(np.int64)
        depth = np.zeros(n, dtype=np.int64)
        for x in order[1:]:
            depth[x] = depth[parent[x]] + 1
        self.max_depth = int(depth.max()) if n else 0


def sort_states(packed, guard: int, max_push: int, parent: list[int], last: list[int], job_seq_ids: np.ndarray,
                to_dpda: np.ndarray, deadline: float | None = None, *, shared_bytes: int
                ) -> tuple[np.ndarray, list[np.ndarray], dict]:
    """Sort the jobs (class sequences ``job_seq_ids``, trie ``parent``/``last`` over lexer terminal indices
    mapped by ``to_dpda``) for every LR state. Returns (class of each LR state, per class its sort array,
    stats). ``shared_bytes`` > 0: the subtrees of the trie root's children are sorted once per state they shift
    to and shared (``kernels.sort_jobs_shared``, at most that many bytes of them kept); 0: every state walks the
    whole trie (``kernels.sort_jobs``); both give the same sorts."""
    walk = SeqWalk(parent, last, job_seq_ids)
    child_term = to_dpda[walk.child_term].astype(np.int64) if walk.child_term.size else walk.child_term
    max_stack = 2 + (walk.max_depth + 2) * (max_push + 1) + 16
    D = DPDA(*packed.arrays())   # the DPDA's tables as one record
    out = np.empty(job_seq_ids.size, dtype=np.int8)
    klass = np.empty(packed.n_lr, dtype=np.int32)
    index: dict[bytes, int] = {}
    sorts: list[np.ndarray] = []
    visited = 0
    t0 = time.monotonic()
    outp = np.empty(job_seq_ids.size, dtype=np.int8)
    scratch = walk_scratch(walk.max_depth, max_stack)
    if shared_bytes > 0:
        n_root = int(walk.child_ptr[1] - walk.child_ptr[0])
        memo_off = np.full((packed.n_lr, max(n_root, 1)), -1, dtype=np.int32)
        buf = np.empty(min(shared_bytes, 2**31 - 1), dtype=np.int8)
        used = np.zeros(1, dtype=np.int64)
        filt = np.zeros(job_seq_ids.size + 1, dtype=np.int64)
    for s in range(packed.n_lr):
        if shared_bytes > 0:
            visited += sort_jobs_shared(D, int(packed.n_sym), int(guard), s, walk.child_ptr, walk.child_node,
                                        child_term, walk.rank_of_node, walk.sub_lo, walk.sub_hi, walk.job_by_pre,
                                        out, memo_off, buf, used, outp, filt, *scratch)
        else:
            visited += sort_jobs(D, int(packed.n_sym), int(guard), s, walk.child_ptr, walk.child_node,
                                 child_term, walk.rank_of_node, walk.sub_lo, walk.sub_hi, walk.job_by_pre, out,
                                 outp, *scratch)
        key = out.tobytes()
        c = index.get(key)
        if c is None:
            c = index[key] = len(sorts)
            sorts.append(out.copy())
        klass[s] = c
        if deadline is not None and time.monotonic() > deadline:
            raise CompileTimeout("pre3: construction exceeded its time budget (max_build_s) while sorting tokens by "
                               "context; context_split=false skips that step")
    counts = np.array([[np.count_nonzero(x == v) for v in (ACCEPTED, CONTEXT)] for x in sorts]) if sorts else \
        np.zeros((0, 2), dtype=np.int64)
    stats = {"states": int(packed.n_lr), "classes": len(sorts), "trie_nodes_visited": int(visited),
             "shared_bytes": int(used[0]) if shared_bytes > 0 else 0,
             "seconds": round(time.monotonic() - t0, 3),
             "accepted_jobs_max": int(counts[:, 0].max()) if len(sorts) else 0,
             "context_jobs_max": int(counts[:, 1].max()) if len(sorts) else 0,
             "context_jobs_mean": round(float(counts[:, 1].mean()), 1) if len(sorts) else 0.0}
    return klass, sorts, stats
