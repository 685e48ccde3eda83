"""What the bench harness (:mod:`gcdbench.experiments.bench`) and its callgrind counter
(:mod:`gcdbench.experiments.bench_count`) share: option overrides, dataset loading, compile, timing statistics."""
from __future__ import annotations

import argparse
import itertools
import resource
import time

import numpy as np


# --------------------------------------------------------------------------------------------------------------
# engines, options, datasets
# --------------------------------------------------------------------------------------------------------------
def _value(text: str):
    """A command-line value as YAML reads it (``1`` int, ``0.5`` float, ``true`` bool, ``null`` None)."""
    import yaml

    return yaml.safe_load(text)


def parse_overrides(items: list[str], engines: list[str]) -> tuple[dict, dict]:
    """``KEY=VALUE`` / ``NAME.KEY=VALUE`` / ``dataset.KEY=VALUE`` -> (engine -> options, dataset options)."""
    per_engine: dict[str, dict] = {e: {} for e in engines}
    dataset: dict = {}
    for item in items:
        key, sep, text = item.partition("=")
        if not sep or not key:
            raise SystemExit(f"bench: {item!r} is not KEY=VALUE (engine option, NAME.KEY=VALUE or dataset.KEY=VALUE)")
        scope, dot, name = key.rpartition(".")
        if scope == "dataset":
            dataset[name] = _value(text)
        elif dot and scope not in per_engine:
            raise SystemExit(f"bench: {item!r} names engine {scope!r}, which is not among --engine {engines}")
        else:
            for e in ([scope] if dot else engines):
                per_engine[e][name] = _value(text)
    return per_engine, dataset


def option_sets(engine: str, overrides: dict, threads: int | None, sweep: list[str]) -> list[dict]:
    """The option sets of one engine: overrides, ``--threads`` on its threads option, one set per sweep value.
    Unknown options fail here, naming the valid ones (the engine's own check)."""
    from gcdbench.parsers.registry import ENGINES, engine_class

    cls = engine_class(engine)
    base = dict(overrides)
    if threads is not None:
        if cls.threads_option is None:
            raise SystemExit(f"bench: --threads: engine {engine!r} has no threads option")
        base.setdefault(cls.threads_option, threads)
    axes = []
    for item in sweep:
        key, _, values = item.partition("=")
        scope, dot, name = key.rpartition(".")
        if dot and scope not in ENGINES:
            raise SystemExit(f"bench: --sweep {item!r}: {scope!r} is not an engine; a sweep is KEY=V1,V2 or "
                             "ENGINE.KEY=V1,V2 (dataset.KEY=VALUE and other overrides go before --sweep: every "
                             "word after --sweep is taken as a sweep)")
        if dot and scope != engine:
            continue   # NAME.KEY=V1,V2 sweeps engine NAME only
        axes.append([(name, _value(v)) for v in values.split(",") if v])
    sets = [{**base, **dict(combo)} for combo in itertools.product(*axes)] if axes else [base]
    for opts in sets:
        cls(**opts)   # validates names and values now, before any dataset loads
    return sets


def load(name: str, dataset_options: dict, data_root: str, n, seed: int):
    """Dataset ``name`` from the registry, ``n`` samples (None: all)."""
    from gcdbench.datasets.registry import load_dataset

    return load_dataset({"name": name, **dataset_options}, data_root, n=n, seed=seed)


def _count(value: str):
    """``--n``: a whole number >= 1, or ``all`` (None)."""
    if value.strip().lower() == "all":
        return None
    n = int(value)
    if n < 1:
        raise argparse.ArgumentTypeError(f"--n {value}: at least 1, or all")
    return n


def _peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _stats(us) -> dict:
    a = np.asarray(us, dtype=np.float64)
    if not a.size:
        return {}
    return {"mean": round(float(a.mean()), 2), "p50": round(float(np.percentile(a, 50)), 2),
            "p90": round(float(np.percentile(a, 90)), 2), "p99": round(float(np.percentile(a, 99)), 2),
            "max": round(float(a.max()), 2)}


# --------------------------------------------------------------------------------------------------------------
# masks: one sequence at a time
# --------------------------------------------------------------------------------------------------------------
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


class _Steps:
    """The ``emit`` of :func:`worker.teacher_force`: keeps each mask's row and commit time, and the engine's
    work counters spent inside each mask (counters read after the previous commit and after the mask): summed in
    ``work``, and mask by mask in ``per_mask`` (the counters that moved)."""

    def __init__(self, engine):
        self.engine, self.rows, self.commits, self.work, self.per_mask = engine, [], [], {}, []
        self.mark = _counters(engine)

    def __call__(self, row) -> None:
        self.rows.append(row)
        now = _counters(self.engine)
        moved = {}
        for key, v in now.items():
            d = v - self.mark.get(key, 0)
            self.work[key] = self.work.get(key, 0) + d
            if d:
                moved[key] = d
        self.per_mask.append(moved)
        self.mark = now

    def commit_time(self, us: float) -> None:
        self.commits.append(us)
        self.mark = _counters(self.engine)


def by_work(us: np.ndarray, per_mask: list[dict], kind, top: float = 99.0) -> dict:
    """Where the time of a cell goes, by the work each mask did: ``per_mask[i]`` holds the counters that moved in
    the mask timed ``us[i]``; ``kind`` names its kind of work (the engine's :meth:`Engine.work_kind`). Per kind:
    its masks, their share of the masks and of the time, p50 and p99, and how many of the masks at or over the
    ``top`` percentile (the tail) are of that kind; then the mean counters a mask in the tail and over all."""
    us = np.asarray(us, dtype=np.float64)
    if us.size != len(per_mask) or not us.size:
        raise ValueError(f"by_work: {us.size} mask times against {len(per_mask)} counter rows")
    cut = float(np.percentile(us, top))
    kinds = [kind(w) for w in per_mask]
    tail = us >= cut
    rows = []
    for k in sorted(set(kinds)):
        sel = np.fromiter((x == k for x in kinds), dtype=bool, count=len(kinds))
        x = us[sel]
        rows.append({"kind": k, "masks": int(sel.sum()), "mask_share": round(float(sel.mean()), 4),
                     "time_share": round(float(x.sum() / us.sum()), 4), "p50_us": round(float(np.median(x)), 2),
                     "p99_us": round(float(np.percentile(x, 99)), 2), "in_tail": int((sel & tail).sum())})
    rows.sort(key=lambda r: -r["time_share"])

    def mean_work(sel) -> dict:
        n = max(1, int(sel.sum()))
        keys = sorted({k for w, s in zip(per_mask, sel) if s for k in w})
        return {k: round(sum(w.get(k, 0) for w, s in zip(per_mask, sel) if s) / n, 2) for k in keys}

    return {"top_percentile": top, "tail_from_us": round(cut, 2), "tail_masks": int(tail.sum()), "kinds": rows,
            "work_per_tail_mask": mean_work(tail), "work_per_mask": mean_work(np.ones(us.size, dtype=bool))}


def _compile(engine: str, opts: dict, grammar, tok, cache_dir: str | None):
    from gcdbench.experiments.worker import settle_heap
    from gcdbench.parsers.registry import create_engine, engine_class

    if cache_dir is not None and "cache_dir" in engine_class(engine).options():
        opts = {**opts, "cache_dir": cache_dir}
    e = create_engine(engine, **opts)
    t0 = time.perf_counter()
    e.compile(grammar, tok)
    init_s = time.perf_counter() - t0
    settle_heap()   # as the runner's worker does: no full collection over the compile's objects inside a timed mask
    return e, init_s


# --------------------------------------------------------------------------------------------------------------
# parts of a mask: the engine's ``instruction_phases`` (callgrind's --phases and the timer split of masks --phases)
# --------------------------------------------------------------------------------------------------------------
def engine_phases(engine: str) -> dict:
    """Part of a mask -> names of the functions whose calls it covers (the engine's ``instruction_phases``)."""
    from gcdbench.parsers.registry import engine_class

    return dict(getattr(engine_class(engine), "instruction_phases", {}) or {})


def patch_phases(engine: str, parts: dict, wrap) -> list:
    """Replace each function that ``parts`` (part -> names) covers by ``wrap(part, fn)``, where the engine's Python
    code looks it up: a plain name in the engine's module, ``sub.name`` in module ``sub`` of the engine's package
    (a name a module lacks is skipped: its part counts 0). Returns the undo list for :func:`unpatch_phases`."""
    import importlib

    from gcdbench.parsers.registry import engine_class

    module = engine_class(engine).__module__
    saved = []
    for part, names in parts.items():
        for name in names:
            sub, dot, attr = name.rpartition(".")
            mod = importlib.import_module(module.rpartition(".")[0] + "." + sub if dot else module)
            if hasattr(mod, attr):
                fn = getattr(mod, attr)
                saved.append((mod, attr, fn))
                setattr(mod, attr, wrap(part, fn))
    return saved


def unpatch_phases(saved: list) -> None:
    for mod, attr, fn in reversed(saved):
        setattr(mod, attr, fn)


class _Where:
    """An engine whose masks and commits say where they are (``where[0]``: ``mask``, ``commit``, None between), so
    that the wrapped functions of :func:`phase_times` count their time in the right column."""

    def __init__(self, engine, where: list):
        self.engine, self.where = engine, where

    def reset(self) -> None:
        self.engine.reset()

    def fill_mask(self, mask) -> None:
        self.where[0] = "mask"
        try:
            self.engine.fill_mask(mask)
        finally:
            self.where[0] = None

    def commit(self, tok: int) -> bool:
        self.where[0] = "commit"
        try:
            return self.engine.commit(tok)
        finally:
            self.where[0] = None


def phase_times(e, engine: str, streams: list, tok) -> dict:
    """Where a mask's (and a commit's) time goes: one more teacher-forced pass over ``streams`` with each part's
    functions (:func:`engine_phases`) wrapped in a timer, apart from the timed pass (a wrapper adds about 0.1 µs
    a call, counted in its part). Per part: µs and calls per mask (per commit); ``python_rest``: the rest of the
    mask's time (Python between the calls)."""
    from gcdbench.experiments.steplog import step_along
    from gcdbench.parsers.base import allocate_mask

    parts = engine_phases(engine)
    clock = time.perf_counter_ns
    where = [None]
    spent: dict = {}

    def wrap(part, fn):
        def timed(*a, **k):
            if where[0] is None:
                return fn(*a, **k)
            t0 = clock()
            try:
                return fn(*a, **k)
            finally:
                key = (where[0], part)
                ns, calls = spent.get(key, (0, 0))
                spent[key] = (ns + clock() - t0, calls + 1)
        return timed

    totals = {"mask": [0, 0], "commit": [0, 0]}

    def on_mask(step, mask, allowed, mask_ns, jit):
        totals["mask"][0] += mask_ns
        totals["mask"][1] += 1

    def on_commit(step, tok, commit_ns):
        totals["commit"][0] += commit_ns
        totals["commit"][1] += 1

    mask = allocate_mask(tok.vocab_size)
    saved = patch_phases(engine, parts, wrap)
    try:
        for ids in streams:
            step_along(_Where(e, where), list(ids) + [tok.eos_id], mask, on_mask, on_commit, raise_errors=True)
    finally:
        where[0] = None
        unpatch_phases(saved)
    out = {}
    for w, (ns, n) in totals.items():
        n = max(1, n)
        by = {p: {"us": round(spent.get((w, p), (0, 0))[0] / n / 1e3, 2),
                  "calls": round(spent.get((w, p), (0, 0))[1] / n, 2)} for p in parts}
        by["python_rest"] = {"us": round(ns / n / 1e3 - sum(v["us"] for v in by.values()), 2), "calls": None}
        out[f"{w}s"] = totals[w][1]
        out[f"us_per_{w}"] = round(ns / n / 1e3, 2)
        out[f"us_per_{w}_by_part"] = by
    return out
