"""Slow engines for the SLURM fault tests (tests/test_slurm.py): the null engine plus a sleep of ``DELAY_S`` per
mask, so a cell lasts long enough to be cancelled, drained or timed out in the middle. Selected as
``engine=null_engine engine.name=tests.slurm_engine:<Class>`` (the worker imports them from the repository root,
as tests/delay_engine.py). A sleep rather than a busy wait: the machine's cores are shared."""
from __future__ import annotations

import time

from gcdbench.parsers.null_engine import NullEngine


class _Slow(NullEngine):
    DELAY_S = 0.0

    def fill_mask(self, out) -> None:
        super().fill_mask(out)
        time.sleep(self.DELAY_S)


class Slow5ms(_Slow):
    name = "slow5ms"
    DELAY_S = 0.005


class Slow50ms(_Slow):
    name = "slow50ms"
    DELAY_S = 0.05
