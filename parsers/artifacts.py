"""On-disk cache of an engine's compiled artifact (a picklable dict), shared by the engines that keep one.

The file name carries everything the artifact depends on: the grammar's and the tokenizer's content keys, the
engine's own options that change it, the engine's artifact format, and the regex semantics of the shared
terminal automata (``regex_fsm.SEMANTICS``), so a change of any of them never reads a stale file. Writes are
atomic (a temporary file, then a rename), so concurrent runs never read half a file.
"""
from __future__ import annotations

import os
import pickle
from pathlib import Path

from gcdbench.parsers.base import cache_dir_of


def artifact_path(engine: str, cache_dir, grammar, tokenizer, *parts, fmt: int) -> Path:
    """``<cache_dir or $GCDBENCH_CACHE/<engine>>/<grammar key>-<tokenizer key>-<parts>-v<fmt>-<semantics>.pkl``."""
    from gcdbench.parsers.regex_fsm import SEMANTICS

    root = cache_dir_of(engine, cache_dir)
    return root / "-".join([grammar.key(), tokenizer.key(), *map(str, parts), f"v{fmt}", SEMANTICS + ".pkl"])


def load_artifact(path: Path, fmt: int):
    """The cached artifact at ``path`` if it exists, reads and has format ``fmt``; else None (rebuild it)."""
    if not path.exists():
        return None
    try:
        with open(path, "rb") as fh:
            art = pickle.load(fh)
    except Exception:   # a truncated or foreign file: rebuilt and overwritten
        return None
    return art if isinstance(art, dict) and art.get("format") == fmt else None


def save_artifact(path: Path, art: dict) -> None:
    """Write ``art`` atomically; a cache that cannot be written is skipped (the run goes on without it)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        with open(tmp, "wb") as fh:
            pickle.dump(art, fh, protocol=5)
        os.replace(tmp, path)
    except OSError:
        pass
