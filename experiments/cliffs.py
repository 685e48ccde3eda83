"""Cliffs: how the cost of a mask grows with the prefix on fuzzed grammars (issue 25).

Commands, all reading the grammar fuzzer (``dataset=fuzz``, :mod:`gcdbench.datasets.fuzz`):

* ``bench``: the reference checker and the engines named by ``--engine`` (e.g. Valiant) in one process, on many
  grammars (``--seeds 0:200``), each with sentences of growing length (``--lengths``). Per sentence: the
  reference's cost per byte as it reads the sentence, with the two factors of its documented bound (O(S^2) per
  byte for an Earley column of S items, S <= D (n + 1): :func:`fit_bench`), and each engine's per-mask times along
  the sentence (Qwen3, the whole vocabulary), with ``--audit`` steps per sentence checked against the reference's
  whole-vocabulary mask under the engine's declared profile. One JSON record per
  (grammar, sentence, engine) through :mod:`benchfile` (commit, machine, versions).
* ``collect``: the runner cells of ``experiment=cliffs`` as one row per (cell, sentence) with the cell's commit
  and machine (masks, mean and worst mask, outcome, audit): what is committed in place of every mask.
* ``section``: the report's "Cliffs" section from that file and from the runner cells of ``experiment=cliffs``
  (every engine on a seeded subset of the grammars): per engine the fitted per-token growth exponent of each
  grammar (least squares of log mean mask time against log sentence length over the longer half, as the
  ambiguity figure), its worst mask, and its worst grammars with the smallest reproducer found
  (:func:`shrink`: the shortest prefix, and the fewest grammar lines, that keep the cliff).

    python -m gcdbench.experiments.cliffs bench --engine valiant --seeds 0:200 --out results/cliffs/bench.json
    python -m experiments.run -m experiment=cliffs
    python -m gcdbench.experiments.cliffs collect --runs results/cliffs/runs --out results/cliffs/cells.csv
    python -m gcdbench.experiments.cliffs section --bench results/cliffs/bench.json --runs results/cliffs/cells.csv \
        --reproducers results/cliffs/reproducers.json --out results
"""
from __future__ import annotations

import argparse
import contextlib
import gc
import time
from pathlib import Path

import numpy as np

from gcdbench.experiments.fit import deciles, fit_bench

#: sentence lengths (terminals) of the bench: the issue's five lengths from 10 to 200 tokens
BENCH_LENGTHS = (10, 25, 50, 100, 200)


def _parse_seeds(spec: str) -> list[int]:
    """``0:200`` (a range), ``3,5,9`` or ``7``."""
    if ":" in spec:
        a, b = spec.split(":")
        return list(range(int(a), int(b)))
    return [int(x) for x in spec.split(",") if x.strip()]


# --------------------------------------------------------------------------------------------------------------
# bench: the reference and the named engines, in process
# --------------------------------------------------------------------------------------------------------------
@contextlib.contextmanager
def quiet_gc():
    """Time a loop without the cycle collector's full passes over everything the process held before it (the
    tokenizer, earlier grammars, engines): ``gc.freeze()`` moves those objects out of every collection, the loop's
    own objects are collected as usual. In one process over 200 grammars those passes had made single bytes of the
    reference take 0.1 s (grammar 160: 27 us per byte alone, 225 us in the bench)."""
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def dotted_rules(grammar) -> int:
    """``D``, the dotted rules of ``grammar`` as the reference reads it: an Earley column holds at most ``D`` items
    per origin, so ``D (n + 1)`` after ``n`` bytes."""
    from gcdbench.parsers.grammar import load_ir

    return sum(len(r.expansion) + 1 for r in load_ir(grammar).rules)


def _reference_record(grammar, data: bytes, budget_s: float) -> dict:
    """Read ``data`` byte by byte with a fresh reference checker: total and per-byte times, the largest state,
    and the two factors of the documented bound (a byte costs O(S^2) for a column of S items, S <= D (n + 1)):
    each byte's column size S (the newest Earley node's items) against ``D (n + 1)``, and the per-byte time binned by
    S (bins of powers of two: count and mean us), for :func:`fit_bench`."""
    from gcdbench.parsers.reference import DEAD, ReferenceChecker

    rc = ReferenceChecker(grammar)
    D = dotted_rules(grammar)
    sid = rc.initial()
    t_all = time.perf_counter()
    per = np.zeros(len(data))
    size = np.zeros(len(data), dtype=np.int64)
    worst_state = 0
    for i, b in enumerate(data):
        t0 = time.perf_counter()
        sid = rc.step(sid, b)
        per[i] = time.perf_counter() - t0
        if sid == DEAD:
            return {"outcome": "rejected", "at_byte": i}
        configs = rc._sets[sid]
        worst_state = max(worst_state, len(configs))
        size[i] = len(max((c[0] for c in configs), key=lambda node: node.serial).items)
        if time.perf_counter() - t_all > budget_s:
            return {"outcome": "timeout", "at_byte": i, "bytes_read": i + 1}
    ok = rc.accepts(sid)
    half = per[len(per) // 2:] if len(per) > 1 else per
    live = len(rc.earley._by_seed)     # Earley nodes still referenced (the weak memo drops the others)
    k = np.floor(np.log2(np.maximum(size, 1))).astype(int)
    bins = {int(b): [int((k == b).sum()), float(per[k == b].mean() * 1e6)] for b in np.unique(k)}
    return {"outcome": "ok" if ok else "no_eos", "bytes": len(data), "total_s": float(per.sum()),
            "mean_byte_us": float(per.mean() * 1e6), "last_half_byte_us": float(half.mean() * 1e6),
            "max_byte_us": float(per.max() * 1e6), "cum_deciles_s": deciles(per), "max_state_configs": worst_state,
            "states": len(rc._sets), "live_nodes": live, "dotted_rules": D, "max_column_items": int(size.max()),
            "column_bound_ratio": float((size / (D * (np.arange(len(data)) + 2))).max()),
            "byte_us_by_column": bins}


def _engine_records(engine: str, options: dict, ds, tok, audit: int, budget_s: float, rng) -> list[dict]:
    """``engine`` along every sentence of ``ds``: per-mask times, and ``audit`` steps per sentence against the
    reference's whole-vocabulary mask under the engine's declared profile."""
    from gcdbench.experiments.steplog import step_along
    from gcdbench.parsers.base import CompileError, Outcome, allocate_mask, mask_to_ids
    from gcdbench.parsers.reference import DEAD, ReferenceChecker
    from gcdbench.parsers.registry import create_engine

    eng = create_engine(engine, **options)
    t0 = time.perf_counter()
    try:
        eng.compile(ds.grammar, tok)
    except CompileError as err:
        return [{"engine": engine, "sample_id": s.id, "outcome": "compile_error", "error": str(err)[:300]}
                for s in ds.samples]
    init_s = time.perf_counter() - t0
    rc = ReferenceChecker(ds.grammar, eng.profile())
    mask = allocate_mask(tok.vocab_size)
    for s in ds.samples:   # untimed warm-up over every sentence: a jitted function not compiled (or loaded from
        # numba's cache) yet would take seconds inside one timed mask (5.7 s once, the first merged base of the
        # first grammar in a fresh checkout)
        step_along(eng, s.ids(tok) + [tok.eos_id], mask, raise_errors=True)
    out = []
    for s in ds.samples:
        ids = s.ids(tok)
        check = set(rng.sample(range(len(ids) + 1), min(audit, len(ids) + 1))) | {len(ids)} if audit else set()
        times, agree, audited, ref_s = [], 0, 0, 0.0
        engine_s = audit_s = 0.0      # the budget is the engine's own time; the audit stops at the same budget

        def on_mask(i, mask, allowed, mask_ns, jit):
            nonlocal engine_s, audit_s, audited, agree, ref_s
            times.append(mask_ns / 1e9)
            engine_s += times[-1]
            if i in check and audit_s <= budget_s:
                got = mask_to_ids(mask, tok.vocab_size)
                t_ref = time.perf_counter()
                sid = rc.advance(rc.initial(), tok.decode(ids[:i]))
                want = rc.full_mask_ids(sid, tok) if sid != DEAD else np.zeros(0, np.int64)
                ref_s = max(ref_s, time.perf_counter() - t_ref)
                audit_s += time.perf_counter() - t_ref
                audited += 1
                agree += int(np.array_equal(np.sort(got), np.sort(want)))

        def on_commit(i, t, commit_ns):
            nonlocal engine_s
            engine_s += commit_ns / 1e9
            return (Outcome.TIMEOUT, "") if engine_s > budget_s else None

        outcome = step_along(eng, ids + [tok.eos_id], mask, on_mask, on_commit, raise_errors=True)[0].value
        us = np.array(times) * 1e6
        out.append({"engine": engine, "sample_id": s.id, "outcome": outcome, "tokens": len(ids),
                    "masks": len(times), "init_s": round(init_s, 3), "mean_us": float(us.mean()),
                    "p50_us": float(np.median(us)), "max_us": float(us.max()),
                    "last10_us": float(us[-10:].mean()), "cum_deciles_s": deciles(us / 1e6), "audited": audited,
                    "agree": agree, "audit_s": round(audit_s, 3),
                    "reference_mask_s_max": round(ref_s, 4),
                    "counters": {k: int(v) for k, v in (getattr(eng, "counters", None) or {}).items()}})
    return out


def bench(seeds, engines: dict, lengths=BENCH_LENGTHS, tokenizer="qwen3", audit=2, budget_s=60.0,
          log=print) -> list[dict]:
    """Records of the reference (per byte) and of ``engines`` (name -> options; per mask) on fuzzed grammars
    ``seeds`` (see the module docstring)."""
    import random

    from gcdbench.datasets.registry import load_dataset
    from gcdbench.parsers.tokenizers import load_tokenizer

    tok = load_tokenizer(tokenizer)
    records = []
    for seed in seeds:
        ds = load_dataset({"name": "fuzz", "grammar_seed": seed, "lengths": list(lengths)}, data_root=None)
        head = {"grammar_seed": seed, "dataset": ds.name, "templates": list(ds.meta.get("templates", []))}
        lens = {s.id: len(s.ids(tok)) for s in ds.samples}
        for s in ds.samples:
            with quiet_gc():
                r = _reference_record(ds.grammar, s.text.encode(), budget_s)
            records.append({**head, "engine": "reference", "sample_id": s.id, "tokens": lens[s.id], **r})
        worst = {}
        for name, opts in engines.items():
            with quiet_gc():
                got = _engine_records(name, opts, ds, tok, audit, budget_s, random.Random(seed))
            records += [{**head, **r} for r in got]
            worst[name] = max((r.get("max_us", 0) for r in got), default=0)
        log(f"grammar {seed}: {len(ds.samples)} sentences ({', '.join(map(str, lens.values()))} tokens), worst mask "
            + ", ".join(f"{k} {v:,.0f} us" for k, v in worst.items()))
    return records


# --------------------------------------------------------------------------------------------------------------
# shrink: the smallest reproducer of an engine's cliff
# --------------------------------------------------------------------------------------------------------------
def _mask_times(engine: str, options: dict, lark: str, ids: list[int], tok, budget_s: float) -> list[float] | None:
    """Per-mask seconds along ``ids`` (teacher-forced) for ``engine`` on grammar ``lark``; the list ends with inf
    when the budget ran out first; None when the engine refuses the grammar or a token."""
    from gcdbench.experiments.steplog import step_along
    from gcdbench.parsers.base import GrammarSpec, Outcome, allocate_mask
    from gcdbench.parsers.registry import engine_class

    try:
        eng = engine_class(engine)(**options)
        eng.compile(GrammarSpec(name="shrink", lark=lark), tok)
    except Exception:   # a candidate grammar the engine cannot take is simply not a reproducer
        return None
    mask = allocate_mask(tok.vocab_size)
    out = []
    last = len(ids)
    t_all = time.perf_counter()

    def on_mask(step, mask, allowed, mask_ns, jit):
        out.append(mask_ns / 1e9)
        if step < last and time.perf_counter() - t_all > budget_s:
            return Outcome.TIMEOUT, ""
        return None

    try:   # the last mask's EOS is not asked for: only the times count
        outcome, _ = step_along(eng, list(ids) + [tok.eos_id], mask, on_mask)
    except Exception:   # noqa: BLE001 - its reset failed: not a reproducer either
        return None
    finally:
        close = getattr(eng, "close", None)
        if close is not None:
            close()
    if outcome == Outcome.TIMEOUT:
        return out + [float("inf")]
    return out if outcome in (Outcome.OK, Outcome.NO_EOS) else None


def _cliff_at(times: list[float], factor: float = 10.0, floor_s: float = 1e-3) -> int | None:
    """Where a lasting cliff starts: the first mask index from which every mask takes at least ``factor`` times the
    fastest of the first five masks and at least ``floor_s`` (None: the last mask is below that). A lone slow mask
    (a pause of the machine) earlier on is not a cliff. The fastest, not the median: where every mask after the
    first is slow (XGrammar on fuzz_6: 3 ms at the empty prefix, then about 1 s from the first token on), the
    median of the first five is already past the cliff and no cliff would be found."""
    if not times:
        return None
    limit = max(floor_s, factor * float(np.min(times[:5])))
    k = len(times)
    while k > 0 and times[k - 1] >= limit:
        k -= 1
    return k if k < len(times) else None


def _candidates(lark: str):
    """Grammars with one line, or one alternative of a rule, removed (the start rule's line is kept)."""
    lines = lark.splitlines()
    for i, ln in enumerate(lines):
        if not ln.strip() or ln.lstrip().startswith("start"):
            continue
        yield "\n".join(lines[:i] + lines[i + 1:]) + "\n"
        if ":" in ln and "|" in ln:
            head, body = ln.split(":", 1)
            alts = body.split("|")
            for j in range(len(alts)):
                rest = alts[:j] + alts[j + 1:]
                yield "\n".join(lines[:i] + [head + ":" + "|".join(rest)] + lines[i + 1:]) + "\n"


def shrink(engine: str, options: dict, lark: str, text: str, tok, budget_s: float = 30.0,
           total_s: float = 600.0) -> dict | None:
    """The shortest prefix of ``text`` at whose end ``engine``'s mask is a cliff (:func:`_cliff_at`), then the
    fewest grammar lines and alternatives that keep it (each candidate must still have the prefix viable under the
    reference and the cliff at its end). None when the sentence shows no cliff."""
    from lark import Lark

    from gcdbench.parsers.base import GrammarSpec
    from gcdbench.parsers.reference import ReferenceChecker

    ids = tok.encode(text)
    times = _mask_times(engine, options, lark, ids, tok, budget_s)
    k = _cliff_at(times) if times else None
    if k is None:
        return None
    ids = ids[:k]
    first = float(np.min(times[:5]))
    t_end = time.perf_counter() + total_s
    changed = True
    while changed and time.perf_counter() < t_end:
        changed = False
        for cand in _candidates(lark):
            if time.perf_counter() > t_end:
                break
            try:
                Lark(cand, parser="earley", lexer="dynamic_complete")
                if not ReferenceChecker(GrammarSpec(name="shrink", lark=cand)).is_viable(tok.decode(ids)):
                    continue
            except Exception:
                continue
            got = _mask_times(engine, options, cand, ids, tok, budget_s)
            # the prefix ends where the cliff first crossed the threshold, so a re-run may land just under it:
            # a candidate keeps the cliff when its last mask is past half the threshold
            if got and _cliff_at(got, factor=5.0, floor_s=5e-4) is not None:
                lark, times, changed = cand, got, True
                break
    last = float(times[-1])   # inf: past the budget, stored as null (strict JSON has no Infinity)
    return {"engine": engine, "tokens": len(ids), "mask_ms": last * 1e3 if np.isfinite(last) else None,
            "first_ms": first * 1e3,
            "grammar": lark, "prefix": tok.decode(ids).decode("utf-8", "replace")}


def shrink_worst(runs: Path, per_engine: int = 1, budget_s: float = 30.0, total_s: float = 600.0,
                 log=print) -> list[dict]:
    """:func:`shrink` for each engine's worst cliffs among the runner cells under ``runs``."""
    from gcdbench.datasets.registry import load_dataset
    from gcdbench.experiments.report.cliffs import _cliff, cell_growth, fit_cells
    from gcdbench.experiments.report.collect import read_run
    from gcdbench.parsers.tokenizers import load_tokenizer

    g = cell_growth([runs])
    fit = fit_cells(g)
    worst = fit[fit.apply(_cliff, axis=1)].sort_values(["cut_short", "exponent"], ascending=False)
    tok = load_tokenizer("qwen3")
    out = []
    for r in worst.groupby("engine").head(per_engine).to_dict("records"):
        cell = g[(g["config"] == r["engine"]) & (g["grammar_seed"] == r["grammar_seed"])]
        meta = read_run(Path(cell["path"].iloc[0]))   # a folder cell or a re-stored one
        ds = load_dataset({"name": "fuzz", "grammar_seed": r["grammar_seed"],
                           **{k: v for k, v in meta["identity"]["dataset_options"].items()
                              if k not in ("name", "ambiguous", "grammar_seed") and v is not None}}, data_root=None)
        bad = cell.sort_values(["max_us"], ascending=False)
        sid = (cell[cell["outcome"].isin(["timeout"])]["sample_id"].tolist() or bad["sample_id"].tolist())[0]
        text = next(s.text for s in ds.samples if s.id == sid)
        log(f"shrinking {r['engine']} x fuzz_{r['grammar_seed']} ({sid})")
        got = shrink(meta["engine"], meta.get("engine_options") or {}, ds.grammar.lark, text, tok, budget_s, total_s)
        if got is not None:
            out.append({**got, "engine": r["engine"], "grammar_seed": r["grammar_seed"], "sample_id": sid})
            ms = "past the budget" if got["mask_ms"] is None else f"{got['mask_ms']:.1f} ms"
            log(f"  {got['tokens']} tokens, {ms}, {len(got['grammar'].splitlines())} grammar lines")
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("bench", help="the reference and the named engines on fuzzed grammars, in process")
    b.add_argument("--engine", nargs="+", required=True, help="engines (registry names) timed per mask")
    b.add_argument("--seeds", default="0:200", help="grammar seeds: 0:200, 3,5,9 or 7")
    b.add_argument("--lengths", type=int, nargs="+", default=list(BENCH_LENGTHS))
    b.add_argument("--tokenizer", default="qwen3")
    b.add_argument("--audit", type=int, default=2, help="steps per sentence checked against the reference")
    b.add_argument("--budget-s", type=float, default=60.0, help="the engine's time limit per sentence (its masks and commits); the audit of a sentence stops after as long")
    b.add_argument("--out", required=True)
    k = sub.add_parser("shrink", help="smallest reproducers of each engine's worst cliffs (runner cells)")
    k.add_argument("--runs", default="results/cliffs/runs")
    k.add_argument("--per-engine", type=int, default=1)
    k.add_argument("--budget-s", type=float, default=30.0, help="time limit of one candidate's masks")
    k.add_argument("--total-s", type=float, default=600.0, help="time limit of one shrink")
    k.add_argument("--out", required=True)
    c = sub.add_parser("collect", help="one row per (cell, sentence) of the runner cells, with commit and machine")
    c.add_argument("--runs", default="results/cliffs/runs")
    c.add_argument("--out", required=True, help="a CSV file (what section --runs reads in place of the cells)")
    s = sub.add_parser("section", help="the report's Cliffs section")
    s.add_argument("--bench", required=True)
    s.add_argument("--runs", default="results/cliffs/runs", help="the runner cells, or the CSV of cliffs collect")
    s.add_argument("--reproducers", default=None)
    s.add_argument("--out", default="results")
    args = ap.parse_args(argv)
    if args.cmd == "bench":
        from gcdbench.experiments.benchfile import write_bench

        records = bench(_parse_seeds(args.seeds), {e: {} for e in args.engine}, args.lengths, args.tokenizer,
                        args.audit, args.budget_s, log=lambda m: print(m, flush=True))
        path = write_bench(args.out, records)
        fit = fit_bench(records)
        print(fit.groupby("engine")[["exponent", "worst_us"]].describe().T.to_string())
        print(f"wrote {path}")
    elif args.cmd == "collect":
        from gcdbench.experiments.report.cliffs import cell_growth

        g = cell_growth([Path(args.runs)])
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        g.drop(columns=["path"]).to_csv(args.out, index=False)
        print(f"wrote {args.out}: {len(g)} rows from {g['config'].nunique() if len(g) else 0} engine configs")
    elif args.cmd == "shrink":
        from gcdbench.experiments.benchfile import write_bench

        recs = shrink_worst(Path(args.runs), args.per_engine, args.budget_s, args.total_s,
                            log=lambda m: print(m, flush=True))
        print(f"wrote {write_bench(args.out, recs)}")
    else:
        from gcdbench.experiments.report.cliffs import cliffs_section

        print("\n".join(cliffs_section(Path(args.bench), Path(args.runs), Path(args.out),
                                       Path(args.reproducers) if args.reproducers else None)))


if __name__ == "__main__":
    main()
