"""Engines with a known cost, for the statistics tests (issue 66): the null engine (it copies an all-allowed mask)
plus a busy wait of ``DELAY_US`` microseconds inside ``fill_mask``, so two of them differ by a known factor.
Selected as ``engine=null_engine engine.name=tests.delay_engine:<Class>`` (the worker imports them from the
repository root); ``Delay40`` against ``Delay52`` is a 1.3x slowdown of the wait (the harness's floor of about a
microsecond on top of both makes the ratio of the measured times slightly below 1.3)."""
from __future__ import annotations

import time

from gcdbench.parsers.null_engine import NullEngine


class _Delay(NullEngine):
    DELAY_US = 0.0

    def fill_mask(self, out) -> None:
        end = time.perf_counter() + self.DELAY_US * 1e-6
        super().fill_mask(out)
        while time.perf_counter() < end:
            pass


class Delay40(_Delay):
    name = "delay40"
    DELAY_US = 40.0


class Delay52(_Delay):
    name = "delay52"
    DELAY_US = 52.0
