"""A damaged numba cache file (issue 64, item 5): cut short by a full disk or a killed write, or overwritten, numba
fails on every load of it and never writes it again. The worker removes that function's cache files, compiles
again and records the repair; a sample that crashed on one (a function first loaded inside a mask) is run again by
a resume."""
from __future__ import annotations

import json

import pandas as pd
import pytest

from gcdbench.experiments.jitwatch import DAMAGED_CACHE
from gcdbench.experiments.runner import run
from runconf import make_cfg

pytestmark = pytest.mark.faults


def _files(nb, ext):
    got = sorted(nb.rglob(f"faulty_engines.cached_plus_one-*.{ext}"))
    assert got, f"no numba cache file *.{ext} under {nb}"
    return got


def _cell(tmp_path, name, letters, *extra):
    return run(make_cfg(tmp_path / name, "engine=reference", *letters, "samples=all", *extra))


def test_a_damaged_cache_file_is_removed_and_compiled_again_in_init(tmp_path, monkeypatch, letters):
    """Each damage in turn (the data file cut short, the index overwritten), in one numba cache: the next cell's
    init repairs it, and numba writes the files anew (the next damage finds them; after the last repair a cell has
    nothing to repair)."""
    nb = tmp_path / "numba"
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(nb))
    engine = "engine.name=tests.faulty_engines:CachedJitEngine"
    _cell(tmp_path, "first", letters, engine)           # writes the cache
    for damage in ("truncated data", "garbage index"):
        if damage == "truncated data":
            (f,) = _files(nb, "nbc")
            f.write_bytes(f.read_bytes()[: f.stat().st_size // 2])
        else:
            (f,) = _files(nb, "nbi")
            f.write_bytes(b"\x80\x04 not a pickle")
        out = _cell(tmp_path, "after-" + damage.replace(" ", "-"), letters, engine)
        assert set(pd.read_parquet(out / "samples.parquet")["outcome"]) == {"ok"}, damage
        (init,) = json.loads((out / "run.json").read_text())["inits"]
        (line,) = init["numba_cache_repaired"]
        assert DAMAGED_CACHE in line and "cached_plus_one" in line and "removed" in line, (damage, line)
    again = _cell(tmp_path, "third", letters, engine)   # numba wrote the files anew: nothing to repair
    assert "numba_cache_repaired" not in json.loads((again / "run.json").read_text())["inits"][0]


def test_a_sample_that_crashed_on_a_damaged_cache_is_run_again_by_a_resume(tmp_path, monkeypatch, letters):
    nb = tmp_path / "numba"
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(nb))
    engine = ["engine.name=tests.faulty_engines:LazyCachedJitEngine", "warmup=false"]
    _cell(tmp_path, "first", letters, *engine)
    (f,) = _files(nb, "nbc")
    f.write_bytes(f.read_bytes()[:10])
    out = _cell(tmp_path, "second", letters, *engine)
    samples = pd.read_parquet(out / "samples.parquet")
    crashed = samples[samples["outcome"] == "crash"]
    assert len(crashed) == 1 and DAMAGED_CACHE in crashed["message"].iloc[0], samples[["outcome", "message"]]
    assert (samples["outcome"] == "ok").sum() == len(samples) - 1   # loaded fine after the repair
    _cell(tmp_path, "second", letters, *engine)          # resume: the crash is run again
    after = pd.read_parquet(out / "samples.parquet")
    assert set(after["outcome"]) == {"ok"} and len(after) == len(samples)
