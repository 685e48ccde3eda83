"""No compilation inside a timed mask (issue 64): the worker's numba listener marks any mask inside whose timer
numba loaded or compiled code, the report leaves such masks out of the per-mask statistics and says so, and our
numba engines (Valiant, Pre³) pay every load and compile of their mask and commit paths in init, even from an empty
numba cache."""
from __future__ import annotations

import json
from pathlib import Path

import numba
import pandas as pd
import pytest

from gcdbench.experiments.jitwatch import JitWatch
from gcdbench.experiments.report.cells import cell_summary
from gcdbench.experiments.report.collect import cell_stats
from gcdbench.experiments.report.text import jit_note
from gcdbench.experiments.runner import run
from runconf import make_cfg

REPO = Path(__file__).resolve().parents[1]


def test_the_watch_sees_a_compile_and_not_a_call():
    w = JitWatch().install()
    f = numba.njit(lambda x: x * 2)
    before = w.snapshot()
    f(3)
    got = w.since(before)
    assert got["jit_locks"] >= 1 and got["jit_compiles"] == 1 and got["jit_s"] > 0
    assert any("test_jit_in_init" in name for name in got["jit_functions"]), got
    again = w.snapshot()
    f(4)   # machine code in memory: no lock
    assert w.since(again)["jit_locks"] == 0


def test_a_mask_that_compiles_is_marked_left_out_and_reported(tmp_path, letters):
    cfg = make_cfg(tmp_path, "engine=reference", "engine.name=tests.faulty_engines:LateJitEngine", *letters,
                   "samples=all", "warmup=false")
    out = run(cfg)
    steps = pd.read_parquet(out / "steps.parquet")
    hit = steps[steps["jit"] > 0]
    # 'azb': the step after committing 'z' compiled inside its timer; no other step did
    assert len(hit) == 1 and hit["sample_id"].tolist() == [s for s in steps["sample_id"].unique() if "0001" in s]
    c = cell_stats(out)
    assert c["jit_masks"] == 1 and c["mask_n"] == len(steps) - 1
    assert "1 more compiled inside the timer, left out" in cell_summary(out)
    assert "1 mask compiled inside the timer" in jit_note(pd.DataFrame([c]))


#: where numba keeps each engine's kernels (numba's default cache: ``__pycache__`` beside the source file)
KERNELS = {"valiant": REPO / "parsers" / "valiant" / "store_mask.py",
           "pre3": REPO / "parsers" / "pre3" / "kernels.py"}


def _numba_cached(source: Path) -> bool:
    """Whether numba's cache holds any function of ``source`` (``$NUMBA_CACHE_DIR`` if set, else its default)."""
    import os

    root = Path(os.environ["NUMBA_CACHE_DIR"]) if os.environ.get("NUMBA_CACHE_DIR") else source.parent / "__pycache__"
    return root.exists() and any(root.rglob(f"{source.stem}.*.nbi"))


@pytest.mark.first
@pytest.mark.slow
@pytest.mark.parametrize("engine", ["valiant", "pre3"])
def test_our_engines_compile_in_init_from_an_empty_numba_cache(tmp_path, monkeypatch, engine):
    """A cell with numba's own cache (empty in a fresh clone, as in CI: the cold compile, which the other tests of
    the engine then load instead of compiling again) and an empty gcdbench cache: every load and compile happens in
    init, no timed mask takes numba's compiler lock, and the warm-up sample loads nothing either. Where the cache
    was empty, init compiled; where it was not (a developer's machine), init loaded every kernel."""
    monkeypatch.setenv("GCDBENCH_CACHE", str(tmp_path / "cache"))
    cold = not _numba_cached(KERNELS[engine])
    grammars = REPO / "tests" / "grammars"
    cfg = make_cfg(tmp_path / "out", f"engine={engine}", "dataset=custom",
                   f"dataset.grammar={grammars / 'tiny_sql.lark'}", f"dataset.samples={grammars / 'tiny_sql.txt'}",
                   "samples=all", "audit.per_sample=0",
                   "limits.compile_timeout_s=1200", "limits.sample_timeout_s=600")
    out = run(cfg)
    meta = json.loads((out / "run.json").read_text())
    (init,) = meta["inits"]
    assert init["jit_compile"]["jit_locks"] > 0, "init loaded nothing from numba's cache and compiled nothing"
    if cold:
        assert init["jit_compile"]["jit_compiles"] > 0, "an empty numba cache, yet nothing was compiled in init"
    assert init["jit_warmup"]["jit_locks"] == 0, init["jit_warmup"]
    steps = pd.read_parquet(out / "steps.parquet")
    assert len(steps) and (steps["jit"] == 0).all(), steps[steps["jit"] > 0]
    assert set(pd.read_parquet(out / "samples.parquet")["outcome"]) == {"ok"}


def test_cold_cells_start_with_empty_caches_and_get_their_own_section(tmp_path, letters):
    from gcdbench.experiments.report.build import write_report

    engine = ["engine=reference", "engine.name=tests.faulty_engines:CacheEnvEngine", *letters, "samples=all"]
    cached = run(make_cfg(tmp_path, *engine))
    cold = run(make_cfg(tmp_path, *engine, "cold=true"))
    assert cold.name == cached.name + "__cold"
    info = lambda d: json.loads((d / "run.json").read_text())["inits"][0]["engine_info"]   # noqa: E731
    got = info(cold)
    assert "gcdbench-cold-" in got["NUMBA_CACHE_DIR"] and "gcdbench-cold-" in got["GCDBENCH_CACHE"]
    assert not Path(got["NUMBA_CACHE_DIR"]).parent.exists(), "the cold worker's empty caches are removed after it"
    assert info(cached)["NUMBA_CACHE_DIR"] != got["NUMBA_CACHE_DIR"]
    assert json.loads((cold / "run.json").read_text())["identity"]["cold"] is True
    write_report(tmp_path, tmp_path / "report")
    csv = pd.read_csv(tmp_path / "report" / "coldstart.csv")
    assert len(csv) == 1 and csv["TTFM cached (s)"].notna().all() and csv["TTFM cold (s)"].notna().all()
    readme = (tmp_path / "report" / "README.md").read_text()
    assert "## Cold start" in readme
    every = pd.read_csv(tmp_path / "report" / "cells.csv")
    assert len(every) == 1, "the cold cell is the cold-start section's, not one of the per-mask tables' cells"
