"""The A/B benches through gcdbench-compare (issue 66): bench files (``experiments/bench.py --out``) compared as
result folders are -- ratio, 95% interval, verdict -- and the interleaved batch A/B's own ratios from the same
functions. Hand-made bench files with drawn times: no engine, nothing timed."""
from __future__ import annotations

import json

import numpy as np
import pytest

from gcdbench.experiments import bench, compare, schema
from gcdbench.experiments.report import stats


def _doc(path, records):
    path.write_text(json.dumps({"schema_version": schema.SCHEMA_VERSION, "command": "test", "records": records}))
    return path


def _masks(rng, scale: float, threads: int = 1, samples: int = 12, masks: int = 30) -> dict:
    """A ``bench masks --keep-masks`` record: per sample its own level, log-normal masks."""
    by_sample = [list(np.round(scale * (1 + s % 3) * rng.lognormal(0, 0.2, masks), 2)) for s in range(samples)]
    return {"dataset": "spider", "tokenizer": "qwen3", "engine": "valiant", "options": {"threads": threads},
            "samples": samples, "mask_mean_us": float(np.mean(np.concatenate(by_sample))),
            "mask_us_by_sample": by_sample}


def _steps(rng, scale: float, threads: int, steps: int = 200) -> dict:
    """An interleaved ``bench batch`` record at B=8: per-step times with a slow drift both sets share."""
    drift = 1 + 0.2 * np.sin(np.arange(steps) / 15)
    step = scale * drift * rng.lognormal(0, 0.1, steps)
    return {"dataset": "treebank", "tokenizer": "qwen3", "engine": "valiant", "options": {"threads": threads},
            "B": 8, "processes": 1, "steps": steps, "interleaved": ['{"threads": 1}', '{"threads": 2}'],
            "step_us_series": list(np.round(step, 2)), "commit_us_series": list(np.round(step * 0.3, 2))}


def test_bench_files_compare_with_repeats_and_a_verdict(tmp_path, capsys):
    """Bench masks files alternated over time (base, new, new, base, base, new): base against new, each file one
    repeat, paired by sample; NEW 1.3x slower is found slower, the same process against itself is not. (Two files a
    side would give intervals too wide for a verdict: stats widens them by Student's t with one degree of freedom.)"""
    rng = np.random.default_rng(4)
    base = [_doc(tmp_path / f"r{k}_base.json", [_masks(rng, 10.0)]) for k in (1, 4, 5)]
    new = [_doc(tmp_path / f"r{k}_new.json", [_masks(rng, 13.0)]) for k in (2, 3, 6)]
    old_arg, new_arg = ",".join(map(str, base)), ",".join(map(str, new))
    table, notes = compare.compare(old_arg, new_arg, resamples=500)
    by = table.set_index("statistic")
    assert list(by.index) == ["mean", "p50", "p99", "p99.9"] and (table["old_repeats"] == 3).all()
    assert by.loc["p50", "verdict"] == by.loc["mean", "verdict"] == "slower" and 1.15 < by.loc["p50", "ratio"] < 1.45
    assert bool(by.loc["p50", "paired_samples"]) and bool(by.loc["p50", "paired_repeats"])
    assert by.loc["p50", "ratio_lo"] <= by.loc["p50", "ratio"] <= by.loc["p50", "ratio_hi"]
    same = [_doc(tmp_path / f"r{k}_same.json", [_masks(rng, 10.0)]) for k in (7, 8, 9)]
    aa, _ = compare.compare(old_arg, ",".join(map(str, same)), resamples=500)
    assert set(aa["verdict"]) == {"~"}, aa
    assert compare.main([old_arg, new_arg, "--resamples", "200", "--fail-on-slower", "1.05"]) == 1
    assert "valiant (threads=1)" in capsys.readouterr().out


def test_interleaved_batch_file_compares_its_two_sets(tmp_path):
    """One interleaved run: its two sets of step times, per B, paired step by step (blocks of STEP_BLOCK steps)."""
    rng = np.random.default_rng(7)
    f = _doc(tmp_path / "ab.json", [_steps(rng, 100.0, 1), _steps(rng, 60.0, 2)])
    configs = stats.bench_configs([f])
    assert sorted(configs) == [("treebank B=8", "qwen3", "valiant (threads=1)"),
                               ("treebank B=8", "qwen3", "valiant (threads=2)")]
    one = configs[("treebank B=8", "qwen3", "valiant (threads=1)")]
    assert len(one.sample_ids) == 200 // stats.STEP_BLOCK and one.n_repeats == 1
    table, _ = compare.compare(f, f, "valiant (threads=1)", "valiant (threads=2)", resamples=500)
    by = table.set_index("statistic")
    assert by.loc["p50", "verdict"] == "faster" and 0.5 < by.loc["p50", "ratio"] < 0.7
    assert bool(by.loc["p50", "paired_samples"])


def test_the_interleaved_bench_records_its_ratios_as_compare_gives_them():
    """bench.ab_ratios: the second set's record gets ``ab`` (step, and step with commits) against the first, the
    same ratios and verdicts compare computes; the first set's record none; records without series are left."""
    rng = np.random.default_rng(9)
    recs = [_steps(rng, 100.0, 1), _steps(rng, 130.0, 2), {"dataset": "x", "engine": "psc", "B": 1}]
    lines = bench.ab_ratios(recs, resamples=400)
    assert "ab" not in recs[0] and "ab" not in recs[2]
    ab = recs[1]["ab"]
    assert ab["against"] == "valiant (threads=1)" and ab["block_steps"] == stats.STEP_BLOCK
    assert [r["statistic"] for r in ab["step_us"]] == list(stats.STATS) == [r["statistic"]
                                                                            for r in ab["step_with_commit_us"]]
    p50 = {r["statistic"]: r for r in ab["step_us"]}["p50"]
    assert p50["verdict"] == "slower" and p50["ratio_lo"] <= p50["ratio"] <= p50["ratio_hi"]
    old, new = (stats.steps_config("treebank B=8", "qwen3", stats.bench_label(r), [r["step_us_series"]])
                for r in recs[:2])
    want = {r["statistic"]: r for r in stats.ratios(old, new, 400)}["p50"]
    assert p50["ratio"] == pytest.approx(want["ratio"], rel=1e-3) and p50["verdict"] == want["verdict"]
    assert lines == [l for l in lines if l.startswith("A/B valiant (threads=2) / valiant (threads=1) on treebank B=8")]
    assert len(lines) == 1 and "p50 " in lines[0]


def test_a_bench_file_without_times_is_one_clear_line(tmp_path, capsys):
    old = _doc(tmp_path / "old.json", [{"dataset": "spider", "tokenizer": "qwen3", "engine": "valiant",
                                        "mask_mean_us": 80.0}])
    assert compare.main([str(old).replace("old", "new"), str(old), "--resamples", "200"]) == 2
    assert "no bench file" in capsys.readouterr().err
    assert compare.main([str(old), str(old), "--old", "a", "--new", "b"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: no record with per-mask or per-step times") and "--keep-masks" in err
    assert "\n" not in err


def test_masks_by_sample_splits_at_each_empty_prefix():
    prefix = np.array([0, 1, 2, 0, 1, 0])
    us = np.array([1.0, 2.0, 3.004, 4.0, 5.0, 6.0])
    assert bench.masks_by_sample(prefix, us) == [[1.0, 2.0, 3.0], [4.0, 5.0], [6.0]]


def test_bench_files_keep_number_lists_on_one_line(tmp_path):
    """benchfile.write_bench: the per-step and per-mask series take one line each, the JSON value unchanged (a
    string that looks like a list is left as it is)."""
    from gcdbench.experiments import benchfile

    doc = {"records": [{"step_us_series": [1.5, -2.0, 3e-05], "mask_us_by_sample": [[1.0, 2.0], [3.25]],
                        "note": "[1, 2]", "text": "a [\n1, 2]", "mixed": ["x", 1], "nan": [float("nan"), 1.0]}]}
    text = json.dumps(doc, indent=1)
    compact = benchfile.compact_number_lists(text)
    assert json.dumps(json.loads(compact)) == json.dumps(doc)
    assert '"step_us_series": [1.5,-2.0,3e-05]' in compact and "  [1.0,2.0]," in compact
    assert '"note": "[1, 2]"' in compact and len(compact.splitlines()) < len(text.splitlines())
