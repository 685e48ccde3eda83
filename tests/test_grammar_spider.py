"""The Spider SQL grammars (plain and sp-op), ``to_spop``, the Spider loader and the embedded SQL sample."""
from __future__ import annotations

import lark
import pytest

from gcdbench.datasets.base import DataMissing, GRAMMAR_DIR, load_grammar
from gcdbench.datasets.sample import load_sample_sql
from gcdbench.datasets.spider import (grammar_stats, in_language, lalr_parser, load_spider, parses, read_gold,
                                      to_spop)
from gcdbench.parsers.reference import ReferenceChecker

GRAMMARS = ("spider", "spider_spop")
COVERAGE_BAR = 0.99
# The distinct gold queries that are not sentences of the grammar (the loader drops them), per split; the
# same query in both variants. Train's 248: a comparison as an ORDER BY key (`ORDER BY count(*)  >=  5`),
# which the grammar deliberately leaves out (ORDER BY takes value expressions).
DROPPED = {
    "dev": {},
    "train": {"train-0248": "SELECT T2.name FROM Certificate AS T1 JOIN Aircraft AS T2 ON T2.aid  =  T1.aid WHERE "
                            "T2.distance  >  5000 GROUP BY T1.aid ORDER BY count(*)  >=  5"},
}


# --------------------------------------------------------------------------------------------------
# The grammars themselves
# --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", GRAMMARS)
def test_grammar_is_lalr1(name):
    # strict=True turns shift/reduce conflicts (which Lark otherwise resolves silently as shift) and regex
    # collisions between terminals into errors; plain Lark already refuses reduce/reduce conflicts.
    text = (GRAMMAR_DIR / f"{name}.lark").read_text()
    parser = lark.Lark(text, parser="lalr", strict=True)
    stats = grammar_stats(name)
    assert stats["n_rules"] == len(parser.rules)
    assert 20 <= stats["n_terminals"] <= 60, stats     # tens of terminals, not hundreds
    assert stats["n_rules"] <= 150, stats


@pytest.mark.parametrize("name", GRAMMARS)
def test_grammar_follows_the_portability_rules(name):
    text = (GRAMMAR_DIR / f"{name}.lark").read_text()
    code = "\n".join(ln.split("//")[0] for ln in text.splitlines())
    for banned in ("%import", "%declare", "(?=", "(?!", "(?<", "\\1"):
        assert banned not in code, banned
    assert code.count("%ignore") == 1
    parser = lalr_parser(name)
    for t in parser.terminals:
        assert t.priority == 0, t
        if type(t.pattern).__name__ == "PatternRE":
            assert not t.pattern.flags, t            # only string literals carry a flag, and only "i"
        else:
            assert set(t.pattern.flags) <= {"i"}, t


def test_both_grammars_have_the_same_rules():
    """The sp-op grammar differs only in its operator terminals: same rule shapes, same terminal count."""
    def shapes(name):
        rename = {"PLUS": "+", "MINUS": "-", "STAR": "*", "SLASH": "/", "COMMA": ",", "SEMICOLON": ";"}
        return sorted((r.origin.name, tuple(rename.get(s.name, s.name) for s in r.expansion))
                      for r in lalr_parser(name).rules)

    assert shapes("spider") == shapes("spider_spop")


@pytest.mark.parametrize("text", [
    "SELECT a FROM t",
    "select Count ( * ) from T where x<>1 and y>=2 or z<=3",
    "SELECT selected FROM fromage WHERE whereabouts  =  1",           # names that start with keywords
    "SELECT T1.a FROM t AS T1 WHERE T1.b NOT BETWEEN 1 AND 2 AND NOT (c = 'x' OR d LIKE \"y%\")",
    "SELECT a FROM t WHERE b IN (SELECT b FROM u UNION SELECT b FROM v) ORDER BY a DESC LIMIT 3;",
    "SELECT count(*) FROM (SELECT a FROM t INTERSECT SELECT a FROM u)",
    "SELECT a - -1 * (b + c) / 2.5 FROM t",
])
def test_plain_grammar_accepts(text):
    assert parses("spider", text)
    assert ReferenceChecker(load_grammar("spider")).is_sentence(text.encode())


@pytest.mark.parametrize("text", [
    "SELECT a FROM t WHERE",
    "SELECT a b FROM t",              # no alias without AS
    "SELECT a FROM t WHERE a >= = 1",
    "SELECT a FROM t LIMIT 1 WHERE a = 1",   # clauses in SQL order only
    "SELECT a FROM t;;",
])
def test_plain_grammar_rejects(text):
    assert not parses("spider", text)
    assert not ReferenceChecker(load_grammar("spider")).is_sentence(text.encode())


def test_spop_grammar_forces_a_space_after_operators():
    ref = ReferenceChecker(load_grammar("spider_spop"))
    for good in ["SELECT a, b FROM t", "SELECT count(* ) FROM t; ", "SELECT a + b, c- d FROM t",
                 "SELECT a / 2 FROM t WHERE b = - 1", "SELECT a/ 2 FROM t"]:
        assert parses("spider_spop", good), good
        assert ref.is_sentence(good.encode()), good
    for bad in ["SELECT a,b FROM t", "SELECT count(*) FROM t", "SELECT a FROM t;", "SELECT a +b FROM t",
                "SELECT a FROM t WHERE b = -1", "SELECT a /2 FROM t"]:
        assert not parses("spider_spop", bad), bad
        assert not ref.is_sentence(bad.encode()), bad


# --------------------------------------------------------------------------------------------------
# to_spop
# --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("before, after", [
    ("SELECT a,b FROM t", "SELECT a, b FROM t"),
    ("SELECT a ,  b FROM t", "SELECT a ,  b FROM t"),
    ("SELECT count(*) FROM t", "SELECT count(* ) FROM t"),
    ("SELECT * FROM t", "SELECT * FROM t"),
    ("SELECT a-b , a*b , a/b , a+b FROM t", "SELECT a- b , a* b , a/ b , a+ b FROM t"),
    ("SELECT a FROM t WHERE b = -1", "SELECT a FROM t WHERE b = - 1"),
    ("SELECT a FROM t;", "SELECT a FROM t; "),
    ("SELECT a FROM t; ", "SELECT a FROM t; "),
    ("SELECT a FROM t WHERE b = 'x,y-z*1;' AND c = \"p+q/r\"", "SELECT a FROM t WHERE b = 'x,y-z*1;' AND c = \"p+q/r\""),
    ("SELECT a FROM t WHERE b = '' AND c = 'O''Neil,J'", "SELECT a FROM t WHERE b = '' AND c = 'O''Neil,J'"),
    ("SELECT a FROM t WHERE b = \"it's,\",c", "SELECT a FROM t WHERE b = \"it's,\", c"),
    ("a,\tb,\nc", "a,\tb,\nc"),
])
def test_to_spop(before, after):
    assert to_spop(before) == after
    assert to_spop(after) == after


def test_to_spop_is_idempotent_on_the_sample():
    for s in load_sample_sql().samples:
        once = to_spop(s.text)
        assert to_spop(once) == once
        assert once.replace(" ", "") == s.text.replace(" ", "")   # only spaces are added


# --------------------------------------------------------------------------------------------------
# The embedded sample
# --------------------------------------------------------------------------------------------------
def test_sample_sql_parses_completely():
    ds = load_sample_sql()
    assert ds.name == "sample" and ds.grammar.name == "spider"
    assert len(ds.samples) >= 40
    assert len({s.id for s in ds.samples}) == len(ds.samples)
    ref = ReferenceChecker(ds.grammar)
    for s in ds.samples:
        assert parses("spider", s.text), s
        assert ref.is_sentence(s.text.encode()), s       # the harness's scannerless reading agrees
        assert parses("spider_spop", to_spop(s.text)), s
    text = "\n".join(s.text for s in ds.samples).upper()
    for construct in ("JOIN", "UNION", "INTERSECT", "EXCEPT", "GROUP BY", "HAVING", "ORDER BY", "LIMIT",
                      "NOT IN", "LIKE", "BETWEEN", "DISTINCT", "(SELECT", '"', "'", ";"):
        assert construct in text, construct


def test_sample_sql_pick():
    ds = load_sample_sql(n=5, seed=1)
    assert len(ds.samples) == 5
    assert [s.id for s in ds.samples] == sorted(s.id for s in ds.samples)
    assert [s.id for s in load_sample_sql(n=5, seed=-1).samples] == [f"sql-{i:04d}" for i in range(5)]


# --------------------------------------------------------------------------------------------------
# The Spider data
# --------------------------------------------------------------------------------------------------
def test_loader_names_the_missing_file(tmp_path):
    with pytest.raises(DataMissing) as err:
        load_spider(tmp_path / "nowhere", split="dev")
    msg = str(err.value)
    assert "dev_gold.sql" in msg and "yale-lily.github.io/spider" in msg and "data_root" in msg
    with pytest.raises(ValueError, match="split"):
        load_spider(tmp_path, split="test")
    with pytest.raises(ValueError, match="variant"):
        load_spider(tmp_path, variant="fancy")


@pytest.mark.data
@pytest.mark.slow
@pytest.mark.parametrize("variant", ["plain", "spop"])
@pytest.mark.parametrize("split", ["dev", "train"])
def test_coverage_of_all_gold_lines(data_root, split, variant):
    """Coverage in the harness's language (the scannerless reference decides, as when samples are chosen):
    at least 99% of the gold lines of each split, and the loader drops exactly the listed queries."""
    grammar = "spider" if variant == "plain" else "spider_spop"
    rows = read_gold(data_root, split)
    failures = {}
    for lineno, (sql, _db) in enumerate(rows, 1):
        text = to_spop(sql) if variant == "spop" else sql
        if not in_language(grammar, text):
            failures.setdefault(text, []).append(lineno)
    n_bad = sum(len(v) for v in failures.values())
    coverage = 1 - n_bad / len(rows)
    print(f"\n{grammar} on {split}_gold.sql: {len(rows) - n_bad}/{len(rows)} lines are sentences "
          f"({100 * coverage:.2f}%)")
    for text, lines in failures.items():
        print(f"  NOT A SENTENCE, line(s) {lines}: {text}")
    assert coverage >= COVERAGE_BAR, f"{n_bad} lines fail: {failures}"

    meta = load_spider(data_root, split=split, variant=variant).meta
    want = {i: to_spop(t) if variant == "spop" else t for i, t in DROPPED[split].items()}
    assert {d["id"]: d["text"] for d in meta["dropped"]} == want
    assert meta["n_kept"] + meta["n_dropped"] == meta["n_distinct"] and meta["n_dropped"] == len(want)
    print(f"  distinct queries: {meta['n_kept']} kept, {meta['n_dropped']} dropped of {meta['n_distinct']}")


@pytest.mark.data
@pytest.mark.parametrize("variant", ["plain", "spop"])
def test_load_spider(data_root, variant):
    ds = load_spider(data_root, split="dev", variant=variant)
    assert ds.name == ("spider" if variant == "plain" else "spider_spop")
    assert ds.grammar.name == ds.name
    m = ds.meta
    assert m["n_lines"] == 1034 and m["n_distinct"] == 563
    assert m["n_kept"] + m["n_dropped"] == m["n_distinct"] == len(ds.samples) + m["n_dropped"]
    assert "reference checker" in m["selected_by"]
    assert all(d["id"].startswith("dev-") for d in m["dropped"])
    assert m["n_rules"] > 0 and m["n_terminals"] > 0
    assert ds.samples[0].id == "dev-0000"
    assert len({s.text for s in ds.samples}) == len(ds.samples)
    if variant == "spop":
        assert all(to_spop(s.text) == s.text for s in ds.samples)
    few = load_spider(data_root, split="dev", variant=variant, n=10, seed=3)
    assert len(few.samples) == 10 and {s.id for s in few.samples} <= {s.id for s in ds.samples}
    # chosen by the harness's scannerless language; Lark's LALR parser agrees on Spider's queries
    ref = ReferenceChecker(ds.grammar)
    assert all(ref.is_sentence(s.text.encode()) for s in few.samples)
    assert all(parses(ds.grammar.name, s.text) for s in few.samples)
