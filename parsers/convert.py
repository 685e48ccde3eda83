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
from gcdbench.parsers.regex_fsm import unicode_folds

_MAXREPEAT = sre_c.MAXREPEAT


def _ebnf_char(cp: int, in_class: bool) -> str:
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
    if cp < 0x20 or cp == 0x7F:
        return f"\\x{cp:02x}"
    return ch


_CATEGORY = {
    sre_c.CATEGORY_DIGIT: [(0x30, 0x39)],
    sre_c.CATEGORY_SPACE: [(0x20, 0x20), (0x09, 0x0D)],
    sre_c.CATEGORY_WORD: [(0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A)],
}
_NEG_CATEGORY = {
    sre_c.CATEGORY_NOT_DIGIT: sre_c.CATEGORY_DIGIT,
    sre_c.CATEGORY_NOT_SPACE: sre_c.CATEGORY_SPACE,
    sre_c.CATEGORY_NOT_WORD: sre_c.CATEGORY_WORD,
}


class _RegexToEBNF:
    def __init__(self, name: str, ignore_case: bool):
        self.name = name
        self.icase = ignore_case

    def fail(self, what) -> CompileError:
        return CompileError(f"terminal {self.name}: regex construct {what} has no EBNF translation")

    def ranges(self, items, icase) -> tuple[list[tuple[int, int]], bool]:
        neg, out = False, []
        for op, av in items:
            if op is sre_c.NEGATE:
                neg = True
            elif op is sre_c.LITERAL:
                out.append((av, av))
            elif op is sre_c.RANGE:
                out.append(av)
            elif op is sre_c.CATEGORY:
                if av in _CATEGORY:
                    out.extend(_CATEGORY[av])
                elif av in _NEG_CATEGORY and not neg and len(items) == 1:
                    return list(_CATEGORY[_NEG_CATEGORY[av]]), True
                else:
                    raise self.fail(av)
            else:
                raise self.fail(op)
        if icase:   # fold case as Python's re does, including its few non-ASCII folds (see reference.py)
            folds: dict[str, list[str]] = {}
            for ch, a in unicode_folds().items():
                folds.setdefault(a.lower(), []).append(ch)
            extra = []
            for lo, hi in out:
                for cp in range(lo, min(hi, 0x7F) + 1):
                    c = chr(cp)
                    for o in ([c.swapcase()] if c.swapcase() != c else []) + folds.get(c.lower(), []):
                        extra.append((ord(o), ord(o)))
            out += extra
        return out, neg

    def char_class(self, ranges, neg) -> str:
        body = "".join(
            _ebnf_char(lo, True) if lo == hi else f"{_ebnf_char(lo, True)}-{_ebnf_char(hi, True)}" for lo, hi in ranges
        )
        return f"[{'^' if neg else ''}{body}]"

    def seq(self, items, icase) -> str:
        parts, lit = [], []

        def flush():
            if lit:
                parts.append('"' + "".join(lit) + '"')
                lit.clear()

        for op, av in items:
            if op is sre_c.LITERAL and not (icase and chr(av).swapcase() != chr(av)):
                lit.append(_ebnf_char(av, False))
                continue
            flush()
            parts.append(self.node(op, av, icase))
        flush()
        return " ".join(parts) if parts else '""'

    def node(self, op, av, icase) -> str:
        if op is sre_c.LITERAL:
            return self.char_class(*self.ranges([(op, av)], icase))
        if op is sre_c.NOT_LITERAL:
            return self.char_class([(av, av)], True)
        if op is sre_c.IN:
            return self.char_class(*self.ranges(av, icase))
        if op is sre_c.ANY:
            return "[^\\n]"
        if op is sre_c.SUBPATTERN:
            _group, add_flags, _del, sub = av
            return "(" + self.seq(sub, icase or bool(add_flags & re.IGNORECASE)) + ")"
        if op is sre_c.BRANCH:
            return "(" + " | ".join(self.seq(alt, icase) for alt in av[1]) + ")"
        if op in (sre_c.MAX_REPEAT, sre_c.MIN_REPEAT, getattr(sre_c, "POSSESSIVE_REPEAT", None)):
            lo, hi, sub = av
            inner = "(" + self.seq(sub, icase) + ")"
            if (lo, hi) == (0, _MAXREPEAT):
                return inner + "*"
            if (lo, hi) == (1, _MAXREPEAT):
                return inner + "+"
            if (lo, hi) == (0, 1):
                return inner + "?"
            hi_s = "" if hi == _MAXREPEAT else str(hi)
            return inner + "{" + f"{lo},{hi_s}" + "}"
        raise self.fail(op)

    def __call__(self, regex: str) -> str:
        try:
            parsed = sre_parse.parse(regex)
        except re.error as err:
            raise CompileError(f"terminal {self.name}: bad regex {regex!r}: {err}") from err
        return self.seq(list(parsed), self.icase)


def _rule_name(sym: str) -> str:
    """EBNF-safe rule names (Lark's generated names start with '_' or '__')."""
    name = re.sub(r"[^A-Za-z0-9_]", "_", sym).lstrip("_") or "sym"
    return ("t_" if sym.isupper() or sym.startswith("__") and sym[2:3].isupper() else "r_") + name


def _ignore_piece(name: str, term) -> str:
    """One repetition unit of an ignored terminal: ``(R)+`` becomes ``R``, since ``ws ::= (...)*`` repeats it
    anyway (an unambiguous ``ws`` keeps XGrammar's Earley items few)."""
    parsed = list(sre_parse.parse(term.regex))
    if len(parsed) == 1 and parsed[0][0] is sre_c.MAX_REPEAT and parsed[0][1][:2] == (1, _MAXREPEAT):
        return _RegexToEBNF(name, term.ignore_case).seq(list(parsed[0][1][2]), term.ignore_case)
    return _RegexToEBNF(name, term.ignore_case)(term.regex)


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
