"""Converters from the project's ``.lark`` source to two more EBNF dialects: llama.cpp's GBNF and kbnf's KBNF.

Both follow :func:`gcdbench.parsers.convert.lark_to_xgrammar_ebnf`: Lark's rule trees (repetition kept), every
terminal written out from its compiled regex through Python's own regex parser (character ranges and case
folding from :class:`gcdbench.parsers.convert._RegexToEBNF`, so both dialects read ``\\s``, ``"select"i``... the
way the XGrammar converter does), and ``%ignore``d text inlined after every terminal (ignored runs between and
after terminals, never first: the reference checker's language). Only the spelling differs:

* GBNF (``lark_to_gbnf``): rule names are ``[a-zA-Z0-9-]`` only; characters are escaped as ``\\xHH``,
  ``\\uHHHH`` or ``\\UHHHHHHHH``; terminals stay grammar expressions.
* KBNF (``lark_to_kbnf``): rules end with ``;``; each terminal (with its trailing ignored text) is one
  embedded regex ``#"..."`` (kbnf runs it as one DFA), written in Rust regex syntax with ``\\x{H}`` escapes;
  ``{m,n}`` over rules is expanded. kbnf stops as soon as its start symbol is complete, so the sentence is
  followed by an end marker, a Unicode noncharacter (U+10FFFF or U+FFFF) that the converted grammar matches
  nowhere else (both are left out of every character class); the kbnf adapter spells EOS with it.
"""
from __future__ import annotations

import re

from gcdbench.parsers.base import CompileError, GrammarSpec
from gcdbench.parsers.charsets import complement
from gcdbench.parsers.convert import _ONE_CHAR, _RegexToEBNF, sre_c, sre_parse
from gcdbench.parsers.grammar import GrammarIR, load_ir

_MAXREPEAT = sre_c.MAXREPEAT
_REPEATS = tuple(op for op in (sre_c.MAX_REPEAT, sre_c.MIN_REPEAT, getattr(sre_c, "POSSESSIVE_REPEAT", None)) if op)

#: characters that may mark the end of a sentence in KBNF output (noncharacters: no text uses them); the
#: converted grammar never matches either of them otherwise
KBNF_ENDS = (0x10FFFF, 0xFFFF)


def _without(ranges, cps) -> list[tuple[int, int]]:
    """``ranges`` minus the code points ``cps``."""
    out = []
    for lo, hi in ranges:
        for cp in sorted(cps):
            if lo <= cp <= hi:
                if lo < cp:
                    out.append((lo, cp - 1))
                lo = cp + 1
        if lo <= hi:
            out.append((lo, hi))
    return out


class _Dialect:
    """How one EBNF dialect spells sequences, alternatives, repetition, literals and character classes."""

    def name(self, sym: str, terminal: bool) -> str:
        raise NotImplementedError

    def lit(self, cps: list[int]) -> str:
        raise NotImplementedError

    def cls(self, ranges: list[tuple[int, int]], neg: bool) -> str:
        raise NotImplementedError

    def cat(self, parts: list[str]) -> str:
        raise NotImplementedError

    def alt(self, parts: list[str]) -> str:
        raise NotImplementedError

    def group(self, x: str) -> str:
        return f"({x})"

    def rep(self, x: str, lo: int, hi) -> str:
        """``x`` (already a group) repeated ``lo`` to ``hi`` times (``hi`` None: unbounded)."""
        if (lo, hi) == (0, None):
            return x + "*"
        if (lo, hi) == (1, None):
            return x + "+"
        if (lo, hi) == (0, 1):
            return x + "?"
        return x + "{" + f"{lo},{'' if hi is None else hi}" + "}"


class GBNF(_Dialect):
    """llama.cpp's grammar format (``llama-grammar.cpp``)."""

    def name(self, sym, terminal):
        # Lark names are [_a-zA-Z0-9]; '_' -> '-' keeps them distinct ("_x" -> "r--x", "x" -> "r-x")
        return ("t-" if terminal else "r-") + sym.replace("_", "-")

    @staticmethod
    def esc(cp: int) -> str:
        ch = chr(cp)
        if ch.isascii() and (ch.isalnum() or ch in " _.,;:!?=<>+*/()'{}|&%$#@~`"):
            return ch
        if cp < 0x100:
            return f"\\x{cp:02X}"
        if cp < 0x10000:
            return f"\\u{cp:04X}"
        return f"\\U{cp:08X}"

    def lit(self, cps):
        return '"' + "".join(self.esc(c) for c in cps) + '"'

    def cls(self, ranges, neg):
        body = "".join(self.esc(lo) if lo == hi else f"{self.esc(lo)}-{self.esc(hi)}" for lo, hi in ranges)
        return f"[{'^' if neg else ''}{body}]"

    def cat(self, parts):
        return " ".join(parts) if parts else '""'

    def alt(self, parts):
        return "(" + " | ".join(parts) + ")"


class KBNFRegex(_Dialect):
    """Rust ``regex`` syntax, as it must be written inside a KBNF ``#"..."`` string (backslashes doubled,
    since KBNF unescapes the string before compiling the regex). Negated classes leave out the end marker."""

    @staticmethod
    def esc(cp: int) -> str:
        ch = chr(cp)
        if ch.isascii() and (ch.isalnum() or ch in " _,;:=<>'@%"):
            return ch
        return f"\\\\x{{{cp:X}}}"

    def lit(self, cps):
        return "".join(self.esc(c) for c in cps)

    def cls(self, ranges, neg):
        ranges = list(ranges) + [(c, c) for c in KBNF_ENDS] if neg else _without(ranges, KBNF_ENDS)
        if not ranges:
            return "[^\\\\x{0}-\\\\x{10FFFF}]"   # matches nothing
        body = "".join(self.esc(lo) if lo == hi else f"{self.esc(lo)}-{self.esc(hi)}" for lo, hi in ranges)
        return f"[{'^' if neg else ''}{body}]"

    def cat(self, parts):
        return "".join(parts)

    def alt(self, parts):
        return "(?:" + "|".join(parts) + ")"

    def group(self, x):
        return f"(?:{x})"


class KBNFRules(_Dialect):
    """KBNF rule bodies: nonterminal names, ``|``, ``?*+`` (no ``{m,n}``: expanded)."""

    def name(self, sym, terminal):
        return ("t_" if terminal else "r_") + sym

    def cat(self, parts):
        return " ".join(parts) if parts else "''"

    def alt(self, parts):
        return "(" + " | ".join(parts) + ")"

    def rep(self, x, lo, hi):
        if (lo, hi) in ((0, None), (1, None), (0, 1)):
            return super().rep(x, lo, hi)
        return self.cat(written_out(x, lo, hi))


def written_out(x: str, lo: int, hi: int | None) -> list[str]:
    """The items of ``x{lo,hi}`` for a dialect without ``{m,n}`` (``x`` one item: a name or a group): ``lo``
    copies, then ``x*`` (``hi`` None) or ``hi - lo`` nested optional copies, ``(x (x (...)?)?)?``, which keeps
    the grammar as unambiguous as it was (``x? x?`` would not)."""
    if hi is not None and hi < lo:
        raise CompileError(f"repetition {{{lo},{hi}}}: upper bound below lower bound")
    tail = ""
    for _ in range(hi - lo if hi is not None else 0):
        tail = f"({x} {tail})?" if tail else f"({x})?"
    return [x] * lo + ([x + "*"] if hi is None else [tail] if tail else [])


class _RegexWriter:
    """One terminal's Python regex as an expression of a dialect (ranges and case folds from convert.py)."""

    def __init__(self, name: str, ignore_case: bool, d: _Dialect):
        self.base = _RegexToEBNF(name, ignore_case)
        self.icase = ignore_case
        self.d = d

    def seq(self, items, icase) -> str:
        parts, lit = [], []

        def flush():
            if lit:
                parts.append(self.d.lit(list(lit)))
                lit.clear()

        for op, av in items:
            if op is sre_c.LITERAL and tuple(self.base.sets(op, av, re.IGNORECASE if icase else 0)) == ((av, av),):
                lit.append(av)
                continue
            flush()
            parts.append(self.node(op, av, icase))
        flush()
        return self.d.cat(parts)

    def node(self, op, av, icase) -> str:
        d = self.d
        if op in _ONE_CHAR:
            # the exact code points Python's re matches (convert.py's sets), written as the shorter of the class
            # and its complement
            ranges = list(self.base.sets(op, av, re.IGNORECASE if icase else 0))
            comp = complement(ranges)
            return d.cls(comp, True) if comp and len(comp) < len(ranges) else d.cls(ranges, False)
        if op is sre_c.SUBPATTERN:
            _group, add_flags, _del, sub = av
            return d.group(self.seq(sub, icase or bool(add_flags & re.IGNORECASE)))
        if op is sre_c.BRANCH:
            return d.alt([self.seq(alt, icase) for alt in av[1]])
        if op in _REPEATS:
            lo, hi, sub = av
            return d.rep(d.group(self.seq(sub, icase)), lo, None if hi == _MAXREPEAT else hi)
        raise self.base.fail(op)

    def __call__(self, regex: str) -> str:
        try:
            parsed = sre_parse.parse(regex)
        except re.error as err:
            raise CompileError(f"terminal {self.base.name}: bad regex {regex!r}: {err}") from err
        return self.seq(list(parsed), self.icase)

    def ignore_piece(self, regex: str) -> str:
        """One repetition unit of an ignored terminal (``(R)+`` gives ``R``: the caller repeats it)."""
        parsed = list(sre_parse.parse(regex))
        if len(parsed) == 1 and parsed[0][0] is sre_c.MAX_REPEAT and parsed[0][1][:2] == (1, _MAXREPEAT):
            return self.seq(list(parsed[0][1][2]), self.icase)
        return self(regex)


class _TreeWriter:
    """Lark's rule trees in a dialect; terminals are referenced by name and collected in ``self.used``."""

    def __init__(self, d: _Dialect, literal):
        self.d = d
        self.literal_fn = literal
        self.used: set[str] = set()

    def __call__(self, tree) -> str:
        from lark import Tree
        from lark.grammar import NonTerminal, Terminal

        d = self.d
        if isinstance(tree, Terminal):
            self.used.add(tree.name)
            return d.name(tree.name, True)
        if isinstance(tree, NonTerminal):
            return d.name(tree.name, False)
        if not isinstance(tree, Tree):
            raise CompileError(f"unexpected grammar element {tree!r}")
        kind, kids = tree.data, tree.children
        if kind == "expansions":
            return d.alt([self(k) for k in kids])
        if kind == "expansion":
            return d.cat([self(k) for k in kids])
        if kind in ("alias", "value"):
            return self(kids[0])
        if kind == "literal":
            return self.literal_fn(kids[0])
        if kind == "maybe":
            return d.rep(d.group(self(kids[0])), 0, 1)
        if kind == "expr":
            item, op = kids[0], kids[1]
            inner = d.group(self(item))
            if len(kids) == 3:   # item ~ lo..hi
                return d.rep(inner, int(op), int(kids[2]))
            if str(op).startswith("~") or op.type != "OP":
                return d.rep(inner, int(op), int(op))
            return d.rep(inner, {"*": 0, "+": 1, "?": 0}[str(op)], 1 if str(op) == "?" else None)
        raise CompileError(f"Lark construct {kind!r} has no translation here")


def _rule_defs(spec: GrammarSpec):
    from lark.exceptions import LarkError
    from lark.load_grammar import load_grammar

    try:
        grammar, _ = load_grammar(spec.lark, spec.path or "<grammar>", [], False)
    except LarkError as err:
        raise CompileError(f"malformed grammar: {err}") from err
    for rd in grammar.rule_defs:
        name, params, tree = rd[0], rd[1], rd[2]
        if params:
            raise CompileError(f"rule {name}: Lark templates have no translation here")
        yield name, tree


def _literal_regex(token) -> tuple[str, bool]:
    from lark.load_grammar import _literal_to_pattern

    pat = _literal_to_pattern(token)
    return pat.to_regexp(), "i" in pat.flags


def lark_to_gbnf(spec: GrammarSpec) -> str:
    """GBNF (llama.cpp) for ``spec``, root rule ``root``, ``%ignore`` inlined after every terminal."""
    ir: GrammarIR = load_ir(spec)
    d = GBNF()
    ws = " ws" if ir.ignore else ""

    def literal(token):
        regex, icase = _literal_regex(token)
        return f"{d.group(_RegexWriter(str(token), icase, d)(regex))}{ws}"

    conv = _TreeWriter(d, literal)
    lines = [f"root ::= {d.name(spec.start, False)}"]
    lines += [f"{d.name(name, False)} ::= {conv(tree)}" for name, tree in _rule_defs(spec)]
    for t in sorted(conv.used):
        term = ir.terminals[t]
        lines.append(f"{d.name(t, True)} ::= {d.group(_RegexWriter(t, term.ignore_case, d)(term.regex))}{ws}")
    if ir.ignore:
        pieces = [d.group(_RegexWriter(t, ir.terminals[t].ignore_case, d).ignore_piece(ir.terminals[t].regex))
                  for t in ir.ignore]
        lines.append(f"ws ::= {d.rep(d.alt(pieces), 0, None)}")
    return "\n".join(lines) + "\n"


def lark_to_kbnf(spec: GrammarSpec, end: int = KBNF_ENDS[0]) -> str:
    """KBNF (kbnf/Formatron) for ``spec``: start rule ``start`` = the sentence, then the end marker ``end``
    (one of :data:`KBNF_ENDS`); each terminal one regex with the ignored text that may follow it."""
    if end not in KBNF_ENDS:
        raise ValueError(f"end marker must be one of {KBNF_ENDS}")
    ir: GrammarIR = load_ir(spec)
    rx, d = KBNFRegex(), KBNFRules()
    ws = ""
    if ir.ignore:
        pieces = [rx.group(_RegexWriter(t, ir.terminals[t].ignore_case, rx).ignore_piece(ir.terminals[t].regex))
                  for t in ir.ignore]
        ws = rx.rep(rx.alt(pieces), 0, None)

    def terminal_regex(name, regex, icase) -> str:
        return '#"' + rx.group(_RegexWriter(name, icase, rx)(regex)) + ws + '"'

    def literal(token):
        regex, icase = _literal_regex(token)
        return terminal_regex(str(token), regex, icase)

    conv = _TreeWriter(d, literal)
    lines = [f"start ::= {d.name(spec.start, False)} #\"{rx.esc(end)}\";"]
    lines += [f"{d.name(name, False)} ::= {conv(tree)};" for name, tree in _rule_defs(spec)]
    for t in sorted(conv.used):
        term = ir.terminals[t]
        lines.append(f"{d.name(t, True)} ::= {terminal_regex(t, term.regex, term.ignore_case)};")
    return "\n".join(lines) + "\n"
