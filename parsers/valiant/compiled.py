"""What Valiant builds at init (:class:`Compiled`: CNF, lexer DFAs, token alignment as arrays) and its on-disk
cache (:func:`load_or_build`)."""
from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np

from gcdbench.parsers.base import CompileError, GrammarSpec
from gcdbench.parsers.grammar import load_ir

from .align import Aligner, Alignment, prune_dominated as prune_dominated_readable
from .align_nb import MAX_STATES, build_alignment, prune_dominated
from .chart import PackedGrammar
from .cnf import to_cnf
from .lexer import build_lexer

VERSION = "gcdbench-valiant-8"    # also the key of the on-disk artifact cache: bump it when the artifact changes


class Compiled:
    """Everything built at init (what the disk cache stores)."""

    def __init__(self, arrays: dict, meta: dict):
        self.arrays = arrays
        self.meta = meta
        a = arrays
        self.grammar = PackedGrammar(
            n_nt=meta["n_nt"], n_left=meta["n_left"], n_term=meta["n_term"], WN=meta["WN"], WT=meta["WT"],
            start=meta["start"], rule_lstart=a["rule_lstart"], rule_parent=a["rule_parent"],
            rule_right=a["rule_right"], term_nts=a["term_nts"], first=a["first"], first_term=a["first_term"],
            close_start=a["close_start"], close_z=a["close_z"], close_x=a["close_x"], close_pairs=a["close_pairs"],
        )
        self.align = Alignment.from_arrays(a)
        self.trans = a["lex_trans"]
        self.accept = a["lex_accept"]
        self.term_of = a["lex_term_of"]
        self.start_of = a["lex_start_of"]
        self.n_grammar = meta["n_grammar"]
        self.start_nullable = meta["start_nullable"]
        self._mask_keys: list | None = None

    @property
    def mask_keys(self) -> list:
        """Lexer state ``x`` -> the id of everything a mask from one configuration ``(c, x)`` reads of ``x``, at
        index ``x + 1`` (index 0: -1, the boundary state): its terminal, whether it is final, and the contents of
        its residual class's token lists (the tokens it reads entirely and its continuations, align.py). Residual
        classes are exact DFA equivalence; tokens see only their own length ahead, so states that differ only
        beyond it (the positions of a counted repetition far from its end) have equal lists. Two states with one id
        give equal masks at every chart node: the whole-mask memo keys a prefix of one configuration by
        ``(c, id)`` (engine.py ``fill_mask``). Built at the first call (a pass over the class lists)."""
        if self._mask_keys is None:
            al = self.align
            lists: dict = {}
            of_class = []
            for k in range(al.call_start.size - 1):
                a, b = int(al.cont_xstart[k]), int(al.cont_xstart[k + 1])
                sig = (al.call_tok[al.call_start[k]:al.call_start[k + 1]].tobytes(), al.cont_nodes[a:b].tobytes(),
                       np.diff(al.cont_nstart[a:b + 1]).tobytes(),
                       al.cont_tok[al.cont_nstart[a]:al.cont_nstart[b]].tobytes())
                of_class.append(lists.setdefault(sig, len(lists)))
            ids: dict = {}
            self._mask_keys = [-1] + [
                ids.setdefault((int(t), bool(f), of_class[k]), len(ids))
                for t, f, k in zip(self.term_of.tolist(), self.accept.tolist(), al.x_class.tolist())]
        return self._mask_keys


def build(grammar: GrammarSpec, tokenizer, aligner: str = "numba", token_states: int = MAX_STATES) -> Compiled:
    """CNF, lexer DFAs and token tuples. ``aligner='python'`` uses the readable (slow) tuple builder;
    ``token_states``: a walk holding more (trie node, DFA state) pairs is done on merged boundaries (align.py)."""
    t0 = time.perf_counter()
    ir = load_ir(grammar)
    cnf = to_cnf(ir)
    g = PackedGrammar.from_cnf(cnf)
    lex = build_lexer(ir, cnf.terminals)
    rep = terminal_classes(g.term_nts)
    lex.term_of = np.where(lex.term_of < lex.n_grammar, rep[np.minimum(lex.term_of, rep.size - 1)],
                           lex.term_of).astype(np.int32) if rep.size else lex.term_of
    t1 = time.perf_counter()
    if aligner == "python":
        al = Aligner(lex, cnf.follow, token_states).build(tokenizer.token_bytes, tokenizer.eos_id)
    else:
        try:
            al = build_alignment(lex, cnf.follow, tokenizer.token_bytes, tokenizer.eos_id, token_states)
        except ValueError as err:   # more lexer states than a walk state packs
            raise CompileError(f"valiant: {err}") from err
    n_tuples = _tuples(al)
    al = prune_dominated_readable(al) if aligner == "python" else prune_dominated(al)
    n_kept = _tuples(al)
    t2 = time.perf_counter()
    arrays = {
        "rule_lstart": g.rule_lstart, "rule_parent": g.rule_parent, "rule_right": g.rule_right,
        "term_nts": g.term_nts, "first": g.first, "first_term": g.first_term, **g.closing_arrays(),
        "lex_trans": lex.trans, "lex_accept": lex.accept, "lex_term_of": lex.term_of, "lex_start_of": lex.start_of,
        **al.arrays(),
    }
    meta = {
        "n_nt": g.n_nt, "n_left": g.n_left, "n_term": g.n_term, "WN": g.WN, "WT": g.WT, "start": g.start,
        "n_grammar": lex.n_grammar, "start_nullable": bool(cnf.start_nullable), "cnf": cnf.counts(),
        "lexer_states": lex.n_states, "lexer_classes": lex.n_classes, "lexer_terminals": len(lex.names),
        "terminal_classes": int(np.unique(rep).size),
        "trie_nodes": al.n_nodes, "trie_depth": al.max_depth, "tuples": n_kept, "tuples_dominated": n_tuples - n_kept,
        "merged_nodes": int(np.count_nonzero(np.diff(al.merge_start))),
        "build_s": {"grammar": round(t1 - t0, 3), "align": round(t2 - t1, 3)},
    }
    return Compiled(arrays, meta)


def terminal_classes(term_nts: np.ndarray) -> np.ndarray:
    """Each grammar terminal's representative: the first terminal whose set of parents ``V -> t`` is the same.

    A terminal enters the CNF only through its rules ``V -> t``, so two terminals with the same parents can stand
    for each other in every derivation: the chart after ``c + t1`` is the chart after ``c + t2``, and so are the
    EXPECT sets, the follow relation and every table the search reads. The lexer therefore reports a piece of any
    of them as their representative (``Lexer.term_of``; each keeps its own DFA, so the bytes each matches are
    unchanged): the bases of a mask, the terminal tree's nodes and the chart steps are made once per class. With
    1,000 keyword literals beside each other in one rule, a statement's start is one root child, not 1,000, and a
    prefix of several keywords one base, not one per keyword."""
    rep = np.arange(term_nts.shape[0], dtype=np.int32)
    seen: dict[bytes, int] = {}
    for t in range(term_nts.shape[0]):
        rep[t] = seen.setdefault(term_nts[t].tobytes(), t)
    return rep


def _tuples(al: Alignment) -> int:
    return int(al.bnd_tok[0].size + al.bnd_tok[1].size + al.call_tok.size + al.cont_tok.size)


def _cache_path(cache_dir, grammar: GrammarSpec, tokenizer, token_states: int) -> Path:
    from gcdbench.parsers.base import cache_dir_of
    from gcdbench.parsers.regex_fsm import SEMANTICS

    root = cache_dir_of("valiant", cache_dir)

    return root / f"{VERSION}-{SEMANTICS}-s{token_states}-{grammar.key()}-{tokenizer.key()}.npz"


def load_or_build(grammar: GrammarSpec, tokenizer, cache_dir=None, use_cache: bool = True,
                  token_states: int = MAX_STATES) -> tuple[Compiled, bool]:
    import json

    path = _cache_path(cache_dir, grammar, tokenizer, token_states)
    if use_cache and path.exists():
        try:
            with np.load(path, allow_pickle=False) as z:
                arrays = {k: z[k] for k in z.files if k != "__meta__"}
                meta = json.loads(bytes(z["__meta__"]).decode())
            return Compiled(arrays, meta), True
        except Exception:  # a corrupt or stale cache file: rebuild it
            pass
    comp = build(grammar, tokenizer, token_states=token_states)
    if use_cache:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".{os.getpid()}.tmp.npz")
            np.savez(tmp, __meta__=np.frombuffer(json.dumps(comp.meta).encode(), dtype=np.uint8), **comp.arrays)
            os.replace(tmp, path)
        except OSError:
            pass
    return comp, False
