"""Init and per-mask times of engine ``valiant`` on the real datasets (not a unit test).

    python -m gcdbench.experiments.bench_valiant --dataset spider --n 20 [--backend cpu] [--threads 1]
        [--tokenizer qwen3] [--out results/bench/valiant_cpu.json]

Prints one JSON line per dataset: cold init (cache off), warm init (cache on, second load), mean/median/p99
fill_mask time, mean commit time, samples, steps, outcome counts; ``--out`` also writes them to a file.

``--instructions`` counts instead of timing (independent of the machine's load, so before/after comparisons can
be made on a busy machine): each dataset runs in a child under ``valgrind --tool=callgrind`` with collection
switched on only inside ``fill_mask`` (then only inside ``commit``), and the record gives instructions per mask
and per commit. Needs valgrind and its headers (``valgrind/callgrind.h``) and a C compiler.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

_TOGGLE_C = """
#include <valgrind/callgrind.h>
void gcd_toggle(void) { CALLGRIND_TOGGLE_COLLECT; }
void gcd_start(void) { CALLGRIND_START_INSTRUMENTATION; }
void gcd_dump(const char *what) { CALLGRIND_DUMP_STATS_AT(what); }
int gcd_on_valgrind(void) { return RUNNING_ON_VALGRIND; }
"""


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
    ap.add_argument("--instructions", action="store_true",
                    help="count instructions per mask and per commit under callgrind instead of timing")
    ap.add_argument("--count-child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.count_child:
        return count_child(args)
    if args.instructions:
        records = [count_dataset(name, args) for name in args.dataset]
        if args.out:
            from gcdbench.experiments.benchfile import write_bench

            write_bench(args.out, records)
        return
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


def _toggle_lib(tmp: str):
    """ctypes handle on callgrind's client requests (compiled from valgrind's header into ``tmp``)."""
    import ctypes

    src, lib = Path(tmp) / "toggle.c", Path(tmp) / "toggle.so"
    src.write_text(_TOGGLE_C)
    subprocess.run(["cc", "-O1", "-shared", "-fPIC", "-o", str(lib), str(src)], check=True)
    h = ctypes.CDLL(str(lib))
    h.gcd_dump.argtypes = [ctypes.c_char_p]
    return h


def count_dataset(name: str, args) -> dict:
    """Run one dataset's samples in a child under callgrind; instructions per mask and per commit."""
    import shutil

    if shutil.which("valgrind") is None:
        raise SystemExit("--instructions needs valgrind (apt-get install valgrind)")
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "cg.out"
        env = {**os.environ, "PYTHONHASHSEED": "0",
               # the JIT's machine code differs under valgrind's CPU model: keep its numba cache apart
               "NUMBA_CACHE_DIR": os.path.expanduser("~/.cache/gcdbench/numba-callgrind")}
        cmd = ["valgrind", "--tool=callgrind", "--instr-atstart=no", "--collect-atstart=no",
               f"--callgrind-out-file={out}", sys.executable, "-m", "gcdbench.experiments.bench_valiant",
               "--count-child", tmp, "--dataset", name, "--n", str(args.n), "--seed", str(args.seed),
               "--data-root", args.data_root, "--tokenizer", args.tokenizer, "--threads", str(args.threads),
               "--max-steps", str(args.max_steps)]
        r = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if r.returncode != 0:
            raise SystemExit(f"callgrind child failed ({r.returncode}):\n{r.stderr[-3000:]}")
        counts = json.loads(r.stdout.strip().splitlines()[-1])
        totals = {}
        for f in sorted(Path(tmp).glob("cg.out*")):
            text = f.read_text(errors="replace")
            what = next((ln.split(":", 1)[1].strip() for ln in text.splitlines() if ln.startswith("desc: Trigger:")), "")
            tot = next((int(ln.split()[1]) for ln in text.splitlines() if ln.startswith(("totals:", "summary:"))), 0)
            for key in ("masks", "commits"):
                if key in what:
                    totals[key] = tot
    rec = {"dataset": name, "tokenizer": args.tokenizer, "backend": "cpu", "threads": args.threads,
           "samples": counts["samples"], "masks": counts["masks"], "commits": counts["commits"],
           "instructions_per_mask": round(totals["masks"] / max(1, counts["masks"])),
           "instructions_per_commit": round(totals["commits"] / max(1, counts["commits"])),
           "instructions_masks_total": totals["masks"], "instructions_commits_total": totals["commits"]}
    print(json.dumps(rec), flush=True)
    return rec


def count_child(args) -> None:
    """Inside callgrind: warm up on the first sample, then collect only inside fill_mask (pass 1) and only
    inside commit (pass 2) over every sample; one dump per pass."""
    from gcdbench.parsers.base import allocate_mask, mask_get
    from gcdbench.parsers.tokenizers import load_tokenizer
    from gcdbench.parsers.valiant.engine import ValiantEngine

    cg = _toggle_lib(args.count_child)
    tok = load_tokenizer(args.tokenizer)
    ds = load(args.dataset[0], args.data_root, args.n, args.seed)
    e = ValiantEngine(threads=args.threads, cache_dir=os.path.join(args.count_child, "cache"))
    e.compile(ds.grammar, tok)
    mask = allocate_mask(tok.vocab_size)
    counts = {"samples": len(ds.samples), "masks": 0, "commits": 0}

    def run(sample, where):
        e.reset()
        ids = tok.encode(sample.text)
        if args.max_steps:
            ids = ids[: args.max_steps]
        for t in ids + [tok.eos_id]:
            if where == "masks":
                cg.gcd_toggle()
            e.fill_mask(mask)
            if where == "masks":
                cg.gcd_toggle()
                counts["masks"] += 1
            if t == tok.eos_id or not mask_get(mask, t):
                break
            if where == "commits":
                cg.gcd_toggle()
            ok = e.commit(t)
            if where == "commits":
                cg.gcd_toggle()
                counts["commits"] += 1
            if not ok:
                break

    for s in ds.samples[:1]:
        run(s, None)                 # loads every jitted function outside the counts
    cg.gcd_start()
    for where in ("masks", "commits"):
        for s in ds.samples:
            run(s, where)
        cg.gcd_dump(where.encode())
    print(json.dumps(counts), flush=True)


if __name__ == "__main__":
    main()
