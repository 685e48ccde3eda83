"""Structured config (the schema Hydra checks ``conf/config.yaml`` and command-line overrides against), and the
checks Hydra cannot make (:func:`validate`, called by the runner before any work).

A typo in a top-level key fails at start; a wrong group choice (``engine=xgramar``) fails with Hydra's list
of valid choices; an unknown engine option, or a value outside an option's allowed values, fails in
``Engine.__init__`` naming the valid ones; a key added with ``+`` that nothing reads (``+sample=3``), a sample
count below 1 and a limit that is not positive fail in :func:`validate`.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import OmegaConf


class ConfigError(ValueError):
    """A configuration value the run cannot use; the message names the key and what to write instead."""


@dataclass
class Limits:
    sample_timeout_s: float = 120.0    # one sample (all its masks), else outcome "timeout"
    run_timeout_s: float = 3600.0      # the whole cell; samples after it are "skipped"
    compile_timeout_s: float = 900.0   # engine init
    memory_mb: float = 16000.0         # resident memory of the worker process (and its children), else "oom"


@dataclass
class Audit:
    per_sample: int = 7                # steps per sample whose full mask is compared with the reference (0: none)
    samples: Any = None                # audit the first N samples of the cell only; null: every sample


@dataclass
class Batch:
    size: int = 0                      # 0: single mode; B >= 1: batch mode, B sequences teacher-forced in lock-step
    threads: Any = None                # batch mode: sets the engine's thread option (Engine.threads_option); null: as configured
    steps: str = "summary"             # batch mode: summary (batch_steps.parquet only) or all (also every mask's row)


@dataclass
class TokenizerConf:
    name: str = "qwen3"


@dataclass
class RunConfig:
    engine: Any = field(default_factory=dict)     # name + engine options (conf/engine/<name>.yaml)
    dataset: Any = field(default_factory=dict)    # name + loader keys (conf/dataset/<name>.yaml)
    tokenizer: TokenizerConf = field(default_factory=TokenizerConf)
    experiment: Any = field(default_factory=dict)  # free-form notes of the experiment preset
    samples: Any = 30                  # how many samples (>= 1), or "all"
    seed: int = 0                      # which samples (a seeded choice; < 0: the first ones in file order), audit steps
    data_root: str = "../shared/data"
    out_dir: str = "outputs"
    fresh: bool = False                # true: discard the cell folder's earlier results instead of resuming
    warmup: bool = True                # one untimed warm-up sample after each compile
    limits: Limits = field(default_factory=Limits)
    audit: Audit = field(default_factory=Audit)
    batch: Batch = field(default_factory=Batch)
    progress: bool = True
    report: bool = True                # print this cell's summary line when it ends


def folder_safe(value) -> str:
    """``value`` as one folder name: every run of characters outside ``[A-Za-z0-9_.,=+-]`` becomes ``-``, so a name
    with ``/`` or ``..`` cannot take a path out of its folder (resolver ``${safe:...}`` in ``conf/config.yaml``)."""
    import re

    return re.sub(r"[^A-Za-z0-9_.,=+-]+", "-", str(value))


def folder_problem(path) -> str | None:
    """Why ``path`` cannot be (or become) a folder this user writes output into, as ``"<where> is a file, not a
    folder"`` or ``"<where> is not writable by this user"`` (``<where>``: ``path`` or its nearest existing parent),
    or None. The run's ``out_dir`` and the report's ``--out`` are checked with it before anything is written."""
    import os
    from pathlib import Path

    probe = Path(str(path)).expanduser()
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if not probe.is_dir():
        return f"{probe} is a file, not a folder"
    if not os.access(probe, os.W_OK | os.X_OK):
        return f"{probe} is not writable by this user"
    return None


def register() -> None:
    ConfigStore.instance().store(name="run_schema", node=RunConfig)
    # Hydra's own run folder is named from user values before the runner validates them (issue 27, item 6)
    OmegaConf.register_new_resolver("safe", folder_safe, replace=True)


def sample_count(value) -> int | None:
    """``samples`` as the loaders take it: a count >= 1, or None for ``all``."""
    if isinstance(value, str) and value.strip().lower() == "all":
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"samples={value!r}: write a whole number >= 1, or samples=all for every sample")
    if value < 1:
        raise ConfigError(f"samples={value}: at least 1 sample is needed (samples=all runs every sample)")
    return value


def _unknown_keys(node, schema, where: str) -> list[str]:
    """Keys of ``node`` that the dataclass ``schema`` does not declare (added with ``+key=...``), recursively."""
    fields = {f.name: f for f in dataclasses.fields(schema)}
    bad = []
    for key in node.keys():
        f = fields.get(key)
        if f is None:
            bad.append(f"{where}{key}")
            continue
        sub = f.default_factory if f.default_factory is not dataclasses.MISSING else None
        if dataclasses.is_dataclass(sub) and hasattr(node[key], "keys"):
            bad += _unknown_keys(node[key], sub, f"{where}{key}.")
    return bad


def validate(cfg) -> int | None:
    """Check what the schema cannot (see the module docstring); returns the sample count (None = all)."""
    bad = _unknown_keys({k: cfg[k] for k in cfg.keys() if k != "hydra"}, RunConfig, "")
    if bad:
        valid = sorted(f.name for f in dataclasses.fields(RunConfig))
        nested = "; ".join(f"{name}.{{{', '.join(f.name for f in dataclasses.fields(node))}}}"
                           for name, node in (("limits", Limits), ("audit", Audit), ("batch", Batch),
                                             ("tokenizer", TokenizerConf)))
        raise ConfigError(f"unknown config key(s) {bad}: nothing reads them (a typo added with '+'?). Valid: {valid}; "
                          f"{nested}; engine.<option> and dataset.<option> are checked by the engine and the dataset")
    n = sample_count(cfg.samples)
    for key, value in cfg.limits.items():
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not value > 0:
            raise ConfigError(f"limits.{key}={value!r}: a limit must be a number > 0")
        if not math.isfinite(value):   # run.json would hold Infinity, which strict JSON readers refuse
            raise ConfigError(f"limits.{key}={value!r}: a limit must be finite (for no practical limit write a large "
                              "number, e.g. 1e9)")
    if not isinstance(cfg.audit.per_sample, int) or cfg.audit.per_sample < 0:
        raise ConfigError(f"audit.per_sample={cfg.audit.per_sample!r}: write a whole number >= 0 (0: no audit)")
    k = cfg.audit.samples
    if k is not None and (isinstance(k, bool) or not isinstance(k, int) or k < 0):
        raise ConfigError(f"audit.samples={k!r}: write a whole number >= 0 of audited samples, or null for every sample")
    size, threads = cfg.batch.size, cfg.batch.threads
    if isinstance(size, bool) or not isinstance(size, int) or size < 0:
        raise ConfigError(f"batch.size={size!r}: write a whole number >= 1 for batch mode (0: single mode)")
    if threads is not None:
        if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
            raise ConfigError(f"batch.threads={threads!r}: write a whole number >= 1, or null to keep the engine's "
                              "own thread option")
        if not size:
            raise ConfigError(f"batch.threads={threads} applies to batch mode only: set batch.size=B (>= 1), or set "
                              "the engine's own thread option (engine.threads=..., engine.max_threads=...)")
    return n
