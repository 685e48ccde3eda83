"""Repeats, intervals, the compare command, the null engine and the machine's state (issue 66).

The real runs use the null engine plus a busy wait of 40 or 52 µs per mask (tests/delay_engine.py), three samples
of the tiny SQL grammar over the byte vocabulary, 5 repeats each: an A/A comparison (the same engine in two
folders) and a known 1.3x slowdown of the wait (the harness's floor of about a microsecond on top of both makes the
measured ratio about 1.28)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hydra import compose, initialize_config_dir

from gcdbench.experiments import compare, provenance, schema
from gcdbench.experiments.config import ConfigError, register
from gcdbench.experiments.report import stats
from gcdbench.experiments.runner import run

REPO = Path(__file__).resolve().parents[1]
GRAMMARS = REPO / "tests" / "grammars"
TINY = ["dataset=custom", f"dataset.grammar={GRAMMARS / 'tiny_sql.lark'}",
        f"dataset.samples={GRAMMARS / 'tiny_sql.txt'}", "samples=3"]
DELAY = {40: "tests.delay_engine:Delay40", 52: "tests.delay_engine:Delay52"}
LABEL = {40: "tests.delay_engine-Delay40", 52: "tests.delay_engine-Delay52"}
REPEATS = 5


def make_cfg(out_dir, *overrides):
    register()
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        return compose(config_name="config", overrides=[f"out_dir={out_dir}", "progress=false", "tokenizer=bytes",
                                                        "report=false", *TINY, *overrides])


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Folder ``a`` holds Delay40 and Delay52, folder ``b`` Delay40 again; 5 repeats each, run interleaved
    (repeat 0 of every cell, then repeat 1, ...) as a sweep with ``repeats=5`` runs them. Delay40's last repeat in
    ``a`` is run by ``repeats=5`` itself, resuming: repeats 0-3 are finished and kept, only repeat 4 runs."""
    root = tmp_path_factory.mktemp("stats")
    for r in range(REPEATS):
        for folder, delay in (("a", 40), ("a", 52), ("b", 40)):
            if (folder, delay, r) == ("a", 40, REPEATS - 1):
                continue
            run(make_cfg(root / folder, "engine=null_engine", f"engine.name={DELAY[delay]}", f"repeat={r}"))
    run(make_cfg(root / "a", "engine=null_engine", f"engine.name={DELAY[40]}", f"repeats={REPEATS}"))
    return root


# -- synthetic data: the bootstrap itself ------------------------------------------------------------------------
def _synthetic(rng, scale: float, repeats: int = 5, samples: int = 12, masks: int = 25, drift: float = 0.03):
    """Per repeat a drift factor, per sample its own level (samples differ in difficulty), log-normal masks."""
    out = []
    for _ in range(repeats):
        d = 1 + drift * rng.standard_normal()
        out.append([scale * d * (1 + s % 4) * rng.lognormal(0, 0.3, size=masks) for s in range(samples)])
    return out


def test_interval_covers_the_true_ratio_on_synthetic_data():
    """NEW is OLD's process times 1.3: the 95% interval of every statistic's ratio contains 1.3 in at least 18 of
    20 draws (the percentiles' true ratio is exactly 1.3 too: the scale multiplies every time), and lies above 1."""
    rng = np.random.default_rng(11)
    covered = total = 0
    for i in range(5):
        old = stats.synthetic("d", "old", _synthetic(rng, 10.0))
        new = stats.synthetic("d", "new", _synthetic(rng, 13.0))
        for r in stats.ratios(old, new, resamples=600, seed=i):
            total += 1
            covered += r["ratio_lo"] <= 1.3 <= r["ratio_hi"]
            if r["statistic"] != "p99.9":   # the p99.9 of 1,500 masks is too noisy to be sure of 1.3x
                assert r["verdict"] == "slower", r
    assert total == 20 and covered >= 18, covered


def test_aa_on_synthetic_data_is_not_significant():
    """The same process against itself: ``~`` for at least 19 of 20 statistics."""
    rng = np.random.default_rng(5)
    verdicts = []
    for i in range(5):
        a = stats.synthetic("d", "a", _synthetic(rng, 10.0))
        b = stats.synthetic("d", "b", _synthetic(rng, 10.0))
        verdicts += [r["verdict"] for r in stats.ratios(a, b, resamples=600, seed=i)]
    assert len(verdicts) == 20 and verdicts.count("~") >= 19, verdicts


def test_bootstrap_is_reproducible_and_resamples_samples_not_masks():
    """A fixed seed gives the same interval; a config whose samples differ (one slow sample of ten) gets a wider
    mean interval than the same masks treated as independent (one mask per sample) would."""
    rng = np.random.default_rng(3)
    times = [[np.full(50, 100.0 if s == 0 else 10.0) * rng.lognormal(0, 0.05, 50) for s in range(10)]]
    cfg = stats.synthetic("d", "c", times)
    assert stats.intervals(cfg, 500, seed=1) == stats.intervals(cfg, 500, seed=1)
    flat = stats.synthetic("d", "c", [[np.array([x]) for x in cfg.us]])
    (_, lo, hi), (_, flo, fhi) = stats.intervals(cfg, 500)["mean"], stats.intervals(flat, 500)["mean"]
    assert (hi - lo) > 3 * (fhi - flo)


def test_unstable_repeats_are_flagged_with_advice():
    rng = np.random.default_rng(2)
    steady = stats.synthetic("d", "s", _synthetic(rng, 10.0, drift=0.0))
    drifting = stats.synthetic("d", "x", [[x * (1 + 0.5 * r) for x in rep]
                                          for r, rep in enumerate(_synthetic(rng, 10.0, drift=0.0))])
    assert stats.stability(steady)["unstable"] is False
    st = stats.stability(drifting)
    assert st["unstable"] and "disagree" in st["why"] and "more repeats" in st["advice"]
    assert stats.stability(stats.synthetic("d", "one", _synthetic(rng, 10.0, repeats=1)))["unstable"] is None


# -- repeats: configuration, folders, order ---------------------------------------------------------------------
def test_repeats_sweep_puts_repeat_outermost_so_configs_interleave():
    """Hydra 1.3.8's basic sweeper iterates the last listed sweep fastest; conf/config.yaml lists ``repeat``
    first, so ``repeats=3`` over two engines runs A B, A B, A B (and ``interleave=false`` A A A, B B B in one job
    each)."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser

    def jobs(*overrides):
        register()
        with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
            cfg = compose(config_name="config", overrides=list(overrides), return_hydra_config=True)
        params = [f"{k}={v}" for k, v in cfg.hydra.sweeper.params.items()] + ["engine=psc,glrmask"]
        parsed = OverridesParser.create().parse_overrides(params)
        return [dict(o.split("=", 1) for o in job) for job in BasicSweeper.split_arguments(parsed, None)[0]]

    got = [(j["repeat"], j["engine"]) for j in jobs("repeats=3")]
    assert got == [(str(r), e) for r in range(3) for e in ("psc", "glrmask")]
    assert [(j["repeat"], j["engine"]) for j in jobs("repeats=3", "interleave=false")] == [("0", "psc"),
                                                                                          ("0", "glrmask")]
    # a preset's own sweeps (experiment=main: 2 datasets x its engines) come after repeat: still outermost
    main = jobs("experiment=main", "repeats=2")
    n = len(main) // 2
    assert [j["repeat"] for j in main] == ["0"] * n + ["1"] * n and main[:n] == [{**j, "repeat": "0"} for j in main[n:]]


def test_repeat_values_are_checked(tmp_path):
    for bad, key in (("repeats=0", "repeats"), ("repeat=-1", "repeat")):
        with pytest.raises(ConfigError, match=key):
            run(make_cfg(tmp_path, "engine=null_engine", bad))


def test_each_repeat_is_its_own_cell_and_resumes(runs):
    cells = runs / "custom_tiny_sql" / "bytes"
    names = sorted(p.name for p in (runs / "a").glob("custom_tiny_sql/bytes/*"))
    assert names == sorted([LABEL[40], LABEL[52]] + [f"{LABEL[d]}__repeat-{r}" for d in (40, 52)
                                                    for r in range(1, REPEATS)])
    meta = json.loads((runs / "a" / cells.relative_to(runs) / f"{LABEL[40]}__repeat-3" / "run.json").read_text())
    assert meta["identity"]["repeat"] == 3 and meta["outcomes"] == {"ok": 3}
    first = json.loads((runs / "a" / cells.relative_to(runs) / LABEL[40] / "run.json").read_text())
    assert "repeat" not in first["identity"]   # repeat 0: the identity of a cell run once
    # the machine's state is kept with every session; the null engine is not audited, saying why
    state = meta["sessions"][-1]["machine_state"]
    assert {"others_cpu_s", "others_cores", "alone", "wall_s"} <= set(state) and state["wall_s"] > 0
    assert "allows every token" in meta["audit_error"]
    # the fixture's repeats=5 resumed Delay40: repeats 0-3 were finished (one session each, kept), repeat 4 ran
    here = runs / "a" / cells.relative_to(runs)
    folders = [here / LABEL[40]] + [here / f"{LABEL[40]}__repeat-{r}" for r in range(1, REPEATS)]
    assert [len(json.loads((f / "run.json").read_text())["sessions"]) for f in folders] == [1] * REPEATS
    # rows carry their repeat (schema.ROW_REPEAT): repeat 0 (the cell run once) too
    for r, f in enumerate(folders):
        for table in ("steps", "samples"):
            rows = schema.read_rows(f / f"{table}.parquet")
            assert len(rows) and rows["repeat"].tolist() == [r] * len(rows), (f, table)
    # repeats=5 again: every repeat is finished, none runs again
    run(make_cfg(runs / "a", "engine=null_engine", f"engine.name={DELAY[40]}", f"repeats={REPEATS}"))
    again = json.loads((here / f"{LABEL[40]}__repeat-3" / "run.json").read_text())
    assert len(again["sessions"]) == len(meta["sessions"])


# -- real runs: A/A, a known slowdown, the compare command --------------------------------------------------------
def test_aa_on_real_runs_is_not_significant(runs):
    table, _ = compare.compare(runs / "a", runs / "b", LABEL[40], LABEL[40], resamples=1000)
    assert len(table) == 4 and (table["old_repeats"] == REPEATS).all()
    assert (table["verdict"] == "~").sum() >= 3, table[["statistic", "ratio", "ratio_lo", "ratio_hi", "verdict"]]


def test_known_slowdown_is_found_slower(runs):
    table, _ = compare.compare(runs / "a", runs / "a", LABEL[40], LABEL[52], resamples=1000)
    by = table.set_index("statistic")
    # the median: the mean and the tail also hold the preemptions of a shared machine (a CI runner), which can
    # make them too noisy for a verdict; they never say faster
    assert by.loc["p50", "verdict"] == "slower", table
    assert 1.15 < by.loc["p50", "ratio"] < 1.35 and by.loc["p50", "paired_samples"]
    assert "faster" not in set(table["verdict"]), table


def test_compare_command_exit_status_and_outputs(runs, tmp_path, capsys):
    a = str(runs / "a")
    args = ["--results", a, "--old", LABEL[40], "--new", LABEL[52], "--resamples", "500"]
    assert compare.main(args + ["--fail-on-slower", "1.1", "--csv", str(tmp_path / "c.csv"),
                                "--figure", str(tmp_path / "c.png")]) == 1
    out = capsys.readouterr()
    assert "| p50 |" in out.out and "slower" in out.out and "slower:" in out.err
    assert (tmp_path / "c.csv").read_text().startswith("dataset,") and (tmp_path / "c.png").stat().st_size > 0
    assert compare.main(args + ["--fail-on-slower", "2"]) == 0          # slower, but not beyond 2x
    assert compare.main(["--results", a, "--old", LABEL[52], "--new", LABEL[40], "--resamples", "500",
                         "--fail-on-slower", "1.1"]) == 0               # faster
    assert compare.main(["--results", a, "--old", "nope", "--new", LABEL[40]]) == 2
    assert "no config 'nope'" in capsys.readouterr().err
    assert compare.main([a, str(runs / "b")]) in (0, 1)                  # two folders: the same labels paired


def test_table1_prints_intervals_and_the_harness_floor(tmp_path, runs):
    """The report under Table 1: the floor line (a null-engine cell on the same tokenizer) and every config's
    intervals; a config run with repeats shows its pooled mean with an interval in Table 1 itself."""
    from gcdbench.experiments.report import write_report

    root = tmp_path / "runs"
    run(make_cfg(root, "engine=null_engine"))
    for r in range(2):
        run(make_cfg(root, "engine=null_engine", f"engine.name={DELAY[40]}", f"repeat={r}"))
    write_report(root, tmp_path / "report", tokenizer="bytes")
    text = (tmp_path / "report" / "README.md").read_text()
    assert "harness floor (null engine) on custom_tiny_sql: p50 " in text
    assert "### Intervals (bytes vocabulary)" in text and "| 2 repeats |" in text
    t1 = (tmp_path / "report" / "table1.md").read_text()
    assert "2 repeats pooled" in t1
    # beside it, the null engine's one run is marked as one run (one note shared by every such cell)
    k = next(i for i, ln in enumerate([ln for ln in t1.splitlines() if ln.startswith("- [")], 1)
             if "one run, no repeats" in ln)
    null_row = next(ln for ln in t1.splitlines() if ln.startswith("| null_engine "))
    assert f"[{k}]" in null_row, (null_row, t1)
    assert (tmp_path / "report" / "intervals.csv").exists()
    assert (tmp_path / "report" / "figures" / "intervals_bytes.png").stat().st_size > 0
    assert "](figures/intervals_bytes.png)" in text


def test_table1_gives_ratios_to_a_base_config_with_intervals(tmp_path, runs):
    """Under Table 1, every config run with repeats divided by the base config (``--ratio-base``): the known 1.3x
    slowdown is found as slower, with its interval, in the report and in ``ratios_<base>.csv``; without
    ``--ratio-base`` the base is the engine an adapter of the cells states its speed targets against
    (``Engine.speed_baseline``): the delay engines state none, so there is no ratio table."""
    import pandas as pd

    from gcdbench.experiments.report import write_report

    write_report(runs / "a", tmp_path / "report", tokenizer="bytes", ratio_base=LABEL[40])
    text = (tmp_path / "report" / "README.md").read_text()
    assert f"### Ratios to {LABEL[40]} (bytes vocabulary)" in text
    frame = pd.read_csv(tmp_path / "report" / f"ratios_{LABEL[40]}.csv")
    assert set(frame["config"]) == {LABEL[52]} and set(frame["statistic"]) == {"mean", "p50", "p99", "p99.9"}
    p50 = frame.set_index("statistic").loc["p50"]
    # the interval holds the ratio and has a width; the ratio may sit at one of its ends (a percentile bootstrap of
    # 5 repeats, one of them slowed by a busy machine: seen once with a sibling CI beside the test)
    assert p50["verdict"] == "slower" and 1.15 < p50["ratio"] < 1.35
    assert p50["ratio_lo"] <= p50["ratio"] <= p50["ratio_hi"] and p50["ratio_lo"] < p50["ratio_hi"]
    row = next(line for line in text.splitlines() if line.startswith(f"| {LABEL[52]} | custom_tiny_sql | 5 vs 5 |"))
    assert "slower" in row
    write_report(runs / "a", tmp_path / "default", tokenizer="bytes")
    assert "### Ratios to" not in (tmp_path / "default" / "README.md").read_text()
    assert not list((tmp_path / "default").glob("ratios_*.csv"))


def test_the_ratio_base_is_the_engine_an_adapter_states_its_targets_against():
    import pandas as pd

    from gcdbench.experiments.report.table1 import ratio_base
    from gcdbench.parsers.registry import engine_class

    stated = engine_class("valiant", runnable=False).speed_baseline
    assert stated and ratio_base(pd.DataFrame({"engine": ["psc", "valiant"]}), None) == stated
    assert ratio_base(pd.DataFrame({"engine": ["psc", "valiant"]}), "psc") == "psc"   # --ratio-base wins
    assert ratio_base(pd.DataFrame({"engine": ["psc"]}), None) is None                 # nobody states one


# -- the machine's state -----------------------------------------------------------------------------------------
def test_machine_state_says_when_the_machine_was_not_alone():
    before = {"t": 0.0, "busy_s": 100.0, "own_s": 10.0, "load": [0.5, 0.4, 0.3]}
    alone = provenance.machine_state(before, {"t": 10.0, "busy_s": 110.5, "own_s": 20.0, "load": [0.6, 0.4, 0.3]})
    assert alone["alone"] and provenance.not_alone_text(alone) is None
    busy = provenance.machine_state(before, {"t": 10.0, "busy_s": 125.0, "own_s": 20.0, "load": [2.0, 1.0, 0.5]})
    assert not busy["alone"] and busy["others_cores"] == pytest.approx(1.5)
    assert "not alone" in provenance.not_alone_text(busy) and "load 0.50 -> 2.00" in provenance.not_alone_text(busy)
    snap = provenance.machine_snapshot()
    assert snap["busy_s"] > 0 and snap["own_s"] > 0


def test_own_cpu_counts_a_helper_that_a_worker_ran_and_reaped():
    """A worker's own helper that ended (an engine's compile child) is this run's CPU, not another process's: its
    time is on the worker's waited-for children, which the machine state must count as its own."""
    import subprocess
    import sys
    import textwrap

    burn = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.6: pass"
    worker = textwrap.dedent(f"""
        import subprocess, sys, time
        subprocess.run([sys.executable, "-c", {burn!r}], check=True)   # the helper: burns, ends, is reaped
        print("reaped", flush=True)
        time.sleep(30)
    """)
    before = provenance._own_cpu_s()
    proc = subprocess.Popen([sys.executable, "-c", worker], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "reaped"
        used = provenance._own_cpu_s() - before     # the worker still runs; its helper has ended
    finally:
        proc.kill()
        proc.wait()
    assert used >= 0.5, used


def test_cells_of_other_identities_are_not_silently_pooled_as_repeats(tmp_path, capsys):
    """Repeat 1 run with another seed is not a repeat of repeat 0: the intervals pool them with a warning."""
    run(make_cfg(tmp_path, "engine=null_engine"))
    run(make_cfg(tmp_path, "engine=null_engine", "seed=1", "repeat=1"))
    configs = stats.read_configs(tmp_path)
    assert [c.n_repeats for c in configs.values()] == [2]
    assert "different identities" in capsys.readouterr().err
