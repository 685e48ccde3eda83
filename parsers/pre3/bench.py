"""Pre³'s claim, measured: per-step mask latency of B sequences decoded together, beside XGrammar.

    python -m gcdbench.parsers.pre3.bench run --dataset spider --engines pre3 xgrammar \
        --batch 1 2 4 8 16 32 64 --steps 200 --threads 0 --out results/bench/pre3_batch_cpu.json
    python -m gcdbench.parsers.pre3.bench init --dataset spider spider_spop --out results/bench/pre3_init.json
    python -m gcdbench.parsers.pre3.bench plot results/bench/pre3_batch_cpu.json --out results/figures/pre3_batch_cpu

``run``: B sequences teacher-force the dataset's samples (sequence i takes the next sample when its own
ends, so the batch stays full); one *step* is one batch mask call (``fill_masks`` over the engine and its
forks; XGrammar: ``BatchGrammarMatcher.batch_fill_next_token_bitmask`` over B matchers), timed with
``perf_counter_ns``; then every sequence commits its oracle token (timed apart; the oracle token must be in
its row of the mask, else the step is counted in ``violations``). ``--backend cuda --batch ... 1024`` runs
Pre³'s CUDA kernels. ``init``: cold build (fresh cache) and cache load, each in its own process.
``plot``: step latency against B from a stored file (PNG + PDF). Records go through
``experiments.benchfile.write_bench`` (command, machine, versions, commit).
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

import numpy as np


def _samples(name: str, data_root: str, n: int):
    from gcdbench.datasets.spider import load_spider

    if name not in ("spider", "spider_spop"):
        raise SystemExit(f"dataset must be spider or spider_spop (Pre³ refuses TreeBank), not {name!r}")
    return load_spider(data_root, split="dev", variant="spop" if name == "spider_spop" else "plain", n=n, seed=0)


class _ForkBatch:
    """B sequences of an engine that implements fork() / fill_masks()."""

    def __init__(self, eng, B: int, vocab: int):
        self.eng = eng
        self.seqs = [eng] + [eng.fork() for _ in range(B - 1)]
        self.out = np.zeros((B, (vocab + 31) // 32), dtype=np.int32)

    def fill(self):
        self.eng.fill_masks(self.seqs, self.out)

    def commit(self, i, t) -> bool:
        return self.seqs[i].commit(t)

    def reset(self, i):
        self.seqs[i].reset()


class _XGrammarBatch:
    """B XGrammar matchers over the adapter's compiled grammar, filled by its batch API (used while the
    XGrammar adapter has no fork())."""

    def __init__(self, eng, B: int, vocab: int, threads: int):
        import xgrammar as xgr

        self.matchers = [xgr.GrammarMatcher(eng.compiled, terminate_without_stop_token=False) for _ in range(B)]
        self.batch = xgr.BatchGrammarMatcher(max_threads=threads if threads > 0 else "auto")
        self.buf = xgr.allocate_token_bitmask(B, vocab)
        self.out = self.buf.numpy()

    def fill(self):
        self.batch.batch_fill_next_token_bitmask(self.matchers, self.buf)

    def commit(self, i, t) -> bool:
        return bool(self.matchers[i].accept_token(int(t)))

    def reset(self, i):
        self.matchers[i].reset()


def _engine(name: str, args):
    from gcdbench.parsers.registry import create_engine

    if name == "pre3":
        opts = {"backend": args.backend, "threads": args.threads}
        if args.cache_dir:
            opts["cache_dir"] = args.cache_dir
        return create_engine("pre3", **opts), opts
    if name == "xgrammar":
        opts = {"max_threads": max(1, args.threads or os.cpu_count() or 1)}
        return create_engine("xgrammar", **opts), opts
    return create_engine(name), {}


def _stats(ns: list[int]) -> dict:
    a = np.asarray(ns, dtype=np.float64) / 1000.0
    return {"mean": round(float(a.mean()), 2), "p50": round(float(np.percentile(a, 50)), 2),
            "p90": round(float(np.percentile(a, 90)), 2), "p99": round(float(np.percentile(a, 99)), 2),
            "max": round(float(a.max()), 2)}


def run(args) -> list[dict]:
    from gcdbench.parsers.base import mask_get
    from gcdbench.parsers.tokenizers import load_tokenizer

    tok = load_tokenizer(args.tokenizer)
    records = []
    for ds_name in args.dataset:
        ds = _samples(ds_name, args.data_root, args.n)
        streams_all = [tok.encode(s.text) + [tok.eos_id] for s in ds.samples]
        for ename in args.engines:
            eng, opts = _engine(ename, args)
            t0 = time.perf_counter()
            eng.compile(ds.grammar, tok)
            init_s = time.perf_counter() - t0
            for B in args.batch:
                try:
                    h = _ForkBatch(eng, B, tok.vocab_size)
                except NotImplementedError:
                    if ename != "xgrammar":
                        raise
                    h = _XGrammarBatch(eng, B, tok.vocab_size, args.threads)
                nxt = 0
                streams, pos = [None] * B, [0] * B

                def assign(i):
                    nonlocal nxt
                    streams[i] = streams_all[nxt % len(streams_all)]
                    nxt += 1
                    pos[i] = 0
                    h.reset(i)

                for i in range(B):
                    assign(i)
                fill_ns, commit_ns, violations = [], [], 0
                for step in range(args.warmup + args.steps):
                    s = time.perf_counter_ns()
                    h.fill()
                    dt = time.perf_counter_ns() - s
                    s = time.perf_counter_ns()
                    for i in range(B):
                        t = streams[i][pos[i]]
                        if not mask_get(h.out[i], t):
                            violations += 1
                        ok = h.commit(i, t)
                        pos[i] += 1
                        if not ok or pos[i] == len(streams[i]):
                            assign(i)
                    dc = time.perf_counter_ns() - s
                    if step >= args.warmup:
                        fill_ns.append(dt)
                        commit_ns.append(dc)
                st = _stats(fill_ns)
                rec = {"dataset": ds_name, "tokenizer": args.tokenizer, "engine": ename, "options": opts, "B": B,
                       "steps": args.steps, "step_us": st, "per_sequence_us": round(st["mean"] / B, 2),
                       "commit_us_per_step": _stats(commit_ns), "violations": violations,
                       "init_s": round(init_s, 3), "samples_used": min(nxt, len(streams_all)),
                       "numba_threads": _numba_threads(), "cpu_count": os.cpu_count()}
                if ename == "pre3":
                    rec["cache_hit"] = eng.info().get("cache_hit")
                print(json.dumps(rec), flush=True)
                records.append(rec)
            eng.close()
    return records


def _numba_threads() -> int:
    import numba

    return numba.get_num_threads()


def _peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def init_phase(args) -> dict:
    from gcdbench.datasets.base import load_grammar
    from gcdbench.parsers.pre3.engine import Pre3Engine
    from gcdbench.parsers.tokenizers import load_tokenizer

    tok = load_tokenizer(args.tokenizer)
    eng = Pre3Engine(cache_dir=args.cache_dir, threads=args.threads)
    t0 = time.perf_counter()
    eng.compile(load_grammar(args.dataset[0]), tok)
    return {"dataset": args.dataset[0], "phase": args.phase, "init_s": round(time.perf_counter() - t0, 3),
            "info": eng.info(), "peak_rss_mib": round(_peak_mib(), 1)}


def init(args) -> list[dict]:
    records = []
    for ds_name in args.dataset:
        cache = tempfile.mkdtemp(prefix="pre3-bench-", dir=args.cache_dir)
        for ph in ("cold", "cached"):
            cmd = [sys.executable, "-m", "gcdbench.parsers.pre3.bench", "init", "--dataset", ds_name, "--tokenizer",
                   args.tokenizer, "--cache-dir", cache, "--threads", str(args.threads), "--phase", ph]
            res = subprocess.run(cmd, capture_output=True, text=True)
            if res.returncode:
                print(res.stderr, file=sys.stderr)
                raise SystemExit(res.returncode)
            rec = json.loads(res.stdout.strip().splitlines()[-1])
            print(json.dumps(rec), flush=True)
            records.append(rec)
        import shutil

        shutil.rmtree(cache, ignore_errors=True)
    return records


def plot(path: str, out: str) -> list[str]:
    """Step latency (p50, with p90 whiskers) against batch size, one line per engine, per dataset."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    doc = json.loads(open(path).read())
    recs = doc["records"]
    datasets = sorted({r["dataset"] for r in recs})
    fig, axes = plt.subplots(1, len(datasets), figsize=(5.5 * len(datasets), 4), squeeze=False)
    for ax, ds in zip(axes[0], datasets):
        for eng in sorted({r["engine"] for r in recs if r["dataset"] == ds}):
            rs = sorted((r for r in recs if r["dataset"] == ds and r["engine"] == eng), key=lambda r: r["B"])
            B = [r["B"] for r in rs]
            p50 = [r["step_us"]["p50"] / 1000 for r in rs]
            p90 = [r["step_us"]["p90"] / 1000 for r in rs]
            backend = rs[0]["options"].get("backend", "cpu")
            ax.plot(B, p50, marker="o", label=f"{eng} ({backend})")
            ax.fill_between(B, p50, p90, alpha=0.2)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("batch size B (sequences per step)")
        ax.set_ylabel("mask step latency, ms (p50; band to p90)")
        ax.set_title(f"{ds}, {recs[0]['tokenizer']}")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    m = doc.get("machine", {})
    fig.suptitle(f"{m.get('cpu', '')} ({m.get('cpu_count', '?')} cores), GPU {m.get('gpu')}, "
                 f"commit {str(doc.get('git_commit', ''))[:10]}",
                 fontsize=8)
    fig.tight_layout()
    os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
    files = [f"{out}.png", f"{out}.pdf"]
    for f in files:
        fig.savefig(f, dpi=150)
    return files


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name in ("run", "init"):
        p = sub.add_parser(name)
        p.add_argument("--dataset", nargs="+", default=["spider"])
        p.add_argument("--tokenizer", default="qwen3")
        p.add_argument("--threads", type=int, default=0, help="pre3 numba threads / XGrammar max_threads (0: all)")
        p.add_argument("--cache-dir", default=None)
        p.add_argument("--out", default=None, help="also write the records, with machine and commit, to this file")
    r = sub.choices["run"]
    r.add_argument("--engines", nargs="+", default=["pre3", "xgrammar"])
    r.add_argument("--batch", nargs="+", type=int, default=[1, 2, 4, 8, 16, 32, 64])
    r.add_argument("--steps", type=int, default=200, help="timed steps per batch size")
    r.add_argument("--warmup", type=int, default=5)
    r.add_argument("--n", type=int, default=None, help="samples of the dataset to cycle through (default all)")
    r.add_argument("--backend", default="cpu", help="pre3 backend: cpu | cuda")
    r.add_argument("--data-root", default=os.environ.get("GCDBENCH_DATA_ROOT", "../shared/data"))
    sub.choices["init"].add_argument("--phase", default=None, help=argparse.SUPPRESS)
    p = sub.add_parser("plot")
    p.add_argument("file")
    p.add_argument("--out", required=True, help="output path without extension (.png and .pdf are written)")
    args = ap.parse_args(argv)
    if args.cmd == "plot":
        print("\n".join(plot(args.file, args.out)))
        return
    if args.cmd == "init" and args.phase:
        print(json.dumps(init_phase(args), default=str))
        return
    records = run(args) if args.cmd == "run" else init(args)
    if args.out:
        from gcdbench.experiments.benchfile import write_bench

        print(write_bench(args.out, records))


if __name__ == "__main__":
    main()
