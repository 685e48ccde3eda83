"""Init and per-mask times of engine ``valiant`` on the real datasets (not a unit test).

    python -m gcdbench.experiments.bench_valiant --dataset spider --n 20 [--backend cpu] [--threads 1]
        [--tokenizer qwen3] [--out results/bench/valiant_cpu.json]

Prints one JSON line per dataset: cold init (cache off), warm init (cache on, second load), mean/median/p99
fill_mask time, mean commit time, samples, steps, outcome counts; ``--out`` also writes them to a file.
"""
from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time

import numpy as np


def load(name: str, data_root: str, n: int, seed: int):
    if name in ("spider", "spider_spop"):
        from gcdbench.datasets.spider import load_spider

        return load_spider(data_root, split="dev", variant="spop" if name == "spider_spop" else "plain", n=n, seed=seed)
    if name == "treebank":
        from gcdbench.datasets.treebank import load_treebank

        return load_treebank(data_root, n=n, seed=seed)
    raise SystemExit(f"unknown dataset {name}")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dataset", nargs="+", default=["spider"])
    ap.add_argument("--n", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--data-root", default="/work/shared/data")
    ap.add_argument("--tokenizer", default="qwen3")
    ap.add_argument("--backend", default="cpu")
    ap.add_argument("--threads", type=int, default=1, help="cpu backend: threads sharing one tree search")
    ap.add_argument("--max-steps", type=int, default=0, help="stop each sample after this many tokens (0: all)")
    ap.add_argument("--out", default=None, help="also write the records, with machine and commit, to this JSON file")
    args = ap.parse_args(argv)
    from gcdbench.parsers.base import allocate_mask, mask_get
    from gcdbench.parsers.tokenizers import load_tokenizer
    from gcdbench.parsers.valiant.engine import ValiantEngine

    tok = load_tokenizer(args.tokenizer)
    records = []
    for name in args.dataset:
        ds = load(name, args.data_root, args.n, args.seed)
        with tempfile.TemporaryDirectory() as tmp:
            e = ValiantEngine(backend=args.backend, threads=args.threads, cache_dir=tmp)
            t0 = time.perf_counter()
            e.compile(ds.grammar, tok)
            cold = time.perf_counter() - t0
            e2 = ValiantEngine(backend=args.backend, threads=args.threads, cache_dir=tmp)
            t0 = time.perf_counter()
            e2.compile(ds.grammar, tok)
            warm = time.perf_counter() - t0
        mask = allocate_mask(tok.vocab_size)
        fills, commits, outcomes = [], [], {}
        for s in ds.samples:
            e.reset()
            ids = tok.encode(s.text)
            if args.max_steps:
                ids = ids[: args.max_steps]
            out = "ok"
            for t in ids + [tok.eos_id]:
                t0 = time.perf_counter()
                e.fill_mask(mask)
                fills.append(time.perf_counter() - t0)
                if not mask_get(mask, t):
                    out = "rejected" if t != tok.eos_id else "no_eos"
                    break
                if t == tok.eos_id:
                    break
                t0 = time.perf_counter()
                ok = e.commit(t)
                commits.append(time.perf_counter() - t0)
                if not ok:
                    out = "rejected"
                    break
            outcomes[out] = outcomes.get(out, 0) + 1
        us = np.array(fills) * 1e6
        records.append({
            "dataset": name, "tokenizer": tok.name, "backend": args.backend, "threads": args.threads,
            "samples": len(ds.samples),
            "steps": len(fills), "init_cold_s": round(cold, 2), "init_warm_s": round(warm, 3),
            "mask_mean_us": round(float(us.mean()), 1), "mask_median_us": round(float(np.median(us)), 1),
            "mask_p99_us": round(float(np.percentile(us, 99)), 1), "mask_max_us": round(float(us.max()), 1),
            "commit_mean_us": round(statistics.mean(commits) * 1e6, 1) if commits else None,
            "outcomes": outcomes, "info": e.info(),
        })
        print(json.dumps(records[-1]), flush=True)
    if args.out:
        from gcdbench.experiments.benchfile import write_bench

        write_bench(args.out, records)


if __name__ == "__main__":
    main()
