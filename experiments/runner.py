"""``run(cfg)``: one cell (engine x dataset x tokenizer), teacher-forced in a child process under limits.

The parent owns everything that must survive a failing engine: it sends samples one at a time, enforces the
per-sample / per-run time limits and the memory limit, turns a hang, an out-of-memory or a dead child into a
typed outcome of that sample, restarts the child for the rest, audits masks against the reference checker, and
writes each finished sample to ``parts/`` at once. What a run guarantees (README "What a run guarantees"):

* **Identity.** A cell folder belongs to one cell: engine and its options, grammar content, dataset and its
  options, tokenizer, seed and the exact sample list (``run.json`` ``identity``). A re-run with the same identity
  resumes; any other is refused with a message naming what differs and how to start fresh (``fresh=true``).
* **Resume.** Finished samples are kept, with the provenance (commit, machine, session) they were run with;
  samples never attempted (``skipped``) are run; ``compile_error`` samples are compiled again unless the failure
  was deterministic (the engine refused the grammar with ``CompileError``, same engine version).
* **Lock.** One run per cell folder at a time (``.lock``, released by the kernel if the run dies); a second run
  stops at once with one line naming the holder.
* **Files.** ``run.json`` describes exactly the rows in the folder's parquet files; every file is replaced
  atomically, so a killed run leaves either the old or the new version, and its finished samples in ``parts/``.

Batch mode (``batch.size`` = B >= 1, :func:`_run_batch`): the samples run B at a time in lock-step in one worker,
one ``fill_masks`` call per step; a cell's identity then includes the batch size (README "Batch mode").
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import os
import platform
import random
import re
import shutil
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path

import numpy as np
import pandas as pd
import psutil
from omegaconf import OmegaConf

from gcdbench.experiments.worker import (BATCH_ROW_FIELDS, BATCH_STEP_FIELDS, DETERMINISTIC_COMPILE_FAILURES,
                                         ROW_FIELDS, SlotJournal, StepLog)
from gcdbench.parsers.base import Outcome
from gcdbench.parsers.limited import Event, LimitedProcess, exit_description

STEP_COLUMNS = [
    "engine", "config", "dataset", "tokenizer", "sample_id", "step", "prefix_tokens", "prefix_bytes",
    "mask_us", "commit_us", "n_allowed", "oracle_allowed", "outcome",
]
SAMPLE_COLUMNS = [
    "engine", "config", "dataset", "tokenizer", "sample_id", "outcome", "message", "wall_s", "n_steps",
    "peak_rss_mb", "session", "git_commit", "git_dirty", "host",
]
MAX_MESSAGE = 2000
#: the reference's audited masks, shared by every cell of one out_dir (``experiments/audit.py``, MaskCache)
REFERENCE_CACHE = ".cache/reference_masks"
RESULT_FILES = ("run.json", "samples.parquet", "steps.parquet", "audit.parquet", "batch_steps.parquet")
#: columns of batch_steps.parquet (batch mode): which worker run of which session, then BATCH_STEP_FIELDS
BATCH_STEP_COLUMNS = ["session", "run", *BATCH_STEP_FIELDS]


class CellError(ValueError):
    """The run cannot use this cell folder; the message says why and what to do (printed as one line)."""


class CellBusy(CellError):
    """Another run holds the cell folder's lock."""


class CellMismatch(CellError):
    """The folder holds results of a run with another identity."""


class CellDamaged(CellError):
    """A stored file of the cell cannot be read."""


# --------------------------------------------------------------------------------------------------------------
# provenance
# --------------------------------------------------------------------------------------------------------------
def engine_label(name: str, opts: dict, defaults: dict) -> str:
    """Folder-safe label: the engine name plus its non-default options (``valiant__backend-cuda_workers-8``);
    characters that are not safe in one folder name (``/`` of a path, spaces) become ``-``."""
    diff = [f"{k}-{v}" for k, v in sorted(opts.items()) if defaults.get(k) != v]
    label = name + ("__" + "_".join(diff) if diff else "")
    return re.sub(r"[^A-Za-z0-9_.,=+-]+", "-", label)


def machine_info() -> dict:
    info = {"hostname": platform.node(), "platform": platform.platform(), "python": sys.version.split()[0],
            "cpu_count": os.cpu_count(), "memory_gb": round(psutil.virtual_memory().total / 2**30, 1)}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                info["cpu"] = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=10)
        info["gpu"] = out.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        info["gpu"] = None
    return info


def package_versions() -> dict:
    """Installed versions of gcdbench and every package it depends on (its own metadata, extras left out)."""
    import re

    names = ["gcdbench"]
    try:
        names += [re.split(r"[ ;<>=!~\[]", r, maxsplit=1)[0] for r in metadata.requires("gcdbench") or []
                  if "extra ==" not in r]
    except metadata.PackageNotFoundError:
        pass
    out = {}
    for p in names:
        try:
            out[p] = metadata.version(p)
        except metadata.PackageNotFoundError:
            pass
    return out


def git_state(ignore: tuple[str, ...] = (), repo: Path | None = None) -> dict:
    """``{"commit": sha or None, "dirty": tracked files differ from the commit (None: not a git checkout)}``.
    ``ignore``: folders (relative to the repository) whose changes do not count, e.g. a generator's own output
    folder, which its earlier outputs in the same session have already changed. ``repo``: this project's."""
    repo = repo or Path(__file__).resolve().parents[1]
    try:
        out = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
        if out.returncode != 0:
            return {"commit": None, "dirty": None}
        dirty = subprocess.run(["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=no", "--", ".",
                                *(f":(exclude){p}" for p in ignore)],
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return {"commit": out.stdout.strip(), "dirty": bool(dirty)}
    except (OSError, subprocess.SubprocessError):
        return {"commit": None, "dirty": None}


#: folders whose changes never make a run's tree dirty: result files are data, not code (a bench that rewrites a
#: committed result file before a sweep starts must not mark the sweep's cells as run on a dirty tree)
RESULT_FOLDERS = ("results",)


def repo_folders(*paths) -> tuple[str, ...]:
    """Those of ``paths`` that lie in this repository, relative to it (for ``git_state(ignore=...)``): a
    program's own output folder, e.g. a run's ``out_dir`` (result files are not code, and ``fresh=true`` deletes
    committed ones before the run starts) or the sampled-sequence generator's folder."""
    repo = Path(__file__).resolve().parents[1]
    out = []
    for p in paths:
        try:
            out.append(Path(p).resolve().relative_to(repo).as_posix())
        except ValueError:
            pass
    return tuple(out)


def git_commit(ignore: tuple[str, ...] = ()) -> str | None:
    """The commit as one string, ``<sha>-dirty`` for a dirty tree (benchmark files); ``ignore`` as ``git_state``."""
    g = git_state(ignore)
    return None if g["commit"] is None else g["commit"] + ("-dirty" if g["dirty"] else "")


# --------------------------------------------------------------------------------------------------------------
# the cell folder: identity, lock, stored rows
# --------------------------------------------------------------------------------------------------------------
def _plain(x):
    """JSON-normal form (what run.json stores), so stored and new identities compare equal."""
    return json.loads(json.dumps(x, sort_keys=True, default=str))


def cell_identity(engine: str, label: str, options: dict, dataset, dataset_options: dict, tokenizer, seed: int,
                  batch_size: int = 0) -> dict:
    """What makes two runs the same cell (see the module docstring); ``options`` with their defaults filled in.
    A batch-mode cell (``batch_size`` >= 1) also has ``batch`` (mode and size); a single-mode identity has none."""
    digest = hashlib.sha256()
    for s in dataset.samples:   # a stored token sequence (sampled datasets) is what is replayed: it is hashed too
        ids = "" if s.token_ids is None else ",".join(map(str, s.token_ids))
        digest.update(f"{s.id}\0{s.text}\0{ids}\0".encode())
    ident = {
        "engine": engine, "config": label, "engine_options": options, "grammar_key": dataset.grammar.key(),
        "dataset": dataset.name, "dataset_options": dataset_options, "tokenizer": tokenizer.name,
        "tokenizer_key": tokenizer.key(), "seed": seed, "n_samples": len(dataset.samples),
        "samples_digest": digest.hexdigest()[:16], "sample_ids": [s.id for s in dataset.samples],
    }
    if batch_size:
        ident["batch"] = {"mode": "batch", "size": int(batch_size)}
    return _plain(ident)


def _identity_diff(old: dict, new: dict, option_defaults: dict | None = None) -> list[str]:
    """What differs between a stored identity and this run's. An engine option the stored identity lacks and
    this run has at its default (``option_defaults``) is no difference: the option was added to the engine later,
    and its default keeps the behaviour the stored rows were run with."""
    from gcdbench.parsers.registry import current_options   # options renamed since: read under today's names
    if isinstance(old.get("engine_options"), dict) and old.get("engine"):
        old = {**old, "engine_options": current_options(old["engine"], old["engine_options"])}
    out = []
    if option_defaults and isinstance(old.get("engine_options"), dict) and isinstance(new.get("engine_options"), dict):
        added = {k for k, v in new["engine_options"].items()
                 if k not in old["engine_options"] and k in option_defaults and _plain(option_defaults[k]) == v}
        if added:
            new = {**new, "engine_options": {k: v for k, v in new["engine_options"].items() if k not in added}}
    for k in new:
        if k in ("sample_ids", "n_samples"):
            continue
        if k == "samples_digest":
            if old.get(k) != new[k]:
                o, n = old.get("sample_ids") or [], new["sample_ids"]
                same = "same ids, other texts" if o == n else f"{len(o)} stored ({', '.join(o[:3])}"\
                    f"{', ...' if len(o) > 3 else ''}), {len(n)} now ({', '.join(n[:3])}{', ...' if len(n) > 3 else ''})"
                out.append(f"sample list: {same}")
            continue
        if old.get(k) != new[k]:
            if isinstance(new[k], dict) and isinstance(old.get(k), dict):
                keys = sorted(set(old[k]) | set(new[k]))
                parts = [f"{kk}={old[k].get(kk)!r} -> {new[k].get(kk)!r}" for kk in keys if old[k].get(kk) != new[k].get(kk)]
                out.append(f"{k}: " + ", ".join(parts))
            else:
                out.append(f"{k}: {old.get(k)!r} -> {new[k]!r}")
    return out


class CellLock:
    """An exclusive, non-blocking ``flock`` on ``<cell>/.lock`` for the whole run; the kernel releases it when
    the process ends, however it ends. The holder writes who it is into the file for the refusal message."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.path = folder / ".lock"
        self.fh = None

    def __enter__(self):
        fh = open(self.path, "a+")
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fh.seek(0)
            holder = fh.read().strip() or "another process"
            fh.close()
            raise CellBusy(f"cell folder {self.folder} is in use by another run ({holder}); wait for it to end, "
                           "or run into another out_dir=") from None
        fh.seek(0)
        fh.truncate()
        fh.write(f"pid {os.getpid()} on {platform.node()}, since {time.strftime('%Y-%m-%d %H:%M:%S')}\n")
        fh.flush()
        self.fh = fh
        return self

    def __exit__(self, *exc):
        try:
            self.fh.truncate(0)
        except OSError:
            pass
        fcntl.flock(self.fh, fcntl.LOCK_UN)
        self.fh.close()


def _write_atomic(path: Path, write) -> None:
    """Write through a temporary file in the same folder, then rename: readers see the old or the new file."""
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    write(tmp)
    os.replace(tmp, path)


def _write_json(path: Path, obj) -> None:
    _write_atomic(path, lambda p: p.write_text(json.dumps(obj, indent=1, default=str)))


def _load_json(path: Path):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _clear(out: Path) -> None:
    """``fresh=true``: remove the cell's stored results (the lock file stays)."""
    for name in RESULT_FILES:
        (out / name).unlink(missing_ok=True)
    shutil.rmtree(out / "parts", ignore_errors=True)


class Cell:
    """A cell folder opened for one run: its identity checked, its stored rows and pending parts read."""

    def __init__(self, out: Path, identity: dict, option_defaults: dict | None = None):
        self.out = out
        self.parts = out / "parts"
        self.identity = identity
        meta = None
        if (out / "run.json").exists():
            meta = _load_json(out / "run.json")
            if meta is None:
                raise CellDamaged(f"cannot read {out / 'run.json'}; re-run with fresh=true to start the cell over "
                                  "(its stored results are deleted), or move the folder away")
        elif any((out / n).exists() for n in RESULT_FILES) or self.parts.exists():
            raise CellDamaged(f"{out} holds result files but no run.json; re-run with fresh=true to start the cell "
                              "over (its stored results are deleted), or move the folder away")
        if meta is not None:
            old = meta.get("identity")
            if old is None:
                raise CellMismatch(f"{out} was written by an older gcdbench, without a cell identity, so a resume "
                                   "cannot be checked; re-run with fresh=true to start the cell over (its stored "
                                   "results are deleted), or run into another out_dir=")
            diff = _identity_diff(old, identity, option_defaults)
            if diff:
                raise CellMismatch(
                    f"{out} holds results of another cell ({'; '.join(diff)}). A resume must repeat the same engine "
                    "options, grammar, dataset and options, tokenizer, seed and sample list. Re-run with fresh=true "
                    "to start this cell over (its stored results are deleted), or run into another out_dir=")
        self.meta = meta or {}
        self.frames = {}
        for name in ("samples", "steps", "audit", "batch_steps"):
            f = out / f"{name}.parquet"
            if f.exists():
                try:
                    self.frames[name] = pd.read_parquet(f)
                except Exception as err:   # noqa: BLE001 - pyarrow raises several types for a damaged file
                    raise CellDamaged(f"cannot read {f} ({type(err).__name__}: {str(err)[:200]}); the cell's stored "
                                      "rows are damaged. Re-run with fresh=true to start the cell over (its stored "
                                      "results are deleted), or move the folder away") from None
        self.parts.mkdir(parents=True, exist_ok=True)

    # -- what is stored --------------------------------------------------------------------------------------
    def sessions(self) -> list[dict]:
        """Every session: merged ones from run.json, pending ones from ``parts/`` (the newer record wins)."""
        by_id = {s["id"]: s for s in self.meta.get("sessions", [])}
        for p in self.parts.glob("*.session.json"):
            s = _load_json(p)
            if s is not None:
                by_id[s["id"]] = s
        return [by_id[k] for k in sorted(by_id)]

    def sample_parts(self) -> dict[str, dict]:
        out = {}
        for p in sorted(self.parts.glob("*.sample.json")):
            rec = _load_json(p)
            if rec is None:   # parts are written atomically; an unreadable one is not a finished sample
                p.unlink()
                continue
            out[rec["sample_id"]] = rec
        return out

    def stored_outcomes(self) -> dict[str, tuple[str, int | None]]:
        """sample_id -> (outcome, session) for every sample with a stored row (parts override merged rows)."""
        got = {}
        df = self.frames.get("samples")
        if df is not None:
            ses = df["session"] if "session" in df else pd.Series([None] * len(df))
            got = {sid: (oc, None if pd.isna(s) else int(s)) for sid, oc, s in zip(df["sample_id"], df["outcome"], ses)}
        for sid, rec in self.sample_parts().items():
            got[sid] = (rec["outcome"], rec.get("session"))
        return got

    def reusable_compile_error(self, engine_version: str) -> str | None:
        """The stored compile error's message when it can stand for this run: every compile_error row comes from
        a deterministic failure (see ``DETERMINISTIC_COMPILE_FAILURES``) of the same engine version."""
        rows = {s for oc, s in self.stored_outcomes().values() if oc == Outcome.COMPILE_ERROR.value}
        if not rows:
            return None
        sessions = {s["id"]: s for s in self.sessions()}
        msgs = set()
        for sid in rows:
            fail = (sessions.get(sid) or {}).get("compile_failure") or {}
            if fail.get("kind") not in DETERMINISTIC_COMPILE_FAILURES or fail.get("engine_version") != engine_version:
                return None
            msgs.add(fail["message"])
        return msgs.pop() if len(msgs) == 1 else None

    def next_session_id(self) -> int:
        return 1 + max((s["id"] for s in self.sessions()), default=0)

    # -- writing -----------------------------------------------------------------------------------------------
    def save_session(self, session: dict) -> None:
        _write_json(self.parts / f"{session['id']}.session.json", session)

    def write_part(self, session: dict, sample_id: str, outcome: Outcome, message: str, rows, wall_s: float,
                   peak_rss_mb=None, fields=ROW_FIELDS, extra: dict | None = None) -> None:
        """One finished sample (rows in ``fields`` order; batch mode: BATCH_ROW_FIELDS); ``extra`` keys are kept
        in the part for the audit (batch mode: ``single_check``)."""
        cols = {k: [r[i] for r in rows] for i, k in enumerate(fields)} if rows else None
        if len(message) > MAX_MESSAGE:   # engines may quote the whole grammar in an error
            message = message[:MAX_MESSAGE] + f" ... [{len(message) - MAX_MESSAGE} more characters]"
        rec = {"sample_id": sample_id, "outcome": outcome.value, "message": message, "wall_s": wall_s,
               "n_steps": len(rows) if rows else 0, "peak_rss_mb": peak_rss_mb, "rows": cols, "audits": None,
               "session": session["id"], "git_commit": session["git_commit"], "git_dirty": session["git_dirty"],
               "host": session["machine"].get("hostname"), **(extra or {})}
        _write_json(self.parts / f"{sample_id}.sample.json", rec)
        session["samples_run"] = session.get("samples_run", 0) + 1

    def write_batch_steps(self, session: dict, run: int, rows: list) -> None:
        """The batch steps of one worker run (batch mode), rows in BATCH_STEP_FIELDS order."""
        if rows:
            _write_json(self.parts / f"{session['id']}-{run}.bsteps.json",
                        {"session": session["id"], "run": run, "rows": [list(r) for r in rows]})

    def _batch_step_parts(self) -> list[tuple[Path, pd.DataFrame]]:
        out = []
        for p in sorted(self.parts.glob("*.bsteps.json")):
            rec = _load_json(p)
            if rec is None:
                p.unlink()
                continue
            df = pd.DataFrame(rec["rows"], columns=list(BATCH_STEP_FIELDS))
            df.insert(0, "run", rec["run"])
            df.insert(0, "session", rec["session"])
            out.append((p, df))
        return out

    def merge(self, dataset, tokenizer, current: int | None = None) -> dict:
        """Fold ``parts/`` into the parquet files, then write run.json from what the files hold; returns it.
        Sessions still marked running, other than ``current``, were killed: they become ``interrupted``."""
        key = {k: self.identity[k] for k in ("engine", "config", "dataset", "tokenizer")}
        parts = self.sample_parts()
        samples, steps, audits = [], [], []
        for sid, rec in parts.items():
            samples.append({**key, **{k: rec.get(k) for k in SAMPLE_COLUMNS if k not in key}})
            if rec["rows"]:
                df = pd.DataFrame(rec["rows"])
                df["sample_id"] = sid
                df["outcome"] = rec["outcome"]
                steps.append(df)
            for a in rec["audits"] or []:
                audits.append({**key, "sample_id": sid, **a})

        def combine(name, frames):
            prev = self.frames.get(name)
            if prev is not None:
                frames = [prev[~prev["sample_id"].isin(set(parts))]] + frames
            frames = [f for f in frames if len(f)]
            return pd.concat(frames, ignore_index=True) if frames else None

        step_df = combine("steps", steps)
        if step_df is not None:
            for k, v in key.items():
                step_df[k] = v
            step_df = step_df[STEP_COLUMNS + [c for c in BATCH_ROW_FIELDS if c not in STEP_COLUMNS and c in step_df]]
        sample_df = combine("samples", [pd.DataFrame(samples)] if samples else [])
        if sample_df is not None:
            sample_df = sample_df.reindex(columns=SAMPLE_COLUMNS)
            order = {s.id: i for i, s in enumerate(dataset.samples)}
            sample_df = sample_df.sort_values("sample_id", key=lambda c: c.map(order)).reset_index(drop=True)
        audit_df = combine("audit", [pd.DataFrame(audits)] if audits else [])
        bparts = self._batch_step_parts()
        bstep_df = self.frames.get("batch_steps")
        if bparts:
            new = pd.concat([df for _, df in bparts], ignore_index=True)
            if bstep_df is not None:   # a part replaces the stored rows of the same worker run
                runs = set(zip(new["session"], new["run"]))
                bstep_df = bstep_df[[(s, r) not in runs for s, r in zip(bstep_df["session"], bstep_df["run"])]]
                new = pd.concat([bstep_df, new], ignore_index=True)
            bstep_df = new.sort_values(["session", "run", "batch_step"]).reset_index(drop=True)[BATCH_STEP_COLUMNS]
            for col in ("session", "run", "batch_step", "size", "live", "fallback"):
                bstep_df[col] = bstep_df[col].astype("int64")
        for name, df in (("steps", step_df), ("samples", sample_df), ("audit", audit_df),
                         ("batch_steps", bstep_df)):
            path = self.out / f"{name}.parquet"
            if df is None:
                path.unlink(missing_ok=True)
            else:
                # zstd: about a quarter smaller than the default snappy on these tables (the committed results)
                _write_atomic(path, lambda p, df=df: df.to_parquet(p, index=False, compression="zstd"))
            self.frames[name] = df
        sessions = self.sessions()
        for s in sessions:
            if s.get("status") == "running" and s["id"] != current:
                s["status"] = "interrupted"
        meta = build_meta(self.identity, dataset, tokenizer, sessions, sample_df, audit_df, bstep_df)
        _write_json(self.out / "run.json", meta)
        self.meta = meta
        for p in [*self.parts.glob("*.sample.json"), *self.parts.glob("*.session.json"), *(p for p, _ in bparts)]:
            p.unlink()
        try:
            self.parts.rmdir()
        except OSError:
            pass
        return meta


def build_meta(identity: dict, dataset, tokenizer, sessions: list[dict], samples: pd.DataFrame | None,
               audit: pd.DataFrame | None, batch_steps: pd.DataFrame | None = None) -> dict:
    """run.json: the identity, every session, and summaries computed from the stored rows only."""
    meta = {"identity": identity, **{k: identity[k] for k in ("engine", "config", "engine_options", "dataset",
                                                               "tokenizer", "grammar_key", "seed", "n_samples")},
            "grammar": dataset.grammar.name, "dataset_meta": dataset.meta, "vocab_size": tokenizer.vocab_size,
            "sessions": sessions}
    if identity.get("batch"):
        threads = [s["batch"].get("threads") for s in sessions if s.get("batch")]
        meta["batch"] = {**identity["batch"], "threads": threads[-1] if threads else None,
                         "threads_option": next((s["batch"].get("threads_option") for s in reversed(sessions)
                                                 if s.get("batch")), None),
                         "steps": 0 if batch_steps is None else int(len(batch_steps)),
                         "full_steps": 0 if batch_steps is None else
                         int((batch_steps["live"] == batch_steps["size"]).sum())}
    inits = [i for s in sessions for i in s.get("inits", [])]
    meta["inits"] = inits
    if inits:
        meta["init_s"] = inits[0]["init_s"]
        meta["ttfm_s"] = inits[0].get("ttfm_s")
        meta["peak_rss_compile_mb"] = max(i.get("peak_rss_compile_mb") or 0 for i in inits)
    latest = sessions[-1] if sessions else {}
    for k in ("limits", "versions", "machine"):
        if k in latest:
            meta[k] = latest[k]
    audit_errors = [s["audit_error"] for s in sessions if s.get("audit_error")]
    if audit_errors:
        meta["audit_error"] = audit_errors[-1]
    skipped = {k: v for s in sessions for k, v in (s.get("audit_skipped") or {}).items()}
    if skipped:   # samples whose audit exceeded the cell's limits: {sample id: reason}
        meta["audit_skipped"] = skipped
    if samples is None or samples.empty:
        meta.update(n_rows=0, outcomes={})
        return meta
    meta["n_rows"] = int(len(samples))
    meta["outcomes"] = {str(k): int(v) for k, v in samples["outcome"].value_counts().items()}
    ce = samples[samples["outcome"] == Outcome.COMPILE_ERROR.value]
    if len(ce):
        last = ce.loc[ce["session"].fillna(-1).idxmax()]
        meta["compile_error"] = last["message"]
        fail = next((s.get("compile_failure") for s in sessions if s["id"] == last["session"]), None) or {}
        meta["compile_error_kind"] = fail.get("kind")
    n_skipped = int((samples["outcome"] == Outcome.SKIPPED.value).sum())
    if n_skipped:
        meta["aborted"] = f"run time limit reached ({n_skipped} samples skipped)"
    peaks = pd.to_numeric(samples["peak_rss_mb"], errors="coerce")
    if peaks.notna().any():
        meta["peak_rss_samples_mb"] = float(peaks.max())
    methods = {s.get("peak_rss_method") for s in sessions if s.get("peak_rss_method")}
    if methods:
        meta["peak_rss_method"] = ", ".join(sorted(methods))
    commits = sorted({c for c in samples["git_commit"].dropna()})
    hosts = sorted({h for h in samples["host"].dropna()})
    dirty = bool(samples["git_dirty"].fillna(False).astype(bool).any())
    meta["provenance"] = {"commits": commits, "dirty": dirty, "hosts": hosts}
    meta["git_commit"] = (commits[0] + ("-dirty" if dirty else "")) if len(commits) == 1 else None
    if audit is not None and len(audit):
        meta["audit"] = {"steps": int(len(audit)),
                         **{c: int(audit[c].sum()) for c in audit.columns if c.startswith("agree")
                            and audit[c].dtype == bool}}
    return meta


# --------------------------------------------------------------------------------------------------------------
# the worker process, parent side
# --------------------------------------------------------------------------------------------------------------
class _Worker:
    """The engine's child process (``gcdbench.experiments.worker``) and its StepLog (batch mode: the log of batch
    steps, and the SlotJournal of the sequences in flight)."""

    def __init__(self, engine: str, opts: dict, grammar, tokenizer_name: str, warmup_ids, on_progress,
                 batch: dict | None = None):
        self.journal = None
        if batch:
            self.log = StepLog.create(width=len(BATCH_STEP_FIELDS))
            self.journal = SlotJournal.create(int(batch["size"]), int(batch["capacity"]))
            extra = ({"size": int(batch["size"]), "journal": self.journal.path,
                      "warmup_budget_s": float(batch["warmup_budget_s"])},)
        else:
            self.log = StepLog.create()
            extra = ()
        self.proc = LimitedProcess([sys.executable, "-m", "gcdbench.experiments.worker"], channel=True)
        self.proc.send(("init", engine, opts, grammar, tokenizer_name, warmup_ids, self.log.path, *extra))
        self.on_progress = on_progress
        self.last_progress = None
        self.rows: list | None = None
        self.bsteps: list = []
        self.on_seq = None

    def _on_message(self, msg) -> bool:
        kind = msg[0]
        if kind == "attached":   # both sides map the StepLog (and the journal): their files can go
            self.log.unlink()
            if self.journal is not None:
                self.journal.unlink()
            return True
        if kind == "bsteps":   # the batch-step log was full
            self.bsteps.extend(msg[1])
            return True
        if kind == "seq" and self.on_seq is not None:   # a sequence of the batch ended
            self.on_seq(msg[1])
            return True
        if kind == "progress":
            self.last_progress = msg[1]
            self.on_progress(msg[1])
            return True
        if kind == "steps":   # a sample longer than the StepLog: a full batch
            if self.rows is not None:
                self.rows.extend(msg[1])
            return True
        return False

    def wait(self, timeout_s: float, memory_mb: float):
        return self.proc.wait(timeout_s, memory_mb, self._on_message)

    def run_sample(self, sample_id, ids, audit_at, timeout_s: float, memory_mb: float):
        """(event, rows): the ``result`` message or what ended the wait, and every step the sample finished."""
        self.log.reset()
        self.rows = []
        if not self.proc.send(("sample", sample_id, ids, audit_at)):
            ev = self.proc.wait(1.0)
        else:
            ev = self.wait(timeout_s, memory_mb)
        rows, self.rows = self.rows, None
        if ev.kind != "message":
            self.proc.kill()
            self.proc.drain(lambda m: rows.extend(m[1]) if m[0] == "steps" else None)
        rows.extend(self.log.rows())
        return ev, rows

    def run_batch(self, work: list, sample_timeout_s: float, run_left_s: float, memory_mb: float, on_seq):
        """Send the whole queue and wait for ``batch_done``. ``on_seq(result)`` gets each sequence as it ends.

        The parent also watches for a hang: when no batch step finishes within ``sample_timeout_s`` (a step that
        long already exceeds the limit of every sequence in it), or the worker is still running
        ``sample_timeout_s`` after the run's time is up, it kills the worker. Returns (event, in_flight, steps):
        the ``batch_done`` message or what ended the wait (``timeout`` here = a hang); the rows of the sequences
        still in flight (work index -> rows; empty unless the worker died or was killed); the batch-step rows."""
        self.on_seq = on_seq
        self.bsteps = []
        self.log.reset()
        seen, last_change = -1, time.monotonic()
        hard_end = time.monotonic() + run_left_s + sample_timeout_s
        if not self.proc.send(("batch", work, sample_timeout_s, run_left_s)):
            ev = self.proc.wait(1.0)
        else:
            while True:
                now = time.monotonic()
                ev = self.wait(max(0.05, min(1.0, hard_end - now)), memory_mb)
                if ev.kind != "timeout":
                    break
                done = len(self.bsteps) + self.log.count
                now = time.monotonic()
                if done != seen:
                    seen, last_change = done, now
                if now - last_change > sample_timeout_s:
                    ev = Event("timeout", "stall")
                    break
                if now >= hard_end:
                    ev = Event("timeout", "run")
                    break
        in_flight: dict = {}
        if not (ev.kind == "message" and ev.value[0] == "batch_done"):
            self.proc.kill()
            self.proc.drain(lambda m: self._on_message(m))
            in_flight = self.journal.in_flight()
        self.on_seq = None
        steps, self.bsteps = self.bsteps + self.log.raw_rows(), []
        self.log.reset()
        return ev, in_flight, steps

    def kill(self) -> None:
        self.proc.kill()
        self.proc.close()
        self.log.close(unlink=True)
        if self.journal is not None:
            self.journal.close(unlink=True)

    def stop(self) -> None:
        self.proc.send(("stop",))
        self.proc.close(grace_s=10)
        self.log.close(unlink=True)
        if self.journal is not None:
            self.journal.close(unlink=True)


def _compile_failure(ev, worker: _Worker, limits) -> dict:
    """``{"message", "kind"}`` of a compile that did not end in ``compiled``."""
    if ev.kind == "message" and ev.value[0] == "compile_error":
        return dict(ev.value[1])
    last = f" (last progress: {worker.last_progress})" if worker.last_progress else ""
    if ev.kind == "timeout":
        return {"message": f"compile did not finish within {limits.compile_timeout_s:g} s "
                           f"(limits.compile_timeout_s){last}", "kind": "timeout"}
    if ev.kind == "oom":
        return {"message": f"compile exceeded the memory limit of {limits.memory_mb:g} MB (limits.memory_mb; "
                           f"{ev.value:.0f} MB resident){last}", "kind": "oom"}
    if ev.kind == "exit":
        return {"message": f"worker died while compiling ({exit_description(ev.value)}){last}", "kind": "died"}
    return {"message": f"unexpected message from the worker while compiling: {ev.value!r:.200}", "kind": "crash"}


def audited_samples(sample_ids: list[str], n) -> set[str]:
    """The samples whose steps are audited: all (``n`` None), or the first ``n`` in the cell's order
    (``audit.samples``; the order is already a seeded choice). Batch sweeps audit a few sequences per cell, since
    the reference's full-vocabulary walk costs more than the masks it checks; the first ones run even in a cell
    cut short by its time limit."""
    return set(sample_ids if n is None else sample_ids[: int(n)])


def audit_steps_for(sample_id: str, n_steps: int, per_sample: int, seed: int) -> list[int]:
    if per_sample <= 0:
        return []
    rng = random.Random(f"{seed}:{sample_id}")
    steps = list(range(n_steps + 1))   # the last step is the EOS step
    return sorted(rng.sample(steps, min(per_sample, len(steps))))


# --------------------------------------------------------------------------------------------------------------
# one run
# --------------------------------------------------------------------------------------------------------------
def run(cfg) -> Path:
    """Run (or resume) one cell and return its folder (``<out_dir>/<dataset>/<tokenizer>/<engine label>``).

    Raises ConfigError / DataError / CellError / ValueError with a one-line reason before any work when the
    configuration, the data or the cell folder cannot be used."""
    from gcdbench.datasets.registry import load_dataset
    from gcdbench.experiments.config import validate
    from gcdbench.parsers.registry import engine_class
    from gcdbench.parsers.tokenizers import load_tokenizer

    n = validate(cfg)
    engine_name = cfg.engine.name
    opts = {k: v for k, v in OmegaConf.to_container(cfg.engine, resolve=True).items() if k not in ("name", "label")}
    cls = engine_class(engine_name)
    batch_size = int(cfg.batch.size)
    preset = dict(opts)
    if batch_size and cfg.batch.threads is not None and getattr(cls, "threads_option", None):
        opts[cls.threads_option] = int(cfg.batch.threads)   # the engine's own option: in its label and identity
    probe = cls(**opts)   # unknown options and values outside an option's choices fail here, before any work
    # a named preset keeps its name, plus any option batch.threads changed from the preset's own value
    label = (engine_label(cfg.engine.label, opts, preset) if cfg.engine.get("label")
             else engine_label(engine_name, opts, cls.options()))
    tokenizer = load_tokenizer(cfg.tokenizer.name)
    dataset = load_dataset(cfg.dataset, data_root=cfg.data_root, n=n, seed=cfg.seed)
    if n is not None and len(dataset.samples) < n:   # never a silent truncation (issue 27, item 10)
        print(f"samples={n}: dataset {dataset.name} has {len(dataset.samples)} samples; running those "
              f"{len(dataset.samples)} (samples=all says the same)", file=sys.stderr)
    identity = cell_identity(engine_name, label, probe.opts, dataset, OmegaConf.to_container(cfg.dataset, resolve=True),
                             tokenizer, int(cfg.seed), batch_size)
    out = Path(cfg.out_dir) / dataset.name / tokenizer.name / (label + (f"__batch-{batch_size}" if batch_size else ""))
    if (batch_size and cfg.batch.threads not in (None, 1) and not getattr(cls, "threads_option", None)
            and not cfg.fresh and (out / "run.json").exists()):
        # no thread option: batch.threads=T names the threads=1 cell, already run; resuming it here would give its
        # samples cut by the run time limit a second limit (a sweep over batch.threads runs each cell once)
        print(f"{label}: no thread option, so batch.threads={cfg.batch.threads} is the cell {out} already run "
              "(not run again; batch.threads=1 resumes it)", file=sys.stderr)
        return out
    out.mkdir(parents=True, exist_ok=True)
    with CellLock(out):
        for stale in out.glob(".*.tmp*"):   # a write killed before its rename (no other writer holds the lock)
            stale.unlink(missing_ok=True)
        if cfg.fresh:
            _clear(out)
        cell = Cell(out, identity, cls.options())
        if not (out / "run.json").exists():
            cell.merge(dataset, tokenizer)   # the identity is on disk before any row is
            cell.parts.mkdir(exist_ok=True)
        current = _run_cell(cfg, cell, dataset, tokenizer, engine_name, opts, probe)
        cell.merge(dataset, tokenizer, current)
    return out


def _run_cell(cfg, cell: Cell, dataset, tokenizer, engine_name: str, opts: dict, probe) -> int | None:
    """Run the samples the folder does not hold yet; returns this session's id (None: nothing was left to do)."""
    version = probe.version()
    reuse = cell.reusable_compile_error(version)
    stored = cell.stored_outcomes()
    keep = {sid for sid, (oc, _) in stored.items()
            if Outcome(oc).attempted or (oc == Outcome.COMPILE_ERROR.value and reuse)}
    todo = [s for s in dataset.samples if s.id not in keep]
    label = cell.identity["config"]
    if not todo:
        _audit_pending(cell, None, dataset, tokenizer, engine_name, opts, probe, cfg)
        return None
    limits = cfg.limits
    g = git_state(ignore=repo_folders(cfg.out_dir) + RESULT_FOLDERS)
    session = {
        "id": cell.next_session_id(), "status": "running",
        "started": time.strftime("%Y-%m-%d %H:%M:%S %z"), "command": " ".join(["python", *sys.argv]),
        "git_commit": g["commit"], "git_dirty": g["dirty"], "machine": machine_info(), "versions": package_versions(),
        "engine_version": version, "limits": OmegaConf.to_container(limits, resolve=True),
        "audit_per_sample": int(cfg.audit.per_sample), "audit_samples": cfg.audit.samples,
        "warmup": bool(cfg.warmup), "inits": [], "samples_run": 0,
    }
    failure = None
    if reuse:   # a deterministic refusal of this grammar by this engine version: not compiled again
        failure = session["compile_failure"] = {"message": reuse, "kind": "refused", "engine_version": version,
                                                "reused": True}
    cell.save_session(session)
    batch_size = int(cfg.batch.size)
    if batch_size:
        option = getattr(type(probe), "threads_option", None)
        session["batch"] = {"size": batch_size, "threads_option": option,
                            "threads": int(probe.opts[option]) if option else 1}
    progress = _progress(len(dataset.samples), len(keep), f"{label} on {dataset.name}"
                         + (f" (batch {batch_size})" if batch_size else ""), cfg.progress)
    warm_ids = dataset.samples[0].ids(tokenizer) if cfg.warmup else None
    run_deadline = time.monotonic() + float(limits.run_timeout_s)
    audited = audited_samples([s.id for s in dataset.samples], cfg.audit.samples)
    if batch_size:
        try:
            _run_batch(cfg, session, cell, dataset, tokenizer, engine_name, opts, todo, failure, warm_ids, version,
                       progress, run_deadline, audited)
        finally:
            progress.close()
        session["status"] = "finished"
        session["ended"] = time.strftime("%Y-%m-%d %H:%M:%S %z")
        _audit_pending(cell, session, dataset, tokenizer, engine_name, opts, probe, cfg)
        cell.save_session(session)
        return session["id"]
    worker = None
    try:
        for sample in todo:
            if failure:
                cell.write_part(session, sample.id, Outcome.COMPILE_ERROR, failure["message"], None, 0.0)
                progress.update(1)
                continue
            if time.monotonic() > run_deadline:
                cell.write_part(session, sample.id, Outcome.SKIPPED,
                                f"run time limit of {limits.run_timeout_s:g} s reached (limits.run_timeout_s)", None, 0.0)
                progress.update(1)
                continue
            if worker is None:
                worker, failure = _start_worker(cfg, session, cell, engine_name, opts, dataset, tokenizer, warm_ids,
                                                version, progress)
                if worker is None:
                    cell.write_part(session, sample.id, Outcome.COMPILE_ERROR, failure["message"], None, 0.0)
                    progress.update(1)
                    continue
            ids = sample.ids(tokenizer)
            audit_at = audit_steps_for(sample.id, len(ids), int(cfg.audit.per_sample), int(cfg.seed)) \
                if sample.id in audited else []
            left = run_deadline - time.monotonic()
            timeout = min(float(limits.sample_timeout_s), max(1.0, left))
            which = "limits.sample_timeout_s" if timeout == float(limits.sample_timeout_s) else "limits.run_timeout_s"
            t0 = time.monotonic()
            ev, rows = worker.run_sample(sample.id, ids, audit_at, timeout, float(limits.memory_mb))
            if ev.kind == "message" and ev.value[0] == "result":
                res = ev.value[1]
                if res["audited"]:
                    # audited after the timed loop (below): the reference checker's work between two samples
                    # would evict the engine's caches and inflate the next sample's mask times
                    np.savez(cell.parts / f"{sample.id}.audit.npz", **{str(k): v for k, v in res["audited"].items()})
                session["peak_rss_method"] = res.get("peak_rss_method")
                outcome, message = Outcome(res["outcome"]), res["message"]
                if (res.get("peak_rss_mb") or 0) > float(limits.memory_mb):   # a burst between two polls
                    outcome, message = Outcome.OOM, (f"resident memory peaked at {res['peak_rss_mb']:.0f} MB, above "
                                                     f"{limits.memory_mb:g} MB (limits.memory_mb)")
                cell.write_part(session, sample.id, outcome, message, rows, res["wall_s"], res.get("peak_rss_mb"))
            else:
                kind, msg = {
                    "timeout": (Outcome.TIMEOUT, f"no result within {timeout:g} s ({which})"),
                    "oom": (Outcome.OOM, f"resident memory above {limits.memory_mb:g} MB (limits.memory_mb)"),
                    "exit": (Outcome.CRASH, f"worker died ({exit_description(ev.value)})"),
                }.get(ev.kind, (Outcome.CRASH, f"unexpected message from the worker: {ev.value!r:.200}"))
                worker.kill()
                worker = None
                cell.write_part(session, sample.id, kind, msg, rows, time.monotonic() - t0)
            progress.update(1)
            cell.save_session(session)
    except BaseException:   # Ctrl-C or a bug: the worker goes at once; finished samples stay in parts/
        if worker is not None:
            worker.kill()
            worker = None
        raise
    finally:
        progress.close()
        if worker is not None:
            worker.stop()
    session["status"] = "finished"
    session["ended"] = time.strftime("%Y-%m-%d %H:%M:%S %z")
    _audit_pending(cell, session, dataset, tokenizer, engine_name, opts, probe, cfg)
    cell.save_session(session)
    return session["id"]


def _start_worker(cfg, session, cell, engine_name, opts, dataset, tokenizer, warm_ids, version, progress,
                  batch: dict | None = None):
    """(worker, None) once compiled and warmed up, or (None, failure) -- recorded in the session either way.
    Batch mode (``batch``): the sequences are made within the compile's wait (``compile_timeout_s``; an engine
    without ``fork()`` compiles copies), and the warm-up runs through the batch path (its own time budget)."""
    limits = cfg.limits
    mem = float(limits.memory_mb)
    while True:
        progress.set_postfix_str("compiling")
        worker = _Worker(engine_name, opts, dataset.grammar, tokenizer.name, warm_ids,
                         lambda text: progress.set_postfix_str(f"compiling: {text}"[:80]), batch)
        ev = worker.wait(float(limits.compile_timeout_s), mem)
        if not (ev.kind == "message" and ev.value[0] == "compiled"):
            failure = {**_compile_failure(ev, worker, limits), "engine_version": version}
            worker.kill()
            session["compile_failure"] = failure
            cell.save_session(session)
            progress.set_postfix_str("")
            return None, failure
        init = {**ev.value[1], "session": session["id"]}
        peak = init.get("peak_rss_compile_mb") or 0
        if peak > mem:   # a burst between two polls: the worker's own high-water mark shows it (issue 27, item 3)
            failure = {"message": f"compile exceeded the memory limit of {mem:g} MB (limits.memory_mb; {peak:.0f} MB "
                                  "resident at its peak, between two polls)", "kind": "oom", "engine_version": version}
            worker.kill()
            session["inits"].append(init)
            session["compile_failure"] = failure
            cell.save_session(session)
            progress.set_postfix_str("")
            return None, failure
        progress.set_postfix_str("warm-up sample" if warm_ids is not None else "")
        ev = worker.wait(float(limits.sample_timeout_s), mem)
        progress.set_postfix_str("")
        if ev.kind == "message" and ev.value[0] == "ready":
            init.update(ev.value[1])
            if init.get("first_mask_us") is not None:
                init["ttfm_s"] = init["init_s"] + init["first_mask_us"] / 1e6
            if init.get("peak_rss_method"):
                session["peak_rss_method"] = init["peak_rss_method"]
            session["inits"].append(init)
            cell.save_session(session)
            return worker, None
        # the warm-up sample hung, ran out of memory or killed the worker: recorded, then one more compile
        # without warm-up (the same sample, timed, then gets its own typed outcome)
        init["warmup_failed"] = {"timeout": f"no result within {limits.sample_timeout_s:g} s",
                                 "oom": f"resident memory above {limits.memory_mb:g} MB",
                                 "exit": f"worker died ({exit_description(ev.value)})"}.get(ev.kind, repr(ev.value))
        session["inits"].append(init)
        cell.save_session(session)
        worker.kill()
        if warm_ids is None:
            return None, {"message": "worker failed before its first sample", "kind": "died", "engine_version": version}
        warm_ids = None


def _run_batch(cfg, session, cell: Cell, dataset, tokenizer, engine_name, opts, todo, failure, warm_ids, version,
               progress, run_deadline, audited: set[str]) -> None:
    """Batch mode of :func:`_run_cell`: the samples ``todo`` run ``batch.size`` at a time in lock-step in one
    worker (``worker.run_batch``); each sequence's outcome is written as a part the moment it ends.

    A worker that dies (``crash``), runs out of memory (``oom``) or hangs (``timeout``: no batch step within
    ``limits.sample_timeout_s``) takes every sequence in flight with it -- as in a batched server, the batch fails
    together; each of them keeps the steps it finished (from the SlotJournal) and a message saying so. The
    sequences that had ended are kept; the worker is compiled again for the samples not yet started. Samples not
    started when the run's time is up are ``skipped``."""
    limits = cfg.limits
    mem = float(limits.memory_mb)
    B = int(cfg.batch.size)
    ids = {s.id: s.ids(tokenizer) for s in todo}
    batch = {"size": B, "capacity": max(len(v) for v in ids.values()) + 2,
             "warmup_budget_s": 0.5 * float(limits.sample_timeout_s)}
    pending = list(todo)
    run_no = 0
    worker = None

    def record(res: dict) -> None:
        if res["audited"]:
            np.savez(cell.parts / f"{res['sample_id']}.audit.npz", **{str(k): v for k, v in res["audited"].items()})
        session["peak_rss_method"] = res.get("peak_rss_method")
        cell.write_part(session, res["sample_id"], Outcome(res["outcome"]), res["message"], res["rows"],
                        res["wall_s"], res.get("peak_rss_mb"), fields=BATCH_ROW_FIELDS,
                        extra={"single_check": {str(k): v for k, v in res.get("single_check", {}).items()}})
        progress.update(1)

    try:
        while pending:
            # the time is up: the samples not started are skipped (a worker started in time runs one batch, of at
            # least 1 s, as single mode runs one sample)
            if failure is None and time.monotonic() >= run_deadline and (worker is None or run_no):
                for s in pending:
                    cell.write_part(session, s.id, Outcome.SKIPPED, f"run time limit of {limits.run_timeout_s:g} "
                                    "s reached (limits.run_timeout_s)", None, 0.0)
                    progress.update(1)
                break
            if failure is None and worker is None:
                worker, failure = _start_worker(cfg, session, cell, engine_name, opts, dataset, tokenizer, warm_ids,
                                                version, progress, batch)
            if failure is not None:
                for s in pending:
                    cell.write_part(session, s.id, Outcome.COMPILE_ERROR, failure["message"], None, 0.0)
                    progress.update(1)
                break
            work = [(s.id, ids[s.id], audit_steps_for(s.id, len(ids[s.id]), int(cfg.audit.per_sample), int(cfg.seed))
                     if s.id in audited else []) for s in pending]
            reported: set[str] = set()

            def on_seq(res, reported=reported):
                reported.add(res["sample_id"])
                record(res)

            run_no += 1
            t0 = time.monotonic()
            ev, in_flight, steps = worker.run_batch(work, float(limits.sample_timeout_s),
                                                    max(1.0, run_deadline - time.monotonic()), mem, on_seq)
            cell.write_batch_steps(session, run_no, steps)
            done = ev.kind == "message" and ev.value[0] == "batch_done"
            session.setdefault("batch_runs", []).append({"run": run_no, "batch_steps": len(steps),
                                                         "ended": ev.value[0] if ev.kind == "message" else ev.kind,
                                                         **(ev.value[1] if done else {})})
            if not (ev.kind == "message" and ev.value[0] == "batch_done"):
                if ev.kind == "timeout" and ev.value == "run":
                    kind, msg = Outcome.TIMEOUT, (f"the worker was still running {limits.sample_timeout_s:g} s after "
                                                  f"the run time limit of {limits.run_timeout_s:g} s "
                                                  "(limits.run_timeout_s)")
                elif ev.kind == "timeout":
                    kind, msg = Outcome.TIMEOUT, (f"no batch step finished within {limits.sample_timeout_s:g} s "
                                                  "(limits.sample_timeout_s)")
                elif ev.kind == "oom":
                    kind, msg = Outcome.OOM, f"resident memory above {limits.memory_mb:g} MB (limits.memory_mb)"
                elif ev.kind == "exit":
                    kind, msg = Outcome.CRASH, f"worker died ({exit_description(ev.value)})"
                else:
                    kind, msg = Outcome.CRASH, f"unexpected message from the worker: {ev.value!r:.200}"
                flight = {work[k][0]: rows for k, rows in in_flight.items() if work[k][0] not in reported}
                for sid, rows in flight.items():
                    cell.write_part(session, sid, kind,
                                    f"{msg}; batch mode: the {len(flight)} sequence(s) in flight end together",
                                    rows, time.monotonic() - t0, fields=BATCH_ROW_FIELDS)
                    reported.add(sid)
                    progress.update(1)
                worker.kill()
                worker = None
            if worker is None and not reported:   # died before any sequence started: it would again
                for s in pending:
                    cell.write_part(session, s.id, kind, f"{msg}, before any sequence of the batch started", None,
                                    0.0)
                    reported.add(s.id)
                    progress.update(1)
            pending = [s for s in pending if s.id not in reported]
            cell.save_session(session)
    except BaseException:   # Ctrl-C or a bug: the worker goes at once; finished sequences stay in parts/
        if worker is not None:
            worker.kill()
            worker = None
        raise
    finally:
        if worker is not None:
            worker.stop()


def _audit_pending(cell: Cell, session, dataset, tokenizer, engine_name, opts, probe, cfg) -> None:
    """Compare the masks saved during the run (``<sample>.audit.npz``) with the reference, once no engine is being
    timed; each part gets its audit rows. A run stopped before this point audits them when resumed. The reference
    runs in a child under the cell's limits (``experiments/audit_child.py``): a sample whose audit exceeds them is
    recorded as skipped, with the reason, and the rest go on; a resume with ``audit.per_sample=0`` drops them."""
    from gcdbench.experiments.audit_child import audit_samples

    pending = sorted(cell.parts.glob("*.audit.npz"))
    if not pending:
        return
    if int(cfg.audit.per_sample) == 0:   # a resume with the audit turned off: the saved masks stay unaudited
        for npz in pending:
            npz.unlink()
        if session is not None:
            session["audit_error"] = "audit.per_sample=0 on resume: the masks saved for the audit were dropped"
        return
    by_id = {s.id: s for s in dataset.samples}
    jobs = []
    for npz in pending:
        sample_id = npz.name[: -len(".audit.npz")]
        if _load_json(cell.parts / f"{sample_id}.sample.json") is None or sample_id not in by_id:
            npz.unlink()
            continue
        sample = by_id[sample_id]
        jobs.append((sample_id, sample.text, sample.ids(tokenizer), npz))
    skipped: dict[str, str] = {}

    def on_result(sample_id: str, rows, reason) -> None:
        part = cell.parts / f"{sample_id}.sample.json"
        rec = _load_json(part)
        if rows is None:
            skipped[sample_id] = reason
        else:
            rec["audits"] = rows
            single = rec.get("single_check")
            if single is not None:   # batch mode: the batch row equalled the sequence's own fill_mask
                for a in rec["audits"]:
                    a["agree_single_mode"] = bool(single.get(str(a["step"]), False))
            _write_json(part, rec)
        (cell.parts / f"{sample_id}.audit.npz").unlink(missing_ok=True)

    if jobs:
        audit_samples(dataset.grammar, tokenizer.name, probe.profile(), Path(cfg.out_dir) / REFERENCE_CACHE, jobs,
                      float(cfg.limits.sample_timeout_s), float(cfg.limits.memory_mb), on_result,
                      setup_timeout_s=float(cfg.limits.compile_timeout_s))
    if skipped and session is not None:
        reasons = sorted(set(skipped.values()))
        if len(skipped) == len(jobs) and len(reasons) == 1:
            session["audit_error"] = reasons[0].removeprefix("audit skipped: ")
        session["audit_skipped"] = {**session.get("audit_skipped", {}), **skipped}


class _NoProgress:
    def update(self, n):
        pass

    def set_postfix_str(self, s):
        pass

    def close(self):
        pass


def _progress(total, initial, desc, enabled):
    if not enabled:
        return _NoProgress()
    from tqdm import tqdm

    return tqdm(total=total, initial=initial, desc=desc, unit="sample", file=sys.stderr, dynamic_ncols=True)
