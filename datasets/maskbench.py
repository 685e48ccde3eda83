"""MaskBench (JSONSchemaBench) schemas with their test instances: ``dataset=maskbench``.

Reads ``<data_root>/maskbench/maskbench.jsonl.gz`` (one schema per line: ``id``, ``schema``, ``tests``; see the
data's PROVENANCE.md). Each schema's grammar is :func:`gcdbench.parsers.jsonschema.schema_to_lark` of it; its
samples are its test instances of one kind (``valid`` or ``invalid``), keys in the grammar's order, written
``compact`` (``json.dumps`` with ``separators=(",", ":")``) or ``flexible`` (``indent=2``).

Selection (:func:`select`), in this order: ``categories`` (a schema's category is its id before ``---``, or before
the trailing ``_<n>`` for the BFCL/JME ids; a value that is no category name matches as an id prefix), then a
stratified seeded sample of ``count`` schemas (each category gets its share by largest remainder, at least one
while ``count`` allows; ``count<=0``: all), sorted by id, then ``shard="i/N"``: every N-th schema of that sorted
list starting at the i-th (``sel[i::N]``: strided, so each shard has a similar category mix; shards 0..N-1
partition the selection). ``schema=<id>`` names one schema and ignores the other selection options.

For the runner: :func:`load_schemas` returns the selected schemas as :class:`MaskbenchSchema` objects (``id``,
``category``, ``grammar``: a GrammarSpec or the :class:`UnsupportedSchema` refusal, ``samples``); the registered
loader returns the usual :class:`Dataset` when the selection is exactly one schema (``dataset.schema=<id>``).
"""
from __future__ import annotations

import functools
import json
import random
import re
from dataclasses import dataclass, field, replace
from pathlib import Path

from gcdbench.datasets.base import (DataError, DataMissing, Dataset, GrammarGroup, Sample, grouped, json_lines,
                                   pick)
from gcdbench.parsers.base import GrammarSpec
from gcdbench.parsers.jsonschema import UnsupportedSchema, schema_to_lark, serialize

SOURCE = "maskbench"
FILE = "maskbench.jsonl.gz"
KINDS = ("valid", "invalid")
SERIALIZE = ("compact", "flexible")
HINT = ("the MaskBench schemas of guidance-ai/jsonschemabench (maskbench/data/*.json), one JSON object per line "
        "with an added 'id' (the file name without .json), gzipped as <data_root>/maskbench/maskbench.jsonl.gz")

#: the published MaskBench run (guidance-ai/jsonschemabench maskbench/README.md, 2025-03-27; one thread per sequence,
#: 15 min and 40 GiB per schema; µs): engine -> (TBM p50, p99, p99.9, TTFM p50, invalid accepted)
PUBLISHED = {
    "LLGuidance 0.7.10": (46, 533, 1695, 1037, 0),
    "XGrammar 0.1.17": (9, 5687, 100267, 919459, 1368),
    "llama.cpp 0.3.8": (17021, 60371, 297552, 312, 649),
    "outlines-core 0.2.3": (34, 7184, 7820, 587900, 822),
}


def category(schema_id: str) -> str:
    """``Github_easy---o1234`` -> ``Github_easy``; ``BFCL_java_0`` -> ``BFCL_java``."""
    if "---" in schema_id:
        return schema_id.split("---", 1)[0]
    return re.sub(r"_[^_]*$", "", schema_id)


def data_path(data_root) -> Path:
    path = Path(data_root).expanduser() / SOURCE / FILE
    if not path.exists():
        raise DataMissing(f"missing data file {path} (data_root={str(data_root)!r}). Get {HINT}, or point "
                          f"data_root=<folder> at a folder that has {SOURCE}/{FILE}.")
    return path


@functools.lru_cache(maxsize=4)
def _read(path: str, mtime: float) -> tuple[dict, ...]:
    rows = json_lines(path, ("id", "schema"), "a MaskBench record")
    return tuple(sorted(rows, key=lambda r: r["id"]))


def read_records(data_root) -> tuple[dict, ...]:
    """Every record of the data file, sorted by id (read once per process and file version)."""
    path = data_path(data_root)
    return _read(str(path), path.stat().st_mtime)


def parse_shard(shard) -> tuple[int, int] | None:
    if shard in (None, "", "0/1"):
        return None
    m = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", str(shard))
    if not m or int(m.group(2)) < 1 or int(m.group(1)) >= int(m.group(2)):
        raise DataError(f"dataset.shard={shard!r}: write i/N with 0 <= i < N (e.g. 3/16)")
    return int(m.group(1)), int(m.group(2))


def select(records, categories=(), count: int | None = 300, seed: int = 0, shard=None) -> list[dict]:
    """The records a run takes (module docstring: categories, stratified sample, shard)."""
    if isinstance(categories, str):
        categories = [c for c in categories.split(",") if c]
    categories = list(categories or [])
    if categories:
        known = {category(r["id"]) for r in records}
        chosen = [r for r in records if any(category(r["id"]) == c if c in known else r["id"].startswith(c)
                                            for c in categories)]
        if not chosen:
            raise DataError(f"dataset.categories={categories} matches no schema; categories: {sorted(known)}")
    else:
        chosen = list(records)
    if count is not None and 0 < count < len(chosen):
        by_cat: dict[str, list[dict]] = {}
        for r in chosen:
            by_cat.setdefault(category(r["id"]), []).append(r)
        total = len(chosen)
        quota = {c: count * len(rs) / total for c, rs in by_cat.items()}
        take = {c: int(q) for c, q in quota.items()}
        if count >= len(by_cat):
            for c in take:
                take[c] = max(take[c], 1)
        left = count - sum(take.values())
        for c in sorted(quota, key=lambda c: (-(quota[c] - int(quota[c])), c)):
            if left <= 0:
                break
            if take[c] < len(by_cat[c]):
                take[c] += 1
                left -= 1
        while sum(take.values()) > count:   # the at-least-one rule overshot: trim the largest
            c = max(take, key=lambda c: (take[c], c))
            take[c] -= 1
        rng = random.Random(seed)
        chosen = sorted((r for c in sorted(by_cat) for r in rng.sample(by_cat[c], take[c])), key=lambda r: r["id"])
    sh = parse_shard(shard)
    if sh is not None:
        chosen = chosen[sh[0]::sh[1]]
    return chosen


@dataclass
class MaskbenchSchema:
    """One schema of a MaskBench selection, ready for a runner cell."""

    id: str
    category: str
    grammar: GrammarSpec | UnsupportedSchema
    samples: list[Sample]
    meta: dict = field(default_factory=dict)
    json_schema: str = ""   # the schema as JSON text (the native schema engines compile it)

    @property
    def converted(self) -> bool:
        return isinstance(self.grammar, GrammarSpec)

    def spec(self) -> GrammarSpec:
        """The grammar a runner cell compiles: the converted Lark, with the schema for the engines that read
        schemas themselves; for a schema the converter refuses, the refusal (such engines still run it)."""
        if self.converted:
            return replace(self.grammar, json_schema=self.json_schema)
        return GrammarSpec(name=f"maskbench_{self.id}", lark="", json_schema=self.json_schema,
                           refusal=f"the JSON Schema converter refuses it: {self.grammar}")


def schema_samples(record: dict, kind: str = "valid", whitespace: str = "compact") -> list[Sample]:
    """The record's test instances of ``kind``, serialized; ids ``<schema id>#v<k>`` / ``#i<k>`` (``#`` joins the
    schema and the instance: the report reads the schema back from the id)."""
    if kind not in KINDS:
        raise DataError(f"dataset.kind={kind!r}; valid: {list(KINDS)}")
    want = kind == "valid"
    tag = "v" if want else "i"
    tests = [t for t in record.get("tests") or [] if bool(t.get("valid")) == want]
    return [Sample(f"{record['id']}#{tag}{k}", serialize(t.get("data"), record["schema"], whitespace))
            for k, t in enumerate(tests)]


def to_schema(record: dict, kind: str = "valid", whitespace: str = "compact") -> MaskbenchSchema:
    if whitespace not in SERIALIZE:
        raise DataError(f"dataset.serialize={whitespace!r}; valid: {list(SERIALIZE)}")
    try:
        grammar = GrammarSpec(name=f"maskbench_{record['id']}", lark=schema_to_lark(record["schema"],
                                                                                    whitespace=whitespace))
    except UnsupportedSchema as err:
        grammar = err
    return MaskbenchSchema(record["id"], category(record["id"]), grammar, schema_samples(record, kind, whitespace),
                           {"description": record.get("description", ""), "serialize": whitespace, "kind": kind},
                           json.dumps(record["schema"], ensure_ascii=False))


def load_schemas(data_root, categories=(), count: int | None = 300, seed: int = 0, shard=None,
                 serialize: str = "compact", kind: str = "valid", schema: str | None = None) -> list[MaskbenchSchema]:
    """The selected schemas, converted, with their samples (the runner's API)."""
    records = read_records(data_root)
    if schema:
        chosen = [r for r in records if r["id"] == schema]
        if not chosen:
            close = [r["id"] for r in records if r["id"].startswith(category(schema))][:5]
            raise DataError(f"dataset.schema={schema!r}: no such schema id in {data_path(data_root)}; "
                            f"e.g. {close}")
    else:
        chosen = select(records, categories, count, seed, shard)
    return [to_schema(r, kind, serialize) for r in chosen]


# -- registration (pyproject.toml, entry-point group gcdbench.datasets) --------------------------------------
from gcdbench.datasets.registry import loader  # noqa: E402 - the registry imports this module lazily, by name


@loader(categories=([], "categories (id prefixes) to take, e.g. [Github_easy,Kubernetes]; empty: all"),
        count=(300, "a stratified seeded sample of this many schemas over the categories; 0: all"),
        seed=(0, "seed of the stratified sample"),
        shard=(None, "i/N: every N-th schema of the sorted selection, starting at the i-th"),
        serialize=("compact", "compact (separators=(',', ':')) or flexible (indent=2, whitespace-flexible grammar)"),
        kind=("valid", "valid or invalid: which test instances are the samples"),
        schema=(None, "one schema id (e.g. Github_easy---o1234): a single-schema cell; the others are ignored"))
def maskbench(name, dcfg, data_root, n, seed) -> Dataset:
    """One schema (``dataset.schema=<id>``): a one-grammar dataset. A selection: a dataset of many grammars, one
    group per schema that has instances of the kind (``samples=N``: the first N of each schema), named
    ``maskbench[_invalid][_flexible][_shard<i>of<N>]`` so each kind, form and shard is its own cell."""
    picked = load_schemas(data_root, dcfg["categories"], dcfg["count"], dcfg["seed"], dcfg["shard"],
                          dcfg["serialize"], dcfg["kind"], dcfg["schema"])
    base = {"source": str(data_path(data_root)), "serialize": dcfg["serialize"], "kind": dcfg["kind"]}
    if dcfg["schema"]:
        one = picked[0]
        return Dataset(name=f"maskbench_{one.id}", grammar=one.spec(), samples=pick(one.samples, n, seed),
                       meta={**base, "schema": one.id, "category": one.category, **one.meta})
    shard = parse_shard(dcfg["shard"])
    cell = ("maskbench" + ("_invalid" if dcfg["kind"] == "invalid" else "")
            + ("_flexible" if dcfg["serialize"] == "flexible" else "")
            + (f"_shard{shard[0]}of{shard[1]}" if shard else ""))
    groups = [GrammarGroup(s.id, s.spec(), pick(s.samples, n, seed)) for s in picked if s.samples]
    if not groups:
        raise DataError(f"dataset=maskbench: none of the {len(picked)} selected schemas has a {dcfg['kind']} "
                        "instance; select more schemas (dataset.count, dataset.categories)")
    meta = {**base, "schemas_selected": len(picked), "schemas_with_instances": len(groups),
            "schemas_refused_by_converter": sum(not s.converted for s in picked if s.samples),
            "categories": sorted({s.category for s in picked}), "count": dcfg["count"], "shard": dcfg["shard"]}
    return grouped(cell, groups, meta)
