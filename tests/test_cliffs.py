"""Issue 25 (cliffs): the reference checker and Valiant stay polynomial where a terminal may follow itself, and the
cliffs tooling (bench, fits, shrinker, report section) works end to end on small inputs. Counters, not clocks: the
number of configurations and chart nodes a state holds is what grew exponentially before."""
from __future__ import annotations

import time

import numpy as np
import pytest

from gcdbench.datasets.fuzz import SEXPR_GRAMMAR, generate_grammar
from gcdbench.parsers.base import GrammarSpec, Profile, allocate_mask, mask_to_ids
from gcdbench.parsers.reference import DEAD, ReferenceChecker, ReferenceEngine
from gcdbench.parsers.tokenizers import byte_level

SEXPR = GrammarSpec(name="sexpr", lark=SEXPR_GRAMMAR)
GROUP = "(f x a) uu (list-vector 9 ab)"


def _sentence(k: int) -> str:
    return "(" + " ".join([GROUP] * k) + ")"


def test_reference_state_stays_small_on_the_sexpr_grammar():
    """Before: 234,256 configurations after 120 bytes (one Earley chart per cut path). Now one boundary node per
    byte position: a state holds at most one configuration per (piece start in the current word, DFA state)."""
    rc = ReferenceChecker(SEXPR)
    data = _sentence(20).encode()
    sid = rc.initial()
    worst = 0
    for b in data:
        sid = rc.step(sid, b)
        assert sid != DEAD
        worst = max(worst, len(rc._sets[sid]))
    assert rc.accepts(sid)
    assert worst <= 2 * len("list-vector") + 2, worst


def test_reference_merging_is_exact_against_per_path_nodes():
    """The merged lattice and the per-path charts (what longest-match profiles keep) give the same viability on every
    prefix of fuzzed sentences and their mutations (the per-path form is exact by construction)."""
    import random

    from gcdbench.datasets.fuzz import mutate, sample_sentences

    rng = random.Random(0)
    for seed in (-1, 0, 4, 7, 11):
        fg = generate_grammar(seed)
        sp = GrammarSpec(name=f"f{seed}", lark=fg.lark)
        merged, per_path = ReferenceChecker(sp), ReferenceChecker(sp)
        per_path.merge = "path"
        assert merged.merge == "position"
        for text in sample_sentences(fg, (8, 12), seed=seed):
            for t in (text, mutate(text, rng), mutate(text, rng)):
                data = t.encode()
                a, b = merged.initial(), per_path.initial()
                for i in range(len(data)):
                    a, b = merged.step(a, data[i]), per_path.step(b, data[i])
                    assert (a == DEAD) == (b == DEAD), (seed, t, i)
                    if a == DEAD:
                        break
                assert merged.accepts(a) == per_path.accepts(b), (seed, t)


# Where a profile's lexing depends on the parse (longest match: the rivals are the terminals expected where a piece
# began), "expected by that cut path" and "expected by some parse" differ. A and B both match "a", then the parses
# expect X ("x", then Z "y") or Y (/xy?/, then "!"): per cut path "axy" is a sentence (A X Z), with one node per
# position Y's longer match wins and only "!" may follow. The third: trailing_ignore=False after "a", where the parse
# A expects nothing and B expects C: per path the space belongs to B's parse only, so "a " is no sentence; with one
# node per position it is. LLGuidance keeps one Earley set: one node per position, in all three.
DISCRIMINATING = [
    ('start: A X Z | B Y "!"\nA: "a"\nB: /a/\nX: "x"\nZ: "y"\nY: /xy?/\n', "axy!"),
    ('start: A T X Z | B T Y "!"\nA: "a"\nB: /a/\nT: "t"\nX: "x"\nZ: "y"\nY: /xy?/\n', "atxy!"),
    ('start: A | B C\nA: "a"\nB: /a/\nC: "c"\n%ignore " "\n', "a c"),
]


@pytest.mark.parametrize("lark,text", DISCRIMINATING)
def test_longest_match_profile_is_llguidances_one_node_per_position(lark, text):
    """The reference's LLGuidance profile (one boundary node per position, polynomial) gives LLGuidance's own masks on
    the grammars where one node per cut path (what it kept before, exponential) gives other masks."""
    from gcdbench.parsers.llguidance_engine import LLGuidanceEngine

    sp, tok = GrammarSpec(name="disc", lark=lark), byte_level()
    eng = LLGuidanceEngine()
    eng.compile(sp, tok)
    rc, per_path = ReferenceChecker(sp, eng.profile()), ReferenceChecker(sp, eng.profile())
    assert rc.merge == "position"
    per_path.merge = "path"
    a, b, differ = rc.initial(), per_path.initial(), 0
    for i in range(len(text) + 1):
        out = allocate_mask(tok.vocab_size)
        eng.fill_mask(out)
        got = mask_to_ids(out, tok.vocab_size).tolist()
        assert got == rc.full_mask_ids(a, tok).tolist(), (text, i)
        differ += got != per_path.full_mask_ids(b, tok).tolist()
        if i < len(text):
            assert eng.commit(text.encode()[i])
            a, b = rc.step(a, text.encode()[i]), per_path.step(b, text.encode()[i])
    assert differ == 1


def test_longest_match_state_stays_small_on_the_sexpr_grammar():
    """One node per cut path gave LLGuidance's profile exponentially many configurations on the S-expression grammar;
    one node per position keeps a state linear in the current word."""
    rc = ReferenceChecker(SEXPR, Profile(lexing="longest_match", trailing_ignore=False))
    data = _sentence(20).encode()
    sid, worst = rc.initial(), 0
    for b in data:
        sid = rc.step(sid, b)
        assert sid != DEAD
        worst = max(worst, len(rc._sets[sid]))
    assert worst <= 4 * (len("list-vector") + 2), worst
    assert rc.accepts(sid)


def test_valiant_configurations_and_chart_nodes_stay_linear():
    """Valiant on the sexpr grammar (bytes vocabulary): masks equal the reference's at every step, the state holds a
    bounded number of configurations, and the chart store grows by at most one node per byte on the committed path."""
    from gcdbench.parsers.valiant.engine import ValiantEngine

    tok = byte_level()
    eng = ValiantEngine(cache=False)
    eng.compile(SEXPR, tok)
    rc = ReferenceChecker(SEXPR)
    data = _sentence(6).encode()
    mask = allocate_mask(tok.vocab_size)
    worst = 0
    for i in range(len(data) + 1):
        eng.fill_mask(mask)
        if i % 9 == 0 or i == len(data):
            want = rc.full_mask_ids(rc.advance(rc.initial(), data[:i]), tok)
            assert np.array_equal(mask_to_ids(mask, tok.vocab_size), want), data[:i]
        if i < len(data):
            assert eng.commit(data[i])
            worst = max(worst, len(eng.configs))
    assert worst <= 2 * len("list-vector") + 2, worst
    assert eng.accepting()


def test_bench_fit_and_section(tmp_path):
    """The in-process bench on two small fuzzed grammars (bytes vocabulary), its fit and the report section."""
    import json

    from gcdbench.experiments.cliffs import bench
    from gcdbench.experiments.fit import fit_bench
    from gcdbench.experiments.report.cliffs import cliffs_section

    recs = bench([-1, 3], {"valiant": {"cache": False}}, lengths=(5, 10, 20), tokenizer="bytes", audit=2,
                 budget_s=30, log=lambda m: None)
    assert {r["engine"] for r in recs} == {"reference", "valiant"}
    assert all(r["outcome"] == "ok" for r in recs), [r for r in recs if r["outcome"] != "ok"]
    val = [r for r in recs if r["engine"] == "valiant"]
    assert sum(r["agree"] for r in val) == sum(r["audited"] for r in val) > 0
    fit = fit_bench(recs)
    assert set(fit["grammar_seed"]) == {-1, 3} and fit["exponent"].notna().all()
    ref = fit[fit["engine"] == "reference"]
    assert (ref["column_bound_ratio"] > 0).all() and (ref["column_bound_ratio"] <= 1).all()
    assert (ref["max_column_items"] > 0).all()
    path = tmp_path / "bench.json"
    path.write_text(json.dumps({"records": recs, "machine": {"cpu": "test"}, "git_commit": "abc1234",
                                "command": "test"}))
    lines = cliffs_section(path, None, tmp_path)
    text = "\n".join(lines)
    assert "## Cliffs" in text and "**Reference checker.**" in text and "| valiant" in text
    assert "max S / (D (n + 1))" in text and "exponent vs S" in text
    assert (tmp_path / "cliffs_bench.csv").exists()


class CliffEngine(ReferenceEngine):
    """The reference, with every mask from the sixth token on 200 ms slower (a cliff), when the grammar still has its
    rule ``b``: a shrinker must keep the prefix long enough and that rule."""

    name = "cliff"

    def compile(self, grammar, tokenizer):
        super().compile(grammar, tokenizer)
        self.steep = "\nb:" in "\n" + grammar.lark
        self.n = 0

    def reset(self):
        super().reset()
        self.n = 0

    def fill_mask(self, out):
        super().fill_mask(out)
        if self.steep:
            time.sleep(0.2 if self.n >= 6 else 0.0)   # 200 ms from the sixth token on: far past any machine noise

    def commit(self, token_id):
        self.n += 1
        return super().commit(token_id)


def test_mask_times_measure_an_engine_by_name():
    """The shrinker's measurement runs an engine named ``module:Class`` over a grammar and a prefix: the cliff
    engine's masks from the sixth token on take at least its 200 ms (a sleep never undershoots)."""
    from gcdbench.experiments.cliffs import _mask_times

    tok = byte_level()
    lark = 'start: item+\nitem: a | b\na: "x" | "y"\nb: "z"\n'
    ids = tok.encode("xyzxyzx")
    times = _mask_times("tests.test_cliffs:CliffEngine", {}, lark, ids, tok, 20.0)
    assert len(times) == len(ids) + 1 and min(times[6:]) >= 0.2


def test_shrink_finds_a_short_prefix_and_drops_unneeded_lines(monkeypatch):
    """The shrinker's search, on measurements that do not depend on the machine's load: a cliff from the sixth
    token on while the grammar keeps rule ``b`` (what CliffEngine does, timed by the test above)."""
    from gcdbench.experiments import cliffs

    def fake_times(engine, options, lark, ids, tok, budget_s):
        steep = "\nb:" in "\n" + lark
        return [0.2 if steep and i >= 6 else 1e-4 for i in range(len(ids) + 1)]

    monkeypatch.setattr(cliffs, "_mask_times", fake_times)
    lark = 'start: item+\nitem: a | b | c\na: "x" | "y"\nb: "z"\nc: "w"\n'
    got = cliffs.shrink("tests.test_cliffs:CliffEngine", {}, lark, "xyzxyzxyzxyzxyzxyz", byte_level(), budget_s=20,
                        total_s=60)
    assert got is not None
    assert got["tokens"] == 6 and got["mask_ms"] == 200.0
    assert "\nb:" in "\n" + got["grammar"] and "c:" not in got["grammar"] and "| c" not in got["grammar"]


def test_within_exponent_reads_the_growth_of_the_cost_per_unit():
    from gcdbench.experiments.fit import deciles, within_exponent

    n = 400
    pos = np.arange(1, n + 1, dtype=float)
    assert abs(within_exponent(n, deciles(np.full(n, 3.0)))) < 0.05          # flat
    assert abs(within_exponent(n, deciles(pos)) - 1) < 0.1                  # linear per unit
    assert abs(within_exponent(n, deciles(pos ** 2)) - 2) < 0.15            # quadratic per unit
    assert np.isnan(within_exponent(10, deciles(np.ones(10))))


def test_state_exponent_reads_time_against_the_column_size():
    from gcdbench.experiments.fit import state_exponent

    def bins(f):
        return {k: [10, f(2.0 ** (k + 0.5))] for k in range(2, 12)}

    assert abs(state_exponent([bins(lambda s: 3 * s * s)]) - 2) < 1e-6
    assert abs(state_exponent([bins(lambda s: s), bins(lambda s: s)]) - 1) < 1e-6      # pooled sentences
    assert np.isnan(state_exponent([{6: [50, 10.0], 7: [50, 12.0]}]))                   # the column barely grew
    assert np.isnan(state_exponent([{5: [1, 1.0], 9: [1, 1e6]}]))                       # too few bytes per bin
    assert np.isnan(state_exponent([{1: [50, 0.3], 2: [50, 1.0], 4: [9, 30.0]}]))       # small columns only


@pytest.mark.parametrize("seed,cap", [(18, 16), (34, 16), (142, 4)])
def test_previously_refused_grammars_equal_the_reference(seed, cap):
    """Regression: fuzzed grammars Valiant refused before merged boundaries ("too many lexing configurations
    inside one token": overlapping terminals that follow one another), with a vocabulary of multi-byte pieces of
    their sentences and a small ``token_states``, so that walks go on merged boundaries and masks take their
    second phase; every mask equals the reference's."""
    from gcdbench.datasets.registry import load_dataset
    from gcdbench.parsers.tokenizers import Tokenizer
    from gcdbench.parsers.valiant.engine import ValiantEngine

    ds = load_dataset({"name": "fuzz", "grammar_seed": seed, "lengths": [10, 20]}, data_root=None)
    texts = [s.text.encode() for s in ds.samples]
    pieces = sorted({t[i:i + k] for t in texts for k in (2, 3, 5, 8, 12) for i in range(0, len(t) - k + 1, 3)})
    toks = [bytes([b]) for b in range(256)] + pieces
    tok = Tokenizer(name=f"fuzz{seed}-pieces", token_bytes=toks + [b""], eos_id=len(toks),
                    special_ids={"<eos>": len(toks)})
    eng = ValiantEngine(cache=False, token_states=cap)
    eng.compile(ds.grammar, tok)
    assert eng.comp.meta["merged_nodes"] > 0
    rc = ReferenceChecker(ds.grammar)
    mask = allocate_mask(tok.vocab_size)
    for data in texts:
        eng.reset()
        for i in range(len(data) + 1):
            eng.fill_mask(mask)
            if i % 3 == 0 or i == len(data):
                want = rc.full_mask_ids(rc.advance(rc.initial(), data[:i]), tok)
                assert np.array_equal(mask_to_ids(mask, tok.vocab_size), want), (seed, data[:i])
            if i < len(data):
                assert eng.commit(data[i])
        assert eng.accepting()
    assert eng.counters["chain_searches"] > 0


@pytest.mark.parametrize("seed", [48, 84, 125, 128])
def test_fuzzer_worst_cases_valiant_equals_the_reference(seed):
    """Regression: the grammars whose sentences were the reference's and Valiant's most expensive in the 200-grammar
    bench (a long word of self-following, overlapping terminals gives one piece per start position), at CI size."""
    from gcdbench.datasets.registry import load_dataset
    from gcdbench.parsers.valiant.engine import ValiantEngine

    ds = load_dataset({"name": "fuzz", "grammar_seed": seed, "lengths": [15, 40]}, data_root=None)
    tok = byte_level()
    eng = ValiantEngine(cache=False)
    eng.compile(ds.grammar, tok)
    rc = ReferenceChecker(ds.grammar)
    mask = allocate_mask(tok.vocab_size)
    for s in ds.samples:
        data = s.text.encode()
        eng.reset()
        for i in range(len(data) + 1):
            eng.fill_mask(mask)
            if i % 7 == 0 or i == len(data):
                want = rc.full_mask_ids(rc.advance(rc.initial(), data[:i]), tok)
                assert np.array_equal(mask_to_ids(mask, tok.vocab_size), want), (seed, data[:i])
            if i < len(data):
                assert eng.commit(data[i])
        assert eng.accepting()


def test_cliff_at_finds_a_cliff_that_starts_at_the_first_token():
    """XGrammar on fuzz_6: 3 ms at the empty prefix, then about 1 s per mask from the first token on. The median of
    the first five masks is already past the cliff; the fastest of them is not. A lone slow mask is no cliff."""
    from gcdbench.experiments.cliffs import _cliff_at

    assert _cliff_at([0.0033, 1.10, 0.94, 0.94, 0.91, 0.92, 0.99, 0.94]) == 1
    assert _cliff_at([1e-4, 1e-4, 2e-2, 1e-4, 1e-4, 1e-4]) is None
    assert _cliff_at([1e-4] * 5 + [5e-3] * 3) == 5
