r"""JSON strings as Python regexes: character sets, their JSON encodings, and ECMA-262 ``pattern`` translation.

A schema constrains the *decoded* string value; the grammar matches the *JSON text*. So every one-character
construct of a pattern (a literal, a class, ``.``, ``\d``) is a set of code points, rendered as the regex of the
JSON encodings of its members:

* plain strings (no ``pattern``/``format``/``enum``) accept every JSON encoding: raw characters except ``"``,
  ``\`` and U+0000-U+001F, and every escape (``\" \\ \/ \b \f \n \r \t \uXXXX``);
* constrained strings (``pattern``, ``format``, length bounds) accept each character's raw form when JSON allows
  it raw, else the escape ``json.dumps`` writes (``\"``, ``\\``, ``\n``, ``\u0001``): the canonical encoding,
  not e.g. ``\u0041`` for ``A`` (an under-approximation of the JSON texts, exact on what ``json.dumps`` writes);
* surrogates (U+D800-U+DFFF) are left out of positive classes and not named in negated ones (no UTF-8 text
  holds them, and Rust's regex, LLGuidance's, rejects them in a class).

``pattern`` is ECMA-262 (search semantics: unanchored unless it starts with ``^`` / ends with ``$``, per
top-level alternative). Translated: literals, escapes (``\d \w \s`` with ECMA's ASCII/Unicode meanings, ``\xHH``,
``\uHHHH``, ``\u{...}``, ``\cX``, identity escapes), classes and negated classes, ``.`` (not a line terminator),
groups (capturing, ``(?:``, named), alternation, greedy and lazy quantifiers (same language). Refused (typed
:class:`UnsupportedSchema` on ``pattern``): lookahead/lookbehind, backreferences, ``\b``/``\B`` word boundaries,
``\p{..}`` properties, anchors other than at the ends of a top-level alternative.
"""
from __future__ import annotations

from gcdbench.parsers.jsonschema.errors import UnsupportedSchema

MAX_CP = 0x10FFFF
SURROGATES = (0xD800, 0xDFFF)
SHORT_ESCAPES = {0x22: '\\\\"', 0x5C: '\\\\\\\\', 0x08: '\\\\b', 0x0C: '\\\\f', 0x0A: '\\\\n', 0x0D: '\\\\r',
                 0x09: '\\\\t'}
#: regex of any one JSON escape sequence (in the JSON text)
ANY_ESCAPE = r'\\(?:["\\/bfnrt]|u[0-9a-fA-F]{4})'
#: regex of any raw character JSON allows inside a string
ANY_RAW = r'[^"\\\x00-\x1f]'
ANY_CHAR = f"(?:{ANY_RAW}|{ANY_ESCAPE})"

Ranges = list  # sorted, disjoint, non-adjacent [(lo, hi)] of code points, inclusive


def norm(ranges) -> Ranges:
    out: list[list[int]] = []
    for lo, hi in sorted(ranges):
        if out and lo <= out[-1][1] + 1:
            out[-1][1] = max(out[-1][1], hi)
        else:
            out.append([lo, hi])
    return [(a, b) for a, b in out]


def complement(ranges: Ranges) -> Ranges:
    out, nxt = [], 0
    for lo, hi in norm(ranges):
        if lo > nxt:
            out.append((nxt, lo - 1))
        nxt = hi + 1
    if nxt <= MAX_CP:
        out.append((nxt, MAX_CP))
    return out


def subtract(ranges: Ranges, minus: Ranges) -> Ranges:
    comp = complement(minus)
    out = []
    for lo, hi in norm(ranges):
        for a, b in comp:
            x, y = max(lo, a), min(hi, b)
            if x <= y:
                out.append((x, y))
    return norm(out)


def _cls_char(cp: int) -> str:
    """One code point for a regex (inside or outside a class). Lark turns ``\\x``/``\\u`` escapes into the raw
    character before ``re`` sees the regex, so ASCII punctuation gets a backslash escape instead."""
    if cp < 0x80:
        c = chr(cp)
        if c.isalnum() or c == "_":
            return c
        if cp < 0x20 or cp == 0x7F:
            return f"\\x{cp:02x}"
        return "\\" + c
    if cp <= 0xFFFF:
        return f"\\u{cp:04x}"
    return f"\\U{cp:08x}"


def encoded(ranges: Ranges) -> str | None:
    """Regex (in the JSON text) of the canonical encodings of the characters in ``ranges``; None if empty."""
    ranges = norm(ranges)
    raw = subtract(ranges, [(0, 0x1F), (0x22, 0x22), (0x5C, 0x5C), SURROGATES])
    alts = []
    if raw:
        if len(raw) == 1 and raw[0][0] == raw[0][1]:
            alts.append(_cls_char(raw[0][0]))
        elif sum(b - a + 1 for a, b in raw) > MAX_CP // 2:   # most of Unicode: the negated class compiles faster
            alts.append("[^" + "".join(_cls_char(a) if a == b else f"{_cls_char(a)}-{_cls_char(b)}"
                                       for a, b in subtract(complement(raw), [SURROGATES])) + "]")
        else:
            alts.append("[" + "".join(_cls_char(a) if a == b else f"{_cls_char(a)}-{_cls_char(b)}"
                                      for a, b in raw) + "]")
    specials = [cp for lo, hi in ranges for cp in range(lo, min(hi, 0x5C) + 1) if cp < 0x20 or cp in SHORT_ESCAPES]
    if len(specials) == 34:   # every control character and both of '"' '\\': the short forms, then \u00XX
        alts += ['\\\\["\\\\bfnrt]', "\\\\u00(?:0[0-7bef]|1[0-9a-f])"]
    else:
        alts += [SHORT_ESCAPES[cp] if cp in SHORT_ESCAPES else f"\\\\u{cp:04x}" for cp in specials]
    if not alts:
        return None
    return alts[0] if len(alts) == 1 else "(?:" + "|".join(alts) + ")"


def literal_text(s: str) -> str:
    """Regex matching exactly the canonical JSON encoding of the characters of ``s`` (no quotes)."""
    return "".join(encoded([(ord(c), ord(c))]) for c in s)


def length_bounded(min_len: int, max_len: int | None) -> str:
    """A quoted JSON string of ``min_len``..``max_len`` characters (any encoding)."""
    hi = "" if max_len is None else str(max_len)
    if min_len == 0 and max_len is None:
        return f'"{ANY_CHAR}*"'
    if max_len is not None and min_len == max_len:
        return f'"{ANY_CHAR}{{{min_len}}}"'
    return f'"{ANY_CHAR}{{{min_len},{hi}}}"'


# ---------------------------------------------------------------------------------------------- ECMA patterns
DIGIT = [(0x30, 0x39)]
WORD = [(0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A)]
SPACE = [(0x09, 0x0D), (0x20, 0x20), (0xA0, 0xA0), (0x1680, 0x1680), (0x2000, 0x200A), (0x2028, 0x2029),
         (0x202F, 0x202F), (0x205F, 0x205F), (0x3000, 0x3000), (0xFEFF, 0xFEFF)]
LINE_TERMINATORS = [(0x0A, 0x0A), (0x0D, 0x0D), (0x2028, 0x2029)]
CLASS_ESCAPES = {"d": DIGIT, "w": WORD, "s": SPACE}
CONTROL_ESCAPES = {"n": 0x0A, "r": 0x0D, "t": 0x09, "f": 0x0C, "v": 0x0B, "0": 0x00}


class _Pattern:
    """Recursive-descent parser of one ECMA-262 pattern into a small AST:
    ``("alt", [seq])``, ``("seq", [node])``, ``("set", ranges)``, ``("rep", node, lo, hi)``, ``("bol",)``,
    ``("eol",)``."""

    def __init__(self, src: str, path: str):
        self.s, self.i, self.path = src, 0, path

    def fail(self, why: str):
        raise UnsupportedSchema("pattern", self.path, f"{why} in {self.s!r} (at offset {self.i})")

    def peek(self, k: int = 0) -> str:
        j = self.i + k
        return self.s[j] if j < len(self.s) else ""

    def parse(self):
        node = self.alt()
        if self.i < len(self.s):
            self.fail("unbalanced ')'")
        return node

    def alt(self):
        seqs = [self.seq()]
        while self.peek() == "|":
            self.i += 1
            seqs.append(self.seq())
        return ("alt", seqs)

    def seq(self):
        items = []
        while self.i < len(self.s) and self.peek() not in "|)":
            atom = self.atom()
            if atom is None:
                continue
            items.append(self.quantified(atom))
        return ("seq", items)

    def quantified(self, atom):
        while True:
            c = self.peek()
            if c in ("*", "+", "?"):
                self.i += 1
                lo, hi = {"*": (0, None), "+": (1, None), "?": (0, 1)}[c]
            elif c == "{" and self._brace():
                lo, hi = self._brace_value
            else:
                return atom
            if atom[0] in ("bol", "eol"):
                self.fail("quantified anchor")
            if self.peek() == "?":   # lazy: same language
                self.i += 1
            atom = ("rep", atom, lo, hi)

    def _brace(self) -> bool:
        j = self.s.find("}", self.i)
        if j < 0:
            return False
        body = self.s[self.i + 1: j]
        parts = body.split(",")
        if len(parts) > 2 or not parts[0].isdigit() or (len(parts) == 2 and parts[1] and not parts[1].isdigit()):
            return False   # Annex B: a literal '{'
        lo = int(parts[0])
        hi = lo if len(parts) == 1 else (int(parts[1]) if parts[1] else None)
        if hi is not None and hi < lo:
            self.fail("quantifier {n,m} with m < n")
        self._brace_value = (lo, hi)
        self.i = j + 1
        return True

    def atom(self):
        c = self.peek()
        self.i += 1
        if c == "^":
            return ("bol",)
        if c == "$":
            return ("eol",)
        if c == ".":
            return ("set", complement(LINE_TERMINATORS))
        if c == "(":
            if self.s.startswith("?:", self.i):
                self.i += 2
            elif self.s.startswith("?<", self.i) and self.peek(2) not in ("=", "!"):
                j = self.s.find(">", self.i)
                if j < 0:
                    self.fail("unterminated group name")
                self.i = j + 1
            elif self.peek() == "?":
                self.fail("lookaround or group flags are not regular here")
            inner = self.alt()
            if self.peek() != ")":
                self.fail("missing ')'")
            self.i += 1
            return inner
        if c == "[":
            return ("set", self.klass())
        if c == "\\":
            return self.escape(in_class=False)
        if c in "*+?":
            self.fail(f"nothing to repeat before {c!r}")
        return ("set", [(ord(c), ord(c))])

    def escape(self, in_class: bool):
        c = self.peek()
        if not c:
            self.fail("trailing backslash")
        self.i += 1
        if c in CLASS_ESCAPES:
            return ("set", CLASS_ESCAPES[c])
        if c.lower() in CLASS_ESCAPES:
            return ("set", complement(CLASS_ESCAPES[c.lower()]))
        if c == "b" and in_class:
            return ("set", [(8, 8)])
        if c in "bB":
            self.fail("word boundary \\b/\\B")
        if c in CONTROL_ESCAPES and not (c == "0" and self.peek().isdigit()):
            cp = CONTROL_ESCAPES[c]
            return ("set", [(cp, cp)])
        if c.isdigit():
            if in_class:
                self.fail("octal escape")
            self.fail("backreference")
        if c == "x" and all(h in "0123456789abcdefABCDEF" for h in self.s[self.i: self.i + 2]) \
                and len(self.s) >= self.i + 2:
            cp = int(self.s[self.i: self.i + 2], 16)
            self.i += 2
            return ("set", [(cp, cp)])
        if c == "u":
            if self.peek() == "{":
                j = self.s.find("}", self.i)
                try:
                    cp = int(self.s[self.i + 1: j], 16)
                except ValueError:
                    self.fail("bad \\u{...}")
                self.i = j + 1
                return ("set", [(cp, cp)])
            h = self.s[self.i: self.i + 4]
            if len(h) == 4 and all(x in "0123456789abcdefABCDEF" for x in h):
                self.i += 4
                cp = int(h, 16)
                if 0xD800 <= cp <= 0xDBFF and self.s[self.i: self.i + 2] == "\\u":
                    lo = self.s[self.i + 2: self.i + 6]
                    if len(lo) == 4 and all(x in "0123456789abcdefABCDEF" for x in lo) and \
                            0xDC00 <= int(lo, 16) <= 0xDFFF:
                        self.i += 6
                        cp = 0x10000 + ((cp - 0xD800) << 10) + (int(lo, 16) - 0xDC00)
                return ("set", [(cp, cp)])
        if c == "c" and self.peek().isalpha():
            cp = ord(self.peek()) % 32
            self.i += 1
            return ("set", [(cp, cp)])
        if c in "pP" and self.peek() == "{":
            self.fail("Unicode property escape \\p{...}")
        if c == "k" and self.peek() == "<":
            self.fail("named backreference")
        return ("set", [(ord(c), ord(c))])   # identity escape

    def klass(self) -> Ranges:
        neg = self.peek() == "^"
        if neg:
            self.i += 1
        items: list = []
        first = True
        while True:
            c = self.peek()
            if not c:
                self.fail("unterminated character class")
            if c == "]" and not (first and False):
                self.i += 1
                break
            first = False
            lo = self._class_atom()
            if self.peek() == "-" and self.peek(1) not in ("]", ""):
                save = self.i
                self.i += 1
                hi = self._class_atom()
                if len(lo) == 1 and len(hi) == 1 and lo[0][0] == lo[0][1] and hi[0][0] == hi[0][1]:
                    if hi[0][0] < lo[0][0]:
                        self.fail("class range out of order")
                    items.append((lo[0][0], hi[0][0]))
                    continue
                self.i = save   # a class escape next to '-': '-' is literal
                items.extend(lo)
                continue
            items.extend(lo)
        ranges = norm(items)
        return complement(ranges) if neg else ranges

    def _class_atom(self) -> Ranges:
        c = self.peek()
        self.i += 1
        if c == "\\":
            node = self.escape(in_class=True)
            return node[1]
        if c == "[" and self.peek() == ":":
            self.fail("POSIX class [:...:]")
        return [(ord(c), ord(c))]


def _render(node, path: str, start: bool = False, end: bool = False) -> str:
    """Regex of ``node``; ``start``/``end``: the node begins/ends the pattern, so an anchor there is dropped and,
    where none is, any text may come before/after it (search semantics)."""
    kind = node[0]
    if kind == "set":
        text = encoded(node[1])
        if text is None:
            raise UnsupportedSchema("pattern", path, "a character class that matches no character JSON can hold")
        return ("" if not start else f"{ANY_CHAR}*") + text + ("" if not end else f"{ANY_CHAR}*")
    if kind == "seq":
        items = list(node[1])
        pre = post = ""
        s_in = e_in = False
        if start:
            if items and items[0] == ("bol",):
                items.pop(0)
            elif items and items[0][0] == "alt":
                s_in = True
            else:
                pre = f"{ANY_CHAR}*"
        if end:
            if items and items[-1] == ("eol",) and not (len(items) == 1 and s_in):
                items.pop()
            elif items and items[-1][0] == "alt":
                e_in = True
            elif not (pre and not items):
                post = f"{ANY_CHAR}*"
        parts = [_render(x, path, s_in and k == 0, e_in and k == len(items) - 1) for k, x in enumerate(items)]
        return pre + "".join(parts) + post
    if kind == "alt":
        parts = [_render(x, path, start, end) for x in node[1]]
        return parts[0] if len(parts) == 1 else "(?:" + "|".join(parts) + ")"
    if kind == "rep":
        lo, hi = node[2], node[3]
        sub = node[1]
        while sub[0] == "alt" and len(sub[1]) == 1 and len(sub[1][0][1]) == 1:   # a group of one item
            sub = sub[1][0][1][0]
        if sub[0] == "rep" and lo in (0, 1) and hi is None and sub[2] in (0, 1) and sub[3] in (1, None):
            # (x*)* (x+)* (x?)* (x*)+ ...: one star (or plus) of x, the same language without the nested
            # loops that make a backtracking matcher exponential
            lo, hi, sub = (1 if lo == 1 and sub[2] == 1 else 0), None, sub[1]
        inner = _render(sub, path)
        q = {(0, None): "*", (1, None): "+", (0, 1): "?"}.get((lo, hi))
        if q is None:
            q = f"{{{lo}}}" if lo == hi else f"{{{lo},{'' if hi is None else hi}}}"
        text = f"(?:{inner}){q}"
        return ("" if not start else f"{ANY_CHAR}*") + text + ("" if not end else f"{ANY_CHAR}*")
    raise UnsupportedSchema("pattern", path, "an anchor (^ or $) inside the pattern, not at its start or end")


def pattern_regex(pattern: str, path: str) -> str:
    """The regex (over the JSON text, quotes included) of strings whose value matches ECMA ``pattern``."""
    if not isinstance(pattern, str):
        raise UnsupportedSchema("pattern", path, f"not a string: {pattern!r}")
    tree = _Pattern(pattern, path).parse()
    return '"' + _render(tree, path, True, True) + '"'


def key_not_in(keys) -> str:
    """A quoted JSON string whose value is none of ``keys`` (the additional keys of an object with listed
    properties): the listed keys' prefixes in canonical encoding, then a raw character that leaves them all, or
    any escape (so ``"\\u0075rl"`` passes beside a listed ``"url"``: an over-approximation on non-canonical
    encodings, which keeps the regex small), then anything."""
    end = object()
    trie: dict = {}
    for k in keys:
        node = trie
        for ch in k:
            node = node.setdefault(ch, {})
        node[end] = True

    def rec(node) -> str:
        children = [c for c in node if c is not end]
        alts = [] if end in node else [""]
        raw = subtract(complement(norm((ord(c), ord(c)) for c in children)),
                       [(0, 0x1F), (0x22, 0x22), (0x5C, 0x5C), SURROGATES])
        neg = "".join(_cls_char(a) if a == b else f"{_cls_char(a)}-{_cls_char(b)}"
                      for a, b in subtract(complement(raw), [SURROGATES]))
        alts.append(f"(?:[^{neg}]|{ANY_ESCAPE}){ANY_CHAR}*")
        alts += [literal_text(c) + rec(node[c]) for c in children]
        return "(?:" + "|".join(alts) + ")"

    return '"' + rec(trie) + '"'
