"""dataset=maskbench on a tiny MaskBench file the tests write (never the real data): selection options, the
runner's load_schemas() API, the single-schema Dataset, and a missing file."""
from __future__ import annotations

import gzip
import json

import pytest

from gcdbench.datasets.base import DataError, DataMissing
from gcdbench.datasets.maskbench import category, load_schemas, maskbench, select
from gcdbench.parsers.base import GrammarSpec
from gcdbench.parsers.jsonschema import UnsupportedSchema

OBJ = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"}}, "required": ["a"]}
RECORDS = [
    {"id": "Github_easy---o1", "schema": OBJ, "tests": [
        {"data": {"b": "x", "a": 1}, "valid": True}, {"data": {"a": "no"}, "valid": False}]},
    {"id": "Github_easy---o2", "schema": {"type": "array", "items": {"type": "integer"}}, "tests": [
        {"data": [1, 2], "valid": True}, {"data": ["x"], "valid": False}, {"data": [], "valid": True}]},
    {"id": "Github_easy---o3", "schema": {"type": "string", "pattern": "(?=x)"}, "tests": []},
    {"id": "Kubernetes---kb_1", "schema": {"enum": ["v1", "v2"]}, "tests": [{"data": "v1", "valid": True}]},
    {"id": "Kubernetes---kb_2", "schema": {"type": "boolean"}, "tests": [{"data": True, "valid": True}]},
    {"id": "BFCL_java_0", "schema": {"type": "null"}, "tests": [{"data": None, "valid": True},
                                                                 {"data": 0, "valid": False}]},
]


@pytest.fixture()
def root(tmp_path):
    (tmp_path / "maskbench").mkdir()
    with gzip.open(tmp_path / "maskbench" / "maskbench.jsonl.gz", "wt", encoding="utf-8") as f:
        for r in RECORDS:
            f.write(json.dumps(r) + "\n")
    return tmp_path


def ids(schemas):
    return [s.id if hasattr(s, "id") else s["id"] for s in schemas]


def test_categories_of_ids():
    assert category("Github_easy---o1") == "Github_easy" and category("BFCL_java_0") == "BFCL_java"
    assert category("BFCL_parallel_multiple_12") == "BFCL_parallel_multiple"


def test_categories_option_and_prefixes(root):
    assert ids(load_schemas(root, categories=["Kubernetes"], count=0)) == ["Kubernetes---kb_1", "Kubernetes---kb_2"]
    assert ids(load_schemas(root, categories=["BFCL"], count=0)) == ["BFCL_java_0"]   # not a category: a prefix
    with pytest.raises(DataError, match="matches no schema"):
        load_schemas(root, categories=["Nothing"])


def test_count_is_stratified_and_seeded(root):
    from gcdbench.datasets.maskbench import read_records

    recs = read_records(root)
    a = select(recs, count=3, seed=1)
    assert sorted(category(r["id"]) for r in a) == ["BFCL_java", "Github_easy", "Kubernetes"]
    assert ids(select(recs, count=3, seed=1)) == ids(a)
    assert {tuple(ids(select(recs, count=3, seed=s))) for s in range(20)} != {tuple(ids(a))}   # the seed matters
    four = select(recs, count=4, seed=0)
    assert len(four) == 4 and sum(category(r["id"]) == "Github_easy" for r in four) == 2
    assert len(select(recs, count=0)) == len(RECORDS)


def test_shards_partition_the_selection(root):
    from gcdbench.datasets.maskbench import read_records

    recs = read_records(root)
    parts = [ids(select(recs, count=0, shard=f"{i}/4")) for i in range(4)]
    flat = [x for p in parts for x in p]
    assert sorted(flat) == sorted(ids(recs)) and len(flat) == len(set(flat))
    with pytest.raises(DataError, match="i/N"):
        select(recs, shard="4/4")


def test_load_schemas_api_grammar_samples_and_refusal(root):
    got = {s.id: s for s in load_schemas(root, count=0)}
    one = got["Github_easy---o1"]
    assert isinstance(one.grammar, GrammarSpec) and one.category == "Github_easy"
    assert [s.text for s in one.samples] == ['{"a":1,"b":"x"}']   # keys in the grammar's order
    assert ids(one.samples) == ["Github_easy---o1#v0"]
    bad = got["Github_easy---o3"]
    assert not bad.converted and isinstance(bad.grammar, UnsupportedSchema) and bad.grammar.keyword == "pattern"
    inv = {s.id: s for s in load_schemas(root, count=0, kind="invalid")}
    assert [s.text for s in inv["Github_easy---o2"].samples] == ['["x"]']
    flex = {s.id: s for s in load_schemas(root, count=0, serialize="flexible")}
    assert flex["Github_easy---o2"].samples[0].text == "[\n  1,\n  2\n]"


def test_single_schema_dataset_through_the_registry(root):
    from gcdbench.datasets.registry import load_dataset

    ds = load_dataset({"name": "maskbench", "schema": "Github_easy---o2"}, root)
    assert ds.name == "maskbench_Github_easy---o2" and [s.text for s in ds.samples] == ["[1,2]", "[]"]
    assert ds.meta["category"] == "Github_easy"
    refused = maskbench("maskbench", {**maskbench.node("maskbench"), "schema": "Github_easy---o3"}, root, None, 0)
    assert "converter refuses it" in refused.grammar.refusal and "pattern" in refused.grammar.refusal
    assert refused.grammar.json_schema is not None   # the native schema engines still run it
    with pytest.raises(DataError, match="no such schema"):
        maskbench("maskbench", {**maskbench.node("maskbench"), "schema": "Github_easy---o9"}, root, None, 0)


def test_missing_file_names_it(tmp_path):
    with pytest.raises(DataMissing, match="maskbench.jsonl.gz"):
        load_schemas(tmp_path)


def test_real_data_first_schemas_convert():
    """On the real data (skipped when absent): a few schemas load and their valid samples are sentences."""
    from pathlib import Path

    import lark

    root = Path(__file__).resolve().parents[2] / "shared" / "data"
    if not (root / "maskbench" / "maskbench.jsonl.gz").exists():
        pytest.skip("the MaskBench data is not under ../shared/data (see the data's PROVENANCE.md)")
    for s in load_schemas(root, categories=["Github_trivial"], count=5, seed=0):
        assert s.converted, s.grammar
        p = lark.Lark(s.grammar.lark, parser="earley", lexer="dynamic_complete")
        for sample in s.samples:
            p.parse(sample.text)
