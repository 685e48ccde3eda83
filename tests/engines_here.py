"""Which registered engines import on this machine, for parametrized tests.

An engine of the project's own dependencies that does not import is a failure; an optional engine (an extra the
README installs by hand) that is absent becomes a skip that names what to install."""
from __future__ import annotations

import pytest

from gcdbench.parsers.registry import ENGINES, engine_class

OPTIONAL_ENGINES = {"llamacpp", "syncode", "genlm", "transformers_cfg"}   # extras installed by hand (README "Other engines")


def engine_params(names=None, where=None) -> list:
    """``pytest.param`` per engine name (all registered ones by default); an absent optional engine is skipped
    with its import error, and ``where(cls)`` (if given) keeps only the classes it accepts."""
    out = []
    for name in sorted(ENGINES if names is None else names):
        try:
            cls = engine_class(name)
        except ValueError as err:
            if name not in OPTIONAL_ENGINES:
                raise   # a dependency of the project that does not import is a failure, not a skip
            out.append(pytest.param(name, id=name, marks=pytest.mark.skip(reason=f"optional engine absent: {err}")))
            continue
        if where is None or where(cls):
            out.append(pytest.param(name, id=name))
    return out


def installed(name: str) -> bool:
    try:
        engine_class(name)
        return True
    except ValueError:
        if name not in OPTIONAL_ENGINES:
            raise
        return False
