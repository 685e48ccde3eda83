"""Intervals on every per-mask figure, ratios between configs, and a stability flag (issue 66).

A *config* here is one engine config on one dataset and tokenizer, over all its repeats (``repeats=R``: the cells
``<label>``, ``<label>__repeat-1``, ...; experiments/repeats.py). Its statistics are those of all its masks pooled:
the mean and the p50, p99 and p99.9 of the per-mask times (masks inside whose timer numba compiled are left out
by the readers, as everywhere in the report).

**Intervals** are 95% percentile-bootstrap intervals from a two-level (hierarchical) resampling: the repeats are
drawn with replacement, and within each drawn repeat its *samples* (not its masks: the masks of one sample share
its prefix, its grammar states and the machine's state of that moment, so they are not independent) are drawn with
replacement; every mask of a drawn sample comes with it. A config run once has the sample level only: its interval
says how sure the figure is over the samples, not over the machine's drift from run to run (repeats do).

**Ratios** NEW/OLD of a statistic get their interval from the same resampling applied to both: when both configs ran
the same samples, one draw of sample counts is used for both (paired by sample: a hard sample is hard for both),
and when both have as many repeats, repeat k of one is drawn with repeat k of the other (paired by repeat: an
interleaved sweep ran them in the same stretch of time). The verdict is ``slower`` when the interval lies above 1,
``faster`` when it lies below 1, and ``~`` when it contains 1 (no significant difference).

**Stability**: a config with two or more repeats is *unstable* when its repeats' medians disagree beyond their own
(sample-level) intervals -- two of them do not overlap -- or when the coefficient of variation of its repeat means
is above :data:`UNSTABLE_CV`; the advice says what to do (more repeats, the machine alone).

Everything is numpy, vectorised over resamples in chunks, with a fixed seed: the same cells give the same
intervals. :func:`read_configs` reads cells through :mod:`.collect`'s readers.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from gcdbench.experiments.report.collect import (Unreadable, engine_class, find_runs, read_cell_file, running_line,
                                                 warn)

#: the statistics given an interval: name -> percentile (None: the mean)
STATS: dict[str, float | None] = {"mean": None, "p50": 50.0, "p99": 99.0, "p99.9": 99.9}
LEVEL = 0.95
RESAMPLES = 2000
SEED = 0
#: repeat means varying more than this (coefficient of variation) make a config unstable
UNSTABLE_CV = 0.10
#: a resampling chunk holds at most this many mask weights (memory: 8 bytes each)
_CHUNK_CELLS = 4_000_000


@dataclass
class Config:
    """The masks of one config (dataset, tokenizer, config label) over its repeats."""

    dataset: str
    tokenizer: str
    config: str
    engine: str = ""
    repeats: list = field(default_factory=list)      # repeat numbers, in the order of the index below
    sample_ids: list = field(default_factory=list)
    us: np.ndarray = field(default_factory=lambda: np.zeros(0))           # mask times
    rep: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))    # index into repeats
    sample: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # index into sample_ids
    paths: list = field(default_factory=list)

    @property
    def key(self) -> tuple[str, str, str]:
        return self.dataset, self.tokenizer, self.config

    @property
    def n_repeats(self) -> int:
        return len(self.repeats)


def read_configs(cells) -> dict[tuple[str, str, str], Config]:
    """The configs of the given cell folders, or of every cell under a results folder (a path): one
    :class:`Config` per (dataset, tokenizer, config label), its repeats joined. Batch-mode cells, cells still
    running, unreadable ones (collect warns about them) and cells without per-mask rows are left out."""
    if isinstance(cells, (str, Path)):
        cells = [d for d in find_runs(Path(cells)) if running_line(d) is None]
    parts: dict[tuple, list] = {}
    kinds: dict[tuple, dict] = {}
    for run_dir in cells:
        try:
            meta = read_cell_file(Path(run_dir), "run.json")
            steps = read_cell_file(Path(run_dir), "steps.parquet")
        except Unreadable:
            continue
        if meta is None or steps is None or steps.empty:
            continue
        ident = meta.get("identity") or {}
        if ident.get("batch"):
            continue
        key = (meta["dataset"], meta["tokenizer"], meta["config"])
        parts.setdefault(key, []).append((int(ident.get("repeat", 0) or 0), steps, str(run_dir), meta["engine"]))
        same = json.dumps({k: v for k, v in ident.items() if k != "repeat"}, sort_keys=True, default=str)
        kinds.setdefault(key, {}).setdefault(same, []).append(str(run_dir))
    out = {}
    for key, got in parts.items():
        if len(kinds[key]) > 1:   # not repeats of one cell: another seed, sample list, grammar or option
            folders = "; ".join(paths[0] for paths in kinds[key].values())
            warn(f"{key[2]} on {key[0]} ({key[1]}): cells of {len(kinds[key])} different identities (seed, samples, "
                 f"grammar or options) are pooled as its repeats ({folders}): keep one kind per results folder")
        got.sort(key=lambda g: g[0])
        ids = sorted({s for _, steps, _, _ in got for s in steps["sample_id"].unique()})
        index = {s: i for i, s in enumerate(ids)}
        us, rep, sample = [], [], []
        for k, (_, steps, _, _) in enumerate(got):
            us.append(steps["mask_us"].to_numpy(dtype=float))
            rep.append(np.full(len(steps), k, dtype=np.int64))
            sample.append(steps["sample_id"].map(index).to_numpy(dtype=np.int64))
        out[key] = Config(*key, engine=got[0][3], repeats=[g[0] for g in got], sample_ids=ids,
                          us=np.concatenate(us), rep=np.concatenate(rep), sample=np.concatenate(sample),
                          paths=[g[2] for g in got])
    return out


def synthetic(dataset: str, config: str, times: list[list[np.ndarray]], tokenizer: str = "synthetic") -> Config:
    """A :class:`Config` from arrays: ``times[r][s]`` the mask times of sample ``s`` in repeat ``r`` (tests and
    notebooks; samples with the same index are the same sample in every repeat)."""
    us, rep, sample = [], [], []
    for r, samples in enumerate(times):
        for s, x in enumerate(samples):
            x = np.asarray(x, dtype=float)
            us.append(x)
            rep.append(np.full(x.size, r, np.int64))
            sample.append(np.full(x.size, s, np.int64))
    n_samples = max(len(s) for s in times)
    return Config(dataset, tokenizer, config, engine=config, repeats=list(range(len(times))),
                  sample_ids=[str(i) for i in range(n_samples)], us=np.concatenate(us), rep=np.concatenate(rep),
                  sample=np.concatenate(sample))


# --------------------------------------------------------------------------------------------------------------
# bench files (experiments/bench.py): the A/B benches compared as result folders are
# --------------------------------------------------------------------------------------------------------------
#: consecutive batch steps resampled together: the lanes of neighbouring steps hold the same samples (and the
#: machine the same state), so single steps are not independent; a block of steps plays the part of a sample
STEP_BLOCK = 20


def bench_label(rec: dict) -> str:
    """A bench record's config label: the engine and its options, e.g. ``valiant (threads=2)`` (a batch record
    sharded over processes also names them), as ``bench plot`` labels its lines."""
    opts = {**(rec.get("options") or {}), **({"processes": rec["processes"]} if rec.get("processes", 1) > 1 else {})}
    return rec["engine"] + (" (" + ", ".join(f"{k}={v}" for k, v in sorted(opts.items())) + ")" if opts else "")


def steps_config(dataset: str, tokenizer: str, config: str, series: list, block: int = STEP_BLOCK) -> Config:
    """A :class:`Config` of batch step times: ``series[r]`` the step times of repeat ``r`` in step order, each block
    of ``block`` consecutive steps one "sample" (block ``i`` of every repeat and of every config so built is the
    same sample: the sets of an interleaved run are paired step by step)."""
    times = [[np.asarray(x[i: i + block], dtype=float) for i in range(0, len(x), block)] for x in series]
    return synthetic(dataset, config, times, tokenizer=tokenizer)


class BenchError(ValueError):
    """A bench file that cannot be compared (the message names the file and what to run instead)."""


def bench_configs(paths, block: int = STEP_BLOCK) -> dict[tuple[str, str, str], Config]:
    """The configs of bench files, each file one repeat (e.g. ``r1_base.json`` and ``r4_base.json`` of an A/B run
    alternated over time), keyed as :func:`read_configs` keys cells: (dataset, tokenizer, :func:`bench_label`).
    ``bench masks --keep-masks`` records give their per-mask times by sample (``mask_us_by_sample``: paired by
    sample where both ran the same samples); ``bench batch`` records their per-step times (``step_us_series``;
    dataset ``<name> B=<B>``), resampled in blocks of ``block`` steps. Records without such times (bench files
    written without them, compile errors) are left out; :class:`BenchError` when no record has any."""
    from gcdbench.experiments.schema import read_bench

    got: dict[tuple, list] = {}
    for path in paths:
        doc = read_bench(path)
        seen: set = set()
        for rec in doc.get("records") or []:
            if rec.get("mask_us_by_sample"):
                key, kind = (rec["dataset"], rec.get("tokenizer", ""), bench_label(rec)), "masks"
                value = [np.asarray(x, dtype=float) for x in rec["mask_us_by_sample"]]
            elif rec.get("step_us_series"):
                key, kind = (f"{rec['dataset']} B={rec['B']}", rec.get("tokenizer", ""), bench_label(rec)), "steps"
                value = np.asarray(rec["step_us_series"], dtype=float)
            else:
                continue
            if key in seen:
                warn(f"{path}: {key[2]} on {key[0]} twice in one file; the first record is used")
                continue
            seen.add(key)
            got.setdefault(key, []).append((kind, value, str(path)))
    if not got:
        raise BenchError(f"no record with per-mask or per-step times in {', '.join(map(str, paths))}: write the bench "
                         "again with `bench masks --keep-masks` (per-mask times), or with `bench batch` at this "
                         "version (per-step times)")
    out = {}
    for key, reps in got.items():
        if reps[0][0] == "steps":
            cfg = steps_config(key[0], key[1], key[2], [v for _, v, _ in reps], block)
        else:
            cfg = synthetic(key[0], key[2], [v for _, v, _ in reps], tokenizer=key[1])
        cfg.engine, cfg.paths = key[2].split(" ", 1)[0], [p for _, _, p in reps]
        out[key] = cfg
    return out


# --------------------------------------------------------------------------------------------------------------
# the resampling
# --------------------------------------------------------------------------------------------------------------
def point(cfg: Config) -> dict[str, float]:
    """The statistics of all masks pooled (the figures Table 1 prints: linear-interpolated percentiles)."""
    x = cfg.us
    if not x.size:
        return {k: float("nan") for k in STATS}
    return {k: float(x.mean()) if q is None else float(np.percentile(x, q)) for k, q in STATS.items()}


def _draw(rng: np.random.Generator, b: int, n_rep: int, n_samples: int) -> np.ndarray:
    """Weights [b, repeats, samples] of ``b`` two-level resamples: repeats drawn with replacement, and within each
    drawn repeat its samples drawn with replacement (multinomial counts)."""
    k = rng.integers(0, n_rep, size=(b, n_rep))
    c = rng.multinomial(n_samples, np.full(n_samples, 1.0 / n_samples), size=(b, n_rep)).astype(float)
    w = np.zeros((b, n_rep, n_samples))
    np.add.at(w, (np.arange(b)[:, None], k), c)
    return w


class _Sorted:
    """A config's masks in ascending order of time, with their repeat and sample indices."""

    def __init__(self, cfg: Config):
        order = np.argsort(cfg.us, kind="stable")
        self.x, self.rep, self.sample = cfg.us[order], cfg.rep[order], cfg.sample[order]

    def stats(self, w: np.ndarray) -> dict[str, np.ndarray]:
        """Each statistic of each resample [b] given its weights [b, repeats, samples] (percentiles: the inverted
        weighted CDF, nearest rank)."""
        wm = w[:, self.rep, self.sample]            # [b, masks]
        tot = wm.sum(axis=1)
        ok = tot > 0
        safe = np.where(ok, tot, 1.0)
        out = {}
        cum = np.cumsum(wm, axis=1)
        for name, q in STATS.items():
            if q is None:
                v = wm @ self.x / safe
            else:
                idx = (cum < (q / 100.0 * tot)[:, None]).sum(axis=1)
                v = self.x[np.minimum(idx, self.x.size - 1)]
            out[name] = np.where(ok, v, np.nan)
        return out


def _chunks(total: int, per: int):
    size = max(1, min(total, _CHUNK_CELLS // max(per, 1)))
    for start in range(0, total, size):
        yield min(size, total - start)


def bootstrap(cfg: Config, resamples: int = RESAMPLES, seed: int = SEED) -> dict[str, np.ndarray]:
    """Each statistic of ``resamples`` two-level resamples of ``cfg`` (module docstring)."""
    rng = np.random.default_rng(seed)
    srt = _Sorted(cfg)
    acc: dict[str, list] = {k: [] for k in STATS}
    for b in _chunks(resamples, cfg.us.size):
        for k, v in srt.stats(_draw(rng, b, cfg.n_repeats, len(cfg.sample_ids))).items():
            acc[k].append(v)
    return {k: np.concatenate(v) for k, v in acc.items()}


#: Student's t quantile 0.975 for 1..30 degrees of freedom (R repeats: R - 1)
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
         2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)


def _interval(values: np.ndarray, level: float = LEVEL, center: float | None = None, n_repeats: int = 1,
              log: bool = True) -> tuple[float, float]:
    """The percentile interval of bootstrap ``values``; with ``n_repeats`` = R >= 2 widened about ``center`` by
    t(R - 1) / z, Student's over the normal quantile (2.78 / 1.96 = 1.42 for 5 repeats, 1.15 for 10): R repeats
    drawn with replacement know the spread between runs from R values only, and a plain percentile interval then
    covers less than 95% (an A/A test of 5 repeats called 10% of equal means different). Widened on the log scale
    (``log``; times and ratios are positive, so a bound never goes below 0), else linearly. Conservative where the
    samples, not the repeats, make the spread."""
    a = (1 - level) / 2 * 100
    values = values[np.isfinite(values)]
    if not values.size:
        return float("nan"), float("nan")
    lo, hi = (float(v) for v in np.percentile(values, [a, 100 - a]))
    if n_repeats >= 2 and center is not None and np.isfinite(center):
        f = _T975[n_repeats - 2] / 1.959964 if n_repeats - 2 < len(_T975) else 1.0
        if log and min(lo, hi, center) > 0:
            c = np.log(center)
            lo, hi = float(np.exp(c + (np.log(lo) - c) * f)), float(np.exp(c + (np.log(hi) - c) * f))
        else:
            lo, hi = center + (lo - center) * f, center + (hi - center) * f
    return lo, hi


def intervals(cfg: Config, resamples: int = RESAMPLES, seed: int = SEED) -> dict[str, tuple[float, float, float]]:
    """statistic -> (point, low, high): the pooled figure and its 95% interval."""
    boot, pt = bootstrap(cfg, resamples, seed), point(cfg)
    return {k: (pt[k], *_within(cfg, _interval(boot[k], center=pt[k], n_repeats=cfg.n_repeats))) for k in STATS}


def _within(cfg: Config, bounds: tuple[float, float]) -> tuple[float, float]:
    """A statistic's interval kept within the config's fastest and slowest mask (widening for few repeats may
    reach past them, where no statistic of these masks can lie)."""
    if not cfg.us.size:
        return bounds
    lo, hi = float(cfg.us.min()), float(cfg.us.max())
    return min(max(bounds[0], lo), hi), max(min(bounds[1], hi), lo)


def paired(old: Config, new: Config) -> tuple[bool, bool]:
    """Whether the two configs are paired by sample (the same sample ids) and by repeat (as many repeats)."""
    return old.sample_ids == new.sample_ids, old.n_repeats == new.n_repeats


def verdict(lo: float, hi: float) -> str:
    """``slower`` (the ratio's interval above 1), ``faster`` (below 1), ``~`` (contains 1, or unknown)."""
    if not (np.isfinite(lo) and np.isfinite(hi)):
        return "~"
    return "slower" if lo > 1 else "faster" if hi < 1 else "~"


def ratios(old: Config, new: Config, resamples: int = RESAMPLES, seed: int = SEED) -> list[dict]:
    """NEW/OLD of each statistic with its 95% interval from one resampling of both (paired where it can be) and the
    verdict; one dict per statistic with both configs' figures and intervals."""
    rng = np.random.default_rng(seed)
    by_sample, by_repeat = paired(old, new)
    so, sn = _Sorted(old), _Sorted(new)
    acc_o: dict[str, list] = {k: [] for k in STATS}
    acc_n: dict[str, list] = {k: [] for k in STATS}
    for b in _chunks(resamples, old.us.size + new.us.size):
        wo = _draw(rng, b, old.n_repeats, len(old.sample_ids))
        if by_sample and by_repeat:
            wn = wo
        elif by_sample:   # the same sample draw, repeats drawn on their own
            wn = _redraw_repeats(rng, wo, new.n_repeats)
        else:
            wn = _draw(rng, b, new.n_repeats, len(new.sample_ids))
        for k, v in so.stats(wo).items():
            acc_o[k].append(v)
        for k, v in sn.stats(wn).items():
            acc_n[k].append(v)
    po, pn = point(old), point(new)
    rows = []
    for k in STATS:
        bo, bn = np.concatenate(acc_o[k]), np.concatenate(acc_n[k])
        with np.errstate(divide="ignore", invalid="ignore"):
            r = bn / bo
        ratio = pn[k] / po[k] if po[k] else float("nan")
        lo, hi = _interval(r, center=ratio, n_repeats=min(old.n_repeats, new.n_repeats))
        (olo, ohi), (nlo, nhi) = (_within(old, _interval(bo, center=po[k], n_repeats=old.n_repeats)),
                                  _within(new, _interval(bn, center=pn[k], n_repeats=new.n_repeats)))
        rows.append({"statistic": k, "old_us": po[k], "old_lo": olo, "old_hi": ohi, "new_us": pn[k], "new_lo": nlo,
                     "new_hi": nhi, "ratio": ratio, "ratio_lo": lo, "ratio_hi": hi, "verdict": verdict(lo, hi),
                     "paired_samples": by_sample, "paired_repeats": by_repeat})
    return rows


def _redraw_repeats(rng: np.random.Generator, w: np.ndarray, n_rep: int) -> np.ndarray:
    """Weights for a config with ``n_rep`` repeats that keep ``w``'s per-sample counts (summed over its repeats
    and spread over repeats drawn with replacement): paired by sample, not by repeat."""
    b, r_old, s = w.shape
    per_sample = w.sum(axis=1) / r_old            # [b, s]: the mean count per drawn repeat
    k = rng.integers(0, n_rep, size=(b, n_rep))
    out = np.zeros((b, n_rep, s))
    np.add.at(out, (np.arange(b)[:, None], k), np.repeat(per_sample[:, None, :], n_rep, axis=1))
    return out


# --------------------------------------------------------------------------------------------------------------
# stability
# --------------------------------------------------------------------------------------------------------------
def stability(cfg: Config, resamples: int = 500, seed: int = SEED) -> dict:
    """``{"repeats", "cv", "medians", "unstable", "why", "advice"}`` of a config; a config run once is never
    flagged (``unstable`` None: not known)."""
    if cfg.n_repeats < 2:
        return {"repeats": cfg.n_repeats, "cv": None, "unstable": None, "why": "", "advice": ""}
    means, meds = [], []
    for r in range(cfg.n_repeats):
        sel = cfg.rep == r
        one = Config(cfg.dataset, cfg.tokenizer, cfg.config, repeats=[cfg.repeats[r]], sample_ids=cfg.sample_ids,
                     us=cfg.us[sel], rep=np.zeros(int(sel.sum()), np.int64), sample=cfg.sample[sel])
        if not one.us.size:
            continue
        means.append(float(one.us.mean()))
        p50 = intervals(one, resamples, seed + r)["p50"]
        meds.append(p50)
    means_a = np.asarray(means)
    cv = float(means_a.std(ddof=1) / means_a.mean()) if means_a.size > 1 and means_a.mean() > 0 else 0.0
    disagree = bool(meds) and max(m[1] for m in meds) > min(m[2] for m in meds)
    why = []
    if disagree:
        lo_med, hi_med = min(m[0] for m in meds), max(m[0] for m in meds)
        why.append(f"its repeats' medians ({lo_med:.3g}-{hi_med:.3g} µs) disagree beyond their intervals")
    if cv > UNSTABLE_CV:
        why.append(f"its repeat means vary by {cv:.0%} (CV; threshold {UNSTABLE_CV:.0%})")
    advice = ("run more repeats (repeats=10, interleave=true) with the machine alone (no other job; the cell lines "
              "warn when it was not)") if why else ""
    return {"repeats": cfg.n_repeats, "cv": cv, "medians": [m[0] for m in meds], "unstable": bool(why),
            "why": "; ".join(why), "advice": advice}


# --------------------------------------------------------------------------------------------------------------
# tables
# --------------------------------------------------------------------------------------------------------------
def fmt_interval(p: float, lo: float, hi: float) -> str:
    """``2.61 [2.55, 2.70]`` (three significant digits; ``43,347 [41,221, 46,016]`` from 1,000 up)."""
    if not np.isfinite(p):
        return "–"

    def num(x: float) -> str:
        return f"{x:,.0f}" if np.isfinite(x) and abs(x) >= 1000 else f"{x:.3g}"
    return f"{num(p)} [{num(lo)}, {num(hi)}]"


def interval_frame(configs: dict, resamples: int = RESAMPLES, seed: int = SEED) -> pd.DataFrame:
    """One row per config: dataset, tokenizer, config, engine, repeats, masks, each statistic with its interval
    (``<stat>_us``, ``<stat>_lo``, ``<stat>_hi``; p99.9 as ``p999``), and the stability flag with its reason and
    advice."""
    rows = []
    for key in sorted(configs):
        cfg = configs[key]
        row = {"dataset": cfg.dataset, "tokenizer": cfg.tokenizer, "config": cfg.config, "engine": cfg.engine,
               "repeats": cfg.n_repeats, "masks": int(cfg.us.size)}
        for k, (p, lo, hi) in intervals(cfg, resamples, seed).items():
            c = k.replace(".", "")   # p99.9 -> p999: a column name itertuples keeps
            row.update({f"{c}_us": p, f"{c}_lo": lo, f"{c}_hi": hi})
        st = stability(cfg, seed=seed)
        row.update(unstable=st["unstable"], cv=st["cv"], why=st["why"], advice=st["advice"])
        rows.append(row)
    return pd.DataFrame(rows)


# --------------------------------------------------------------------------------------------------------------
# Table 1: intervals, the harness's floor, unstable configs
# --------------------------------------------------------------------------------------------------------------
def is_floor(engine: str) -> bool:
    """Whether the engine's class declares itself the harness's floor (``harness_floor``: the null engine)."""
    cls = engine_class(engine)
    return bool(getattr(cls, "harness_floor", False)) if cls is not None else False


#: an engine whose p50 is within this factor of the floor's is measured mostly at the floor
FLOOR_FACTOR = 2.0


def cell_intervals(cells: pd.DataFrame, tokenizer: str, resamples: int = RESAMPLES) -> pd.DataFrame:
    """:func:`interval_frame` of the single-mode cells of one tokenizer (``collect``'s frame, its ``path``
    column), plus ``max_us`` (the pooled maximum); empty when none has per-mask rows."""
    if cells.empty or "path" not in cells:
        return pd.DataFrame()
    configs = read_configs(list(cells.loc[cells["tokenizer"] == tokenizer, "path"]))
    frame = interval_frame(configs, resamples)
    if not frame.empty:
        frame["max_us"] = [float(configs[(r.dataset, r.tokenizer, r.config)].us.max()) for r in frame.itertuples()]
        frame["not_alone"] = [not_alone(configs[(r.dataset, r.tokenizer, r.config)].paths) for r in frame.itertuples()]
    return frame


def not_alone(paths) -> str:
    """How many of a config's cells ran a session while other processes used the machine (run.json sessions'
    ``machine_state``, experiments/provenance.py), with the most they used: ``""`` when none did (or none says)."""
    busy, cores = 0, 0.0
    for path in paths:
        try:
            meta = read_cell_file(Path(path), "run.json") or {}
        except Unreadable:
            continue
        states = [s.get("machine_state") for s in meta.get("sessions") or [] if s.get("machine_state")]
        bad = [st for st in states if not st.get("alone", True)]
        if bad:
            busy += 1
            cores = max(cores, max(float(st.get("others_cores") or 0) for st in bad))
    return (f"{busy} of {len(paths)} run(s); other processes used up to {cores:.2f} cores on average" if busy
            else "")


def floor_lines(frame: pd.DataFrame) -> list[str]:
    """One line per dataset where the null engine ran: the harness's floor, and the engines within
    :data:`FLOOR_FACTOR` of it (their p50)."""
    if frame.empty:
        return []
    out = []
    for (ds, tok), grp in frame.groupby(["dataset", "tokenizer"], sort=True):
        floor_rows = grp["engine"].map(is_floor)
        if not floor_rows.any():
            continue
        f = grp[floor_rows].iloc[0]
        near = [f"{r.config} (p50 {r.p50_us:.3g} µs, {r.p50_us / f.p50_us:.1f}x)"
                for r in grp[~floor_rows].itertuples() if f.p50_us > 0 and r.p50_us <= FLOOR_FACTOR * f.p50_us]
        out.append(f"- harness floor (null engine) on {ds}: p50 {fmt_interval(f.p50_us, f.p50_lo, f.p50_hi)} µs, "
                   f"p99 {fmt_interval(f.p99_us, f.p99_lo, f.p99_hi)} µs on this tokenizer ({tok}); engines within "
                   f"{FLOOR_FACTOR:g}x of it: {', '.join(near) if near else 'none'}")
    return out


def interval_lines(frame: pd.DataFrame) -> list[str]:
    """The intervals of every config as a markdown table, then the unstable configs with their advice."""
    if frame.empty:
        return []
    lines = ["| Method | dataset | runs | masks | mean µs [95%] | p50 | p99 | p99.9 | stable |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in frame.itertuples():
        stable = "–" if r.unstable is None or pd.isna(r.unstable) else ("**unstable**" if r.unstable else "yes")
        runs = f"{r.repeats} repeats" if r.repeats > 1 else "1 run"
        lines.append(f"| {r.config} | {r.dataset} | {runs} | {r.masks} | "
                     + " | ".join(fmt_interval(getattr(r, f"{k}_us"), getattr(r, f"{k}_lo"), getattr(r, f"{k}_hi"))
                                  for k in ("mean", "p50", "p99", "p999")) + f" | {stable} |")
    unstable = frame[frame["unstable"].fillna(False).astype(bool)]
    lines += [""] + [f"- unstable: {r.config} on {r.dataset}: {r.why}; {r.advice}" for r in unstable.itertuples()]
    if "not_alone" in frame:
        lines += [f"- warning: the machine was not alone while {r.config} on {r.dataset} ran ({r.not_alone}): its "
                  "figures may be slow or noisy" for r in frame.itertuples() if r.not_alone]
    return lines


def interval_figure(frame: pd.DataFrame, out_dir: Path, stem: str = "intervals") -> list[Path]:
    """Each config's p50 and p99 per-mask time with its 95% interval, one panel per dataset (log axis): written by
    :func:`.plot.save_figure` as ``<stem>.png`` and ``.pdf``; [] when ``frame`` is empty."""
    from matplotlib.figure import Figure

    from gcdbench.experiments.report.plot import save_figure

    if frame.empty:
        return []
    datasets = sorted(frame["dataset"].unique())
    configs = sorted(frame["config"].unique())
    fig = Figure(figsize=(7, 0.3 * len(configs) * len(datasets) + 1.5))
    axes = fig.subplots(len(datasets), 1, squeeze=False)[:, 0]
    for ax, ds in zip(axes, datasets):
        sub = frame[frame["dataset"] == ds].set_index("config").reindex(configs).dropna(subset=["p50_us"])
        y = np.arange(len(sub))[::-1]
        for k, (stat, color) in enumerate((("p50", "tab:blue"), ("p99", "tab:orange"))):
            x, lo, hi = sub[f"{stat}_us"], sub[f"{stat}_lo"], sub[f"{stat}_hi"]
            ax.errorbar(x, y + (0.15 if k else -0.15), xerr=[(x - lo).clip(lower=0), (hi - x).clip(lower=0)],
                        fmt="o", ms=3, capsize=2, color=color, label=stat)
        names = [f"{c} ({int(r)} runs)" if r > 1 else c for c, r in zip(sub.index, sub["repeats"])]
        ax.set_yticks(y, names, fontsize=7)
        ax.set_xscale("log")
        ax.set_title(f"{ds}: per-mask time, 95% interval", fontsize=8)
        ax.legend(fontsize=7, loc="best")
    axes[-1].set_xlabel("µs per mask")
    fig.tight_layout()
    return save_figure(fig, out_dir, stem)
