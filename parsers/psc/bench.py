"""Measure PSC: init (cold / from cache), per-mask latency, peak memory, and agreement with the reference.

    python -m gcdbench.parsers.psc.bench GRAMMAR.lark SAMPLES.txt [--tokenizer qwen3] [--n 50]
        [--cache-dir DIR] [--reference K] [--out results/bench/psc_spider.json]

SAMPLES.txt: one sentence per line (a Spider gold file's ``SQL<TAB>db_id`` lines are cut at the tab).
Each phase (cold build, cache load) runs in its own process so that peak RSS is per phase.
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


def _peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def phase(args) -> dict:
    import numpy as np

    from gcdbench.parsers.base import GrammarSpec, allocate_mask, mask_get
    from gcdbench.parsers.psc.engine import PSCEngine
    from gcdbench.parsers.tokenizers import load_tokenizer

    tok = load_tokenizer(args.tokenizer)
    grammar = GrammarSpec(name=args.grammar, lark=open(args.grammar).read(), path=args.grammar)
    rss_before = _peak_mib()
    eng = PSCEngine(cache_dir=args.cache_dir)
    t0 = time.perf_counter()
    eng.compile(grammar, tok)
    init_s = time.perf_counter() - t0
    out = {"phase": args.phase, "init_s": round(init_s, 3), "info": eng.info(),
           "peak_rss_mib_before_compile": round(rss_before, 1)}
    if args.phase == "cold":
        out["peak_rss_mib"] = round(_peak_mib(), 1)
        return out
    # keep trailing spaces (sp-op samples end in "; "); a Spider gold line is cut at its tab
    lines = [ln.rstrip("\r\n").split("\t")[0] for ln in open(args.samples, encoding="utf-8") if ln.strip()]
    lines = lines[: args.n]
    mask = allocate_mask(tok.vocab_size)
    times, outcomes = [], {"ok": 0, "rejected": 0, "no_eos": 0}
    path_len: dict[int, int] = {}
    rejected = []
    for text in lines:
        eng.reset()
        ids = tok.encode(text)
        ok = True
        for t in ids:
            s = time.perf_counter_ns()
            eng.fill_mask(mask)
            times.append(time.perf_counter_ns() - s)
            n_out = len(eng.mask_path())
            path_len[n_out] = path_len.get(n_out, 0) + 1
            if not mask_get(mask, t) or not eng.commit(t):
                ok = False
                rejected.append((text, tok.decode(ids[: ids.index(t) + 1]).decode("utf-8", "replace")))
                break
        if not ok:
            outcomes["rejected"] += 1
            continue
        s = time.perf_counter_ns()
        eng.fill_mask(mask)
        times.append(time.perf_counter_ns() - s)
        outcomes["ok" if mask_get(mask, tok.eos_id) else "no_eos"] += 1
    t = np.array(times) / 1000.0
    out.update({
        "samples": len(lines), "masks": int(t.size), "outcomes": outcomes,
        "mask_us": {"p50": round(float(np.percentile(t, 50)), 2), "p99": round(float(np.percentile(t, 99)), 2),
                    "mean": round(float(t.mean()), 2), "max": round(float(t.max()), 2)},
        "rejected_examples": rejected[:5],
        "outputs_per_mask": {str(k): v for k, v in sorted(path_len.items())},
        "peak_rss_mib": round(_peak_mib(), 1),
    })
    if args.reference:
        out["reference"] = _compare_reference(eng, tok, grammar, lines[: args.reference])
    return out


def _compare_reference(eng, tok, grammar, lines) -> dict:
    """Exact mask comparison with the scannerless reference on the samples' prefixes."""
    from gcdbench.parsers.base import allocate_mask, mask_to_ids
    from gcdbench.parsers.reference import ReferenceChecker

    ref = ReferenceChecker(grammar)
    mask = allocate_mask(tok.vocab_size)
    steps = equal = psc_extra = 0
    ref_extra_tokens = 0
    examples = []
    for text in lines:
        eng.reset()
        ids = tok.encode(text)
        sid = ref.initial()
        for i in range(len(ids) + 1):
            eng.fill_mask(mask)
            got = set(mask_to_ids(mask, tok.vocab_size).tolist())
            want = set(ref.full_mask_ids(sid, tok).tolist())
            steps += 1
            if got == want:
                equal += 1
            else:
                if got - want:
                    psc_extra += 1
                ref_extra_tokens += len(want - got)
                if len(examples) < 8:
                    examples.append({
                        "prefix": tok.decode(ids[:i]).decode("utf-8", "replace"),
                        "psc_only": [tok.token_bytes[t].decode("utf-8", "replace") for t in sorted(got - want)[:5]],
                        "ref_only": [tok.token_bytes[t].decode("utf-8", "replace") for t in sorted(want - got)[:8]],
                        "n_ref_only": len(want - got)})
            if i < len(ids):
                if not eng.commit(ids[i]):
                    break
                sid = ref.advance(sid, tok.token_bytes[ids[i]])
    return {"steps": steps, "equal": equal, "steps_with_psc_only_tokens": psc_extra,
            "ref_only_tokens_total": ref_extra_tokens, "examples": examples}


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("grammar")
    ap.add_argument("samples")
    ap.add_argument("--tokenizer", default="qwen3")
    ap.add_argument("--n", type=int, default=50)
    ap.add_argument("--cache-dir", default=None, help="parent folder of the (fresh, then removed) artifact cache")
    ap.add_argument("--reference", type=int, default=0, help="compare masks with the reference on K samples")
    ap.add_argument("--phase", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--out", default=None, help="also write both phases, with machine and commit, to this JSON file")
    args = ap.parse_args(argv)
    if args.phase:
        print(json.dumps(phase(args)))
        return
    # a fresh folder every time, so that the "cold" phase really builds (an old artifact is never reused)
    if args.cache_dir:
        os.makedirs(args.cache_dir, exist_ok=True)
    cache = tempfile.mkdtemp(prefix="psc-bench-", dir=args.cache_dir)
    base = [sys.executable, "-m", "gcdbench.parsers.psc.bench", args.grammar, args.samples, "--tokenizer",
            args.tokenizer, "--n", str(args.n), "--cache-dir", cache, "--reference", str(args.reference)]
    records = []
    for ph in ("cold", "cached"):
        res = subprocess.run(base + ["--phase", ph], capture_output=True, text=True)
        if res.returncode:
            print(res.stderr, file=sys.stderr)
            raise SystemExit(res.returncode)
        print(res.stdout.strip())
        records.append(json.loads(res.stdout.strip().splitlines()[-1]))
    if args.out:
        from gcdbench.experiments.benchfile import write_bench

        write_bench(args.out, [{"grammar": args.grammar, "samples_file": args.samples, **r} for r in records])
    import shutil

    shutil.rmtree(cache, ignore_errors=True)


if __name__ == "__main__":
    main()
