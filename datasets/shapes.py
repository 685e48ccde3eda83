r"""``dataset=shapes``: everyday grammar shapes at growing size, each in language-equivalent spellings.

A *shape* is how people write grammars, not what the grammar is for: one-character terminals as GBNF users write
them, a precedence ladder, many keywords beside an identifier terminal, counted repetitions, regular
sub-languages (strings with escapes, comments) inside nested blocks. Each family (:data:`FAMILIES`) has a size
axis and two or more **spellings**: grammars written differently whose string languages are equal (the tests
check, with the reference checker, that every spelling gives the same mask at every prefix of the samples and of
random probes). The samples of a family and size are the same text for every spelling, so the cost ratio
between two spellings of one engine is a like-for-like comparison: an engine whose cost follows the language,
not the spelling, has ratio 1.

Options: ``dataset.family``, ``dataset.size`` (null: the family's default) or ``dataset.step`` (an index into
the family's five preset sizes), ``dataset.spelling`` (a name, or its index; null: the family's first) and ``dataset.pool`` (how many samples are generated; ``samples=N`` picks N of them). The
dataset is named ``shapes_<family>_<size>_<spelling>`` (one cell folder each) and its meta carries ``shape``:
``{"family", "size", "spelling"}``, which the report's shape section groups by.

Families (size axis; spellings, first is the default):

* ``one_char_json`` (document bytes; ``chars``: every string character, digit and whitespace character its own
  one-character terminal, GBNF style; ``regex``: STRING, NUMBER and WS regex terminals). Whitespace is written in
  the grammar (``ws``), as JSON's own grammar does: an ``%ignore`` would also skip it inside strings and numbers
  spelled with one-character terminals, a different language.
* ``one_char_csv`` (document bytes; ``chars`` / ``regex``): rows of plain or quoted fields, no ignored text.
* ``one_char_ident_number`` (characters per identifier or number; ``chars`` / ``regex``): a comma-separated list
  of identifiers and numbers, spaces written in the grammar.
* ``ladder`` (precedence levels, 5 to 25; ``ladder``: one rule per level, C style, with a ternary below and
  unary prefix and call postfix above; ``flat``: one ambiguous rule with every operator, whose string language
  is the ladder's). ``%ignore`` whitespace.
* ``keywords`` (keyword count, 10 to 1,000; ``literals``: one string literal per keyword; ``terminal``: one
  ``KEYWORD`` terminal, an alternation of the keywords). Every keyword also matches the ``NAME`` terminal beside
  it. ``%ignore`` whitespace.
* ``counted`` (the repetition count n, 1 to 256; ``counted``: ``{n}`` and ``{0,n}`` in the regexes;
  ``expanded``: the same regexes written out). Records of a UUID, an n-digit hex digest and a quoted note of at
  most n characters; no ignored text.
* ``nested_regular`` (block nesting depth of the samples, 1 to 64; ``regex``: STRING and the comments as one
  regex each; ``composed``: the same terminals composed from named pieces with Lark's terminal operators).
  ``%ignore`` whitespace and comments.

Grammars and samples are written for this project (generated here, seeded by family, size and sample index).
"""
from __future__ import annotations

import functools
import random
import string
from dataclasses import dataclass
from typing import Callable

from gcdbench.datasets.base import DataError, Dataset, Sample, pick
from gcdbench.parsers.base import GrammarSpec


@dataclass(frozen=True)
class Family:
    """One shape family: its size axis, its spellings (the first is the default), the grammar of a (size,
    spelling) and the sample generator of a size."""
    name: str
    what: str
    size_name: str
    sizes: tuple[int, ...]          # the preset's sizes (the sweep's axis), smallest first
    size_range: tuple[int, int]     # every size the generators accept
    default_size: int
    spellings: tuple[str, ...]
    grammar: Callable[[int, str], str]
    sample: Callable[[int, random.Random], str]
    #: spellings that an LALR(1) parser with a standard (maximal-munch, literals first) lexer parses: psc accepts
    #: their samples. The one-character spellings of JSON and CSV are not: a standard lexer cuts ``n`` of a string
    #: as the literal of ``null``'s letters or of an escape, never as the one-character class beside it
    lalr: tuple[str, ...] = ()


def _alt(items) -> str:
    """A Lark alternation of string literals."""
    return " | ".join('"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"' for s in items)


def _sized(rng: random.Random, target: int, piece: Callable[[], str], sep: str = "", first: str = "") -> str:
    """Pieces joined by ``sep`` until the text reaches about ``target`` characters (at least one piece)."""
    parts, n = [], len(first)
    while not parts or n < target:
        p = piece()
        parts.append(p)
        n += len(p) + len(sep)
    return first + sep.join(parts)


# --------------------------------------------------------------------------------------------------
# one-character terminals: JSON
# --------------------------------------------------------------------------------------------------
DIGITS = string.digits
HEX = string.digits + "abcdefABCDEF"
ID_START = string.ascii_letters + "_"

_JSON_COMMON = r"""start: ws value ws
?value: object | array | string | number | "true" | "false" | "null"
object: "{" ws "}" | "{" member ("," member)* "}"
member: ws string ws ":" ws value ws
array: "[" ws "]" | "[" ws value ws ("," ws value ws)* "]"
"""


def json_grammar(size: int, spelling: str) -> str:
    if spelling == "chars":
        return _JSON_COMMON + "\n".join([
            'string: "\\"" char* "\\""',
            'char: UNESCAPED | "\\\\" escape',
            r"UNESCAPED: /[^\"\\\x00-\x1f]/",
            'escape: ' + _alt('"\\/bfnrt') + ' | "u" hex hex hex hex',
            "hex: " + _alt(HEX),
            'number: minus? int frac? exp?',
            'minus: "-"',
            'int: "0" | onenine digit*',
            "digit: " + _alt(DIGITS),
            "onenine: " + _alt(DIGITS[1:]),
            'frac: "." digit+',
            'exp: ("e" | "E") sign? digit+',
            'sign: "+" | "-"',
            "ws: wschar*",
            r'wschar: " " | "\t" | "\n" | "\r"',
        ]) + "\n"
    return _JSON_COMMON + "\n".join([
        "string: STRING",
        r'STRING: /"(?:[^"\\\x00-\x1f]|\\(?:["\\\/bfnrt]|u[0-9a-fA-F]{4}))*"/',
        "number: NUMBER",
        r"NUMBER: /-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?/",
        "ws: WS?",
        r"WS: /[ \t\n\r]+/",
    ]) + "\n"


_WORDS = ("alpha", "beta", "gamma", "delta", "name", "id", "value", "items", "count", "enabled", "type", "url",
          "title", "path", "size", "owner", "tags", "mode", "créé", "naïve", "日本")


def _json_string(rng: random.Random) -> str:
    out = []
    for _ in range(rng.randint(0, 3)):
        r = rng.random()
        if r < 0.7:
            out.append(rng.choice(_WORDS))
        elif r < 0.85:
            out.append(" ")
        else:
            out.append(rng.choice(['\\"', "\\\\", "\\n", "\\t", "\\/", "\\u00e9", "\\u20AC"]))
    return '"' + "".join(out) + '"'


def _json_number(rng: random.Random) -> str:
    s = rng.choice(["", "", "-"]) + (rng.choice(["0", str(rng.randint(1, 99999))]))
    if rng.random() < 0.3:
        s += "." + str(rng.randint(0, 999))
    if rng.random() < 0.15:
        s += rng.choice("eE") + rng.choice(["", "+", "-"]) + str(rng.randint(0, 30))
    return s


def _json_value(rng: random.Random, depth: int, budget: list[int], ind: int) -> str:
    r = rng.random()
    if depth < 6 and budget[0] > 0 and r < 0.45:
        pretty = rng.random() < 0.5
        nl = ("\n" + "  " * (ind + 1)) if pretty else " "
        end = ("\n" + "  " * ind) if pretty else ""
        k = rng.randint(0, 5)
        budget[0] -= 1
        if rng.random() < 0.5:
            members = [f"{_json_string(rng)}: {_json_value(rng, depth + 1, budget, ind + 1)}" for _ in range(k)]
            return "{" + (nl + ("," + nl).join(members) + end if members else rng.choice(["", " "])) + "}"
        items = [_json_value(rng, depth + 1, budget, ind + 1) for _ in range(k)]
        return "[" + (nl + ("," + nl).join(items) + end if items else rng.choice(["", " "])) + "]"
    if r < 0.7:
        return _json_string(rng)
    if r < 0.9:
        return _json_number(rng)
    return rng.choice(["true", "false", "null"])


def json_sample(size: int, rng: random.Random) -> str:
    """A JSON document of about ``size`` bytes (a top-level object of members, each a random value)."""
    budget = [max(4, size // 40)]
    members = []
    n = 2
    while n < size:
        m = f'  {_json_string(rng)}: {_json_value(rng, 1, budget, 1)}'
        members.append(m)
        n += len(m.encode()) + 2
    return "{\n" + ",\n".join(members) + "\n}"


# --------------------------------------------------------------------------------------------------
# one-character terminals: CSV
# --------------------------------------------------------------------------------------------------
def csv_grammar(size: int, spelling: str) -> str:
    head = 'start: row+\nrow: field ("," field)* "\\n"\n'
    if spelling == "chars":
        return head + "\n".join([
            'field: tchar* | "\\"" qchar* "\\""',
            "tchar: TCHAR",
            r'TCHAR: /[^,"\n\r]/',
            'qchar: QCHAR | "\\"" "\\""',
            r'QCHAR: /[^"]/',
        ]) + "\n"
    return head + "\n".join([
        "field: TEXT? | QUOTED",
        r'TEXT: /[^,"\n\r]+/',
        r'QUOTED: /"(?:[^"]|"")*"/',
    ]) + "\n"


def _csv_field(rng: random.Random) -> str:
    r = rng.random()
    if r < 0.1:
        return ""
    if r < 0.45:
        return str(rng.randint(0, 100000)) + (f".{rng.randint(0, 99)}" if rng.random() < 0.3 else "")
    if r < 0.8:
        return " ".join(rng.choice(_WORDS) for _ in range(rng.randint(1, 3)))
    inner = rng.choice(['a, b', 'say ""hi""', 'line\nbreak', 'x,y,z', '', 'ünï, cödé'])
    return '"' + inner + '"'


def csv_sample(size: int, rng: random.Random) -> str:
    """CSV text of about ``size`` bytes: a header row and rows of the same number of fields."""
    cols = rng.randint(3, 7)
    header = ",".join(f"col{i}" for i in range(cols))
    return _sized(rng, size, lambda: ",".join(_csv_field(rng) for _ in range(cols)) + "\n", "", header + "\n")


# --------------------------------------------------------------------------------------------------
# one-character terminals: identifiers and numbers
# --------------------------------------------------------------------------------------------------
def ident_number_grammar(size: int, spelling: str) -> str:
    head = 'start: item (sep item)*\nsep: ws "," ws\n?item: ident | number\n'
    if spelling == "chars":
        return head + "\n".join([
            "ident: idstart idchar*",
            "idstart: " + _alt(ID_START),
            "idchar: idstart | digit",
            'number: "-"? digit+ ("." digit+)?',
            "digit: " + _alt(DIGITS),
            'ws: " "*',
        ]) + "\n"
    return head + "\n".join([
        "ident: IDENT",
        r"IDENT: /[a-zA-Z_][a-zA-Z0-9_]*/",
        "number: NUMBER",
        r"NUMBER: /-?[0-9]+(?:\.[0-9]+)?/",
        "ws: WS?",
        "WS: / +/",
    ]) + "\n"


def ident_number_sample(size: int, rng: random.Random) -> str:
    """About 1 KB of identifiers and numbers of about ``size`` characters each, comma-separated."""
    def item():
        n = max(1, size + rng.randint(-size // 4, size // 4))
        if rng.random() < 0.6:
            return rng.choice(ID_START) + "".join(rng.choice(ID_START + DIGITS) for _ in range(n - 1))
        digits = "".join(rng.choice(DIGITS) for _ in range(n))
        if n > 3 and rng.random() < 0.4:
            cut = rng.randint(1, n - 2)
            digits = digits[:cut] + "." + digits[cut + 1:]
        return rng.choice(["", "", "-"]) + digits
    return _sized(rng, max(300, min(2000, 30 * size)), item, rng.choice([",", ", ", " , "]))


# --------------------------------------------------------------------------------------------------
# precedence ladders
# --------------------------------------------------------------------------------------------------
#: binary operators per precedence level, loosest first: C's ten binary levels, then made-up ones up to 25
LADDER_LEVELS: tuple[tuple[str, ...], ...] = (
    ("||",), ("&&",), ("|",), ("^",), ("&",), ("==", "!="), ("<", ">", "<=", ">="), ("<<", ">>"), ("+", "-"),
    ("*", "/", "%"), *(("#" + c,) for c in "abcdefghijklmno"))
UNARY = ("-", "!")
_LADDER_TAIL = r"""args: expr ("," expr)*
atom: NAME | NUMBER | "(" expr ")"
NAME: /[a-z_][a-z0-9_]*/
NUMBER: /[0-9]+/
%ignore /[ \t\n]+/
"""


def ladder_grammar(size: int, spelling: str) -> str:
    levels = LADDER_LEVELS[:size]
    if spelling == "flat":
        ops = [op for level in levels for op in level]
        return "\n".join([
            "start: expr",
            '?expr: expr "?" expr ":" expr | expr binop expr | unop expr | expr "(" [args] ")" | atom',
            "binop: " + _alt(ops),
            "unop: " + _alt(UNARY),
        ]) + "\n" + _LADDER_TAIL
    lines = ["start: expr", "?expr: cond", '?cond: l0 "?" expr ":" cond | l0']
    for i, level in enumerate(levels):
        nxt = f"l{i + 1}" if i + 1 < len(levels) else "unary"
        lines.append(f"?l{i}: " + " | ".join(f'l{i} "{op}" {nxt}' for op in level) + f" | {nxt}")
    lines += ["?unary: " + " | ".join(f'"{op}" unary' for op in UNARY) + " | postfix",
              '?postfix: postfix "(" [args] ")" | atom']
    return "\n".join(lines) + "\n" + _LADDER_TAIL


def ladder_sample(size: int, rng: random.Random) -> str:
    """An expression over the operators of ``size`` levels, 200 to 2,000 bytes (tokens space-separated, a newline
    now and then)."""
    ops = [op for level in LADDER_LEVELS[:size] for op in level]

    def operand(depth):
        r = rng.random()
        pre = " ".join(rng.choice(UNARY) for _ in range(rng.random() < 0.15))
        if depth < 4 and r < 0.12:
            core = "( " + expr(depth + 1, rng.randint(1, 4)) + " )"
        elif depth < 4 and r < 0.22:
            core = rng.choice("fgh") + "( " + " , ".join(expr(depth + 1, rng.randint(1, 3))
                                                         for _ in range(rng.randint(0, 2))) + " )"
        elif r < 0.7:
            core = rng.choice(["a", "b", "x", "y", "count", "n_1", "ptr", "idx"])
        else:
            core = str(rng.randint(0, 999))
        return (pre + " " + core).strip()

    def expr(depth, k):
        parts = [operand(depth)]
        for _ in range(k - 1):
            parts += [rng.choice(ops), operand(depth)]
        text = " ".join(parts)
        if depth < 3 and rng.random() < 0.1:
            text = f"{text} ? {expr(depth + 1, 2)} : {expr(depth + 1, 2)}"
        return text

    target = rng.randint(200, 2000)
    text = _sized(rng, target, lambda: expr(0, rng.randint(2, 6)), rng.choice([f" {ops[-1]} ", f"\n{ops[0]} "]))
    return text if text.count("?") or rng.random() < 0.5 else f"{text} ? 1 : 0"


# --------------------------------------------------------------------------------------------------
# keywords beside an identifier
# --------------------------------------------------------------------------------------------------
@functools.lru_cache(maxsize=1)
def keyword_list() -> tuple[str, ...]:
    """1,000 distinct made-up lowercase keywords (2 to 12 letters; some are prefixes of others, as ``in`` of
    ``int``); the keyword family of size k uses the first k."""
    rng = random.Random("shapes:keywords")
    syll = ["ab", "al", "an", "as", "be", "by", "ca", "co", "de", "do", "el", "en", "ex", "fo", "ge", "in", "is",
            "le", "lo", "ma", "ne", "no", "of", "on", "or", "pe", "ra", "re", "se", "st", "ta", "te", "to", "un",
            "up", "va", "wi", "xo", "ze"]
    out: dict[str, None] = {}
    while len(out) < 1000:
        if out and rng.random() < 0.15:   # extend an earlier keyword: a prefix pair
            w = rng.choice(list(out)) + rng.choice(syll)
        else:
            w = "".join(rng.choice(syll) for _ in range(rng.randint(1, 5)))
        if len(w) <= 12:
            out.setdefault(w, None)
    return tuple(out)


def keywords_grammar(size: int, spelling: str) -> str:
    kws = keyword_list()[:size]
    head = "start: stmt+\nstmt: kw word* \";\"\n?word: NAME | NUMBER\n"
    tail = "NAME: /[a-z_][a-z0-9_]*/\nNUMBER: /[0-9]+/\n%ignore /[ \\t\\n]+/\n"
    if spelling == "literals":
        return head + "kw: " + _alt(kws) + "\n" + tail
    return head + "kw: KEYWORD\nKEYWORD: " + _alt(kws) + "\n" + tail


def keywords_sample(size: int, rng: random.Random) -> str:
    """Statements ``<keyword> <names and numbers> ;``, 200 to 2,000 bytes; the names are never keywords (so
    engines whose lexer reserves keywords accept them too)."""
    kws = keyword_list()[:size]
    reserved = set(keyword_list()[:size])

    def name():
        while True:
            w = rng.choice(string.ascii_lowercase + "_") + "".join(
                rng.choice(string.ascii_lowercase + DIGITS + "_") for _ in range(rng.randint(0, 7)))
            if w not in reserved:
                return w

    def stmt():
        words = [name() if rng.random() < 0.8 else str(rng.randint(0, 9999)) for _ in range(rng.randint(0, 5))]
        return " ".join([rng.choice(kws), *words]) + ";"
    return _sized(rng, rng.randint(200, 2000), stmt, rng.choice(["\n", " ", "\n\n"]))


# --------------------------------------------------------------------------------------------------
# counted repetitions
# --------------------------------------------------------------------------------------------------
def counted_grammar(size: int, spelling: str) -> str:
    hexc, note = "[0-9a-f]", "[a-z0-9 ]"
    if spelling == "counted":
        def rep(c, k):
            return f"{c}{{{k}}}"

        def upto(c, k):
            return f"{c}{{0,{k}}}"
    else:
        def rep(c, k):
            return c * k

        def upto(c, k):
            return (c + "?") * k
    uuid = "-".join(rep(hexc, k) for k in (8, 4, 4, 4, 12))
    return "\n".join([
        "start: record+",
        'record: UUID " " DIGEST " " NOTE "\\n"',
        f"UUID: /{uuid}/",
        f"DIGEST: /{rep(hexc, size)}/",
        f'NOTE: /"{upto(note, size)}"/',
    ]) + "\n"


def counted_sample(size: int, rng: random.Random) -> str:
    """Records (UUID, ``size``-digit hex digest, quoted note of 0 to ``size`` characters), 200 to 4,000 bytes."""
    def h(k):
        return "".join(rng.choice("0123456789abcdef") for _ in range(k))

    def record():
        note = "".join(rng.choice(string.ascii_lowercase + DIGITS + "    ") for _ in range(rng.randint(0, size)))
        return f'{h(8)}-{h(4)}-{h(4)}-{h(4)}-{h(12)} {h(size)} "{note}"\n'
    return _sized(rng, min(4000, max(200, 4 * (60 + 2 * size))), record)


# --------------------------------------------------------------------------------------------------
# regular sub-languages inside nested blocks
# --------------------------------------------------------------------------------------------------
_NESTED_HEAD = r"""start: item*
item: NAME "=" value ";" | NAME "{" item* "}"
?value: STRING | NUMBER | NAME
NAME: /[a-z_][a-z0-9_]*/
NUMBER: /-?[0-9]+/
%ignore /[ \t\n]+/
%ignore BLOCK_COMMENT
%ignore LINE_COMMENT
"""


def nested_grammar(size: int, spelling: str) -> str:
    if spelling == "regex":
        return _NESTED_HEAD + "\n".join([
            r'STRING: /"(?:[^"\\\n]|\\["\\nt])*"/',
            r"BLOCK_COMMENT: /\/\*[^*]*\*+(?:[^\/*][^*]*\*+)*\//",
            r"LINE_COMMENT: /#[^\n]*/",
        ]) + "\n"
    return _NESTED_HEAD + "\n".join([
        r'STRING: "\"" (STR_CHAR | STR_ESCAPE)* "\""',
        r'STR_CHAR: /[^"\\\n]/',
        r'STR_ESCAPE: "\\" ("\"" | "\\" | "n" | "t")',
        r'BLOCK_COMMENT: "/*" NOT_STAR* STARS (NOT_STAR_SLASH NOT_STAR* STARS)* "/"',
        r"NOT_STAR: /[^*]/",
        r"NOT_STAR_SLASH: /[^\/*]/",
        r'STARS: "*"+',
        r'LINE_COMMENT: "#" /[^\n]/*',
    ]) + "\n"


def nested_sample(size: int, rng: random.Random) -> str:
    """Blocks nested ``size`` deep (one path reaches that depth), with assignments of strings with escapes,
    numbers and names, and block and line comments; 200 to 4,000 bytes."""
    names = ["server", "port", "host", "path", "opts", "retry", "log", "level", "mode", "env"]

    def string_():
        parts = [rng.choice(["abc", "x y", "a/b", "*", "/", "#", "é", "\\\"", "\\\\", "\\n", "\\t", ""])
                 for _ in range(rng.randint(0, 4))]
        return '"' + "".join(parts) + '"'

    def comment(ind):
        return rng.choice([f"# note {rng.randint(0, 99)}\n{ind}", f"/* c {rng.randint(0, 9)} ** x */ ",
                           "/**/ ", "/* a * b / c */\n" + ind])

    def assign(ind):
        v = rng.choice([string_(), string_(), str(rng.randint(-99, 9999)), rng.choice(names)])
        return f"{rng.choice(names)} = {v};"

    def block(depth, spine, ind):
        inner = ind + "  "
        items = [assign(inner) for _ in range(rng.randint(0, 2))]
        if spine and depth < size:
            items.append(block(depth + 1, True, inner))
        if depth < size and rng.random() < 0.2:
            items.append(block(depth + 1, False, inner))
        items = [(comment(inner) if rng.random() < 0.25 else "") + it for it in items]
        body = "".join("\n" + inner + it for it in items)
        return f"{rng.choice(names)} {{{body}\n{ind}}}"

    target = rng.randint(200, 1500)
    return _sized(rng, target, lambda: block(1, True, ""), "\n")


# --------------------------------------------------------------------------------------------------
# the families
# --------------------------------------------------------------------------------------------------
FAMILIES: dict[str, Family] = {f.name: f for f in (
    Family("one_char_json", "JSON, every string character, digit and space a one-character terminal (GBNF style)",
           "document bytes", (256, 512, 1024, 2048, 4096), (64, 16384), 1024, ("chars", "regex"), json_grammar, json_sample,
           ("regex",)),
    Family("one_char_csv", "CSV, every field character a one-character terminal", "document bytes",
           (256, 512, 1024, 2048, 4096), (64, 16384), 1024, ("chars", "regex"), csv_grammar, csv_sample, ("regex",)),
    Family("one_char_ident_number", "identifiers and numbers spelled one character a terminal",
           "characters per item", (4, 8, 16, 32, 64), (1, 256), 16, ("chars", "regex"), ident_number_grammar,
           ident_number_sample, ("chars", "regex")),
    Family("ladder", "a C-style precedence ladder (ternary, binary levels, unary, call)", "binary levels",
           (5, 10, 15, 20, 25), (1, len(LADDER_LEVELS)), 15, ("ladder", "flat"), ladder_grammar, ladder_sample,
           ("ladder",)),
    Family("keywords", "keywords beside an identifier terminal that also matches them", "keywords",
           (10, 30, 100, 300, 1000), (1, 1000), 100, ("literals", "terminal"), keywords_grammar,
           keywords_sample, ("literals", "terminal")),
    Family("counted", "counted repetitions: UUIDs, n-digit digests, notes of at most n characters",
           "repetition count n", (8, 32, 64, 128, 256), (1, 256), 32, ("counted", "expanded"), counted_grammar,
           counted_sample, ("counted", "expanded")),
    Family("nested_regular", "strings with escapes and comments inside nested blocks", "nesting depth",
           (2, 4, 8, 16, 32), (1, 64), 8, ("regex", "composed"), nested_grammar, nested_sample,
           ("regex", "composed")),
)}

DEFAULT_POOL = 20


def _family(name: str) -> Family:
    if name not in FAMILIES:
        raise DataError(f"dataset shapes: unknown family {name!r}; valid: {', '.join(FAMILIES)} (dataset.family=...)")
    return FAMILIES[name]


def resolve(family: str, size=None, spelling=None, step=None) -> tuple[Family, int, str]:
    """The family, size and spelling a ``dataset=shapes`` node names (null size / spelling: the family's
    default; ``step``: the size at that index of the family's preset axis, :attr:`Family.sizes`; ``spelling``
    may also be an index into the family's spellings, so that one sweep covers every family); a value outside
    the family's choices raises :class:`DataError` naming them."""
    fam = _family(family)
    if step is not None:
        if size is not None:
            raise DataError(f"dataset shapes: give dataset.size or dataset.step, not both (size={size}, step={step})")
        if isinstance(step, bool) or not isinstance(step, int) or not 0 <= step < len(fam.sizes):
            raise DataError(f"dataset shapes: step {step!r} is not an index of family {fam.name}'s size axis "
                            f"{list(fam.sizes)}; set dataset.step=0..{len(fam.sizes) - 1}")
        size = fam.sizes[step]
    size = fam.default_size if size is None else size
    if isinstance(size, bool) or not isinstance(size, int) or not fam.size_range[0] <= size <= fam.size_range[1]:
        raise DataError(f"dataset shapes: family {fam.name}: size {size!r} ({fam.size_name}) is not an integer in "
                        f"{fam.size_range[0]}..{fam.size_range[1]}; set dataset.size=<n> in that range")
    spelling = fam.spellings[0] if spelling is None else spelling
    if isinstance(spelling, int) and not isinstance(spelling, bool) and 0 <= spelling < len(fam.spellings):
        spelling = fam.spellings[spelling]
    if spelling not in fam.spellings:
        raise DataError(f"dataset shapes: family {fam.name} has no spelling {spelling!r}; valid: "
                        f"{', '.join(fam.spellings)} (dataset.spelling=...)")
    return fam, size, spelling


def shape_grammar(family: str, size=None, spelling=None) -> GrammarSpec:
    """The Lark grammar of one family, size and spelling (start rule ``start``)."""
    fam, size, spelling = resolve(family, size, spelling)
    return GrammarSpec(name=f"shapes_{fam.name}_{size}_{spelling}", lark=fam.grammar(size, spelling), start="start")


def shape_samples(family: str, size=None, pool: int = DEFAULT_POOL) -> list[Sample]:
    """``pool`` samples of a family and size, the same for every spelling; ids ``<family>-<size>-<index>``."""
    fam, size, _ = resolve(family, size)
    return [Sample(f"{fam.name}-{size}-{i:03d}", fam.sample(size, random.Random(f"shapes:{fam.name}:{size}:{i}")))
            for i in range(int(pool))]


def load_shapes(dcfg, n=None, seed=0) -> Dataset:
    """``dataset=shapes`` (see the module docstring)."""
    fam, size, spelling = resolve(str(dcfg["family"]), dcfg.get("size"), dcfg.get("spelling"), dcfg.get("step"))
    pool = dcfg.get("pool", DEFAULT_POOL)
    if isinstance(pool, bool) or not isinstance(pool, int) or pool < 1:
        raise DataError(f"dataset shapes: pool {pool!r} is not a positive integer; set dataset.pool=<n>")
    grammar = shape_grammar(fam.name, size, spelling)
    samples = shape_samples(fam.name, size, pool)
    meta = {"shape": {"family": fam.name, "size": size, "spelling": spelling},
            "family_what": fam.what, "size_name": fam.size_name, "spellings": list(fam.spellings),
            "lalr_spellings": list(fam.lalr or ()), "pool": pool,
            # the flat spelling of a ladder is ambiguous (every operator sequence has Catalan many parses)
            "ambiguous": (fam.name, spelling) == ("ladder", "flat"),
            "source": f"generated by gcdbench.datasets.shapes (family={fam.name}, size={size}; same samples for "
                      "every spelling)"}
    return Dataset(name=grammar.name, grammar=grammar, samples=pick(samples, n, seed), meta=meta)


# -- registration (pyproject.toml, entry-point group gcdbench.datasets) --------------------------------------
from gcdbench.datasets.registry import loader  # noqa: E402 - the registry imports this module lazily, by name


@loader(family=("one_char_json", "the shape family: " + ", ".join(FAMILIES)),
        size=(None, "the family's size axis (levels, keywords, repetition count, bytes, depth); null: its default"),
        step=(None, "index into the family's preset size axis (5 sizes each; the sweep's axis); overrides null size"),
        spelling=(None, "one of the family's language-equivalent spellings, or its index (0, 1); null: its first"),
        pool=(DEFAULT_POOL, "samples generated (seeded by family, size and index); samples=N picks N of them"))
def shapes(name, dcfg, data_root, n, seed) -> Dataset:
    return load_shapes(dcfg, n=n, seed=seed)
