"""Summary of the GPU agenda (``experiments/gpu_agenda.sh``), built from the stored cells only.

    python -m gcdbench.experiments.gpu_agenda --results results/gpu/<device> [--device NAME]

Writes ``summary.md`` and ``summary.json`` under ``--results``: Table 1 rows of Valiant's CUDA backend named with
the device and of its CPU backend on the same machine, the same-run CPU/GPU ratios per dataset, the occupancy
sweep (per-mask mean and p99 against ``workers``), and the figures (``figures/``, the workers figure among them).
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pandas as pd

DEFAULT_WORKERS = 32


def _label(row, device: str) -> str:
    opts = json.loads(row["engine_options"])
    if opts.get("backend") == "cuda":
        return f"valiant cuda, {opts.get('workers')} workers ({row.get('gpu') or device})"
    return f"valiant cpu, {opts.get('threads', 1)} thread ({row['machine']})"


def summarize(results: Path, device: str) -> dict:
    from gcdbench.experiments.figures import draw_all, load_cells
    from gcdbench.experiments.report import table1

    runs = Path(results) / "runs"
    cells = load_cells(runs)
    if cells.empty:
        raise SystemExit(f"gpu_agenda: no cells under {runs}: run the table, cpu and sweep phases first")
    cells = cells[cells["engine"] == "valiant"].copy()
    opts = cells["engine_options"].map(json.loads)
    cells["backend"] = opts.map(lambda o: o.get("backend", "cpu"))
    main = cells[(cells["backend"] == "cpu") | (cells["workers"] == DEFAULT_WORKERS)].copy()
    main["config"] = [_label(r, device) for _, r in main.iterrows()]
    tokenizer = main["tokenizer"].mode().iloc[0]
    table, notes = table1(main, tokenizer=tokenizer)

    ratios = []
    for ds, grp in main.groupby("dataset"):
        cpu, gpu = grp[grp["backend"] == "cpu"], grp[grp["backend"] == "cuda"]
        if cpu.empty or gpu.empty:
            continue
        c, g = cpu.iloc[0], gpu.iloc[0]
        ratios.append({"dataset": ds, "cpu_mean_us": c["mask_mean_us"], "cuda_mean_us": g["mask_mean_us"],
                       "cpu_p50_us": c["mask_p50_us"], "cuda_p50_us": g["mask_p50_us"],
                       "cpu_over_cuda_mean": f"{c['mask_mean_us'] / g['mask_mean_us']:.3g}",
                       "cpu_over_cuda_p50": f"{c['mask_p50_us'] / g['mask_p50_us']:.3g}",
                       "cuda_audit": f"{int(g.get('audit_agree') or 0)}/{int(g.get('audit_steps') or 0)}",
                       "cuda_pass": f"{int(g.get('passed') or 0)}/{int(g.get('samples') or 0)}"})
    sweep = cells[cells["backend"] == "cuda"].sort_values(["dataset", "workers"])
    sweep = sweep[["dataset", "workers", "samples", "mask_n", "mask_mean_us", "mask_p50_us", "mask_p99_us", "status"]]
    figures = [str(p.relative_to(results)) for p in draw_all(runs, Path(results) / "figures")]

    def md(df: pd.DataFrame) -> str:
        return df.to_markdown(index=False, floatfmt=",.1f") if len(df) else "(none)"

    text = "\n".join([
        f"# GPU agenda: Valiant on {device}", "",
        "Built from the cells under `runs/` by `python -m gcdbench.experiments.gpu_agenda`; timings from one run of",
        "`experiments/gpu_agenda.sh` on this machine (CPU and GPU rows from the same run).", "",
        "## Table 1 rows", "", md(table), "", *[f"[{i}] {n}" for i, n in enumerate(notes, 1)], "",
        "## CPU / GPU, same run", "", md(pd.DataFrame(ratios)), "",
        "## Occupancy: per-mask time against workers (thread blocks)", "", md(sweep), "",
        "## Figures", "", *[f"- `{f}`" for f in figures if f.endswith(".png")], "",
    ])
    (Path(results) / "summary.md").write_text(text)
    doc = {"device": device, "table1": table.to_dict(orient="records"), "notes": notes, "ratios": ratios,
           "sweep": sweep.replace({np.nan: None}).to_dict(orient="records"), "figures": figures}
    (Path(results) / "summary.json").write_text(json.dumps(doc, indent=1, default=str) + "\n")
    return doc


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--results", required=True, help="the agenda's output folder (results/gpu/<device>)")
    ap.add_argument("--device", default="GPU", help="device name for the row labels when a cell recorded none")
    args = ap.parse_args(argv)
    doc = summarize(Path(args.results), args.device)
    print((Path(args.results) / "summary.md").read_text())
    print(f"{len(doc['table1'])} table rows, {len(doc['sweep'])} sweep cells, {len(doc['figures'])} figure files")


if __name__ == "__main__":
    main()
