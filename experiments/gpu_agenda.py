"""The GPU agenda's plan and summary (``experiments/gpu_agenda.sh``), for every engine that declares CUDA kernels.

    python -m gcdbench.experiments.gpu_agenda plan [--dry-run]
    python -m gcdbench.experiments.gpu_agenda summary --results results/gpu/<device> [--device NAME]

``plan`` prints one line per engine with CUDA kernels (``Engine.cuda_kernels``) and an agenda
(``Engine.cuda_agenda``): ``engine<TAB>cuda overrides<TAB>cpu overrides<TAB>sweep overrides<TAB>test file``, the
Hydra overrides the shell script runs (``--dry-run``: the engine's settings for numba's CUDA simulator).

``summary`` writes ``summary.md`` and ``summary.json`` under ``--results`` from the stored cells only: Table 1 rows
of each engine's CUDA backend named with the device and of its CPU backend on the same machine, the same-run
CPU/GPU ratios per engine and dataset, the occupancy sweep (per-mask mean and p99 against the engine's sweep
option), and the figures (``figures/``).
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pandas as pd


def agendas(dry_run: bool = False) -> dict[str, dict]:
    """engine -> its agenda (``cuda``/``cpu`` option overrides, ``sweep``: (option, values), ``default``: the
    sweep option's value in the table cells), with the dry-run settings applied when asked."""
    from gcdbench.experiments.ptx_report import cuda_engines
    from gcdbench.parsers.registry import engine_class

    out = {}
    for name in cuda_engines():
        cls = engine_class(name)
        spec = getattr(cls, "cuda_agenda", None)
        if not spec:
            raise ValueError(f"engine {name!r} declares CUDA kernels but no cuda_agenda (the agenda's options)")
        dry = spec.get("dry_run", {}) if dry_run else {}
        option, values = spec["sweep"]
        cuda = {**spec["cuda"], **dry.get("cuda", {})}
        out[name] = {"cuda": cuda, "cpu": dict(spec["cpu"]), "sweep": (option, tuple(dry.get("sweep", values))),
                     "default": cuda.get(option, cls.options()[option])}
    return out


def _overrides(opts: dict) -> str:
    return " ".join(f"engine.{k}={v}" for k, v in opts.items())


def plan(dry_run: bool) -> list[str]:
    lines = []
    for name, a in agendas(dry_run).items():
        option, values = a["sweep"]
        rest = [v for v in values if v != a["default"]]     # the table's cell stands for the default value
        sweep = "" if not rest else " ".join([_overrides({k: v for k, v in a["cuda"].items() if k != option}),
                                              f"engine.{option}=" + ",".join(str(v) for v in rest)])
        lines.append("\t".join([name, _overrides(a["cuda"]), _overrides(a["cpu"]), sweep,
                                f"tests/test_{name}_cuda.py"]))
    return lines


def _count(x) -> int:
    """A stored count (None or NaN where the cell has none: not audited, crashed) as an int."""
    return 0 if x is None or pd.isna(x) else int(x)


def _matches(opts: dict, want: dict, but: str | None = None) -> bool:
    """``opts`` has every value of ``want`` (the option ``but`` aside)."""
    return all(opts.get(k) == v for k, v in want.items() if k != but)


def summarize(results: Path, device: str, dry_run: bool = False) -> dict:
    from gcdbench.experiments.report.collect import load_cells
    from gcdbench.experiments.report.figures import draw_all
    from gcdbench.experiments.report import table1
    from gcdbench.parsers.registry import engine_class

    runs = Path(results) / "runs"
    cells = load_cells(runs)
    if cells.empty:
        raise SystemExit(f"gpu_agenda: no cells under {runs}: run the table, cpu and sweep phases first")
    plans = agendas(dry_run)
    main_parts, ratios, sweeps = [], [], []
    for name, a in plans.items():
        own = cells[cells["engine"] == name].copy()
        if own.empty:
            continue
        defaults = engine_class(name).options()
        opts = own["engine_options"].map(lambda s: {**defaults, **json.loads(s)})
        option = a["sweep"][0]
        own["backend"] = ["cuda" if _matches(o, a["cuda"], option) else "cpu" if _matches(o, a["cpu"]) else "other"
                          for o in opts]
        own["sweep_value"] = [o[option] for o in opts]
        threads = engine_class(name).threads_option
        own["config"] = [f"{name} cuda, {v} {option} ({r.get('gpu') or device})" if b == "cuda" else
                         f"{name} cpu, {o.get(threads, 1) if threads else 1} thread ({r['machine']})"
                         for (_, r), b, v, o in zip(own.iterrows(), own["backend"], own["sweep_value"], opts)]
        main = own[(own["backend"] == "cpu") | ((own["backend"] == "cuda") & (own["sweep_value"] == a["default"]))]
        main_parts.append(main)
        for ds, grp in main.groupby("dataset"):
            cpu, gpu = grp[grp["backend"] == "cpu"], grp[grp["backend"] == "cuda"]
            if cpu.empty or gpu.empty:
                continue
            c, g = cpu.iloc[0], gpu.iloc[0]
            if pd.isna(c["mask_mean_us"]) or pd.isna(g["mask_mean_us"]):
                continue       # no masks on one side (the grammar refused at compile, or every sample failed)
            ratios.append({"engine": name, "dataset": ds, "cpu_mean_us": c["mask_mean_us"],
                           "cuda_mean_us": g["mask_mean_us"], "cpu_p50_us": c["mask_p50_us"],
                           "cuda_p50_us": g["mask_p50_us"],
                           "cpu_over_cuda_mean": f"{c['mask_mean_us'] / g['mask_mean_us']:.3g}x",
                           "cpu_over_cuda_p50": f"{c['mask_p50_us'] / g['mask_p50_us']:.3g}x",
                           "cuda_audit": f"{_count(g.get('audit_agree'))}/{_count(g.get('audit_steps'))}",
                           "cpu_audit": f"{_count(c.get('audit_agree'))}/{_count(c.get('audit_steps'))}",
                           "cuda_pass": f"{_count(g.get('passed'))}/{_count(g.get('samples'))}"})
        sw = own[own["backend"] == "cuda"].sort_values(["dataset", "sweep_value"]).assign(engine=name, option=option)
        sweeps.append(sw[["engine", "dataset", "option", "sweep_value", "samples", "mask_n", "mask_mean_us",
                          "mask_p50_us", "mask_p99_us", "status"]])
    if not main_parts:
        raise SystemExit(f"gpu_agenda: no cell under {runs} is of an engine with a CUDA agenda ({sorted(plans)})")
    main = pd.concat(main_parts)
    tokenizer = main["tokenizer"].mode().iloc[0]
    table, notes = table1(main, tokenizer=tokenizer)
    sweep = pd.concat(sweeps).rename(columns={"sweep_value": "value"})
    figures = [str(p.relative_to(results)) for p in draw_all(runs, Path(results) / "figures")]

    def md(df: pd.DataFrame) -> str:
        return df.to_markdown(index=False, floatfmt=",.1f") if len(df) else "(none)"

    text = "\n".join([
        f"# GPU agenda: {', '.join(plans)} on {device}", "",
        "Built from the cells under `runs/` by `python -m gcdbench.experiments.gpu_agenda summary`; timings from",
        "`experiments/gpu_agenda.sh` (each cell's run record names its sessions, commits and machine).", "",
        "## Table 1 rows", "", md(table), "", *[f"[{i}] {n}" for i, n in enumerate(notes, 1)], "",
        "## CPU / GPU (a ratio above 1x: the GPU is faster)", "", md(pd.DataFrame(ratios)), "",
        "## Occupancy: per-mask time against each engine's sweep option", "", md(sweep), "",
        "## Figures", "", *[f"- `{f}`" for f in figures if f.endswith(".png")], "",
    ])
    (Path(results) / "summary.md").write_text(text)
    doc = {"device": device, "engines": list(plans), "table1": table.to_dict(orient="records"), "notes": notes,
           "ratios": ratios, "sweep": sweep.replace({np.nan: None}).to_dict(orient="records"), "figures": figures}
    (Path(results) / "summary.json").write_text(json.dumps(doc, indent=1, default=str) + "\n")
    return doc


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("plan", help="the engines and their overrides, one tab-separated line each")
    p.add_argument("--dry-run", action="store_true", help="the settings for numba's CUDA simulator")
    s = sub.add_parser("summary", help="summary.md / summary.json from the stored cells")
    s.add_argument("--results", required=True, help="the agenda's output folder (results/gpu/<device>)")
    s.add_argument("--device", default="GPU", help="device name for the row labels when a cell recorded none")
    s.add_argument("--dry-run", action="store_true", help="the cells were run with the simulator's settings")
    args = ap.parse_args(argv)
    if args.cmd == "plan":
        print("\n".join(plan(args.dry_run)))
        return
    doc = summarize(Path(args.results), args.device, args.dry_run)
    print((Path(args.results) / "summary.md").read_text())
    print(f"{len(doc['table1'])} table rows, {len(doc['sweep'])} sweep cells, {len(doc['figures'])} figure files")


if __name__ == "__main__":
    main()
