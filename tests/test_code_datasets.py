"""The java and go datasets (``datasets/code.py``): selection in path order, the counts of dropped files, the cached
scan, negative samples outside the language, and Go's statement ends in ``datasets/grammars/go.lark``.

The loader tests run on a data root the test writes (a small grammar and a few files); the tests on the real data
skip when ``<data_root>/code`` is absent."""
from __future__ import annotations

import gzip
import json

import pytest

from gcdbench.datasets.base import DataError, DataMissing, load_grammar
from gcdbench.datasets.code import in_language, lark_accepts, load_code, mutate, sample_text
from gcdbench.datasets.registry import load_dataset

# A small brace language standing in for java.lark (the loader reads <data_root>/code/java.lark).
TOY = r"""
start: "class" NAME "{" member* "}"
member: NAME NAME ";" | NAME NAME "(" ")" "{" stmt* "}"
stmt: NAME "=" NAME ";" | "return" NAME ";"
NAME: /[a-z]\w*/
COMMENT: /\/\/[^\n]*/
%ignore /\s+/
%ignore COMMENT
"""
FILES = [
    ("a/A.java", "// licence\n\nclass a { int x; }\n"),
    ("a/B.java", "class b { int x; int f() { y = z; return x; } }\n"),
    ("a/C.java", "class c { int x }\n"),                                     # rejected: no ';'
    ("a/D.java", "class d { " + "int x; " * 40 + "}\n"),                   # too long for max_chars=100
    ("a/E.java", "/* block\n licence */ class e { int f() { return q; } }\n"),
    ("a/F.java", "class f { }\n"),
]


def write_root(tmp_path, files=FILES, grammar=TOY):
    code = tmp_path / "data" / "code"
    code.mkdir(parents=True)
    (code / "java.lark").write_text(grammar)
    with gzip.open(code / "java_src.jsonl.gz", "wt") as fh:
        for path, text in files:
            fh.write(json.dumps({"path": path, "text": text}) + "\n")
    return tmp_path / "data"


def load(root, tmp_path, **kw):
    return load_code("java", root, cache_dir=tmp_path / "cache", **{"max_chars": 100, **kw})


def test_positive_selection_in_path_order_and_counts(tmp_path):
    root = write_root(tmp_path)
    ds = load(root, tmp_path, count=3)
    assert [s.id for s in ds.samples] == ["java-00000", "java-00001", "java-00004"]
    assert ds.samples[0].text == "class a { int x; }\n"            # leading comment and blank line dropped
    assert ds.samples[2].text.startswith("class e")
    m = ds.meta
    assert (m["n_scanned"], m["n_kept"], m["n_rejected_by_grammar"], m["n_too_long"]) == (5, 3, 1, 1)
    assert (m["n_files"], m["n_accepted_all"], m["n_too_long_all"]) == (6, 4, 1)
    assert m["kind"] == "positive" and m["files"]["java-00004"] == "a/E.java" and not m["scan_cached"]
    assert m["n_reference_disagree"] == 0
    again = load(root, tmp_path, count=3)
    assert again.meta["scan_cached"] and [s.id for s in again.samples] == [s.id for s in ds.samples]
    # the run's samples= caps the count; count=None takes every accepted file
    assert [s.id for s in load(root, tmp_path, count=3, n=1).samples] == ["java-00000"]
    everything = load(root, tmp_path, count=None)
    assert len(everything.samples) == 4 and everything.meta["n_scanned"] == 6
    # a larger max_chars is another scan: the long file is kept
    wide = load(root, tmp_path, count=None, max_chars=1000)
    assert "java-00003" in {s.id for s in wide.samples} and wide.meta["n_too_long_all"] == 0


def test_negative_samples_leave_the_language_and_repeat_per_seed(tmp_path):
    root = write_root(tmp_path)
    ds = load(root, tmp_path, count=None, kind="negative", seed=3)
    assert ds.meta["kind"] == "negative" and ds.name == "java_negative"
    assert len(ds.samples) + ds.meta["n_without_negative"] == 4
    assert len(ds.samples) >= 3
    for s in ds.samples:
        info = ds.meta["mutations"][s.id]
        assert s.id.startswith("java-0000") and info["mutation"] in s.id and str(info["offset"]) in s.id
        assert not in_language(ds.grammar, s.text), s.text
        assert not lark_accepts(ds.grammar, s.text)
    same = load(root, tmp_path, count=None, kind="negative", seed=3)
    assert [(s.id, s.text) for s in same.samples] == [(s.id, s.text) for s in ds.samples]
    texts = {seed: [s.text for s in load(root, tmp_path, count=None, kind="negative", seed=seed).samples]
             for seed in range(4)}
    assert len({tuple(t) for t in texts.values()}) > 1      # the seed changes the mutations


def test_mutations_change_the_text():
    import random

    text = sample_text("// c\nclass a { int f() { return q; } }\n")
    kinds = set()
    rng = random.Random(0)
    for _ in range(200):
        got = mutate(text, rng, ("class",))
        if got is not None:
            assert got[0] != text
            kinds.add(got[1])
    assert kinds == {"delete", "duplicate", "swap", "drop_brace", "stray_keyword"}


def test_options_through_the_registry_and_bad_values(tmp_path):
    root = write_root(tmp_path)
    ds = load_dataset({"name": "java", "count": 2, "max_chars": 100, "cache_dir": str(tmp_path / "c")}, root)
    assert [s.id for s in ds.samples] == ["java-00000", "java-00001"] and ds.meta["count"] == 2
    with pytest.raises(DataError, match="kind='neg'"):
        load_dataset({"name": "java", "kind": "neg", "cache_dir": str(tmp_path / "c")}, root)
    with pytest.raises(DataError, match="count=0"):
        load_dataset({"name": "java", "count": 0, "cache_dir": str(tmp_path / "c")}, root)


def test_missing_data_names_the_file(tmp_path):
    with pytest.raises(DataMissing, match=r"code/go_src\.jsonl\.gz"):
        load_code("go", tmp_path, cache_dir=tmp_path / "c")
    root = write_root(tmp_path)
    (root / "code" / "java.lark").unlink()
    with pytest.raises(DataMissing, match=r"code/java\.lark"):
        load_code("java", root, cache_dir=tmp_path / "c")


def test_a_bad_line_is_named(tmp_path):
    root = write_root(tmp_path)
    with gzip.open(root / "code" / "java_src.jsonl.gz", "wt") as fh:
        fh.write('{"path": "x", "text": "class x { }"}\nnot json\n')
    with pytest.raises(DataError, match="line 2"):
        load(root, tmp_path)


# -- Go's statement ends (datasets/grammars/go.lark) -----------------------------------------------------------
GO_IN = {
    "one-liners": "package p\n\nfunc (x T) Len() int { return len(x) }\n\ntype T struct{ a, b int }\n",
    "a call over lines": "package p\n\nfunc f() {\n\tg(a, // note\n\t\tb)\n\tx := 1 +\n\t\t2\n}\n",
    "groups": 'package p\n\nimport (\n\t"fmt"\n\t"os"\n)\n\nvar (\n\ta = 1\n\tb = 2\n)\n',
    "comments and blank lines": "package p\n\n// F does it.\nfunc F() {\n\t// first\n\n\tx = 1 // set\n\n\treturn\n}\n",
    "a chain over lines": "package p\n\nfunc f() {\n\tx.\n\t\tY()\n}\n",
    "semicolons": "package p; func f() { a = 1; b = 2 }\n",
    "++ and comments after a statement": "package p\n\nfunc f() {\n\tfor i := 0; i < n; i++ {\n\t\tn++ /* one */\n\t}\n}\n",
}
GO_OUT = {
    "a newline after an argument": "package p\n\nfunc f() {\n\tg(a\n\t, b)\n}\n",
    "a newline before a block": "package p\n\nfunc f() {\n\tif x\n\t{\n\t}\n}\n",
    "a newline after a closing bracket": "package p\n\nfunc f() {\n\tx := a[1]\n\t\t[2]\n}\n",
    "two statements on one line": "package p\n\nfunc f() {\n\tx = 1 y = 2\n}\n",
}


@pytest.mark.parametrize("name", GO_IN)
def test_go_statement_ends_inside(name):
    g = load_grammar("go")
    assert lark_accepts(g, GO_IN[name]) and in_language(g, GO_IN[name])


@pytest.mark.parametrize("name", GO_OUT)
def test_go_statement_ends_outside(name):
    g = load_grammar("go")
    assert not lark_accepts(g, GO_OUT[name]) and not in_language(g, GO_OUT[name])


def test_go_loader_on_snippets(tmp_path):
    code = tmp_path / "code"
    code.mkdir()
    rows = [(f"p/{k}.go", "// Copyright\n\n" + v) for k, v in sorted({**GO_IN, **GO_OUT}.items())]
    with gzip.open(code / "go_src.jsonl.gz", "wt") as fh:
        fh.writelines(json.dumps({"path": p, "text": t}) + "\n" for p, t in rows)
    ds = load_code("go", tmp_path, count=None, cache_dir=tmp_path / "c")
    assert sorted(ds.meta["files"].values()) == sorted(f"p/{k}.go" for k in GO_IN)
    assert ds.meta["n_rejected_by_grammar"] == len(GO_OUT) and ds.meta["lark_parser"] == "lalr"


# -- the real data -------------------------------------------------------------------------------------------
@pytest.mark.data
@pytest.mark.slow   # a first scan of the Go data reads 2,668 files (a few seconds)
def test_real_go_data(data_root, tmp_path):
    if not (data_root / "code" / "go_src.jsonl.gz").exists():
        pytest.skip(f"no Go data under {data_root}/code (see the shared data's code/PROVENANCE.md)")
    ds = load_code("go", data_root, count=5, cache_dir=tmp_path / "c")
    assert len(ds.samples) == 5 and ds.meta["n_reference_disagree"] == 0
    assert ds.meta["n_accepted_all"] >= 300
    neg = load_code("go", data_root, count=3, kind="negative", cache_dir=tmp_path / "c")
    assert all(not in_language(neg.grammar, s.text) for s in neg.samples)
