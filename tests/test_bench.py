"""The one bench harness (``experiments/bench.py``) runs any engine from the registry on any registered dataset,
with engine options as overrides: a tiny run per mode (byte vocabulary, the bundled sample grammar); the
numbers are not checked, the records' shape and outcomes are."""
from __future__ import annotations

import json

import pytest

from gcdbench.experiments import bench


def _records(path):
    return json.loads(path.read_text())["records"]


def test_overrides_after_a_dataset_name_are_overrides(monkeypatch):
    """``--dataset custom dataset.grammar=G`` (as the docstring shows): the list option does not swallow them."""
    seen = {}

    def load(name, dopts, *args):
        seen[name] = dopts
        raise SystemExit("stop")

    monkeypatch.setattr(bench, "load", load)
    monkeypatch.setattr(bench, "time_masks", lambda *a: pytest.fail("time_masks after load"))
    with pytest.raises(SystemExit, match="stop"):
        bench.main(["masks", "--engine", "psc", "--dataset", "shapes", "dataset.family=ladder", "dataset.size=5",
                    "--tokenizer", "bytes", "leading_ignore=true"])
    assert seen == {"shapes": {"family": "ladder", "size": 5}}


def test_overrides_reach_each_engine_and_the_dataset():
    per_engine, dataset = bench.parse_overrides(["chunk=64", "psc.leading_ignore=true", "dataset.split=dev"],
                                                ["pre3", "psc"])
    assert per_engine == {"pre3": {"chunk": 64}, "psc": {"chunk": 64, "leading_ignore": True}}
    assert dataset == {"split": "dev"}
    with pytest.raises(SystemExit, match="not among --engine"):
        bench.parse_overrides(["valiant.threads=2"], ["psc"])
    with pytest.raises(ValueError, match="unknown option"):      # the engine's own check, before any data loads
        bench.option_sets("psc", {"chunk": 64}, None, [])
    assert bench.option_sets("psc", {}, None, ["pre3.context_split=false,true"]) == [{}]   # another engine's
    assert bench.option_sets("pre3", {}, None, ["pre3.context_split=false,true"]) == [
        {"context_split": False}, {"context_split": True}]
    sets = bench.option_sets("pre3", {}, 1, ["chunk=32,64"])
    assert sets == [{"threads": 1, "chunk": 32}, {"threads": 1, "chunk": 64}]


@pytest.mark.slow
def test_masks_and_batch_smoke(tmp_path):
    out = tmp_path / "masks.json"
    bench.main(["masks", "--engine", "psc", "--dataset", "sample", "--n", "2", "--tokenizer", "bytes", "--keep-masks",
                "--by-work", "--out", str(out)])
    (rec,) = _records(out)
    assert rec["engine"] == "psc" and rec["outcomes"] == {"ok": 2} and rec["steps"] > 2
    assert rec["dataset"] == "sample" and rec["dataset_name"]     # the loaded set's own name (with its options)
    assert rec["mask_p99_us"] > 0 and rec["per_prefix"][0]["prefix_tokens"] == 0
    assert rec["mask_p999_us"] >= rec["mask_p99_us"] and len(rec["per_sample"]) == 2
    assert sum(s["masks"] for s in rec["per_sample"]) == rec["steps"]
    assert [len(m) for m in rec["mask_us_by_sample"]] == [s["masks"] for s in rec["per_sample"]]   # --keep-masks
    (kind,) = rec["by_work"]["kinds"]          # PSC has no work counters: one kind, every mask
    assert kind["kind"] == "no counter moved" and kind["masks"] == rec["steps"] and kind["time_share"] == 1.0
    out = tmp_path / "batch.json"
    bench.main(["batch", "--engine", "pre3", "--dataset", "sample", "--n", "2", "--tokenizer", "bytes",
                "--batch", "1", "3", "--steps", "5", "--warmup", "1", "chunk=64", "--out", str(out)])
    recs = _records(out)
    assert [r["B"] for r in recs] == [1, 3] and all(r["steps"] == 5 and r["violations"] == 0 for r in recs)
    assert recs[0]["options"] == {"chunk": 64} and recs[1]["sequences"] == "fork"
    files = bench.plot(str(out), str(tmp_path / "fig"))
    assert all((tmp_path / f).exists() for f in files)


@pytest.mark.slow
def test_masks_records_a_refused_grammar_and_runs_the_other_cells(tmp_path):
    """Pre3's character level refuses the SQL grammar (not LALR(1) there): that cell is a record with the error,
    and the lexer front end's cell after it still runs."""
    out = tmp_path / "masks.json"
    bench.main(["masks", "--engine", "pre3", "--dataset", "sample", "--n", "1", "--tokenizer", "bytes",
                "--sweep", "pre3.front_end=chars,lexer", "--out", str(out)])
    chars, lexer = _records(out)
    assert chars["options"] == {"front_end": "chars"} and "not LALR(1)" in chars["compile_error"]
    assert "mask_p99_us" not in chars
    assert lexer["options"] == {"front_end": "lexer"} and lexer["outcomes"] == {"ok": 1}


@pytest.mark.slow
def test_batch_sharded_over_processes_steps_together(tmp_path):
    """--processes 2: the 3 sequences run as shards of 2 and 1 in two spawned processes; the batch's step is the
    slower shard's at each step, so its maximum is the shards' largest; no sequence fails."""
    out = tmp_path / "batch.json"
    bench.main(["batch", "--engine", "psc", "--dataset", "sample", "--n", "2", "--tokenizer", "bytes", "--batch", "3",
                "--processes", "1", "2", "4", "--steps", "6", "--warmup", "1", "--out", str(out)])
    one, two = _records(out)    # 4 processes > B = 3: no record
    assert (one["processes"], two["processes"]) == (1, 2) and "shards" not in one
    assert [s["B"] for s in two["shards"]] == [2, 1]
    assert two["steps"] == 6 and two["violations"] == 0 and two["outcomes"]["ok"] > 0
    assert two["step_us"]["max"] == max(s["step_us"]["max"] for s in two["shards"])
    assert two["per_sequence_us"] == round(two["step_us"]["mean"] / 3, 2)


@pytest.mark.slow
def test_batch_interleave_steps_option_sets_together(tmp_path, monkeypatch):
    """--interleave: two option sets in one process, stepped together over the same samples: one record per set,
    each naming both, the same timed steps, samples finished and refilled, no violation, the sets' masks equal
    (threads change no mask); a set whose mask differs is caught at its first step; --processes is refused."""
    from gcdbench.experiments import bench_batch

    args = ["batch", "--engine", "xgrammar", "--dataset", "sample", "--n", "2", "--tokenizer", "bytes", "--batch", "2",
            "--steps", "120", "--warmup", "1", "--sweep", "xgrammar.max_threads=1,2", "--interleave"]
    out = tmp_path / "inter.json"
    bench.main(args + ["--out", str(out)])
    one, two = _records(out)
    assert [one["options"], two["options"]] == [{"max_threads": 1}, {"max_threads": 2}]
    assert one["interleaved"] == two["interleaved"] and len(one["interleaved"]) == 2
    assert one["steps"] == two["steps"] == 120 and one["samples_finished"] >= 2
    assert one["masks_equal"] and one["first_difference_step"] is None and one["violations"] == 0
    # every timed step kept, and the second set's ratios to the first as gcdbench-compare gives them
    assert len(one["step_us_series"]) == len(two["commit_us_series"]) == 120 and "ab" not in one
    assert two["ab"]["against"] == "xgrammar (max_threads=1)"
    assert {r["verdict"] for r in two["ab"]["step_us"]} <= {"faster", "slower", "~"}
    from gcdbench.experiments import compare

    assert compare.main(["--results", str(out), "--old", "xgrammar (max_threads=1)", "--new",
                         "xgrammar (max_threads=2)", "--resamples", "200"]) == 0
    compile_ = bench_batch._compile

    def flipping(engine, opts, *rest):          # the second set's first row loses one bit at every step
        e, s = compile_(engine, opts, *rest)
        if opts.get("max_threads") == 2:
            fill = e.fill_masks

            def fill_masks(seqs, rows):
                fill(seqs, rows)
                rows[0, 0] ^= 1
            e.fill_masks = fill_masks
        return e, s

    monkeypatch.setattr(bench_batch, "_compile", flipping)
    out = tmp_path / "differ.json"
    bench.main(args + ["--steps", "3", "--out", str(out)])
    assert all(not r["masks_equal"] and r["first_difference_step"] == 0 for r in _records(out))
    with pytest.raises(SystemExit, match="drop --processes"):
        bench.main(args + ["--processes", "1", "2"])


def test_batch_interleave_steps_each_set_through_step_along(monkeypatch):
    """--interleave without a compiled engine (two fake option sets, B=2, samples of 3 tokens): each set's bench step
    is one step_along step, every set's mask first (the sets' order rotating from step to step), then the commits
    in the reverse order; a commit_many that raises fails the lanes it held (violations, the lanes refilled) and
    the bench goes on; a sample's end refills its lane; every timed step is kept."""
    from types import SimpleNamespace

    from gcdbench.experiments import bench_batch, steplog

    calls: list[tuple[str, str]] = []

    class Fake:
        def __init__(self, name):
            self.name, self.commits = name, 0

        def fork(self):
            return self

        def reset(self):
            pass

        def close(self):
            pass

        def fill_masks(self, seqs, out):
            calls.append(("mask", self.name))
            out[:] = -1        # every token allowed: no violation from the masks

        def commit_many(self, seqs, tokens):
            calls.append(("commit", self.name))
            self.commits += 1
            if self.name == "b" and self.commits == 3:
                raise RuntimeError("lost the batch")
            return [True] * len(seqs)

    walks = []
    real_step_along = steplog.step_along

    def counting(engine, *rest, **kw):
        walks.append(engine)
        return real_step_along(engine, *rest, **kw)

    monkeypatch.setattr(bench_batch, "step_along", counting)
    monkeypatch.setattr(bench_batch, "_compile", lambda engine, opts, *rest: (Fake(opts["n"]), 0.0))
    ds = SimpleNamespace(samples=[SimpleNamespace(ids=lambda tok: [5, 6, 7])], grammar=None)
    tok = SimpleNamespace(vocab_size=40, eos_id=0, name="fake")
    args = SimpleNamespace(batch=[2], warmup=1, steps=7, cache_dir=None)
    one, two = bench_batch.time_batch_interleaved("fake", [{"n": "a"}, {"n": "b"}], "toy", ds, tok, args)
    assert len(walks) == 2 * 8     # one walk a set a step
    assert calls[:8] == [("mask", "a"), ("mask", "b"), ("commit", "b"), ("commit", "a"),
                         ("mask", "b"), ("mask", "a"), ("commit", "a"), ("commit", "b")]
    # step 2: b's commit_many raises, both lanes fail and take new samples; step 6: both samples end at EOS
    assert one["violations"] == two["violations"] == 2 and one["samples_finished"] == 4
    assert one["masks_equal"] and one["first_difference_step"] is None
    assert all(len(r["step_us_series"]) == len(r["commit_us_series"]) == 7 and r["steps"] == 7 for r in (one, two))
    assert all(x >= 0 for r in (one, two) for x in r["step_us_series"] + r["commit_us_series"])


@pytest.mark.slow
def test_init_phases_build_then_load_from_cache(tmp_path):
    out = tmp_path / "init.json"
    bench.main(["init", "--engine", "psc", "--dataset", "sample", "--tokenizer", "bytes", "--cache-dir",
                str(tmp_path), "--out", str(out)])
    recs = _records(out)
    assert [(r["phase"], r["info"]["cache_hit"]) for r in recs] == [("cold", False), ("cached", True)]
    with pytest.raises(SystemExit, match="no cache_dir option"):
        bench.main(["init", "--engine", "xgrammar", "--dataset", "sample", "--tokenizer", "bytes"])


@pytest.mark.slow
def test_masks_phases_split_a_mask_by_part_and_restore_the_functions(tmp_path):
    """``masks --phases`` adds a pass timing each part Valiant names (``instruction_phases``), in its own module
    and in ``chart_store`` (``sub.name``): one jitted call a mask (``fill_host``) and one a commit (``walk_bytes``),
    nothing else called from Python on one thread, the parts and the Python rest adding up to the pass's mean; the
    wrapped functions are put back. A run where no engine names parts is refused before anything runs."""
    import gcdbench.parsers.valiant.chart_store as cs
    import gcdbench.parsers.valiant.engine as ve

    before = (ve.fill_host, ve.mask_base, cs.store_child)
    out = tmp_path / "masks.json"
    bench.main(["masks", "--engine", "valiant", "--dataset", "sample", "--n", "2", "--tokenizer", "bytes",
                "--phases", "--out", str(out), "valiant.mask_memo=0"])   # every mask computed (no copied ones)
    (rec,) = _records(out)
    ph = rec["phases"]
    assert ph["masks"] == rec["steps"] and ph["commits"] == rec["steps"] - 2
    by, byc = ph["us_per_mask_by_part"], ph["us_per_commit_by_part"]
    assert by["mask"]["calls"] == 1 and by["mask"]["us"] > 0 and by["base_masks"]["calls"] == 0
    assert byc["commit"]["calls"] == 1 and byc["mask"]["calls"] == 0
    assert abs(sum(v["us"] for v in by.values()) - ph["us_per_mask"]) < 0.05
    assert (ve.fill_host, ve.mask_base, cs.store_child) == before
    with pytest.raises(SystemExit, match="names instruction_phases"):
        bench.main(["masks", "--engine", "psc", "--dataset", "sample", "--n", "1", "--tokenizer", "bytes", "--phases"])


def test_sweep_that_swallowed_an_override_is_refused():
    """argparse gives ``--sweep`` every word after it: ``dataset.family=x`` there is an override in the wrong place,
    refused with the fix rather than silently ignored (the bench would run the default dataset)."""
    from gcdbench.experiments.bench_setup import option_sets

    with pytest.raises(SystemExit, match="go before --sweep"):
        option_sets("valiant", {}, None, ["valiant.mask_memo=0,128", "dataset.family=counted"])
    assert option_sets("valiant", {}, None, ["valiant.mask_memo=0,128"]) == [{"mask_memo": 0}, {"mask_memo": 128}]


def test_by_work_splits_the_time_and_the_tail_by_kind_of_work():
    """Masks grouped by the engine's work_kind of their counters: shares of masks and time, and the slowest
    masks (at or over the p99) counted by kind, with their mean counters against all masks'."""
    from gcdbench.experiments.bench_setup import by_work
    from gcdbench.parsers.base import Engine

    us = [1.0] * 98 + [50.0, 60.0]
    work = [{}] * 98 + [{"steps": 3}, {"steps": 5, "copies": 1}]
    out = by_work(us, work, Engine.work_kind.__get__(object()))
    kinds = {r["kind"]: r for r in out["kinds"]}
    assert set(kinds) == {"no counter moved", "steps", "copies+steps"}
    assert kinds["no counter moved"]["masks"] == 98 and kinds["no counter moved"]["in_tail"] == 0
    assert [r["kind"] for r in out["kinds"]] == ["no counter moved", "copies+steps", "steps"]   # by share of time
    assert kinds["copies+steps"]["in_tail"] == 1 and out["tail_masks"] == 1   # p99 of 100 masks: 59.9 us
    assert abs(sum(r["time_share"] for r in out["kinds"]) - 1) < 1e-3
    assert out["work_per_tail_mask"] == {"copies": 1.0, "steps": 5.0}
    assert out["work_per_mask"] == {"copies": 0.01, "steps": 0.08}
    with pytest.raises(ValueError, match="2 mask times against 1 counter rows"):
        by_work([1.0, 2.0], [{}], str)


def test_valiant_names_its_kinds_of_work():
    from gcdbench.parsers.valiant.engine import ValiantEngine

    kind = ValiantEngine().work_kind
    assert kind({"masks_reused": 1, "searches": 2}) == "whole mask from the memo"
    assert kind({}) == "no search, 0 chart steps"
    assert kind({"searches": 1, "nodes_checked": 9}) == "searched, 0 chart steps"
    assert kind({"searches": 2, "chart_steps": 3, "base_steps": 1}) == "searched, 2-4 chart steps"
    assert kind({"base_steps": 17, "token_sets_assembled": 1}) == "no search, 17+ chart steps, token set assembled"
