"""Engine registry: a name maps to ``"module:Class"``, imported only when that engine is selected."""
from __future__ import annotations

import importlib

from gcdbench.parsers.base import Engine

ENGINES: dict[str, str] = {
    "xgrammar": "gcdbench.parsers.xgrammar_engine:XGrammarEngine",
    "llguidance": "gcdbench.parsers.llguidance_engine:LLGuidanceEngine",
    "valiant": "gcdbench.parsers.valiant.engine:ValiantEngine",
    "psc": "gcdbench.parsers.psc.engine:PSCEngine",
    "pre3": "gcdbench.parsers.pre3.engine:Pre3Engine",
    "cfgzip": "gcdbench.parsers.cfgzip_engine:CFGzipEngine",
    "glrmask": "gcdbench.parsers.glrmask_engine:GLRMaskEngine",
    "reference": "gcdbench.parsers.reference:ReferenceEngine",
    "kbnf": "gcdbench.parsers.kbnf_engine:KbnfEngine",
    "llamacpp": "gcdbench.parsers.llamacpp_engine:LlamaCppEngine",
    "syncode": "gcdbench.parsers.syncode_engine:SynCodeEngine",
}


def engine_class(name: str) -> type[Engine]:
    """The class registered as ``name``; ``"package.module:Class"`` also works, for engines kept elsewhere."""
    target = name if ":" in name else ENGINES.get(name)
    if target is None:
        raise ValueError(f"unknown engine {name!r}; valid: {sorted(ENGINES)} or 'package.module:Class'")
    module, _, cls = target.partition(":")
    try:
        mod = importlib.import_module(module)
    except ModuleNotFoundError as err:
        raise ValueError(f"engine {name!r} could not be imported ({err}); is its package installed?") from err
    got = getattr(mod, cls, None)
    # checked before anything calls it: engine.name=os:system names a function, not an engine (issue 27, item 7)
    if not (isinstance(got, type) and issubclass(got, Engine)):
        raise ValueError(f"engine {name!r}: {module}.{cls} is "
                         + ("missing" if got is None else f"a {type(got).__name__}, not a subclass of "
                            "gcdbench.parsers.base.Engine") + f"; valid: {sorted(ENGINES)} or 'package.module:Class'")
    return got


def create_engine(name: str, **options) -> Engine:
    return engine_class(name)(**options)


def available() -> list[str]:
    """Engines whose module imports on this machine."""
    out = []
    for name in ENGINES:
        try:
            engine_class(name)
            out.append(name)
        except ValueError:
            pass
    return out
