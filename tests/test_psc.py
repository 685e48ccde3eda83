"""PSC engine: masks equal a runtime LALR check at every step, on small grammars with the byte vocabulary."""
from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest

from expected_refusals import compile_or_refuse
from gcdbench.datasets.spider import to_spop
from gcdbench.parsers.base import CompileError, GrammarSpec, allocate_mask, mask_to_ids
from gcdbench.parsers.psc.engine import PSCEngine
from gcdbench.parsers.reference import ReferenceChecker

GRAMMARS = Path(__file__).parent / "grammars"

# our own small LALR(1) grammars: keywords vs NAME, strings with escapes and UTF-8, numbers, an empty
# rule, left and right recursion, %ignore whitespace
CALC = r"""
start: stmt*
stmt: "let" NAME "=" expr ";" | "print" expr ";" | "if" expr "then" stmt "end"
?expr: expr "+" term | expr "-" term | term
?term: term "*" atom | atom
?atom: NUMBER | NAME | STRING | "(" expr ")" | "[" items "]" | NAME "(" items ")" | "true" | "false"
items: | expr ("," expr)*
NAME: /[a-z_][a-z0-9_]*/
NUMBER: /[0-9]+(\.[0-9]+)?/
STRING: /"([^"\\]|\\.)*"/
COMMENT: /#[^\n]*/
%ignore /[ \t\n]+/
%ignore COMMENT
"""
CALC_SAMPLES = [
    'let x = 1 + 2.5 * y;',
    'print f(x, [1, "a\\"é"], g());',
    'if true then let letter = "日本"; end # done',
    'print(((1)));let iff=2;',
    '',
]
TINY = (GRAMMARS / "tiny_sql.lark").read_text()
TINY_SAMPLES = (GRAMMARS / "tiny_sql.txt").read_text().splitlines()


def _spec(name, text):
    return GrammarSpec(name=name, lark=text)


@pytest.fixture(scope="module")
def engines(bytes_tokenizer):
    out = {}
    for name, text in (("calc", CALC), ("tiny_sql", TINY)):
        eng = PSCEngine(cache=False)
        eng.compile(_spec(name, text), bytes_tokenizer)
        out[name] = eng
    return out


class RuntimeCheck:
    """The brute-force check: for every token, run the engine's lexer and a copy of Lark's LALR parser
    on it, then ask whether the unfinished lexeme can still become a terminal the parser shifts."""

    def __init__(self, eng: PSCEngine, tokenizer):
        self.eng, self.tok = eng, tokenizer
        self.pending = eng.art["pending"]

    def _feed(self, ps, name, end=False) -> bool:
        from lark.exceptions import UnexpectedToken
        from lark.lexer import Token

        try:
            ps.feed_token(Token(name, ""), end)
        except UnexpectedToken:
            return False
        return True

    def allowed(self) -> set[int]:
        from lark.parsers.lalr_parser_state import ParserState

        eng = self.eng
        q0, stack = eng.q, list(eng.ps.state_stack)
        names = eng.term_names
        out = set()
        for v in range(self.tok.vocab_size):
            ps = ParserState(eng.conf, None, list(stack))
            if v == self.tok.eos_id:
                w = eng.winner[q0]
                if q0 != 0 and w == -1:
                    continue
                if w >= 0 and q0 != 0 and not self._feed(ps, names[w]):
                    continue
                if self._feed(ps, "$END", True):
                    out.add(v)
                continue
            data = self.tok.token_bytes[v]
            if not data:
                continue
            q, ok = q0, True
            for c in data:
                e = eng.step_emit[q][c]
                q = eng.step_state[q][c]
                if q < 0 or (e >= 0 and not self._feed(ps, names[e])):
                    ok = False
                    break
            if not ok:
                continue
            pend = self.pending[q]
            if pend is None:
                out.add(v)
                continue
            for a in pend:
                p2 = ParserState(eng.conf, None, list(ps.state_stack))
                if self._feed(p2, names[a]):
                    out.add(v)
                    break
        return out


def _mask_ids(eng, tok) -> set[int]:
    m = allocate_mask(tok.vocab_size)
    m[:] = -1
    eng.fill_mask(m)
    return set(mask_to_ids(m, tok.vocab_size).tolist())


@pytest.mark.parametrize("name,samples", [("calc", CALC_SAMPLES), ("tiny_sql", TINY_SAMPLES)])
def test_masks_equal_runtime_check_on_samples(engines, bytes_tokenizer, name, samples):
    eng, tok = engines[name], bytes_tokenizer
    check = RuntimeCheck(eng, tok)
    for text in samples:
        eng.reset()
        data = text.encode()
        for i, c in enumerate(data):
            got = _mask_ids(eng, tok)
            assert got == check.allowed(), (name, data[:i])
            assert c in got, (name, data[: i + 1])
            assert eng.commit(c)
        got = _mask_ids(eng, tok)
        assert got == check.allowed()
        assert tok.eos_id in got, (name, text)
        assert eng.commit(tok.eos_id)


@pytest.mark.parametrize("name", ["calc", "tiny_sql"])
def test_masks_equal_runtime_check_on_random_walks(engines, bytes_tokenizer, name):
    eng, tok = engines[name], bytes_tokenizer
    check = RuntimeCheck(eng, tok)
    rng = random.Random(7)
    for _walk in range(12):
        eng.reset()
        for _step in range(30):
            got = _mask_ids(eng, tok)
            assert got == check.allowed()
            choices = sorted(got - {tok.eos_id})
            if not choices:
                break
            # prefer printable ASCII so walks stay readable and reach deep stacks
            nice = [c for c in choices if 32 <= c < 127] or choices
            assert eng.commit(rng.choice(nice))


def test_lexer_agrees_with_lark_on_samples(engines):
    import lark

    for name, text, samples in (("calc", CALC, CALC_SAMPLES), ("tiny_sql", TINY, TINY_SAMPLES)):
        lk = lark.Lark(text, parser="lalr", lexer="basic")
        eng = engines[name]
        for s in samples:
            want = [t.type for t in lk.lex(s)]
            q, got = eng.q, []
            q = 0
            for c in s.encode():
                e = eng.step_emit[q][c]
                q = eng.step_state[q][c]
                assert q >= 0
                if e >= 0:
                    got.append(eng.term_names[e])
            if q != 0 and eng.winner[q] >= 0:
                got.append(eng.term_names[eng.winner[q]])
            assert got == want, (name, s)


def test_not_lalr_is_refused(bytes_tokenizer):
    spec = _spec("ambiguous", (GRAMMARS / "ambiguous.lark").read_text())
    with pytest.raises(CompileError, match="not LALR"):
        PSCEngine(cache=False).compile(spec, bytes_tokenizer)


def test_malformed_grammar_is_refused(bytes_tokenizer):
    with pytest.raises(CompileError):
        PSCEngine(cache=False).compile(_spec("bad", "start: foo\n"), bytes_tokenizer)


def test_cache_roundtrip(tmp_path, bytes_tokenizer):
    spec = _spec("tiny_sql", TINY)
    a = PSCEngine(cache_dir=str(tmp_path))
    a.compile(spec, bytes_tokenizer)
    assert a.info()["cache_hit"] is False
    b = PSCEngine(cache_dir=str(tmp_path))
    b.compile(spec, bytes_tokenizer)
    assert b.info()["cache_hit"] is True
    ma, mb = allocate_mask(257), allocate_mask(257)
    for c in b"select a from t":
        a.fill_mask(ma)
        b.fill_mask(mb)
        assert np.array_equal(ma, mb)
        assert a.commit(c) and b.commit(c)


def test_refuses_bad_tokens(engines, bytes_tokenizer):
    eng = engines["tiny_sql"]
    eng.reset()
    assert not eng.commit(ord("#"))
    eng.reset()
    assert not ReferenceChecker(_spec("tiny_sql", TINY)).is_sentence(b"")
    assert not eng.commit(bytes_tokenizer.eos_id)   # the empty query is not a sentence
    eng.reset()
    for c in b"select":
        assert eng.commit(c)
    assert not eng.commit(bytes_tokenizer.eos_id)


def test_leading_whitespace(bytes_tokenizer):
    spec = _spec("tiny_sql", TINY)
    strict = PSCEngine(cache=False)
    strict.compile(spec, bytes_tokenizer)
    loose = PSCEngine(cache=False, leading_ignore=True)
    loose.compile(spec, bytes_tokenizer)
    assert ord(" ") not in _mask_ids(strict, bytes_tokenizer)
    assert ord(" ") in _mask_ids(loose, bytes_tokenizer)


# -- against the scannerless reference checker -------------------------------------------------------
def _reference_diff(eng, tok, ref, samples, walks=0, seed=3):
    """Walk samples (and random walks); return (prefixes checked, [(prefix, psc-ref, ref-psc)])."""
    rng = random.Random(seed)
    diffs, n = [], 0

    def visit(prefix: bytes):
        nonlocal n
        n += 1
        got = _mask_ids(eng, tok)
        want = set(ref.full_mask_ids(ref.advance(ref.initial(), prefix), tok).tolist()) \
            if ref.is_viable(prefix) else set()
        if got != want:
            diffs.append((prefix, sorted(got - want), sorted(want - got)))
        return got

    for text in samples:
        eng.reset()
        data = text.encode()
        for i, c in enumerate(data):
            visit(data[:i])
            assert eng.commit(c), (text, data[: i + 1])
        visit(data)
    for _ in range(walks):
        eng.reset()
        prefix = b""
        for _step in range(25):
            got = visit(prefix)
            nice = [c for c in sorted(got - {tok.eos_id}) if 32 <= c < 127]
            if not nice:
                break
            c = rng.choice(nice)
            assert eng.commit(c)
            prefix += bytes([c])
    return n, diffs


@pytest.mark.parametrize("name,samples", [("calc", CALC_SAMPLES), ("tiny_sql", TINY_SAMPLES)])
def test_psc_within_reference(engines, bytes_tokenizer, name, samples):
    """Soundness of the stable-stack assumption (sec 3.2) and of the lexer: every token PSC allows keeps
    the prefix viable for the scannerless reference. The converse fails only by maximal munch (see
    README: e.g. after ``select`` the reference also allows a letter, PSC lexes ``selectx`` as a NAME)."""
    from gcdbench.parsers.reference import ReferenceChecker

    text = CALC if name == "calc" else TINY
    ref = ReferenceChecker(_spec(name, text))
    n, diffs = _reference_diff(engines[name], bytes_tokenizer, ref, samples, walks=6)
    assert n > 50
    extra = [(p, e) for p, e, _m in diffs if e]
    assert not extra, extra[:5]


# -- the project's SQL grammars ---------------------------------------------------------------------------
SQL_SAMPLES = [
    "SELECT count(*) FROM singer",
    "SELECT name ,  country ,  age FROM singer ORDER BY age DESC",
    "SELECT T1.name FROM a AS T1 JOIN b AS T2 ON T1.id  =  T2.id WHERE T2.x > 3.5 AND T1.y LIKE '%ab%' LIMIT 1",
    "SELECT avg(age) , min(age) FROM singer WHERE country  =  \"France\" GROUP BY x HAVING count(*) >= 2",
    "SELECT a FROM t WHERE b NOT IN (SELECT b FROM u) INTERSECT SELECT a FROM v",
]


def _sql_spec(name):
    from gcdbench.datasets.base import load_grammar

    return load_grammar(name)


def _sql_samples(name):
    """The SQL samples in the grammar's own form (sp-op: a space after each operator and comma)."""
    return [to_spop(s) for s in SQL_SAMPLES] if name == "spider_spop" else list(SQL_SAMPLES)


@pytest.mark.parametrize("name", ["spider", "spider_spop"])
def test_sql_grammar_masks_equal_runtime_check(bytes_tokenizer, name):
    spec = _sql_spec(name)
    eng = PSCEngine(cache=False)
    assert compile_or_refuse(eng, "psc", name, spec, bytes_tokenizer)
    tok = bytes_tokenizer
    check = RuntimeCheck(eng, tok)
    for text in _sql_samples(name):
        eng.reset()
        data = text.encode()
        for i, c in enumerate(data):
            got = _mask_ids(eng, tok)
            assert got == check.allowed(), data
            assert c in got, (name, data[: i + 1])
            assert eng.commit(c)
        got = _mask_ids(eng, tok)
        assert got == check.allowed() and tok.eos_id in got, text
    rng = random.Random(11)
    for _walk in range(6):
        eng.reset()
        for _step in range(40):
            got = _mask_ids(eng, tok)
            assert got == check.allowed()
            nice = [c for c in sorted(got - {tok.eos_id}) if 32 <= c < 127]
            if not nice:
                break
            assert eng.commit(rng.choice(nice))


@pytest.mark.slow
@pytest.mark.parametrize("name", ["spider", "spider_spop"])
def test_sql_grammar_within_reference(bytes_tokenizer, name):
    from gcdbench.parsers.reference import ReferenceChecker

    spec = _sql_spec(name)
    eng = PSCEngine(cache=False)
    eng.compile(spec, bytes_tokenizer)
    ref = ReferenceChecker(spec)
    n, diffs = _reference_diff(eng, bytes_tokenizer, ref, _sql_samples(name)[:2], walks=4)
    extra = [(p, e) for p, e, _m in diffs if e]
    assert not extra, extra[:5]


def _lex_with_engine(eng, text: str) -> list[str]:
    q, got = 0, []
    for c in text.encode():
        e = eng.step_emit[q][c]
        q = eng.step_state[q][c]
        assert q >= 0, text
        if e >= 0:
            got.append(eng.term_names[e])
    if q != 0 and eng.winner[q] >= 0:
        got.append(eng.term_names[eng.winner[q]])
    return got


@pytest.mark.parametrize("name", ["spider", "spider_spop"])
def test_sql_lexer_agrees_with_lark(bytes_tokenizer, name):
    import lark

    spec = _sql_spec(name)
    eng = PSCEngine(cache=False)
    eng.compile(spec, bytes_tokenizer)
    lk = lark.Lark(spec.lark, parser="lalr", lexer="basic")
    for text in _sql_samples(name) + ["SELECT selection , T1.fromage FROM order_s WHERE x<>1 AND y>=2"]:
        want = [t.type for t in lk.lex(text)]
        assert _lex_with_engine(eng, text) == want, text


@pytest.mark.slow
def test_qwen3_masks_equal_runtime_check(qwen3_tokenizer):
    """Multi-byte, multi-terminal tokens: the full 151,936-token mask against the runtime check."""
    tok = qwen3_tokenizer
    eng = PSCEngine(cache=False)
    eng.compile(_spec("tiny_sql", TINY), tok)
    check = RuntimeCheck(eng, tok)
    for text in ["SELECT a, count(*) FROM t WHERE c = 'x y';"]:
        eng.reset()
        for t in tok.encode(text):
            assert _mask_ids(eng, tok) == check.allowed()
            assert eng.commit(t)
        assert _mask_ids(eng, tok) == check.allowed()


def test_registry():
    from gcdbench.parsers.registry import engine_class

    assert engine_class("psc") is PSCEngine


def test_contextual_lexer_refused(bytes_tokenizer):
    """Not an allowed value of the option (only 'standard' is implemented): refused on construction."""
    with pytest.raises(ValueError, match=r"lexer='contextual' is not allowed; valid: \['standard'\]"):
        PSCEngine(cache=False, lexer="contextual")


@pytest.mark.slow
@pytest.mark.data
def test_treebank_refused_not_hung(data_root, bytes_tokenizer):
    """TreeBank's grammar is not LALR(1) and Lark's analysis of it runs for minutes: refused by the analysis'
    own time limit (the message says so), not after the analysis ran to its end."""
    from gcdbench.datasets.treebank import load_treebank

    grammar = load_treebank(data_root, n=2).grammar
    with pytest.raises(CompileError, match=r"did not finish in 5 s \(lalr_timeout_s\)"):
        PSCEngine(cache=False, lalr_timeout_s=5.0).compile(grammar, bytes_tokenizer)


def _walk(art, c, stack):
    """Mask ids the classifier emits on (lexer class c, stack top ... bottom)."""
    s = int(art["first"][c][stack[-1]])
    ids = {int(art["first_mask"][c][stack[-1]])}
    i = len(stack) - 2
    while s and i >= 0:
        out, default = art["trans"][s]
        s, m = out.get(stack[i], default)
        ids.add(m)
        i -= 1
    return ids


@pytest.mark.parametrize("name,text", [("calc", CALC), ("tiny_sql", TINY)])
def test_minimized_classifier_gives_the_same_masks(bytes_tokenizer, name, text):
    """Minimisation merges states but every (lexer class, stack) still gets the same mask: compared on random
    stacks of LALR states (reachable or not, which is stricter than the runtime needs)."""
    from gcdbench.parsers.psc.build import minimize_classifier
    from gcdbench.parsers.psc.engine import build_artifact

    full = build_artifact(_spec(name, text), bytes_tokenizer, minimize=False)
    trans, first, _ = minimize_classifier(full["trans"], full["first"])
    small = {**full, "trans": trans, "first": first}
    assert len(trans) < len(full["trans"])
    n_parser = len(full["first"][0])
    n_classes = len(full["first"])
    rng = random.Random(0)

    def union(art, ids):
        m = np.zeros_like(art["masks"][0])
        for k in ids:
            m |= art["masks"][k]
        return m

    for _ in range(3000):
        c = rng.randrange(n_classes)
        stack = [rng.randrange(n_parser) for _ in range(rng.randrange(1, 12))]
        np.testing.assert_array_equal(union(full, _walk(full, c, stack)), union(small, _walk(small, c, stack)))
