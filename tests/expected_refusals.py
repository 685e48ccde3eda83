"""The one table of grammars an engine is expected to refuse, shared by the engine tests.

A test compiles through :func:`compile_or_refuse`: a ``CompileError`` listed here (engine or preset, grammar
case, and a substring of its reason) is the expected result, and the test asserts it instead of skipping;
any other ``CompileError`` fails the test (a broken converter shows as a failure), and so does a listed
refusal that no longer happens (the table cannot go stale).
"""
from __future__ import annotations

import pytest

from gcdbench.parsers.base import CompileError

# (engine or preset, grammar case) -> substring of the CompileError's message
EXPECTED_REFUSALS: dict[tuple[str, str], str] = {
    ("psc", "ambiguous"): "not LALR(1)",            # PSC takes LALR(1) grammars only
    ("pre3", "ambiguous"): "not LALR(1)",           # so does Pre³ (its DPDA comes from the LALR(1) automaton)
    # llama.cpp's grammar sampler refuses left-recursive rules
    **{(e, c): "left recursion" for e in ("llamacpp", "transformers_cfg") for c in ("ambiguous", "ambiguous_expr", "ambiguous_ternary",
                                                     "ambiguous_concat")},
    ("syncode", "ambiguous_ternary"): "Reduce/Reduce",   # SynCode's Lark LALR(1) tables
    # the ambiguity family of the grammar suite (tests/test_suite.py)
    **{(e, f"ambiguous_{k}"): "not LALR(1)" for e in ("psc", "pre3") for k in ("expr", "ternary", "concat")},
}


def compile_or_refuse(engine, name: str, case: str, grammar, tokenizer) -> bool:
    """Compile ``engine`` (registered or preset as ``name``) on ``grammar`` (case ``case``).

    True: it compiled and was not expected to refuse. False: it refused exactly as the table says (the
    caller stops; the refusal is what was tested). Anything else fails the test.
    """
    why = EXPECTED_REFUSALS.get((name, case))
    try:
        engine.compile(grammar, tokenizer)
    except CompileError as err:
        if why is None:
            pytest.fail(f"{name} refused {case}, which is not an expected refusal: {err}")
        assert why in str(err), f"{name} refused {case} for another reason than {why!r}: {err}"
        return False
    if why is not None:
        pytest.fail(f"{name} compiled {case}, expected a refusal ({why!r}): update EXPECTED_REFUSALS")
    return True
