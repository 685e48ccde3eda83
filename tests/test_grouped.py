"""Datasets of many grammars (MaskBench: one per JSON Schema): one cell runs every group's samples under that
group's grammar, compiled in turn in one worker; a group the engine or the harness cannot compile is a typed
compile_error of that group's samples only, kept on resume when it is deterministic."""
from __future__ import annotations

import json

import pandas as pd
import pytest

from gcdbench.datasets.base import GrammarGroup, Sample, grouped
from gcdbench.experiments.config import ConfigError
from gcdbench.experiments.runner import run
from gcdbench.parsers.base import GrammarSpec
from runconf import cfg_maker, outcomes

#: the datasets come from :func:`groups_dataset` (``load_dataset`` replaced); the custom dataset's files are unread
make_cfg = cfg_maker("audit.per_sample=2", "samples=all", "dataset=custom", "dataset.grammar=unused.lark",
                     "dataset.samples=unused.txt")


def groups_dataset() -> object:
    def group(gid, lark, texts, refusal=None):
        spec = GrammarSpec(gid, lark, refusal=refusal)
        return GrammarGroup(gid, spec, [Sample(f"{gid}#{i}", t) for i, t in enumerate(texts)])

    return grouped("groups", [
        group("words", 'start: WORD (" " WORD)*\nWORD: /[a-z]+/\n', ["abc de", "xy"]),
        group("digits", "start: NUM\nNUM: /[0-9]+/\n", ["12", "1x"]),
        group("unconvertible", "", ["1"], refusal="keyword 'uniqueItems' at #/items: not a context-free language"),
        group("not_lalr", 'start: a | b\na: "x"\nb: "x"\n', ["x"]),
        group("words_again", 'start: WORD+\nWORD: /[a-z]/\n', ["ab"]),
    ])


@pytest.fixture
def groups(monkeypatch):
    ds = groups_dataset()
    monkeypatch.setattr("gcdbench.datasets.registry.load_dataset", lambda *a, **k: ds)
    return ds


def test_each_group_runs_under_its_own_grammar_in_one_worker(tmp_path, groups):
    cell = run(make_cfg(tmp_path, "engine=psc"))
    assert outcomes(cell) == {"words#0": "ok", "words#1": "ok", "digits#0": "ok", "digits#1": "rejected",
                              "unconvertible#0": "compile_error", "not_lalr#0": "compile_error",
                              "words_again#0": "ok"}
    meta = json.loads((cell / "run.json").read_text())
    session = meta["sessions"][0]
    # compiled once per group, all in the first worker (the refusals leave it waiting for the next grammar)
    assert [i.get("group") for i in session["inits"]] == ["words", "digits", "words_again"]
    fails = session["group_failures"]
    assert set(fails) == {"unconvertible", "not_lalr"}
    assert "uniqueItems" in fails["unconvertible"]["message"] and fails["not_lalr"]["kind"] == "refused"
    audit = pd.read_parquet(cell / "audit.parquet")
    assert set(audit["sample_id"]) == {"words#0", "words#1", "digits#0", "digits#1", "words_again#0"}
    assert audit["agree_profile"].all()
    # the refusals are deterministic: a resume has nothing to do
    again = run(make_cfg(tmp_path, "engine=psc"))
    assert len(json.loads((again / "run.json").read_text())["sessions"]) == 1


def test_the_reference_runs_every_group_it_can_read(tmp_path, groups):
    cell = run(make_cfg(tmp_path, "engine=reference"))
    got = outcomes(cell)
    assert got["not_lalr#0"] == "ok" and got["unconvertible#0"] == "compile_error" and got["digits#1"] == "rejected"


def test_batch_mode_refuses_many_grammars(tmp_path, groups):
    with pytest.raises(ConfigError, match="has 5 grammars"):
        run(make_cfg(tmp_path, "engine=psc", "batch.size=2"))


def test_sample_ids_must_be_unique_across_groups():
    from gcdbench.datasets.base import DataError

    g = GrammarSpec("g", "start: A\nA: /a/\n")
    with pytest.raises(DataError, match="repeat across its grammars"):
        grouped("d", [GrammarGroup("a", g, [Sample("s", "a")]), GrammarGroup("b", g, [Sample("s", "a")])])


def test_a_group_whose_compile_hangs_is_a_timeout_and_the_next_group_runs(tmp_path, monkeypatch):
    # the compile limit covers a new worker's start (after the time-out, for group "b"): 8 s holds that on a loaded
    # machine, and "slow" hangs for 120 s, far past it
    LIMIT = "limits.compile_timeout_s=8"   # noqa: N806
    g = 'start: WORD\nWORD: /[a-z]+/\n'
    ds = grouped("groups", [GrammarGroup(n, GrammarSpec(n, g), [Sample(f"{n}#0", "ab")]) for n in ("a", "slow", "b")])
    monkeypatch.setattr("gcdbench.datasets.registry.load_dataset", lambda *a, **k: ds)
    cell = run(make_cfg(tmp_path, "engine=reference", "engine.name=tests.faulty_engines:SlowGrammarEngine",
                        LIMIT, "audit.per_sample=0"))
    assert outcomes(cell) == {"a#0": "ok", "slow#0": "compile_error", "b#0": "ok"}
    session = json.loads((cell / "run.json").read_text())["sessions"][0]
    assert session["group_failures"]["slow"]["kind"] == "timeout"
    assert [i.get("group") for i in session["inits"]] == ["a", "b"]
    # a time-out is not deterministic: a resume compiles that group again (and it times out again)
    again = run(make_cfg(tmp_path, "engine=reference", "engine.name=tests.faulty_engines:SlowGrammarEngine",
                         LIMIT, "audit.per_sample=0"))
    assert len(json.loads((again / "run.json").read_text())["sessions"]) == 2
    # retry_compile_timeouts=false: the stored time-out stands, nothing is left to run (no new session)
    run(make_cfg(tmp_path, "engine=reference", "engine.name=tests.faulty_engines:SlowGrammarEngine",
                 LIMIT, "audit.per_sample=0", "retry_compile_timeouts=false"))
    assert len(json.loads((again / "run.json").read_text())["sessions"]) == 2
    assert outcomes(again)["slow#0"] == "compile_error"


def test_the_audit_reads_the_profile_each_compiled_grammar_declared(tmp_path, monkeypatch):
    """Pre3 picks its front end per grammar (bytes when the character-level grammar is LALR(1), else the lexer:
    Lark's standard lexing), so its declared profile depends on the grammar; the parent's uncompiled engine cannot
    know it. Each compile records its engine's profile, and the audit reads that one (it used the probe's
    ``standard`` for every grammar before, and disagreed on the ones compiled to bytes)."""
    def group(gid, lark, text):
        return GrammarGroup(gid, GrammarSpec(gid, lark), [Sample(f"{gid}#0", text)])

    ds = grouped("groups", [group("chars", 'start: "[" [NUM ("," NUM)*] "]"\nNUM: /[0-9]+/\n', "[12,3]"),
                            group("lexer", 'start: NAME+\nNAME: /[a-z]+/\n%ignore " "\n', "ab cd")])
    monkeypatch.setattr("gcdbench.datasets.registry.load_dataset", lambda *a, **k: ds)
    cell = run(make_cfg(tmp_path, "engine=pre3", "audit.per_sample=4"))
    assert set(outcomes(cell).values()) == {"ok"}
    inits = json.loads((cell / "run.json").read_text())["sessions"][0]["inits"]
    assert {i["group"]: i["profile"]["lexing"] for i in inits} == {"chars": "scannerless", "lexer": "standard"}
    audit = pd.read_parquet(cell / "audit.parquet")
    assert audit["agree_profile"].all(), audit[["sample_id", "step", "profile"]]


def test_a_refusal_names_the_byte_it_stopped_at_in_its_message_and_the_cell_line(tmp_path, groups):
    """A newcomer whose sample the grammar does not take sees where: the sample's message gives the byte offset,
    the bytes before it and the refused token, and the line the runner prints for the cell names the first sample
    that did not pass with that message."""
    import ast
    import re

    from gcdbench.experiments.report.cells import cell_summary

    cell = run(make_cfg(tmp_path, "engine=reference"))
    samples = pd.read_parquet(cell / "samples.parquet").set_index("sample_id")
    msg = samples.loc["digits#1", "message"]
    m = re.search(r"at byte (\d+) of the sample: (b'.*') then (b'.*')\)$", msg)
    assert m, msg
    # the bytes before it and the refused token are the sample's text there
    before, refused = ast.literal_eval(m.group(2)), ast.literal_eval(m.group(3))    # the worker wrote their reprs
    assert int(m.group(1)) == len(before) and (before + refused).startswith(b"1") and b"x" in before + refused
    assert samples.loc["digits#0", "message"] == ""
    line = cell_summary(cell)
    assert "first not passed: digits#1 rejected: oracle token" in line and "at byte" in line, line
