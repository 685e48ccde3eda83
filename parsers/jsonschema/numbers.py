"""JSON numbers as regexes: integers within bounds exactly, reals with their sign bound only.

* ``integer`` is written without fraction or exponent (``1.0`` is not an integer here, as in LLGuidance and
  XGrammar; JSON Schema counts it as one), ``-0`` is allowed only where no bound applies.
* Integer ``minimum``/``maximum``/``exclusiveMinimum``/``exclusiveMaximum`` (draft-4 booleans or draft-6 numbers)
  are exact: the regex of the decimal texts of the integers in ``[lo, hi]`` (either end may be open);
  non-integer bounds are rounded inwards first.
* ``number`` bounds are over-approximated: only the sign they force is kept (``minimum >= 0``: no leading ``-``;
  ``maximum < 0``: a leading ``-``); the magnitude is not bounded. ``multipleOf`` is ignored (over-approximation).
"""
from __future__ import annotations

import math
import re

INTEGER = r"-?(?:0|[1-9][0-9]*)"
FRACTION_EXP = r"(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?"
NUMBER = INTEGER + FRACTION_EXP
NONNEG_NUMBER = r"(?:0|[1-9][0-9]*)" + FRACTION_EXP
NEG_NUMBER = r"-(?:0|[1-9][0-9]*)" + FRACTION_EXP


def _same_len(a: str, b: str) -> list[str]:
    """Regexes (alternatives) of the digit strings of ``len(a)`` digits between ``a`` and ``b`` inclusive."""
    if not a:
        return [""]
    if a[0] == b[0]:
        return [a[0] + r for r in _same_len(a[1:], b[1:])]
    n = len(a) - 1
    out = []
    lo_rest_full, hi_rest_full = a[1:] == "0" * n, b[1:] == "9" * n
    first_lo = int(a[0]) if lo_rest_full else int(a[0]) + 1
    last_hi = int(b[0]) if hi_rest_full else int(b[0]) - 1
    if not lo_rest_full:
        out += [a[0] + r for r in _same_len(a[1:], "9" * n)]
    if first_lo <= last_hi:
        d = str(first_lo) if first_lo == last_hi else f"[{first_lo}-{last_hi}]"
        out.append(d + ("[0-9]" * n if n <= 3 else f"[0-9]{{{n}}}"))
    if not hi_rest_full:
        out += [b[0] + r for r in _same_len("0" * n, b[1:])]
    return out


def _nonneg(lo: int, hi: int | None) -> list[str]:
    """Alternatives for the canonical texts of integers in ``[lo, hi]``, ``0 <= lo``, ``hi`` None = open."""
    out = []
    if lo == 0:
        out.append("0")
        lo = 1
        if hi == 0:
            return out
    if hi is not None and hi < lo:
        return out
    a = str(lo)
    top = len(str(hi)) if hi is not None else len(a)
    for n in range(len(a), top + 1):
        x = a if n == len(a) else "1" + "0" * (n - 1)
        y = str(hi) if (hi is not None and n == len(str(hi))) else "9" * n
        out += _same_len(x, y)
    if hi is None:
        out.append(f"[1-9][0-9]{{{len(a)},}}")
    return out


def _width(alt: str) -> int:
    """How many digits an alternative of :func:`_nonneg` matches (open-ended: a large number)."""
    w = 0
    for m in re.finditer(r"(\[[^\]]*\]|[0-9])(?:\{(\d+)(,?)\})?", alt):
        if m.group(3):
            return 10**6
        w += int(m.group(2)) if m.group(2) else 1
    return w


def integer_regex(lo: float | None, hi: float | None) -> str | None:
    """Regex of the integers in ``[lo, hi]`` (None = unbounded); None when the range is empty."""
    lo_i = None if lo is None else math.ceil(lo)
    hi_i = None if hi is None else math.floor(hi)
    if lo_i is None and hi_i is None:
        return INTEGER
    if lo_i is not None and hi_i is not None and lo_i > hi_i:
        return None
    alts = []
    if hi_i is None or hi_i >= 0:   # the non-negative part
        alts += _nonneg(max(lo_i, 0) if lo_i is not None else 0, hi_i)
    if lo_i is None or lo_i < 0:    # the negative part: -x with x in [max(1, -hi), -lo]
        neg_lo = 1 if hi_i is None or hi_i >= 0 else -hi_i
        neg_hi = None if lo_i is None else -lo_i
        alts += ["-" + (r if "|" not in r else f"(?:{r})") for r in _nonneg(neg_lo, neg_hi) if r != "0"]
    if not alts:
        return None
    # longest texts first: Lark's lexers take a regex's leftmost-first match, not its longest
    alts.sort(key=lambda r: -_width(r))
    return alts[0] if len(alts) == 1 else "(?:" + "|".join(alts) + ")"


def bounds(schema: dict) -> tuple[float | None, float | None, bool, bool]:
    """``(lo, hi, lo_exclusive, hi_exclusive)`` from draft-4 (boolean exclusive*) or draft-6+ (numeric) keywords."""
    lo, hi = schema.get("minimum"), schema.get("maximum")
    lo_x = hi_x = False
    ex_lo, ex_hi = schema.get("exclusiveMinimum"), schema.get("exclusiveMaximum")
    if ex_lo is True:
        lo_x = lo is not None
    elif isinstance(ex_lo, (int, float)) and not isinstance(ex_lo, bool):
        if lo is None or ex_lo >= lo:
            lo, lo_x = ex_lo, True
    if ex_hi is True:
        hi_x = hi is not None
    elif isinstance(ex_hi, (int, float)) and not isinstance(ex_hi, bool):
        if hi is None or ex_hi <= hi:
            hi, hi_x = ex_hi, True
    lo = lo if isinstance(lo, (int, float)) and not isinstance(lo, bool) else None
    hi = hi if isinstance(hi, (int, float)) and not isinstance(hi, bool) else None
    return lo, hi, lo_x, hi_x


def integer_for(schema: dict) -> str | None:
    lo, hi, lo_x, hi_x = bounds(schema)
    if lo is not None and (math.isinf(lo) or abs(lo) > 1e30):
        lo = None
    if hi is not None and (math.isinf(hi) or abs(hi) > 1e30):
        hi = None
    if lo is not None and lo_x and lo == math.floor(lo):
        lo = lo + 1
    if hi is not None and hi_x and hi == math.floor(hi):
        hi = hi - 1
    return integer_regex(lo, hi)


def number_for(schema: dict) -> str:
    lo, hi, lo_x, hi_x = bounds(schema)
    if lo is not None and lo >= 0:
        return NONNEG_NUMBER
    if hi is not None and (hi < 0 or (hi == 0 and hi_x)):
        return NEG_NUMBER
    return NUMBER
