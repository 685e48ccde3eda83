"""The incremental CYK/Valiant chart with valid-prefix ANCESTOR sets, packed as bits (numba) and readable.

Terminals ``t_0 .. t_{m-1}`` committed so far; positions are the gaps ``0 .. m``.

* ``TIER[n][row]`` (tier ``n`` is added when ``t_n`` is committed): the nonterminals deriving
  ``t_{n-row} .. t_n``, i.e. the span of length ``row+1`` ending at ``t_n``. A tier is computed once and never
  written again, so branches share the tiers below them. Only left-capable nonterminals are stored
  (``0 .. n_left-1``): an older tier is read only as a left child.
  Recurrence (right child in the tier being built, left child in an older tier ``e``):
  ``V in TIER[n][n-s]`` iff ``V -> A B``, ``A in TIER[e][e-s]`` and ``B in TIER[n][n-e-1]`` for some
  ``s <= e < n``. For a fixed ``e`` and rule, all rows at once: if ``B`` is in row ``n-e-1`` then
  ``rows(V) |= rows_e(A) << (n-e)``. Processing ``e = n-1 .. 0`` finishes row ``n-e-1`` before it is read.
* ``ANC[i]`` (ANCESTOR set of position ``i``), **invariant**:
  ``X in ANC[i]  <=>  S =>* t_0 .. t_{i-1} X gamma`` for some ``gamma``
  (X can be the next node to start at position ``i`` in a derivation consistent with the prefix). It
  depends on ``t_0 .. t_{i-1}`` only, so it is computed once, when tier ``i-1`` is, and stored beside it:
  ``ANC[0] = FIRST[S]``; ``ANC[m] = FIRST[ {X : Z -> A X, Z in ANC[i], A in TIER[m-1][m-1-i], i < m} ]``
  (X is either the right child of a parent whose left child is a finished cell ending at ``m``, or a left
  corner of such a node: FIRST closure).
  Then every viable next terminal comes in one pass: ``EXPECT[m] = {a : X -> a, X in ANC[m]}`` and
  ``t_0 .. t_{m-1} a`` is a viable prefix iff ``a in EXPECT[m]`` (the grammar has no useless symbols).
  The prefix is a sentence iff ``S in TIER[m-1][m-1]`` (or ``m = 0`` and S is nullable).

Packed layout: a tier ``n`` is ``n_left`` blocks of ``W(n) = ceil((n+1)/64)`` uint64 words (bit ``row``)
followed by ``WL`` words marking the left nonterminals present in it (the step visits only those);
``ANC`` is ``WN`` words over nonterminals, ``EXPECT`` ``WT`` words over terminals. Everything lives in one
``uint64`` arena; a chart node is (offset of its tier, of its ANC, of its EXPECT).
"""
from __future__ import annotations

from dataclasses import dataclass

import numba
import numpy as np

from .cnf import CNF
from .kernels_common import any_word_cpu, bit_cpu, shift_or_rows_cpu

U64 = np.uint64


def words(nbits: int) -> int:
    return (nbits + 63) // 64


def pack_rows(bools: np.ndarray) -> np.ndarray:
    """bool [k, nbits] -> uint64 [k, words(nbits)], bit j of row i = bools[i, j]."""
    k, nb = bools.shape
    w = words(nb)
    padded = np.zeros((k, w * 64), dtype=np.uint8)
    padded[:, :nb] = bools
    return np.packbits(padded, axis=1, bitorder="little").view(np.uint64).reshape(k, w).copy()


@dataclass
class PackedGrammar:
    n_nt: int
    n_left: int
    n_term: int
    WN: int
    WT: int
    start: int
    rule_lstart: np.ndarray   # int32 [n_left+1] CSR of binary rules by left child
    rule_parent: np.ndarray   # int32 [R]
    rule_right: np.ndarray    # int32 [R]
    term_nts: np.ndarray      # uint64 [T, WN]   V -> t
    first: np.ndarray         # uint64 [NT, WN]  FIRST closure
    first_term: np.ndarray    # uint64 [NT, WT]  terminals starting V

    @classmethod
    def from_cnf(cls, cnf: CNF) -> "PackedGrammar":
        nn, nl, nt = len(cnf.nonterminals), cnf.n_left, len(cnf.terminals)
        rules = np.array(cnf.binary, dtype=np.int32).reshape(-1, 3)
        lstart = np.zeros(nl + 1, dtype=np.int32)
        if len(rules):
            np.add.at(lstart, rules[:, 1] + 1, 1)
        lstart = np.cumsum(lstart).astype(np.int32)
        tn = np.zeros((nt, nn), dtype=bool)
        for p, t in cnf.unary:
            tn[t, p] = True
        return cls(
            n_nt=nn, n_left=nl, n_term=nt, WN=max(1, words(nn)), WT=max(1, words(nt)), start=cnf.start,
            rule_lstart=lstart, rule_parent=rules[:, 0].copy(), rule_right=rules[:, 2].copy(),
            term_nts=pack_rows(tn) if nt else np.zeros((0, max(1, words(nn))), U64),
            first=pack_rows(cnf.first) if nn else np.zeros((0, 1), U64),
            first_term=pack_rows(cnf.first_term) if nn else np.zeros((0, 1), U64),
        )

    def __post_init__(self):
        """Pair indexes for the sparse step: (left A, right B) -> parents, (left A, parent Z) -> right children."""
        nn, nl, WN = self.n_nt, self.n_left, self.WN
        R = self.rule_parent.size
        left = np.repeat(np.arange(nl, dtype=np.int64), np.diff(self.rule_lstart))
        par, right = self.rule_parent.astype(np.int64), self.rule_right.astype(np.int64)
        rb = np.zeros((nl, nn), dtype=bool)
        za = np.zeros((nl, nn), dtype=bool)
        if R:
            rb[left, right] = True
            za[left, par] = True
        self.rb = pack_rows(rb) if nl else np.zeros((0, WN), U64)          # right children of A
        self.za = pack_rows(za) if nl else np.zeros((0, WN), U64)          # parents with left child A
        # (A, B) pairs -> parents (CSR)
        key = left * nn + right
        order = np.argsort(key, kind="stable")
        ukey, start = np.unique(key[order], return_index=True) if R else (np.zeros(0, np.int64), np.zeros(0, np.int64))
        self.ab_id = np.full((nl, nn), -1, dtype=np.int32)
        self.ab_id[ukey // max(nn, 1), ukey % max(nn, 1)] = np.arange(ukey.size, dtype=np.int32)
        self.ab_start = np.append(start, R).astype(np.int32)
        self.ab_parent = par[order].astype(np.int32)
        # (A, Z) pairs -> bitset of right children X
        key = left * nn + par
        ukey, inv = np.unique(key, return_inverse=True) if R else (np.zeros(0, np.int64), np.zeros(0, np.int64))
        self.az_id = np.full((nl, nn), -1, dtype=np.int32)
        self.az_id[ukey // max(nn, 1), ukey % max(nn, 1)] = np.arange(ukey.size, dtype=np.int32)
        azx = np.zeros((ukey.size, nn), dtype=bool)
        if R:
            azx[inv.ravel(), right] = True
        self.azx = pack_rows(azx) if ukey.size else np.zeros((0, WN), U64)

    def scratch_words(self, n: int) -> int:
        """Scratch of a step on tier ``n``: the working tier (all nonterminals) and its row-major copy."""
        return self.n_nt * words(n + 1) + (n + 1) * self.WN

    def root(self, mem: np.ndarray, p_off: int, e_off: int) -> None:
        """Write ANC[0] and EXPECT[0] of the empty prefix."""
        mem[p_off:p_off + self.WN] = 0
        mem[e_off:e_off + self.WT] = 0
        if self.start >= 0:
            mem[p_off:p_off + self.WN] = self.first[self.start]
            mem[e_off:e_off + self.WT] = self.first_term[self.start]

    def node_words(self, n: int) -> int:
        """Arena words of the chart node made by committing terminal number ``n`` (tier + ANC + EXPECT)."""
        return self.n_left * words(n + 1) + self.WL + self.WN + self.WT

    @property
    def WL(self) -> int:
        return words(self.n_left)

    def tier_words(self, n: int) -> int:
        """Words of tier ``n``: ``n_left`` row blocks, then the bitset of left nonterminals present in it."""
        return self.n_left * words(n + 1) + self.WL


# --------------------------------------------------------------------------------------------------
# numba kernels (CPU); the same loops, phase by phase, are the CUDA kernels in cuda_kernels.py
# --------------------------------------------------------------------------------------------------
@numba.njit(cache=True, nogil=True, inline="always")
def ctz(low):
    """Index of the single set bit of ``low`` (a power of two), by binary search."""
    b = 0
    if low & np.uint64(0xFFFFFFFF) == 0:
        b += 32
        low >>= np.uint64(32)
    if low & np.uint64(0xFFFF) == 0:
        b += 16
        low >>= np.uint64(16)
    if low & np.uint64(0xFF) == 0:
        b += 8
        low >>= np.uint64(8)
    if low & np.uint64(0xF) == 0:
        b += 4
        low >>= np.uint64(4)
    if low & np.uint64(0x3) == 0:
        b += 2
        low >>= np.uint64(2)
    if low & np.uint64(0x1) == 0:
        b += 1
    return b


@numba.njit(cache=True, nogil=True)
def extend_rules(mem, tier_offs, p_offs, n, t, out_tier, out_p, out_e, cur, seeds,
                 n_nt, n_left, WN, WT, start, rule_lstart, rule_parent, rule_right, term_nts, first, first_term):
    """Rule-by-rule form of :func:`extend`, same output word for word: the loops the CUDA kernel spreads over
    threads, built from the helpers it shares with it (kernels_common.py). ``cur``: n_nt * W(n) words."""
    W = (n + 1 + 63) // 64
    WL = (n_left + 63) // 64
    one = np.uint64(1)
    for i in range(n_nt * W):
        cur[i] = 0
    # row 0: V -> t_n
    for wi in range(WN):
        bits = term_nts[t, wi]
        while bits:
            low = bits & (~bits + one)
            b = ctz(low)
            v = wi * 64 + b
            cur[v * W] |= one
            bits ^= low
    # rows 1..n, one older tier at a time; rule by rule (the CUDA kernel spreads this loop over threads)
    for e in range(n - 1, -1, -1):
        k = n - e - 1
        We = (e + 1 + 63) // 64
        base = tier_offs[e]
        for a in range(n_left):
            aoff = base + a * We
            if not any_word_cpu(mem, aoff, We):
                continue
            for r in range(rule_lstart[a], rule_lstart[a + 1]):
                if bit_cpu(cur, rule_right[r] * W, k):
                    shift_or_rows_cpu(cur, rule_parent[r] * W, W, mem, aoff, We, n - e)
    # store the left-capable rows
    for i in range(n_left * W):
        mem[out_tier + i] = cur[i]
    for i in range(WL):
        mem[out_tier + n_left * W + i] = 0
    for a in range(n_left):
        for w in range(W):
            if cur[a * W + w] != 0:
                mem[out_tier + n_left * W + (a >> 6)] |= one << np.uint64(a & 63)
                break
    accept = 0
    if start >= 0:
        if (cur[start * W + (n >> 6)] >> np.uint64(n & 63)) & one:
            accept = 1
    # ANC[n+1]: right children of parents in ANC[i] whose left child is cell (i, n+1)
    for i in range(WN):
        seeds[i] = 0
    for a in range(n_left):
        aoff = a * W
        for w in range(W):
            bits = cur[aoff + w]
            while bits:
                low = bits & (~bits + one)
                b = ctz(low)
                bits ^= low
                row = w * 64 + b
                i = n - row
                poff = p_offs[i]
                for r in range(rule_lstart[a], rule_lstart[a + 1]):
                    z = rule_parent[r]
                    if (mem[poff + (z >> 6)] >> np.uint64(z & 63)) & one:
                        xr = rule_right[r]
                        seeds[xr >> 6] |= one << np.uint64(xr & 63)
    for i in range(WN):
        mem[out_p + i] = 0
    for i in range(WT):
        mem[out_e + i] = 0
    for wi in range(WN):
        bits = seeds[wi]
        while bits:
            low = bits & (~bits + one)
            b = ctz(low)
            bits ^= low
            xn = wi * 64 + b
            for j in range(WN):
                mem[out_p + j] |= first[xn, j]
            for j in range(WT):
                mem[out_e + j] |= first_term[xn, j]
    return accept


@numba.njit(cache=True, nogil=True, inline="always")
def _or_track(cur, voff, d, val, rows, WN, v):
    """cur[voff + d] |= val, recording each new (row, v) entry in the row-major copy ``rows``."""
    one = np.uint64(1)
    add = val & ~cur[voff + d]
    if add:
        cur[voff + d] |= add
        vb = one << np.uint64(v & 63)
        vw = v >> 6
        while add:
            low = add & (~add + one)
            add ^= low
            row = d * 64 + ctz(low)
            rows[row * WN + vw] |= vb


@numba.njit(cache=True, nogil=True)
def extend(mem, tier_offs, p_offs, n, t, out_tier, out_p, out_e, cur, seeds,
           n_nt, n_left, WN, WT, start, rule_lstart, rule_parent, rule_right, term_nts, first, first_term,
           rb, ab_id, ab_start, ab_parent, za, az_id, azx):
    """Compute tier ``n`` for terminal ``t`` (tiers 0..n-1 at ``tier_offs``, ANC[0..n] at ``p_offs``) and
    write it at ``out_tier``, ANC[n+1] at ``out_p``, EXPECT[n+1] at ``out_e``. Returns 1 if t_0..t_n is a
    sentence. ``cur`` is scratch of ``scratch_words(n)`` words, ``seeds`` of WN words.

    Sparse form of :func:`extend_rules`: the working tier is kept both by nonterminal (row bits, for the
    shifted ORs) and by row (nonterminal bits), so for an older tier ``e`` only the pairs (A present in
    tier e) x (B present in row n-e-1) that are rules are visited, and each chart entry is touched once."""
    W = (n + 1 + 63) // 64
    WL = (n_left + 63) // 64
    one = np.uint64(1)
    rows = cur[n_nt * W:]
    for i in range(n_nt * W + (n + 1) * WN):
        cur[i] = 0
    for wi in range(WN):
        bits = term_nts[t, wi]
        rows[wi] = bits
        while bits:
            low = bits & (~bits + one)
            bits ^= low
            v = wi * 64 + ctz(low)
            cur[v * W] |= one
    for e in range(n - 1, -1, -1):
        k = n - e - 1
        rk = k * WN
        shift = n - e
        We = (e + 1 + 63) // 64
        sw = shift >> 6
        sb = np.uint64(shift & 63)
        base = tier_offs[e]
        pres = base + n_left * We
        for aw in range(WL):
            abits = mem[pres + aw]
            while abits:
                alow = abits & (~abits + one)
                abits ^= alow
                a = aw * 64 + ctz(alow)
                aoff = base + a * We
                for j in range(WN):
                    cand = rb[a, j] & rows[rk + j]
                    while cand:
                        low = cand & (~cand + one)
                        cand ^= low
                        b_nt = j * 64 + ctz(low)
                        pid = ab_id[a, b_nt]
                        for q in range(ab_start[pid], ab_start[pid + 1]):
                            v = ab_parent[q]
                            voff = v * W
                            for w in range(We):
                                val = mem[aoff + w]
                                if val == 0:
                                    continue
                                d = w + sw
                                if d < W:
                                    _or_track(cur, voff, d, val << sb, rows, WN, v)
                                if sb != 0 and d + 1 < W:
                                    _or_track(cur, voff, d + 1, val >> (np.uint64(64) - sb), rows, WN, v)
    for i in range(n_left * W):
        mem[out_tier + i] = cur[i]
    for i in range(WL):
        mem[out_tier + n_left * W + i] = 0
    for a in range(n_left):
        for w in range(W):
            if cur[a * W + w] != 0:
                mem[out_tier + n_left * W + (a >> 6)] |= one << np.uint64(a & 63)
                break
    accept = 0
    if start >= 0:
        if (cur[start * W + (n >> 6)] >> np.uint64(n & 63)) & one:
            accept = 1
    # ANC[n+1]: for each entry (A, row) of the new tier, parents Z of A in ANC[n-row] give right children X
    for i in range(WN):
        seeds[i] = 0
    for a in range(n_left):
        aoff = a * W
        for w in range(W):
            bits = cur[aoff + w]
            while bits:
                low = bits & (~bits + one)
                bits ^= low
                row = w * 64 + ctz(low)
                poff = p_offs[n - row]
                for j in range(WN):
                    cand = za[a, j] & mem[poff + j]
                    while cand:
                        zl = cand & (~cand + one)
                        cand ^= zl
                        pid = az_id[a, j * 64 + ctz(zl)]
                        for jj in range(WN):
                            seeds[jj] |= azx[pid, jj]
    for i in range(WN):
        mem[out_p + i] = 0
    for i in range(WT):
        mem[out_e + i] = 0
    for wi in range(WN):
        bits = seeds[wi]
        while bits:
            low = bits & (~bits + one)
            bits ^= low
            xn = wi * 64 + ctz(low)
            for j in range(WN):
                mem[out_p + j] |= first[xn, j]
            for j in range(WT):
                mem[out_e + j] |= first_term[xn, j]
    return accept


def grammar_args(g: PackedGrammar) -> tuple:
    return (g.n_nt, g.n_left, g.WN, g.WT, g.start, g.rule_lstart, g.rule_parent, g.rule_right,
            g.term_nts, g.first, g.first_term, g.rb, g.ab_id, g.ab_start, g.ab_parent, g.za, g.az_id, g.azx)


# --------------------------------------------------------------------------------------------------
# Readable form: the same chart with Python sets (for tests and for reading)
# --------------------------------------------------------------------------------------------------
class ReadableChart:
    """``tiers[n][row]`` = set of nonterminals (all of them, not only left-capable), ``anc[i]``, ``expect[i]``."""

    def __init__(self, cnf: CNF):
        self.cnf = cnf
        self.by_term: dict[int, set[int]] = {}
        for p, t in cnf.unary:
            self.by_term.setdefault(t, set()).add(p)
        self.tiers: list[list[set[int]]] = []
        s = cnf.start
        self.anc = [self._first({s}) if s >= 0 else set()]
        self.expect = [self._terms(self.anc[0])]

    def _first(self, xs) -> set[int]:
        out = set()
        for x in xs:
            out |= set(np.flatnonzero(self.cnf.first[x]).tolist())
        return out

    def _terms(self, xs) -> set[int]:
        out = set()
        for x in xs:
            out |= {t for (p, t) in self.cnf.unary if p == x}
        return out

    def push(self, t: int) -> None:
        n = len(self.tiers)
        tier = [set(self.by_term.get(t, ()))]
        for row in range(1, n + 1):
            s = n - row
            cell = set()
            for (v, a, b) in self.cnf.binary:
                for e in range(s, n):   # left child spans s..e (tier e, row e-s), right child e+1..n (this tier)
                    if a in self.tiers[e][e - s] and b in tier[n - e - 1]:
                        cell.add(v)
            tier.append(cell)
        self.tiers.append(tier)
        m = n + 1
        seeds = set()
        for (z, a, x) in self.cnf.binary:
            for i in range(m):
                if z in self.anc[i] and a in tier[n - i]:
                    seeds.add(x)
        self.anc.append(self._first(seeds))
        self.expect.append(self._terms(self.anc[m]))

    def accepts(self) -> bool:
        n = len(self.tiers)
        if n == 0:
            return self.cnf.start_nullable
        return self.cnf.start >= 0 and self.cnf.start in self.tiers[n - 1][n - 1]
