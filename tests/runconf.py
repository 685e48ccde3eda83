"""The run configs and small datasets the runner's tests compose (one copy: test_runner, test_batch, test_faults,
test_grouped, test_jit_in_init, test_numba_cache_faults, test_custom_data, test_notebook).

    make_cfg(out_dir, *overrides)            # conf/config.yaml with progress off and the 256-byte vocabulary
    make_cfg = cfg_maker("audit.per_sample=0")   # the same with a module's own defaults before the test's
    words(folder, "abc de", "azb")           # a lowercase-words grammar and these samples: dataset overrides
    outcomes(out)                            # {sample_id: outcome} of a finished cell

The ``letters`` fixture (tests/conftest.py) is ``words(tmp_path, *LETTERS)``."""
from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
#: every runner test's base: no progress bar, the 256-byte vocabulary (fast to build, no download)
BASE = ("progress=false", "tokenizer=bytes")
#: the ``letters`` fixture's samples: sample 1 holds the faulty engines' trigger letter 'z' (tests/faulty_engines.py)
LETTERS = ("abc de", "azb", "xy")
WORDS_GRAMMAR = 'start: WORD (" " WORD)*\nWORD: /[a-z]+/\n'


def make_cfg(out_dir, *overrides):
    """The composed run config writing under ``out_dir``: :data:`BASE`, then ``overrides`` (later ones win)."""
    from hydra import compose, initialize_config_dir

    from gcdbench.experiments.config import register

    register()
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        return compose(config_name="config", overrides=[f"out_dir={out_dir}", *BASE, *overrides])


def cfg_maker(*defaults):
    """:func:`make_cfg` with ``defaults`` between :data:`BASE` and each call's own overrides."""
    def cfg(out_dir, *overrides):
        return make_cfg(out_dir, *defaults, *overrides)

    cfg.__doc__ = f"make_cfg(out_dir, {', '.join(map(repr, defaults))}, *overrides)"
    return cfg


def words(folder: Path, *samples: str, name: str = "letters") -> list[str]:
    """``folder/<name>.lark`` (lowercase words separated by one space) and ``folder/<name>.txt`` (one sample a
    line); the dataset overrides that select them."""
    g, s = Path(folder) / f"{name}.lark", Path(folder) / f"{name}.txt"
    g.write_text(WORDS_GRAMMAR)
    s.write_text("".join(f"{x}\n" for x in samples))
    return ["dataset=custom", f"dataset.grammar={g}", f"dataset.samples={s}"]


def outcomes(out: Path) -> dict:
    """``{sample_id: outcome}`` of the cell in ``out``."""
    import pandas as pd

    df = pd.read_parquet(Path(out) / "samples.parquet")
    return dict(zip(df["sample_id"], df["outcome"]))
