"""The "Seeds' tables" section (issue 30): the other seed papers' headline tables in their own layouts, from stored
cells only.

- Seed 003 (PSC), Table 1: mean time of one next-token mask (µs) per vocabulary and method on Java, Go, SQL and
  JSON Schemas; Table 2: share of samples processed correctly, where a positive sample passes when the engine
  allows every token and EOS (outcome ``ok``) and a negative sample (``dataset.kind=negative``, MaskBench's
  invalid instances) passes when the engine refuses it (``rejected`` or ``no_eos``). Its JSON column is the
  MaskBench schemas whose language (the harness's conversion) holds every valid instance and no invalid one, as the
  seed chose them, when the converter's coverage file says which those are.
- Seed 002 (CFGzip), Table 1 (offline preprocessing time and number of token classes) and the mask-latency part of
  its Table 3 (XGrammar with and without CFGzip), on the code grammars this harness has.

Cells: ``--seeds`` (``dataset=java``, ``go``, their ``_negative`` kinds and ``spider``, any vocabulary) and the
MaskBench cells of ``--maskbench`` (its coverage file, ``coverage.json`` beside the runs folder, picks the JSON
schemas). Rows are engine configs, by name; nothing here knows an engine: what a cell's engine reports
(``info()``, ``artifact_keys``, ``accelerates``) it declares itself.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from gcdbench.experiments.report import maskbench
from gcdbench.experiments.report.collect import NEGATIVE_PASS, Unreadable, collect, engine_class, refused, run_info
from gcdbench.experiments.report.section import Context, Section
from gcdbench.experiments.report.text import fmt_s, fmt_us, get, markdown, measured_at

#: seed 003's grammar columns: (column, positive dataset, negative dataset or None); the JSON column comes from
#: the MaskBench cells (:func:`json_entries`)
GRAMMARS = (("Java", "java", "java_negative"), ("Go", "go", "go_negative"), ("SQL", "spider", None))
JSON_COLUMN = "JSON Schemas"
COLUMNS = tuple(c for c, _, _ in GRAMMARS) + (JSON_COLUMN,)
#: the vocabularies of the tables, in the seed's order of size; qwen3_6 (248,320 ids) stands in for Gemma 3's
#: 262,145 (no offline Gemma 3 tokenizer ships in a package)
MODELS = {"llama3": "Llama 3 (128,256)", "qwen3": "Qwen3 (151,936; seed: Qwen2.5, 151,665)",
          "qwen3_6": "Qwen3.6 (248,320; seed: Gemma 3, 262,145)"}


def _models(tokenizers) -> list[str]:
    tokenizers = set(tokenizers)
    return [t for t in MODELS if t in tokenizers] + sorted(tokenizers - set(MODELS))


# --------------------------------------------------------------------------------------------------------------
# one entry: (mean µs, masks, passed, samples, failures) of a config x vocabulary x grammar
# --------------------------------------------------------------------------------------------------------------
def _entry(mean_us=np.nan, masks=0, passed=0, samples=0, error: str | None = None, notes=()) -> dict:
    return {"mean_us": mean_us, "masks": int(masks), "passed": int(passed), "samples": int(samples),
            "error": error, "notes": list(notes)}


def code_entry(pos, neg) -> dict:
    """The entry of a code or SQL grammar from its positive cell row (``collect``'s frame) and its negative cell
    row (or None)."""
    if isinstance(get(pos, "compile_error"), str) and pos["compile_error"]:
        return _entry(error=pos["compile_error"].splitlines()[0][:200])
    counts = get(pos, "outcome_counts") or {}
    passed, samples = int(counts.get("ok", 0)), int(get(pos, "samples") or 0)
    notes = []
    if get(pos, "aborted") or (get(pos, "requested") and samples < pos["requested"]):
        notes.append(f"{samples} of {int(pos['requested'])} positive samples run"
                     + (f" ({pos['aborted']})" if get(pos, "aborted") else ""))
    if neg is not None:
        if isinstance(get(neg, "compile_error"), str) and neg["compile_error"]:
            notes.append("negative samples not run: " + neg["compile_error"].splitlines()[0][:120])
        else:
            passed += refused(get(neg, "outcome_counts"))
            samples += int(get(neg, "samples") or 0)
    for c in (pos, neg):
        if c is not None and get(c, "provenance"):
            notes.append(f"{c['dataset']}: not from one clean commit: {c['provenance']}")
    return _entry(get(pos, "mask_mean_us") if get(pos, "mask_mean_us") is not None else np.nan,
                  get(pos, "mask_n") or 0, passed, samples, notes=notes)


def inexact_schemas(coverage: Path | None) -> tuple[set[str], set[str]]:
    """(schemas whose converted language misses a valid instance or holds an invalid one, or that did not
    convert; every schema the coverage file lists): its ``schemas`` rows. Two empty sets without a file."""
    if coverage is None or not Path(coverage).is_file():
        return set(), set()
    data = json.loads(Path(coverage).read_text())
    rows = [dict(zip(data["schemas_columns"], row)) for row in data["schemas"]]
    return ({r["id"] for r in rows if r["outcome"] != "converted" or r["valid_out"] or r["invalid_in"]},
            {r["id"] for r in rows})


def json_entries(roots, drop: set[str] = frozenset(), listed: set[str] | None = None) -> dict:
    """{(config, tokenizer): entry} of the MaskBench cells under ``roots``, without the schemas in ``drop``: mean
    over the masks of the valid instances; valid instances pass with ``ok``, invalid ones when refused; a schema
    that did not compile fails its instances. With ``listed`` (the schemas a coverage file checked), a note counts
    the cells' schemas it does not list (kept: their exactness is unknown)."""
    parts: dict = {}
    for info, schemas, _ in maskbench.collect_maskbench(roots):
        slot = parts.setdefault((info["config"], info["tokenizer"]), {"valid": None, "invalid": None, "sum": 0.0,
                                                                      "masks": 0, "commits": set(), "all": set()})
        slot["all"] |= set(schemas["schema"])
        schemas = schemas[~schemas["schema"].isin(drop)]
        kept = slot[info["kind"]]   # a config run as shards (dataset.shard=i/N): its cells added together
        slot[info["kind"]] = schemas if kept is None else pd.concat([kept, schemas], ignore_index=True)
        slot["commits"].add(str(info["commit"])[:7])
        if info["kind"] == "valid" and len(schemas):
            slot["sum"] += float(schemas["mask_sum_us"].sum())
            slot["masks"] += int(schemas["masks"].sum())
    out = {}
    for key, slot in parts.items():
        passed = samples = 0
        notes = []
        for kind, good in (("valid", ("ok",)), ("invalid", NEGATIVE_PASS)):
            s = slot[kind]
            if s is None or s.empty:
                continue
            samples += int(s["instances"].sum())
            passed += int(s[[g for g in good if g in s]].to_numpy().sum())
            n_err = int(s["compile_error"].sum())
            if n_err:
                notes.append(f"{kind}: {n_err} of {len(s)} schemas did not compile (their instances count as failed)")
        dropped = len(slot["all"] & set(drop))
        if dropped:
            notes.append(f"{dropped} of {len(slot['all'])} schemas left out (converted language not exact)")
        if listed is not None and slot["all"] - set(listed):
            notes.append(f"{len(slot['all'] - set(listed))} schemas not in the coverage file, kept")
        if len(slot["commits"]) > 1:
            notes.append("cells of commits " + ", ".join(sorted(slot["commits"])))
        mean = slot["sum"] / slot["masks"] if slot["masks"] else np.nan
        out[key] = _entry(mean, slot["masks"], passed, samples, notes=notes)
    return out


def entries(cells: pd.DataFrame, json_cells: dict) -> dict:
    """{(config, tokenizer, column): entry} of every cell of the seed-003 grammars."""
    out = {}
    if not cells.empty:
        for column, pos_ds, neg_ds in GRAMMARS:
            for _, pos in cells[cells["dataset"] == pos_ds].iterrows():
                neg = None
                if neg_ds is not None:
                    m = cells[(cells["dataset"] == neg_ds) & (cells["config"] == pos["config"])
                              & (cells["tokenizer"] == pos["tokenizer"])]
                    neg = m.iloc[0] if len(m) else None
                out[(pos["config"], pos["tokenizer"], column)] = code_entry(pos, neg)
    for (config, tok), e in json_cells.items():
        out[(config, tok, JSON_COLUMN)] = e
    return out


def seed003_tables(ents: dict) -> tuple[pd.DataFrame, pd.DataFrame, list[str]]:
    """Seed 003's Table 1 (mean µs per mask) and Table 2 (pass rate) from :func:`entries`, and their notes."""
    columns = [c for c in COLUMNS if any(k[2] == c for k in ents)]
    notes: list[str] = []
    t1, t2 = [], []
    for tok in _models(k[1] for k in ents):
        for config in sorted({k[0] for k in ents if k[1] == tok}):
            r1 = {"Model": MODELS.get(tok, tok), "Method": config}
            r2 = dict(r1)
            for col in columns:
                e = ents.get((config, tok, col))
                if e is None:
                    r1[col] = r2[col] = ""
                    continue
                if e["error"]:
                    notes.append(f"{config} × {col} ({tok}): not run: {e['error']}")
                    r1[col] = f"× [{len(notes)}]"
                    r2[col] = "×"
                    continue
                mark = ""
                for n in e["notes"]:
                    notes.append(f"{config} × {col} ({tok}): {n}")
                    mark += f" [{len(notes)}]"
                r1[col] = fmt_us(e["mean_us"]) + mark
                r2[col] = (f"{100 * e['passed'] / e['samples']:.1f}% ({e['passed']:,}/{e['samples']:,})"
                           if e["samples"] else "–") + mark
            t1.append(r1)
            t2.append(r2)
    return pd.DataFrame(t1), pd.DataFrame(t2), notes


def seed002_tables(cells: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Seed 002's Table 1 and its mask latency, for every engine that declares the engine it speeds up
    (``Engine.accelerates``, the same masks over a compressed vocabulary): per grammar and vocabulary, the
    figures its compile reported (its ``artifact_keys``: offline preprocessing, token classes) and the mean and
    p50/p99 µs per mask of the base engine and of the accelerated one, on the same cells."""
    if cells.empty:
        return pd.DataFrame(), pd.DataFrame()
    code = cells[cells["dataset"].isin([pos for _, pos, _ in GRAMMARS])]
    prep, lat = [], []
    for (ds, tok), grp in code.groupby(["dataset", "tokenizer"], sort=True):
        for _, fast in grp.iterrows():
            cls = engine_class(fast["engine"])
            base_name = getattr(cls, "accelerates", None)
            if not base_name:
                continue
            err = fast["compile_error"].splitlines()[0][:120] if isinstance(get(fast, "compile_error"), str) else ""
            try:
                info = run_info(Path(fast["path"]))["engine_info"]
            except Unreadable:
                info = {}
            row = {"grammar": ds, "vocabulary": MODELS.get(tok, tok), "engine": fast["config"]}
            for col, path in cls.artifact_keys.items():
                v = info
                for k in path:
                    v = v.get(k) if isinstance(v, dict) else None
                row[col] = "×" if err else ("–" if v is None else fmt_s(v) if isinstance(v, float) else f"{v:,}")
            prep.append({**row, "note": err})
            base = grp[grp["config"] == base_name]
            base = base.iloc[0] if len(base) else None
            row = {"grammar": ds, "vocabulary": MODELS.get(tok, tok)}
            for name, c in ((base_name, base), (fast["config"], fast)):
                ok = c is not None and not (isinstance(get(c, "compile_error"), str) and c["compile_error"])
                mark = "–" if c is None else "×"
                row[f"{name} mean µs"] = fmt_us(get(c, "mask_mean_us")) if ok else mark
                row[f"{name} p50/p99 µs"] = ("/".join(fmt_us(get(c, k)) for k in ("mask_p50_us", "mask_p99_us"))
                                             if ok else mark)
            bm = get(base, "mask_mean_us") if base is not None else None
            fm = get(fast, "mask_mean_us")
            row["speed-up (mean)"] = f"{bm / fm:.1f}x" if bm and fm else "–"
            lat.append(row)
    return pd.DataFrame(prep), pd.DataFrame(lat)


# --------------------------------------------------------------------------------------------------------------
# the section
# --------------------------------------------------------------------------------------------------------------
def coverage_file(ctx: Context) -> Path | None:
    if ctx.maskbench is None:
        return None
    p = Path(ctx.maskbench).parent / "coverage.json"
    return p if p.is_file() else None


def _lower_first(text: str) -> str:
    """A sentence continued after a colon: its first letter (after any ``**``) in lower case."""
    i = len(text) - len(text.lstrip("*"))
    return text[:i] + text[i:i + 1].lower() + text[i + 1:]


def section_lines(ctx: Context) -> list[str]:
    if ctx.seeds is None:
        return []
    cells = collect(ctx.seeds) if Path(ctx.seeds).is_dir() else pd.DataFrame()
    cov = coverage_file(ctx)
    drop, listed = inexact_schemas(cov)
    json_cells = (json_entries([ctx.maskbench], drop, listed if cov is not None else None)
                  if ctx.maskbench is not None else {})
    ents = entries(cells, json_cells)
    if not ents:
        return []
    t1, t2, notes = seed003_tables(ents)
    t1.to_csv(ctx.out / "seed003_table1.csv", index=False)
    t2.to_csv(ctx.out / "seed003_table2.csv", index=False)
    lines = ["## Seeds' tables", "",
             "### Seed 003, Table 1: mean time of one next-token mask (µs)", "",
             "Rows are engine configs per vocabulary (the `_schema` presets: the engines' own JSON Schema compilers; "
             "the other rows get each schema through the harness's converter). The seed's GreatGramma has no "
             "package and no row. × = the engine refused the grammar (notes below). Java and Go: the seed's Lark "
             "grammars (README \"Java and Go\"), OpenJDK 17 and Go 1.19 sources the grammar accepts (the seed's "
             "source files differ); SQL: Spider's gold queries.", "",
             markdown(t1, parse_numbers=False), "",
             "### Seed 003, Table 2: samples processed correctly", "",
             "A positive sample passes when every token and EOS is allowed; a negative one (a seeded mutation outside "
             "the language, MaskBench's invalid instances) when the engine refuses it.", "",
             markdown(t2, parse_numbers=False), ""]
    lines += [f"- [{i}] {n}" for i, n in enumerate(notes, 1)] + ([""] if notes else [])
    if json_cells:
        lines += [("JSON Schemas: the MaskBench schemas whose converted language holds every valid instance and no "
                   f"invalid one (`{cov}`), as the seed chose them." if cov is not None else
                   "JSON Schemas: every schema of the MaskBench cells (no coverage file beside them, so schemas whose "
                   "converted language misses an instance are not filtered out as the seed did)."), ""]
    prep, lat = seed002_tables(cells)
    if not prep.empty:
        prep.to_csv(ctx.out / "seed002_table1.csv", index=False)
        lat.to_csv(ctx.out / "seed002_latency.csv", index=False)
        lines += ["### Seed 002, Table 1 and mask latency", "",
                  "The seed's C++ and Bython grammars are not available; these are the code grammars the harness "
                  "has. Each engine that speeds up another one (same masks over token classes) beside that engine; "
                  "its offline figures as its compile recorded them (a cache hit reports the recorded build).", "",
                  markdown(prep, parse_numbers=False), "",
                  markdown(lat, parse_numbers=False), ""]
    seen = cells[cells["dataset"].isin([d for _, p, n in GRAMMARS for d in (p, n) if d])] if not cells.empty else cells
    if not seen.empty:
        lines += ["Java, Go and SQL columns: " + _lower_first(measured_at(seen)), ""]
    if json_cells:   # the JSON column reads the MaskBench cells: their own commits and machines, named apart
        said = maskbench.provenance_line(maskbench.collect_maskbench([ctx.maskbench]))
        lines += [f"JSON Schemas column (the MaskBench cells of `{ctx.maskbench}`): " + _lower_first(said), ""]
    lines += ["Seed 004 reports time per output token and throughput of an LLM on a GPU: not reproducible on this "
              "CPU machine; its engine's batch mask latency beside the others is in the batch section.", ""]
    return lines


SECTION = Section("seeds", section_lines, "seed 003's Tables 1-2 and seed 002's tables from the cells of --seeds "
                                          "(Java, Go, SQL) and --maskbench (JSON Schemas)")
