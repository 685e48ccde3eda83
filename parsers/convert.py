"""Converters from the project's ``.lark`` source to each engine's own grammar format.

``lark_to_xgrammar_ebnf`` writes XGrammar's EBNF with the ``%ignore``d text inlined after every terminal
(``T ::= body ws``), which is the reference checker's language exactly (ignored runs between and after
terminals, never first) and, on our SQL grammar, the fastest form XGrammar runs (see README "Engines").
Terminal regexes are translated through Python's own regex parser, so only the constructs we can express
in EBNF are accepted; anything else is a CompileError naming the terminal.
"""
from __future__ import annotations

import re

try:  # Python >= 3.11
    import re._parser as sre_parse
    import re._constants as sre_c
except ImportError:  # pragma: no cover
    import sre_parse  # type: ignore
    import sre_constants as sre_c  # type: ignore

from gcdbench.parsers.base import CompileError, GrammarSpec
from gcdbench.parsers.grammar import GrammarIR, load_ir
from gcdbench.parsers.charsets import AtomSets, complement, construct_name, union

_MAXREPEAT = sre_c.MAXREPEAT
_ONE_CHAR = (sre_c.LITERAL, sre_c.NOT_LITERAL, sre_c.IN, sre_c.ANY)   # regex nodes that match one character


def _ebnf_char(cp: int, in_class: bool) -> str:
    """One code point in XGrammar's EBNF: printable ASCII as is (escaped where special), the rest as
    ``\\xHH`` / ``\\uHHHH`` / ``\\UHHHHHHHH`` escapes (so no raw line separator or combining mark lands in
    the grammar text)."""
    ch = chr(cp)
    special = "\\]^-[" if in_class else '\\"'
    if ch in special:
        return "\\" + ch
    if ch == "\n":
        return "\\n"
    if ch == "\t":
        return "\\t"
    if ch == "\r":
        return "\\r"
    if 0x20 <= cp < 0x7F:
        return ch
    if cp < 0x100:
        return f"\\x{cp:02x}"
    if cp < 0x10000:
        return f"\\u{cp:04x}"
    return f"\\U{cp:08x}"


class _RegexToEBNF:
    """One terminal regex to XGrammar EBNF with Python ``re``'s exact character semantics: every
    one-character construct (literal, class, ``\\s \\w \\d``, ``.``, case-insensitive letters) is written as
    the explicit class of the code points Python's ``re`` matches with it (``regex_fsm``'s sets), so XGrammar's
    own reading of ``\\s`` or of case folding never enters."""

    def __init__(self, name: str, ignore_case: bool):
        self.name = name
        self.flags = re.IGNORECASE if ignore_case else 0
        self.sets = AtomSets("python_re", "unicode")

    def fail(self, what) -> CompileError:
        return CompileError(f"terminal {self.name}: {construct_name(what)} has no EBNF translation; rewrite the"
                            " terminal without it")

    def char_class(self, ranges) -> str:
        """The set as ``[...]``, or as ``[^...]`` of its complement when that is shorter (e.g. ``[^']``)."""
        def body(rs):
            return "".join(_ebnf_char(lo, True) if lo == hi else f"{_ebnf_char(lo, True)}-{_ebnf_char(hi, True)}"
                           for lo, hi in rs)
        if not ranges:
            raise CompileError(f"terminal {self.name}: a character class that matches nothing")
        comp = complement(ranges)
        if comp and len(comp) < len(ranges):
            return f"[^{body(comp)}]"
        return f"[{body(ranges)}]"

    def seq(self, items, flags: int) -> str:
        parts, lit = [], []

        def flush():
            if lit:
                parts.append('"' + "".join(lit) + '"')
                lit.clear()

        for op, av in items:
            if op is sre_c.LITERAL:
                ranges = self.sets(op, av, flags)
                if ranges == ((av, av),):   # matches only itself
                    lit.append(_ebnf_char(av, False))
                    continue
            flush()
            parts.append(self.node(op, av, flags))
        flush()
        return " ".join(parts) if parts else '""'

    def node(self, op, av, flags: int) -> str:
        if op in _ONE_CHAR:
            return self.char_class(self.sets(op, av, flags))
        if op is sre_c.SUBPATTERN:
            _group, add_flags, del_flags, sub = av
            return "(" + self.seq(sub, (flags | add_flags) & ~del_flags) + ")"
        if op is sre_c.BRANCH:
            return "(" + " | ".join(self.seq(alt, flags) for alt in av[1]) + ")"
        if op in (sre_c.MAX_REPEAT, sre_c.MIN_REPEAT):
            lo, hi, sub = av
            loop = self.unrolled_star(sub, flags) if hi == _MAXREPEAT and lo in (0, 1) else None
            inner = "(" + self.seq(sub, flags) + ")"
            if loop is not None:
                return loop if lo == 0 else f"{inner} {loop}"
            if (lo, hi) == (0, _MAXREPEAT):
                return inner + "*"
            if (lo, hi) == (1, _MAXREPEAT):
                return inner + "+"
            if (lo, hi) == (0, 1):
                return inner + "?"
            hi_s = "" if hi == _MAXREPEAT else str(hi)
            return inner + "{" + f"{lo},{hi_s}" + "}"
        raise self.fail(op)

    def unrolled_star(self, sub, flags: int) -> str | None:
        """``(c1 | ... | R1 | ...)*`` with single-character alternatives ``c_i`` written ``C* ((R1 | ...) C*)*``, C
        their union (the same language). XGrammar 0.2.8 runs a starred class in a few µs a mask but a starred
        group of alternatives in tens of ms over Qwen3 (measured inside a JSON string, whose escapes make such
        a group: README "Known engine behaviours"). None when the group has no such mix."""
        items = list(sub)
        while len(items) == 1 and items[0][0] is sre_c.SUBPATTERN and not any(items[0][1][1:3]):
            items = list(items[0][1][3])
        if len(items) != 1 or items[0][0] is not sre_c.BRANCH:
            return None
        alts = [list(a) for a in items[0][1][1]]
        chars, rest = [], []
        for a in alts:
            if len(a) == 1 and a[0][0] in _ONE_CHAR:
                chars.append(a[0])
            else:
                rest.append(a)
        if not chars or not rest:
            return None
        cls = self.char_class(union(self.sets(op, av, flags) for op, av in chars)) + "*"
        return f"{cls} (({' | '.join(self.seq(a, flags) for a in rest)}) {cls})*"

    def parse(self, regex: str):
        try:
            return sre_parse.parse(regex)
        except re.error as err:
            raise CompileError(f"terminal {self.name}: bad regex {regex!r}: {err}") from err

    def __call__(self, regex: str) -> str:
        parsed = self.parse(regex)
        return self.seq(list(parsed), self.flags | parsed.state.flags)


def _rule_name(sym: str) -> str:
    """EBNF-safe rule names (Lark's generated names start with '_' or '__')."""
    name = re.sub(r"[^A-Za-z0-9_]", "_", sym).lstrip("_") or "sym"
    return ("t_" if sym.isupper() or sym.startswith("__") and sym[2:3].isupper() else "r_") + name


def _ignore_piece(name: str, term) -> str:
    """One repetition unit of an ignored terminal: ``(R)+`` becomes ``R``, since ``ws ::= (...)*`` repeats it
    anyway (an unambiguous ``ws`` keeps XGrammar's Earley items few)."""
    conv = _RegexToEBNF(name, term.ignore_case)
    parsed = conv.parse(term.regex)
    items = list(parsed)
    if len(items) == 1 and items[0][0] is sre_c.MAX_REPEAT and items[0][1][:2] == (1, _MAXREPEAT):
        return conv.seq(list(items[0][1][2]), conv.flags | parsed.state.flags)
    return conv(term.regex)


def ir_to_xgrammar_ebnf(ir: GrammarIR) -> str:
    names = {s: _rule_name(s) for s in list(ir.nonterminals) + list(ir.terminals)}
    if len(set(names.values())) != len(names):
        raise CompileError("symbol names collide after conversion to EBNF")
    ws_alts = [f"({_ignore_piece(t, ir.terminals[t])})" for t in ir.ignore]
    lines = [f"root ::= {names[ir.start]}"]
    for nt in ir.nonterminals:
        alts = [" ".join(names[s] for s in r.expansion) or '""' for r in ir.by_origin[nt]]
        lines.append(f"{names[nt]} ::= " + " | ".join(f"({a})" for a in alts))
    for t, term in ir.terminals.items():
        if t in ir.ignore:
            continue
        body = _RegexToEBNF(t, term.ignore_case)(term.regex)
        lines.append(f"{names[t]} ::= ({body})" + (" ws" if ws_alts else ""))
    if ws_alts:
        lines.append(f"ws ::= ({' | '.join(ws_alts)})*")
    return "\n".join(lines) + "\n"


class _TreeToEBNF:
    """Lark's rule trees (EBNF level: ``*``, ``+``, ``?``, ``[...]`` kept) to XGrammar EBNF.

    Going from the trees rather than Lark's expanded BNF keeps repetition as repetition: Lark expands
    ``[x]`` into two alternatives of the whole rule and ``x*`` into a left-recursive helper, which XGrammar
    runs several times slower."""

    def __init__(self, ir: GrammarIR, ws: bool):
        self.ir = ir
        self.ws = " ws" if ws else ""

    def literal(self, token) -> str:
        from lark.load_grammar import _literal_to_pattern

        pat = _literal_to_pattern(token)
        body = _RegexToEBNF(str(token), "i" in pat.flags)(pat.to_regexp())
        return f"({body}){self.ws}"

    def __call__(self, tree) -> str:
        from lark import Tree
        from lark.grammar import NonTerminal, Terminal

        if isinstance(tree, Terminal):
            return _rule_name(tree.name)
        if isinstance(tree, NonTerminal):
            return _rule_name(tree.name)
        if not isinstance(tree, Tree):
            raise CompileError(f"unexpected grammar element {tree!r}")
        kind, kids = tree.data, tree.children
        if kind == "expansions":
            return "(" + " | ".join(self(k) for k in kids) + ")"
        if kind == "expansion":
            return " ".join(self(k) for k in kids) or '""'
        if kind == "alias":
            return self(kids[0])
        if kind == "value":
            return self(kids[0])
        if kind == "literal":
            return self.literal(kids[0])
        if kind == "maybe":
            return "(" + self(kids[0]) + ")?"
        if kind == "expr":
            item, op = kids[0], kids[1]
            if len(kids) == 3:   # item ~ lo..hi
                return f"({self(item)}){{{int(op)},{int(kids[2])}}}"
            if str(op).startswith("~") or op.type != "OP":
                return f"({self(item)}){{{int(op)},{int(op)}}}"
            return f"({self(item)}){op}"
        raise CompileError(f"Lark construct {kind!r} has no EBNF translation here")


def lark_to_xgrammar_ebnf(spec: GrammarSpec) -> str:
    """XGrammar EBNF for ``spec`` with ``%ignore`` inlined after every terminal (see module docstring)."""
    from lark.exceptions import LarkError
    from lark.load_grammar import load_grammar

    ir = load_ir(spec)   # validates the grammar and gives the compiled terminal regexes
    try:
        grammar, _ = load_grammar(spec.lark, spec.path or "<grammar>", [], False)
    except LarkError as err:
        raise CompileError(f"malformed grammar: {err}") from err
    conv = _TreeToEBNF(ir, ws=bool(ir.ignore))
    lines = [f"root ::= {_rule_name(spec.start)}"]
    for rd in grammar.rule_defs:
        name, params, tree = rd[0], rd[1], rd[2]
        if params:
            raise CompileError(f"rule {name}: Lark templates have no EBNF translation here")
        lines.append(f"{_rule_name(name)} ::= {conv(tree)}")
    used = " ".join(lines)
    for t, term in ir.terminals.items():
        if t not in ir.ignore and re.search(rf"\b{_rule_name(t)}\b", used):
            lines.append(f"{_rule_name(t)} ::= ({_RegexToEBNF(t, term.ignore_case)(term.regex)}){conv.ws}")
    if ir.ignore:
        lines.append("ws ::= (" + " | ".join(f"({_ignore_piece(t, ir.terminals[t])})" for t in ir.ignore) + ")*")
    return "\n".join(lines) + "\n"


def lark_to_xgrammar_bnf(spec: GrammarSpec) -> str:
    """The same language from Lark's expanded BNF (kept for comparison: slower in XGrammar)."""
    return ir_to_xgrammar_ebnf(load_ir(spec))


# --------------------------------------------------------------------------------------------------
# Python regex with explicit classes (for engines that take regexes but read \s, \w, case folds otherwise)
# --------------------------------------------------------------------------------------------------
def _re_char(cp: int) -> str:
    """Printable ASCII as itself, backslash-escaped when special (not as ``\\xHH``: Lark decodes those escapes
    inside ``/.../``, so ``\\x2e`` would become a bare ``.``); the rest as ``\\xHH``/``\\uHHHH``/``\\UHHHHHHHH``."""
    if 0x20 <= cp < 0x7F:
        return re.escape(chr(cp))
    return f"\\x{cp:02x}" if cp < 0x100 else f"\\u{cp:04x}" if cp < 0x10000 else f"\\U{cp:08x}"


def regex_with_explicit_classes(name: str, regex: str, ignore_case: bool = False) -> str:
    """``regex`` rewritten so that no construct depends on the reading of the engine that receives it: every
    one-character construct (literal with case folding, class, ``\\s \\w \\d``, ``.``) becomes the explicit
    class of the code points Python's ``re`` matches with it, and no flag is left. Its language (as a whole
    match) is the original's under Python's ``re``; the form any regex engine reads alike."""
    conv = _RegexToEBNF(name, ignore_case)
    parsed = conv.parse(regex)

    def klass(ranges) -> str:
        if len(ranges) == 1 and ranges[0][0] == ranges[0][1]:
            return _re_char(ranges[0][0])
        comp = complement(ranges)
        neg = bool(comp) and len(comp) < len(ranges)
        body = "".join(_re_char(lo) if lo == hi else f"{_re_char(lo)}-{_re_char(hi)}" for lo, hi in (comp if neg else ranges))
        return f"[{'^' if neg else ''}{body}]"

    def seq(items, flags) -> str:
        return "".join(node(op, av, flags) for op, av in items)

    def node(op, av, flags) -> str:
        if op in _ONE_CHAR:
            return klass(conv.sets(op, av, flags))
        if op is sre_c.SUBPATTERN:
            _g, add, rm, sub = av
            return "(?:" + seq(sub, (flags | add) & ~rm) + ")"
        if op is sre_c.BRANCH:
            return "(?:" + "|".join(seq(alt, flags) for alt in av[1]) + ")"
        if op in (sre_c.MAX_REPEAT, sre_c.MIN_REPEAT):
            lo, hi, sub = av
            inner = "(?:" + seq(sub, flags) + ")"
            rep = {(0, _MAXREPEAT): "*", (1, _MAXREPEAT): "+", (0, 1): "?"}.get(
                (lo, hi), "{%d,%s}" % (lo, "" if hi == _MAXREPEAT else hi))
            return inner + rep
        raise conv.fail(op)

    return seq(list(parsed), conv.flags | parsed.state.flags)
