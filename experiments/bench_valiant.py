"""Init and per-mask times of engine ``valiant`` on the real datasets (not a unit test).

    python -m gcdbench.experiments.bench_valiant --dataset spider spider_spop treebank --n 50 [--threads 1 2]
        [--backend cpu] [--tokenizer qwen3] [--out results/bench/valiant_cpu.json]

Prints one JSON line per (dataset, threads): cold init (cache off), warm init (cache on, second load),
mean/median/p99 fill_mask time, the same per prefix length (``per_prefix``: masks, p50, p99, mean at each
prefix length in tokens), mean commit time, the engine's work counters per mask, samples, steps, outcome counts;
``--out`` also writes them to a file. ``--n all`` runs every sample (TreeBank: all 300).

``--counters`` runs the same samples without timing and reports only the work counters per mask (chart steps,
trie nodes checked, searches...; load-independent and quick).

``--instructions`` counts instead of timing (independent of the machine's load, so before/after comparisons can
be made on a busy machine): each dataset runs in a child under ``valgrind --tool=callgrind`` with collection
switched on only inside ``fill_mask`` (then only inside ``commit``), and the record gives instructions per mask
and per commit. ``--phases`` adds one pass per part of a mask (collection on only inside that part: the tree
search, the chart steps of the mask's base charts, mask assembly, needed-node pruning), so the record also says
where a mask's instructions go (the rest is the Python around them). Needs valgrind and its headers
(``valgrind/callgrind.h``) and a C compiler.
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


def load(name: str, data_root: str, n, seed: int):
    """Dataset ``name`` with ``n`` samples (``None``: all)."""
    if name in ("spider", "spider_spop"):
        from gcdbench.datasets.spider import load_spider

        return load_spider(data_root, split="dev", variant="spop" if name == "spider_spop" else "plain", n=n, seed=seed)
    if name == "treebank":
        from gcdbench.datasets.treebank import load_treebank

        return load_treebank(data_root, n=n, seed=seed)
    raise SystemExit(f"unknown dataset {name}")


def _count(value: str):
    """``--n``: a whole number >= 1, or ``all`` (None)."""
    if value.strip().lower() == "all":
        return None
    n = int(value)
    if n < 1:
        raise argparse.ArgumentTypeError(f"--n {value}: at least 1, or all")
    return n


def main(argv=None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dataset", nargs="+", default=["spider"])
    ap.add_argument("--n", type=_count, default=10, help="samples per dataset (a count, or all)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--data-root", default="/work/shared/data")
    ap.add_argument("--tokenizer", default="qwen3")
    ap.add_argument("--backend", default="cpu")
    ap.add_argument("--threads", type=int, nargs="+", default=[1],
                    help="cpu backend: threads sharing one tree search; several values give one record each")
    ap.add_argument("--max-steps", type=int, default=0, help="stop each sample after this many tokens (0: all)")
    ap.add_argument("--out", default=None, help="also write the records, with machine and commit, to this JSON file")
    ap.add_argument("--counters", action="store_true", help="work counters per mask only (no timing)")
    ap.add_argument("--instructions", action="store_true",
                    help="count instructions per mask and per commit under callgrind instead of timing")
    ap.add_argument("--phases", action="store_true", help="with --instructions: also per part of a mask")
    ap.add_argument("--count-child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.count_child:
        return count_child(args)
    if args.instructions:
        records = [count_dataset(name, threads, args) for name in args.dataset for threads in args.threads]
    else:
        records = [time_dataset(name, threads, args) for name in args.dataset for threads in args.threads]
    if args.out:
        from gcdbench.experiments.benchfile import write_bench

        write_bench(args.out, records)


def per_prefix(prefix: np.ndarray, us: np.ndarray) -> list[dict]:
    """Masks, p50, p99 and mean of ``us`` at each prefix length (tokens committed before the mask)."""
    out = []
    for k in np.unique(prefix).tolist():
        x = us[prefix == k]
        out.append({"prefix_tokens": int(k), "masks": int(x.size), "p50_us": round(float(np.median(x)), 1),
                    "p99_us": round(float(np.percentile(x, 99)), 1), "mean_us": round(float(x.mean()), 1)})
    return out


def _counters(e) -> dict:
    return dict(getattr(e, "counters", {}) or {})


def time_dataset(name: str, threads: int, args) -> dict:
    """Init and per-mask times (or, with ``--counters``, only work counters) of one dataset."""
    from gcdbench.parsers.base import allocate_mask, mask_get
    from gcdbench.parsers.tokenizers import load_tokenizer
    from gcdbench.parsers.valiant.engine import ValiantEngine

    tok = load_tokenizer(args.tokenizer)
    ds = load(name, args.data_root, args.n, args.seed)
    with tempfile.TemporaryDirectory() as tmp:
        e = ValiantEngine(backend=args.backend, threads=threads, cache_dir=tmp)
        t0 = time.perf_counter()
        e.compile(ds.grammar, tok)
        cold = time.perf_counter() - t0
        e2 = ValiantEngine(backend=args.backend, threads=threads, cache_dir=tmp)
        t0 = time.perf_counter()
        e2.compile(ds.grammar, tok)
        warm = time.perf_counter() - t0
    mask = allocate_mask(tok.vocab_size)
    if not args.counters and ds.samples:   # load the jitted functions (numba's disk cache) outside the timings
        e.reset()
        e.fill_mask(mask)
    fills, prefix, commits, outcomes = [], [], [], {}
    work: dict = {}
    for s in ds.samples:
        e.reset()
        ids = tok.encode(s.text)
        if args.max_steps:
            ids = ids[: args.max_steps]
        out = "ok"
        for k, t in enumerate(ids + [tok.eos_id]):
            before = _counters(e)
            t0 = time.perf_counter()
            e.fill_mask(mask)
            fills.append(time.perf_counter() - t0)
            prefix.append(k)
            for key, v in _counters(e).items():
                work[key] = work.get(key, 0) + v - before.get(key, 0)
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
    rec = {"dataset": name, "tokenizer": tok.name, "backend": args.backend, "threads": threads,
           "samples": len(ds.samples), "steps": len(fills),
           "work_per_mask": {k: round(v / max(1, len(fills)), 2) for k, v in sorted(work.items())},
           "outcomes": outcomes, "info": e.info()}
    if not args.counters:
        pp = per_prefix(np.array(prefix), us)
        rec.update({
            "init_cold_s": round(cold, 2), "init_warm_s": round(warm, 3),
            "mask_mean_us": round(float(us.mean()), 1), "mask_median_us": round(float(np.median(us)), 1),
            "mask_p99_us": round(float(np.percentile(us, 99)), 1), "mask_max_us": round(float(us.max()), 1),
            "per_prefix_p99_max_us": max(r["p99_us"] for r in pp),
            "per_prefix_p99_over_1ms": sum(r["p99_us"] > 1000 for r in pp), "prefix_lengths": len(pp),
            "commit_mean_us": round(statistics.mean(commits) * 1e6, 1) if commits else None,
            "per_prefix": pp,
        })
    print(json.dumps({k: v for k, v in rec.items() if k != "per_prefix"}), flush=True)
    return rec


def _toggle_lib(tmp: str):
    """ctypes handle on callgrind's client requests (compiled from valgrind's header into ``tmp``)."""
    import ctypes

    src, lib = Path(tmp) / "toggle.c", Path(tmp) / "toggle.so"
    src.write_text(_TOGGLE_C)
    subprocess.run(["cc", "-O1", "-shared", "-fPIC", "-o", str(lib), str(src)], check=True)
    h = ctypes.CDLL(str(lib))
    h.gcd_dump.argtypes = [ctypes.c_char_p]
    return h


# Parts of a mask counted by --phases: part -> names in the engine module whose calls it covers (a call made
# while fill_mask runs; names the engine does not have count 0, so one bench reads the code before and after
# issue 14). The rest of fill_mask is Python (base charts' bookkeeping, the mask's EOS bit ...).
PHASES = {
    "search": ("tree_search", "tree_search_par"),            # before: the tree search alone
    "assembly": ("fill_tokens",),                            # before: mask assembly alone
    "needed": ("needed_nodes",),                             # before: needed-node pruning alone
    "base_masks": ("mask_base", "mask_base_par"),            # after: the three in one call per base chart
    "base_steps": ("extend",),                               # chart steps of the mask's base charts
}


def count_dataset(name: str, threads: int, args) -> dict:
    """Run one dataset's samples in a child under callgrind; instructions per mask and per commit (and per part
    of a mask with ``--phases``)."""
    import shutil

    if shutil.which("valgrind") is None:
        raise SystemExit("--instructions needs valgrind (apt-get install valgrind)")
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "cg.out"
        env = {**os.environ, "PYTHONHASHSEED": "0",
               # the JIT's machine code differs under valgrind's CPU model: keep its numba cache apart
               "NUMBA_CACHE_DIR": os.path.expanduser("~/.cache/gcdbench/numba-callgrind")}
        n = "all" if args.n is None else str(args.n)
        cmd = ["valgrind", "--tool=callgrind", "--instr-atstart=no", "--collect-atstart=no",
               f"--callgrind-out-file={out}", sys.executable, "-m", "gcdbench.experiments.bench_valiant",
               "--count-child", tmp, "--dataset", name, "--n", n, "--seed", str(args.seed),
               "--data-root", args.data_root, "--tokenizer", args.tokenizer, "--threads", str(threads),
               "--max-steps", str(args.max_steps)] + (["--phases"] if args.phases else [])
        r = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if r.returncode != 0:
            raise SystemExit(f"callgrind child failed ({r.returncode}):\n{r.stderr[-3000:]}")
        counts = json.loads(r.stdout.strip().splitlines()[-1])
        totals = {}
        for f in sorted(Path(tmp).glob("cg.out*")):
            text = f.read_text(errors="replace")
            what = next((ln.split(":", 1)[1].strip() for ln in text.splitlines() if ln.startswith("desc: Trigger:")), "")
            tot = next((int(ln.split()[1]) for ln in text.splitlines() if ln.startswith(("totals:", "summary:"))), 0)
            for key in ("masks", "commits", *PHASES):
                if what.endswith(f": {key}"):
                    totals[key] = tot
    masks = max(1, counts["masks"])
    rec = {"dataset": name, "tokenizer": args.tokenizer, "backend": "cpu", "threads": threads,
           "samples": counts["samples"], "masks": counts["masks"], "commits": counts["commits"],
           "instructions_per_mask": round(totals["masks"] / masks),
           "instructions_per_commit": round(totals["commits"] / max(1, counts["commits"])),
           "instructions_masks_total": totals["masks"], "instructions_commits_total": totals["commits"],
           "work_per_mask": {k: round(v / masks, 2) for k, v in sorted(counts.get("work", {}).items())}}
    if args.phases:
        parts = {k: round(totals.get(k, 0) / masks) for k in PHASES}
        parts["python_rest"] = rec["instructions_per_mask"] - sum(parts.values())
        rec["instructions_per_mask_by_part"] = parts
    print(json.dumps(rec), flush=True)
    return rec


def count_child(args) -> None:
    """Inside callgrind: warm up on the first sample, then collect only inside fill_mask (pass "masks"), only
    inside commit (pass "commits") and, with ``--phases``, only inside each part of a mask; one dump per pass.
    The engine's work counters are summed over the masks of the first pass."""
    import importlib

    from gcdbench.parsers.base import allocate_mask, mask_get
    from gcdbench.parsers.tokenizers import load_tokenizer
    from gcdbench.parsers.valiant.engine import ValiantEngine

    mod = importlib.import_module(ValiantEngine.__module__)
    cg = _toggle_lib(args.count_child)
    tok = load_tokenizer(args.tokenizer)
    ds = load(args.dataset[0], args.data_root, args.n, args.seed)
    e = ValiantEngine(threads=args.threads[0], cache_dir=os.path.join(args.count_child, "cache"))
    e.compile(ds.grammar, tok)
    mask = allocate_mask(tok.vocab_size)
    counts = {"samples": len(ds.samples), "masks": 0, "commits": 0, "work": {}}
    in_mask = [False]

    def collecting(fn):
        def wrapped(*a, **k):
            if not in_mask[0]:
                return fn(*a, **k)
            cg.gcd_toggle()
            try:
                return fn(*a, **k)
            finally:
                cg.gcd_toggle()
        return wrapped

    def run(sample, where):
        e.reset()
        ids = tok.encode(sample.text)
        if args.max_steps:
            ids = ids[: args.max_steps]
        for t in ids + [tok.eos_id]:
            before = _counters(e)
            in_mask[0] = where in PHASES
            if where == "masks":
                cg.gcd_toggle()
            e.fill_mask(mask)
            if where == "masks":
                cg.gcd_toggle()
                counts["masks"] += 1
                for key, v in _counters(e).items():
                    counts["work"][key] = counts["work"].get(key, 0) + v - before.get(key, 0)
            in_mask[0] = False
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
    passes = ["masks", "commits"] + (list(PHASES) if args.phases else [])
    for where in passes:
        saved = {}
        if where in PHASES:
            for attr in PHASES[where]:
                if hasattr(mod, attr):
                    saved[attr] = getattr(mod, attr)
                    setattr(mod, attr, collecting(saved[attr]))
        for s in ds.samples:
            run(s, where)
        for attr, fn in saved.items():
            setattr(mod, attr, fn)
        cg.gcd_dump(where.encode())
    print(json.dumps(counts), flush=True)


if __name__ == "__main__":
    main()
