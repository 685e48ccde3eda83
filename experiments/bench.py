"""Micro-benchmarks of any engine, outside the runner: one harness for every engine (not a unit test).

    python -m gcdbench.experiments.bench masks --engine valiant --dataset spider spider_spop treebank --n 50 \
        [--sweep threads=1,2] [--phases] [KEY=VALUE ...] [--out results/bench/valiant_cpu.json]
    python -m gcdbench.experiments.bench init --engine psc --dataset spider --out results/bench/psc_init.json
    python -m gcdbench.experiments.bench batch --engine pre3 xgrammar --dataset spider --batch 1 2 4 8 \
        --steps 200 --threads 0 [pre3.backend=cuda] --out results/bench/pre3_batch_cpu.json
    python -m gcdbench.experiments.bench instructions --engine valiant --dataset spider --n 10 [--phases]
    python -m gcdbench.experiments.bench plot results/bench/pre3_batch_cpu.json --out results/figures/pre3_batch

Engines and their options come from the registry and the engine's own options: ``KEY=VALUE`` sets an option of
every engine named (``NAME.KEY=VALUE`` of one), ``--sweep KEY=V1,V2`` gives one record per value (``--sweep
NAME.KEY=V1,V2`` for one engine's option), ``--threads``
sets each engine's ``threads_option`` (as the runner's ``batch.threads`` does). Datasets come from the dataset
registry (``dataset.KEY=VALUE`` sets a loader option, e.g. ``--dataset custom dataset.grammar=G.lark
dataset.samples=S.txt``). Samples are teacher-forced by the runner's own code (``worker.teacher_force``; batch:
``worker.run_batch`` over the engine and its forks).

``masks``: cold and warm init (a fresh ``cache_dir`` when the engine has one), per-mask and per-commit times, the
same per prefix length (``per_prefix``), outcomes, and the engine's work counters per mask (its ``counters``
attribute, if it has one); ``--counters`` leaves the timings out; ``--phases`` adds a pass after the timed one with
each part of a mask the engine names (``instruction_phases``; engines naming none get no pass) in a timer: µs and
calls per mask and per commit by part, the rest being Python between the calls (:func:`bench_setup.phase_times`).
``init``: cold build (fresh cache) and cache load, each in its own process (peak RSS per phase). ``batch``: B
sequences in lock-step, one ``fill_masks`` call per step, timed (``--processes P``: the sequences sharded over P
processes that step together; ``--interleave``: every option set in one process, stepped together, each step
timed for each set in turn, and every set's ratio to the first with its 95% interval and verdict as
``gcdbench-compare`` gives them, ``ab`` in its records; :mod:`gcdbench.experiments.bench_batch`). ``--keep-masks``
(masks) keeps every mask's time and batch records keep every step's, so that ``gcdbench-compare OLD.json
NEW.json`` compares two bench files (``A1.json,A2.json`` for repeats, e.g. an A/B alternated over time).
``--by-work`` (masks) splits the timed masks by the kind of work each did (the engine's ``work_kind`` of the
counters that moved in it): per kind its share of the masks and of the time, p50, p99 and its masks in the slowest
1%, and the mean counters of a mask in that tail against all (:func:`bench_setup.by_work`).
``instructions``: instructions per mask and per commit under callgrind (:mod:`gcdbench.experiments.bench_count`).
``plot``: batch step latency and throughput against B. Every command prints one JSON line per record; ``--out``
also writes them with command, machine, versions and commit (:func:`gcdbench.experiments.benchfile.write_bench`).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np


from gcdbench.experiments.bench_batch import time_batch, time_batch_interleaved
from gcdbench.experiments.bench_setup import (_compile, _count, _peak_mib, _Steps, by_work, engine_phases, load,
                                              option_sets, parse_overrides, per_prefix, phase_times)
from gcdbench.parsers.base import CompileError


def time_masks(engine: str, opts: dict, name: str, ds, tok, args) -> dict:
    """Init and per-mask times (or, with ``--counters``, only outcomes and work counters) of one dataset."""
    from gcdbench.experiments.rowlayout import WORKER_STEP
    from gcdbench.experiments.worker import teacher_force

    with tempfile.TemporaryDirectory() as tmp:
        e, cold = _compile(engine, opts, ds.grammar, tok, tmp)
        e2, warm = _compile(engine, opts, ds.grammar, tok, tmp)
        e2.close()
    streams = [s.ids(tok) for s in ds.samples]
    if args.max_steps:
        streams = [ids[: args.max_steps] for ids in streams]
    if not args.counters and streams:   # jitted functions load outside the timings (the runner's warm-up)
        teacher_force(e, streams[0], tok.eos_id, tok.vocab_size, _Steps(e))
    steps = _Steps(e)
    outcomes: dict[str, int] = {}
    for ids in streams:
        outcome, _msg, _ = teacher_force(e, ids, tok.eos_id, tok.vocab_size, steps, token_bytes=tok.token_bytes)
        outcomes[outcome.value] = outcomes.get(outcome.value, 0) + 1
    info = e.info()
    kind = e.work_kind
    timed = streams and not args.counters
    split = phase_times(e, engine, streams, tok) if timed and getattr(args, "phases", False) and engine_phases(engine) \
        else None
    e.close()
    cols = WORKER_STEP.columns(steps.rows)   # prefix length in tokens = the step's index
    us = np.array(cols["mask_us"], dtype=np.float64)
    prefix = np.array(cols["step"], dtype=np.int64)
    n = max(1, len(steps.rows))
    rec = {"dataset": name, "dataset_name": ds.name, "tokenizer": tok.name, "engine": engine, "options": opts,
           "samples": len(streams), "steps": len(steps.rows),
           "work_per_mask": {k: round(v / n, 2) for k, v in sorted(steps.work.items())}, "outcomes": outcomes,
           "info": info}
    if not args.counters and us.size:
        pp = per_prefix(prefix, us)
        rec.update({
            "init_cold_s": round(cold, 2), "init_warm_s": round(warm, 3),
            "mask_mean_us": round(float(us.mean()), 1), "mask_median_us": round(float(np.median(us)), 1),
            "mask_p99_us": round(float(np.percentile(us, 99)), 1),
            "mask_p999_us": round(float(np.percentile(us, 99.9)), 1), "mask_max_us": round(float(us.max()), 1),
            "per_prefix_p99_max_us": max(r["p99_us"] for r in pp),
            "per_prefix_p99_over_1ms": sum(r["p99_us"] > 1000 for r in pp), "prefix_lengths": len(pp),
            "commit_mean_us": round(float(np.mean(steps.commits)), 1) if steps.commits else None,
            "per_prefix": pp, "per_sample": per_sample(prefix, us, streams),
        })
        if getattr(args, "keep_masks", False):   # the raw data gcdbench-compare resamples (report/stats.py)
            rec["mask_us_by_sample"] = masks_by_sample(prefix, us)
        if getattr(args, "by_work", False):
            rec["by_work"] = by_work(us, steps.per_mask, kind)
    if split:
        rec["phases"] = split
    print(json.dumps({k: v for k, v in rec.items() if k not in ("per_prefix", "mask_us_by_sample")}, default=str),
          flush=True)
    return rec


def masks_by_sample(prefix: np.ndarray, us: np.ndarray) -> list[list[float]]:
    """Each sample's per-mask µs (0.01 µs) in step order (a sample's masks are the rows from one prefix 0 to the
    next): ``bench masks --keep-masks``, what ``gcdbench-compare`` needs to compare two bench files."""
    starts = np.flatnonzero(prefix == 0).tolist() + [us.size]
    return [[round(float(x), 2) for x in us[a:b]] for a, b in zip(starts, starts[1:]) if b > a]


def ab_ratios(records: list[dict], resamples: int = 2000) -> list[str]:
    """The interleaved A/B (``bench batch --interleave``): every set's per-step times against the first set's, per
    dataset and B, as ``gcdbench-compare`` compares two configs (:func:`gcdbench.experiments.report.stats.ratios`:
    the ratio of each statistic with its 95% interval and verdict, paired step by step and resampled in blocks of
    ``stats.STEP_BLOCK`` steps) -- for the ``fill_masks`` step (``step_us``) and with its commits
    (``step_with_commit_us``). Each set's record but the first gets them as ``ab``; returns one line a comparison."""
    from gcdbench.experiments.report import stats

    lines = []
    groups: dict[tuple, list[dict]] = {}
    for rec in records:
        if rec.get("interleaved") and rec.get("step_us_series"):
            groups.setdefault((rec["dataset"], rec.get("tokenizer", ""), rec["engine"], rec["B"]), []).append(rec)
    for (ds, tok, _, B), recs in groups.items():
        base = recs[0]
        for rec in recs[1:]:
            ab = {"against": stats.bench_label(base), "block_steps": stats.STEP_BLOCK}
            for what, series in (("step_us", lambda r: r["step_us_series"]),
                                 ("step_with_commit_us", lambda r: np.add(r["step_us_series"],
                                                                          r["commit_us_series"]))):
                old, new = (stats.steps_config(f"{ds} B={B}", tok, stats.bench_label(r), [series(r)])
                            for r in (base, rec))
                ab[what] = [{k: (round(v, 4) if isinstance(v, float) else v) for k, v in row.items()
                             if k in ("statistic", "ratio", "ratio_lo", "ratio_hi", "verdict")}
                            for row in stats.ratios(old, new, resamples)]
            rec["ab"] = ab
            by = {r["statistic"]: r for r in ab["step_us"]}
            lines.append(f"A/B {stats.bench_label(rec)} / {ab['against']} on {ds} B={B}, fill_masks step: "
                         + "; ".join(f"{k} {stats.fmt_interval(r['ratio'], r['ratio_lo'], r['ratio_hi'])} "
                                     f"{r['verdict']}" for k, r in by.items()))
    return lines


def per_sample(prefix: np.ndarray, us: np.ndarray, streams: list) -> list[dict]:
    """Each sample's length in tokens, masks, mean and max µs (its masks are the rows from one prefix 0 to the
    next): the growth with sentence length, e.g. on the ambiguous families' lengths."""
    starts = np.flatnonzero(prefix == 0).tolist() + [us.size]
    return [{"tokens": len(ids), "masks": int(b - a), "mean_us": round(float(us[a:b].mean()), 1),
             "max_us": round(float(us[a:b].max()), 1)}
            for ids, a, b in zip(streams, starts, starts[1:]) if b > a]


# --------------------------------------------------------------------------------------------------------------
# init: cold build and cache load, each in its own process
# --------------------------------------------------------------------------------------------------------------
def init_phase(args) -> dict:
    """One phase in this (child) process: compile once into ``--cache-dir``."""
    from gcdbench.parsers.tokenizers import load_tokenizer

    per_engine, dopts = parse_overrides(args.overrides, args.engine)
    engine, opts = args.engine[0], per_engine[args.engine[0]]
    tok = load_tokenizer(args.tokenizer)
    ds = load(args.dataset[0], dopts, args.data_root, 1, args.seed)
    rss_before = _peak_mib()
    e, init_s = _compile(engine, opts, ds.grammar, tok, args.cache_dir)
    return {"dataset": args.dataset[0], "engine": engine, "options": opts, "phase": args.phase,
            "init_s": round(init_s, 3), "info": e.info(), "peak_rss_mib_before_compile": round(rss_before, 1),
            "peak_rss_mib": round(_peak_mib(), 1)}


def init(args) -> list[dict]:
    from gcdbench.parsers.registry import engine_class

    records = []
    for engine in args.engine:
        if "cache_dir" not in engine_class(engine).options():
            raise SystemExit(f"bench init: engine {engine!r} has no cache_dir option (nothing to load from cache)")
        per_engine, _ = parse_overrides(args.overrides, args.engine)
        for name in args.dataset:
            cache = tempfile.mkdtemp(prefix="gcdbench-bench-", dir=args.cache_dir)
            try:
                for ph in ("cold", "cached"):
                    over = [f"{k}={json.dumps(v)}" for k, v in per_engine[engine].items()]
                    over += [o for o in args.overrides if o.startswith("dataset.")]
                    cmd = [sys.executable, "-m", "gcdbench.experiments.bench", "init", "--engine", engine,
                           "--dataset", name, "--tokenizer", args.tokenizer, "--data-root", args.data_root,
                           "--cache-dir", cache, "--phase", ph, *over]
                    res = subprocess.run(cmd, capture_output=True, text=True)
                    if res.returncode:
                        print(res.stderr, file=sys.stderr)
                        raise SystemExit(res.returncode)
                    rec = json.loads(res.stdout.strip().splitlines()[-1])
                    print(json.dumps(rec, default=str), flush=True)
                    records.append(rec)
            finally:
                import shutil

                shutil.rmtree(cache, ignore_errors=True)
    return records


# --------------------------------------------------------------------------------------------------------------
# plot
# --------------------------------------------------------------------------------------------------------------
def _config_label(rec: dict) -> str:
    opts = {**(rec.get("options") or {}), **({"processes": rec["processes"]} if rec.get("processes", 1) > 1 else {})}
    return rec["engine"] + (" (" + ", ".join(f"{k}={v}" for k, v in sorted(opts.items())) + ")" if opts else "")


def plot(paths, out: str) -> list[str]:
    """Per dataset, against B, one line per engine configuration: batch step latency (p50, band to p90; top) and
    throughput, masks per second (B / mean step; bottom), where threads or processes show as scaling. ``paths``:
    one bench file or several (e.g. a processes run and a threads run; the title names their commits)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from gcdbench.experiments.schema import read_bench

    paths = [paths] if isinstance(paths, str) else list(paths)
    docs = [read_bench(p) for p in paths]
    recs = [r for d in docs for r in d["records"] if "B" in r and r.get("step_us")]
    if not recs:
        raise SystemExit(f"bench plot: {', '.join(paths)} hold no batch records (bench batch writes them)")
    datasets = sorted({r["dataset"] for r in recs})
    fig, axes = plt.subplots(2, len(datasets), figsize=(5.5 * len(datasets), 7.5), squeeze=False)
    for k, ds in enumerate(datasets):
        top, bottom = axes[0][k], axes[1][k]
        for label in sorted({_config_label(r) for r in recs if r["dataset"] == ds}):
            rs = sorted((r for r in recs if r["dataset"] == ds and _config_label(r) == label), key=lambda r: r["B"])
            B = [r["B"] for r in rs]
            p50 = [r["step_us"]["p50"] / 1000 for r in rs]
            p90 = [r["step_us"]["p90"] / 1000 for r in rs]
            top.plot(B, p50, marker="o", label=label)
            top.fill_between(B, p50, p90, alpha=0.2)
            bottom.plot(B, [1e6 * r["B"] / r["step_us"]["mean"] for r in rs], marker="o", label=label)
        top.set_ylabel("mask step latency, ms (p50; band to p90)")
        top.set_title(f"{ds}, {recs[0]['tokenizer']}")
        bottom.set_ylabel("masks per second (B / mean step)")
        for ax in (top, bottom):
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_xlabel("batch size B (sequences per step)")
            ax.grid(True, which="both", alpha=0.3)
            ax.legend(fontsize=7)
    m = docs[0].get("machine", {})
    commits = ", ".join(sorted({str(d.get("git_commit", ""))[:10] for d in docs}))
    fig.suptitle(f"{m.get('cpu', '')} ({m.get('cpu_count', '?')} cores), GPU {m.get('gpu')}, commit {commits}",
                 fontsize=8)
    fig.tight_layout()
    from gcdbench.experiments.report.plot import save_figure

    files = save_figure(fig, os.path.dirname(out) or ".", os.path.basename(out))   # 256-colour PNG, PDF
    plt.close(fig)
    return [str(f) for f in files]


# --------------------------------------------------------------------------------------------------------------
# command line
# --------------------------------------------------------------------------------------------------------------
def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name in ("masks", "init", "batch", "instructions"):
        p = sub.add_parser(name)
        p.add_argument("--engine", nargs="+", required=True, help="registered engine name(s)")
        p.add_argument("--dataset", nargs="+", default=["spider"], help="registered dataset name(s)")
        p.add_argument("--n", type=_count, default=10, help="samples per dataset (a count, or all)")
        p.add_argument("--seed", type=int, default=0)
        p.add_argument("--data-root", default=os.environ.get("GCDBENCH_DATA_ROOT", "../shared/data"))
        p.add_argument("--tokenizer", default="qwen3")
        p.add_argument("--threads", type=int, default=None, help="each engine's threads option (its threads_option)")
        p.add_argument("--sweep", nargs="+", default=[],
                       help="KEY=V1,V2 (every engine) or NAME.KEY=V1,V2 (engine NAME): one record per value")
        p.add_argument("--cache-dir", default=None, help="parent folder of fresh artifact caches")
        p.add_argument("--max-steps", type=int, default=0, help="stop each sample after this many tokens (0: all)")
        p.add_argument("--out", default=None, help="also write the records, with machine and commit, to this file")
        p.add_argument("overrides", nargs="*", help="KEY=VALUE, NAME.KEY=VALUE (engine), dataset.KEY=VALUE")
    sub.choices["masks"].add_argument("--counters", action="store_true", help="work counters only (no timing)")
    sub.choices["masks"].add_argument("--keep-masks", action="store_true",
                                      help="keep every mask's time (mask_us_by_sample) in --out: gcdbench-compare "
                                           "compares two such files (each one repeat) with intervals")
    sub.choices["masks"].add_argument("--by-work", action="store_true",
                                      help="where the time goes by the work each mask did (the engine's work_kind "
                                           "of its counters): share of masks and time, p50, p99 and tail per kind")
    sub.choices["masks"].add_argument("--phases", action="store_true",
                                      help="then one more pass timing each part of a mask (instruction_phases)")
    sub.choices["init"].add_argument("--phase", default=None, help=argparse.SUPPRESS)
    b = sub.choices["batch"]
    b.add_argument("--batch", nargs="+", type=int, default=[1, 2, 4, 8, 16, 32, 64])
    b.add_argument("--steps", type=int, default=200, help="timed steps per batch size (full batch)")
    b.add_argument("--warmup", type=int, default=5)
    b.add_argument("--processes", nargs="+", type=int, default=[1],
                   help="shard the B sequences over this many processes, stepping together (one record per count)")
    b.add_argument("--interleave", action="store_true",
                   help="every option set (--sweep) in one process, stepped together, each step timed for each set "
                        "in rotating order: ratios between sets that the machine's drift cannot bend")
    i = sub.choices["instructions"]
    i.add_argument("--phases", action="store_true", help="also per part of a mask (the engine's instruction_phases)")
    i.add_argument("--count-child", default=None, help=argparse.SUPPRESS)
    p = sub.add_parser("plot")
    p.add_argument("file", nargs="+", help="bench files of batch records (drawn together)")
    p.add_argument("--out", required=True, help="output path without extension (.png and .pdf are written)")
    return ap


def main(argv=None) -> None:
    args = _parser().parse_args(argv)
    for listed in ("engine", "dataset"):   # ``--dataset custom dataset.grammar=G``: the list took the overrides
        names = getattr(args, listed, None) or []
        setattr(args, listed, [x for x in names if "=" not in x])
        args.overrides = [x for x in names if "=" in x] + list(getattr(args, "overrides", []) or [])
    if args.cmd == "plot":
        print("\n".join(plot(args.file, args.out)))
        return
    if args.cmd == "init" and args.phase:
        print(json.dumps(init_phase(args), default=str))
        return
    if args.cmd == "instructions":
        from gcdbench.experiments import bench_count

        if args.count_child:
            return bench_count.count_child(args)
        records = bench_count.count_all(args)
    elif args.cmd == "init":
        records = init(args)
    else:
        from gcdbench.parsers.tokenizers import load_tokenizer

        per_engine, dopts = parse_overrides(args.overrides, args.engine)
        sets = {e: option_sets(e, per_engine[e], args.threads, args.sweep) for e in args.engine}
        if getattr(args, "phases", False) and not any(engine_phases(e) for e in args.engine):
            raise SystemExit(f"bench masks --phases: no engine of {args.engine} names instruction_phases (parts of a "
                             "mask); engines that do get the pass, the others none")
        interleave = args.cmd == "batch" and args.interleave
        if interleave and args.processes != [1]:
            raise SystemExit("bench batch --interleave runs every option set in one process: drop --processes")
        tok = load_tokenizer(args.tokenizer)
        run = time_masks if args.cmd == "masks" else time_batch
        records = []
        for name in args.dataset:
            ds = load(name, dopts, args.data_root, args.n, args.seed)
            for engine in args.engine:
                if interleave:
                    got = time_batch_interleaved(engine, sets[engine], name, ds, tok, args)
                    for line in ab_ratios(got):   # the sets' ratios, as gcdbench-compare gives them
                        print(line, file=sys.stderr, flush=True)
                    records.extend(got)
                    continue
                for opts in sets[engine]:
                    try:
                        out = run(engine, opts, name, ds, tok, args)
                    except CompileError as exc:   # a refused grammar is a record, and the other cells still run
                        out = {"dataset": name, "tokenizer": tok.name, "engine": engine, "options": opts,
                               "compile_error": str(exc)}
                        print(json.dumps(out, default=str), flush=True)
                    records.extend(out if isinstance(out, list) else [out])
    if args.out:
        from gcdbench.experiments.benchfile import write_bench

        print(write_bench(args.out, records))


if __name__ == "__main__":
    main()
