"""Tokens read from a lexer state: the vocabulary's byte trie, the shared trie of terminal sequences, and the
realizable pair ``(w, N)`` of every token from every lexer state, grouped into *jobs* (PSC and Pre³ share it).

Our lexer (:class:`gcdbench.parsers.lr.lexer.ByteLexer`) is deterministic, so a token read from lexer state ``q``
emits one sequence ``w`` of complete terminals (interned in :class:`SeqTrie`, common prefixes simulated once)
and leaves one unfinished lexeme whose possible terminals ``N`` depend only on the lexer state it ends in
(``pending``). Tokens with equal ``(w, N)`` from ``q`` are one *job*: PSC's classifier and Pre³'s DPDA decide
them together. EOS is one more job: the lexeme in progress must be a whole terminal (or ignored, or empty).
"""
from __future__ import annotations

import numpy as np

from gcdbench.parsers.lr.lexer import IGNORED, ByteLexer

class VocabTrie:
    """Byte trie of the vocabulary as arrays, nodes sorted by depth (node 0 = root)."""

    def __init__(self, token_bytes: list[bytes]):
        ids: dict[bytes, int] = {b"": 0}
        parent = [0]
        byte = [0]
        depth = [0]
        for tb in token_bytes:
            for k in range(1, len(tb) + 1):
                p = tb[:k]
                if p not in ids:
                    ids[p] = len(parent)
                    parent.append(ids[tb[: k - 1]])
                    byte.append(tb[k - 1])
                    depth.append(k)
        depth_a = np.asarray(depth, dtype=np.int32)
        order = np.argsort(depth_a, kind="stable")
        rank = np.empty_like(order)
        rank[order] = np.arange(order.size)
        self.parent = rank[np.asarray(parent, dtype=np.int64)[order]].astype(np.int64)
        self.byte = np.asarray(byte, dtype=np.int64)[order]
        self.depth = depth_a[order]
        self.n = int(order.size)
        self.level_bounds = np.searchsorted(self.depth, np.arange(self.depth.max() + 2))
        self.token_node = np.array([rank[ids[tb]] if tb else -1 for tb in token_bytes], dtype=np.int64)


class SeqTrie:
    """Global trie of terminal sequences: id 0 = empty sequence."""

    def __init__(self):
        self.key: dict[tuple[int, int], int] = {}
        self.parent = [-1]
        self.last = [-1]
        self.children: list[dict[int, int]] = [{}]

    def intern_many(self, parents: np.ndarray, terms: np.ndarray) -> np.ndarray:
        # terminal indices < 4096 (checked in build_artifact)
        pairs = parents * 4096 + terms
        uniq, inv = np.unique(pairs, return_inverse=True)
        out = np.empty(uniq.size, dtype=np.int64)
        for j, pr in enumerate(uniq.tolist()):
            p, t = divmod(pr, 4096)
            k = self.key.get((p, t))
            if k is None:
                k = self.key[(p, t)] = len(self.parent)
                self.parent.append(p)
                self.last.append(t)
                self.children.append({})
                self.children[p][t] = k
            out[j] = k
        return out[inv]


def realizable(lexer: ByteLexer, trie: VocabTrie, seqs: SeqTrie, q: int):
    """For lexer state q: arrays over trie nodes (end lexer state or -1, sequence id)."""
    st = np.full(trie.n, -1, dtype=np.int64)
    sq = np.zeros(trie.n, dtype=np.int64)
    st[0] = q
    ss, se = lexer.step_state, lexer.step_emit
    lb = trie.level_bounds
    for d in range(1, len(lb) - 1):
        a, b = lb[d], lb[d + 1]
        if a >= b:
            break
        par = trie.parent[a:b]
        ps = st[par]
        alive = ps >= 0
        if not alive.any():
            break
        idx = np.flatnonzero(alive)
        pss = ps[idx]
        bs = trie.byte[a:b][idx]
        ns = ss[pss, bs]
        ne = se[pss, bs]
        seq = sq[par[idx]]
        em = ne >= 0
        if em.any():
            seq = seq.copy()
            seq[em] = seqs.intern_many(seq[em], ne[em].astype(np.int64))
        st[a + idx] = ns
        sq[a + idx] = seq
    return st, sq


class TokenJobs:
    """The vocabulary read from every lexer state: ``trie`` (tokens with bytes: ``tok_ids``, their trie
    nodes ``nodes``), ``seqs`` (terminal sequences, shared by all lexer states)."""

    def __init__(self, token_bytes: list[bytes]):
        self.trie = VocabTrie(token_bytes)
        tok_node = self.trie.token_node
        self.tok_ids = np.flatnonzero(tok_node >= 0)
        self.nodes = tok_node[self.tok_ids]
        self.seqs = SeqTrie()

    def state_jobs(self, lexer, q: int, pend_of_state: np.ndarray, n_pend: int):
        """For lexer state ``q``: ``(job, eos_seq, key)``. ``job[i]`` is token ``tok_ids[i]``'s job,
        ``seq * n_pend + pending id`` (-1: the token dies in the lexer); ``eos_seq`` is the sequence EOS
        emits (-1: the lexeme in progress is not a whole terminal, EOS refused); ``key`` is equal for lexer
        states with equal jobs (they form one class)."""
        st, sq = realizable(lexer, self.trie, self.seqs, q)
        est = st[self.nodes]
        ok = est >= 0
        job = np.full(self.tok_ids.size, -1, dtype=np.int64)
        job[ok] = sq[self.nodes[ok]] * n_pend + pend_of_state[est[ok]]
        w = int(lexer.winner[q])
        if q == 0 or w == IGNORED:
            eos_seq = 0
        elif w >= 0:
            eos_seq = int(self.seqs.intern_many(np.array([0]), np.array([w]))[0])
        else:
            eos_seq = -1
        return job, eos_seq, job.tobytes() + eos_seq.to_bytes(8, "little", signed=True)
