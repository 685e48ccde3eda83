"""Engine ``pre3`` (seed 004): LALR tables, the DPDA forms, the front ends, masks against the reference checker
under the profile the engine declares, batch (fork / fill_masks), refusals. CUDA: ``test_pre3_cuda.py``."""
from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest

from gcdbench.parsers.base import CompileError, GrammarSpec, Profile, allocate_mask, mask_to_ids
from gcdbench.parsers.pre3.dpda import aggregate, direct_jumps, one_step, pack
from gcdbench.parsers.pre3.engine import Pre3Engine, Pre3Options
from gcdbench.parsers.pre3.lalr import build_tables, lark_grammar
from gcdbench.parsers.reference import DEAD, ReferenceChecker

GRAMMARS = Path(__file__).parent / "grammars"
TINY = (GRAMMARS / "tiny_sql.lark").read_text()
TINY_SAMPLES = (GRAMMARS / "tiny_sql.txt").read_text().splitlines()
# LALR(1), with keywords next to NAME, escapes, UTF-8, an empty rule, left and right recursion (the right
# recursive "-" atom and "not" make loops in the reduction graph), %ignore whitespace and comments
CALC = r"""
start: stmt*
stmt: "let" NAME "=" expr ";" | "print" expr ";" | "if" cond "then" stmt "end"
cond: "not" cond | expr
?expr: expr "+" term | expr "-" term | term
?term: term "*" atom | atom
?atom: NUMBER | NAME | STRING | "(" expr ")" | "[" items "]" | NAME "(" items ")" | "-" atom
items: | expr ("," expr)*
NAME: /[a-z_][a-z0-9_]*/
NUMBER: /[0-9]+(\.[0-9]+)?/
STRING: /"([^"\\]|\\.)*"/
COMMENT: /#[^\n]*/
%ignore /[ \t\n]+/
%ignore COMMENT
"""
CALC_SAMPLES = ['let x = 1 + 2.5 * y;', 'print f(x, [1, "a\\"é"], g());', 'if not not x then print - - -1; end # c',
                'print(((1)));let iff=2;', '']
# character-level grammars: no text has two readings, every boundary is decided by one byte
JSON = r"""
start: value
?value: object | array | STRING | NUMBER | "true" | "false" | "null"
array: "[" [value ("," value)*] "]"
object: "{" [pair ("," pair)*] "}"
pair: STRING ":" value
STRING: /"([^"\\]|\\.)*"/
NUMBER: /-?[0-9]+(\.[0-9]+)?/
%ignore /[ \t\n]+/
"""
JSON_SAMPLES = ['{"a": [1, -2.5, true, {"b": null}], "c": "x\\"é"}', '[ [ ], [[]] ]']
WORDS = 'start: WORD ("-" WORD)* "."\nWORD: /[a-z]+/\n'
SQL_SAMPLES = [
    "SELECT count(*) FROM singer",
    "SELECT T1.name FROM a AS T1 JOIN b AS T2 ON T1.id  =  T2.id WHERE T2.x > 3.5 AND T1.y LIKE '%ab%' LIMIT 1",
    "SELECT a FROM t WHERE NOT NOT b NOT IN (SELECT b FROM u) INTERSECT SELECT - - a FROM v",
]


def _spec(name, text):
    return GrammarSpec(name=name, lark=text)


def _sql(name):
    from gcdbench.datasets.base import load_grammar

    return load_grammar(name)


CASES = {"tiny_sql": (TINY, TINY_SAMPLES), "calc": (CALC, CALC_SAMPLES), "json": (JSON, JSON_SAMPLES),
         "words": (WORDS, ["ab-c.", "x."])}


@pytest.fixture(scope="module")
def engines(bytes_tokenizer):
    out = {}
    for name, (text, _s) in CASES.items():
        eng = Pre3Engine(cache=False)
        eng.compile(_spec(name, text), bytes_tokenizer)
        out[name] = eng
    eng = Pre3Engine(cache=False)
    eng.compile(_sql("spider"), bytes_tokenizer)
    out["spider"] = eng
    for name in ("json", "words"):   # auto takes their exact lexer: the character level, forced
        eng = Pre3Engine(cache=False, front_end="chars")
        eng.compile(_spec(name, CASES[name][0]), bytes_tokenizer)
        out[name + "/chars"] = eng
    return out


def _ids(eng, tok) -> set[int]:
    m = allocate_mask(tok.vocab_size)
    m[:] = -1
    eng.fill_mask(m)
    return set(mask_to_ids(m, tok.vocab_size).tolist())


# -- LALR(1) tables ---------------------------------------------------------------------------------------
def _lark_isomorphic(spec):
    """Our tables equal Lark's LALR(1) tables up to state numbering (pairs states from the start state)."""
    from lark.parsers.lalr_analysis import Shift

    from gcdbench.parsers.psc.build import lalr_tables
    from gcdbench.parsers.psc.engine import PSCOptions

    cfg, _terms, _ign = lark_grammar(spec)
    ours = build_tables(cfg)
    assert not ours.conflicts
    theirs = lalr_tables(spec, timeout_s=PSCOptions().lalr_timeout_s, conflicts=PSCOptions().conflicts)[0]
    pair = {ours.start_state: theirs.start_states[spec.start]}
    todo = [ours.start_state]
    while todo:
        q = todo.pop()
        s = pair[q]
        mine = {}
        for a, (sh, arg) in ours.action[q].items():
            if not (q == ours.end_state and cfg.terminals[a] == "$END"):   # Lark accepts before that shift
                mine[cfg.terminals[a]] = ("s", arg) if sh else ("r", cfg.rule_str(arg))
        mine.update({cfg.nonterminals[A]: ("s", t) for A, t in ours.goto[q].items()})
        other = {sym: ("s", arg) if kind is Shift else
                 ("r", f"{arg.origin.name} -> " + (" ".join(x.name for x in arg.expansion) or "<empty>"))
                 for sym, (kind, arg) in theirs.states[s].items()}
        assert set(mine) == set(other), (q, set(mine) ^ set(other))
        for k, (kind, v) in mine.items():
            assert kind == other[k][0], (q, k)
            if kind == "r":
                assert v == other[k][1]
            elif v in pair:
                assert pair[v] == other[k][1]
            else:
                pair[v] = other[k][1]
                todo.append(v)
    assert len(pair) == len(theirs.states)
    assert pair[ours.end_state] == theirs.end_states[spec.start]


@pytest.mark.parametrize("name", ["tiny_sql", "calc"])
def test_lalr_tables_equal_larks(name):
    _lark_isomorphic(_spec(name, CASES[name][0]))


@pytest.mark.slow
@pytest.mark.parametrize("name", ["spider", "spider_spop"])
def test_lalr_tables_equal_larks_sql(name):
    _lark_isomorphic(_sql(name))


def test_not_lalr_is_refused_naming_conflicts(bytes_tokenizer):
    spec = _spec("ambiguous", (GRAMMARS / "ambiguous.lark").read_text())
    with pytest.raises(CompileError, match=r"not LALR\(1\).*shift/reduce on \w+ in state \d+.*<e -> e e>"):
        Pre3Engine(cache=False).compile(spec, bytes_tokenizer)


def test_malformed_grammar_is_refused(bytes_tokenizer):
    with pytest.raises(CompileError, match="malformed|no rule"):
        Pre3Engine(cache=False).compile(_spec("bad", "start: foo\n"), bytes_tokenizer)


@pytest.mark.slow
@pytest.mark.data
def test_treebank_refused_by_own_lalr_analysis(data_root, bytes_tokenizer, monkeypatch):
    """The induced TreeBank grammar is not LR(1): refused by our own LALR analysis with its conflicts named,
    without Lark's analysis (which runs for minutes on it) and before any later phase (lexer, DPDA, jobs):
    each of those is replaced by one that fails the test if called, so the check does not depend on speed."""
    import lark

    from gcdbench.datasets.treebank import load_treebank
    from gcdbench.parsers.pre3 import engine as pre3_engine

    def must_not_run(what):
        def fail(*_a, **_k):
            raise AssertionError(f"{what} ran, but the refusal must come from pre3's own LALR analysis first")
        return fail

    lark_init = lark.Lark.__init__

    def lark_without_lalr(self, *a, **k):
        if k.get("parser") == "lalr":
            must_not_run("Lark's LALR analysis")()
        lark_init(self, *a, **k)

    monkeypatch.setattr(lark.Lark, "__init__", lark_without_lalr)
    for name in ("one_step", "direct_jumps", "build_jobs", "byte_class_transducer"):
        monkeypatch.setattr(pre3_engine, name, must_not_run(f"pre3's {name}"))
    grammar = load_treebank(data_root, n=2).grammar
    msg = (r"not LALR\(1\): the grammar has \d+ conflict\(s\) \(\d+ reduce/reduce, \d+ shift/reduce\): "
           r"reduce/reduce on \w+ in state \d+: <")
    with pytest.raises(CompileError, match=msg):
        Pre3Engine(cache=False).compile(grammar, bytes_tokenizer)


# -- the DPDA forms -----------------------------------------------------------------------------------------
def lr_feed(t, stack: list, a: int):
    """The textbook LR driver on our tables: 'shift', 'accept' or None."""
    end = t.cfg.n_t - 1
    while True:
        act = t.action[stack[-1]].get(a)
        if act is None:
            return None
        sh, arg = act
        if sh:
            if a == end:
                return None
            stack.append(arg)
            return "shift"
        lhs, rhs = t.cfg.rules[arg]
        if rhs:
            del stack[len(stack) - len(rhs):]
        g = t.goto[stack[-1]].get(lhs)
        if g is None:
            return None
        if a == end and g == t.end_state:
            return "accept"
        stack.append(g)


def _numba_feed(p, stack: list, a: int):
    """The compiled kernel's run of one terminal on a committed stack (the host commit path)."""
    from gcdbench.parsers.pre3.kernels import commit_terms, pack_tables

    arr = np.zeros((1, len(stack) + 8), dtype=np.int32)
    arr[0, : len(stack)] = stack
    r, L = commit_terms(*pack_tables(p.arrays()), p.n_sym, 2 * p.n_states + 8, arr, len(stack), np.array([a], np.int32),
                        np.empty(8, np.int32))
    if r == 0:
        stack[:] = arr[0, :L].tolist()
        return "shift"
    return "accept" if r == 1 else None


def _walk_forms(tables, forms, walks=60, steps=50, seed=0):
    rng = random.Random(seed)
    n_t = tables.cfg.n_t
    checked = 0
    for _ in range(walks):
        stack = [tables.start_state]
        for _s in range(steps):
            outs = {}
            for a in range(n_t):
                res = []
                for f in forms:
                    s = list(stack)
                    r = f(s, a)
                    res.append((r, tuple(s) if r == "shift" else None))
                assert all(x == res[0] for x in res), (stack, tables.cfg.terminals[a], res)
                outs[a] = res[0]
                checked += 1
            ok = [a for a, (r, _st) in outs.items() if r == "shift"]
            if not ok:
                break
            stack = list(outs[rng.choice(ok)][1])
    return checked


@pytest.mark.parametrize("name,inline_max", [(n, k) for n in ("tiny_sql", "calc", "json") for k in (0, 4, 10**6)]
                         + [("spider", 0), ("spider", 4), ("spider", 64)])
def test_dpda_forms_agree_with_lr_driver(name, inline_max):
    """One-step, direct jumps, aggregated, packed (Python) and the numba kernel: the same stack after every
    terminal as the LR driver, on random walks over valid stacks (all terminals tried at each step)."""
    spec = _sql(name) if name == "spider" else _spec(name, CASES[name][0])
    cfg, _t, _i = lark_grammar(spec)
    t = build_tables(cfg)
    d0 = one_step(t)
    d1 = direct_jumps(t, inline_max=inline_max, max_edges=Pre3Options().max_edges)
    d2 = aggregate(d1)
    p = pack(d2)
    forms = [lambda s, a: lr_feed(t, s, a), d0.feed, d1.feed, d2.feed, p.feed, lambda s, a: _numba_feed(p, s, a)]
    n = _walk_forms(t, forms, walks=25 if name == "spider" else 40)
    assert n > 1000
    assert len(d2.edges) <= len(d1.edges)
    assert d2.n_states <= d0.n_states


def test_direct_jumps_fuse_reductions_and_cut_loops():
    """Chains of reductions become single edges with deeper conditions; the right-recursive "-" atom and
    "not" cond loop, and even with unlimited inlining the edge set stays finite through reduce states."""
    cfg, _t, _i = lark_grammar(_spec("calc", CALC))
    t = build_tables(cfg)
    d1 = direct_jumps(t, inline_max=10**6, max_edges=Pre3Options().max_edges)
    assert d1.stats["reduce_states"] > 0 and d1.stats["cuts"] > 0
    looping = {cfg.nonterminals[A] for A in d1.reduce_nt}
    assert looping & {"cond", "atom", "term", "expr"}, looping
    assert max(len(e.cond) for e in d1.edges) >= 2          # a direct jump reads below the top
    assert any(e.kind == 0 and e.pop > 0 for e in d1.edges)   # reductions and the shift in one edge
    d0 = one_step(t)
    assert d1.stats["reduce_states"] < len(d0.reduce_nt)     # merging removed reduce states
    assert len(aggregate(d0).edges) < len(d0.edges)
    text = "\n".join(d1.describe(e) for e in d1.edges[:5])
    assert "shift" in text and "on {" in text


def test_readable_and_packed_agree_on_random_stacks():
    """Arbitrary stacks (reachable or not) and every (state, terminal): the packed arrays select the same edge
    outcome as the readable edge list."""
    cfg, _t, _i = lark_grammar(_spec("calc", CALC))
    t = build_tables(cfg)
    d2 = aggregate(direct_jumps(t, inline_max=4, max_edges=Pre3Options().max_edges))
    p = pack(d2)
    rng = random.Random(5)
    for _ in range(3000):
        stack = [t.start_state] + [rng.randrange(t.n_states) for _ in range(rng.randrange(0, 8))]
        a = rng.randrange(cfg.n_t)
        s1, s2 = list(stack), list(stack)
        r1, r2 = d2.feed(s1, a), p.feed(s2, a)
        assert (r1, s1 if r1 == "shift" else None) == (r2, s2 if r2 == "shift" else None), stack


# -- masks against the reference checker under the declared profile ---------------------------------------
def _reference_walk(eng, tok, spec, samples, walks=6, steps=30, seed=0):
    prof = eng.profile()
    ref = ReferenceChecker(spec, prof)
    rng = random.Random(seed)
    diffs, n = [], 0

    def visit(prefix):
        nonlocal n
        n += 1
        got = _ids(eng, tok)
        sid = ref.advance(ref.initial(), prefix)
        want = set(ref.full_mask_ids(sid, tok).tolist()) if sid != DEAD else set()
        if got != want:
            diffs.append((prefix, sorted(got - want)[:5], sorted(want - got)[:5]))
        return got

    for text in samples:
        eng.reset()
        prefix = b""
        for t in tok.encode(text):
            got = visit(prefix)
            if t not in got:
                break
            assert eng.commit(t)
            prefix += tok.token_bytes[t]
        else:
            assert tok.eos_id in visit(prefix)
            assert eng.commit(tok.eos_id)
    for _ in range(walks):
        eng.reset()
        prefix = b""
        for _s in range(steps):
            got = visit(prefix)
            nice = [c for c in sorted(got - {tok.eos_id}) if 32 <= c < 127]
            if not nice:
                break
            c = rng.choice(nice)
            assert eng.commit(c)
            prefix += bytes([c])
    return n, diffs


@pytest.mark.parametrize("name", ["tiny_sql", "calc", "json", "words", "json/chars", "words/chars"])
def test_masks_equal_reference_under_profile(engines, bytes_tokenizer, name):
    """Samples and random walks equal the reference under the declared profile: auto runs JSON and ``words`` on
    the lexer front end, whose standard lexing is their scannerless language (exact.py: ``Profile()``), and the
    SQL-like grammars on it with the standard profile (not exact: keywords next to NAME); forced, the character
    level reads the scannerless language too."""
    eng = engines[name]
    grammar = name.split("/")[0]
    expected = "chars" if name.endswith("/chars") else "lexer"
    assert eng.info()["front_end"] == expected
    exact = expected == "chars" or grammar in ("json", "words")
    assert eng.profile() == (Profile() if exact else Profile(lexing="standard"))
    assert eng.info()["lexer_exact"]["exact"] == (grammar in ("json", "words") and expected == "lexer")
    n, diffs = _reference_walk(eng, bytes_tokenizer, _spec(grammar, CASES[grammar][0]), CASES[grammar][1])
    assert n > 50
    assert not diffs, diffs[:3]


@pytest.mark.parametrize("name,front_end", [("calc", "auto"), ("json", "auto"), ("json", "chars")])
def test_multi_byte_tokens_equal_reference(name, front_end):
    """Tokens of several terminals, cut inside lexemes and UTF-8 characters: jobs with long terminal sequences
    and pending sets, against the reference under the declared profile (JSON: the exact lexer under the
    scannerless one, and the character level)."""
    from test_valiant import multi_tokenizer

    text, samples = CASES[name]
    samples = [s for s in samples if s]
    tok = multi_tokenizer(samples, extra=[b"(((", b", ", b"\" ", b"--", "é\"".encode()[:1]])
    eng = Pre3Engine(cache=False, front_end=front_end)
    eng.compile(_spec(name, text), tok)
    assert eng.profile() == (Profile(lexing="standard") if name == "calc" else Profile())
    n, diffs = _reference_walk(eng, tok, _spec(name, text), samples, walks=3, steps=15)
    assert n > 40 and not diffs, diffs[:3]


def test_spider_bytes_masks_equal_reference_standard(engines, bytes_tokenizer):
    n, diffs = _reference_walk(engines["spider"], bytes_tokenizer, _sql("spider"), SQL_SAMPLES, walks=3)
    assert n > 150
    assert not diffs, diffs[:3]


def test_char_level_conflicts_on_spider_fall_back_to_lexer(engines, bytes_tokenizer):
    """Spider's byte-level expansion is not LALR(1) (keywords vs NAME, where a NAME ends): auto falls back
    to the lexer front end and records why; front_end=chars refuses with the conflicts named."""
    info = engines["spider"].info()
    assert info["front_end"] == "lexer"
    causes = info["char_level"]["by_cause"]
    assert info["char_level"]["conflicts"] > 100
    assert any(k.startswith("shift/reduce: NAME") for k in causes)
    assert any(k.startswith("reduce/reduce:") and "NAME" in k for k in causes)
    with pytest.raises(CompileError, match=r"character-level expansion has \d+ conflict\(s\).*NAME@"):
        Pre3Engine(cache=False, front_end="chars").compile(_spec("tiny_sql", TINY), bytes_tokenizer)


# "q" then "a" "b" is Y C; "ab" alone is X: the character level takes it (LALR(1) on bytes), while the standard
# lexer munches "ab" after "q" as X, which the grammar does not want there
SPLIT = 'start: "q" Y C | X\nX: "ab"\nY: "a"\nC: "b"\n'


def test_front_end_lexer_forced_on_char_grammar(bytes_tokenizer):
    """A grammar the character level takes and whose terminals the lexer does not read exactly: auto runs it on
    the character level (scannerless); forced through the lexer it declares the standard-lexer profile, whose
    masks it equals and which differs from the scannerless language there (after "qa", "b" is refused)."""
    auto = Pre3Engine(cache=False)
    auto.compile(_spec("split", SPLIT), bytes_tokenizer)
    assert auto.info()["front_end"] == "chars" and auto.profile() == Profile()
    assert not auto.info()["lexer_exact"]["exact"] and "byte b'b'" in auto.info()["lexer_exact"]["why"]
    eng = Pre3Engine(cache=False, front_end="lexer")
    eng.compile(_spec("split", SPLIT), bytes_tokenizer)
    assert eng.info()["front_end"] == "lexer" and eng.profile() == Profile(lexing="standard")
    for e in (auto, eng):
        n, diffs = _reference_walk(e, bytes_tokenizer, _spec("split", SPLIT), ["qab", "ab"], walks=3)
        assert n > 5 and not diffs, diffs[:3]
    for e in (auto, eng):
        e.reset()
        assert e.commit(ord("q")) and e.commit(ord("a"))
    assert ord("b") in _ids(auto, bytes_tokenizer) and ord("b") not in _ids(eng, bytes_tokenizer)


def test_lexer_exactness_check():
    """exact.py proves JSON's and ``words``' terminals read exactly by the standard lexer and refuses, naming the
    cause, terminals a munch can split differently (SQL keywords next to NAME, a comment that scannerless text
    may end anywhere) and two terminals matching the same text."""
    from gcdbench.parsers.pre3.exact import lexer_is_exact

    def check(text):
        return lexer_is_exact(*lark_grammar(_spec("g", text)))

    assert check(JSON)[0] and check(WORDS)[0]
    ok, why = check(TINY)
    assert not ok and "NAME" in why
    ok, why = check(CALC)
    assert not ok and "NAME" in why
    ok, why = check('start: A ("," A)*\nA: /[a-z]+/\nCOMMENT: /#[^\\n]*/\n%ignore COMMENT\n%ignore " "\n')
    assert not ok and "COMMENT" in why   # scannerless text may end a comment anywhere and go on with an A
    ok, why = check('start: A | B\nA: /x+/\nB: /xx/\n')
    assert not ok and "match the same text" in why
    ok, why = check('start: A ("," A)*\nA: /[a-z]+/\n%ignore " "\n')
    assert ok, why


def test_leading_ignore_option(bytes_tokenizer):
    strict = Pre3Engine(cache=False, front_end="lexer")
    strict.compile(_spec("tiny_sql", TINY), bytes_tokenizer)
    loose = Pre3Engine(cache=False, front_end="lexer", leading_ignore=True)
    loose.compile(_spec("tiny_sql", TINY), bytes_tokenizer)
    assert ord(" ") not in _ids(strict, bytes_tokenizer)
    assert ord(" ") in _ids(loose, bytes_tokenizer)
    assert loose.profile().leading_ignore
    with pytest.raises(CompileError, match="leading_ignore"):
        Pre3Engine(cache=False, front_end="chars", leading_ignore=True).compile(_spec("w", WORDS), bytes_tokenizer)


def test_commit_refuses_what_the_mask_refuses(engines, bytes_tokenizer):
    eng, tok = engines["tiny_sql"], bytes_tokenizer
    eng.reset()
    assert not eng.commit(ord("#"))
    eng.reset()
    for c in b"select":
        assert eng.commit(c)
    assert tok.eos_id not in _ids(eng, tok)
    assert not eng.commit(tok.eos_id)
    eng.reset()
    for c in b"select a from t":
        assert eng.commit(c)
    assert tok.eos_id in _ids(eng, tok)
    assert eng.commit(tok.eos_id)
    assert _ids(eng, tok) == set()
    assert not eng.commit(ord(" "))


def test_dense_rows_equal_token_lists(bytes_tokenizer):
    """Jobs with a precomputed mask row (dense_min=2: most jobs) give the masks of token lists (dense_min
    above the vocabulary: none), with the work split over several chunks."""
    tok = bytes_tokenizer
    rows = Pre3Engine(cache=False, dense_min=2, chunk=64)
    lists = Pre3Engine(cache=False, dense_min=10**9, chunk=64)
    for e in (rows, lists):
        e.compile(_spec("calc", CALC), tok)
    assert rows.info()["dense_jobs"] > 0 and lists.info()["dense_jobs"] == 0
    assert rows.info()["listed_tokens"] < lists.info()["listed_tokens"] == lists.info()["job_tokens"]
    for text in CALC_SAMPLES[:3]:
        rows.reset()
        lists.reset()
        for t in tok.encode(text):
            assert _ids(rows, tok) == _ids(lists, tok)
            assert rows.commit(t) and lists.commit(t)


def test_jobs_share_prefixes_in_order_and_masks_equal_unshared():
    """A class's jobs are in lexicographic order of their terminal sequences and ``job_lcp`` is the prefix each
    shares with the one before it (0 for a class's first job). A mask runs a shared prefix once, skips the jobs
    behind a failed one, memoises runs on the committed stack and whole masks by their allowed jobs: with tokens of
    several bytes and terminals, every mask along the samples and random walks equals the one with none of these
    (``share_prefixes=false``, ``run_memo=0``, ``mask_memo=0``), on the character level (json, calc) and the lexer
    front end (Spider), with one thread's jobs split into parts."""
    import random

    from test_valiant import multi_tokenizer

    for name in ("json", "calc", "spider"):
        spec = _sql(name) if name == "spider" else _spec(name, CASES[name][0])
        samples = SQL_SAMPLES if name == "spider" else [x for x in CASES[name][1] if x]
        tok = multi_tokenizer(samples, extra=[b"(((", b", ", b"\" ", b"--", b"  ", b"   "])
        eng = Pre3Engine(cache=False)
        plain = Pre3Engine(cache=False, share_prefixes=False, run_memo=0, mask_memo=0)
        for e in (eng, plain):
            e.compile(spec, tok)
        sh = eng._shared
        assert not plain._shared.job_lcp.any() and plain._shared.memo_cap == 0 and sh.memo_cap == 256
        assert plain._shared.mkeys.shape[0] == 0 and sh.mkeys.shape[0] == 64
        seq_ptr, seq_term, cls_ptr, job_seq = (sh.jobs[k] for k in ("seq_ptr", "seq_term", "cls_ptr", "job_seq"))
        seq = lambda j: seq_term[seq_ptr[job_seq[j]]:seq_ptr[job_seq[j] + 1]].tolist()   # noqa: E731
        shared = 0
        for c in range(len(cls_ptr) - 1):
            for j in range(cls_ptr[c], cls_ptr[c + 1]):
                if j == cls_ptr[c]:
                    assert sh.job_lcp[j] == 0
                    continue
                a, b = seq(j - 1), seq(j)
                assert a <= b, (name, c, j)
                n = 0
                while n < min(len(a), len(b)) and a[n] == b[n]:
                    n += 1
                assert sh.job_lcp[j] == n, (name, c, j)
                shared += n
        assert shared > 0, name
        rng = random.Random(3)
        steps = 0
        for text in samples[:3] + [None] * 3:
            eng.reset()
            plain.reset()
            stream = tok.encode(text) if text is not None else None
            for k in range(60):
                got = _ids(eng, tok)
                assert got == _ids(plain, tok), (name, text, k)
                steps += 1
                if stream is not None:
                    if k >= len(stream):
                        break
                    nxt = stream[k]
                else:
                    options = sorted(got - {tok.eos_id})
                    if not options:
                        break
                    nxt = rng.choice(options)
                assert eng.commit(nxt) and plain.commit(nxt)
        assert steps > 60, name
        # masks were kept (each walk's first mask, at the empty prefix, was then one copy of a kept row)
        assert (sh.mkeys[:, 0] >= 0).any(), name


# -- batch: fork and fill_masks -----------------------------------------------------------------------------
def _batch_equals_sequential(eng, tok, texts, rng_seed=0):
    seqs = [eng] + [eng.fork() for _ in texts[1:]]
    for s in seqs:
        s.reset()
    streams = [tok.encode(t) + [tok.eos_id] for t in texts]
    out = np.zeros((len(seqs), (tok.vocab_size + 31) // 32), dtype=np.int32)
    steps = 0
    for step in range(max(len(s) for s in streams)):
        out[:] = -1
        eng.fill_masks(seqs, out)
        for i, s in enumerate(seqs):
            m = allocate_mask(tok.vocab_size)
            s.fill_mask(m)
            assert np.array_equal(m, out[i]), (i, step)
            steps += 1
        for i, s in enumerate(seqs):
            if step < len(streams[i]):
                assert s.commit(streams[i][step])
    return steps


def test_fork_and_fill_masks_equal_sequential(engines, bytes_tokenizer):
    eng = engines["spider"]
    steps = _batch_equals_sequential(eng, bytes_tokenizer, SQL_SAMPLES + ["SELECT a FROM b"])
    assert steps > 100
    a, b = eng.fork(), eng.fork()
    assert a._shared is b._shared is eng._shared and a._stack is not b._stack
    with pytest.raises(ValueError, match="forks"):
        eng.fill_masks([eng, engines["calc"]], np.zeros((2, 9), dtype=np.int32))


def test_parallel_cpu_equals_one_thread(bytes_tokenizer):
    import numba

    if numba.config.NUMBA_NUM_THREADS < 2:
        pytest.skip("numba sees one core")
    one = Pre3Engine(cache=False, threads=1)
    two = Pre3Engine(cache=False, threads=2, chunk=64)
    for e in (one, two):
        e.compile(_spec("calc", CALC), bytes_tokenizer)
    for text in CALC_SAMPLES[:3]:
        one.reset()
        two.reset()
        for t in bytes_tokenizer.encode(text):
            assert _ids(one, bytes_tokenizer) == _ids(two, bytes_tokenizer)
            assert one.commit(t) and two.commit(t)


# -- cache, options -------------------------------------------------------------------------------------------
def test_cache_roundtrip(tmp_path, bytes_tokenizer):
    spec = _spec("tiny_sql", TINY)
    a = Pre3Engine(cache_dir=str(tmp_path))
    a.compile(spec, bytes_tokenizer)
    assert a.info()["cache_hit"] is False
    b = Pre3Engine(cache_dir=str(tmp_path))
    b.compile(spec, bytes_tokenizer)
    assert b.info()["cache_hit"] is True
    assert b.info()["direct"] == a.info()["direct"]
    for c in b"select a from t":
        assert _ids(a, bytes_tokenizer) == _ids(b, bytes_tokenizer)
        assert a.commit(c) and b.commit(c)


def test_registry_and_declarations():
    from gcdbench.parsers.registry import engine_class

    assert engine_class("pre3") is Pre3Engine
    assert Pre3Engine.complexity() == "O(n)"
    for col, path in Pre3Engine.artifact_keys.items():
        assert isinstance(col, str) and isinstance(path, tuple) and path


def test_bad_options_are_named():
    with pytest.raises(ValueError, match="front_end"):
        Pre3Engine(front_end="regex")._check_options()
    with pytest.raises(ValueError, match="backend"):
        Pre3Engine(backend="tpu")._check_options()
    with pytest.raises(ValueError, match="unknown option"):
        Pre3Engine(lexer="contextual")
    with pytest.raises(ValueError, match="run_memo"):
        Pre3Engine(run_memo=-1)._check_options()
    with pytest.raises(ValueError, match="mask_memo"):
        Pre3Engine(mask_memo=-1)._check_options()


# -- Qwen3 (slow): the real vocabulary --------------------------------------------------------------------
@pytest.fixture(scope="module")
def qwen3_engines(qwen3_tokenizer, tmp_path_factory):
    cache = tmp_path_factory.mktemp("pre3cache")
    out = {}
    for name in ("spider", "spider_spop"):
        eng = Pre3Engine(cache_dir=str(cache))
        eng.compile(_sql(name), qwen3_tokenizer)
        out[name] = eng
    return out


def _forced_steps_equal_reference(eng, tok, ref, texts) -> int:
    """Teacher-force each text (then EOS): at every step the whole mask equals the reference's. Returns the
    number of steps checked."""
    steps = 0
    for text in texts:
        eng.reset()
        prefix = b""
        for t in tok.encode(text) + [tok.eos_id]:
            got = _ids(eng, tok)
            want = set(ref.full_mask_ids(ref.advance(ref.initial(), prefix), tok).tolist())
            assert got == want, (prefix, sorted(got - want)[:5], sorted(want - got)[:5])
            steps += 1
            assert eng.commit(t)
            if t != tok.eos_id:
                prefix += tok.token_bytes[t]
    return steps


@pytest.mark.parametrize("name", ["json", "words"])
def test_context_split_equals_plain_char_level(name):
    """The character level split by the top LR state (context.py) gives the masks of the plain one at every
    step (samples and random walks, multi-byte tokens), and a mask runs fewer jobs."""
    from test_valiant import multi_tokenizer

    text, samples = CASES[name]
    samples = [s for s in samples if s]
    tok = multi_tokenizer(samples, extra=[b"(((", b", ", b"\" ", b"--", b"\"}", b"\"]", "é\"".encode()[:1]])
    split, plain = Pre3Engine(cache=False, front_end="chars"), Pre3Engine(cache=False, front_end="chars",
                                                                           context_split=False)
    split.compile(_spec(name, text), tok)
    plain.compile(_spec(name, text), tok)
    info = split.info()
    assert info["front_end"] == "chars" and isinstance(info["context_split"], dict), info
    assert plain.info()["context_split"] == "off" and plain._shared.state_class is None
    assert info["context_split"]["classes"] >= 2
    rng = random.Random(1)
    steps = 0
    for text_i in samples + [None] * 4:
        split.reset()
        plain.reset()
        stream = tok.encode(text_i) + [tok.eos_id] if text_i is not None else None
        for k in range(40):
            a, b = _ids(split, tok), _ids(plain, tok)
            assert a == b, (text_i, k, sorted(a ^ b)[:5])
            steps += 1
            nxt = stream[k] if stream is not None else (rng.choice(sorted(a)) if a else None)
            if nxt is None or nxt not in a:
                break
            assert split.commit(nxt) and plain.commit(nxt)
            if nxt == tok.eos_id:
                break
    assert steps > 20
    jobs = split._shared.jobs["cls_ptr"]
    assert int(np.diff(jobs).max()) < plain.info()["jobs"]


@pytest.mark.parametrize("name", ["json", "words", "open_keys"])
def test_shared_subtree_sort_equals_the_plain_sort(name, monkeypatch):
    """Sorting the jobs per LR state with the root children's subtrees shared (``sort_jobs_shared``: kept per
    state shifted to, CONTEXT ones walked again on the fuller stack) gives exactly the sorts of every state's own
    walk, with room for every subtree, for almost none (a 1-byte store), and on an object whose open keys are the
    complement of its listed ones (thousands of states inside a key string, as MaskBench's schemas)."""
    import gcdbench.parsers.pre3.context as ctx
    from gcdbench.parsers.jsonschema import schema_to_lark
    from test_valiant import multi_tokenizer

    if name == "open_keys":
        schema = {"type": "object", "properties": {k: {"type": "string"} for k in ("audiences", "token", "tag")}}
        text, samples = schema_to_lark(schema), ['{"audiences":"a\\u00e9","tag":"x","tb":"y"}']
    else:
        text, samples = CASES[name]
    samples = [x for x in samples if x]
    tok = multi_tokenizer(samples, extra=[b"(((", b", ", b"\" ", b"--", b"\"}", b"\"]", "é\"".encode()[:1], b"au",
                                          b"to"])
    plain_sort = ctx.sort_states
    seen = []

    def both(*args, **kw):
        assert kw.pop("shared_bytes") == 64 << 20        # the engine's default sort_share_mb
        ref_k, ref_s, _ = plain_sort(*args, **kw, shared_bytes=0)
        for room in (64 << 20, 1):
            k, srt, stats = plain_sort(*args, **kw, shared_bytes=room)
            assert np.array_equal(k, ref_k) and len(srt) == len(ref_s), (name, room)
            assert all(np.array_equal(a, b) for a, b in zip(srt, ref_s)), (name, room)
            seen.append(stats)
        return k, srt, stats

    monkeypatch.setattr(ctx, "sort_states", both)
    eng = Pre3Engine(cache=False, front_end="chars")
    eng.compile(_spec(name, text), tok)
    assert eng.info()["front_end"] == "chars" and len(seen) == 2
    assert seen[0]["shared_bytes"] > 1 >= seen[1]["shared_bytes"]


@pytest.mark.slow
def test_qwen3_json_context_split_equals_reference(qwen3_tokenizer):
    """JSON with the Qwen3 vocabulary on the character level, split by context: every step of two documents
    equals the scannerless reference (the declared profile)."""
    tok = qwen3_tokenizer
    spec = _spec("json", JSON)
    eng = Pre3Engine(cache=False, front_end="chars")
    eng.compile(spec, tok)
    assert eng.info()["front_end"] == "chars" and eng._shared.state_class is not None
    ref = ReferenceChecker(spec, eng.profile())
    docs = [r'{"name": "caf\u00e9 \\ é x", "n": [1, -2.5, true, null], "o": {}}', r'["a\"b", {"k": false}]']
    assert _forced_steps_equal_reference(eng, tok, ref, docs) > 30


def _spider_queries(name, n):
    from gcdbench.datasets.spider import to_spop

    qs = ["SELECT count(*) FROM singer WHERE age > 20 AND name != 'Joe'",
          "SELECT T1.name, avg(T2.age) FROM a AS T1 JOIN b AS T2 ON T1.id = T2.id GROUP BY T1.name",
          "SELECT name FROM t WHERE NOT id IN (SELECT x FROM u) ORDER BY name DESC LIMIT 3"][:n]
    return [to_spop(q) for q in qs] if name == "spider_spop" else qs


@pytest.mark.slow
@pytest.mark.parametrize("name", ["spider", "spider_spop"])
def test_qwen3_masks_equal_reference_standard(qwen3_engines, qwen3_tokenizer, name):
    """Every step of Spider / sp-op queries with the Qwen3 vocabulary: the whole mask equals the reference
    checker's under Lark's standard lexing (the engine's declared profile)."""
    eng, tok = qwen3_engines[name], qwen3_tokenizer
    assert eng.profile() == Profile(lexing="standard")
    ref = ReferenceChecker(_sql(name), Profile(lexing="standard"))
    assert _forced_steps_equal_reference(eng, tok, ref, _spider_queries(name, 2)) > 30


@pytest.mark.slow
@pytest.mark.parametrize("name", ["spider"])
def test_qwen3_masks_equal_psc_and_batch(qwen3_engines, qwen3_tokenizer, name):
    """PSC reads text with the same lexer over the same LALR tables: every mask is the same; and a batch of
    forks gives the sequential masks."""
    from gcdbench.parsers.psc.engine import PSCEngine

    eng, tok = qwen3_engines[name], qwen3_tokenizer
    psc = PSCEngine(cache=False)
    psc.compile(_sql(name), tok)
    for q in _spider_queries(name, 3):
        eng.reset()
        psc.reset()
        for t in tok.encode(q) + [tok.eos_id]:
            a, b = allocate_mask(tok.vocab_size), allocate_mask(tok.vocab_size)
            eng.fill_mask(a)
            psc.fill_mask(b)
            assert np.array_equal(a, b), q
            assert eng.commit(t) and psc.commit(t)
    assert _batch_equals_sequential(eng, tok, _spider_queries(name, 3)) > 50


def test_construction_past_max_build_s_is_a_compile_timeout_as_in_psc():
    """A construction over its budget is a time-out (a resume compiles again), not a refusal of the grammar."""
    from gcdbench.parsers.base import CompileTimeout
    from gcdbench.parsers.pre3.engine import build_artifact
    from gcdbench.parsers.tokenizers import load_tokenizer

    grammar = _spec("tiny_sql", (GRAMMARS / "tiny_sql.lark").read_text())
    with pytest.raises(CompileTimeout, match=r"max_build_s"):
        build_artifact(grammar, load_tokenizer("bytes"), max_build_s=0.0)
