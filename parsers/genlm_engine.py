"""GenLM's exact Earley recogniser (PyPI ``genlm-grammar``, optional extra ``genlm``) behind the engine interface.

GenLM parses a CFG whose terminals are bytes (``genlm.grammar.parse.earley.Earley``, semiring-weighted Earley;
Boolean weights here). The byte-level CFG is built from the project's grammar (:func:`byte_cfg`): Lark's BNF
rules as they are, and each terminal its UTF-8 byte DFA from :mod:`gcdbench.parsers.regex_fsm` written as
right-linear rules, with the ``%ignore``d text inlined after every terminal, so the language is the
reference's (``Profile()``: scannerless, like GenLM's own ``lark_interface``, which has no longest-match lexer
either). ``front_end=lark_interface`` uses GenLM's own ``LarkStuff(text).byte_cfg()`` instead; its language
differs (declared as far as a :class:`Profile` goes: ignored text before the first terminal and not after the
last, ASCII classes and case folds; not expressible, hence audit disagreements: negated classes and ``.`` read
against ``string.printable`` only, one ignored piece per gap, start rule named ``start`` only).

GenLM has no token-level mask: the mask walks the vocabulary's bytes in sorted order
(:func:`gcdbench.parsers.reference._sorted_vocab`, the byte trie as a sorted list with common-prefix lengths),
one Earley column per trie edge on top of the committed prefix's chart, asking at each node which bytes may
come next. ``next_bytes=p_next`` asks what ``BoolCFGLM.p_next`` asks (``Earley.next_token_weights`` over the
prefix grammar, GenLM's documented route); ``next_bytes=chart`` reads the column's pending terminals (the
same set, by Earley's correct-prefix property on a trimmed grammar; cheaper). EOS is allowed where GenLM's EOS
symbol may come next. Special and padding ids are never allowed. GenLM's own chart cache (keyed by the whole
prefix) is not used: the walk keeps one path of columns, so memory stays that of the prefix.
"""
from __future__ import annotations

import importlib.util
from dataclasses import dataclass

import numpy as np

from gcdbench.parsers.base import CompileError, Engine, GrammarSpec, Profile, ids_to_mask, option

MISSING = "engine genlm needs genlm-grammar: pip install -e \".[genlm]\" (README 'Other engines')"


def byte_cfg(spec: GrammarSpec):
    """GenLM's Boolean CFG over bytes (terminals 0-255) for ``spec``: the reference's language."""
    from genlm.grammar import CFG, Boolean

    from gcdbench.parsers.grammar import load_ir
    from gcdbench.parsers.regex_fsm import byte_dfa

    ir = load_ir(spec)
    one = Boolean.one
    cfg = CFG(R=Boolean, S=("R", ir.start), V=set(range(256)))
    ignore = ("ignore",) if ir.ignore else None

    def automaton(name: str, tail):
        """Right-linear rules of terminal ``name``'s byte DFA; an accepting state goes on with ``tail``."""
        t = ir.terminals[name]
        dfa = byte_dfa(name, t.regex, t.ignore_case)
        kind = "qi" if tail is None and ignore else "q"
        if dfa.start < 0:
            return None
        for q, row in enumerate(dfa.rows):
            for b, q2 in enumerate(row):
                if q2 >= 0:
                    cfg.add(one, (kind, name, q), b, (kind, name, q2))
            if dfa.accept[q]:
                cfg.add(one, (kind, name, q), *((tail,) if tail else ()))
        return (kind, name, dfa.start)

    for r in ir.rules:
        body = []
        for s in r.expansion:
            body.append(("T", s) if s in ir.terminals else ("R", s))
        cfg.add(one, ("R", r.origin), *body)
    for name in ir.terminals:
        if name in ir.ignore:
            continue
        start = automaton(name, ignore)
        if start is not None:
            cfg.add(one, ("T", name), start)
    if ignore:
        cfg.add(one, ignore)
        for name in ir.ignore:
            start = automaton(name, None)
            if start is not None:
                cfg.add(one, ignore, start, ignore)
    return cfg


def lark_interface_cfg(spec: GrammarSpec):
    """GenLM's own Lark front end (``genlm.grammar.lark_interface``), as a Boolean CFG over bytes."""
    import warnings

    from genlm.grammar import Boolean
    from genlm.grammar.lark_interface import LarkStuff

    if spec.start != "start":
        raise CompileError(f"genlm's lark_interface takes the start rule 'start' only, not {spec.start!r}")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")   # it warns about the multi-character arcs it drops
            cfg = LarkStuff(spec.lark).byte_cfg()
    except Exception as err:   # Lark, interegular (lookaround, unsupported regex) or its own asserts
        raise CompileError(f"genlm's lark_interface refused the grammar: {type(err).__name__}: {err}") from err
    cfg = cfg.map_values(lambda w: Boolean(w > 0), Boolean)
    # every byte a terminal: Earley renumbers nonterminals from the largest integer terminal up, so they never
    # take a byte's number (with only the bytes used, a nonterminal could be numbered 102, the byte 'f')
    cfg.V |= set(range(256))
    return cfg


@dataclass
class GenLMOptions:
    front_end: str = option("ours", "the byte-level CFG: ours (from the project's grammar IR and byte DFAs, the "
                            "reference's language) or lark_interface (GenLM's own LarkStuff.byte_cfg)",
                            choices=("ours", "lark_interface"))
    next_bytes: str = option("chart", "how the walk asks which bytes may follow a trie node: chart (the Earley "
                             "column's pending terminals) or p_next (BoolCFGLM's next_token_weights over the prefix "
                             "grammar)", choices=("chart", "p_next"))


class GenLMEngine(Engine):
    name = "genlm"
    plot_style = ("#111111", "X")   # black, in every figure
    artifact_keys = {"CFG rules": ("cfg_rules",)}
    Options = GenLMOptions

    @classmethod
    def missing(cls) -> str | None:
        if importlib.util.find_spec("genlm") is None or importlib.util.find_spec("genlm.grammar") is None:
            return MISSING
        return None

    def version(self) -> str:
        import importlib.metadata

        return importlib.metadata.version("genlm-grammar")

    @classmethod
    def complexity(cls, ambiguous: bool = False) -> str:
        return "O(n^3)"   # Earley: cubic in the prefix length on ambiguous grammars

    def profile(self) -> Profile:
        if self.opts["front_end"] == "lark_interface":
            return Profile(leading_ignore=True, trailing_ignore=False, case_fold="ascii", regex_classes="ascii")
        return Profile()

    def compile(self, grammar: GrammarSpec, tokenizer) -> None:
        from genlm.grammar import EOS, add_EOS
        from genlm.grammar.parse.earley import Earley

        build = lark_interface_cfg if self.opts["front_end"] == "lark_interface" else byte_cfg
        cfg = add_EOS(build(grammar), eos=EOS)
        self.cfg_rules = cfg.num_rules
        self.prefix = self.opts["next_bytes"] == "p_next"
        try:
            self.earley = Earley(cfg.prefix_grammar if self.prefix else cfg)
        except (ValueError, AssertionError, KeyError, RecursionError) as err:
            raise CompileError(f"genlm could not build its parser: {type(err).__name__}: {err}") from err
        self.eos_symbol = EOS
        self.terminals = frozenset(self.earley.cfg.V)
        self.tokenizer = tokenizer
        self.token_bytes = tokenizer.token_bytes
        self.eos_id = tokenizer.eos_id
        self.vocab_size = tokenizer.vocab_size
        self._walk = None
        self.reset()

    def reset(self) -> None:
        self.cols = [self.earley._initial_column]

    def _next(self, cols):
        """What may follow the prefix of ``cols``: a set (p_next) or the column's pending-terminal dict (chart)."""
        if self.prefix:
            return {y for y, w in self.earley.next_token_weights(cols).items() if w}
        return {y for y, items in cols[-1].waiting_for.items() if items and y in self.terminals}

    def _vocab_walk(self):
        """The sorted vocabulary (ids, common-prefix lengths with a trailing 0) and, per first byte, the range of
        positions whose tokens start with it (the walk skips the ranges of refused first bytes)."""
        from gcdbench.parsers.reference import _sorted_vocab

        if getattr(self, "_walk", None) is None:
            order, lcp = _sorted_vocab(self.tokenizer)
            ids, common_of = order.tolist(), lcp.tolist() + [0]
            ranges: dict[int, list[int]] = {}
            for n, idx in enumerate(ids):
                first = self.token_bytes[idx][0]
                ranges.setdefault(first, [n, n])[1] = n + 1
            self._walk = (ids, common_of, ranges)
        return self._walk

    def fill_mask(self, out: np.ndarray) -> None:
        ids, common_of, ranges = self._vocab_walk()
        tb = self.token_bytes
        special = set(self.tokenizer.special_ids.values())
        cols = list(self.cols)
        base = len(cols)
        nexts = [self._next(cols)]   # nexts[d]: bytes allowed after d bytes of the current token (None: not asked)
        step = self.earley.next_column
        allowed = []
        for first in sorted(b for b in nexts[0] if b in ranges):
            lo, hi = ranges[first]
            for n in range(lo, hi):
                common = common_of[n] if n > lo else 0
                if common >= len(nexts):          # shares a byte that was refused below this depth
                    continue
                del nexts[common + 1:]
                del cols[base + common:]
                data = tb[ids[n]]
                # the column after the token's last byte is built only if the next token (sorted) extends it
                last = len(data) if n + 1 < hi and common_of[n + 1] >= len(data) else len(data) - 1
                ok = True
                for d in range(common, len(data)):
                    here = nexts[d]
                    if here is None:
                        here = nexts[d] = self._next(cols)
                    b = data[d]
                    if b not in here:
                        ok = False
                        break
                    if d < last:
                        cols.append(step(cols, b))
                        nexts.append(None)
                if ok and ids[n] not in special:
                    allowed.append(ids[n])
        if self.eos_symbol in nexts[0]:
            allowed.append(self.eos_id)
        out[:] = ids_to_mask(allowed, self.vocab_size)

    def commit(self, token_id: int) -> bool:
        t = int(token_id)
        data = self.token_bytes[t] if t != self.eos_id else b""
        if not data:
            return False
        for b in data:
            if b not in self._next(self.cols):
                return False
            self.cols.append(self.earley.next_column(self.cols, b))
        return True

    def fork(self) -> "GenLMEngine":
        import copy

        other = copy.copy(self)
        other.reset()
        return other

    def info(self) -> dict:
        return {"grammar_form": f"genlm byte cfg ({self.opts['front_end']})", "cfg_rules": self.cfg_rules,
                "next_bytes": self.opts["next_bytes"]}
