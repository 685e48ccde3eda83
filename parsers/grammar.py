"""The grammar as plain data: Lark loads the ``.lark`` source, we keep its terminals and BNF rules.

Every converter (to XGrammar EBNF, to LLGuidance's Lark) and the reference checker start from this form,
so the ``.lark`` file stays the one source of truth.
"""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass

import lark
from lark.exceptions import GrammarError, LarkError

from gcdbench.parsers.base import CompileError, GrammarSpec


@dataclass(frozen=True)
class Terminal:
    name: str
    regex: str            # Python regex, flags folded in as (?i:...)
    literal: str | None   # the string when the terminal is a plain string literal
    ignore_case: bool
    priority: int


@dataclass(frozen=True)
class Rule:
    origin: str
    expansion: tuple[str, ...]   # symbol names; terminals are the names in GrammarIR.terminals


@dataclass(frozen=True)
class GrammarIR:
    start: str
    terminals: dict[str, Terminal]
    rules: tuple[Rule, ...]
    ignore: tuple[str, ...]      # terminal names skipped anywhere between terminals

    def is_terminal(self, sym: str) -> bool:
        return sym in self.terminals

    @functools.cached_property
    def nonterminals(self) -> tuple[str, ...]:
        seen = {}
        for r in self.rules:
            seen.setdefault(r.origin, None)
        return tuple(seen)

    @functools.cached_property
    def by_origin(self) -> dict[str, list[Rule]]:
        out: dict[str, list[Rule]] = {}
        for r in self.rules:
            out.setdefault(r.origin, []).append(r)
        return out

    @functools.cached_property
    def nullable(self) -> frozenset[str]:
        null: set[str] = set()
        changed = True
        while changed:
            changed = False
            for r in self.rules:
                if r.origin not in null and all(s in null for s in r.expansion):
                    null.add(r.origin)
                    changed = True
        return frozenset(null)


def _terminal(tdef) -> Terminal:
    pat = tdef.pattern
    literal = pat.value if type(pat).__name__ == "PatternStr" else None
    return Terminal(
        name=tdef.name,
        regex=pat.to_regexp(),
        literal=literal,
        ignore_case="i" in pat.flags,
        priority=tdef.priority,
    )


def _reduce(start: str, terminals: dict, rules: list[Rule]) -> list[Rule]:
    """Drop rules that use unproductive or unreachable symbols (so every chart item stays viable)."""
    productive: set[str] = set(terminals)
    changed = True
    while changed:
        changed = False
        for r in rules:
            if r.origin not in productive and all(s in productive for s in r.expansion):
                productive.add(r.origin)
                changed = True
    if start not in productive:
        raise CompileError(f"the start symbol {start!r} derives no string")
    rules = [r for r in rules if all(s in productive for s in r.expansion)]
    reach, todo = {start}, [start]
    by = {}
    for r in rules:
        by.setdefault(r.origin, []).append(r)
    while todo:
        for r in by.get(todo.pop(), ()):
            for s in r.expansion:
                if s not in reach and s not in terminals:
                    reach.add(s)
                    todo.append(s)
    return [r for r in rules if r.origin in reach]


@functools.lru_cache(maxsize=32)
def _load(lark_text: str, start: str) -> GrammarIR:
    try:
        parser = lark.Lark(lark_text, parser="earley", lexer="dynamic", start=start, keep_all_tokens=True)
    except (GrammarError, LarkError) as err:
        raise CompileError(f"malformed grammar: {err}") from err
    except re.error as err:   # a terminal Python's re refuses (Lark compiles them with re): the same typed refusal
        raise CompileError(f"a terminal's regex is not valid for Python's re, which defines the harness's language "
                           f"({err}; e.g. a scoped flag such as (?i) inside an alternation: write (?i:...))") from err
    terminals = {t.name: _terminal(t) for t in parser.terminals}
    rules = [Rule(str(r.origin.name), tuple(str(s.name) for s in r.expansion)) for r in parser.rules]
    rules = _reduce(start, terminals, rules)
    used = {s for r in rules for s in r.expansion if s in terminals} | set(parser.ignore_tokens)
    terminals = {k: v for k, v in terminals.items() if k in used}
    return GrammarIR(start=start, terminals=terminals, rules=tuple(rules), ignore=tuple(parser.ignore_tokens))


def load_ir(spec: GrammarSpec) -> GrammarIR:
    """Parse ``spec.lark`` with Lark; a malformed grammar raises CompileError naming Lark's message."""
    return _load(spec.lark, spec.start)


def shipped_grammar(name: str) -> GrammarSpec:
    """A grammar file shipped with the project (``datasets/grammars/<name>.lark``) read as data, for engine code
    that needs a fixed grammar (the CUDA kernels' launch signatures) without importing the datasets layer."""
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "datasets" / "grammars" / f"{name}.lark"
    return GrammarSpec(name=name, lark=path.read_text(encoding="utf-8"), path=str(path))
