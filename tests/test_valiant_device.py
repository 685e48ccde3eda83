"""Valiant's device logic across its two files (``device.py``, ``device_search.py``): the round-robin hand-out of a
bitset's set bits (``device._next_turn``, the step's rows and seeds) and ``for_cuda``'s refusal of a shared function
that would still call a CPU-compiled one. No compile of the step itself: both run as plain Python."""
from __future__ import annotations

import numba
import numpy as np
import pytest


def _turns(words, tid, nth):
    """The bits thread ``tid`` of ``nth`` takes, in order (``_next_turn`` run as Python)."""
    from gcdbench.parsers.valiant.device import _next_turn

    got, i, bits, skip = [], -1, np.uint64(0), tid
    while True:
        b, i, bits, skip = _next_turn.py_func(words, words.size, i, bits, skip, nth)
        if b < 0:
            return got
        got.append(int(b))


@pytest.mark.parametrize("nth", [1, 2, 3, 7, 64])
def test_each_thread_takes_every_nth_set_bit_in_order(nth):
    rng = np.random.default_rng(nth)
    for words in (rng.integers(0, 2**63, 5, dtype=np.uint64) | np.uint64(1 << 63),
                  np.array([0, 0, 5, 0], dtype=np.uint64), np.zeros(3, dtype=np.uint64),
                  np.array([0xFFFFFFFFFFFFFFFF, 1], dtype=np.uint64)):
        every = [w * 64 + k for w in range(words.size) for k in range(64) if (int(words[w]) >> k) & 1]
        for tid in range(nth):
            assert _turns(words, tid, nth) == every[tid::nth]


@numba.njit
def _cpu_only():
    return 1


def _calls_cpu_only():
    return _cpu_only()


def test_for_cuda_refuses_a_shared_function_that_calls_a_cpu_compiled_one(monkeypatch):
    from gcdbench.parsers.valiant import device_search

    monkeypatch.setattr(device_search, "SHARED", (numba.njit(_calls_cpu_only),))
    with pytest.raises(TypeError, match="_calls_cpu_only calls _cpu_only, compiled for the CPU only"):
        device_search.for_cuda({})
