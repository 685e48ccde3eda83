"""The incremental CYK/Valiant chart with valid-prefix ANCESTOR sets, packed as bits (numba) and readable.

Terminals ``t_0 .. t_{m-1}`` committed so far; positions are the gaps ``0 .. m``.

* ``TIER[n][row]`` (tier ``n`` is added when ``t_n`` is committed): the nonterminals ``A`` deriving
  ``t_{n-row} .. t_n`` **that are in ``ANC[n-row]``** (top-down filter, below), i.e. the span of length ``row+1``
  ending at ``t_n``. A tier is computed once and never written again, so branches share the tiers below them.
  Only left-capable nonterminals are stored (``0 .. n_left-1``): an older tier is read only as a left child.
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
* **Top-down filter.** A node of a derivation of a viable prefix that starts at ``t_i`` is in ``ANC[i]``, and
  ``ANC[i]`` is closed under FIRST. So a cell ``A`` over ``t_i..t_n`` with ``A`` not in ``ANC[i]`` takes no part
  in any ANC, EXPECT or acceptance: for ``V in ANC[s]``, every rule ``V -> A B`` over ``t_s..t_n`` has ``A`` in
  ``ANC[s]`` (FIRST) and ``B`` in ``ANC[e+1]`` (``S =>* t_0..t_e B ...``), and the seeds of ``ANC`` only use
  ``A in FIRST(Z)`` for ``Z in ANC[i]``. Dropping such cells changes none of them and leaves far fewer cells.

Packed layout: a tier ``n`` is ``n_left`` blocks of ``W(n) = ceil((n+1)/64)`` uint64 words (bit ``row``)
followed by ``WL`` words marking the left nonterminals present in it (the step visits only those);
``ANC`` is ``WN`` words over nonterminals, ``EXPECT`` ``WT`` words over terminals, then one INFO word (accept,
old items, idem terminal: ``device_search.certify``). Everything lives in one ``uint64`` arena; a chart node
is (offset of its tier, of its ANC, of its EXPECT).

The step itself (numba, CPU and CUDA from one source) is ``device.chart_step``; ``store_kernels.extend`` is its CPU
entry point. This module holds the packed grammar and the readable chart.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .cnf import CNF
from .device import Grammar
from .packing import pack_grammar
from .store_kernels import extend  # noqa: F401  (the CPU step, re-exported)

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


def closing_items(term_nts: np.ndarray, az_id: np.ndarray, azx: np.ndarray, n_left: int, WN: int) -> tuple:
    """The items each terminal ``t`` closes: the pairs (Z, X) of rules ``Z -> A X`` with ``A -> t`` (``A`` a left
    child), one entry per (t, Z) with the union of its right children over every such ``A`` and how many ``A`` there
    are. Returns the CSR ``(start [T+1], z [K], x [K, WN], pairs [K])``; the step's shortcuts (``certify`` and its
    helpers, ``_row0_certifies``) read it instead of walking ``A -> t``, ``Z -> A X`` each time."""
    T = term_nts.shape[0]
    tn = np.unpackbits(term_nts.view(np.uint8), axis=1, bitorder="little")[:, :n_left].astype(bool) \
        if T else np.zeros((0, n_left), bool)
    pa, pz = np.nonzero(az_id >= 0)             # every (A, Z) pair with a rule Z -> A X
    start, zs, xs, cnt = [0], [], [], []
    for t in range(T):
        sel = tn[t, pa]
        z = pz[sel]
        uz, inv, c = np.unique(z, return_inverse=True, return_counts=True)
        x = np.zeros((uz.size, WN), dtype=U64)
        np.bitwise_or.at(x, inv.ravel(), azx[az_id[pa[sel], z]])
        zs.append(uz)
        xs.append(x)
        cnt.append(c)
        start.append(start[-1] + uz.size)
    return (np.array(start, dtype=np.int32), np.concatenate(zs).astype(np.int32) if T else np.zeros(0, np.int32),
            np.concatenate(xs) if T else np.zeros((0, WN), U64),
            np.concatenate(cnt).astype(np.int32) if T else np.zeros(0, np.int32))


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
    # the items each terminal closes (:func:`closing_items`; computed when None, stored with the compiled artifact)
    close_start: np.ndarray | None = None   # int32 [T+1]   CSR over terminals t
    close_z: np.ndarray | None = None       # int32 [K]     parent Z of the item (ascending per t)
    close_x: np.ndarray | None = None       # uint64 [K, WN] right children X of Z -> A X over every A -> t
    close_pairs: np.ndarray | None = None   # int32 [K]     how many such A (certify counts (A, Z) pairs)

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
        """Pair indexes for the sparse step: (left A, right B) -> direct parents, (left A, parent Z) -> right
        children, and the cover relation that gives the other parents."""
        nn, nl, WN = self.n_nt, self.n_left, self.WN
        R = self.rule_parent.size
        left = np.repeat(np.arange(nl, dtype=np.int64), np.diff(self.rule_lstart))
        par, right = self.rule_parent.astype(np.int64), self.rule_right.astype(np.int64)
        lb = np.zeros((nn, nl), dtype=bool)
        za = np.zeros((nl, nn), dtype=bool)
        if R:
            lb[right, left] = True
            za[left, par] = True
        self.lb = pack_rows(lb) if nn else np.zeros((0, self.WL), U64)    # left children A per right child B
        self.za = pack_rows(za) if nl else np.zeros((0, WN), U64)          # parents with left child A
        # cover[V] = {X != V : rules(X) include rules(V)} (binary pairs and terminals): a cell V makes X a cell
        # too, so a rule pair needs only its parents not covered by another of its parents (direct parents).
        key = left * nn + right
        ukey, pair = np.unique(key, return_inverse=True) if R else (np.zeros(0, np.int64), np.zeros(0, np.int64))
        inc = np.zeros((nn, ukey.size + self.n_term), dtype=np.float32)
        if R:
            inc[par, pair.ravel()] = 1
        tn = np.unpackbits(self.term_nts.view(np.uint8), axis=1, bitorder="little")[:, :nn].astype(bool) \
            if self.n_term else np.zeros((0, nn), bool)
        inc[:, ukey.size:] = tn.T
        has = inc.sum(axis=1) > 0
        missing = inc @ (1 - inc).T                    # [V, X] = rules of V that X lacks
        cover = (missing == 0) & has[:, None] & has[None, :]
        np.fill_diagonal(cover, False)
        self.cover = pack_rows(cover) if nn else np.zeros((0, WN), U64)
        self.has_cover = pack_rows(cover.any(axis=1)[None, :]) if nn else np.zeros((1, WN), U64)
        # (A, B) pairs -> direct parents (CSR): drop X when another parent V of the pair has X in its cover (of
        # two parents covering each other, the smaller id stays)
        self.ab_id = np.full((nl, nn), -1, dtype=np.int32)
        self.ab_id[ukey // max(nn, 1), ukey % max(nn, 1)] = np.arange(ukey.size, dtype=np.int32)
        starts, parents = [0], []
        order = np.argsort(key, kind="stable")
        bounds = np.searchsorted(key[order], ukey) if R else np.zeros(0, np.int64)
        bounds = np.append(bounds, R)
        for i in range(ukey.size):
            ps = par[order[bounds[i]:bounds[i + 1]]].tolist()
            for x in ps:
                if not any(cover[v, x] and not (cover[x, v] and v > x) for v in ps if v != x):
                    parents.append(x)
            starts.append(len(parents))
        self.ab_start = np.array(starts, dtype=np.int32)
        self.ab_parent = np.array(parents, dtype=np.int32)
        # (A, Z) pairs -> bitset of right children X
        key = left * nn + par
        ukey, inv = np.unique(key, return_inverse=True) if R else (np.zeros(0, np.int64), np.zeros(0, np.int64))
        self.az_id = np.full((nl, nn), -1, dtype=np.int32)
        self.az_id[ukey // max(nn, 1), ukey % max(nn, 1)] = np.arange(ukey.size, dtype=np.int32)
        azx = np.zeros((ukey.size, nn), dtype=bool)
        if R:
            azx[inv.ravel(), right] = True
        self.azx = pack_rows(azx) if ukey.size else np.zeros((0, WN), U64)
        # per left child A, its parents Z grouped by their right children (azx): (Z set, X set) per group, so the
        # seeds of ANC cost a test per group, not an OR per (A, Z) pair (after unit rules are folded in, a level
        # of a precedence ladder has every level above it as a parent, all with the same right child)
        ag_start, ag_z, ag_x = [0], [], []
        for a in range(nl):
            groups: dict[bytes, int] = {}
            for z in np.flatnonzero(self.az_id[a] >= 0):
                x = self.azx[self.az_id[a, z]]
                g = groups.setdefault(x.tobytes(), len(ag_z))
                if g == len(ag_z):
                    ag_z.append(np.zeros(WN, dtype=U64))
                    ag_x.append(x.copy())
                ag_z[g][z >> 6] |= U64(1) << U64(z & 63)
            ag_start.append(len(ag_z))
        self.ag_start = np.array(ag_start, dtype=np.int32)
        self.ag_z = np.array(ag_z, dtype=U64).reshape(-1, WN)
        self.ag_x = np.array(ag_x, dtype=U64).reshape(-1, WN)
        if self.close_start is None:
            self.close_start, self.close_z, self.close_x, self.close_pairs = closing_items(
                self.term_nts, self.az_id, self.azx, nl, WN)
        # terminal t -> parents Z of its items, as a bitset (the table's Z, for word-wise tests)
        tz = np.zeros((self.n_term, WN), dtype=U64)
        for t in range(self.n_term):
            zs = self.close_z[self.close_start[t]:self.close_start[t + 1]].astype(np.int64)
            np.bitwise_or.at(tz[t], zs >> 6, U64(1) << (zs & 63).astype(U64))
        self.term_z = tz
        # per terminal t, the parents Z of its items grouped by the first terminals of their right children X
        # (first_term over close_x): (Z set, terminal set) per group, what _row0_certifies reads
        cg_start, cg_z, cg_t = [0], [], []
        for t in range(self.n_term):
            groups: dict[bytes, int] = {}
            for k in range(self.close_start[t], self.close_start[t + 1]):
                xs = np.flatnonzero(np.unpackbits(self.close_x[k].view(np.uint8), bitorder="little")[:nn])
                terms = np.zeros(self.WT, dtype=U64)
                for x in xs:
                    terms |= self.first_term[x]
                g = groups.setdefault(terms.tobytes(), len(cg_z))
                if g == len(cg_z):
                    cg_z.append(np.zeros(WN, dtype=U64))
                    cg_t.append(terms)
                z = int(self.close_z[k])
                cg_z[g][z >> 6] |= U64(1) << U64(z & 63)
            cg_start.append(len(cg_z))
        self.cg_start = np.array(cg_start, dtype=np.int32)
        self.cg_z = np.array(cg_z, dtype=U64).reshape(-1, WN)
        self.cg_t = np.array(cg_t, dtype=U64).reshape(-1, self.WT)

    def record(self) -> Grammar:
        """The arrays the chart step reads, as one record (``device.Grammar``: its fields are attributes
        of the same names here)."""
        return Grammar(**{f: getattr(self, f) for f in Grammar._fields})

    def closing_arrays(self) -> dict:
        """The items each terminal closes, as the compiled artifact stores them (``engine.build``)."""
        return {"close_start": self.close_start, "close_z": self.close_z, "close_x": self.close_x,
                "close_pairs": self.close_pairs}

    @property
    def dev(self) -> tuple:
        """:meth:`record` as a plain tuple: what the CUDA kernels take (numba types a plain tuple on its fast path)."""
        return tuple(self.record())

    @property
    def packed(self) -> tuple:
        """:meth:`record` as three flat arrays ``(gu, gi, gm)`` (``packing.pack_grammar``): what the CPU entry
        points take (fewer array arguments, cheaper numba dispatch)."""
        got = getattr(self, "_packed", None)
        if got is None:
            got = self._packed = pack_grammar(self.record())
        return got

    def scratch_words(self, n: int) -> int:
        """Scratch of a step on tier ``n``: the working tier (all nonterminals), its row-major copy, the row
        summary, a flag word, ``WN`` words for the closure of a row (then for the nonterminals in every ancestor
        set of the prefix) and a word per nonterminal (how many top rows of its column are set)."""
        return self.n_nt * words(n + 1) + (n + 1) * self.WN + words(n + 1) + 1 + self.WN + self.n_nt

    def root(self, mem: np.ndarray, p_off: int, e_off: int) -> None:
        """Write ANC[0], EXPECT[0] and the INFO word (0) of the empty prefix."""
        mem[p_off:p_off + self.WN] = 0
        mem[e_off:e_off + self.WT + 1] = 0
        if self.start >= 0:
            mem[p_off:p_off + self.WN] = self.first[self.start]
            mem[e_off:e_off + self.WT] = self.first_term[self.start]

    def node_words(self, n: int) -> int:
        """Arena words of the chart node made by committing terminal number ``n`` (tier + ANC + EXPECT + INFO)."""
        return self.n_left * words(n + 1) + self.WL + self.WN + self.WT + 1

    @property
    def WL(self) -> int:
        return words(self.n_left)

    def tier_words(self, n: int) -> int:
        """Words of tier ``n``: ``n_left`` row blocks, then the bitset of left nonterminals present in it."""
        return self.n_left * words(n + 1) + self.WL


# --------------------------------------------------------------------------------------------------
# Readable form: the same chart with Python sets (for tests and for reading)
# --------------------------------------------------------------------------------------------------
class ReadableChart:
    """``tiers[n][row]`` = set of nonterminals (all of them, not only left-capable) over ``t_{n-row}..t_n`` that
    are in ``anc[n-row]``, ``anc[i]``, ``expect[i]``. ``unfiltered=True`` keeps every cell (plain CYK), to check
    that the filter changes no ANC, EXPECT or acceptance."""

    def __init__(self, cnf: CNF, unfiltered: bool = False):
        self.cnf = cnf
        self.unfiltered = unfiltered
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
        """Append terminal ``t``: its tier (cells in the ancestor set of their start only), ANC and EXPECT."""
        n = len(self.tiers)
        everything = set(range(len(self.cnf.nonterminals)))
        keep = (lambda i: everything) if self.unfiltered else (lambda i: self.anc[i])
        tier = [set(self.by_term.get(t, ())) & keep(n)]
        for row in range(1, n + 1):
            s = n - row
            cell = set()
            for (v, a, b) in self.cnf.binary:
                for e in range(s, n):   # left child spans s..e (tier e, row e-s), right child e+1..n (this tier)
                    if a in self.tiers[e][e - s] and b in tier[n - e - 1]:
                        cell.add(v)
            tier.append(cell & keep(s))
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
