"""``run(cfg)``: one (engine, dataset, tokenizer) cell, teacher-forced in a child process with limits.

The parent process owns everything that must survive a failing engine: it sends samples one at a time,
enforces the per-sample / per-run time limits and the memory limit, turns a hang, an out-of-memory or a
dead child into a typed outcome for that sample, restarts the child for the rest, audits masks against
the reference checker, and writes each finished sample to ``parts/`` at once (a re-run skips those).
"""
from __future__ import annotations

import json
import multiprocessing as mp
import os
import platform
import random
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path

import numpy as np
import pandas as pd
import psutil
from omegaconf import OmegaConf

from gcdbench.parsers.base import CompileError, Outcome

STEP_COLUMNS = [
    "engine", "config", "dataset", "tokenizer", "sample_id", "step", "prefix_tokens", "prefix_bytes",
    "mask_us", "commit_us", "n_allowed", "oracle_allowed", "outcome",
]
MAX_MESSAGE = 2000
PACKAGES = ["xgrammar", "llguidance", "lark", "numba", "numba-cuda", "numpy", "torch", "hydra-core", "interegular",
            "cfgzip", "glrmask", "gcdbench"]


def engine_label(name: str, opts: dict, defaults: dict) -> str:
    """Folder-safe label: the engine name plus its non-default options (``valiant__backend-cuda_workers-8``);
    characters that are not safe in one folder name (``/`` of a path, spaces) become ``-``."""
    import re

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
    out = {}
    for p in PACKAGES:
        try:
            out[p] = metadata.version(p)
        except metadata.PackageNotFoundError:
            pass
    return out


def git_commit() -> str | None:
    try:
        repo = Path(__file__).resolve().parents[1]
        out = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
        dirty = subprocess.run(["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return out.stdout.strip() + ("-dirty" if dirty else "") if out.returncode == 0 else None
    except (OSError, subprocess.SubprocessError):
        return None


class _Child:
    """One worker process, its pipe and its StepLog."""

    def __init__(self, ctx, args):
        from gcdbench.experiments.worker import StepLog, worker_main

        self.log = StepLog.create()
        self.conn, child_conn = ctx.Pipe()
        self.proc = ctx.Process(target=worker_main, args=(child_conn, self.log.path, *args), daemon=True)
        self.proc.start()
        child_conn.close()
        self.ps = psutil.Process(self.proc.pid)

    def rss_mb(self) -> float:
        try:
            return self.ps.memory_info().rss / 2**20 + sum(c.memory_info().rss for c in self.ps.children(True)) / 2**20
        except psutil.Error:
            return 0.0

    def wait(self, timeout_s: float, mem_mb: float, rows: list | None = None):
        """('msg', payload) | ('timeout',) | ('oom', rss) | ('died', exitcode).

        ``("steps", batch)`` messages are not returned: their rows are appended to ``rows``."""
        deadline = time.monotonic() + timeout_s
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return ("timeout",)
            try:
                if self.conn.poll(min(0.1, left)):
                    msg = self.conn.recv()
                    if msg[0] == "steps":   # a sample longer than the StepLog: a full batch
                        if rows is not None:
                            rows.extend(msg[1])
                        continue
                    if rows is not None:
                        rows.extend(self.log.rows())
                    return ("msg", msg)
            except (EOFError, OSError):
                self.proc.join(5)
                return ("died", self.proc.exitcode)
            if not self.proc.is_alive() and not self.conn.poll(0):
                return ("died", self.proc.exitcode)
            rss = self.rss_mb()
            if mem_mb and rss > mem_mb:
                return ("oom", rss)

    def start_sample(self, *msg) -> None:
        self.log.reset()
        self.conn.send(("sample", *msg))

    def kill_and_collect(self, rows: list) -> None:
        """Kill the child (timed out, over memory or dead), then collect what it finished: the batches still
        in the pipe, then the rows in the StepLog."""
        self._terminate()
        try:
            while self.conn.poll(0):
                msg = self.conn.recv()
                if msg[0] == "steps":
                    rows.extend(msg[1])
        except (EOFError, OSError):
            pass
        rows.extend(self.log.rows())
        self.log.close(unlink=True)

    def _terminate(self):
        try:
            for c in self.ps.children(True):
                c.kill()
        except psutil.Error:
            pass
        self.proc.kill()
        self.proc.join(10)

    def kill(self):
        self._terminate()
        self.log.close(unlink=True)

    def stop(self):
        try:
            self.conn.send(("stop",))
        except (OSError, BrokenPipeError):
            pass
        self.proc.join(10)
        if self.proc.is_alive():
            self.kill()
        else:
            self.log.close(unlink=True)


def audit_steps_for(sample_id: str, n_steps: int, per_sample: int, seed: int) -> list[int]:
    if per_sample <= 0:
        return []
    rng = random.Random(f"{seed}:{sample_id}")
    steps = list(range(n_steps + 1))   # the last step is the EOS step
    return sorted(rng.sample(steps, min(per_sample, len(steps))))


def run(cfg) -> Path:
    """Run one cell and return its output folder (``<out_dir>/<dataset>/<tokenizer>/<engine label>``)."""
    from gcdbench.datasets.registry import load_dataset
    from gcdbench.experiments.audit import Auditor
    from gcdbench.parsers.registry import engine_class
    from gcdbench.parsers.tokenizers import load_tokenizer

    engine_name = cfg.engine.name
    opts = {k: v for k, v in OmegaConf.to_container(cfg.engine, resolve=True).items() if k not in ("name", "label")}
    cls = engine_class(engine_name)
    cls(**opts)   # unknown options fail here, before any work
    label = cfg.engine.get("label") or engine_label(engine_name, opts, cls.options())
    tokenizer = load_tokenizer(cfg.tokenizer.name)
    dataset = load_dataset(cfg.dataset, data_root=cfg.data_root, n=cfg.samples, seed=cfg.seed)
    out = Path(cfg.out_dir) / dataset.name / tokenizer.name / label
    parts = out / "parts"
    parts.mkdir(parents=True, exist_ok=True)

    done = _finished_samples(out)
    todo = [s for s in dataset.samples if s.id not in done]
    limits = cfg.limits
    meta = _load_json(out / "run.json") or {}
    meta.update({
        "engine": engine_name, "config": label, "engine_options": opts, "dataset": dataset.name,
        "tokenizer": tokenizer.name, "vocab_size": tokenizer.vocab_size, "grammar": dataset.grammar.name,
        "grammar_key": dataset.grammar.key(), "dataset_meta": dataset.meta, "n_samples": len(dataset.samples),
        "limits": OmegaConf.to_container(limits, resolve=True),
        "hydra_config": OmegaConf.to_container(cfg, resolve=True), "git_commit": git_commit(),
        "versions": package_versions(), "machine": machine_info(),
    })
    meta.setdefault("inits", [])
    auditor = None
    if cfg.audit.per_sample > 0:
        try:
            auditor = Auditor(dataset.grammar, tokenizer, engine_name, opts)
        except CompileError as err:   # the engine's own compile decides the samples' outcome
            meta["audit_error"] = f"reference checker cannot take the grammar: {err}"

    if mp.get_start_method(allow_none=True) not in (None, *mp.get_all_start_methods()):
        # inside a joblib/loky worker (hydra/launcher=parallel): spawned children cannot restore "loky"
        mp.set_start_method("spawn", force=True)
    ctx = mp.get_context("spawn")
    args = (engine_name, opts, dataset.grammar, tokenizer.name)
    run_deadline = time.monotonic() + float(limits.run_timeout_s)
    child = None
    compile_error = meta.get("compile_error")
    progress = _progress(len(dataset.samples), len(done), f"{label} on {dataset.name}", cfg.progress)
    try:
        for sample in todo:
            if compile_error:
                _write_part(parts, sample.id, Outcome.COMPILE_ERROR, compile_error, None, [], meta, 0.0)
                progress.update(1)
                continue
            if time.monotonic() > run_deadline:
                _write_part(parts, sample.id, Outcome.SKIPPED, "run time limit reached", None, [], meta, 0.0)
                meta["aborted"] = f"run time limit of {limits.run_timeout_s} s reached"
                progress.update(1)
                continue
            if child is None:
                child = _Child(ctx, args)
                got = child.wait(float(limits.compile_timeout_s), float(limits.memory_mb))
                if got[0] == "msg" and got[1][0] == "ready":
                    meta["inits"].append(got[1][1])
                else:
                    compile_error = _compile_failure(got)
                    meta["compile_error"] = compile_error
                    child.kill()
                    child = None
                    _write_part(parts, sample.id, Outcome.COMPILE_ERROR, compile_error, None, [], meta, 0.0)
                    progress.update(1)
                    continue
            ids = sample.ids(tokenizer)
            audit_at = audit_steps_for(sample.id, len(ids), int(cfg.audit.per_sample), int(cfg.seed))
            child.start_sample(sample.id, ids, audit_at)
            timeout = min(float(limits.sample_timeout_s), max(1.0, run_deadline - time.monotonic()))
            t0 = time.monotonic()
            rows: list = []
            got = child.wait(timeout, float(limits.memory_mb), rows)
            if got[0] == "msg":
                res = got[1][1]
                audits = []
                if auditor and res["audited"]:
                    # audited after the timed loop (below): the reference checker's work between two samples
                    # would evict the engine's caches and inflate the next sample's mask times
                    np.savez(parts / f"{sample.id}.audit.npz", **{str(k): v for k, v in res["audited"].items()})
                    audits = None
                _write_part(parts, sample.id, Outcome(res["outcome"]), res["message"], rows, audits, meta,
                            res["wall_s"], res.get("peak_rss_mb"))
            else:
                kind = {"timeout": Outcome.TIMEOUT, "oom": Outcome.OOM, "died": Outcome.CRASH}[got[0]]
                msg = {"timeout": f"no result within {timeout:.0f} s",
                       "oom": f"resident memory above {limits.memory_mb} MB",
                       "died": f"worker died (exit code {got[-1]})"}[got[0]]
                child.kill_and_collect(rows)
                child = None
                _write_part(parts, sample.id, kind, msg, rows, [], meta, time.monotonic() - t0)
            progress.update(1)
    finally:
        progress.close()
        if child is not None:
            child.stop()
    _audit_pending(parts, auditor, dataset, tokenizer)
    _merge(out, dataset, meta)
    return out


def _audit_pending(parts: Path, auditor, dataset, tokenizer) -> None:
    """Compare the masks saved during the run (``<sample>.audit.npz``) with the reference, once no engine is
    being timed; each part gets its audit rows. A run stopped before this point audits them when resumed."""
    by_id = {s.id: s for s in dataset.samples}
    for npz in sorted(parts.glob("*.audit.npz")):
        sample_id = npz.name[: -len(".audit.npz")]
        part = parts / f"{sample_id}.json"
        rec = _load_json(part)
        if rec is None or sample_id not in by_id or auditor is None:
            npz.unlink()
            continue
        with np.load(npz) as data:
            audited = {int(k): data[k] for k in data.files}
        sample = by_id[sample_id]
        rec["audits"] = auditor.check(sample.text, sample.ids(tokenizer), audited)
        tmp = parts / f".{sample_id}.tmp"
        tmp.write_text(json.dumps(rec))
        tmp.replace(part)
        npz.unlink()


def _compile_failure(got) -> str:
    if got[0] == "msg" and got[1][0] == "compile_error":
        return got[1][1]
    if got[0] == "timeout":
        return "compile did not finish within compile_timeout_s"
    if got[0] == "oom":
        return f"compile exceeded the memory limit ({got[1]:.0f} MB resident)"
    return f"worker died while compiling (exit code {got[-1]})"


class _NoProgress:
    def update(self, n):
        pass

    def close(self):
        pass


def _progress(total, initial, desc, enabled):
    if not enabled:
        return _NoProgress()
    from tqdm import tqdm

    return tqdm(total=total, initial=initial, desc=desc, unit="sample", file=sys.stderr, dynamic_ncols=True)


def _load_json(path: Path):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _finished_samples(out: Path) -> set[str]:
    done = {p.stem for p in (out / "parts").glob("*.json")}
    if (out / "samples.parquet").exists():
        done |= set(pd.read_parquet(out / "samples.parquet")["sample_id"])
    return done


def _write_part(parts: Path, sample_id, outcome: Outcome, message, rows, audits, meta, wall_s, peak_rss_mb=None):
    from gcdbench.experiments.worker import ROW_FIELDS

    cols = {k: [r[i] for r in rows] for i, k in enumerate(ROW_FIELDS)} if rows else None
    if len(message) > MAX_MESSAGE:   # engines may quote the whole grammar in an error
        message = message[:MAX_MESSAGE] + f" ... [{len(message) - MAX_MESSAGE} more characters]"
    rec = {"sample_id": sample_id, "outcome": outcome.value, "message": message, "wall_s": wall_s,
           "n_steps": len(rows) if rows else 0, "peak_rss_mb": peak_rss_mb, "rows": cols, "audits": audits}
    tmp = parts / f".{sample_id}.tmp"
    tmp.write_text(json.dumps(rec))
    tmp.replace(parts / f"{sample_id}.json")


def _merge(out: Path, dataset, meta):
    """Fold ``parts/*.json`` into steps/samples/audit parquet files and write run.json."""
    key = {"engine": meta["engine"], "config": meta["config"], "dataset": meta["dataset"],
           "tokenizer": meta["tokenizer"]}
    old = {name: pd.read_parquet(out / f"{name}.parquet") for name in ("steps", "samples", "audit")
           if (out / f"{name}.parquet").exists()}
    steps, samples, audits = [], [], []
    part_files = sorted((out / "parts").glob("*.json"))
    for p in part_files:
        rec = json.loads(p.read_text())
        samples.append({**key, **{k: rec[k] for k in ("sample_id", "outcome", "message", "wall_s", "n_steps",
                                                      "peak_rss_mb")}})
        if rec["rows"]:
            df = pd.DataFrame(rec["rows"])
            df["sample_id"] = rec["sample_id"]
            df["outcome"] = rec["outcome"]
            steps.append(df)
        for a in rec["audits"] or []:
            audits.append({**key, "sample_id": rec["sample_id"], **a})
    new_ids = {json.loads(p.read_text())["sample_id"] for p in part_files}

    def combine(name, frames):
        prev = old.get(name)
        if prev is not None:
            prev = prev[~prev["sample_id"].isin(new_ids)]
            frames = [prev] + frames
        return pd.concat(frames, ignore_index=True) if frames else None

    step_df = combine("steps", steps)
    if step_df is not None:
        for k, v in key.items():
            step_df[k] = v
        step_df = step_df[STEP_COLUMNS]
        step_df.to_parquet(out / "steps.parquet", index=False)
    sample_df = combine("samples", [pd.DataFrame(samples)] if samples else [])
    if sample_df is not None:
        order = {s.id: i for i, s in enumerate(dataset.samples)}
        sample_df = sample_df.sort_values("sample_id", key=lambda c: c.map(order)).reset_index(drop=True)
        sample_df.to_parquet(out / "samples.parquet", index=False)
        meta["outcomes"] = sample_df["outcome"].value_counts().to_dict()
    audit_df = combine("audit", [pd.DataFrame(audits)] if audits else [])
    if audit_df is not None and len(audit_df):
        audit_df.to_parquet(out / "audit.parquet", index=False)
        meta["audit"] = {"steps": int(len(audit_df)), "agree": int(audit_df["agree"].sum()),
                         "agree_modulo_documented": int(audit_df["agree_modulo_documented"].sum())}
    if meta.get("inits"):
        meta["init_s"] = meta["inits"][0]["init_s"]
        meta["peak_rss_compile_mb"] = max(i.get("peak_rss_compile_mb") or 0 for i in meta["inits"])
    if sample_df is not None and sample_df["peak_rss_mb"].notna().any():
        meta["peak_rss_run_mb"] = float(sample_df["peak_rss_mb"].max())
    (out / "run.json").write_text(json.dumps(meta, indent=1, default=str))
    for p in part_files:
        p.unlink()
    try:
        (out / "parts").rmdir()
    except OSError:
        pass
