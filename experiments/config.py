"""Structured config (the schema Hydra checks ``conf/config.yaml`` and command-line overrides against).

A typo in a top-level key fails at start; a wrong group choice (``engine=xgramar``) fails with Hydra's list
of valid choices; an unknown engine option fails in ``Engine.__init__`` naming the valid ones.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from hydra.core.config_store import ConfigStore


@dataclass
class Limits:
    sample_timeout_s: float = 120.0    # one sample (all its masks), else outcome "timeout"
    run_timeout_s: float = 3600.0      # the whole cell; samples after it are "skipped"
    compile_timeout_s: float = 900.0   # engine init
    memory_mb: float = 16000.0         # resident memory of the worker process, else "oom"


@dataclass
class Audit:
    per_sample: int = 7                # steps per sample whose full mask is compared with the reference


@dataclass
class TokenizerConf:
    name: str = "qwen3"


@dataclass
class RunConfig:
    engine: Any = field(default_factory=dict)     # name + engine options (conf/engine/<name>.yaml)
    dataset: Any = field(default_factory=dict)    # name + loader keys (conf/dataset/<name>.yaml)
    tokenizer: TokenizerConf = field(default_factory=TokenizerConf)
    experiment: Any = field(default_factory=dict)  # free-form notes of the experiment preset
    samples: Optional[int] = 30
    seed: int = 0
    data_root: str = "../shared/data"
    out_dir: str = "outputs"
    limits: Limits = field(default_factory=Limits)
    audit: Audit = field(default_factory=Audit)
    progress: bool = True
    report: bool = True                # print this cell's summary line when it ends


def register() -> None:
    ConfigStore.instance().store(name="run_schema", node=RunConfig)
