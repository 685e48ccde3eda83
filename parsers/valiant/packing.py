"""The records the CPU entry points take as a few flat arrays and view again inside (no copy): the grammar
(:data:`device.Grammar`) as three arrays (:func:`pack_grammar`, :func:`unpack_grammar`) and a mask's static tables
(:data:`Tables`) as two (``search.pack_statics``, :func:`unpack_tables`). Each array argument costs about 1,000
instructions of numba dispatch and a namedtuple argument about 4 us, so the tables travel flat; both layouts are
generated from the records' field names."""
from __future__ import annotations

from collections import namedtuple

import numba
import numpy as np

from gcdbench.parsers.targets import borrowed

from .device import GRAMMAR_FIELDS, Grammar, _cpu_inline

# -- the grammar packed into three arrays (the layout comes from GRAMMAR_FIELDS, by name) -----------------------
_SCALARS = tuple(f for f, k, _ in GRAMMAR_FIELDS if k == "int")
_ARRAYS = tuple((f, k) for f, k, _ in GRAMMAR_FIELDS if k != "int")
_GM_HEAD = len(_SCALARS)
GM_LEN = _GM_HEAD + 3 * len(_ARRAYS)   # pack_grammar's header length


def pack_grammar(G) -> tuple:
    """``(gu, gi, gm)``: the uint64 tables of the record ``G`` end to end, the int32 ones, and an int64 header (the
    scalars, then offset, rows and columns of each table, in :data:`GRAMMAR_FIELDS` order). :func:`unpack_grammar`
    views them as ``G`` again."""
    meta = [int(getattr(G, f)) for f in _SCALARS]
    parts = {"u64": [], "i32": []}
    off = {"u64": 0, "i32": 0}
    for name, kind in _ARRAYS:
        flat = kind[:3]
        a = np.ascontiguousarray(getattr(G, name), dtype=np.uint64 if flat == "u64" else np.int32)
        if a.ndim != int(kind[4]):
            raise ValueError(f"Grammar.{name}: expected {kind[4]} dimensions ({kind}), got shape {a.shape}")
        r, c = a.shape if a.ndim == 2 else (a.size, 1)
        meta += [off[flat], r, c]
        parts[flat].append(a.ravel())
        off[flat] += a.size
    gu = np.concatenate(parts["u64"]) if parts["u64"] else np.zeros(0, np.uint64)
    gi = np.concatenate(parts["i32"]) if parts["i32"] else np.zeros(0, np.int32)
    return gu, gi, np.array(meta, dtype=np.int64)


@_cpu_inline
def _tab2(flat, gm, k):
    o, r, c = gm[_GM_HEAD + 3 * k], gm[_GM_HEAD + 3 * k + 1], gm[_GM_HEAD + 3 * k + 2]
    return borrowed(flat)[o:o + r * c].reshape((r, c))   # not reference counted (targets.borrowed)


@_cpu_inline
def _tab1(flat, gm, k):
    o, r = gm[_GM_HEAD + 3 * k], gm[_GM_HEAD + 3 * k + 1]
    return borrowed(flat)[o:o + r]


def _unpack_source() -> str:
    """Source of :func:`unpack_grammar`, one argument of ``Grammar(...)`` per field of :data:`GRAMMAR_FIELDS`."""
    args = []
    for name, kind, _ in GRAMMAR_FIELDS:
        if kind == "int":
            args.append(f"gm[{_SCALARS.index(name)}]")
        else:
            k = [f for f, _ in _ARRAYS].index(name)
            args.append(f"_tab{kind[4]}({'gu' if kind.startswith('u64') else 'gi'}, gm, {k})")
    return "def unpack_grammar(gu, gi, gm):\n    return Grammar(" + ", ".join(args) + ")\n"


_ns = {"Grammar": Grammar, "_tab1": _tab1, "_tab2": _tab2}
exec(_unpack_source(), _ns)
#: ``unpack_grammar(gu, gi, gm)``: the :data:`Grammar` record viewed from :func:`pack_grammar`'s arrays (no copy);
#: generated from GRAMMAR_FIELDS (numba's disk cache needs a source file: this one is inlined into its callers)
unpack_grammar = numba.njit(nogil=True, inline="always")(_ns["unpack_grammar"])


# -- a mask's static tables packed into two arrays (search.pack_statics), viewed as one record ------------------
Tables = namedtuple("Tables", [
    "child_start", "child_ids", "node_term", "node_parent",      # the trie (int32)
    "bnd_tok0", "bnd_tok1", "call_tok", "cont_nodes", "cont_tok",  # token lists (int32)
    "d_b0", "d_b1", "d_call", "d_cont",                           # row of each list in ``dense``, or -1 (int32)
    "need_b0", "need_b1",                                         # first-phase nodes of the boundary lists (int32 0/1)
    "merge_row", "merge_term", "no_alias", "no_alias0",           # merged boundaries (int32; see Trie; no_alias0 zeros)
    "span_row", "span_term",                                      # merged pieces spanning a node (int32; see Trie)
    "chain", "ct_tok", "ct_node", "ct_kind", "x_chain",           # the second phase (int32; search.chain_tables)
    "x_class",                                                    # lexer state -> residual class (align.py)
    "node_depth",
    "lx_trans", "lx_accept", "lx_term", "lx_start",               # the lexer (int32; lexer.py; trans flat [G * 256])
    "root_child",                                                 # terminal -> index among the root's children, or K
    "host",                                                       # int32 scalars: HOST_FIELDS
    "bnd_start", "call_start", "cont_xstart", "cont_nstart",      # CSR starts (int64; bnd_start is [2, N+1])
    "merge_start", "ct_start", "ct_gstart", "span_start",
])
#: the scalars a mask's and a commit's bookkeeping read (``Tables.host``, in this order)
HOST_FIELDS = ("n_grammar", "n_lex", "start_nullable", "chain_b0", "chain_b1", "chain_any", "k_root", "depth")
HX_NG, HX_NLEX, HX_NULLABLE, HX_CB0, HX_CB1, HX_CANY, HX_K, HX_D = range(len(HOST_FIELDS))
_I_FIELDS = Tables._fields[:Tables._fields.index("bnd_start")]    # int32 (search.pack_statics: ``si``)
_L_FIELDS = Tables._fields[len(_I_FIELDS):]                           # int64 (``sl``)


@_cpu_inline
def _v(flat, sl, k):
    o = sl[GM_LEN + 2 * k]
    return borrowed(flat)[o:o + sl[GM_LEN + 2 * k + 1]]


@_cpu_inline
def _v2(flat, sl, k):
    a = _v(flat, sl, k)
    return a.reshape((2, a.size // 2))


def _tables_source() -> str:
    """Source of :func:`unpack_tables`: one view per :data:`Tables` field, by name (``bnd_start`` is [2, N+1])."""
    args = []
    for k, f in enumerate(Tables._fields):
        flat = "si" if f in _I_FIELDS else "sl"
        args.append(f"{'_v2' if f == 'bnd_start' else '_v'}({flat}, sl, {k})")
    return "def unpack_tables(si, sl):\n    return Tables(" + ", ".join(args) + ")\n"


_ns = {"Tables": Tables, "_v": _v, "_v2": _v2}
exec(_tables_source(), _ns)
#: ``unpack_tables(si, sl)``: the :data:`Tables` record viewed from ``search.pack_statics``'s arrays (no copy);
#: generated from the field names like :func:`unpack_grammar`
unpack_tables = numba.njit(nogil=True, inline="always")(_ns["unpack_tables"])
