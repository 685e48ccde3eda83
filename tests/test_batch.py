"""Batch mode: ``fork()`` / ``fill_masks()`` of every engine against single mode, and the runner's batch path
(lock-step continuous batching, per-sequence outcomes, a failing sequence, a dying worker, limits, resume, the
report's batch section)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from engines_here import engine_params, installed
from expected_refusals import compile_or_refuse
from runconf import LETTERS, make_cfg, outcomes, words
from gcdbench.experiments.config import ConfigError
from gcdbench.experiments.runner import run
from gcdbench.experiments.store import identity_diff
from gcdbench.experiments.worker_batch import make_sequences
from gcdbench.parsers.base import GrammarSpec, allocate_mask
from gcdbench.parsers.registry import ENGINES, engine_class

REPO = Path(__file__).resolve().parents[1]
GRAMMARS = REPO / "tests" / "grammars"
CASES = {
    "tiny_sql": ((GRAMMARS / "tiny_sql.lark").read_text(), (GRAMMARS / "tiny_sql.txt").read_text().splitlines()),
    "ambiguous": ((GRAMMARS / "ambiguous.lark").read_text(), (GRAMMARS / "ambiguous.txt").read_text().splitlines()),
}


# -- every engine: batch rows == single-mode masks at every step ------------------------------------------------
def _single_masks(engine, tok, texts) -> list[list[np.ndarray]]:
    out = []
    for text in texts:
        engine.reset()
        masks = []
        for t in tok.encode(text) + [tok.eos_id]:
            m = allocate_mask(tok.vocab_size)
            engine.fill_mask(m)
            masks.append(m)
            if t != tok.eos_id:
                assert engine.commit(t)
        out.append(masks)
    return out


def _batch_masks(engine, copy, tok, texts, B: int) -> list[list[np.ndarray]]:
    """Continuous batching as the runner does it: B slots, a finished sequence's slot takes the next text."""
    seqs, _ = make_sequences(engine, B, copy)
    out = np.full((B, (tok.vocab_size + 31) // 32), -1, dtype=np.int32)
    streams = [tok.encode(t) + [tok.eos_id] for t in texts]
    got: list[list] = [[] for _ in texts]
    slot: list = [None] * B   # slot -> [text index, position]
    nxt = 0
    while True:
        for i in range(B):
            if slot[i] is None and nxt < len(texts):
                seqs[i].reset()
                slot[i] = [nxt, 0]
                nxt += 1
        live = [i for i in range(B) if slot[i] is not None]
        if not live:
            return got
        out[:] = -1
        engine.fill_masks([seqs[i] for i in live], out[: len(live)])
        for j, i in enumerate(live):
            k, pos = slot[i]
            got[k].append(out[j].copy())
            t = streams[k][pos]
            if t == tok.eos_id:
                slot[i] = None
            else:
                assert seqs[i].commit(t)
                slot[i][1] += 1


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("name", engine_params())
def test_batch_masks_equal_single_mode_at_every_step(name, case, bytes_tokenizer):
    """Batch and single mode give identical masks on every step (B = 3, sequences at different positions, slots
    refilled as sequences end); an engine without fork() runs on compiled copies (the runner's fallback)."""
    text, samples = CASES[case]
    grammar = GrammarSpec(case, text)
    tok = bytes_tokenizer
    single = engine_class(name)()
    if not compile_or_refuse(single, name, case, grammar, tok):
        return
    want = _single_masks(single, tok, samples)
    batch = engine_class(name)()
    batch.compile(grammar, tok)

    def copy():
        e = engine_class(name)()
        e.compile(grammar, tok)
        return e

    got = _batch_masks(batch, copy, tok, samples, B=3)
    for k, (w, g) in enumerate(zip(want, got)):
        assert len(w) == len(g)
        for step, (a, b) in enumerate(zip(w, g)):
            assert np.array_equal(a, b), f"{name} on {case}: sample {k} step {step}: batch row != single mask"


@pytest.mark.first      # with test_valiant's batch-threads test: one worker compiles the parallel batch call
@pytest.mark.parametrize("name", engine_params(where=lambda cls: cls.threads_option))
def test_threaded_batch_path_equals_single_mode(name, bytes_tokenizer):
    """With 2 threads (the engine's thread option) the batch rows are still the single-mode masks."""
    import numba

    if numba.config.NUMBA_NUM_THREADS < 2:
        pytest.skip("numba sees one core: 2 threads cannot be set")
    text, samples = CASES["tiny_sql"]
    grammar = GrammarSpec("tiny_sql", text)
    tok = bytes_tokenizer
    single = engine_class(name)()
    single.compile(grammar, tok)
    want = _single_masks(single, tok, samples)
    cls = engine_class(name)
    batch = cls(**{cls.threads_option: 2})
    batch.compile(grammar, tok)
    got = _batch_masks(batch, None, tok, samples, B=4)
    assert all(np.array_equal(a, b) for w, g in zip(want, got) for a, b in zip(w, g)), name
    batch.close()


VALIANT_CUDA_BATCH = """
import numpy as np
from gcdbench.parsers.base import GrammarSpec, allocate_mask
from gcdbench.parsers.registry import create_engine
from gcdbench.parsers.tokenizers import byte_level
tok = byte_level()
g = GrammarSpec("words", 'start: WORD ("-" WORD)* "."\\nWORD: /[a-z]+/\\n')
texts = ["ab-c.", "x.", "abc-de-f."]
cpu = create_engine("valiant", cache=False); cpu.compile(g, tok)
gpu = create_engine("valiant", backend="cuda", workers=2, cache=False); gpu.compile(g, tok)
seqs = [gpu] + [gpu.fork() for _ in texts[1:]]
assert all(s.backend is not gpu.backend and s.backend.gt is gpu.backend.gt for s in seqs[1:])
streams = [tok.encode(t) + [tok.eos_id] for t in texts]
out = np.zeros((3, (tok.vocab_size + 31) // 32), np.int32)
n = 0
for step in range(max(map(len, streams))):
    live = [i for i in range(3) if step < len(streams[i])]
    gpu.fill_masks([seqs[i] for i in live], out[:len(live)])
    for j, i in enumerate(live):
        cpu.reset()
        for t in streams[i][:step]:
            assert cpu.commit(t)
        m = allocate_mask(tok.vocab_size)
        cpu.fill_mask(m)
        assert np.array_equal(m, out[j]), (i, step)
        n += 1
    for i in live:
        if streams[i][step] != tok.eos_id:
            assert seqs[i].commit(streams[i][step])
print("masks", n, "launches", [s.backend.stats["launches"] for s in seqs])
"""


def test_valiant_cuda_forks_in_the_simulator_equal_the_cpu():
    """Valiant's CUDA backend in batch mode (numba's CUDA simulator, in a child process: it must be switched on
    before numba.cuda starts): each fork searches with its own device arena over the shared device tables, and
    every row equals the CPU backend's single-mode mask."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "NUMBA_ENABLE_CUDASIM": "1"}
    r = subprocess.run([sys.executable, "-c", VALIANT_CUDA_BATCH], env=env, cwd=REPO, capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    masks, launches = r.stdout.split("launches")
    assert int(masks.split()[-1]) == 19 and all(int(x) > 0 for x in launches.strip(" []\n").split(","))


def test_forks_share_the_compiled_grammar_and_own_their_state(bytes_tokenizer):
    """A fork starts at the empty prefix, whatever its parent's position, and moving it leaves the parent alone."""
    tok = bytes_tokenizer
    text, samples = CASES["tiny_sql"]
    for name in ("xgrammar", "llguidance", "psc", "glrmask", "reference", "valiant", "cfgzip"):
        e = engine_class(name)()
        e.compile(GrammarSpec("tiny_sql", text), tok)
        ids = tok.encode(samples[0])
        for t in ids[:3]:
            assert e.commit(t)
        before = allocate_mask(tok.vocab_size)
        e.fill_mask(before)
        f = e.fork()
        first, fresh = allocate_mask(tok.vocab_size), allocate_mask(tok.vocab_size)
        f.fill_mask(first)
        e2 = engine_class(name)()
        e2.compile(GrammarSpec("tiny_sql", text), tok)
        e2.fill_mask(fresh)
        assert np.array_equal(first, fresh), name
        for t in ids[:5]:
            assert f.commit(t)
        after = allocate_mask(tok.vocab_size)
        e.fill_mask(after)
        assert np.array_equal(before, after), name


def test_fill_masks_refuses_sequences_of_another_grammar(bytes_tokenizer):
    tok = bytes_tokenizer
    for name in ("xgrammar", "llguidance", "psc", "valiant"):
        a, b = engine_class(name)(), engine_class(name)()
        a.compile(GrammarSpec("tiny_sql", CASES["tiny_sql"][0]), tok)
        b.compile(GrammarSpec("words", 'start: WORD ("-" WORD)* "."\nWORD: /[a-z]+/\n'), tok)
        with pytest.raises(ValueError, match="forks"):
            a.fill_masks([a, b], np.zeros((2, (tok.vocab_size + 31) // 32), dtype=np.int32))


def test_thread_options_are_declared():
    """The option batch.threads sets exists on every engine that names one."""
    for name in ENGINES:
        if not installed(name):
            continue
        cls = engine_class(name)
        if cls.threads_option is not None:
            assert cls.threads_option in cls.options(), name
    assert engine_class("xgrammar").threads_option == "max_threads"
    assert engine_class("llguidance").threads_option == "threads"
    assert engine_class("psc").threads_option is None


# -- the runner's batch path ----------------------------------------------------------------------------------
@pytest.fixture
def letters(tmp_path):
    """Lowercase words; sample 1 holds the faulty engines' trigger letter 'z' (five samples: two batches and more)."""
    return words(tmp_path, *LETTERS, "hello world", "foo bar")


@pytest.mark.slow
def test_batch_run_records_steps_and_matches_single_mode(tmp_path):
    data = ["dataset=custom", f"dataset.grammar={GRAMMARS / 'tiny_sql.lark'}",
            f"dataset.samples={GRAMMARS / 'tiny_sql.txt'}", "engine=xgrammar", "audit.per_sample=3"]
    single = run(make_cfg(tmp_path, *data))
    batch = run(make_cfg(tmp_path, *data, "batch.size=2", "batch.steps=all"))
    assert batch.name == "xgrammar__batch-2" and single.name == "xgrammar"
    assert set(outcomes(batch).values()) == {"ok"}
    meta = json.loads((batch / "run.json").read_text())
    assert meta["identity"]["batch"] == {"mode": "batch", "size": 2} and "batch" not in \
        json.loads((single / "run.json").read_text())["identity"]
    assert meta["batch"]["threads"] == 1 and meta["batch"]["threads_option"] == "max_threads"
    init = meta["inits"][0]
    assert init["sequences"] == "fork" and init["batch_size"] == 2 and init["warmup_outcome"] == "ok"
    # the same masks (sizes, oracle) at every step of every sample as in single mode
    key = ["sample_id", "step"]
    s = pd.read_parquet(single / "steps.parquet").set_index(key).sort_index()
    b = pd.read_parquet(batch / "steps.parquet").set_index(key).sort_index()
    assert s.index.equals(b.index)
    assert (s["n_allowed"] == b["n_allowed"]).all() and b["oracle_allowed"].all()
    # batch steps: every sequence row belongs to one, whose live count it is part of
    bs = pd.read_parquet(batch / "batch_steps.parquet")
    assert list(bs.columns) == ["session", "run", "batch_step", "size", "live", "step_us", "commit_us", "fallback",
                                "masks"]
    assert (bs["size"] == 2).all() and bs["live"].between(1, 2).all() and (bs["step_us"] > 0).all()
    assert bs["live"].sum() == len(b) and meta["batch"]["steps"] == len(bs) and (bs["masks"] == bs["live"]).all()
    assert meta["batch"]["steps_kept"] == "all" and meta["schema_version"] == 1
    per_step = b.reset_index().groupby("batch_step").size()
    assert (per_step.values == bs.set_index("batch_step").loc[per_step.index, "live"].values).all()
    # a sequence row's mask_us is its share of the step
    joined = b.reset_index().merge(bs, on="batch_step")
    assert np.allclose(joined["mask_us"], joined["step_us"] / joined["live"])
    # audited: against the reference, and batch row == the sequence's own fill_mask
    audit = pd.read_parquet(batch / "audit.parquet")
    assert len(audit) and audit["agree"].all() and audit["agree_single_mode"].all()
    # a re-run resumes: nothing left to do, the rows stay
    again = run(make_cfg(tmp_path, *data, "batch.size=2", "batch.steps=all"))
    assert again == batch and len(pd.read_parquet(batch / "batch_steps.parquet")) == len(bs)
    # the default, batch.steps=summary: the per-step summary only, from which every mask's time is rebuilt
    summary = run(make_cfg(tmp_path / "summary", *data, "batch.size=2"))
    assert not (summary / "steps.parquet").exists()
    meta = json.loads((summary / "run.json").read_text())
    assert meta["batch"]["steps_kept"] == "summary" and meta["sessions"][-1]["batch"]["steps"] == "summary"
    bs = pd.read_parquet(summary / "batch_steps.parquet")
    samples = pd.read_parquet(summary / "samples.parquet")
    assert bs["masks"].sum() == samples["n_steps"].sum() == len(b)   # every mask counted, none stored
    from gcdbench.experiments.schema import summary_mask_us

    per_mask = summary_mask_us(bs)
    assert len(per_mask) == len(b) and (per_mask > 0).all()
    # the same rebuild on the cell that kept every row gives exactly its steps' mask times
    kept = pd.read_parquet(batch / "batch_steps.parquet")
    assert np.array_equal(np.sort(summary_mask_us(kept)), np.sort(b["mask_us"].to_numpy()))


@pytest.mark.parametrize("cls,expected,message", [
    ("RaiseEngine", "crash", "RuntimeError: deliberate failure on 'z'"),
    ("ErrorStateEngine", "engine_error", "work limit reached (test)"),
    ("MaskRaiseEngine", "crash", "step 2: RuntimeError: deliberate failure inside a mask"),
])
def test_one_failing_sequence_is_recorded_and_the_others_finish(tmp_path, letters, cls, expected, message):
    cfg = make_cfg(tmp_path, "engine=reference", f"engine.name=tests.faulty_engines:{cls}", *letters,
                   "batch.size=2", "audit.per_sample=0", "batch.steps=all")
    out = run(cfg)
    got = outcomes(out)
    assert got.pop("letters-0001") == expected and set(got.values()) == {"ok"}
    samples = pd.read_parquet(out / "samples.parquet").set_index("sample_id")
    assert message in samples.loc["letters-0001", "message"]
    steps = pd.read_parquet(out / "steps.parquet")
    assert list(steps[steps["sample_id"] == "letters-0001"]["step"]) == [0, 1]
    bs = pd.read_parquet(out / "batch_steps.parquet")
    assert (bs["run"] == 1).all()   # one worker: nothing restarted
    assert list(bs["fallback"][bs["fallback"] > 0]) == ([1] if cls == "MaskRaiseEngine" else [])
    # each step's masks are the rows it gave: one fewer on the step whose fill failed for one sequence
    assert (bs["masks"] == bs["live"] - (bs["fallback"] == 1)).all()
    assert bs["masks"].sum() == len(steps)


def test_a_batch_commit_that_raises_ends_the_sequences_it_held(tmp_path, letters):
    """``commit_many`` owes one entry per sequence; one that raises instead leaves every sequence of that call in an
    unknown state: each of them ends 'crash' with the error, the sequences of later steps run."""
    out = run(make_cfg(tmp_path, "engine=reference", "engine.name=tests.faulty_engines:CommitManyRaiseEngine",
                       *letters, "batch.size=2", "audit.per_sample=0", "warmup=false", "batch.steps=all"))
    got = outcomes(out)
    assert got.pop("letters-0000") == got.pop("letters-0001") == "crash" and set(got.values()) == {"ok"}
    samples = pd.read_parquet(out / "samples.parquet").set_index("sample_id")
    assert "commit at step 1: RuntimeError: deliberate failure of the batch commit" in \
        samples.loc["letters-0001", "message"]


@pytest.mark.parametrize("cls,expected,timeout,message", [
    ("ExitEngine", "crash", 60, "worker died (exit code 3)"),
    pytest.param("HangEngine", "timeout", 2.5, "no batch step finished within 2.5 s (limits.sample_timeout_s)",
                 marks=pytest.mark.slow),
])
def test_a_dying_worker_ends_the_sequences_in_flight_and_the_rest_run(tmp_path, letters, cls, expected, timeout,
                                                                      message):
    """The batch fails together: the sequences in flight (0 and 1) keep their steps and get the outcome; the
    worker is compiled again for the samples not yet started."""
    cfg = make_cfg(tmp_path, "engine=reference", f"engine.name=tests.faulty_engines:{cls}", *letters,
                   "batch.size=2", "audit.per_sample=0", f"limits.sample_timeout_s={timeout}", "batch.steps=all")
    out = run(cfg)
    got = outcomes(out)
    assert got == {"letters-0000": expected, "letters-0001": expected, "letters-0002": "ok", "letters-0003": "ok",
                   "letters-0004": "ok"}
    samples = pd.read_parquet(out / "samples.parquet").set_index("sample_id")
    for sid in ("letters-0000", "letters-0001"):
        assert message in samples.loc[sid, "message"] and "in flight end together" in samples.loc[sid, "message"]
    steps = pd.read_parquet(out / "steps.parquet")
    assert list(steps[steps["sample_id"] == "letters-0001"]["step"]) == [0, 1]   # kept from the journal
    assert list(steps[steps["sample_id"] == "letters-0000"]["step"]) == [0, 1]
    meta = json.loads((out / "run.json").read_text())
    assert len(meta["inits"]) == 2
    bs = pd.read_parquet(out / "batch_steps.parquet")
    assert sorted(bs["run"].unique()) == [1, 2]


def test_sequence_time_limit_and_run_time_limit(tmp_path, letters):
    """A sequence whose time in the batch passes the sample limit ends 'timeout' at a step boundary (the worker
    lives on); once the run's time is up, the sequences in flight end 'timeout' and the rest are 'skipped'."""
    # the limit far from both sides of the sleeps, whatever the machine's load: "xy" (letters-0002) sleeps 3 steps
    # of 2 x 50 ms = 0.3 s (a tenth of the limit), letters-0003 at least 72 steps of 2 x 50 ms = 7.2 s (2.4 times it)
    long_words = words(tmp_path, "abc de", "azb", "xy", " ".join(["hello world"] * 6), "foo bar")
    cfg = make_cfg(tmp_path, "engine=reference", "engine.name=tests.faulty_engines:SlowEngine", *long_words,
                   "batch.size=2", "audit.per_sample=0", "limits.sample_timeout_s=3", "warmup=false")
    out = run(cfg)
    samples = pd.read_parquet(out / "samples.parquet").set_index("sample_id")
    long = samples.loc["letters-0003"]
    assert long["outcome"] == "timeout" and "the sequence's time in the batch" in long["message"]
    assert samples.loc["letters-0002", "outcome"] == "ok"
    assert len(json.loads((out / "run.json").read_text())["inits"]) == 1   # no restart

    more = tmp_path / "more.txt"
    more.write_text("abc de\nxy\nhello\nfoo bar\nq\nrst uv\nwx\nyy zz\nab cd\nef\n")
    cfg = make_cfg(tmp_path / "r", "engine=reference", "engine.name=tests.faulty_engines:SlowEngine", *letters,
                   f"dataset.samples={more}", "batch.size=2", "audit.per_sample=0", "limits.run_timeout_s=0.5",
                   "warmup=false")   # the batch gets at least 1 s (as a single-mode sample does): 10 steps
    out = run(cfg)
    got = outcomes(out)
    assert "skipped" in got.values() and "timeout" in got.values()
    samples = pd.read_parquet(out / "samples.parquet")
    assert samples[samples["outcome"] == "timeout"]["message"].str.contains("limits.run_timeout_s").all()
    # batch.threads=2 of an engine without a thread option names this same cell: a sweep over threads does not
    # resume it (that would give the skipped samples a second run time limit)
    sessions = len(json.loads((out / "run.json").read_text())["sessions"])
    again = run(make_cfg(tmp_path / "r", "engine=reference", "engine.name=tests.faulty_engines:SlowEngine", *letters,
                         f"dataset.samples={more}", "batch.size=2", "batch.threads=2", "audit.per_sample=0",
                         "limits.run_timeout_s=0.5", "warmup=false"))
    assert again == out and outcomes(out) == got
    assert len(json.loads((out / "run.json").read_text())["sessions"]) == sessions


def test_batch_threads_sets_the_engine_option_and_bad_values_fail(tmp_path, letters):
    out = run(make_cfg(tmp_path, "engine=xgrammar", *letters, "batch.size=2", "batch.threads=2", "audit.per_sample=0"))
    assert out.name == "xgrammar__max_threads-2__batch-2"
    # a named preset (its own label) gets the changed option in its folder name too: threads 1 and 2 are two cells
    one = run(make_cfg(tmp_path, "engine=llguidance_raised", *letters, "batch.size=2", "batch.threads=1",
                       "audit.per_sample=0"))
    two = run(make_cfg(tmp_path, "engine=llguidance_raised", *letters, "batch.size=2", "batch.threads=2",
                       "audit.per_sample=0"))
    assert (one.name, two.name) == ("llguidance_raised__batch-2", "llguidance_raised__threads-2__batch-2")
    meta = json.loads((out / "run.json").read_text())
    assert meta["engine_options"]["max_threads"] == 2 and meta["batch"]["threads"] == 2
    # an engine without a thread option: the same cell as threads=1 (resumed, nothing to do)
    a = run(make_cfg(tmp_path, "engine=psc", *letters, "batch.size=2", "audit.per_sample=0"))
    b = run(make_cfg(tmp_path, "engine=psc", *letters, "batch.size=2", "batch.threads=2", "audit.per_sample=0"))
    assert a == b and json.loads((a / "run.json").read_text())["batch"]["threads"] == 1
    for bad, what in (("batch.size=-1", "batch.size"), ("batch.threads=0", "batch.threads")):
        with pytest.raises(ConfigError, match=what):
            run(make_cfg(tmp_path, "engine=psc", *letters, "batch.size=2", bad))
    with pytest.raises(ConfigError, match="batch mode only"):
        run(make_cfg(tmp_path, "engine=psc", *letters, "batch.threads=2"))


def test_an_option_added_later_at_its_default_is_the_same_cell():
    old = {"engine": "llguidance", "engine_options": {"step_max_items": None}}
    new = {"engine": "llguidance", "engine_options": {"step_max_items": None, "threads": 1}}
    assert identity_diff(old, new, {"step_max_items": None, "threads": 1}) == []
    changed = {"engine": "llguidance", "engine_options": {"step_max_items": None, "threads": 2}}
    assert identity_diff(old, changed, {"step_max_items": None, "threads": 1}) == ["engine_options: threads=None -> 2"]


@pytest.mark.slow
def test_report_has_a_batch_section_and_keeps_batch_cells_out_of_table1(tmp_path, letters):
    from gcdbench.experiments.report import write_report

    for B in (1, 2, 4):
        out = run(make_cfg(tmp_path / "runs", "engine=psc", *letters, f"batch.size={B}", "audit.per_sample=2",
                           "audit.samples=2"))
        audit = pd.read_parquet(out / "audit.parquet")   # the first two samples only
        assert set(audit["sample_id"]) == {"letters-0000", "letters-0001"} and audit["agree_single_mode"].all()
    run(make_cfg(tmp_path / "runs", "engine=reference", *letters, "audit.per_sample=0"))
    t1 = write_report(tmp_path / "runs", tmp_path / "report", tokenizer="bytes")
    assert "reference" in t1 and "psc" not in t1
    readme = (tmp_path / "report" / "README.md").read_text()
    assert "## Batch decoding" in readme and "figures/batch_bytes.png" in readme
    csv = pd.read_csv(tmp_path / "report" / "batch.csv")
    assert sorted(csv["B"]) == [1, 2, 4] and (csv["per_seq_us"] > 0).all() and (csv["threads"] == 1).all()
    # the audit column: steps agreeing with the declared profile, and batch rows equal to single-mode masks
    assert (csv["audit_agree_single_mode"] == csv["audit_steps"]).all() and (csv["audit_steps"] > 0).all()
    n = int(csv["audit_steps"].iloc[0])
    assert f"{int(csv['audit_agree_profile'].iloc[0])}/{n}, single {n}/{n}" in readme
    assert (tmp_path / "report" / "figures" / "batch_bytes.png").exists()
    # the overview: one row per config, one column per B, the B=1 cell without a gain, the others with theirs
    lines = readme.splitlines()
    at = lines.index("Per-sequence cost (µs) against B, with the gain over B=1 in brackets:")
    head = [c.strip() for c in lines[at + 2].strip("|").split("|")]
    assert head == ["dataset", "config", "threads", "B=1", "B=2", "B=4"], head
    row = [c.strip() for c in lines[at + 4].strip("|").split("|")]
    assert row[1:3] == ["psc", "1"] and "×" not in row[3] and all(c.endswith("×)") for c in row[4:]), row
    cells = pd.read_csv(tmp_path / "report" / "cells.csv")
    assert set(cells["config"]) == {"reference"}


def test_a_fork_that_fails_is_a_typed_compile_error(tmp_path, letters):
    """An engine whose fork() raises cannot run a batch: every sample is 'compile_error' (kind crash), saying so."""
    cfg = make_cfg(tmp_path, "engine=reference", "engine.name=tests.faulty_engines:ForkRaiseEngine", *letters,
                   "batch.size=2")
    out = run(cfg)
    assert set(outcomes(out).values()) == {"compile_error"}
    meta = json.loads((out / "run.json").read_text())
    assert meta["compile_error_kind"] == "crash" and "making the batch's sequences failed" in meta["compile_error"]
    assert "deliberate failure in fork" in meta["compile_error"]
    # single mode never forks: the same engine runs
    assert set(outcomes(run(make_cfg(tmp_path, "engine=reference", "engine.name=tests.faulty_engines:ForkRaiseEngine",
                                     *letters, "audit.per_sample=0"))).values()) == {"ok"}


def test_warm_up_stays_within_its_budget(tmp_path, letters):
    """The batch warm-up takes a step only while it fits in half the sample limit, so a slow engine's warm-up is
    cut short by the worker (recorded) instead of being killed and compiled again."""
    cfg = make_cfg(tmp_path, "engine=reference", "engine.name=tests.faulty_engines:SlowEngine", *letters,
                   "batch.size=4", "audit.per_sample=0", "limits.sample_timeout_s=1.2", "samples=1")
    out = run(cfg)
    init = json.loads((out / "run.json").read_text())["inits"]
    assert len(init) == 1 and "warmup_failed" not in init[0]
    assert init[0]["warmup_truncated_at_step"] is not None
    assert init[0]["first_mask_us"] >= 50_000   # one sequence's mask (SlowEngine sleeps 50 ms per mask)
    # the rule, whatever the machine's speed: a step of 4 sequences sleeps at least 4 x 50 ms, so a warm-up that
    # kept within its budget of 0.6 s (half the sample limit) after the first mask took at most 2 steps (a slower
    # machine takes fewer), and it stopped where the next step would not have fitted
    assert init[0]["warmup_steps"] * 4 * 0.05 + init[0]["first_mask_us"] / 1e6 <= 0.6
    assert init[0]["warmup_truncated_at_step"] == init[0]["warmup_steps"]


def test_a_batch_call_that_fails_where_single_masks_work_is_reported(tmp_path, letters):
    """The batch call raises at every step, but no sequence's own fill_mask does: the samples still run (on the
    single path), every step is marked fallback 2, and the session keeps the error."""
    out = run(make_cfg(tmp_path, "engine=reference", "engine.name=tests.faulty_engines:BatchRaiseEngine", *letters,
                       "batch.size=2", "audit.per_sample=0", "warmup=false"))
    assert set(outcomes(out).values()) == {"ok"}
    bs = pd.read_parquet(out / "batch_steps.parquet")
    assert (bs["fallback"] == 2).all()
    runs = json.loads((out / "run.json").read_text())["sessions"][-1]["batch_runs"]
    assert "deliberate failure of the batch call" in runs[0]["first_batch_error"]
    assert runs[0]["fallback_steps"] == len(bs)
    from gcdbench.experiments.report import batch_table, collect_batch

    table = batch_table(collect_batch([tmp_path]))
    assert table["outcomes"].str.contains(f"batch call failed where every sequence's own fill_mask worked: "
                                          f"{len(bs)} steps").all()


def test_a_refusal_in_batch_mode_names_the_byte_it_stopped_at(tmp_path):
    """As in single mode (test_grouped), a sample the grammar does not take says where, in batch mode too: the
    byte offset, the bytes before it and the refused token; the other sequences finish."""
    cfg = make_cfg(tmp_path, "engine=reference", *words(tmp_path, "abc de", "ab1", "xy"), "batch.size=2",
                   "audit.per_sample=0")
    out = run(cfg)
    assert outcomes(out) == {"letters-0000": "ok", "letters-0001": "rejected", "letters-0002": "ok"}
    msg = pd.read_parquet(out / "samples.parquet").set_index("sample_id").loc["letters-0001", "message"]
    assert msg.startswith("oracle token 49 not in the mask at step 2") and \
        msg.endswith("(at byte 2 of the sample: b'ab' then b'1')"), msg
