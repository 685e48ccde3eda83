"""Tables from stored results only: every folder under the results root that has a ``run.json``.

``python -m experiments.report [--results results/runs] [--out results] [--also DIR ...]`` writes Table 1
(seed 000's layout) as Markdown, CSV and LaTeX, a per-cell detail table, and ``README.md`` with both, and prints
Table 1. Each ``--also`` folder (a run outside the Table 1 sweep, e.g. all 300 TreeBank samples) gets its own
section: its cells, and the mask-time tail at every prefix length (``prefix_tails_<name>.csv``, a figure).
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pandas as pd

COMPLEXITY = {"xgrammar": "?", "llguidance": "O(n)", "psc": "O(n)", "valiant": "O(n^3)", "cfgzip": "?",
              "glrmask": "O(n^3)", "reference": "O(n^3)"}
AMBIGUOUS = {"treebank", "sample_pos"}
DATASET_ORDER = ["spider", "spider_spop", "treebank", "sample", "sample_pos"]


def find_runs(root: Path) -> list[Path]:
    return sorted(p.parent for p in Path(root).rglob("run.json") if ".hydra" not in p.parts)


def first_engine_info(meta: dict) -> dict:
    """The engine's ``info()`` at the cell's first compile (``run.json``'s ``inits[0]``), or ``{}``."""
    return (meta.get("inits") or [{}])[0].get("engine_info") or {}


def cell_stats(run_dir: Path) -> dict:
    """One cell's numbers, computed from its stored files."""
    meta = json.loads((run_dir / "run.json").read_text())
    samples = pd.read_parquet(run_dir / "samples.parquet") if (run_dir / "samples.parquet").exists() else None
    steps = pd.read_parquet(run_dir / "steps.parquet") if (run_dir / "steps.parquet").exists() else None
    audit = pd.read_parquet(run_dir / "audit.parquet") if (run_dir / "audit.parquet").exists() else None
    row = {
        "engine": meta["engine"], "config": meta["config"], "dataset": meta["dataset"], "tokenizer": meta["tokenizer"],
        "requested": meta.get("n_samples"), "init_s": meta.get("init_s"), "compile_error": meta.get("compile_error"),
        "aborted": meta.get("aborted"),
        "machine": "{cpu} ({cpu_count} cores, {memory_gb} GB)".format(**{"cpu": "?", "cpu_count": "?", "memory_gb": "?",
                                                                        **(meta.get("machine") or {})}),
        "gpu": (meta.get("machine") or {}).get("gpu"), "peak_rss_compile_mb": meta.get("peak_rss_compile_mb"),
        "peak_rss_run_mb": meta.get("peak_rss_run_mb"), "path": str(run_dir),
        "init_cache_hit": bool(first_engine_info(meta).get("cache_hit")),
    }
    if samples is not None:
        counts = samples["outcome"].value_counts()
        attempted = samples[~samples["outcome"].isin(["skipped", "compile_error"])]
        row["samples"] = int(len(attempted))
        row["passed"] = int(counts.get("ok", 0))
        row["pass_rate"] = row["passed"] / len(attempted) if len(attempted) else np.nan
        row["outcomes"] = ", ".join(f"{k}: {v}" for k, v in counts.items())
    if steps is not None and len(steps):
        us = steps["mask_us"].to_numpy()
        row.update(mask_n=int(us.size), mask_mean_us=float(us.mean()), mask_p50_us=float(np.percentile(us, 50)),
                   mask_p99_us=float(np.percentile(us, 99)), mask_max_us=float(us.max()))
    if audit is not None and len(audit):
        row["audit_steps"] = int(len(audit))
        row["audit_agree"] = int(audit["agree"].sum())
        if "agree_modulo_documented" in audit:
            row["audit_agree_documented"] = int(audit["agree_modulo_documented"].sum())
        row["audit_false_allow"] = int((audit["n_false_allow"] > 0).sum())
        row["audit_false_block"] = int((audit["n_false_block"] > 0).sum())
    return row


def collect(root: Path) -> pd.DataFrame:
    return pd.DataFrame([cell_stats(r) for r in find_runs(root)])


def _get(c, key):
    """A cell value, with pandas' NaN for a missing value read as None."""
    v = c.get(key)
    return None if v is None or (isinstance(v, float) and np.isnan(v)) else v


def _fmt_us(x) -> str:
    if x is None or (isinstance(x, float) and np.isnan(x)):
        return "–"
    return f"{x:,.0f}" if x >= 100 else f"{x:.1f}"


def _fmt_s(x) -> str:
    if x is None or (isinstance(x, float) and np.isnan(x)):
        return "–"
    return f"{x:.2f}s" if x < 100 else f"{x:.0f}s"


def table1(cells: pd.DataFrame, tokenizer: str = "qwen3") -> tuple[pd.DataFrame, list[str]]:
    """Rows = engine configs, per dataset: complexity, init, per-mask mean (µs), p50/p99/max, pass rate."""
    cells = cells[cells["tokenizer"] == tokenizer]
    notes: list[str] = []
    datasets = [d for d in DATASET_ORDER if d in set(cells["dataset"])] + sorted(
        set(cells["dataset"]) - set(DATASET_ORDER))
    out = []
    for config, grp in cells.groupby("config", sort=False):
        row = {"Method": config}
        for ds in datasets:
            c = grp[grp["dataset"] == ds]
            if c.empty:
                for col in ("Cmplx.", "Init", "Per-mask µs", "p50/p99/max µs", "Pass"):
                    row[f"{ds} {col}"] = ""
                continue
            c = c.iloc[0]
            eng = c["engine"]
            cx = COMPLEXITY.get(eng, "?")
            if eng == "llguidance" and ds in AMBIGUOUS:
                cx = "O(n^3)"
            row[f"{ds} Cmplx."] = cx
            if isinstance(c.get("compile_error"), str) and c["compile_error"]:
                notes.append(f"{config} × {ds}: not run: {c['compile_error'].splitlines()[0][:200]}")
                row[f"{ds} Init"] = "×"
                row[f"{ds} Per-mask µs"] = f"× [{len(notes)}]"
                row[f"{ds} p50/p99/max µs"] = "×"
                row[f"{ds} Pass"] = "×"
                continue
            mark = ""
            n_ok_cells = int(_get(c, "samples") or 0)
            passed, requested, aborted = int(_get(c, "passed") or 0), _get(c, "requested"), _get(c, "aborted")
            if aborted or (requested and passed < requested):
                notes.append(
                    f"{config} × {ds}: estimated from {int(_get(c, 'mask_n') or 0)} masks of {n_ok_cells} samples "
                    f"({_get(c, 'outcomes') or ''})" + (f"; {aborted}" if aborted else ""))
                mark = f" [{len(notes)}]"
            row[f"{ds} Init"] = _fmt_s(c.get("init_s"))
            if _get(c, "init_cache_hit"):
                notes.append(f"{config} × {ds}: init read from the engine's on-disk cache, not a cold compile")
                row[f"{ds} Init"] += f" [{len(notes)}]"
            row[f"{ds} Per-mask µs"] = _fmt_us(c.get("mask_mean_us")) + mark
            row[f"{ds} p50/p99/max µs"] = "/".join(_fmt_us(c.get(k)) for k in ("mask_p50_us", "mask_p99_us", "mask_max_us"))
            pr = c.get("pass_rate")
            row[f"{ds} Pass"] = "–" if pr is None or pd.isna(pr) else f"{passed}/{n_ok_cells}"
        out.append(row)
    return pd.DataFrame(out), notes


def details(cells: pd.DataFrame) -> pd.DataFrame:
    cols = ["engine", "config", "dataset", "tokenizer", "samples", "passed", "outcomes", "init_s", "init_cache_hit",
            "mask_n",
            "mask_mean_us", "mask_p50_us", "mask_p99_us", "mask_max_us", "audit_steps", "audit_agree",
            "audit_agree_documented",
            "peak_rss_compile_mb", "peak_rss_run_mb", "machine", "gpu"]
    d = cells.reindex(columns=cols)
    for col in ("samples", "passed", "mask_n", "audit_steps", "audit_agree", "audit_agree_documented"):
        d[col] = d[col].astype("Int64")
    return d.sort_values(["dataset", "tokenizer", "config"]).reset_index(drop=True)


def _markdown(df: pd.DataFrame) -> str:
    cols = list(df.columns)
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for _, r in df.iterrows():
        cells = []
        for c in cols:
            v = r[c]
            if isinstance(v, float):
                v = "" if np.isnan(v) else (f"{v:,.1f}" if abs(v) < 1e6 else f"{v:.3g}")
            cells.append(str(v if v is not None else ""))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


# engine_info keys worth a column in the artifact table, per engine: (column, path into engine_info)
ARTIFACT_KEYS = {
    "valiant": [("CNF binary rules", ("cnf", "binary_rules")), ("CNF nonterminals", ("cnf", "nonterminals")),
                ("left-child nonterminals (stored per tier)", ("cnf", "left_nonterminals")),
                ("terminals", ("cnf", "terminals")), ("lexer states", ("lexer_states",)),
                ("terminal-tree nodes", ("trie_nodes",)), ("token tuples", ("tuples",))],
    "psc": [("lexer states", ("lexer_states",)), ("LALR states", ("parser_states",)),
            ("terminal sequences", ("terminal_sequences",)), ("classifier states", ("automaton_states",)),
            ("minimised states", ("minimized_states",)), ("distinct masks", ("distinct_masks",))],
}


def artifacts(root: Path) -> dict[str, pd.DataFrame]:
    """Per engine with an entry in ``ARTIFACT_KEYS``: one row per dataset with the sizes its compile reported
    (first init of the cell, from ``run.json``), e.g. the CNF counts seed 000 reports for Valiant."""
    rows: dict[str, list] = {}
    for run_dir in find_runs(root):
        meta = json.loads((run_dir / "run.json").read_text())
        keys = ARTIFACT_KEYS.get(meta["engine"])
        info = first_engine_info(meta)
        if not keys or not info:
            continue
        row = {"dataset": meta["dataset"], "tokenizer": meta["tokenizer"]}
        for col, path in keys:
            v = info
            for k in path:
                v = v.get(k) if isinstance(v, dict) else None
            row[col] = v
        rows.setdefault(meta["engine"], []).append(row)
    return {eng: pd.DataFrame(r).drop_duplicates(["dataset", "tokenizer"]).sort_values(["dataset", "tokenizer"])
            .reset_index(drop=True) for eng, r in sorted(rows.items())}


def cell_summary(run_dir: Path) -> str:
    c = cell_stats(Path(run_dir))
    if c.get("compile_error"):
        return f"{c['config']} on {c['dataset']} ({c['tokenizer']}): compile error: {c['compile_error'][:300]}"
    audit = (f", audit {c.get('audit_agree', 0)}/{c.get('audit_steps', 0)} steps agree exactly, "
             f"{c.get('audit_agree_documented', 0)} modulo documented differences") if c.get("audit_steps") else ""
    return (f"{c['config']} on {c['dataset']} ({c['tokenizer']}): pass {c.get('passed', 0)}/{c.get('samples', 0)}, "
            f"init {_fmt_s(c.get('init_s'))}, per-mask mean {_fmt_us(c.get('mask_mean_us'))} µs "
            f"(p50 {_fmt_us(c.get('mask_p50_us'))}, p99 {_fmt_us(c.get('mask_p99_us'))}, "
            f"max {_fmt_us(c.get('mask_max_us'))}; {c.get('mask_n', 0)} masks){audit}  [{c['outcomes'] if 'outcomes' in c else ''}]")


def write_report(results: Path, out: Path, tokenizer: str = "qwen3", also: tuple = ()) -> str:
    cells = collect(results)
    if cells.empty:
        raise SystemExit(f"no run.json under {results}: run `python -m experiments.run ...` first")
    out.mkdir(parents=True, exist_ok=True)
    t1, notes = table1(cells, tokenizer)
    t1.to_csv(out / "table1.csv", index=False)
    (out / "table1.tex").write_text(t1.to_latex(index=False, escape=True))
    note_lines = [f"[{i}] {n}" for i, n in enumerate(notes, 1)]
    md_t1 = _markdown(t1) + ("\n\n" + "\n".join(f"- {n}" for n in note_lines) if notes else "")
    (out / "table1.md").write_text(md_t1 + "\n")
    det = details(cells)
    det.to_csv(out / "cells.csv", index=False)
    machines = sorted({str(m) for m in cells["machine"].dropna()})
    readme = [
        "# Results", "",
        f"Generated by `python -m experiments.report --results {results} --out {out}"
        + "".join(f" --also {a}" for a in also) + "` from the stored run folders; "
        "do not edit by hand.", "",
        f"## Table 1 ({tokenizer} vocabulary)", "",
        "Init = engine compile time for the grammar and vocabulary. Per-mask = mean time of one next-token mask "
        "(µs), p50/p99/max over every mask of the cell. Pass = samples whose every oracle token and final EOS "
        "were allowed. × = the engine could not run the cell (reason in the notes).", "",
        md_t1, "",
        "## Every cell", "",
        "Audit = steps whose full-vocabulary mask was compared with the reference checker; agree = identical "
        "masks; agree_documented = identical once the documented lexing differences (root README) are set "
        "aside. Memory = peak resident set of the worker process (MB).", "",
        _markdown(det.drop(columns=["machine", "gpu"])), "",
        "## Engine artifacts", "",
        "Sizes each engine's compile reported (its `info()` in `run.json`), per dataset and vocabulary.", "",
        *[line for eng, df in artifacts(results).items()
          for line in (f"**{eng}**", "", _markdown(df.astype(object)), "")],
        "## Machines", "",
        *[f"- {m}" for m in machines],
        *[f"- GPU: {g}" for g in sorted({g for g in cells["gpu"].dropna() if g})],
    ]
    for root in also:
        readme += further_runs(Path(root), out)
    from gcdbench.experiments.beyond import beyond_section   # suite and sampled cells (also in <results>/../suite)
    readme += beyond_section([results, *map(Path, also), Path(results).parent / "suite"], out, tokenizer)
    (out / "README.md").write_text("\n".join(readme) + "\n")
    _add_figures(results, out)
    return md_t1


def prefix_tails(steps: pd.DataFrame) -> pd.DataFrame:
    """Masks, p50, p99 and max of ``mask_us`` at every prefix length (tokens), per cell."""
    keys = ["config", "dataset", "tokenizer", "prefix_tokens"]
    g = steps.groupby(keys)["mask_us"]
    return g.agg(masks="size", p50_us="median", p99_us=lambda x: float(np.percentile(x, 99)),
                 max_us="max").reset_index()


def further_runs(root: Path, out: Path, limit_us: float = 1000.0) -> list[str]:
    """README lines for a run folder outside the Table 1 sweep, and its per-prefix-length tail files."""
    from gcdbench.experiments.figures import _save, fig_mask_vs_prefix, load_cells, load_steps

    cells = collect(root)
    if cells.empty:
        return [f"## Further runs: `{root}`", "", "No run.json found.", ""]
    name = Path(root).name
    lines = [f"## Further runs: `{root}`", "", _markdown(details(cells).drop(columns=["machine", "gpu"])), ""]
    steps = load_steps(root)
    if steps.empty:
        return lines
    tails = prefix_tails(steps)
    tails.to_csv(out / f"prefix_tails_{name}.csv", index=False)
    for (config, ds, tok), t in tails.groupby(["config", "dataset", "tokenizer"]):
        worst = t.loc[t["p99_us"].idxmax()]
        over = t[t["p99_us"] > limit_us]
        lines += [
            f"**{config} on {ds} ({tok})**: {int(t['masks'].sum()):,} masks over prefix lengths 0–"
            f"{int(t['prefix_tokens'].max())} tokens. Highest per-length p99: {_fmt_us(worst['p99_us'])} µs at "
            f"length {int(worst['prefix_tokens'])} ({int(worst['masks'])} masks). Lengths whose p99 exceeds "
            f"{_fmt_us(limit_us)} µs: {len(over)} of {len(t)}"
            + (f" ({', '.join(str(int(x)) for x in over['prefix_tokens'][:20])}"
               + (", ..." if len(over) > 20 else "") + ")" if len(over) else "") + ".", ""]
    lines += [f"Every length: `prefix_tails_{name}.csv` (masks, p50, p99, max per prefix length).", ""]
    figs = out / "figures"
    figs.mkdir(parents=True, exist_ok=True)
    fcells = load_cells(root)
    for tok in sorted(set(fcells["tokenizer"])):
        fig = fig_mask_vs_prefix(steps, fcells, tok, width=1)
        if fig is not None:
            stem = f"mask_vs_prefix_{name}_{tok}"
            _save(fig, figs, stem)
            lines += [f"![{stem}](figures/{stem}.png) ([PDF](figures/{stem}.pdf))", ""]
    return lines


def _add_figures(results: Path, out: Path) -> None:
    """Draw the figures into ``<out>/figures/`` and append a "Figures" section that links them to README.md."""
    from gcdbench.experiments.figures import CAPTIONS, draw_all

    pngs = [p for p in draw_all(results, out / "figures") if p.suffix == ".png"]
    lines = ["", "## Figures", "",
             f"Drawn by `python -m experiments.figures --results {results} --out {out / 'figures'}` (PNG and PDF). "
             "Hatched bars and × entries are cells that produced no masks (compile error, time-out, out-of-memory); "
             "\"partial\" marks cells cut short by a limit.", ""]
    for p in pngs:
        caption = next((c for k, c in CAPTIONS.items() if p.stem.startswith(k)), p.stem)
        lines += [f"### {p.stem}", "", caption, "", f"![{p.stem}](figures/{p.name}) ([PDF](figures/{p.stem}.pdf))", ""]
    with open(out / "README.md", "a") as f:
        f.write("\n".join(lines))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", default="results/runs", help="folder searched for run.json files")
    ap.add_argument("--out", default="results", help="where the tables and README.md go")
    ap.add_argument("--tokenizer", default="qwen3")
    ap.add_argument("--also", nargs="*", default=[], help="further run folders, each reported in its own section")
    args = ap.parse_args(argv)
    print(write_report(Path(args.results), Path(args.out), args.tokenizer, tuple(args.also)))


if __name__ == "__main__":
    main()
