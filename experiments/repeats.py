"""Repeated runs (issue 66): ``repeats=R`` runs each cell R times, each repeat its own cell (folder
``<label>__repeat-<r>``, ``repeat: r`` in its identity; repeat 0 is the cell run once, folder and identity unchanged),
so each has its own fresh worker, compile, warm-up and samples, and a resumed sweep redoes only unfinished repeats.

Order. One run (``python -m experiments.run repeats=5 ...``) runs the repeats one after the other
(:func:`run_repeats`). In a sweep (``-m``), ``conf/config.yaml`` lists the sweep ``repeat: ${repeat_sweep:...}``
first in ``hydra.sweeper.params`` (:func:`repeat_sweep`: ``0,1,...,R-1``). Hydra's basic sweeper (1.3.8) takes the
cartesian product of its sweeps in the order they are listed -- ``hydra.sweeper.params`` in the order the configs
were merged (``conf/config.yaml`` before any experiment preset), then the command line; a key given again keeps
its first place -- and iterates the *last* listed one fastest. ``repeat`` listed first is thus the outermost loop:
with ``interleave=true`` (the default) the jobs run every config's repeat 0, then every config's repeat 1, ...
(A B A B ...), so the machine's drift falls on every config alike, and each job runs its one repeat. With
``interleave=false`` the sweep is ``repeat=0`` only and each job runs its config's R repeats back to back
(A A B B ...). ``tests/test_stats.py`` checks the order on this Hydra.
"""
from __future__ import annotations

import copy
from typing import Any, Callable

from omegaconf import open_dict

#: the config keys this module reads (declared in experiments/config.py RunConfig)
REPEAT, REPEATS, INTERLEAVE = "repeat", "repeats", "interleave"


def repeat_sweep(repeats, interleave=True) -> str:
    """The value of ``hydra.sweeper.params.repeat`` (resolver ``${repeat_sweep:${repeats},${interleave}}``):
    ``0,1,...,R-1`` (one job per repeat, outermost) when interleaving, else ``0`` (each job runs its R repeats)."""
    try:
        r = int(repeats)
    except (TypeError, ValueError):
        raise ValueError(f"repeats={repeats!r}: write a whole number >= 1") from None
    if r < 1:
        raise ValueError(f"repeats={r}: write a whole number >= 1 (1: each cell once)")
    return ",".join(str(k) for k in range(r)) if (r > 1 and _truthy(interleave)) else "0"


def _truthy(value) -> bool:
    return str(value).strip().lower() not in ("false", "0", "no", "none")


def _interleaved_job(cfg) -> bool:
    """True inside a Hydra multirun job of an interleaved ``repeats`` sweep: the sweep made one job per repeat."""
    if not _truthy(cfg.get(INTERLEAVE, True)):
        return False
    try:
        from hydra.core.hydra_config import HydraConfig
        from hydra.types import RunMode
    except ImportError:   # pragma: no cover - hydra is a dependency
        return False
    return HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN


def repeat_configs(cfg) -> list:
    """The configs of the repeats ``cfg`` asks for, each with ``repeats=1`` and its own ``repeat``: repeats
    ``repeat`` .. ``repeat + repeats - 1``; inside an interleaved sweep's job, its one repeat (``repeat``)."""
    first, count = int(cfg.get(REPEAT, 0)), int(cfg.get(REPEATS, 1))
    todo = [first] if _interleaved_job(cfg) else list(range(first, first + count))
    out = []
    for r in todo:
        sub = copy.deepcopy(cfg)   # a shallow copy would share its value nodes with cfg
        with open_dict(sub):
            sub[REPEAT], sub[REPEATS] = r, 1
        out.append(sub)
    return out


def run_repeats(cfg, run: Callable) -> Any:
    """Run the repeats of ``cfg`` (:func:`repeat_configs`) one after the other with ``run`` (the runner's ``run``);
    returns the last one's folder. Each repeat resumes on its own (a finished one is kept)."""
    out = None
    for sub in repeat_configs(cfg):
        out = run(sub)
    return out
