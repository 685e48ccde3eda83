"""Structured config (the schema Hydra checks ``conf/config.yaml`` and command-line overrides against), and the
checks Hydra cannot make (:func:`validate`, called by the runner before any work).

A typo in a top-level key fails at start; a wrong group choice (``engine=xgramar``) fails with Hydra's list
of valid choices. Each registered engine's options dataclass (``Engine.Options``) is the schema of its config
group ``engine/<name>`` (:func:`register`), so a typo in an engine option (``engine.wokers=8``) or a value of
the wrong type (``engine.workers=abc``) fails while Hydra composes; a value outside an option's allowed values
(``engine.backend=gpu``), a key added with ``+`` that nothing reads (``+sample=3``), a sample count below 1 and a
limit that is not positive fail in :func:`validate`, before any work.
"""
from __future__ import annotations

import dataclasses
import math
import re
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import OmegaConf


class ConfigError(ValueError):
    """A configuration value the run cannot use; the message names the key and what to write instead."""


@dataclass
class Limits:
    sample_timeout_s: float = 120.0    # one sample (all its masks), else outcome "timeout"
    run_timeout_s: float = 3600.0      # the cell's samples (the first compile and warm-up not counted: their own
                                       # limits below); samples after it are "skipped"
    compile_timeout_s: float = 900.0   # engine init
    memory_mb: float = 16000.0         # resident memory of the worker process (and its children), else "oom"
    warmup_timeout_s: Optional[float] = None   # the untimed warm-up sample (first-use costs such as a JIT on an
                                               # empty cache); null: sample_timeout_s


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
    # name + engine options: typed by the engine's own node (register(): the engine's Options plus name and
    # label); Any here, because each engine's node is another dataclass and an engine config kept in a user's
    # config folder may have none
    engine: Any = field(default_factory=dict)
    dataset: Any = field(default_factory=dict)    # name + loader keys (conf/dataset/<name>.yaml)
    tokenizer: TokenizerConf = field(default_factory=TokenizerConf)
    experiment: Any = field(default_factory=dict)  # free-form notes of the experiment preset
    samples: Any = 30                  # how many samples (>= 1), or "all"
    seed: int = 0                      # which samples (a seeded choice; < 0: the first ones in file order), audit steps
    data_root: str = "../shared/data"
    out_dir: str = "outputs"
    fresh: bool = False                # true: discard the cell folder's earlier results instead of resuming
    retry_compile_timeouts: bool = True  # resume: compile again a grammar whose compile ran out of time (false: it stands)
    warmup: bool = True                # one untimed warm-up sample after each compile
    cold: bool = False                 # true: each worker starts with empty numba and gcdbench caches (a first run on
                                       # a new machine: cold init, JIT and TTFM; its own cell, folder <label>__cold)
    limits: Limits = field(default_factory=Limits)
    audit: Audit = field(default_factory=Audit)
    batch: Batch = field(default_factory=Batch)
    progress: bool = True
    report: bool = True                # print this cell's summary line when it ends
    # repeats (issue 66; experiments/repeats.py): each repeat is its own cell (folder <label>__repeat-<r>), run in
    # its own fresh worker with its own compile, warm-up and samples
    repeat: int = 0                    # which repeat this cell is (0: the first; part of the cell's identity)
    repeats: int = 1                   # R >= 1: run repeats 0..R-1 (a sweep: each a job, see interleave)
    interleave: bool = True            # a sweep with repeats=R runs every config's repeat 0, then every repeat 1, ...


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

    probe = Path(str(path)).expanduser()
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if not probe.is_dir():
        return f"{probe} is a file, not a folder"
    if not os.access(probe, os.W_OK | os.X_OK):
        return f"{probe} is not writable by this user"
    return None


def _hydra_type(tp):
    """An annotation as OmegaConf reads it (``int | None`` -> ``Optional[int]``)."""
    if isinstance(tp, types.UnionType) or typing.get_origin(tp) is typing.Union:
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return Optional[args[0]] if len(args) == 1 else Any
    return tp if tp in (int, float, bool, str) else Any


_NODES: dict[str, type] = {}


def engine_node(name: str) -> type | None:
    """The schema of config group ``engine/<name>``: ``name`` and ``label`` (a preset's cell label) plus the engine's
    declared options; None when the engine's module does not import here (its node is then open: the runner
    says why the engine cannot run). The class is an attribute of this module, so configs holding it pickle
    (Hydra's parallel launchers)."""
    from gcdbench.parsers.base import option_specs
    from gcdbench.parsers.registry import engine_class

    key = "EngineConf_" + re.sub(r"\W", "_", name)
    if key not in _NODES:
        try:
            specs = option_specs(engine_class(name, runnable=False).Options)
        except ValueError:
            return None
        fields = [("name", str, field(default=name)), ("label", Optional[str], field(default=None))]
        fields += [(s.name, _hydra_type(s.type), field(default=s.default)) for s in specs]
        node = dataclasses.make_dataclass(key, fields)
        node.__module__ = __name__
        # what Hydra's message names for a key the node lacks ("Key 'wokers' not in 'engine valiant (options: ...)'");
        # pickle finds the class by its __qualname__, the key
        node.__name__ = f"engine {name} (options: {', '.join(s.name for s in specs) or 'none'})"
        _NODES[key] = node
    return _NODES[key]


def __getattr__(attr: str):
    """``EngineConf_<name>`` (the node :func:`engine_node` made), found again by pickle in another process."""
    if attr.startswith("EngineConf_"):
        from gcdbench.parsers.registry import engines

        for name in engines():
            if "EngineConf_" + re.sub(r"\W", "_", name) == attr and engine_node(name) is not None:
                return _NODES[attr]
    raise AttributeError(f"module {__name__!r} has no attribute {attr!r}")


def register() -> None:
    """The run's schema, and one node per registered engine as the schema of ``engine/<name>`` (presets in
    ``conf/engine/`` name their base engine in a ``defaults:`` line and set only the keys they change)."""
    from gcdbench.parsers.registry import engines

    from gcdbench.datasets.registry import dataset_loader, datasets

    cs = ConfigStore.instance()
    cs.store(name="run_schema", node=RunConfig)
    for name in engines():
        node = engine_node(name)
        cs.store(group="engine", name=name, node=node if node is not None else {"name": name})
    # one node per registered dataset, from its loader's declaration (name, ambiguous, every option at its
    # default); conf/dataset/ holds presets (a defaults: line and the keys they change) and sampled.yaml
    have = {p.stem for p in (Path(__file__).resolve().parents[1] / "conf" / "dataset").glob("*.yaml")}
    for name in sorted(set(datasets()) - have):
        try:
            node = dataset_loader(name).node(name)
        except (ValueError, ImportError):   # its module does not import here: load_dataset says why
            node = {"name": name, "ambiguous": False}
        cs.store(group="dataset", name=name, node=node)
    # Hydra's own run folder is named from user values before the runner validates them (issue 27, item 6)
    OmegaConf.register_new_resolver("safe", folder_safe, replace=True)
    from gcdbench.experiments.repeats import repeat_sweep   # issue 66: hydra.sweeper.params.repeat

    OmegaConf.register_new_resolver("repeat_sweep", repeat_sweep, replace=True)


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


def engine_options(cfg) -> dict:
    """The engine options of a composed config (its ``engine`` node less ``name`` and ``label``)."""
    return {k: v for k, v in OmegaConf.to_container(cfg.engine, resolve=True).items() if k not in ("name", "label")}


def validate(cfg) -> int | None:
    """Check what the schema cannot (see the module docstring); returns the sample count (None = all)."""
    from gcdbench.parsers.registry import engine_class

    try:   # allowed values of the engine's options, before any work (the types Hydra checked)
        engine_class(cfg.engine.name, runnable=False).check_options(engine_options(cfg))
    except ValueError as err:
        raise ConfigError(str(err)) from None
    bad = _unknown_keys({k: cfg[k] for k in cfg.keys() if k != "hydra"}, RunConfig, "")
    if bad:
        valid = sorted(f.name for f in dataclasses.fields(RunConfig))
        nested = "; ".join(f"{name}.{{{', '.join(f.name for f in dataclasses.fields(node))}}}"
                           for name, node in (("limits", Limits), ("audit", Audit), ("batch", Batch),
                                             ("tokenizer", TokenizerConf)))
        raise ConfigError(f"unknown config key(s) {bad}: nothing reads them (a typo added with '+'?). Valid: {valid}; "
                          f"{nested}; engine.<option> and dataset.<option> are checked by the engine and the dataset")
    n = sample_count(cfg.samples)
    for key, low in (("repeat", 0), ("repeats", 1)):   # issue 66: repeats
        value = cfg.get(key, low)
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ConfigError(f"{key}={value!r}: write a whole number >= {low} (repeats=R runs R repeats of each "
                              "cell; repeat=r names one of them)")
    for key, value in cfg.limits.items():
        if value is None and key == "warmup_timeout_s":   # null: the sample limit
            continue
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
                              "the engine's own thread option (engine.threads=..., engine.max_threads=...; "
                              "python -m gcdbench.parsers.registry --options lists them)")
    return n
