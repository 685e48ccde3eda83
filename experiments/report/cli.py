"""``gcdbench-report`` / ``python -m experiments.report``: the report from stored results only."""
from __future__ import annotations

import argparse
from pathlib import Path

from gcdbench.experiments.report.build import SECTIONS, write_report


def main(argv=None):
    ap = argparse.ArgumentParser(
        description="Tables from stored results only: every folder under the results root that has a run.json",
        epilog="Sections, in README order: " + "; ".join(f"{s.name}: {s.help}" for s in SECTIONS) + ".")
    ap.add_argument("--results", default="results/runs", help="folder searched for run.json files")
    ap.add_argument("--out", default="results", help="where the tables and README.md go")
    ap.add_argument("--tokenizer", default="qwen3")
    ap.add_argument("--also", nargs="*", default=[], help="further run folders, each reported in its own section")
    ap.add_argument("--batch", nargs="*", default=[], help="folders of batch-mode runs (experiment=batch_sweep)")
    ap.add_argument("--before", nargs="*", default=[],
                    help="per-prefix tail CSVs of earlier runs (prefix_tails_<name>_<commit>.csv): a growth figure "
                         "draws them beside the --also runs' tails")
    ap.add_argument("--cliffs", default=None,
                    help="folder of the fuzzed-grammar results (bench.json, runs/, reproducers.json): a Cliffs section")
    ap.add_argument("--maskbench", default=None,
                    help="folder of MaskBench cells (experiment=maskbench): a MaskBench section")
    ap.add_argument("--seeds", default=None,
                    help="folder of the Java, Go and SQL cells of the other seeds' tables (experiment=seed_tables): "
                         "a Seeds' tables section (its JSON column from --maskbench)")
    ap.add_argument("--shapes", default=None,
                    help="folder of the grammar-shape cells (experiment=shapes): a Grammar shapes section")
    ap.add_argument("--ratio-base", default=None,
                    help="the config that Table 1's ratios (configs run with repeats) divide by (default: the engine "
                         "an adapter of the cells states its speed targets against, Engine.speed_baseline)")
    args = ap.parse_args(argv)
    from gcdbench.experiments.config import folder_problem

    results, out = Path(args.results), Path(args.out)
    if not results.is_dir():
        ap.exit(2, f"error: --results {results}: " + (f"{results} is a file, not a folder" if results.exists()
                                                      else "no such folder") + "; give a folder of runs\n")
    problem = folder_problem(out)
    if problem:
        ap.exit(2, f"error: --out {out}: {problem}; give a folder (or a path to create)"
                   + (" you can write to" if problem.endswith("writable by this user") else "") + "\n")
    print(write_report(results, out, args.tokenizer, tuple(args.also), tuple(args.batch), tuple(args.before),
                       Path(args.cliffs) if args.cliffs else None, Path(args.maskbench) if args.maskbench else None,
                       Path(args.seeds) if args.seeds else None,
                       shapes=Path(args.shapes) if args.shapes else None, ratio_base=args.ratio_base))
