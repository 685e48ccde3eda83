"""The grammar suite (datasets/suite.py): grammars load everywhere, every sample is in the language, samples are
real spans of the files they come from, the ambiguity families have the lengths they promise, and each dataset runs
through the ordinary runner (or records a typed reason)."""
from __future__ import annotations

import json
from pathlib import Path

import lark
import pytest

from gcdbench.datasets import suite
from gcdbench.datasets.base import load_grammar
from gcdbench.datasets.registry import load_dataset
from gcdbench.parsers.grammar import load_ir
from gcdbench.parsers.reference import ReferenceChecker
from gcdbench.parsers.valiant.cnf import to_cnf

GRAMMARS = ["json", "lark_lang", "ambiguous_binary", "ambiguous_ternary", "ambiguous_expr", "ambiguous_concat",
            "ambiguous_right"]


@pytest.fixture(scope="module")
def datasets():
    return {name: load_dataset({"name": name}, data_root="unused", n=None) for name in suite.SUITE}


@pytest.mark.parametrize("name", GRAMMARS)
def test_grammar_loads_in_the_reference_valiant_cnf_and_lark(name):
    spec = load_grammar(name)
    ReferenceChecker(spec)
    cnf = to_cnf(load_ir(spec))
    assert cnf.counts()["binary_rules"] > 0
    lark.Lark(spec.lark, start=spec.start, parser="earley")


@pytest.mark.parametrize("name", suite.SUITE)
def test_reference_accepts_every_sample(name, datasets):
    ds = datasets[name]
    assert len(ds.samples) >= 29, (name, len(ds.samples))
    assert not ds.meta.get("dropped"), ds.meta.get("dropped")   # the loader drops (and lists) non-sentences
    rc = ReferenceChecker(ds.grammar)
    bad = [s.id for s in ds.samples if not rc.is_sentence(s.text.encode())]
    assert not bad, bad
    assert len({s.id for s in ds.samples}) == len(ds.samples)


def test_json_pieces_are_valid_json_and_exact_spans_of_their_files(datasets):
    ds = datasets["json"]
    texts = {rel: suite.package_file(dist, rel).read_text(encoding="utf-8") for dist, rel, _ in suite.JSON_SOURCES}
    for s in ds.samples:
        json.loads(s.text)
        assert s.text[0] in "{[" and any(s.text in t for t in texts.values()), s.id
        assert 20 <= suite.qwen3_len(s.text) <= 300, s.id
    files = {m["file"] for m in ds.meta["per_source"] if m["kept"]}
    assert len(files) >= 8   # no single file dominates
    assert all(m["license"] for m in ds.meta["sources"])


def test_json_grammar_is_rfc_8259():
    """The grammar accepts exactly what Python's json module (strict, RFC 8259) accepts on tricky cases."""
    rc = ReferenceChecker(load_grammar("json"))
    cases = ['0', '-0', '01', '1.', '.5', '1.5e+3', '1E5', '-', '+1', '"a\\u00e9\\n"', '"\\x"', '"a\tb"', '"\\/"',
             '[1,]', '[1,2]', '{"a":1,}', '{"a":1}', '{"a" : [true, false, null]}', 'nul', '[]', '{}', '"\\uD83D"',
             '"é"', '[1 2]', '{1:2}', 'true false']
    for text in cases:
        try:
            json.loads(text, strict=True)
            want = True
        except ValueError:
            want = False
        assert rc.is_sentence(text.encode()) == want, text


def test_lark_chunks_are_whole_statements_of_real_files(datasets):
    ds = datasets["lark"]
    files = [suite.package_file(dist, rel).read_text(encoding="utf-8") for dist, rel, _ in suite.LARK_SOURCES]
    files += [p.read_text(encoding="utf-8") for p in suite._project_grammars()]
    for s in ds.samples:
        assert any(s.text in f for f in files), s.id
        first = s.text.splitlines()[0]
        assert first.strip() and not first.lstrip().startswith(("|", "//", "#")), s.id
    # a whole file is a sentence too: comments and blank lines anywhere, including first
    rc = ReferenceChecker(ds.grammar)
    for f in files:
        assert rc.is_sentence(f.encode()), f[:80]


@pytest.mark.parametrize("text,ok", [
    ("a: b c\n", True), ("a: b\n    | c -> d\n", True), ("a: b\n// c\n\n  | d", True), ("a: b // c | d", True),
    ('?x.2: "a"i | /b+/ ("c" ~ 2..3)*\n%import common.WS\n%ignore WS', True),
    ("tmpl{a, b}: a b\nx: tmpl{y, \"z\"}", True), ("%declare A B\n%import .m (A, b)", True),
    ("a b: c", False), ("a: (b", False), ("%foo x", False), ('x: "a""', False), ("A: /re", False),
    ("a: b\n | c d -> e f", False), ("  x: a", False),
])
def test_lark_language_accepts_and_rejects(text, ok):
    assert ReferenceChecker(load_grammar("lark_lang")).is_sentence(text.encode()) == ok


def test_lark_language_has_one_cut_into_terminals(datasets):
    """Every sample is read with at most a few configurations at a time (no exponential lexing ambiguity)."""
    rc = ReferenceChecker(load_grammar("lark_lang"))
    worst = 0
    for s in datasets["lark"].samples:
        sid = rc.initial()
        for b in s.text.encode():
            sid = rc.step(sid, b)
            worst = max(worst, len(rc._sets[sid]))
    assert worst <= 8


def test_ambiguity_families_grow_from_10_to_200_tokens(datasets, qwen3_tokenizer):
    for name in suite.AMBIGUOUS:
        ds = datasets[name]
        lengths = [len(s.text.split()) for s in ds.samples]
        assert lengths == sorted(lengths) and lengths[0] <= 11 and lengths[-1] >= 199, (name, lengths)
        for s in ds.samples[::7]:
            assert len(qwen3_tokenizer.encode(s.text)) == len(s.text.split())   # one Qwen3 token per terminal
            assert s.id == f"n{len(s.text.split()):03d}"
    same = [a.text == b.text for a, b in zip(datasets["ambiguous_concat"].samples, datasets["ambiguous_right"].samples)]
    assert all(same)


def test_ambiguous_lengths_option():
    ds = load_dataset({"name": "ambiguous_ternary", "lengths": [3, 5]}, data_root="unused")
    assert [s.text for s in ds.samples] == [suite.ambiguous_sentence("ambiguous_ternary", n) for n in (3, 5)]
    with pytest.raises(ValueError, match="positive"):
        load_dataset({"name": "ambiguous_ternary", "lengths": [0]}, data_root="unused")


def test_missing_package_names_it():
    with pytest.raises(suite.MissingPackage, match="pip install no-such-dist"):
        suite.package_file("no-such-dist", "x.json")


def test_every_engine_runs_a_suite_dataset_or_records_a_typed_reason(tmp_path):
    """Through the ordinary runner: PSC refuses the ambiguous grammar with a typed reason; XGrammar runs JSON."""
    from hydra import compose, initialize_config_dir

    from gcdbench.experiments.config import register
    from gcdbench.experiments.runner import run

    register()
    conf = Path(__file__).resolve().parents[1] / "conf"
    with initialize_config_dir(config_dir=str(conf), version_base="1.3"):
        psc = compose("config", overrides=["engine=psc", "dataset=ambiguous_concat", "dataset.lengths=[3,4]",
                                           "tokenizer=bytes", f"out_dir={tmp_path}", "progress=false"])
        xg = compose("config", overrides=["engine=xgrammar", "dataset=json", "samples=2", "tokenizer=bytes",
                                          f"out_dir={tmp_path}", "progress=false", "audit.per_sample=2"])
    meta = json.loads((run(psc) / "run.json").read_text())
    assert meta["outcomes"] == {"compile_error": 2} and "not LALR(1)" in meta["compile_error"]
    meta = json.loads((run(xg) / "run.json").read_text())
    assert meta["outcomes"] == {"ok": 2} and meta["audit"]["agree"] == meta["audit"]["steps"] > 0
    assert meta["dataset_meta"]["sources"][0]["license"] == "MIT"


CONFORMANCE = {"json": ("json", {}), "lark": ("lark", {}), "ambiguous_expr": ("ambiguous_expr", {"lengths": [5, 9]}),
               "ambiguous_ternary": ("ambiguous_ternary", {"lengths": [4, 7]}),
               "ambiguous_concat": ("ambiguous_concat", {"lengths": [4, 8]})}


#: (engine, case) -> (exception, message pattern): an engine known to fail on a suite grammar's oracle path (a
#: finding about the engine, asserted so that the entry cannot go stale)
KNOWN_FAILURES = {
    ("syncode", "json"): (AssertionError, "oracle token .* is not allowed"),   # its mask store refuses a valid token
    ("syncode", "lark"): (KeyError, "_END_COMMENT"),                           # its incremental parser crashes
}


def _engines():
    from engines_here import engine_params
    from gcdbench.parsers.registry import ENGINES

    return engine_params([n for n in ENGINES if n != "reference"],
                         where=lambda cls: not getattr(cls, "audit_skip", None))   # the null engine: no language


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(CONFORMANCE))
@pytest.mark.parametrize("engine", _engines())
def test_engine_masks_on_the_suite_equal_the_reference(engine, case, bytes_tokenizer):
    """Every engine on every suite grammar (two short samples, byte vocabulary): the whole mask at every step
    equals the reference's under the engine's declared profile (tests/conformance_check.py), or the engine
    refuses the grammar with the typed reason it is expected to give (tests/expected_refusals.py)."""
    from conformance_check import check_masks
    from expected_refusals import compile_or_refuse
    from gcdbench.parsers.registry import engine_class

    name, extra = CONFORMANCE[case]
    ds = load_dataset({"name": name, **extra}, data_root="unused")
    samples = sorted(ds.samples, key=lambda s: len(s.text))[:2]
    eng = engine_class(engine)()
    if not compile_or_refuse(eng, engine, case, ds.grammar, bytes_tokenizer):
        return
    texts = [s.text for s in samples]
    if (engine, case) in KNOWN_FAILURES:
        exc, pattern = KNOWN_FAILURES[(engine, case)]
        with pytest.raises(exc, match=pattern):
            check_masks(eng, engine, case, ds.grammar, bytes_tokenizer, texts)
    else:
        check_masks(eng, engine, case, ds.grammar, bytes_tokenizer, texts)
    eng.close()
