"""Terminal regexes as character automata, and the UTF-8 facts needed to step them on bytes.

Shared by the reference checker, the Valiant lexer and PSC, so that every byte-level reading of a
terminal starts from the same automaton (interegular's), the same case folds and the same UTF-8 rules.
"""
from __future__ import annotations

import functools

import interegular

from gcdbench.parsers.base import CompileError

ANYTHING_ELSE = interegular.fsm.anything_else


def utf8_len(lead: int) -> int:
    """Length of the UTF-8 sequence a lead byte starts (0: not a lead byte)."""
    if 0xC2 <= lead <= 0xDF:
        return 2
    if 0xE0 <= lead <= 0xEF:
        return 3
    if 0xF0 <= lead <= 0xF4:
        return 4
    return 0


def utf8_second_range(lead: int) -> tuple[int, int]:
    """Valid second bytes after ``lead`` (no overlong forms, no surrogates, nothing past U+10FFFF)."""
    return {0xE0: (0xA0, 0xBF), 0xED: (0x80, 0x9F), 0xF0: (0x90, 0xBF), 0xF4: (0x80, 0x8F)}.get(lead, (0x80, 0xBF))


def codepoint_range(pending: bytes) -> tuple[int, int]:
    """Code points whose UTF-8 encoding starts with the (valid) byte string ``pending``."""
    n = utf8_len(pending[0])
    cp = pending[0] & {2: 0x1F, 3: 0x0F, 4: 0x07}[n]
    for b in pending[1:]:
        cp = (cp << 6) | (b & 0x3F)
    free = 6 * (n - len(pending))
    lo, hi = cp << free, (cp << free) | ((1 << free) - 1)
    return max(lo, {2: 0x80, 3: 0x800, 4: 0x10000}[n]), min(hi, 0x10FFFF)


@functools.lru_cache(maxsize=1)
def unicode_folds() -> dict[str, str]:
    """Non-ASCII characters that Python's ``re`` (hence Lark) matches to an ASCII letter under IGNORECASE:
    ``ſ`` ~ ``s``, ``K`` (Kelvin sign) ~ ``k``, ``ı`` ~ ``i``. interegular folds ASCII only, so we add these."""
    import re

    out = {}
    for cp in range(0x80, 0x10000):
        ch = chr(cp)
        for c in {ch.lower(), ch.upper()}:
            if len(c) == 1 and c.isascii() and re.fullmatch(re.escape(c), ch, re.IGNORECASE):
                out[ch] = c
    return out


class CharFSM:
    """One terminal's character automaton: interegular's FSM, its live states, and its symbol map with
    Python ``re``'s extra case folds. ``symbols`` maps a character to a symbol; anything unlisted maps to
    ``other`` (None when the regex has no "anything else" class)."""

    def __init__(self, name: str, regex: str, ignore_case: bool = False):
        try:
            self.fsm = interegular.parse_pattern(regex).to_fsm()
        except Exception as err:  # interegular raises several types for unsupported syntax
            raise CompileError(f"terminal {name}: regex {regex!r} is not supported by interegular ({err})") from err
        fsm = self.fsm
        if fsm.initial in fsm.finals:
            raise CompileError(f"terminal {name} matches the empty string")
        rev: dict[int, set[int]] = {}
        for s, row in fsm.map.items():
            for t in row.values():
                rev.setdefault(t, set()).add(s)
        live, todo = set(fsm.finals), list(fsm.finals)
        while todo:
            for s in rev.get(todo.pop(), ()):
                if s not in live:
                    live.add(s)
                    todo.append(s)
        self.name = name
        self.live = live
        self.symbols = dict(fsm.alphabet._symbol_mapping)
        if ignore_case:
            for ch, ascii_ch in unicode_folds().items():
                if ascii_ch in self.symbols:
                    self.symbols[ch] = self.symbols[ascii_ch]
        self.other = self.symbols.get(ANYTHING_ELSE)
        self.explicit = sorted(c for c in self.symbols if isinstance(c, str))

    def next(self, state, ch: str):
        """Live state after ``ch`` from ``state``, or None."""
        sym = self.symbols.get(ch, self.other)
        if sym is None:
            return None
        t = self.fsm.map.get(state, {}).get(sym)
        return t if t is not None and t in self.live else None
