"""The runner end to end on small inputs: outcomes, limits, resume, bad input messages."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from hydra import compose, initialize_config_dir

from gcdbench.experiments.config import register
from gcdbench.experiments.runner import run
from runconf import make_cfg, outcomes   # the letters fixture: tests/conftest.py

REPO = Path(__file__).resolve().parents[1]
GRAMMARS = REPO / "tests" / "grammars"


def test_ok_run_writes_long_format_results(tmp_path):
    cfg = make_cfg(tmp_path, "engine=xgrammar", "dataset=custom", f"dataset.grammar={GRAMMARS / 'tiny_sql.lark'}",
                   f"dataset.samples={GRAMMARS / 'tiny_sql.txt'}")
    out = run(cfg)
    steps = pd.read_parquet(out / "steps.parquet")
    for col in ["engine", "dataset", "tokenizer", "sample_id", "step", "prefix_tokens", "mask_us", "commit_us",
                "n_allowed", "oracle_allowed", "outcome"]:
        assert col in steps.columns
    assert set(outcomes(out).values()) == {"ok"}
    # bytes tokenizer: one step per byte plus the EOS step
    texts = (GRAMMARS / "tiny_sql.txt").read_text().splitlines()
    assert len(steps) == sum(len(t.encode()) + 1 for t in texts)
    assert steps["oracle_allowed"].all() and (steps["n_allowed"] > 0).all()
    meta = json.loads((out / "run.json").read_text())
    assert meta["init_s"] > 0 and meta["versions"]["xgrammar"] and meta["machine"]["cpu_count"]
    assert meta["audit"]["steps"] > 0 and meta["audit"]["agree"] == meta["audit"]["steps"]
    assert not (out / "parts").exists()
    # provenance per sample row; run.json describes exactly the rows on disk
    samples = pd.read_parquet(out / "samples.parquet")
    assert samples["git_commit"].notna().all() and samples["host"].notna().all() and (samples["session"] == 1).all()
    assert meta["n_rows"] == len(samples) == meta["n_samples"] == len(texts)
    assert meta["outcomes"] == {"ok": len(texts)}
    # the warm-up sample: compile only in init, the first (cold) mask in TTFM, peaks per phase
    init = meta["inits"][0]
    assert init["warmup_outcome"] == "ok" and init["warmup_masks"] == len(texts[0].encode()) + 1
    assert meta["ttfm_s"] == pytest.approx(init["init_s"] + init["first_mask_us"] / 1e6)
    assert meta["peak_rss_compile_mb"] > 0 and meta["peak_rss_samples_mb"] > 0


@pytest.mark.parametrize("cls,expected,timeout,message", [
    ("RaiseEngine", "crash", 60, "RuntimeError: deliberate failure on 'z'"),
    ("ExitEngine", "crash", 60, "worker died (exit code 3)"),
    ("HangEngine", "timeout", 2.5, "no result within 2.5 s (limits.sample_timeout_s)"),
    ("HogEngine", "oom", 60, "resident memory above 1500 MB (limits.memory_mb)"),
    ("ErrorStateEngine", "engine_error", 60, "work limit reached (test)"),
    ("MaskRaiseEngine", "crash", 60, "step 2: RuntimeError: deliberate failure inside a mask"),
])
def test_failing_engine_is_a_typed_outcome_and_others_finish(tmp_path, letters, cls, expected, timeout, message):
    cfg = make_cfg(tmp_path, "engine=reference", f"engine.name=tests.faulty_engines:{cls}", *letters,
                   f"limits.sample_timeout_s={timeout}",
                   "limits.memory_mb=1500", "audit.per_sample=0")
    out = run(cfg)
    got = outcomes(out)
    assert got == {"letters-0000": "ok", "letters-0001": expected, "letters-0002": "ok"}
    samples = pd.read_parquet(out / "samples.parquet").set_index("sample_id")
    assert message in samples.loc["letters-0001", "message"]
    steps = pd.read_parquet(out / "steps.parquet")
    failed = steps[steps["sample_id"] == "letters-0001"]
    # the steps before the failure ('a' masked and committed, then 'z' masked) are kept
    assert list(failed["step"]) == [0, 1] and set(failed["outcome"]) == {expected}


def test_compile_error_is_recorded_for_every_sample(tmp_path, letters):
    cfg = make_cfg(tmp_path, "engine=reference", "engine.name=tests.faulty_engines:RefuseEngine", *letters)
    out = run(cfg)
    assert set(outcomes(out).values()) == {"compile_error"}
    meta = json.loads((out / "run.json").read_text())
    assert "refuses every grammar" in meta["compile_error"] and meta["compile_error_kind"] == "refused"


def test_malformed_grammar_is_a_compile_error(tmp_path):
    g = tmp_path / "bad.lark"
    g.write_text("start: a b\na: \"x\"\n")   # rule b is not defined
    s = tmp_path / "bad.txt"
    s.write_text("x\n")
    for engine in ("xgrammar", "llguidance"):
        cfg = make_cfg(tmp_path, f"engine={engine}", "dataset=custom", f"dataset.grammar={g}", f"dataset.samples={s}")
        out = run(cfg)
        assert set(outcomes(out).values()) == {"compile_error"}, engine


def test_rerun_skips_finished_samples(tmp_path, letters):
    cfg = make_cfg(tmp_path, "engine=reference", *letters, "audit.per_sample=0")
    out = run(cfg)
    before = pd.read_parquet(out / "steps.parquet")
    assert len(pd.read_parquet(out / "samples.parquet")) == 3
    # samples=all selects the same three samples (the file has three lines): the same cell
    cfg2 = make_cfg(tmp_path, "engine=reference", *letters, "audit.per_sample=0", "samples=all")
    out2 = run(cfg2)
    assert out2 == out
    after = pd.read_parquet(out / "steps.parquet")
    pd.testing.assert_frame_equal(after, before)   # nothing re-run, nothing lost
    meta = json.loads((out / "run.json").read_text())
    assert len(meta["inits"]) == 1 and len(meta["sessions"]) == 1   # no second compile, no empty session


def test_unknown_engine_option_names_valid_ones(tmp_path, letters):
    cfg = make_cfg(tmp_path, "engine=xgrammar", "+engine.grammar_fom=lark", *letters)
    with pytest.raises(ValueError, match="grammar_form"):
        run(cfg)


# --------------------------------------------------------------------------------------------------------------
# validation at start: each refusal comes before any work and names the key and the fix
# --------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("override,match", [
    ("samples=-1", r"samples=-1: at least 1 sample is needed \(samples=all"),
    ("samples=0", r"samples=0: at least 1"),
    ("samples=null", r"samples=None: write a whole number >= 1, or samples=all"),
    ("samples=three", r"samples='three'"),
    ("limits.sample_timeout_s=0", r"limits.sample_timeout_s=0.0: a limit must be a number > 0"),
    ("limits.memory_mb=-100", r"limits.memory_mb=-100.0"),
    ("limits.run_timeout_s=-1", r"limits.run_timeout_s"),
    ("limits.run_timeout_s=inf", r"limits.run_timeout_s=inf: a limit must be finite"),   # issue 27, item 11
    ("limits.memory_mb=nan", r"limits.memory_mb=nan: a limit must be a number > 0"),
    ("audit.per_sample=-2", r"audit.per_sample=-2"),
    ("+sample=3", r"unknown config key\(s\) \['sample'\]"),
    ("+limits.sample_timout_s=3", r"unknown config key\(s\) \['limits.sample_timout_s'\]"),
    ("+dataset.split=train", r"dataset 'custom': unknown option\(s\) \['split'\]; valid: \['grammar', 'samples', 'start', 'format', 'glob', 'ambiguous'\]"),
    ("engine.lexer=contextual", r"lexer='contextual' is not allowed; valid: \['standard'\]"),
    # an engine option of the wrong type fails while Hydra composes (the engine's declared Options are its schema)
    ("engine.max_states=many", r"Error merging override engine.max_states=many"),
])
def test_bad_values_are_refused_before_any_work(tmp_path, letters, override, match):
    from gcdbench.datasets.base import DataError
    from gcdbench.experiments.config import ConfigError

    from hydra.errors import ConfigCompositionException

    with pytest.raises((ConfigError, DataError, ValueError, ConfigCompositionException), match=match):
        run(make_cfg(tmp_path, "engine=psc", *letters, override))
    assert not list(tmp_path.rglob("run.json"))   # nothing was started


def test_samples_all_runs_every_sample(tmp_path, letters):
    out = run(make_cfg(tmp_path, "engine=reference", *letters, "samples=all", "audit.per_sample=0"))
    assert len(outcomes(out)) == 3


@pytest.mark.faults
def test_more_samples_than_exist_says_how_many_exist(tmp_path, letters, capsys):
    """Issue 27, item 10: samples=1000000 on a 3-sample file runs the 3 and says so (not a silent truncation)."""
    out = run(make_cfg(tmp_path, "engine=reference", *letters, "samples=1000000", "audit.per_sample=0"))
    assert len(outcomes(out)) == 3
    err = capsys.readouterr().err
    assert "samples=1000000: dataset" in err and "has 3 samples; running those 3" in err, err


@pytest.mark.faults
@pytest.mark.parametrize("target,match", [("os:system", r"os\.system is a \w+, not a subclass of gcdbench"),
                                          ("os:nothing_here", "os.nothing_here is missing")])
def test_engine_name_that_is_not_an_engine_is_refused_before_it_is_called(tmp_path, letters, monkeypatch, target,
                                                                           match):
    """Issue 27, item 7: ``engine.name=os:system`` imported os and called ``os.system(**options)``; now the class is
    checked first (a subclass of Engine) and nothing is called."""
    import os

    called = []
    monkeypatch.setattr(os, "system", lambda *a, **k: called.append(a) or 0)
    cfg = make_cfg(tmp_path, "engine=reference", f"engine.name={target}", *letters)
    with pytest.raises(ValueError, match=match):
        run(cfg)
    assert not called and not list(tmp_path.rglob("run.json"))


@pytest.mark.faults
@pytest.mark.parametrize("engine", ["valiant", "glrmask", "psc", "pre3", "reference"])
def test_grammar_python_re_refuses_is_one_typed_compile_error_for_every_engine(tmp_path, engine):
    """Issue 27, item 2: the same grammar (a scoped flag inside an alternation) was a crash with a traceback for
    Valiant and GLRMask and 'refused' for PSC; every engine that reads it through the harness's grammar loader now
    ends in compile_error naming the regex problem and the fix, and a second run reuses that outcome."""
    g = tmp_path / "flags.lark"
    g.write_text('start: W (" " W)*\nW: /(?i)straße/ | /\\w+/\n')
    s = tmp_path / "flags.txt"
    s.write_text("abc straße\nxy\n")
    cfg = make_cfg(tmp_path, f"engine={engine}", "dataset=custom", f"dataset.grammar={g}", f"dataset.samples={s}",
                   "samples=2", "audit.per_sample=0")
    cell = run(cfg)
    meta = json.loads((cell / "run.json").read_text())
    assert set(outcomes(cell).values()) == {"compile_error"}, meta
    assert meta.get("compile_error_kind") != "crash" and "Traceback" not in meta["compile_error"], meta
    assert "not valid for Python's re" in meta["compile_error"] and "(?i:...)" in meta["compile_error"], meta


@pytest.mark.faults
def test_grammar_the_reference_cannot_read_leaves_a_finished_unaudited_cell(tmp_path):
    """Issue 27, item 2: a scoped flag inside an alternation (``re`` refuses it, LLGuidance runs it): the audit's
    error no longer escapes and strands the cell; the cell holds every sample, says why it is not audited, and a
    second run has nothing left to do."""
    g = tmp_path / "flags.lark"
    g.write_text('start: W (" " W)*\nW: /(?i)straße/ | /\\w+/\n')
    s = tmp_path / "flags.txt"
    s.write_text("abc straße\nxy\n")
    cfg = make_cfg(tmp_path, "engine=llguidance", "dataset=custom", f"dataset.grammar={g}", f"dataset.samples={s}",
                   "samples=2", "audit.per_sample=2")
    cell = run(cfg)
    meta = json.loads((cell / 'run.json').read_text())
    assert meta["n_rows"] == 2 and "the reference checker cannot take the grammar" in meta["audit_error"], meta
    assert not list(cell.glob("parts/*.audit.npz"))   # nothing left pending
    run(cfg)
    assert json.loads((cell / 'run.json').read_text())["n_rows"] == 2


def test_valiant_backend_value_is_checked_at_start(tmp_path, letters):
    cfg = make_cfg(tmp_path, "engine=valiant", "engine.backend=gpu", *letters)
    with pytest.raises(ValueError, match=r"backend='gpu' is not allowed; valid: \['cpu', 'cuda'\]"):
        run(cfg)


@pytest.mark.parametrize("which", ["grammar", "samples"])
def test_non_utf8_file_names_the_file_and_the_byte_offset(tmp_path, letters, which):
    from gcdbench.datasets.base import DataError

    g = tmp_path / "latin1.lark"
    g.write_bytes('start: WORD\nWORD: /[a-z]+/\n'.encode() if which == "samples" else
                  'start: WORD\n// caf\xe9\nWORD: /[a-z]+/\n'.encode("latin-1"))
    s = tmp_path / "latin1.txt"
    s.write_bytes("abc\ncaf\xe9\n".encode("latin-1") if which == "samples" else b"abc\n")
    cfg = make_cfg(tmp_path, "engine=reference", "dataset=custom", f"dataset.grammar={g}", f"dataset.samples={s}")
    bad = s if which == "samples" else g
    offset = bad.read_bytes().index(b"\xe9")
    with pytest.raises(DataError, match=rf"{bad} is not UTF-8: byte offset {offset} \(line 2\)"):
        run(cfg)


@pytest.mark.faults
@pytest.mark.parametrize("which", ["grammar", "samples"])
def test_byte_order_mark_is_dropped_with_a_note(tmp_path, letters, capsys, which):
    """Issue 27, item 9: a UTF-8 BOM at the start of the grammar or the samples file is not text: dropped, with a
    note; every sample passes (before: the first sample was 'rejected', or Lark failed at line 1 column 1)."""
    g = tmp_path / "g.lark"
    g.write_bytes((b"\xef\xbb\xbf" if which == "grammar" else b"") + b'start: WORD (" " WORD)*\nWORD: /[a-z]+/\n')
    s = tmp_path / "s.txt"
    s.write_bytes((b"\xef\xbb\xbf" if which == "samples" else b"") + b"abc de\nxy\n")
    out = run(make_cfg(tmp_path, "engine=reference", "dataset=custom", f"dataset.grammar={g}",
                       f"dataset.samples={s}", "audit.per_sample=0"))
    assert list(outcomes(out).values()) == ["ok", "ok"]
    assert "starts with a UTF-8 byte order mark; it is ignored" in capsys.readouterr().err


@pytest.mark.faults
@pytest.mark.parametrize("case", ["directory", "device", "too_large"])
def test_odd_input_paths_are_one_line_refusals(tmp_path, letters, monkeypatch, case):
    """Issue 27, item 8: a grammar path that is a directory, a device (an unbounded read before) or a file over the
    input size limit is refused naming the path and the fix, before any work."""
    from gcdbench.datasets.base import DataError

    g = {"directory": tmp_path, "device": "/dev/zero", "too_large": tmp_path / "big.lark"}[case]
    if case == "too_large":
        g.write_text('start: "a"\n' + "// filler\n" * 200_000)
        monkeypatch.setenv("GCDBENCH_MAX_INPUT_MB", "1")
    cfg = make_cfg(tmp_path, "engine=reference", "dataset=custom", f"dataset.grammar={g}", letters[2])
    match = {"directory": "is a directory: give the path of a file", "device": "is not a regular file",
             "too_large": "is larger than 1 MB: split it, or raise the limit with GCDBENCH_MAX_INPUT_MB"}[case]
    with pytest.raises(DataError, match=match):
        run(cfg)
    assert not list(tmp_path.rglob("run.json"))


def test_empty_samples_file_is_refused(tmp_path):
    from gcdbench.datasets.base import DataError

    g = tmp_path / "g.lark"
    g.write_text('start: "a"\n')
    s = tmp_path / "empty.txt"
    s.write_text("\n  \n")
    cfg = make_cfg(tmp_path, "engine=reference", "dataset=custom", f"dataset.grammar={g}", f"dataset.samples={s}")
    with pytest.raises(DataError, match="has no non-empty line"):
        run(cfg)


def _cli(*args, cwd=REPO):
    return subprocess.run([sys.executable, "-m", "experiments.run", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=300)


def test_cli_unknown_engine_lists_choices(tmp_path):
    r = _cli("engine=xgramar", f"out_dir={tmp_path}")
    assert r.returncode != 0
    assert "xgrammar" in r.stderr and "llguidance" in r.stderr


def test_cli_typo_in_key_fails_at_start(tmp_path):
    r = _cli("sampels=3", f"out_dir={tmp_path}")
    assert r.returncode != 0 and "sampels" in r.stderr


def test_cli_plus_typo_is_one_error_line(tmp_path):
    """Hydra suggests '+key=value' for an unknown key; the runner refuses the key nothing reads."""
    r = _cli("+sample=3", f"out_dir={tmp_path}", "progress=false")
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [r.stderr.strip()] and r.stderr.startswith("error: unknown config key")


@pytest.mark.faults
def test_cli_works_outside_the_repository_root(tmp_path):
    """``python -m gcdbench.experiments.run`` (what gcdbench-run runs) finds its configs from any folder."""
    r = subprocess.run([sys.executable, "-m", "gcdbench.experiments.run", "engine=reference", "tokenizer=bytes",
                        "samples=1", "audit.per_sample=0", "progress=false", f"out_dir={tmp_path / 'out'}"],
                       cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "reference on sample (bytes): pass 1/1" in r.stdout


@pytest.mark.faults
@pytest.mark.parametrize("key", ["dataset.name", "engine.name"])
def test_cli_path_in_a_name_writes_nothing_outside_out_dir(tmp_path, letters, key):
    """Issue 27, item 6: a name with ``../`` is refused in one line, and neither Hydra's log nor its .hydra files
    leave out_dir (Hydra names its run folder before the runner sees the name)."""
    out = tmp_path / "a" / "b" / "out"
    before = {p for p in tmp_path.rglob("*")}
    r = _cli(f"out_dir={out}", *letters, f"{key}=../../../../escape_x", "progress=false")
    assert r.returncode != 0
    assert "Traceback" not in r.stderr, r.stderr[-2000:]
    created = {p for p in tmp_path.rglob("*")} - before
    assert all(out in p.parents or p == out or p in out.parents for p in created), sorted(created)
    assert not list(tmp_path.parent.glob("escape_x*")) and not list(tmp_path.glob("**/escape_x*"))


@pytest.mark.faults
def test_cli_out_dir_that_is_a_file_is_one_line(tmp_path):
    """Issue 27, item 8: out_dir naming an existing file (or a path under one) is refused in one line, exit 2,
    before Hydra writes its folder (a NotADirectoryError traceback before)."""
    f = tmp_path / "afile"
    f.write_text("x")
    for out in (f, f / "sub"):
        r = _cli(f"out_dir={out}", "engine=reference", "tokenizer=bytes", "samples=1", "progress=false")
        assert r.returncode == 2, r.stderr[-2000:]
        assert r.stderr.strip() == f"error: out_dir={out}: {f} is a file, not a folder; give a folder (or a path " \
                                   "to create) as out_dir"


@pytest.mark.faults
def test_report_cli_refuses_a_file_as_out_and_a_missing_results_folder(tmp_path, capsys):
    """Issue 27, item 8: ``--out`` an existing file (FileExistsError before) and ``--results`` missing: one line."""
    from gcdbench.experiments.report import main

    f = tmp_path / "afile"
    f.write_text("x")
    with pytest.raises(SystemExit) as e:
        main(["--results", str(tmp_path), "--out", str(f)])
    assert e.value.code == 2 and capsys.readouterr().err == f"error: --out {f}: {f} is a file, not a folder; give a " \
                                                            "folder (or a path to create)\n"
    with pytest.raises(SystemExit) as e:
        main(["--results", str(tmp_path / "nowhere"), "--out", str(tmp_path / "rep")])
    assert e.value.code == 2 and "error: --results" in capsys.readouterr().err


def test_cli_missing_data_names_file_and_download(tmp_path):
    r = _cli("dataset=spider", f"data_root={tmp_path / 'nowhere'}", f"out_dir={tmp_path}")
    assert r.returncode == 2
    assert "dev_gold.sql" in r.stderr and "yale-lily.github.io/spider" in r.stderr


def test_experiment_preset_overrides_top_level_values(tmp_path):
    register()
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        cfg = compose(config_name="config", overrides=["experiment=table1"])
    assert cfg.out_dir == "results/runs" and cfg.limits.run_timeout_s == 900


@pytest.mark.parametrize("vocab_size", [1, 31, 32, 33, 257, 151_936])
def test_mask_count_is_the_number_of_allowed_ids_below_the_vocabulary_size(vocab_size):
    """The runner's popcount (n_allowed) ignores the padding bits of the last word, set or not."""
    import numpy as np

    from gcdbench.parsers.base import mask_count, mask_to_ids

    rng = np.random.default_rng(vocab_size)
    mask = rng.integers(-2**31, 2**31, size=(vocab_size + 31) // 32, dtype=np.int64).astype(np.int32)
    mask[-1] = -1  # every padding bit set
    assert mask_count(mask, vocab_size) == mask_to_ids(mask, vocab_size).size


def test_audits_run_after_the_timed_loop_and_survive_an_interrupted_run(tmp_path, letters, monkeypatch):
    """Masks to audit are saved beside the part during the run and compared with the reference afterwards;
    if the run stops before that, a re-run audits them without re-running the sample."""
    import gcdbench.experiments.runner as runner_mod

    cfg = make_cfg(tmp_path, "engine=xgrammar", *letters, "audit.per_sample=3")

    def die(*args):
        raise KeyboardInterrupt   # the run "dies" after its timed loop, before auditing and merging

    monkeypatch.setattr(runner_mod, "_audit_pending", die)
    with pytest.raises(KeyboardInterrupt):
        run(cfg)
    out = tmp_path / "custom_letters" / "bytes" / "xgrammar"
    pending = sorted(p.name for p in (out / "parts").glob("*.audit.npz"))
    assert pending == ["letters-0000.audit.npz", "letters-0001.audit.npz", "letters-0002.audit.npz"]
    monkeypatch.undo()
    out = run(cfg)
    assert not (out / "parts").exists()
    audit = pd.read_parquet(out / "audit.parquet")
    assert set(audit["sample_id"]) == {"letters-0000", "letters-0001", "letters-0002"} and audit["agree"].all()
    meta = json.loads((out / "run.json").read_text())
    # the second run compiled nothing (no sample left to run) and still has every sample's steps
    assert len(meta["inits"]) == 1 and [s["status"] for s in meta["sessions"]] == ["interrupted"]
    assert set(pd.read_parquet(out / "steps.parquet")["sample_id"]) == set(audit["sample_id"])


def test_engine_label_is_one_folder_name():
    from gcdbench.experiments.store import engine_label

    label = engine_label("psc", {"cache_dir": "/tmp/x y/psc", "lexer": "standard"}, {"cache_dir": None,
                                                                                    "lexer": "standard"})
    assert "/" not in label and " " not in label and label.startswith("psc__cache_dir-")


def test_report_marks_cells_that_mix_commits_or_ran_on_a_dirty_tree(tmp_path, letters, capsys):
    """Per-row provenance: a cell whose rows come from two commits, or from a dirty tree, is marked in Table 1's
    notes, the per-cell table and the summary line; a clean one-commit cell is not."""
    from gcdbench.experiments.report import cell_summary, write_report

    clean = run(make_cfg(tmp_path, "engine=reference", *letters, "audit.per_sample=0"))
    mixed = run(make_cfg(tmp_path, "engine=reference", "+engine.label=mixed", *letters, "audit.per_sample=0"))
    dirty = run(make_cfg(tmp_path, "engine=reference", "+engine.label=dirty", *letters, "audit.per_sample=0"))
    for cell, commits, flags in ((clean, ["a" * 40] * 3, [False] * 3), (mixed, ["a" * 40, "b" * 40, "a" * 40], [False] * 3),
                                 (dirty, ["a" * 40] * 3, [False, True, False])):
        df = pd.read_parquet(cell / "samples.parquet")
        df["git_commit"], df["git_dirty"] = commits, flags
        df.to_parquet(cell / "samples.parquet", index=False)
    write_report(tmp_path, tmp_path / "report", tokenizer="bytes")
    cells = pd.read_csv(tmp_path / "report" / "cells.csv").set_index("config")
    assert cells.loc["mixed", "provenance"] == "mixed commits (aaaaaaa, bbbbbbb)"
    assert cells.loc["dirty", "provenance"] == "dirty tree"
    assert pd.isna(cells.loc["reference", "provenance"])
    t1 = (tmp_path / "report" / "table1.md").read_text()
    assert "mixed × custom_letters: not from one clean commit: mixed commits" in t1
    assert "dirty × custom_letters: not from one clean commit: dirty tree" in t1 and "reference × custom" not in t1
    assert "WARNING: dirty tree" in cell_summary(dirty) and "WARNING" not in cell_summary(clean)


def test_git_state_ignores_the_named_folders_only(tmp_path):
    """A generator that writes its outputs into a tracked folder one by one (datasets/sampled/) records a clean
    tree for its later outputs; a change anywhere else still makes the tree dirty."""
    import subprocess

    from gcdbench.experiments.provenance import git_state

    def git(*a):
        subprocess.run(["git", "-C", str(tmp_path), *a], check=True, capture_output=True)

    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "a.json").write_text("1")
    (tmp_path / "code.py").write_text("x = 1")
    git("init", "-q")
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "c")
    assert git_state(repo=tmp_path)["dirty"] is False
    (tmp_path / "out" / "a.json").write_text("2")
    assert git_state(repo=tmp_path)["dirty"] is True
    assert git_state(("out",), repo=tmp_path)["dirty"] is False
    (tmp_path / "code.py").write_text("x = 2")
    assert git_state(("out",), repo=tmp_path)["dirty"] is True


def test_installed_code_reports_the_commit_its_wheel_was_built_from(tmp_path, monkeypatch):
    """No checkout around the code (a wheel): the state setup.py's build recorded, else unknown."""
    import gcdbench.parsers.common.gitstate as gs

    monkeypatch.setattr(gs, "REPO", tmp_path / "site-packages")          # no pyproject.toml there
    monkeypatch.setattr(gs, "BUILT_FROM", tmp_path / "built_from.json")
    assert gs.git_state() == {"commit": None, "dirty": None}            # no record: no commit claimed
    gs.BUILT_FROM.write_text('{"commit": "abc", "dirty": false}')
    assert gs.git_state(("results",)) == {"commit": "abc", "dirty": False} and gs.git_commit() == "abc"
    gs.BUILT_FROM.write_text("[1]")                                     # damaged: unknown, not an error
    assert gs.git_state() == {"commit": None, "dirty": None}


def test_a_run_ignores_changed_result_files_in_its_dirty_check(tmp_path, letters, monkeypatch):
    """A session's git_dirty looks at code only: its own out_dir and every committed result folder are left out
    (a bench that rewrote results/cliffs/bench.json had marked a later sweep's cells as run on a dirty tree)."""
    import gcdbench.experiments.runner as runner

    seen = []
    real = runner.git_state

    def spy(ignore=(), repo=None):
        seen.append(tuple(ignore))
        return real(ignore, repo)

    monkeypatch.setattr(runner, "git_state", spy)
    run(make_cfg(tmp_path, "engine=reference", *letters, "audit.per_sample=0"))
    assert seen and all("results" in ig for ig in seen), seen


def test_a_run_does_not_count_its_own_result_folder_as_a_dirty_tree(tmp_path):
    """fresh=true deletes a cell's committed result files before the session records its commit; those are
    results, not code, so the session's git_dirty must not turn true because of them."""
    from gcdbench.datasets.sampled import SAMPLED_DIR
    from gcdbench.experiments.provenance import repo_folders

    assert repo_folders(REPO / "results" / "suite", tmp_path / "out", SAMPLED_DIR) == ("results/suite", "datasets/sampled")


def test_worker_freezes_the_heap_after_a_compile():
    """After a compile (outside the timers) the worker collects and freezes what it holds, so a cycle collection
    inside a timed mask does not walk the tokenizer and every earlier grammar (MaskBench's 0.1-0.2 s masks)."""
    import gc

    from gcdbench.experiments.worker import compile_engine
    from gcdbench.parsers.base import GrammarSpec

    class Chan:
        def __init__(self):
            self.sent = []

        def send(self, msg):
            self.sent.append(msg)

    gc.unfreeze()
    chan = Chan()
    try:
        got = compile_engine(chan, "reference", {}, GrammarSpec("ab", 'start: "a" "b"\n'), "bytes")
        assert got is not None and chan.sent[-1][0] == "compiled"
        assert gc.get_freeze_count() > 1000
    finally:
        gc.unfreeze()
