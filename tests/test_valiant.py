"""Engine ``valiant``: CNF, chart (packed vs readable, ANCESTOR invariant vs brute force), exact masks vs a
brute-force oracle and vs the reference checker, tokens spanning several terminals, the disk cache."""
from __future__ import annotations

import functools
import itertools
import random
import re
from pathlib import Path

import numpy as np
import pytest

from gcdbench.parsers.base import GrammarSpec, allocate_mask, mask_get, mask_to_ids
from gcdbench.parsers.grammar import load_ir
from gcdbench.parsers.tokenizers import Tokenizer, byte_level
from gcdbench.parsers.valiant.chart import PackedGrammar, ReadableChart, words
from gcdbench.parsers.valiant.cnf import to_cnf
from gcdbench.parsers.valiant.chart_store import ARRAYS, START
from gcdbench.parsers.valiant.engine import ChartStore, ValiantEngine

GDIR = Path(__file__).parent / "grammars"

GRAMMARS = {
    # ambiguous + left-recursive, %ignore
    "ambiguous": (GDIR / "ambiguous.lark").read_text(),
    # keywords vs NAME regex, strings, numbers, %ignore, optional parts
    "tiny_sql": (GDIR / "tiny_sql.lark").read_text(),
    # empty rules, nullable start, left and right recursion, a multi-char regex that overlaps a literal
    "nullable": r"""
start: item*
item: "ab" | WORD "!" | "(" start ")" | item "," item
WORD: /[a-b]+/
%ignore " "
""",
    # unicode terminals, case-insensitive literal, multi-byte characters split across tokens
    "unicode": r"""
start: greet (SEP greet)*
greet: "héllo"i NAME? | "€" NUM
NAME: /[a-zé€]+/
NUM: /[0-9]+(\.[0-9]+)?/
SEP: /;|→/
%ignore /[ \t]+/
""",
    # a terminal that may follow itself (issue 25's cliff): "list-vector" is 1 to 11 SYMBOLs, so the cuts of a
    # sentence grow exponentially; one chart node per boundary keeps the state polynomial
    "sexpr": r"""
start: sexpr
?sexpr: atom | list
list: "(" sexpr* ")"
atom: SYMBOL
SYMBOL: /[a-z0-9][a-z0-9\-]*/
%ignore /[ ]+/
""",
    # interchangeable literals (compiled.terminal_classes): "abc", "b", "ca" have the same parents (kw) and are one
    # terminal class in the chart, "+" and "-" another; "ab" is in kw and op, so in neither; the literals overlap
    # one another and NAME, so a piece may be several of them at once
    "classes": r"""
start: stmt+
stmt: kw NAME* ";" | op NAME ";"
kw: "ab" | "abc" | "b" | "ca"
op: "+" | "-" | "ab"
NAME: /[a-c]+/
%ignore " "
""",
    # overlapping terminals that may follow one another and themselves (fuzz grammar 18's kind): a word of k
    # letters has about 3^k terminal sequences, so walks over the cap go on merged boundaries (align.py)
    "overlap": r"""
start: item+
item: NAME | IDENT | NUM | "is"i NAME | "{" item* "}"
NAME: /[a-z_]+/
IDENT: /[a-z0-9_]+/
NUM: /[0-9]+/
%ignore /\s+/
""",
    # terminals that end in one shared tail (Go's punctuation and statement ends carry its comment and line-break
    # tail): their lexer states share residual classes, and the alignment keeps one token list per class
    "tails": r"""
start: stmt+
stmt: NAME+ SEMI | NUM DOT
SEMI: /;(#[a-z ]*\n)?/
DOT: /\.(#[a-z ]*\n)?/
NAME: /[a-z]+/
NUM: /[0-9]+/
%ignore " "
""",
}


def spec(name: str) -> GrammarSpec:
    return GrammarSpec(name=name, lark=GRAMMARS[name])


# ----------------------------------------------------------------------------------------------
# brute-force oracle, independent of the engine and of the reference: segmentations with Python re,
# terminal sequences recognised by a span fixpoint over the original (un-normalised) rules
# ----------------------------------------------------------------------------------------------
class BruteForce:
    def __init__(self, grammar: GrammarSpec):
        ir = load_ir(grammar)
        self.ir = ir
        self.regex = {n: re.compile(t.regex) for n, t in ir.terminals.items()}
        self.ignore = set(ir.ignore)
        self._cells: dict = {}

    @functools.lru_cache(maxsize=None)
    def derives(self, seq: tuple) -> bool:
        """Is the terminal sequence derivable from start? (span DP with a fixpoint per span)"""
        n = len(seq)
        rules = self.ir.rules
        cell: dict[tuple[int, int], set] = {}
        for length in range(0, n + 1):
            for i in range(0, n - length + 1):
                j = i + length
                got: set = set()
                changed = True
                while changed:
                    changed = False
                    for r in rules:
                        if r.origin not in got and self._match(r.expansion, i, j, cell, got, seq, i):
                            got.add(r.origin)
                            changed = True
                cell[i, j] = got
        self._cells[seq] = cell
        return self.ir.start in cell[0, n]

    def _match(self, exp, a, j, cell, cur, seq, i) -> bool:
        """Does ``exp`` derive seq[a:j]? Spans equal to the one being computed, (i, j), use ``cur``."""
        if not exp:
            return a == j
        y = exp[0]
        for k in range(a, j + 1):
            if (a, k) == (i, j):
                ok = y in cur or (k - a == 1 and seq[a] == y)
            else:
                ok = y in cell[a, k] or (k - a == 1 and seq[a] == y)
            if ok and self._match(exp[1:], k, j, cell, cur, seq, i):
                return True
        return False

    @functools.lru_cache(maxsize=None)
    def viable_seq(self, seq: tuple) -> bool:
        """Is some ``seq + w`` derivable? P[i] = symbols X with X =>* seq[i:] w (fixpoint per i, from the end)."""
        n = len(seq)
        self.derives(seq)   # fills self._cell for seq
        cell = self._cells[seq]
        rules = self.ir.rules
        P = {n: set(self.ir.terminals) | {r.origin for r in rules}}   # the grammar is reduced: all productive
        for i in range(n - 1, -1, -1):
            got = {seq[i]} if i == n - 1 else set()
            changed = True
            while changed:
                changed = False
                for r in rules:
                    if r.origin not in got and self._pmatch(r.expansion, i, cell, P, got, seq):
                        got.add(r.origin)
                        changed = True
            P[i] = got
        return self.ir.start in P[0]

    def _pmatch(self, exp, a, cell, P, cur, seq) -> bool:
        """exp = Y1..Yk: some Y_l prefix-derives seq[k:], Y1..Y_{l-1} derive seq[a:k] exactly."""
        n = len(seq)
        if not exp:
            return False
        y = exp[0]
        if y in (cur if a not in P else P[a]):
            return True
        for k in range(a, n + 1):
            full = y in cell.get((a, k), ()) or (k - a == 1 and seq[a] == y)
            if full and k > a and self._pmatch(exp[1:], k, cell, P, cur if k == a else P.get(k, cur), seq):
                return True
            if full and k == a and self._pmatch(exp[1:], k, cell, P, cur, seq):
                return True
        return False

    def sequences(self, text: str):
        """All terminal sequences of the ways to cut ``text`` (no ignored piece first)."""
        out = set()

        def rec(pos, acc):
            if pos == len(text):
                out.add(tuple(acc))
                return
            for end in range(pos + 1, len(text) + 1):
                piece = text[pos:end]
                for name, rx in self.regex.items():
                    if rx.fullmatch(piece):
                        if name in self.ignore:
                            if acc:
                                rec(end, acc)
                        else:
                            rec(end, acc + [name])

        rec(0, [])
        return out

    def is_sentence(self, text: str) -> bool:
        return any(self.derives(s) for s in self.sequences(text))


def test_bruteforce_oracle_sanity():
    bf = BruteForce(spec("ambiguous"))
    assert bf.is_sentence("a+b") and bf.is_sentence("(a b)c") and not bf.is_sentence("a+") and not bf.is_sentence(" a")
    assert bf.is_sentence("a ") and bf.is_sentence("a  +  b")


# ----------------------------------------------------------------------------------------------
# CNF
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(GRAMMARS))
def test_cnf_shape(name):
    cnf = to_cnf(load_ir(spec(name)))
    nn = len(cnf.nonterminals)
    lefts = {a for _, a, _ in cnf.binary}
    assert lefts == set(range(cnf.n_left))                     # left-capable nonterminals come first
    assert [a for _, a, _ in cnf.binary] == sorted(a for _, a, _ in cnf.binary)   # rules sorted by left child
    assert all(0 <= p < nn and 0 <= b < nn for p, _, b in cnf.binary)
    c = cnf.counts()
    assert c["binary_rules"] == len(cnf.binary) and c["left_nonterminals"] == cnf.n_left


@pytest.mark.parametrize("name", ["ambiguous", "nullable", "tiny_sql"])
def test_cnf_same_language_on_terminal_sequences(name):
    """CNF (readable chart) and the original rules agree on every terminal sequence up to length 4."""
    sp = spec(name)
    ir = load_ir(sp)
    cnf = to_cnf(ir)
    bf = BruteForce(sp)
    idx = {t: i for i, t in enumerate(cnf.terminals)}
    terms = sorted(set(cnf.terminals))
    assert cnf.start_nullable == bf.derives(())
    for n in range(1, 5 if len(terms) < 8 else 3):
        for seq in itertools.product(terms, repeat=n):
            ch = ReadableChart(cnf)
            for t in seq:
                ch.push(idx[t])
            assert ch.accepts() == bf.derives(seq), seq


# ----------------------------------------------------------------------------------------------
# chart: ANCESTOR invariant, packed == readable
# ----------------------------------------------------------------------------------------------
def _viable_terminal_seq(bf, seq, terms, extra):
    return any(bf.derives(seq + tail) for k in range(extra + 1) for tail in itertools.product(terms, repeat=k))


@pytest.mark.parametrize("name", ["ambiguous", "nullable"])
def test_ancestor_expect_matches_bruteforce(name):
    """EXPECT[m] = {a : t_0..t_{m-1} a is a viable terminal prefix} (bounded brute-force completion)."""
    sp = spec(name)
    cnf = to_cnf(load_ir(sp))
    bf = BruteForce(sp)
    terms = cnf.terminals
    rng = random.Random(0)
    for trial in range(25):
        ch = ReadableChart(cnf)
        seq = ()
        for step in range(6):
            want = {i for i, a in enumerate(terms) if bf.viable_seq(seq + (a,))}
            assert want >= {i for i, a in enumerate(terms) if _viable_terminal_seq(bf, seq + (a,), terms, 2)}
            assert set(ch.expect[-1]) == want, (seq, ch.expect[-1], want)
            if not want:
                break
            a = rng.choice(sorted(want))
            ch.push(a)
            seq = seq + (terms[a],)
            assert ch.accepts() == bf.derives(seq)


def _ancestors_bruteforce(cnf, prefix: tuple) -> set:
    """{X : S =>*_lm prefix X gamma} by leftmost expansion of sentential forms cut after len(prefix)+1
    symbols (every CNF nonterminal derives at least one terminal, so the cut loses nothing)."""
    m = len(prefix)
    by_left = {}
    for p_, a, b in cnf.binary:
        by_left.setdefault(p_, []).append((a, b))
    unary = {}
    for p_, t in cnf.unary:
        unary.setdefault(p_, set()).add(t)
    out, seen = set(), set()
    todo = [((cnf.start,), 0)] if cnf.start >= 0 else []   # (form of nonterminals, terminals matched)
    while todo:
        form, i = todo.pop()
        if (form, i) in seen:
            continue
        seen.add((form, i))
        if not form:
            continue
        x, rest = form[0], form[1:]
        if i == m:
            out.add(x)
        for a, b in by_left.get(x, ()):
            todo.append((((a, b) + rest)[: m - i + 1], i))
        if i < m and prefix[i] in unary.get(x, ()):
            todo.append((rest, i + 1))
    return out


@pytest.mark.parametrize("name", ["ambiguous", "nullable", "tiny_sql"])
def test_ancestor_sets_match_bruteforce(name):
    """The ANCESTOR invariant itself: X in ANC[m] iff S =>* t_0..t_{m-1} X gamma."""
    cnf = to_cnf(load_ir(spec(name)))
    rng = random.Random(3)
    for trial in range(15):
        ch = ReadableChart(cnf)
        seq = ()
        for step in range(6):
            assert ch.anc[-1] == _ancestors_bruteforce(cnf, seq), seq
            exp = sorted(ch.expect[-1])
            if not exp:
                break
            t = rng.choice(exp)
            ch.push(t)
            seq += (t,)


def _same_chart(st, node, ch, g) -> None:
    """The packed chart node ``node`` of ``st`` holds what the readable chart ``ch`` holds at its end: EXPECT, ANC,
    acceptance and the last tier (left-capable rows)."""
    assert st.expected(node) == sorted(ch.expect[-1])
    anc = st.mem[st.p_off[node]: st.p_off[node] + g.WN]
    bits = np.unpackbits(anc.view(np.uint8), bitorder="little")[: g.n_nt]
    assert set(np.flatnonzero(bits).tolist()) == ch.anc[-1]
    n = len(ch.tiers) - 1
    if n < 0:
        return
    assert st.accept[node] == ch.accepts()
    W = words(n + 1)
    tier = st.mem[st.tier_off[node]: st.tier_off[node] + g.n_left * W].reshape(g.n_left, W)
    for a in range(g.n_left):
        rows = np.unpackbits(tier[a].view(np.uint8), bitorder="little")[: n + 1]
        assert set(np.flatnonzero(rows).tolist()) == {r for r in range(n + 1) if a in ch.tiers[n][r]}, (n, a)


@pytest.mark.parametrize("name", sorted(GRAMMARS))
def test_packed_chart_equals_readable(name):
    cnf = to_cnf(load_ir(spec(name)))
    g = PackedGrammar.from_cnf(cnf)
    rng = random.Random(1)
    for trial in range(10):
        ch = ReadableChart(cnf)
        st = ChartStore(g)
        node = 0
        for step in range(12):
            _same_chart(st, node, ch, g)
            exp = sorted(ch.expect[-1])
            if not exp:
                break
            t = rng.choice(exp)
            ch.push(t)
            node = st.child(node, t)
        _same_chart(st, node, ch, g)


@pytest.mark.parametrize("name,only", [("ambiguous", "ATOM"), ("ambiguous", None), ("sexpr", None)])
def test_packed_chart_equals_readable_past_two_words(name, only):
    """Prefixes of more than 128 terminals (a column of three words: the step's full-column skips, the early end
    of its split loop and the unfiltered rows of nonterminals in every ancestor set apply only there) equal the
    readable chart at every step from 120 on. ``only``: walk that terminal alone (a run of atoms: every column
    of the ambiguous grammar fills, so the split loop ends at its first rows); else random expected terminals
    after which the prefix goes on."""
    cnf = to_cnf(load_ir(spec(name)))
    g = PackedGrammar.from_cnf(cnf)
    rng = random.Random(3)
    ch, st, node = ReadableChart(cnf), ChartStore(g), 0
    for step in range(140):
        exp = [cnf.terminals.index(only)] if only is not None else sorted(ch.expect[-1])
        rng.shuffle(exp)
        t = next(t for t in exp if st.expected(st.child(node, t)))    # a terminal the sentence goes on after
        ch.push(t)
        node = st.child(node, t)
        if step >= 120:
            _same_chart(st, node, ch, g)
    n = len(ch.tiers) - 1
    assert words(n + 1) == 3
    if only is not None:      # the case the skips are for: some column of the last tier is full
        assert any(all(v in ch.tiers[n][r] for r in range(n + 1)) for v in range(len(cnf.nonterminals)))


# ----------------------------------------------------------------------------------------------
# masks
# ----------------------------------------------------------------------------------------------
def _ids(engine, vocab_size):
    m = allocate_mask(vocab_size)
    engine.fill_mask(m)
    return set(mask_to_ids(m, vocab_size).tolist())


def _engine(sp, tok, tmp_path=None, **opts):
    e = ValiantEngine(cache=False, **opts)
    e.compile(sp, tok)
    return e


ALPHABETS = {"ambiguous": "ab+() ", "nullable": "ab!(), ", "unicode": "hé€1;→ ", "tiny_sql": "sf ',*(1"}


@pytest.mark.parametrize("name", ["ambiguous", "nullable", "unicode"])
def test_masks_match_bruteforce(name):
    """Byte-level vocabulary; prefixes over a small alphabet. Allowed bytes must be those the brute force
    finds viable (completion searched over the alphabet up to a bound, so only check 'allowed => viable'
    exactly and 'viable => allowed' on what the bound finds)."""
    sp = spec(name)
    tok = byte_level()
    e = _engine(sp, tok)
    bf = BruteForce(sp)
    alpha = ALPHABETS[name]

    @functools.lru_cache(maxsize=None)
    def viable(prefix: bytes, depth: int) -> bool:
        try:
            text = prefix.decode()
        except UnicodeDecodeError:
            return any(viable(prefix + c.encode()[1:], depth) for c in alpha if len(c.encode()) > 1
                       and prefix.endswith(c.encode()[:1]))
        if bf.is_sentence(text):
            return True
        return depth > 0 and any(viable(prefix + c.encode(), depth - 1) for c in alpha)

    rng = random.Random(2)
    for trial in range(6):
        e.reset()
        prefix = b""
        for step in range(4):
            got = _ids(e, tok.vocab_size)
            assert (tok.eos_id in got) == bf.is_sentence(prefix.decode("utf-8", "replace")) if _utf8_ok(prefix) else True
            for c in alpha:
                b = c.encode()
                if viable(prefix + b, 3):
                    assert b[0] in got, (prefix, c)
            cands = [b for b in got if b != tok.eos_id and bytes([b]).decode("latin-1") in alpha]
            if not cands:
                break
            b = rng.choice(sorted(cands))
            assert e.commit(b)
            prefix += bytes([b])


def _utf8_ok(b: bytes) -> bool:
    try:
        b.decode()
        return True
    except UnicodeDecodeError:
        return False


def _reference():
    try:
        from gcdbench.parsers.reference import ReferenceChecker
    except ImportError:  # pragma: no cover
        pytest.skip("reference checker not available")
    return ReferenceChecker


SAMPLES = {
    "ambiguous": ["a+b", "a b c", "(a+b)c+a", "((a))"],
    "tiny_sql": ["select a from t", "SELECT a, b FROM t WHERE c = 'x y'", "select count(*) from t;"],
    "nullable": ["", "ab", "ab!, (ab)", "(( ab ))", "a!,b!"],
    "unicode": ["héllo é", "HÉLLO€ ; € 3.5", "€1→héllo"],
    "sexpr": ["(f x)", "((f x a) uu (list-vector 9 ab) (f x a) uu)", "(ab-c  (d) e)"],
    "overlap": ["isab_c9", "{ab12 cd}is x", "a1b2c3d {{e}} IS  f_g"],
    "classes": ["ab c;", "abc ab;+ b;", "b;ca abc b;- ca;", "ab;ab ab;ca;"],
    "tails": ["ab;", "a b;#x y\n1.", "ab cd;#\n12.#c\nx;"],
}


@pytest.mark.parametrize("name", sorted(GRAMMARS))
def test_masks_equal_reference_bytes(name):
    """Every step of every sample, full byte-level mask == the reference checker's."""
    Ref = _reference()
    sp = spec(name)
    tok = byte_level()
    e = _engine(sp, tok)
    ref = Ref(sp)
    for text in SAMPLES[name]:
        data = text.encode()
        e.reset()
        for i in range(len(data) + 1):
            want = ref.allowed_tokens(data[:i], range(tok.vocab_size), tok)
            assert _ids(e, tok.vocab_size) == want, (text, data[:i])
            if i < len(data):
                assert e.commit(data[i])


def multi_tokenizer(texts, extra=()) -> Tokenizer:
    """256 byte tokens + every substring (length 2..5) of the texts + extra tokens, then EOS."""
    subs = set(extra)
    for t in texts:
        b = t.encode()
        for i in range(len(b)):
            for k in range(2, 6):
                if i + k <= len(b):
                    subs.add(b[i:i + k])
    toks = [bytes([i]) for i in range(256)] + sorted(subs)
    enc_vocab = {b: i for i, b in enumerate(toks)}

    def encode(s):   # greedy longest match, good enough for tests
        b = s.encode()
        out, i = [], 0
        while i < len(b):
            for k in range(min(5, len(b) - i), 0, -1):
                if b[i:i + k] in enc_vocab:
                    out.append(enc_vocab[b[i:i + k]])
                    i += k
                    break
        return out

    return Tokenizer(name="test-multi-" + str(len(toks)), token_bytes=toks + [b""], eos_id=len(toks),
                     special_ids={"<eos>": len(toks)}, _encoder=encode)


@pytest.mark.parametrize("token_states", [256, 2, 1])
@pytest.mark.parametrize("name", sorted(GRAMMARS))
def test_masks_equal_reference_multibyte_tokens(name, token_states):
    """Tokens spanning several terminals (e.g. "');" or "(a+"), split UTF-8 characters, ignored runs. With
    ``token_states`` 1 or 2 the walks of most multi-terminal tokens go on merged boundaries (align.py)."""
    Ref = _reference()
    sp = spec(name)
    tok = multi_tokenizer(SAMPLES[name], extra=[b"');", b"))", b"  ", b"\xc3", b"\xa9llo", b"\x82\xac1"])
    e = _engine(sp, tok, token_states=token_states)
    merged = e.comp.meta["merged_nodes"]
    if token_states == 1 and name != "ambiguous":   # (ambiguous: one-byte terminals, no walk holds two states)
        assert merged > 0
    if name == "overlap":
        assert (merged > 0) == (token_states < 256)
    ref = Ref(sp)
    ids = range(tok.vocab_size)
    for text in SAMPLES[name]:
        e.reset()
        prefix = b""
        for t in tok.encode(text):
            want = ref.allowed_tokens(prefix, ids, tok)
            assert _ids(e, tok.vocab_size) == want, (text, prefix)
            assert e.commit(t)
            prefix += tok.token_bytes[t]
        assert _ids(e, tok.vocab_size) == ref.allowed_tokens(prefix, ids, tok)
        assert tok.eos_id in _ids(e, tok.vocab_size)


def test_rejects_and_refuses():
    tok = byte_level()
    e = _engine(spec("tiny_sql"), tok)
    got = _ids(e, tok.vocab_size)
    assert ord(" ") not in got and tok.eos_id not in got   # no leading ignored text, not a sentence
    assert not e.commit(ord(" "))
    e.reset()
    assert not e.commit(tok.eos_id)


def test_disk_cache_roundtrip(tmp_path):
    tok = byte_level()
    sp = spec("tiny_sql")
    e1 = ValiantEngine(cache_dir=str(tmp_path))
    e1.compile(sp, tok)
    assert not e1.info()["cache_hit"]
    e2 = ValiantEngine(cache_dir=str(tmp_path))
    e2.compile(sp, tok)
    assert e2.info()["cache_hit"]
    for e in (e1, e2):
        for b in b"select a":
            assert e.commit(b)
    assert _ids(e1, tok.vocab_size) == _ids(e2, tok.vocab_size)
    assert e2.info()["cnf"] == e1.info()["cnf"]


def test_registry():
    from gcdbench.parsers.registry import engine_class

    assert engine_class("valiant") is ValiantEngine


# ----------------------------------------------------------------------------------------------
# token tuples: the numba builder == the readable Python builder (up to trie node numbering)
# ----------------------------------------------------------------------------------------------
def _canonical(al):
    def seq(v):
        """The node as its path: a terminal per level, or a merged boundary's (row, terminal) edges."""
        out = []
        while v > 0:
            lo, hi = al.merge_start[v], al.merge_start[v + 1]
            out.append(int(al.node_term[v]) if hi == lo else
                       tuple(zip(al.merge_row[lo:hi].tolist(), al.merge_term[lo:hi].tolist())))
            v = int(al.node_parent[v])
        return tuple(reversed(out))

    G = al.call_start.size - 1
    res = {
        f"bnd{f}": {(seq(v), int(t)) for v in range(al.n_nodes)
                    for t in al.bnd_tok[f][al.bnd_start[f, v]:al.bnd_start[f, v + 1]]}
        for f in range(2)
    }
    res["call"] = {(x, int(t)) for x in range(G) for t in al.call_tok[al.call_start[x]:al.call_start[x + 1]]}
    res["cont"] = {(x, seq(int(al.cont_nodes[g])), int(t)) for x in range(G)
                   for g in range(al.cont_xstart[x], al.cont_xstart[x + 1])
                   for t in al.cont_tok[al.cont_nstart[g]:al.cont_nstart[g + 1]]}
    res["children"] = {(seq(u), seq(int(c))) for u in range(al.n_nodes)
                       for c in al.child_ids[al.child_start[u]:al.child_start[u + 1]]}
    return res


@pytest.mark.parametrize("name", sorted(GRAMMARS))
def test_numba_aligner_equals_python_aligner(name):
    from gcdbench.parsers.valiant.align import Aligner
    from gcdbench.parsers.valiant.align_nb import build_alignment
    from gcdbench.parsers.valiant.lexer import build_lexer

    sp = spec(name)
    ir = load_ir(sp)
    cnf = to_cnf(ir)
    lex = build_lexer(ir, cnf.terminals)
    tok = multi_tokenizer(SAMPLES[name], extra=[b"');", b"))", b"  ", b"\xc3", b"\xa9llo", b"\x82\xac1"])
    for cap in (256, 2):
        a = Aligner(lex, cnf.follow, cap).build(tok.token_bytes, tok.eos_id)
        b = build_alignment(lex, cnf.follow, tok.token_bytes, tok.eos_id, cap)
        assert a.n_nodes == b.n_nodes
        assert _canonical(a) == _canonical(b)


def test_residual_classes_merge_equal_states_only():
    """Moore's classes of the union DFA: the shared tails of ``tails`` merge (across terminals, whatever each
    accepts), states that read different strings do not, and a DFA without equal residuals keeps the identity."""
    from gcdbench.parsers.valiant.lexer import build_lexer, residual_classes

    ir = load_ir(spec("tails"))
    lex = build_lexer(ir, to_cnf(ir).terminals)
    G, cls = lex.n_states, lex.x_class
    assert lex.n_classes < G
    words_ = [bytes(w) for k in range(4) for w in itertools.product(b";.#a1 \n", repeat=k)]

    def run(x, w):          # -1: dead; else (state, final)
        for b in w:
            x = int(lex.trans[x, b])
            if x < 0:
                return -1
        return bool(lex.accept[x])

    for x in range(G):
        for y in range(x + 1, G):
            same = all(run(x, w) == run(y, w) for w in words_)
            assert (cls[x] == cls[y]) == same, (x, y)
    # SEMI's and DOT's states after their first byte are one class, though their terminals differ
    semi, dot = lex.names.index("SEMI"), lex.names.index("DOT")
    after = [int(lex.trans[lex.start_of[semi], ord(";")]), int(lex.trans[lex.start_of[dot], ord(".")])]
    assert cls[after[0]] == cls[after[1]] and lex.term_of[after[0]] != lex.term_of[after[1]]
    distinct = np.array([[1, -1], [-1, 2], [-1, -1]], np.int32).repeat(128, axis=1)
    assert residual_classes(distinct, np.array([False, False, True])).tolist() == [0, 1, 2]


@pytest.mark.parametrize("name", ["tails", "tiny_sql", "overlap"])
def test_alignment_per_class_equals_per_state(name):
    """The token lists kept once per residual class are the lists each lexer state of the class would have on its
    own (an alignment built with one class per state)."""
    import dataclasses

    from gcdbench.parsers.valiant.align_nb import build_alignment
    from gcdbench.parsers.valiant.lexer import build_lexer

    ir = load_ir(spec(name))
    cnf = to_cnf(ir)
    lex = build_lexer(ir, cnf.terminals)
    own = dataclasses.replace(lex, x_class=np.arange(lex.n_states, dtype=np.int32))
    tok = multi_tokenizer(SAMPLES[name], extra=[b"');", b"))", b"  ", b";#", b"\n1"])
    per_state = _canonical(build_alignment(own, cnf.follow, tok.token_bytes, tok.eos_id))
    shared = _canonical(build_alignment(lex, cnf.follow, tok.token_bytes, tok.eos_id))
    cls = lex.x_class.tolist()
    assert {(cls[x], t) for x, t in per_state["call"]} == shared["call"]
    assert {(cls[x], v, t) for x, v, t in per_state["cont"]} == shared["cont"]
    for k in ("call", "cont"):   # and every state of a class has the class's whole list
        by_state = {}
        for x, *rest in per_state[k]:
            by_state.setdefault(x, set()).add(tuple(rest))
        for x in range(lex.n_states):
            assert by_state.get(x, set()) == {tuple(r) for c, *r in shared[k] if c == cls[x]}, (k, x)
    if name == "tails":
        assert lex.n_classes < lex.n_states


# ----------------------------------------------------------------------------------------------
# real grammars with the Qwen3 vocabulary (slow; needs the grammars, not the data)
# ----------------------------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("gname,text", [
    ("spider", "SELECT count(*) FROM singer WHERE age > 20 AND name != 'Joe'"),
    ("spider_spop", "SELECT T1.name, avg(T2.age) FROM a AS T1 JOIN b AS T2 ON T1.id = T2.id GROUP BY T1.name"),
])
def test_qwen3_masks_equal_reference(gname, text, qwen3_tokenizer, tmp_path):
    Ref = _reference()
    from gcdbench.datasets.base import load_grammar

    try:
        sp = load_grammar(gname)
    except FileNotFoundError:
        pytest.skip(f"no grammar {gname}")
    tok = qwen3_tokenizer
    e = ValiantEngine(cache_dir=str(tmp_path))
    e.compile(sp, tok)
    ref = Ref(sp)
    prefix = b""
    for t in tok.encode(text)[:12] + [None]:
        m = allocate_mask(tok.vocab_size)
        e.fill_mask(m)
        assert np.array_equal(m, ref.full_mask(prefix, tok)), prefix
        if t is None:
            break
        assert e.commit(t)
        prefix += tok.token_bytes[t]


EDGE = {
    "empty_only": ("start: \n", ["", "a"]),
    "optional": ('start: "a"?\n', ["", "a", "aa"]),
    "nested_lists": ('start: (x ("," x)*)?\nx: "[" start "]" | /[0-9]+/\n%ignore " "\n', ["[1, [2,3]]", "[]", "[[ ]]"]),
    "overlapping_terminals": ('start: A B | AB\nA: "a"+\nB: "b"+\nAB: /a+b+/\n', ["aab", "ab"]),
    "ignored_comment": ('start: x+\nx: /[a-z]+/ | "-" x\nCOMMENT: /--[^\\n]*/\n%ignore COMMENT\n%ignore " "\n',
                        ["a --c\nb", "-a", "--a"]),
    "right_recursive": ('start: "a" start | "b"\n', ["aab", "b"]),
    "unit_chain": ('start: a\na: b\nb: c | "(" a ")"\nc: "x"\n', ["((x))"]),
}


@pytest.mark.parametrize("name", sorted(EDGE))
def test_edge_grammars_equal_reference(name):
    Ref = _reference()
    text, samples = EDGE[name]
    sp = GrammarSpec(name=name, lark=text)
    tok = byte_level()
    e = _engine(sp, tok)
    ref = Ref(sp)
    for sample in samples:
        data = sample.encode()
        e.reset()
        for i in range(len(data) + 1):
            want = ref.allowed_tokens(data[:i], range(tok.vocab_size), tok)
            assert _ids(e, tok.vocab_size) == want, (sample, data[:i])
            if i < len(data) and not e.commit(data[i]):
                assert data[i] not in want
                break


@pytest.mark.parametrize("name", sorted(GRAMMARS))
def test_threads_give_the_same_masks(name):
    """The CPU backend split over threads (numba prange over the root's subtrees) gives every mask bit for
    bit as the single DFS does, along each sample and at every step."""
    import numba

    if numba.config.NUMBA_NUM_THREADS < 2:
        pytest.skip("numba sees one core: threads=2 cannot be set")
    sp = spec(name)
    tok = byte_level()
    one = _engine(sp, tok)
    two = _engine(sp, tok, threads=2)
    for text in SAMPLES[name]:
        one.reset()
        two.reset()
        for b in list(text.encode()) + [None]:
            assert _ids(one, tok.vocab_size) == _ids(two, tok.vocab_size), (text, b)
            if b is not None:
                assert one.commit(b) and two.commit(b)


def _starve(store) -> None:
    """Leave a chart store no room to spare: every array the jitted bookkeeping grows cut to its current use."""
    from gcdbench.parsers.valiant.store_kernels import H_EDGES, H_KEPT, H_NCFG

    store.mem = store.mem[:store.used].copy()
    store.nodes = store.nodes[:store.n_nodes].copy()
    store.medge = store.medge[:int(store.hdr[H_EDGES])].copy()
    store.kept = store.kept[:int(store.hdr[H_KEPT])].copy()
    store.cfg = store.cfg[:int(store.hdr[H_NCFG])].copy()
    store.work, store.scr, store.m = np.zeros(1, np.int64), np.zeros(1, np.uint64), 0


@pytest.mark.parametrize("name", ["overlap", "sexpr", "tiny_sql"])
def test_host_calls_grow_the_store_and_run_again(name):
    """A mask (``store_mask.fill_host``) or a commit (``walk_bytes``) that runs out of room in the chart store
    (arena, node rows, edge rows, kept rows, configurations, search scratch) says what it needs, ``grow`` makes it
    and the call runs again: a store starved before every step gives the masks of one with room, and the chart
    nodes made before a stop are found again (no more nodes than with room)."""
    sp = spec(name)
    tok = multi_tokenizer(SAMPLES[name], extra=LONG_TOKENS if name == "overlap" else [b"))", b"  "])
    roomy = _engine(sp, tok, token_states=1)
    tight = _engine(sp, tok, token_states=1)
    grown = 0
    for text in SAMPLES[name]:
        roomy.reset()
        tight.reset()
        for t in tok.encode(text) + [None]:
            _starve(tight.store)
            before = tight.store.mem.size
            assert _ids(tight, tok.vocab_size) == _ids(roomy, tok.vocab_size), (text, t)
            grown += tight.store.mem.size > before
            if t is not None:
                _starve(tight.store)
                assert tight.commit(t) and roomy.commit(t)
            assert tight.store.n_nodes == roomy.store.n_nodes
    assert grown > 0


def test_reset_clears_the_store_in_place():
    """A reset keeps the sequence's chart store and the room its arrays grew to (no new arrays, ``gen`` unchanged),
    zeroed: after a long sample, every mask of the next samples equals a new engine's, one and two threads."""
    name = "overlap"
    sp = spec(name)
    tok = multi_tokenizer(SAMPLES[name], extra=LONG_TOKENS)
    for threads in (1, 2):
        e = _engine(sp, tok, threads=threads)
        _starve(e.store)
        gen = e.store.gen
        for t in tok.encode(max(SAMPLES[name], key=len)):
            _ids(e, tok.vocab_size)
            assert e.commit(t)
        store = e.store
        assert store.gen > gen       # a starved store grew (arrays replaced) on the way
        for text in SAMPLES[name]:
            gen, arrays = store.gen, [getattr(store, n) for n in ARRAYS]
            e.reset()
            assert e.store is store and store.gen == gen
            assert all(getattr(store, n) is a for n, a in zip(ARRAYS, arrays))     # the same arrays, room and all
            assert not (store.kept.any() or store.medge.any() or store.work.any() or store.scr.any())
            assert store.n_nodes == 1 and store.configs == [(0, START)]
            fresh = _engine(sp, tok, threads=threads)
            for t in tok.encode(text) + [None]:
                assert _ids(e, tok.vocab_size) == _ids(fresh, tok.vocab_size), (threads, text, t)
                if t is not None:
                    assert e.commit(t) and fresh.commit(t)


@pytest.mark.first      # with test_batch's threaded test: one worker compiles the parallel batch call
def test_batch_threads_follow_new_and_grown_stores():
    """Batch mode on two threads (``batch.Lanes``: each thread's group of sequences in one nogil call over typed
    lists of their store arrays): sequences reset to new samples at different steps (new stores) and every store
    starved before every step (arrays replaced, then grown inside the step) give the masks of one thread with room,
    step by step; the lists follow the stores (a stale array would leave a mask or a later commit wrong). The commits
    of a step go in one ``commit_many`` call (``batch.walk_claimed``), starved too, and leave each sequence in the
    configurations its one-thread twin's ``commit`` does; its refusals are ``commit``'s."""
    import numba

    if numba.config.NUMBA_NUM_THREADS < 2:
        pytest.skip("needs 2 numba threads (NUMBA_NUM_THREADS < 2 on this machine)")
    name = "overlap"      # long tokens: merged boundaries and second phases too
    sp = spec(name)
    tok = multi_tokenizer(SAMPLES[name], extra=LONG_TOKENS)
    B = 3
    batch, ref = _engine(sp, tok, threads=2, token_states=1), _engine(sp, tok, token_states=1)
    seqs, refs = [batch] + [batch.fork() for _ in range(B - 1)], [ref] + [ref.fork() for _ in range(B - 1)]
    queue = itertools.cycle([tok.encode(t) for t in SAMPLES[name]])
    work = [next(queue) for _ in range(B)]
    pos = [0] * B
    out, want = (np.stack([allocate_mask(tok.vocab_size) for _ in range(B)]) for _ in range(2))
    resets = grown = 0
    for step in range(3 * sum(map(len, work)) + 3):
        sizes = [s.store.mem.size for s in seqs]
        for s in seqs:
            _starve(s.store)
        batch.fill_masks(seqs, out)
        ref.fill_masks(refs, want)
        assert np.array_equal(out, want), step
        grown += sum(s.store.mem.size > n for s, n in zip(seqs, sizes))
        going = [i for i in range(B) if pos[i] < len(work[i])]
        sizes = [s.store.mem.size for s in seqs]
        for s in seqs:
            _starve(s.store)           # the commits' walks grow the stores too
        assert batch.commit_many([seqs[i] for i in going], [work[i][pos[i]] for i in going]) == [True] * len(going)
        grown += sum(s.store.mem.size > n for s, n in zip(seqs, sizes))
        for i in range(B):
            if i in going:
                assert refs[i].commit(work[i][pos[i]]) and seqs[i].configs == refs[i].configs, (step, i)
                pos[i] += 1
            else:                      # this sample is over: the lane takes the next one (a new chart store)
                seqs[i].reset()
                refs[i].reset()
                work[i], pos[i] = next(queue), 0
                resets += 1
    assert resets >= B and grown > 0
    # refusals as commit's: a token the mask leaves out (the sequence is then dead), an id outside the vocabulary, a
    # dead sequence, a fork the lanes do not hold (one commit)
    batch.fill_masks(seqs, out)
    bad = next(t for t in range(tok.vocab_size) if tok.token_bytes[t] and not mask_get(out[0], t))
    good = [next(t for t in range(tok.vocab_size) if tok.token_bytes[t] and mask_get(out[i], t)) for i in range(B)]
    extra = batch.fork()
    assert batch.commit_many(seqs + [extra], [bad, good[1], -1, tok.encode(SAMPLES[name][0])[0]]) == \
        [False, True, False, True]
    assert [refs[0].commit(bad), refs[1].commit(good[1])] == [False, True] and seqs[1].configs == refs[1].configs
    assert batch.commit_many(seqs[:2], [good[0], good[1]])[0] is False    # seqs[0] is dead
    batch.close()


# tokens long enough that their walks go on merged boundaries with the default cap, several lexical shapes (two-piece
# camelCase, digits inside words, keywords inside words, ignored runs inside a token), as a Qwen3 vocabulary has them
LONG_TOKENS = [b"classname", b"className", b" className", b"toStringIs", b"a1b2c3d4e5", b"isabcdefgh", b" is abcdef",
               b"Isabcdef123", b"abc def ghi", b"{abcdefghij}", b"x_y_z_w_v_u", b"abcdefghijklmnop", b"1234567890ab"]


@pytest.mark.parametrize("token_states", [256, 1])
def test_merged_boundaries_two_phases_equal_reference(token_states):
    """Long tokens on the overlap grammar: walks over the cap go on merged boundaries, whose chains a mask searches
    in a second phase (in rounds by depth) for the tokens the first did not allow; every mask equals the
    reference's, and the second phase ran (rounds past the first included)."""
    from gcdbench.parsers.valiant.cpu_mask import FIRST_ROUND

    Ref = _reference()
    sp = spec("overlap")
    texts = SAMPLES["overlap"] + ["classname isabc tostringis a1b2c3d4e5", "{isabcdefgh} x_y_z_w_v_u 1234567890ab"]
    tok = multi_tokenizer(texts, extra=LONG_TOKENS)
    e = _engine(sp, tok, token_states=token_states)
    al = e.comp.align
    assert e.comp.meta["merged_nodes"] > 0
    assert al.node_depth[e._chain["ct_node"]].max() > FIRST_ROUND     # tuples for a second round
    ref = Ref(sp)
    ids = range(tok.vocab_size)
    for text in texts:
        e.reset()
        prefix = b""
        for t in tok.encode(text) + [None]:
            assert _ids(e, tok.vocab_size) == ref.allowed_tokens(prefix, ids, tok), (text, prefix)
            if t is not None:
                assert e.commit(t)
                prefix += tok.token_bytes[t]
    assert e.counters["chain_searches"] > 0


def test_threads_give_the_same_masks_merged_boundaries():
    """As test_threads_give_the_same_masks, with merged boundaries and a mask's second phase."""
    import numba

    if numba.config.NUMBA_NUM_THREADS < 2:
        pytest.skip("numba sees one core: threads=2 cannot be set")
    sp = spec("overlap")
    tok = multi_tokenizer(SAMPLES["overlap"], extra=LONG_TOKENS)
    one = _engine(sp, tok, token_states=1)
    two = _engine(sp, tok, token_states=1, threads=2)
    for text in SAMPLES["overlap"]:
        one.reset()
        two.reset()
        for t in tok.encode(text) + [None]:
            assert _ids(one, tok.vocab_size) == _ids(two, tok.vocab_size), (text, t)
            if t is not None:
                assert one.commit(t) and two.commit(t)
    assert two.counters["chain_searches"] > 0


@pytest.mark.parametrize("name", ["tiny_sql", "sexpr", "overlap"])
def test_assembled_token_cache_gives_the_same_masks(name):
    """The cache of assembled token sets (``mask_cache``, cpu_mask.fill_cached) changes no mask bit: without
    it, with one slot (every key evicts the last: the full-key compare on each lookup), with the default slots
    (hits along the samples), on two threads (``mask_base_par``) and in a batch of forks on two threads (a cache
    per thread); a multi-token vocabulary with merged boundaries (second phases, not cached) on ``overlap``."""
    import numba

    sp = spec(name)
    tok = multi_tokenizer(SAMPLES[name], extra=LONG_TOKENS) if name == "overlap" else byte_level()
    opts = {"token_states": 1} if name == "overlap" else {}
    none = _engine(sp, tok, mask_cache=0, **opts)
    one = _engine(sp, tok, mask_cache=1, **opts)
    full = _engine(sp, tok, **opts)
    two = _engine(sp, tok, threads=2, **opts) if numba.config.NUMBA_NUM_THREADS >= 2 else full
    engines = (one, full, two)
    for text in SAMPLES[name]:
        for e in (none, *engines):
            e.reset()
        for t in tok.encode(text) + [None]:
            want = _ids(none, tok.vocab_size)
            for e in engines:
                assert _ids(e, tok.vocab_size) == want, (text, t, e.opts)
            if t is not None:
                assert all(e.commit(t) for e in (none, *engines))
    assert none.counters["token_sets_cached"] == none.counters["token_sets_assembled"] == 0
    assert full.counters["token_sets_cached"] > 0 and full.counters["token_sets_assembled"] > 0
    assert one.counters["token_sets_assembled"] > full.counters["token_sets_assembled"]
    # a batch of forks on two threads (each thread its own cache) against the same forks of the engine without one
    batch, ref = (_engine(sp, tok, threads=2, **opts), none) if two is not full else (full, none)
    seqs, refs = [batch] + [batch.fork() for _ in SAMPLES[name][1:]], [ref] + [ref.fork() for _ in SAMPLES[name][1:]]
    streams = [tok.encode(text) for text in SAMPLES[name]]
    for e in seqs + refs:
        e.reset()
    out, want = (np.stack([allocate_mask(tok.vocab_size) for _ in seqs]) for _ in range(2))
    for k in range(max(map(len, streams)) + 1):
        batch.fill_masks(seqs, out)
        ref.fill_masks(refs, want)
        live = [i for i, ids in enumerate(streams) if k <= len(ids)]
        assert np.array_equal(out[live], want[live]), k
        for i in live:
            if k < len(streams[i]):
                assert seqs[i].commit(streams[i][k]) and refs[i].commit(streams[i][k])
    with pytest.raises(ValueError, match="mask_cache must be 0"):
        _engine(sp, tok, mask_cache=-1)


def test_threads_out_of_range_is_a_clear_error():
    import numba

    with pytest.raises(ValueError, match="threads must be between 1 and"):
        _engine(spec("tiny_sql"), byte_level(), threads=numba.config.NUMBA_NUM_THREADS + 1)


@pytest.mark.parametrize("backend", ["cpu", "cuda"])
def test_compile_computes_no_mask(backend, monkeypatch):
    """Init is compile only (issue 11): compile builds the tables and computes no mask and no search (it used to
    run a warm-up mask); the first mask is the first search. For the CUDA backend, the device search object is
    made (here without a device: its constructor is replaced) and never searched from."""
    from gcdbench.parsers.valiant import cuda_kernels

    calls = []
    monkeypatch.setattr(ValiantEngine, "fill_mask", lambda self, out: calls.append("fill_mask"))
    monkeypatch.setattr(ValiantEngine, "search", lambda self, *a, **k: calls.append("search"))
    monkeypatch.setattr(cuda_kernels.CudaSearch, "__init__", lambda self, *a, **k: calls.append("cuda init"))
    monkeypatch.setattr(cuda_kernels.CudaSearch, "search", lambda self, *a, **k: calls.append("cuda search"))
    e = _engine(spec("tiny_sql"), byte_level(), backend=backend)
    assert calls == ([] if backend == "cpu" else ["cuda init"]) and e.store.used > 0


@pytest.mark.parametrize("name", sorted(GRAMMARS))
def test_pruned_alignment_numba_equals_readable(name):
    """Dropping dominated token tuples: the numba pruning gives the readable pruning's lists, and it drops
    something where a token is listed both whole and split at a deeper node (all but the ambiguous grammar, where
    it drops nothing)."""
    from gcdbench.parsers.valiant.align import prune_dominated as readable
    from gcdbench.parsers.valiant.align_nb import build_alignment, prune_dominated
    from gcdbench.parsers.valiant.lexer import build_lexer

    sp = spec(name)
    ir = load_ir(sp)
    cnf = to_cnf(ir)
    lex = build_lexer(ir, cnf.terminals)
    tok = multi_tokenizer(SAMPLES[name], extra=[b"');", b"))", b"  ", b"\xc3", b"\xa9llo", b"\x82\xac1"])
    al = build_alignment(lex, cnf.follow, tok.token_bytes, tok.eos_id)
    a, b = readable(al), prune_dominated(al)
    assert _canonical(a) == _canonical(b)
    before, after = _canonical(al), _canonical(b)
    assert all(after[k] <= before[k] for k in ("bnd0", "bnd1", "cont"))
    dropped = sum(len(before[k]) - len(after[k]) for k in ("bnd0", "bnd1", "cont"))
    if name == "ambiguous":       # no token there is listed both whole and split: nothing to drop
        assert dropped == 0
    else:
        assert dropped > 0


# ----------------------------------------------------------------------------------------------
# issue 14: the tables and shortcuts that make a step cheap, each against a readable form
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(GRAMMARS))
def test_step_tables_equal_readable(name):
    """The packed tables the step reads, against readable sets from the CNF: left children per right child
    (``lb``), the items a terminal closes (``close_*``, ``term_z``), and the cover relation with the direct parents
    of each rule pair: a pair's parents are exactly its direct parents and everything covering them."""
    cnf = to_cnf(load_ir(spec(name)))
    g = PackedGrammar.from_cnf(cnf)
    nn = g.n_nt

    def members(row, n):
        return set(np.flatnonzero(np.unpackbits(np.asarray(row, np.uint64).view(np.uint8), bitorder="little")[:n]))

    rules = {v: set() for v in range(nn)}
    for p, a, b in cnf.binary:
        rules[p].add((a, b))
    for p, t in cnf.unary:
        rules[p].add(("t", t))
    for b in range(nn):
        assert members(g.lb[b], g.n_left) == {a for _, a, bb in cnf.binary if bb == b}
    for t in range(len(cnf.terminals)):
        lefts = {p for p, tt in cnf.unary if tt == t and p < cnf.n_left}
        assert members(g.term_z[t], nn) == {z for z, a, _ in cnf.binary if a in lefts}
        # the items t closes: per parent Z, the right children X and the left children A -> t of rules Z -> A X
        want = {}
        for z, a, x in cnf.binary:
            if a in lefts:
                xs, As = want.setdefault(z, (set(), set()))
                xs.add(x)
                As.add(a)
        ks = range(g.close_start[t], g.close_start[t + 1])
        assert [int(g.close_z[k]) for k in ks] == sorted(want)
        assert {int(g.close_z[k]): (members(g.close_x[k], nn), int(g.close_pairs[k])) for k in ks} == \
            {z: (xs, len(As)) for z, (xs, As) in want.items()}
    for v in range(nn):
        want = {x for x in range(nn) if x != v and rules[v] and rules[v] <= rules[x]}
        assert members(g.cover[v], nn) == want
        assert ((int(g.has_cover[0, v >> 6]) >> (v & 63)) & 1) == bool(want)
    pairs = {}
    for p, a, b in cnf.binary:
        pairs.setdefault((a, b), set()).add(p)
    for (a, b), parents in pairs.items():
        pid = g.ab_id[a, b]
        direct = set(g.ab_parent[g.ab_start[pid]:g.ab_start[pid + 1]].tolist())
        assert direct <= parents
        closed = set(direct)
        for v in direct:
            closed |= members(g.cover[v], nn)
        assert closed == parents, (a, b)


def test_grammar_record_travels_by_name():
    """The grammar record reaches the CPU entry points as three flat arrays (``pack_grammar``) and the CUDA kernels
    as a plain tuple (``PackedGrammar.dev``): both give back every field of ``GRAMMAR_FIELDS``, by name, equal."""
    import numba

    from gcdbench.parsers.valiant.device import GRAMMAR_FIELDS, Grammar
    from gcdbench.parsers.valiant.packing import unpack_grammar

    g = PackedGrammar.from_cnf(to_cnf(load_ir(spec("tiny_sql"))))
    rec = g.record()
    cpu = numba.njit(lambda gu, gi, gm: unpack_grammar(gu, gi, gm))(*g.packed)
    dev = Grammar(*g.dev)
    assert [f for f, _, _ in GRAMMAR_FIELDS] == list(Grammar._fields)
    for name, kind, _ in GRAMMAR_FIELDS:
        want = getattr(g, name)
        for got in (getattr(cpu, name), getattr(dev, name), getattr(rec, name)):
            if kind == "int":
                assert int(got) == want, name
            else:
                assert got.shape == want.shape and np.array_equal(got, want), name


CHAINS = r"""
start: e
e: "-" e | "x" | e "-" e | "(" e ")"
%ignore " "
"""


def test_idempotent_chains_equal_reference():
    """Tokens made of many "-" (unary minus chains, Spider's "-" * 98): the chain is certified idempotent after a
    few steps and searched without chart steps below (``chain_aliases`` > 0), and every mask still equals the
    reference checker's, also for charts that end in "-" themselves."""
    Ref = _reference()
    sp = GrammarSpec(name="chains", lark=CHAINS)
    dashes = [b"-" * k for k in range(2, 13)] + [b"x" + b"-" * 7, b"-" * 5 + b"x", b"(" + b"-" * 6]
    tok = multi_tokenizer(["x - (x)"], extra=dashes)
    e = _engine(sp, tok)
    ref = Ref(sp)
    ids = range(tok.vocab_size)
    for text in ["x - x", "- - x", "(x)-x", "x--"]:
        e.reset()
        prefix = b""
        for b in text.encode():
            assert _ids(e, tok.vocab_size) == ref.allowed_tokens(prefix, ids, tok), (text, prefix)
            assert e.commit(b)
            prefix += bytes([b])
        assert _ids(e, tok.vocab_size) == ref.allowed_tokens(prefix, ids, tok), (text, prefix)
    assert e.counters["chain_aliases"] > 0 and e.counters["leaves_certified"] > 0


def test_certified_idem_charts_are_equivalent():
    """The idem mark is sound: wherever a chart C + a is certified idempotent for a, appending a again changes
    no EXPECT and no acceptance along random continuations (readable chart, bounded depth)."""
    cnf = to_cnf(load_ir(GrammarSpec(name="chains", lark=CHAINS)))
    g = PackedGrammar.from_cnf(cnf)
    idx = {t: i for i, t in enumerate(cnf.terminals)}
    st = ChartStore(g)
    rng = random.Random(5)
    certified = 0
    for trial in range(40):
        node, seq = 0, []
        for step in range(rng.randrange(1, 6)):
            exp = st.expected(node)
            if not exp:
                break
            t = rng.choice(exp + [idx["MINUS"]] * 3 if idx["MINUS"] in exp else exp)
            node = st.child(node, t)
            seq.append(t)
        info = int(st.mem[st.e_off[node] + g.WT])
        if info >> 2 == 0:
            continue
        a = (info >> 2) - 1
        certified += 1
        assert seq[-1] == a
        one, two = ReadableChart(cnf), ReadableChart(cnf)
        for t in seq:
            one.push(t)
            two.push(t)
        two.push(a)
        for k in range(4):
            assert set(one.expect[-1]) == set(two.expect[-1]) and one.accepts() == two.accepts(), (seq, k)
            if not one.expect[-1]:
                break
            t = rng.choice(sorted(one.expect[-1]))
            one.push(t)
            two.push(t)
    assert certified > 0


@pytest.mark.parametrize("name", sorted(GRAMMARS))
def test_top_down_filter_changes_no_ancestor_set(name):
    """The tiers keep a cell A over t_i..t_n only when A is in ANC[i]: along random walks, the filtered and the
    plain CYK chart (readable forms) have the same ANC, EXPECT and acceptance at every step, and the filter
    drops cells somewhere."""
    cnf = to_cnf(load_ir(spec(name)))
    rng = random.Random(7)
    dropped = 0
    for trial in range(8):
        f, u = ReadableChart(cnf), ReadableChart(cnf, unfiltered=True)
        for step in range(8):
            assert f.anc[-1] == u.anc[-1] and f.expect[-1] == u.expect[-1] and f.accepts() == u.accepts()
            if not f.expect[-1]:
                break
            t = rng.choice(sorted(f.expect[-1]))
            f.push(t)
            u.push(t)
            dropped += sum(len(b) - len(a) for a, b in zip(f.tiers[-1], u.tiers[-1]))
    assert dropped > 0


_BOUNDS_CHILD = r"""
import hashlib, sys
from gcdbench.datasets.base import load_grammar
from gcdbench.datasets.treebank import load_treebank
from gcdbench.parsers.base import allocate_mask
from gcdbench.parsers.tokenizers import load_tokenizer
from gcdbench.parsers.valiant.engine import ValiantEngine

tok = load_tokenizer("qwen3")
tb = load_treebank(sys.argv[1])
longest = max(tb.samples, key=lambda s: len(s.text))
from gcdbench.datasets.fuzz import SEXPR_GRAMMAR, generate_grammar, sample_sentences
from gcdbench.parsers.base import GrammarSpec
f34 = generate_grammar(34)
cases = [(tb.grammar, longest.text), (load_grammar("spider"), "SELECT T1.name FROM a AS T1 WHERE T1.x > --5 AND T1.y = 'a-b'"),
         (GrammarSpec(name="sexpr", lark=SEXPR_GRAMMAR), "(" + " ".join(["(f x a) uu (list-vector 9 ab)"] * 8) + ")"),
         (GrammarSpec(name="fuzz34", lark=f34.lark), sample_sentences(f34, (25,), seed=0)[0]),
         (GrammarSpec(name="binary", lark='start: e\ne: e e | "(" e ")" | ATOM\nATOM: /[a-c]/\n%ignore " "\n'),
          " ".join("abc"[i % 3] for i in range(130)) + " (a b)")]
for threads in map(int, sys.argv[3].split(",")):
    h = hashlib.sha256()
    for sp, text in cases:
        e = ValiantEngine(cache_dir=sys.argv[2], threads=threads)
        e.compile(sp, tok)
        m = allocate_mask(tok.vocab_size)
        ids = tok.encode(text)
        for i, t in enumerate(ids):
            if i % 3 == 0 or i >= len(ids) - 4:   # every third mask and the last ones: the checked build is slow
                e.fill_mask(m)
                h.update(m.tobytes())
            assert e.commit(t)
        e.fill_mask(m)
        h.update(m.tobytes())
        e.reset()                  # the store cleared in place (its grown arrays kept): the first masks again
        for t in ids[:6]:
            e.fill_mask(m)
            h.update(m.tobytes())
            assert e.commit(t)
    print("masks", threads, h.hexdigest())
"""


@pytest.mark.slow
@pytest.mark.first
def test_no_out_of_bounds_access(data_root, tmp_path):
    """numba does not check indices: the longest TreeBank sample (more than 64 tiers: rows of two words, scratch
    and path buffers grown several times), a Spider query with '-' chains, an S-expression whose merged boundaries
    have edges in a tier's second word, fuzz grammar 34 (token walks on merged boundaries, the mask's second
    phase over their chains) and a run of 130 atoms of an ambiguous grammar (columns of three words, filled:
    the step's skips and early ends) run with NUMBA_BOUNDSCHECK=1 (every array access checked; a fresh numba
    cache) on one thread, each case's store then cleared by a reset and its first masks taken again, and give the
    masks of the normal build, whose two-thread run gives them too."""
    import os
    import subprocess
    import sys

    def run(threads, env_extra):
        env = {**os.environ, **env_extra}
        r = subprocess.run([sys.executable, "-c", _BOUNDS_CHILD, str(data_root), str(tmp_path / "cache"), threads],
                           env=env, capture_output=True, text=True, timeout=1200)
        assert r.returncode == 0, r.stderr[-3000:]
        return [ln for ln in r.stdout.splitlines() if ln.startswith("masks")]

    # the checked build runs one thread: a two-thread build adds the bases' loop from Python and the parallel
    # search (110 s more of checked compile, a third of the test); their device functions are the one-thread build's,
    # and the bases' loop is the CUDA backend's, which the simulator runs with NumPy's index checks
    checked = run("1", {"NUMBA_BOUNDSCHECK": "1", "NUMBA_CACHE_DIR": str(tmp_path / "numba")})
    plain = run("1,2", {})
    assert len(checked) == 1 and len(plain) == 2 and checked[0] == plain[0]
    assert plain[0].split()[2] == plain[1].split()[2]     # threads=2 gives the masks of threads=1


def test_terminal_classes_merge_interchangeable_terminals(tmp_path):
    """Terminals with the same parents ``V -> t`` are one class (compiled.terminal_classes): "abc", "b" and "ca"
    (only in kw), "+" and "-" (only in op); "ab" (kw and op), NAME and ";" stay alone. The lexer names a piece by
    its class and the terminal tree has one root child per class; the masks are the reference's
    (test_masks_equal_reference_bytes and _multibyte_tokens run the same grammar)."""
    from gcdbench.parsers.valiant.compiled import terminal_classes

    sp = spec("classes")
    ir = load_ir(sp)
    cnf = to_cnf(ir)
    rep = terminal_classes(PackedGrammar.from_cnf(cnf).term_nts)
    lit = [ir.terminals[t].regex for t in cnf.terminals]
    groups = {}
    for t, r in enumerate(rep.tolist()):
        groups.setdefault(r, set()).add(lit[t])
    assert sorted(map(sorted, groups.values())) == sorted(map(sorted, [{"ab"}, {"abc", "b", "ca"}, {"\\-", "\\+"},
                                                                        {"[a-c]+"}, {";"}]))
    e = _engine(sp, byte_level(), tmp_path)
    assert e.comp.meta["terminal_classes"] == 5 and e.comp.meta["cnf"]["terminals"] == 8
    # the lexer's states report only representatives; the root's children are distinct classes
    term_of = e.comp.arrays["lex_term_of"]
    ng = e.comp.meta["n_grammar"]
    assert set(term_of[term_of < ng].tolist()) == set(np.unique(rep).tolist())


def test_span_edges_are_the_pieces_over_spanned_nodes():
    """align.span_edges lists, per node, the pieces of merged boundaries below it that span it: exactly the nodes
    alias_blocked marks SPANNED have some; a piece (row k, t) listed at v is an edge (row r, t) of a merged node w
    that is v's descendant ``r - k`` levels down (so it begins ``k + 1`` levels above v), and every such edge is
    listed. The search walks a spanned node that is not viable only when one is expected where it begins
    (device_search.spans_viable; the reference tests at token_states 1 and 2 check the masks)."""
    from gcdbench.parsers.valiant.align import SPANNED, alias_blocked, span_edges

    sp = spec("classes")
    tok = multi_tokenizer(SAMPLES["classes"], extra=[b"ca;", b"ab c;"])
    al = _engine(sp, tok, token_states=1).comp.align
    start, row, term = span_edges(al)
    flags = alias_blocked(al)
    has = np.diff(start) > 0
    assert has.any() and np.array_equal(has, (flags & SPANNED) != 0)
    par, depth = al.node_parent, al.node_depth
    want: dict = {}
    for v in range(1, al.n_nodes):          # by descendants: w below v whose edge begins above v
        for w in range(v + 1, al.n_nodes):
            u = w
            while u > v:
                u = int(par[u])
            if u != v:
                continue
            dd = int(depth[w] - depth[v])
            for i in range(al.merge_start[w], al.merge_start[w + 1]):
                if al.merge_row[i] >= dd:
                    want.setdefault(v, set()).add((int(al.merge_row[i]) - dd, int(al.merge_term[i])))
    got = {v: set(zip(row[start[v]:start[v + 1]].tolist(), term[start[v]:start[v + 1]].tolist()))
           for v in np.flatnonzero(has).tolist()}
    assert got == want
