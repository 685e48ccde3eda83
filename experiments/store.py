"""The cell folder (``<out_dir>/<dataset>/<tokenizer>/<engine label>``): its identity, its lock, its files.

* **Identity.** A cell folder belongs to one cell: engine and its options, grammar content, dataset and its
  options, tokenizer, seed and the exact sample list (``run.json`` ``identity``). A re-run with the same identity
  resumes; any other is refused with a message naming what differs and how to start fresh (``fresh=true``).
* **Lock.** One run per cell folder at a time (``.lock``, released by the kernel if the run dies); a second run
  stops at once with one line naming the holder.
* **Files.** Each finished sample is a part in ``parts/`` at once; :meth:`Cell.merge` folds the parts into the
  parquet files (written with the declared schemas of ``experiments/schema.py``) and writes ``run.json`` from
  what they hold. Every file is replaced atomically, so a killed run leaves either the old or the new version.
* **A full disk.** A write that fails removes its temporary file; ENOSPC / EDQUOT becomes :class:`NoSpace`, whose
  message is the one line the command prints (what could not be written, and: free space, run the same command
  again, the finished samples are kept). Opening a cell removes the temporaries of writes whose process is gone.
"""
from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import platform
import re
import shutil
import time
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq

from gcdbench.experiments import schema
from gcdbench.experiments.runrecord import build_meta
from gcdbench.experiments.schema import RESULT_FILES, WORKER_BATCH_SUMMARY
from gcdbench.experiments.worker import DETERMINISTIC_COMPILE_FAILURES
from gcdbench.parsers.base import Outcome

MAX_MESSAGE = 2000


class CellError(ValueError):
    """The run cannot use this cell folder; the message says why and what to do (printed as one line)."""


class CellBusy(CellError):
    """Another run holds the cell folder's lock."""


class CellMismatch(CellError):
    """The folder holds results of a run with another identity."""


class CellDamaged(CellError):
    """A stored file of the cell cannot be read."""



def engine_label(name: str, opts: dict, defaults: dict) -> str:
    """Folder-safe label: the engine name plus its non-default options (``valiant__backend-cuda_workers-8``);
    characters that are not safe in one folder name (``/`` of a path, spaces) become ``-``."""
    diff = [f"{k}-{v}" for k, v in sorted(opts.items()) if defaults.get(k) != v]
    label = name + ("__" + "_".join(diff) if diff else "")
    return re.sub(r"[^A-Za-z0-9_.,=+-]+", "-", label)



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
        "engine": engine, "config": label, "engine_options": options, "grammar_key": dataset.grammar_key(),
        "dataset": dataset.name, "dataset_options": dataset_options, "tokenizer": tokenizer.name,
        "tokenizer_key": tokenizer.key(), "seed": seed, "n_samples": len(dataset.samples),
        "samples_digest": digest.hexdigest()[:16], "sample_ids": [s.id for s in dataset.samples],
    }
    if batch_size:
        ident["batch"] = {"mode": "batch", "size": int(batch_size)}
    return _plain(ident)


def identity_diff(old: dict, new: dict, option_defaults: dict | None = None) -> list[str]:
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


#: the errors of a full disk (or a full quota): the run stops with one line (:class:`NoSpace`), its parts kept
NO_SPACE_ERRNOS = (errno.ENOSPC, errno.EDQUOT)
_NO_SPACE_TEXTS = ("no space left on device", "disk quota exceeded")
_TEMPORARY = re.compile(r"^\..+\.tmp(\d+)$")


def is_no_space(err: BaseException) -> bool:
    """Whether ``err`` is a full disk or quota (an OSError with ENOSPC / EDQUOT, or pyarrow's OSError saying so)."""
    return isinstance(err, OSError) and (err.errno in NO_SPACE_ERRNOS
                                         or any(t in str(err).lower() for t in _NO_SPACE_TEXTS))


def no_space_message(err: OSError, path=None) -> str:
    """The one line a full disk ends a run with: what could not be written and the fix (the finished samples are
    kept in ``parts/``: the same command resumes)."""
    quota = err.errno == errno.EDQUOT or "quota" in str(err).lower()
    where = path if path is not None else (err.filename or "results")
    return (f"no space left on device{' (disk quota exceeded)' if quota else ''} writing {where}; free space (or "
            "give another out_dir) and run the same command again: finished samples are kept")


class NoSpace(OSError):
    """A result file could not be written for want of space: ``errno`` ENOSPC or EDQUOT, ``str()`` the one line
    of :func:`no_space_message`."""

    def __init__(self, err: OSError, path: Path):
        code = err.errno if err.errno in NO_SPACE_ERRNOS else errno.ENOSPC
        super().__init__(code, no_space_message(err, path), str(path))

    def __str__(self) -> str:
        return self.strerror


def lock_holder(folder: Path) -> str | None:
    """Who holds the cell folder's lock now (the holder's line, e.g. ``pid 123 on host, since ...``), or None: no
    lock file, or a lock no live process holds (its run ended, or was killed: the kernel released the ``flock``,
    and the file may still name the dead process). Read without taking the lock when the file names no holder
    (a run that ended cleanly empties it) or names a process of this machine that is gone; else a non-blocking
    shared ``flock`` is tried and released at once."""
    path = Path(folder) / ".lock"
    try:
        fh = open(path)
    except OSError:
        return None
    with fh:
        holder = fh.read().strip()
        if not holder:
            return None
        m = re.match(r"pid (\d+) on (\S+),", holder)
        if m and m.group(2) == platform.node() and not _alive(int(m.group(1))):
            return None
        try:
            fcntl.flock(fh, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return holder
        except OSError:   # a file system without flock: the named process's liveness decides
            return holder if m and m.group(2) == platform.node() else None
        fcntl.flock(fh, fcntl.LOCK_UN)
        return None


def write_atomic(path: Path, write) -> None:
    """Write through a temporary file in the same folder, then rename: readers see the old or the new file. A write
    that fails removes its temporary; a full disk raises :class:`NoSpace` (one line naming ``path``)."""
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        write(tmp)
        os.replace(tmp, path)
    except BaseException as err:
        try:
            tmp.unlink(missing_ok=True)
        except OSError:
            pass
        if is_no_space(err) and not isinstance(err, NoSpace):
            raise NoSpace(err, path) from None
        raise


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:   # another user's process
        return True
    return True


def remove_stale_temporaries(folder: Path) -> list[Path]:
    """Remove the ``.<name>.tmp<pid>`` files :func:`write_atomic` left in ``folder`` when its process was killed
    before the rename: those whose process is gone (or is this one: its own writes clean up after themselves).
    Returns what was removed."""
    gone = []
    for p in folder.glob(".*.tmp*"):
        m = _TEMPORARY.match(p.name)
        if m is None or (int(m.group(1)) != os.getpid() and _alive(int(m.group(1)))):
            continue
        try:
            p.unlink()
            gone.append(p)
        except FileNotFoundError:
            pass
    return gone


def write_json(path: Path, obj) -> None:
    write_atomic(path, lambda p: p.write_text(json.dumps(obj, indent=1, default=str)))


def load_json(path: Path):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def clear(out: Path) -> None:
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
        for folder in (out, self.parts):   # writes killed before their rename (the cell is opened under its lock)
            if folder.is_dir():
                remove_stale_temporaries(folder)
        meta = None
        if (out / "run.json").exists():
            try:
                meta = schema.read_run(out / "run.json")   # its schema version checked (version 0: migrated)
            except schema.SchemaVersionError as err:
                raise CellDamaged(f"{err} (fresh=true starts the cell over, deleting its stored results)") from None
            except (OSError, ValueError):
                raise CellDamaged(f"cannot read {out / 'run.json'}; re-run with fresh=true to start the cell over "
                                  "(its stored results are deleted), or move the folder away") from None
        elif any((out / n).exists() for n in RESULT_FILES) or self.parts.exists():
            raise CellDamaged(f"{out} holds result files but no run.json; re-run with fresh=true to start the cell "
                              "over (its stored results are deleted), or move the folder away")
        if meta is not None:
            old = meta.get("identity")
            if old is None:
                raise CellMismatch(f"{out} was written by an older gcdbench, without a cell identity, so a resume "
                                   "cannot be checked; re-run with fresh=true to start the cell over (its stored "
                                   "results are deleted), or run into another out_dir=")
            diff = identity_diff(old, identity, option_defaults)
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
                    self.frames[name] = schema.read_rows(f, name)
                except schema.SchemaVersionError as err:
                    raise CellDamaged(f"{err} (fresh=true starts the cell over, deleting its stored results)") \
                        from None
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
            s = load_json(p)
            if s is not None:
                by_id[s["id"]] = s
        return [by_id[k] for k in sorted(by_id)]

    def sample_parts(self) -> dict[str, dict]:
        out = {}
        for p in sorted(self.parts.glob("*.sample.json")):
            rec = load_json(p)
            if rec is None:   # parts are written atomically; an unreadable one is not a finished sample
                p.unlink()
                continue
            out[rec["sample_id"]] = rec
        return out

    def stored_outcomes(self) -> dict[str, tuple[str, int | None, str]]:
        """sample_id -> (outcome, session, message) for every sample with a stored row (parts override merged rows;
        a missing message is "")."""
        got = {}
        df = self.frames.get("samples")
        if df is not None:
            ses = df["session"] if "session" in df else pd.Series([None] * len(df))
            got = {sid: (oc, None if pd.isna(s) else int(s), m)
                   for sid, oc, s, m in zip(df["sample_id"], df["outcome"], ses, df["message"])}
        for sid, rec in self.sample_parts().items():
            got[sid] = (rec["outcome"], rec.get("session"), rec.get("message"))
        return {sid: (oc, s, m if isinstance(m, str) else "") for sid, (oc, s, m) in got.items()}

    def reusable_compile_error(self, engine_version: str, kinds: tuple = DETERMINISTIC_COMPILE_FAILURES,
                               stored: dict | None = None) -> tuple[str, str] | None:
        """(message, kind) of the stored compile error when it can stand for this run: every compile_error row
        comes from one failure of a kind in ``kinds`` (default: the deterministic ones, see
        ``DETERMINISTIC_COMPILE_FAILURES``) under the same engine version. ``stored``: :meth:`stored_outcomes`,
        if the caller has read it already."""
        stored = self.stored_outcomes() if stored is None else stored
        rows = {s for oc, s, _ in stored.values() if oc == Outcome.COMPILE_ERROR.value}
        if not rows:
            return None
        sessions = {s["id"]: s for s in self.sessions()}
        found = set()
        for sid in rows:
            fail = (sessions.get(sid) or {}).get("compile_failure") or {}
            if fail.get("kind") not in kinds or fail.get("engine_version") != engine_version:
                return None
            found.add((fail["message"], fail["kind"]))
        return found.pop() if len(found) == 1 else None

    def reusable_group_errors(self, engine_version: str, group_of: dict, kinds: tuple = DETERMINISTIC_COMPILE_FAILURES,
                              stored: dict | None = None) -> set[str]:
        """A dataset of many grammars: the samples whose stored compile_error is their group's failure of a kind in
        ``kinds`` (default: the deterministic ones, the engine refused that grammar) under the same engine version;
        a resume does not compile those grammars again (their other failures are retried). ``stored``:
        :meth:`stored_outcomes`, if the caller has read it already."""
        sessions = {s["id"]: s for s in self.sessions()}
        stored = self.stored_outcomes() if stored is None else stored
        keep = set()
        for sample_id, (oc, sid, _) in stored.items():
            group = group_of.get(sample_id)
            if oc != Outcome.COMPILE_ERROR.value or group is None:
                continue
            fail = ((sessions.get(sid) or {}).get("group_failures") or {}).get(group.id) or {}
            if fail.get("kind") in kinds and fail.get("engine_version") == engine_version:
                keep.add(sample_id)
        return keep

    def next_session_id(self) -> int:
        return 1 + max((s["id"] for s in self.sessions()), default=0)

    # -- writing -----------------------------------------------------------------------------------------------
    def save_session(self, session: dict) -> None:
        write_json(self.parts / f"{session['id']}.session.json", session)

    def write_part(self, session: dict, sample_id: str, outcome: Outcome, message: str, cols: dict | None,
                   wall_s: float, peak_rss_mb=None, keep_rows: bool = True, extra: dict | None = None) -> None:
        """One finished sample: ``cols`` its step rows as columns (``{name: values}`` of a worker
        :class:`~gcdbench.experiments.rowlayout.RowLayout`; None: no step); ``keep_rows=False`` (batch mode,
        ``batch.steps=summary``) counts them without storing them; ``extra`` keys are kept in the part for the
        audit (batch mode: ``single_check``)."""
        n_steps = len(cols["step"]) if cols else 0
        if len(message) > MAX_MESSAGE:   # engines may quote the whole grammar in an error
            message = message[:MAX_MESSAGE] + f" ... [{len(message) - MAX_MESSAGE} more characters]"
        rec = {"sample_id": sample_id, "outcome": outcome.value, "message": message, "wall_s": wall_s,
               "n_steps": n_steps, "peak_rss_mb": peak_rss_mb, "rows": cols if keep_rows and n_steps else None,
               "audits": None,
               "session": session["id"], "git_commit": session["git_commit"], "git_dirty": session["git_dirty"],
               "host": session["machine"].get("hostname"), **(extra or {})}
        write_json(self.parts / f"{sample_id}.sample.json", rec)
        session["samples_run"] = session.get("samples_run", 0) + 1

    def write_batch_steps(self, session: dict, run: int, rows: list) -> None:
        """The batch steps of one worker run (batch mode): rows in WORKER_BATCH_SUMMARY order, stored as columns."""
        if rows:
            write_json(self.parts / f"{session['id']}-{run}.bsteps.json",
                       {"session": session["id"], "run": run, "rows": WORKER_BATCH_SUMMARY.columns(rows)})

    def _batch_step_parts(self) -> list[tuple[Path, pd.DataFrame]]:
        out = []
        for p in sorted(self.parts.glob("*.bsteps.json")):
            rec = load_json(p)
            if rec is None:
                p.unlink()
                continue
            rows = rec["rows"]
            # a part left by a run before the schema module: positional rows, without ``masks``
            df = pd.DataFrame(rows, columns=list(WORKER_BATCH_SUMMARY.names[:6])) if isinstance(rows, list) \
                else pd.DataFrame(rows)
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
            samples.append({**key, **{k: rec.get(k) for k in schema.columns("samples") if k not in key}})
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
        repeat = {"repeat": int(self.identity.get("repeat", 0) or 0)}   # issue 66: every row names its repeat
        if step_df is not None:
            for k, v in {**key, **repeat}.items():
                step_df[k] = v
            if "prefix_tokens" not in step_df or step_df["prefix_tokens"].isna().any():
                step_df["prefix_tokens"] = step_df["step"]   # derived: the tokens before the mask
        sample_df = combine("samples", [pd.DataFrame(samples)] if samples else [])
        if sample_df is not None:
            sample_df = sample_df.reindex(columns=schema.columns("samples", extra=set(repeat))).assign(**repeat)
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
            bstep_df = new.sort_values(["session", "run", "batch_step"]).reset_index(drop=True)
            if "masks" not in bstep_df or bstep_df["masks"].isna().any():   # rows stored before the column
                known = bstep_df["masks"] if "masks" in bstep_df else None
                bstep_df["masks"] = schema.v0_masks(bstep_df) if known is None else \
                    known.astype("Int64").fillna(schema.v0_masks(bstep_df))
            for col in ("session", "run", "batch_step", "size", "live", "fallback"):
                bstep_df[col] = bstep_df[col].astype("int64")
            bstep_df["masks"] = bstep_df["masks"].astype("Int64")   # null: not known (see schema.v0_masks)
        for name, df in (("steps", step_df), ("samples", sample_df), ("audit", audit_df),
                         ("batch_steps", bstep_df)):
            path = self.out / f"{name}.parquet"
            if df is None:
                path.unlink(missing_ok=True)
            else:
                table = schema.to_table(name, df)   # the declared columns, types and version, or an error
                # zstd: about a quarter smaller than the default snappy on these tables (the committed results)
                write_atomic(path, lambda p, t=table: pq.write_table(t, p, compression="zstd"))
                df = table.to_pandas()
            self.frames[name] = df
        sessions = self.sessions()
        for s in sessions:
            if s.get("status") == "running" and s["id"] != current:
                s["status"] = "interrupted"
        meta = build_meta(self.identity, dataset, tokenizer, sessions, sample_df, audit_df, bstep_df)
        write_json(self.out / "run.json", meta)
        self.meta = meta
        for p in [*self.parts.glob("*.sample.json"), *self.parts.glob("*.session.json"), *(p for p, _ in bparts)]:
            p.unlink()
        try:
            self.parts.rmdir()
        except OSError:
            pass
        return meta

