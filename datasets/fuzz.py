r"""``dataset=fuzz``: seeded random grammars and sentences of chosen lengths, to find engine cliffs.

:func:`generate_grammar` composes small Lark grammars (3-15 rules, start rule ``start``) from the templates of
:data:`TEMPLATES`, each one a construct real grammars use and engines handle differently:

* *leaves* (a new symbol from scratch): ``self_follow`` (a terminal that may follow itself with no separator,
  ``SYM+`` with ``SYM: /[a-z0-9][a-z0-9\-]*/``), ``kw_vs_name`` (``"select"i NAME`` next to a bare
  ``NAME: /[a-z_]+/``), ``num_vs_name`` (``NUMBER: /[0-9]+/`` vs ``IDENT: /[a-z0-9_]+/``), ``unicode``
  (``/\w+/``, ``/[α-ω]+/``), ``icase`` (``"true"i``), ``string_esc`` (``/"([^"\\]|\\.)*"/``);
* *combinators* (wrap an item: an earlier symbol, or an alternation of two): ``sep_list`` (``x ("," x)*``,
  bracketed or not), ``star_list`` (``x+``, ``"{" x* "}"``), ``nested`` (``n: x | "(" n* ")"``), ``nullable``
  (a rule with an empty alternative), ``left_rec`` (``l: l "+" x | x``), ``right_rec`` (``r: x "+" r | x``);
* ``ignore_ws``: the grammar ``%ignore``s ``/[ ]+/``, ``/[ \t]+/`` or ``/\s+/`` (else there is no ignored text).

Every symbol a grammar defines is reachable and productive, no terminal matches the empty string, and each
grammar has an unbounded combinator, so long targets are reachable.

:func:`sample_sentences` derives sentences of (about) a target number of terminals: minimum and maximum
terminal lengths are precomputed per symbol and rule, and each expansion gets a *budget* of terminals, picks
a rule whose length range holds it and splits the rest of the budget at random among the rule's symbols that
can grow. Terminals are realised by random walks over their automata (:mod:`gcdbench.parsers.regex_fsm`).
Sentences of up to :data:`LARK_CHECK_MAX` terminals are checked with ``Lark(grammar, parser="earley",
lexer="dynamic_complete")``; longer ones are sentences by construction (Lark takes minutes on them).
"""
from __future__ import annotations

import functools
import random
import re
import unicodedata
from dataclasses import dataclass, field

from gcdbench.datasets.base import Dataset, Sample, pick
from gcdbench.parsers.base import GrammarSpec

DEFAULT_LENGTHS = (10, 25, 50, 100, 200, 500)
#: the s-expression grammar of the "cliffs" issue: ``nested`` over ``self_follow``'s terminal, with ``ignore_ws``
SEXPR_GRAMMAR = r"""start: sexpr
?sexpr: atom | list
list: "(" sexpr* ")"
atom: SYMBOL
SYMBOL: /[a-z0-9][a-z0-9\-]*/
%ignore /[ ]+/
"""
SEXPR_SEED = -1   # generate_grammar(-1) is SEXPR_GRAMMAR


@dataclass(frozen=True)
class FuzzGrammar:
    seed: int
    lark: str
    templates: tuple[str, ...]    # template names used, in order of first use
    start: str = "start"

    def spec(self) -> GrammarSpec:
        return GrammarSpec(name=f"fuzz_{self.seed}", lark=self.lark, start=self.start)


# --------------------------------------------------------------------------------------------------
# grammar generation
# --------------------------------------------------------------------------------------------------
@dataclass
class _Builder:
    rules: list[str] = field(default_factory=list)
    terminals: list[str] = field(default_factory=list)
    n: int = 0

    def _name(self, base: str) -> str:
        self.n += 1
        return f"{base}{self.n}"

    def rule(self, base: str, body: str) -> str:
        """Define rule ``<base><k>: body`` (``{}`` in body stands for the rule's own name)."""
        name = self._name(base)
        self.rules.append(f"{name}: {body.replace('{}', name)}")
        return name

    def term(self, base: str, pattern: str) -> str:
        name = self._name(base.upper())
        self.terminals.append(f"{name}: {pattern}")
        return name


def _self_follow(b, rng):
    sym = b.term("SYM", rng.choice([r"/[a-z0-9][a-z0-9\-]*/", r"/[a-z]+/", r"/[a-z][a-z0-9_]*/"]))
    return b.rule("words", f"{sym}+")


def _kw_vs_name(b, rng):
    name = b.term("NAME", rng.choice([r"/[a-z_]+/", r"/[a-zA-Z_][a-zA-Z0-9_]*/"]))
    kws = rng.sample(["select", "from", "where", "and", "or", "not", "in", "as", "is", "let"], 2)
    flag = rng.choice(["i", ""])
    return b.rule("kw", " | ".join([f'"{k}"{flag} {name}' for k in kws] + [name]))


def _num_vs_name(b, rng):
    num = b.term("NUMBER", rng.choice([r"/[0-9]+/", r"/-?[0-9]+(\.[0-9]+)?/"]))
    ident = b.term("IDENT", rng.choice([r"/[a-z0-9_]+/", r"/[a-z_][a-z0-9_]*/"]))
    return b.rule("value", f"{num} | {ident}")


def _unicode(b, rng):
    word = b.term("UWORD", rng.choice([r"/\w+/", r"/[α-ω]+/", r"/[a-zà-ÿ]+/", r"/[\w-]+/"]))
    return b.rule("uni", rng.choice([word, f'{word} | {word} ":" {word}']))


def _icase(b, rng):
    words = rng.sample(["true", "false", "null", "abc", "begin", "end", "yes", "no"], rng.randint(1, 3))
    return b.rule("lit", " | ".join(f'"{w}"i' for w in words))


def _string_esc(b, rng):
    q = rng.choice(['"', "'"])
    return b.rule("str", b.term("STRING", rf"/{q}([^{q}\\]|\\.)*{q}/"))


def _sep_list(b, rng, x):
    sep = rng.choice([",", ";", "|", ":"])
    if rng.random() < 0.5:
        return b.rule("list", f'{x} ("{sep}" {x})*')
    lo, hi = rng.choice(["[]", "()", "<>"])
    return b.rule("list", f'"{lo}" [{x} ("{sep}" {x})*] "{hi}"')


def _star_list(b, rng, x):
    return b.rule("seq", rng.choice([f"{x}+", f'"{{" {x}* "}}"', f'{x} {x}*']))


def _nested(b, rng, x):
    lo, hi = rng.choice(["()", "[]", "{}"])
    return b.rule("nest", rng.choice([f'{x} | "{lo}" {{}}* "{hi}"', f'{x} | "{lo}" {{}}+ "{hi}"',
                                      f'{x} | "{lo}" {{}} ("," {{}})* "{hi}"']))


def _nullable(b, rng, x):
    if rng.random() < 0.5:
        tail = b.rule("tail", f'"{rng.choice("?!.=")}" {x} |')
        return b.rule("opt", f"{x} {tail}")
    mod = b.rule("mod", rng.choice(['"-" |', '"~" | "^" |', '|"@"']))
    return b.rule("opt", f"{mod} {x}")


def _left_rec(b, rng, x):
    op = rng.choice(['"+" ', '"-" ', '"*" ', '"." ', ""])
    return b.rule("lrec", f"{{}} {op}{x} | {x}")


def _right_rec(b, rng, x):
    op = rng.choice(['"+" ', '"^" ', '"=>" ', '"::" ', ""])
    return b.rule("rrec", f"{x} {op}{{}} | {x}")


LEAVES = {"self_follow": _self_follow, "kw_vs_name": _kw_vs_name, "num_vs_name": _num_vs_name,
          "unicode": _unicode, "icase": _icase, "string_esc": _string_esc}
COMBINATORS = {"sep_list": _sep_list, "star_list": _star_list, "nested": _nested, "nullable": _nullable,
               "left_rec": _left_rec, "right_rec": _right_rec}
UNBOUNDED = ("sep_list", "star_list", "nested", "left_rec", "right_rec")   # each makes the language infinite
IGNORES = (r"/[ ]+/", r"/[ \t]+/", r"/\s+/")
#: every template name a grammar may record
TEMPLATES = (*LEAVES, *COMBINATORS, "ignore_ws")


def _compose(rng: random.Random) -> tuple[str, tuple[str, ...]]:
    b = _Builder()
    used: list[str] = []
    open_syms: list[str] = []
    for name in rng.sample(list(LEAVES), rng.randint(1, 3)):
        open_syms.append(LEAVES[name](b, rng))
        used.append(name)
    n_comb = rng.randint(1, 4)
    combs = [rng.choice(UNBOUNDED)] + [rng.choice(list(COMBINATORS)) for _ in range(n_comb - 1)]
    rng.shuffle(combs)
    for name in combs:
        if len(open_syms) >= 2 and rng.random() < 0.3:   # an alternation of two earlier symbols as the item
            a, c = (open_syms.pop(rng.randrange(len(open_syms))) for _ in range(2))
            item = f"({a} | {c})"
        else:
            item = open_syms.pop(rng.randrange(len(open_syms)))
        open_syms.append(COMBINATORS[name](b, rng, item))
        used.append(name)
    rng.shuffle(open_syms)
    joiner = " " if rng.random() < 0.5 else " | "
    lines = [f"start: {joiner.join(open_syms)}", *b.rules, *b.terminals]
    if rng.random() < 0.6:
        lines.append(f"%ignore {rng.choice(IGNORES)}")
        used.append("ignore_ws")
    return "\n".join(lines) + "\n", tuple(dict.fromkeys(used))


@functools.lru_cache(maxsize=256)
def generate_grammar(seed: int) -> FuzzGrammar:
    """The random grammar of ``seed`` (the same text for the same seed); ``seed=-1`` gives :data:`SEXPR_GRAMMAR`."""
    if seed == SEXPR_SEED:
        return FuzzGrammar(seed, SEXPR_GRAMMAR, ("self_follow", "nested", "ignore_ws"))
    if seed < 0:
        raise ValueError(f"grammar seed {seed}: use a seed >= 0 (or {SEXPR_SEED} for the s-expression grammar)")
    rng = random.Random(f"fuzz-grammar:{seed}")
    while True:
        text, used = _compose(rng)
        if 3 <= sum(1 for ln in text.splitlines() if ln[:1].islower()) <= 15:
            return FuzzGrammar(seed, text, used)


# --------------------------------------------------------------------------------------------------
# length-aware derivation
# --------------------------------------------------------------------------------------------------
_INF = 1 << 30
#: sentences of at most this many terminals are checked by Lark's ``dynamic_complete`` parser itself. Longer ones
#: are sentences by construction (a derivation over Lark's own BNF rules, each piece checked with ``re``):
#: Lark's Earley is cubic on these ambiguous grammars (a 50-terminal sentence of self-following terminals can
#: take 20 s, and parsing even the *terminal sequence* of a 500-terminal one took 230 s)
LARK_CHECK_MAX = 30


@functools.lru_cache(maxsize=64)
def _lark(text: str, start: str = "start"):
    import lark

    return lark.Lark(text, parser="earley", lexer="dynamic_complete", start=start)


def lark_accepts(fg: FuzzGrammar, text: str) -> bool:
    """Whether Lark's Earley parser with the ``dynamic_complete`` lexer accepts ``text``."""
    import lark

    try:
        _lark(fg.lark, fg.start).parse(text)
        return True
    except lark.exceptions.LarkError:
        return False


def _pieces_ok(ir, pieces: list[tuple[str, str]]) -> bool:
    """Whether every ``(terminal, text)`` piece fully matches its terminal's regex (Python ``re``, as Lark
    matches) and the first piece is not ignored text; with the derivation that produced the terminals, this
    makes the concatenation a sentence of ``Lark(..., lexer="dynamic_complete")``, which tries every cut."""
    return (not pieces or pieces[0][0] not in ir.ignore) and all(
        re.fullmatch(ir.terminals[n].regex, text) for n, text in pieces)


class _Lengths:
    """Shortest and longest terminal counts of every symbol and rule of a grammar's BNF (``_INF``: unbounded),
    and for each nonterminal a rule of shortest length whose derivation terminates (least height)."""

    def __init__(self, ir, cap: int):
        self.ir, self.by = ir, ir.by_origin
        lo = {t: (1, 0) for t in ir.terminals}      # (shortest length, height of such a derivation)

        def rule_lo(r):
            return sum(lo[s][0] for s in r.expansion), 1 + max((lo[s][1] for s in r.expansion), default=0)

        changed = True
        while changed:   # (length, height) only decreases: stops
            changed = False
            for r in ir.rules:
                if all(s in lo for s in r.expansion) and (r.origin not in lo or rule_lo(r) < lo[r.origin]):
                    lo[r.origin], changed = rule_lo(r), True
        self.min = {s: v[0] for s, v in lo.items()}
        self.min_rule = {a: min(rs, key=rule_lo) for a, rs in self.by.items()}   # children are lower: terminates
        hi = {t: 1 for t in ir.terminals} | {a: 0 for a in self.by}
        changed = True
        while changed:    # grows by at least 1 per round on a cycle, so stops after about ``cap`` rounds
            changed = False
            for r in ir.rules:
                v = min(cap, sum(hi[s] for s in r.expansion))
                if v > hi[r.origin]:
                    hi[r.origin], changed = v, True
        self.max = {s: (_INF if v >= cap else v) for s, v in hi.items()}

    def rmin(self, rule) -> int:
        return sum(self.min[s] for s in rule.expansion)

    def rmax(self, rule) -> int:
        return min(_INF, sum(self.max[s] for s in rule.expansion))


@functools.lru_cache(maxsize=64)
def _analysis(text: str, start: str):
    from gcdbench.parsers.grammar import load_ir

    ir = load_ir(GrammarSpec(name="fuzz", lark=text, start=start))
    return ir, _Lengths(ir, cap=256)


class _Retry(Exception):
    pass


def _split(rng: random.Random, extra: int, room: list[int]) -> list[int]:
    """``extra`` split at random into parts ``part[i] <= room[i]`` (as much of it as fits)."""
    parts = [0] * len(room)
    grow = [i for i, r in enumerate(room) if r > 0]
    if not grow:
        return parts
    weights = {i: rng.expovariate(1.0) + 1e-9 for i in grow}
    total = sum(weights.values())
    for i in grow:
        parts[i] = min(room[i], int(extra * weights[i] / total))
    left = extra - sum(parts)
    while left > 0:
        grow = [i for i in grow if parts[i] < room[i]]
        if not grow:
            break
        parts[rng.choice(grow)] += 1
        left -= 1
    return parts


def _derive(ir, ln: _Lengths, target: int, rng: random.Random) -> list[str]:
    """Terminal names of a random derivation of ``ir.start`` with about ``target`` terminals."""
    out: list[str] = []
    stack = [(ir.start, target)]
    steps = 0
    while stack:
        sym, budget = stack.pop()
        if sym in ir.terminals:
            out.append(sym)
            continue
        steps += 1
        if steps > 20 * target + 1000:
            raise _Retry
        budget = max(ln.min[sym], min(budget, ln.max[sym]))
        if budget == ln.min[sym]:
            rule = ln.min_rule[sym]       # terminates: least height among the shortest
        else:
            rules = ln.by[sym]
            fits = [r for r in rules if ln.rmin(r) <= budget <= ln.rmax(r)]
            rule = rng.choice(fits) if fits else min(
                rules, key=lambda r: max(ln.rmin(r) - budget, budget - ln.rmax(r)))
        lo = [ln.min[s] for s in rule.expansion]
        room = [min(ln.max[s], target + 1) - m for s, m in zip(rule.expansion, lo)]
        parts = _split(rng, max(0, budget - sum(lo)), room)
        stack.extend(reversed([(s, m + p) for s, m, p in zip(rule.expansion, lo, parts)]))
    return out


# --------------------------------------------------------------------------------------------------
# realising terminals
# --------------------------------------------------------------------------------------------------
_ASCII = [chr(c) for c in range(0x20, 0x7F)]
_UNICODE_POOL = list("éèàçüöñøåαβγδλμπωЖжЯяДд中文字日本가")   # ordinary letters (no case-fold specials)
_WHITESPACE = (" ", " ", " ", "  ", "\t", "\n")


class _Walker:
    """Random strings of one terminal: walks over its character DFA, mostly printable ASCII, bounded length."""

    def __init__(self, name: str, regex: str, ignore_case: bool):
        from gcdbench.parsers.regex_fsm import byte_dfa

        self.dfa = byte_dfa(name, regex, ignore_case)
        fsm = self.fsm = self.dfa.char
        self.ranges: dict[int, list[tuple[int, int]]] = {}
        for i, (s, c) in enumerate(zip(fsm.starts, fsm.cls)):
            end = fsm.starts[i + 1] - 1 if i + 1 < len(fsm.starts) else 0x10FFFF
            if c >= 0:
                self.ranges.setdefault(c, []).append((s, end))
        dist = [0 if f else _INF for f in fsm.finals]    # characters to the nearest accepting state
        changed = True
        while changed:
            changed = False
            for s in range(fsm.n):
                d = min((dist[t] + 1 for t in fsm.trans[s] if t >= 0), default=_INF)
                if d < dist[s]:
                    dist[s], changed = d, True
        self.dist = dist
        self.dead_end = [all(t < 0 for t in row) for row in fsm.trans]
        self.pool = [[(ch, t) for ch in (*_ASCII, *_UNICODE_POOL) if (t := fsm.next(s, ch)) >= 0]
                     for s in range(fsm.n)]

    def _any_char(self, rng, state: int) -> tuple[str, int]:
        """A random character outside the pools (an assigned, non-control one, else :class:`_Retry`)."""
        classes = [c for c, t in enumerate(self.fsm.trans[state]) if t >= 0 and c in self.ranges]
        for _ in range(100):
            c = rng.choice(classes)
            ch = chr(rng.randint(*rng.choice(self.ranges[c])))
            if unicodedata.category(ch) not in ("Cn", "Co", "Cc", "Cs"):
                return ch, self.fsm.trans[state][c]
        raise _Retry

    def sample(self, rng: random.Random, max_chars: int = 8) -> str:
        """A string the terminal matches: stops at an accepting state with probability 0.35 per character, and
        heads for the nearest accepting state after ``max_chars`` characters."""
        s, out = self.fsm.start, []
        while True:
            if self.fsm.finals[s] and (len(out) >= max_chars or rng.random() < 0.35 or self.dead_end[s]):
                break
            moves = self.pool[s]
            if len(out) >= max_chars:    # head for the nearest accepting state
                moves = [m for m in moves if self.dist[m[1]] < self.dist[s]] or moves
            ascii_moves = [m for m in moves if m[0] < "\x80"]
            if ascii_moves and (rng.random() < 0.9 or len(ascii_moves) == len(moves)):
                ch, s = rng.choice(ascii_moves)
            elif moves:
                ch, s = rng.choice(moves)
            else:
                ch, s = self._any_char(rng, s)
            out.append(ch)
        text = "".join(out)
        assert self.dfa.fullmatch(text.encode("utf-8")), (self.fsm.name, text)
        return text


@functools.lru_cache(maxsize=1024)
def _walker(name: str, regex: str, ignore_case: bool) -> _Walker:
    return _Walker(name, regex, ignore_case)


def sample_sentence(fg: FuzzGrammar, target: int, rng: random.Random, tries: int = 20) -> tuple[str, int]:
    """A sentence of ``fg`` with about ``target`` terminals that Lark (``dynamic_complete``) accepts, and its
    number of terminals. Ignored text goes between terminals only (never first). Up to :data:`LARK_CHECK_MAX`
    terminals Lark parses the text itself; longer ones are sentences by construction (see the constant).
    Raises ``RuntimeError`` when ``tries`` attempts all fail."""
    ir, ln = _analysis(fg.lark, fg.start)
    ws = [(t, w) for w in _WHITESPACE for t in ir.ignore if re.fullmatch(ir.terminals[t].regex, w)]
    for _ in range(tries):
        try:
            terms = _derive(ir, ln, target, rng)
            for _ in range(4):   # the budget split can fall short (gaps in a symbol's lengths): keep the closest
                if abs(len(terms) - target) <= 0.1 * target:
                    break
                terms = min(terms, _derive(ir, ln, target, rng), key=lambda ts: abs(len(ts) - target))
            density = rng.choice((0.3, 0.7, 1.0))
            pieces = []
            for i, name in enumerate(terms):
                if i and ws and rng.random() < density:
                    pieces.append(rng.choice(ws))
                t = ir.terminals[name]
                pieces.append((name, _walker(name, t.regex, t.ignore_case).sample(rng)))
        except _Retry:
            continue
        text = "".join(p for _, p in pieces)
        if _pieces_ok(ir, pieces) and (len(terms) > LARK_CHECK_MAX or lark_accepts(fg, text)):
            return text, len(terms)
    raise RuntimeError(f"fuzz grammar {fg.seed}: no sentence of about {target} terminals in {tries} tries")


def sample_sentences(fg: FuzzGrammar, lengths=DEFAULT_LENGTHS, seed: int = 0) -> list[str]:
    """One sentence of ``fg`` per target length (in terminals), each accepted by Lark ``dynamic_complete``."""
    return [sample_sentence(fg, int(n), random.Random(f"fuzz-sentence:{fg.seed}:{n}:{seed}"))[0] for n in lengths]


def mutate(sentence: str, rng: random.Random) -> str:
    """One or two small random edits (insert, delete or replace a character; swap two adjacent chunks), for
    differential tests: the result is often, not always, outside the language."""
    chars = list(sentence)
    alphabet = sorted(set(sentence)) + list(" ,;()[]\"'\\xZ9_-é")
    for _ in range(rng.randint(1, 2)):
        op, i = rng.random(), rng.randrange(len(chars) + 1)
        if op < 0.3 or not chars:
            chars.insert(i, rng.choice(alphabet))
        elif op < 0.55:
            del chars[min(i, len(chars) - 1)]
        elif op < 0.8 or len(chars) < 3:
            chars[min(i, len(chars) - 1)] = rng.choice(alphabet)
        else:
            a, b = sorted(rng.sample(range(len(chars) + 1), 2))
            c = rng.randint(b, min(len(chars), b + (b - a)))
            chars[a:c] = chars[b:c] + chars[a:b]
    return "".join(chars)


# --------------------------------------------------------------------------------------------------
# the dataset
# --------------------------------------------------------------------------------------------------
REFERENCE_CHECK_MAX = 100   # samples up to this many terminals are also checked with the reference checker (~1 s)


def load_fuzz_dataset(dcfg, n=None, seed=0) -> Dataset:
    """``dataset=fuzz``: the grammar of ``grammar_seed`` and ``per_length`` sentences per target length in
    ``lengths`` (terminals), shortest first, ids ``g<seed>-L<target>-<k>``. Every sample is accepted by Lark's
    ``dynamic_complete`` Earley parser; those of at most :data:`REFERENCE_CHECK_MAX` terminals are also checked
    with the reference checker (the harness's language)."""
    gseed = int(dcfg["grammar_seed"])
    lengths = sorted({int(x) for x in dcfg["lengths"]})
    per_length = int(dcfg["per_length"])
    if not lengths or lengths[0] < 1 or per_length < 1:
        raise ValueError(f"dataset fuzz: lengths must be positive integers and per_length >= 1, got {lengths}, "
                         f"{per_length}")
    fg = generate_grammar(gseed)
    spec = fg.spec()
    ref = None
    rows = []
    for target in lengths:
        for k in range(per_length):
            text, count = sample_sentence(fg, target, random.Random(f"fuzz-sentence:{gseed}:{target}:{k}"))
            if count <= REFERENCE_CHECK_MAX:
                if ref is None:
                    from gcdbench.parsers.reference import ReferenceChecker

                    ref = ReferenceChecker(spec)
                if not ref.is_sentence(text.encode("utf-8")):
                    raise RuntimeError(f"fuzz grammar {gseed}: Lark accepts {text!r}, the reference does not")
            sid = f"g{gseed:04d}-L{target:03d}-{k}" if gseed >= 0 else f"gsexpr-L{target:03d}-{k}"
            rows.append((target, count, Sample(sid, text)))
    rows.sort(key=lambda r: (r[0], r[1], r[2].id))
    meta = {"grammar_seed": gseed, "lark": fg.lark, "templates": list(fg.templates), "lengths": lengths,
            "per_length": per_length, "terminals": {s.id: {"target": t, "actual": c} for t, c, s in rows},
            "source": f"generated by gcdbench.datasets.fuzz (grammar_seed={gseed})"}
    return Dataset(name=f"fuzz_{gseed}", grammar=spec, samples=pick([r[2] for r in rows], n, seed), meta=meta)


# -- registration (pyproject.toml, entry-point group gcdbench.datasets) --------------------------------------
from gcdbench.datasets.registry import loader  # noqa: E402 - the registry imports this module lazily, by name


@loader(grammar_seed=(0, "which grammar (-1: the s-expression grammar SEXPR_GRAMMAR)"),
        lengths=(list(DEFAULT_LENGTHS), "target sentence lengths in terminals (actual counts are within about 15%)"),
        per_length=(1, "sentences per target length"))
def fuzz(name, dcfg, data_root, n, seed) -> Dataset:
    return load_fuzz_dataset(dcfg, n=n, seed=seed)
