"""The report's "Cliffs" section: growth exponents and worst masks on fuzzed grammars, from stored files only
(the bench file of ``python -m gcdbench.experiments.cliffs bench``, the runner cells of ``experiment=cliffs`` and
the reproducers of ``cliffs shrink``)."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd

from gcdbench.experiments.fit import CLIFF_EXPONENT, fit_bench
from gcdbench.experiments.schema import read_bench, stored_path
from gcdbench.experiments.fit import loglog_slope
from gcdbench.experiments.report.collect import (cell_commits, read_cell_file, run_dirs, run_info,
                                                 sample_step_summary, warn)
from gcdbench.experiments.report.section import Context, Section
from gcdbench.experiments.report.text import markdown, measured_at

WORST_SHOWN = 3


def cell_growth(roots) -> pd.DataFrame:
    """Per (engine config, fuzzed grammar, sentence) of the runner cells: masks made, mean and max mask time,
    outcome; plus the cell's audit and provenance."""
    rows = []
    for d in run_dirs(roots):
        try:
            run = run_info(d)
            if not run["dataset"].startswith("fuzz_"):
                continue
            per = sample_step_summary(d)
            samples = read_cell_file(d, "samples.parquet")
            audit = read_cell_file(d, "audit.parquet")
        except Exception as err:   # one unreadable cell: named, the others reported
            warn(f"{d}: skipped ({err})")
            continue
        seed = int(run["dataset"].split("_", 1)[1])
        head = {"config": run["config"], "grammar_seed": seed, "path": str(d), "compile_error": run["compile_error"],
                "machine": run["machine"], "commit": "+".join(cell_commits(run, samples)),
                "audited": int(len(audit)) if audit is not None else 0,
                "agree_language": int(audit["agree_language"].sum()) if audit is not None and "agree_language" in audit
                else 0,
                "agree_profile": int(audit["agree_profile"].sum()) if audit is not None and "agree_profile" in audit
                else 0}
        if samples is None or not len(samples):
            rows.append({**head, "sample_id": None, "outcome": "compile_error" if head["compile_error"] else "none"})
            continue
        per = (per.set_index("sample_id")[["masks", "mean_us", "max_us"]] if per is not None and len(per)
               else pd.DataFrame(columns=["masks", "mean_us", "max_us"]))
        for r in samples.to_dict("records"):
            sid = r["sample_id"]
            st = per.loc[sid] if sid in per.index else None
            m = re.search(r"-L(\d+)-", sid)
            rows.append({**head, "sample_id": sid, "outcome": r["outcome"],
                         "target": int(m.group(1)) if m else np.nan,
                         "masks": int(st["masks"]) if st is not None else 0,
                         "mean_us": float(st["mean_us"]) if st is not None else np.nan,
                         "max_us": float(st["max_us"]) if st is not None else np.nan})
    return pd.DataFrame(rows)


def fit_cells(g: pd.DataFrame) -> pd.DataFrame:
    """Per (config, grammar): exponent of mean mask time against masks made (sentences the engine went through or
    that a limit cut short; a refused token ends a sentence early and says nothing of growth), worst mask,
    outcomes, audit."""
    out = []
    for (config, seed), s in g.groupby(["config", "grammar_seed"]):
        ran = s[(s["masks"] > 0) & s["outcome"].isin(["ok", "no_eos", "timeout"])] if "masks" in s else s.iloc[:0]
        cut = int(s["outcome"].isin(["timeout", "skipped", "oom"]).sum())
        out.append({"engine": config, "grammar_seed": int(seed),
                    "exponent": loglog_slope(ran["masks"], ran["mean_us"]) if len(ran) else np.nan,
                    "worst_us": float(ran["max_us"].max()) if len(ran) else np.nan,
                    "longest_tokens": int(ran["masks"].max() - 1) if len(ran) else 0,
                    "cut_short": cut, "compile_error": s["compile_error"].iloc[0],
                    "outcomes": ", ".join(f"{k} {v}" for k, v in s["outcome"].value_counts().items()),
                    "audited": int(s["audited"].iloc[0]), "agree": int(s["agree_profile"].iloc[0]),
                    "agree_language": int(s["agree_language"].iloc[0]),
                    "machine": s["machine"].iloc[0], "commit": s["commit"].iloc[0]})
    return pd.DataFrame(out)


def _cliff(r) -> bool:
    return bool(r["cut_short"]) or (not np.isnan(r["exponent"]) and r["exponent"] > CLIFF_EXPONENT)


def summary(fit: pd.DataFrame) -> pd.DataFrame:
    """One row per engine: grammars, how many compiled, exponent median/max, cliffs, worst mask, audit."""
    rows = []
    for engine, s in fit.groupby("engine"):
        ran = s[s["compile_error"].fillna("") == ""] if "compile_error" in s else s
        cliffs = ran[ran.apply(_cliff, axis=1)] if len(ran) else ran
        rows.append({"engine": engine, "grammars": len(s), "compiled": len(ran),
                     "exponent p50": _f(ran["exponent"].median()), "exponent max": _f(ran["exponent"].max()),
                     "cliffs": len(cliffs), "worst mask (ms)": _f(ran["worst_us"].max() / 1e3, 2),
                     "audit: language": f"{int(ran['agree_language'].sum())}/{int(ran['audited'].sum())}",
                     "audit: declared profile": f"{int(ran['agree'].sum())}/{int(ran['audited'].sum())}"})
    return pd.DataFrame(rows)


def _f(v, nd: int = 2) -> str:
    return "–" if v is None or (isinstance(v, float) and np.isnan(v)) else f"{v:.{nd}f}"


def cliffs_section(bench: Path | None, runs: Path | None, out: Path, reproducers: Path | None = None) -> list[str]:
    """README lines of the "Cliffs" section and its CSV files under ``out`` (empty when nothing is stored). ``runs``:
    the runner cells' folder, or the per-sentence summary ``cliffs collect`` wrote from it (a CSV file)."""
    out = Path(out)
    lines: list[str] = []
    if bench is not None and stored_path(bench).exists():
        doc = read_bench(bench)
        fb = fit_bench(doc["records"])
        out.mkdir(parents=True, exist_ok=True)
        fb.to_csv(out / "cliffs_bench.csv", index=False)
        m = doc.get("machine") or {}
        engines = sorted(set(fb["engine"]) - {"reference"})
        lines += [
            "## Cliffs: fuzzed grammars", "",
            f"`{bench}`: the reference checker and {', '.join(engines)} on {fb['grammar_seed'].nunique()} fuzzed "
            f"grammars (`datasets/fuzz.py`, seeds {fb['grammar_seed'].min()}-{fb['grammar_seed'].max()}), each with "
            f"sentences of growing length (`{doc.get('command', '')}`), at commit {str(doc.get('git_commit'))[:7]}"
            f"{' (dirty tree)' if doc.get('git_dirty') else ''} on {m.get('cpu', '?')} ({m.get('cpu_count', '?')} "
            "cores), each timed sentence with the cycle collector's earlier objects frozen (`cliffs.quiet_gc`).", "",
            "**Reference checker.** Its bound is O(|G|^2 n^2) per byte in two factors: a byte costs O(S^2) for an "
            "Earley column of S items, and a column after n bytes holds at most D (n + 1) items (D: the grammar's "
            "dotted rules). Both are measured at every byte: the largest S / (D (n + 1)) (at most 1), and the exponent "
            "of the per-byte time against S (least squares over bins of S, pooled over a grammar's sentences; – where "
            "S never grew past 8x, as on LR-like grammars). The exponent against the position in the longest "
            "sentence is kept for information: where a long glued word makes the cost grow with the word (from where "
            "it starts), not with the position, that fit overshoots.", "",
        ]
        ref = fb[fb["engine"] == "reference"]
        if len(ref):
            st = ref["exponent_state"]
            lines += [markdown(pd.DataFrame([{
                "grammars": len(ref), "sentences finished": f"{int(ref['finished'].sum())}/{int(ref['sentences'].sum())}",
                "max S / (D (n + 1))": _f(ref["column_bound_ratio"].max(), 3),
                "exponent vs S: fitted": f"{int(st.notna().sum())}",
                "p50": _f(st.median()), "p99": _f(st.quantile(0.99)), "max": _f(st.max()),
                "over 2": int((st > CLIFF_EXPONENT).sum()),
                "largest column (items)": int(ref["max_column_items"].max()),
                "worst byte (ms)": _f(ref["worst_us"].max() / 1e3, 2),
                "position exponent max (information)": _f(ref["exponent"].max())}]), parse_numbers=False), ""]
            top = ref.sort_values("exponent_state", ascending=False).head(WORST_SHOWN)
            lines += ["Largest exponents against S:", "",
                      markdown(top[["grammar_seed", "templates", "exponent_state", "exponent", "max_column_items",
                                     "worst_us"]]
                                .assign(exponent_state=lambda d: d["exponent_state"].map(_f),
                                        exponent=lambda d: d["exponent"].map(_f),
                                        worst_us=lambda d: d["worst_us"].map(lambda v: _f(v, 0))),
                                parse_numbers=False), ""]
        eng = fb[fb["engine"] != "reference"]
        if len(eng):
            lines += ["**Engines** (per mask, Qwen3, the whole vocabulary; audited steps against the reference under "
                      "the engine's declared profile). Exponent: how the cost of a mask grows with the position in the "
                      "grammar's longest sentence (slope of log cumulative cost against log position over its last "
                      "70%, minus one; bound 2). Across lengths: the slope of log mean cost against log length over "
                      "the longer half of the five sentences, which also moves when sentences differ in kind.", ""]
            tab = pd.DataFrame([
                {"engine": name, "grammars": len(s), "refused (compile error)": int((s["finished"] == 0).sum()),
                 "exponent p50": _f(s["exponent"].median()), "exponent p99": _f(s["exponent"].quantile(0.99)),
                 "exponent max": _f(s["exponent"].max()), "over bound (> 2)": int((s["exponent"] > CLIFF_EXPONENT).sum()),
                 "across lengths max": _f(s["exponent_across"].max()),
                 "worst mask (ms)": _f(s["worst_us"].max() / 1e3, 2),
                 "worst mask, longest sentence: p50 / p99 / max (ms)": " / ".join(
                     _f(s["at_longest_us"].quantile(q) / 1e3, 2) for q in (0.5, 0.99, 1.0)),
                 "audit (agree/steps)": f"{int(s['agree'].sum())}/{int(s['audited'].sum())}",
                 "sentences finished": f"{int(s['finished'].sum())}/{int(s['sentences'].sum())}"}
                for name, s in eng.groupby("engine")])
            lines += [markdown(tab, parse_numbers=False), ""]
            top = eng.sort_values("at_longest_us", ascending=False).groupby("engine").head(WORST_SHOWN)
            lines += ["Worst masks of the longest sentences:", "",
                      markdown(top[["engine", "grammar_seed", "templates", "exponent", "exponent_across",
                                     "at_longest_us", "longest_units", "outcomes"]]
                                .assign(exponent=lambda d: d["exponent"].map(_f),
                                        exponent_across=lambda d: d["exponent_across"].map(_f),
                                        at_longest_us=lambda d: d["at_longest_us"].map(lambda v: _f(v, 0))),
                                parse_numbers=False), ""]
    if runs is not None and Path(runs).exists():
        g = pd.read_csv(runs) if Path(runs).is_file() else cell_growth([Path(runs)])
        if len(g):
            fit = fit_cells(g)
            out.mkdir(parents=True, exist_ok=True)
            fit.to_csv(out / "cliffs_cells.csv", index=False)
            if not lines:
                lines += ["## Cliffs: fuzzed grammars", ""]
            lines += [f"### Every engine on fuzzed grammars (`{runs}`)", "",
                      "Runner cells of `experiment=cliffs` (per-mask times on Qwen3, one audited step per sentence, "
                      "limits of the preset; exponent: mean mask time against masks made, over the sentences the "
                      "engine went through or a limit cut short). A cliff: an exponent above 2, or a sentence cut "
                      "short by a limit. Audit: audited steps whose whole-vocabulary mask equals the harness's "
                      "language, and the engine's declared profile. "
                      "Cliffs of other engines are findings, not defects of this harness.", "",
                      markdown(summary(fit), parse_numbers=False), "",
                      measured_at(fit.assign(config=fit["engine"], dataset=fit["grammar_seed"].map(lambda s: f"fuzz_{s}"))), ""]
            worst = fit[fit.apply(_cliff, axis=1)].sort_values(["cut_short", "exponent"], ascending=False)
            rep_doc = read_bench(reproducers) if reproducers is not None and stored_path(reproducers).exists() else {}
            rep = rep_doc.get("records", [])
            if len(worst):
                lines += ["Each engine's worst grammars (cut short first, then by exponent):", ""]
                if rep:   # the shrinker runs after the cells, possibly at another commit: said, never mixed silently
                    lines += [f"Reproducers: `cliffs shrink` at commit {str(rep_doc.get('git_commit'))[:7]}"
                              + (" (dirty tree)" if rep_doc.get("git_dirty") else "")
                              + f", {rep_doc.get('when', '?')}, on the cells above.", ""]
                for r in worst.groupby("engine").head(WORST_SHOWN).to_dict("records"):
                    lines.append(f"- {r['engine']} × fuzz_{r['grammar_seed']}: exponent {_f(r['exponent'])}, worst "
                                 f"mask {_f(r['worst_us'] / 1e3, 1)} ms, {r['outcomes']}")
                    for x in rep:
                        if x.get("engine") == r["engine"] and x.get("grammar_seed") == r["grammar_seed"]:
                            # a mask past the budget is null (older files: Infinity)
                            last = ("past the shrinker's time budget" if x["mask_ms"] is None
                                    or not np.isfinite(x["mask_ms"]) else f"{_f(x['mask_ms'], 1)} ms")
                            lines.append(f"  smallest reproducer found: {x['tokens']} tokens, the mask after them "
                                         f"{last} (fastest of the first five masks {_f(x['first_ms'], 1)} ms); "
                                         "grammar:")
                            lines += ["", "  ```", *["  " + ln for ln in x["grammar"].splitlines()], "  ```",
                                      f"  prefix: `{x['prefix'][:200]}`", ""]
                lines.append("")
    if lines:
        (out / "cliffs.md").write_text("\n".join(lines) + "\n")
    return lines


def lines(ctx: Context) -> list[str]:
    """The section, when --cliffs names the fuzzed-grammar folder (bench.json, runs/, reproducers.json)."""
    if ctx.cliffs is None:
        return []
    cliffs = Path(ctx.cliffs)
    return cliffs_section(cliffs / "bench.json", cliffs / "runs", ctx.out, cliffs / "reproducers.json")


SECTION = Section("cliffs", lines, "fuzzed grammars (--cliffs): growth exponents, worst masks, reproducers")
