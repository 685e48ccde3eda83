"""Shared fixtures. The data root is ``$GCDBENCH_DATA_ROOT`` or ``../shared/data`` beside the checkout."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DEFAULT_DATA_ROOT = REPO.parent / "shared" / "data"


def pytest_collection_modifyitems(items):
    """Tests marked ``first`` (a subprocess of half a minute or more, no shared fixtures; or one of two that share a
    long cold compile) run before the rest: under ``-n auto --dist worksteal`` the first worker's share starts with
    all of them (two that share a compile pay it once, there), and a long test left to the end would keep one
    worker busy alone for its whole length; started first, the other worker's queue and work stealing even the two
    out. The order is fixed, so every worker collects the same list."""
    items.sort(key=lambda item: item.get_closest_marker("first") is None)


def _data_root() -> Path:
    return Path(os.environ.get("GCDBENCH_DATA_ROOT", DEFAULT_DATA_ROOT))


@pytest.fixture(scope="session")
def data_root() -> Path:
    root = _data_root()
    if not (root / "spider").exists() and not (root / "treebank").exists():
        pytest.skip(f"no downloaded data under {root} (set GCDBENCH_DATA_ROOT; see README 'Data')")
    return root


@pytest.fixture(scope="session")
def bytes_tokenizer():
    from gcdbench.parsers.tokenizers import byte_level

    return byte_level()


@pytest.fixture(scope="session")
def qwen3_tokenizer():
    from gcdbench.parsers.tokenizers import qwen3

    return qwen3()


@pytest.fixture
def letters(tmp_path) -> list[str]:
    """Dataset overrides: lowercase words, samples ``abc de``, ``azb``, ``xy`` (sample 1 holds the faulty engines'
    trigger letter 'z'); tests/runconf.py."""
    from runconf import LETTERS, words

    return words(tmp_path, *LETTERS)
