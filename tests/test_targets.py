"""``targets.callee_jit``: a function called from jitted code with different constants compiles once (numba would
otherwise compile it again for every literal value a call site passes)."""
from __future__ import annotations

import numba

from gcdbench.parsers.targets import callee_jit


def test_callee_jit_compiles_once_whatever_constants_callers_pass():
    def add(a, flag):
        return a + 1 if flag else a

    plain = numba.njit(add)
    once = callee_jit()(add)

    @numba.njit
    def call_plain():
        return plain(0, True) + plain(5, False) + plain(7, True)

    @numba.njit
    def call_once():
        return once(0, True) + once(5, False) + once(7, True)

    assert call_plain() == call_once() == 14
    assert len(plain.signatures) > 1        # the literal copies this helper exists to avoid
    assert len(once.signatures) == 1
