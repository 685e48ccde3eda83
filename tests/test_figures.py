"""Figures from stored results: every kind is drawn, failed cells stay visible, the report links them."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from gcdbench.experiments import schema
from gcdbench.experiments.report import growth
from gcdbench.experiments.report import figures as report_figures
from gcdbench.experiments.report import write_report
from gcdbench.experiments.report.collect import load_cells, load_steps
from gcdbench.experiments.report.plot import series_label

STEP_COLUMNS = schema.columns("steps")

REPO = Path(__file__).resolve().parents[1]


def write_cell(root: Path, engine, config, dataset, tokenizer="qwen3", vocab_size=151936, opts=None, n_samples=3,
               base_us=50.0, compile_error=None, aborted=None, outcomes=None, seed=0):
    """A result folder shaped like the runner's, with synthetic timings (µs growing with the prefix)."""
    out = root / dataset / tokenizer / config
    out.mkdir(parents=True)
    rng = np.random.default_rng(seed)
    outcomes = outcomes or (["compile_error"] * n_samples if compile_error else ["ok"] * n_samples)
    samples, steps = [], []
    for i, oc in enumerate(outcomes):
        sid = f"{dataset}-{i:04d}"
        n = 0 if oc in ("compile_error", "skipped") else 20 + 7 * i
        samples.append({"engine": engine, "config": config, "dataset": dataset, "tokenizer": tokenizer,
                        "sample_id": sid, "outcome": oc, "message": None, "wall_s": 0.1, "n_steps": n,
                        "peak_rss_mb": None if n == 0 else 300.0 + i})
        for k in range(n):
            steps.append({"engine": engine, "config": config, "dataset": dataset, "tokenizer": tokenizer,
                          "sample_id": sid, "step": k, "prefix_tokens": k, "prefix_bytes": 3 * k,
                          "mask_us": base_us * (1 + 0.05 * k) * rng.lognormal(0, 0.3), "commit_us": 1.0,
                          "n_allowed": 10, "oracle_allowed": True, "outcome": oc})
    pd.DataFrame(samples).to_parquet(out / "samples.parquet", index=False)
    if steps:
        pd.DataFrame(steps)[STEP_COLUMNS].to_parquet(out / "steps.parquet", index=False)
    meta = {"engine": engine, "config": config, "engine_options": opts or {}, "dataset": dataset,
            "tokenizer": tokenizer, "vocab_size": vocab_size, "n_samples": n_samples,
            "outcomes": pd.Series(outcomes).value_counts().to_dict(), "machine": {"cpu": "test cpu"}}
    if compile_error:
        meta["compile_error"] = compile_error
    else:
        meta.update(init_s=0.5 + seed, peak_rss_compile_mb=250.0 + 10 * seed, peak_rss_run_mb=320.0 + 10 * seed,
                    inits=[{"init_s": 0.5 + seed}])
    if aborted:
        meta["aborted"] = aborted
    (out / "run.json").write_text(json.dumps(meta))
    return out


def make_results(root: Path) -> Path:
    """Cells of every kind the figures must handle."""
    write_cell(root, "xgrammar", "xgrammar", "spider", base_us=800, seed=1)
    write_cell(root, "llguidance", "llguidance", "spider", base_us=60, seed=2)
    write_cell(root, "llguidance", "llguidance", "treebank", base_us=5000, seed=3, aborted="run time limit of 900 s",
               outcomes=["ok", "timeout", "skipped"])
    write_cell(root, "psc", "psc", "treebank", compile_error="LALR construction did not finish\nmore")
    # a vocabulary sweep: the same cell with two more tokenizers
    write_cell(root, "llguidance", "llguidance", "spider", tokenizer="llama3", vocab_size=128256, base_us=50, seed=4)
    write_cell(root, "llguidance", "llguidance", "spider", tokenizer="qwen3_6", vocab_size=248320, base_us=90, seed=5)
    # an occupancy sweep: Valiant with 1, 4, 16 workers, and one compile failure
    for w, us in ((1, 900), (4, 300), (16, 120)):
        write_cell(root, "valiant", f"valiant__workers-{w}", "spider", opts={"workers": w, "backend": "cuda"},
                   base_us=us, seed=6 + w)
    write_cell(root, "valiant", "valiant__workers-64", "spider", opts={"workers": 64, "backend": "cuda"},
               compile_error="compile exceeded the memory limit (17000 MB resident)")
    return root


@pytest.fixture
def results(tmp_path):
    return make_results(tmp_path / "runs")


def test_tidy_frames(results):
    steps = load_steps(results)
    assert {"engine", "config", "dataset", "tokenizer", "prefix_tokens", "mask_us", "vocab_size", "workers"} <= set(
        steps.columns)
    assert set(steps["tokenizer"]) == {"qwen3", "llama3", "qwen3_6"}
    assert steps.loc[steps["config"] == "valiant__workers-4", "workers"].eq(4).all()
    cells = load_cells(results)
    st = dict(zip(zip(cells["config"], cells["dataset"], cells["tokenizer"]), cells["status"]))
    assert st[("psc", "treebank", "qwen3")] == "compile error"
    assert st[("valiant__workers-64", "spider", "qwen3")] == "compile OOM"
    assert st[("llguidance", "treebank", "qwen3")] == "partial: timeout 1/3, skipped 1/3"
    assert "timeout 1" in st[("llguidance", "treebank", "qwen3")]
    assert st[("xgrammar", "spider", "qwen3")] is None


def test_prefix_buckets_mean_and_p99(results):
    steps = load_steps(results)
    s = steps[(steps["config"] == "xgrammar") & (steps["tokenizer"] == "qwen3")]
    b = report_figures.prefix_buckets(s, width=5)
    first = s[s["prefix_tokens"] < 5]["mask_us"]
    row = b[b["prefix"] == 0].iloc[0]
    assert row["n"] == len(first) and row["mean_us"] == pytest.approx(first.mean())
    assert row["p99_us"] == pytest.approx(np.percentile(first, 99))


def test_draw_all_writes_every_figure(results, tmp_path):
    out = tmp_path / "figs"
    paths = report_figures.draw_all(results, out)
    stems = {p.stem for p in paths}
    assert stems == {"mask_vs_prefix_qwen3", "latency_cdf_qwen3", "init_time_qwen3", "memory_qwen3",
                     "mask_vs_prefix_llama3", "latency_cdf_llama3", "init_time_llama3", "memory_llama3",
                     "mask_vs_prefix_qwen3_6", "latency_cdf_qwen3_6", "init_time_qwen3_6", "memory_qwen3_6",
                     "mask_vs_workers", "mask_vs_vocab"}
    assert {p.name for p in paths} == {f"{s}.{e}" for s in stems for e in ("png", "pdf")}
    assert (out / "mask_vs_prefix_qwen3.png").read_bytes()[:4] == b"\x89PNG"
    assert (out / "mask_vs_vocab.pdf").read_bytes()[:4] == b"%PDF"


def _panel(fig, title):
    return next(ax for ax in fig.axes if ax.get_visible() and ax.get_title() == title)


def test_every_series_is_drawn(results):
    """Each figure draws one series per cell that has masks (mean solid, p99 dashed), named in the legend, and
    its points where the data put them."""
    steps, cells = load_steps(results), load_cells(results)
    figs = report_figures.figures(steps, cells)
    spider = _panel(figs["mask_vs_prefix_qwen3"], "spider (qwen3)")
    configs = ["llguidance", "valiant__workers-1", "valiant__workers-16", "valiant__workers-4", "xgrammar"]
    assert _legend_labels(spider) == configs   # valiant__workers-64 failed: an × entry, no line
    assert [e for e in _legend_entries(spider) if e.startswith("× ")] == ["× valiant__workers-64: compile OOM"]
    assert len(spider.get_lines()) == 2 * len(configs)
    assert sorted(ln.get_linestyle() for ln in spider.get_lines()) == ["-"] * 5 + ["--"] * 5
    treebank = _panel(figs["mask_vs_prefix_qwen3"], "treebank (qwen3)")
    assert _legend_labels(treebank) == ["llguidance (partial: timeout 1/3, skipped 1/3)"]
    # the CDF: one step line per cell with masks, ending at its slowest mask (the ■ marker)
    cdf = _panel(figs["latency_cdf_qwen3"], "spider (qwen3); ● p50 ▲ p99 ■ max")
    assert _legend_labels(cdf) == configs
    slowest = steps[(steps["dataset"] == "spider") & (steps["tokenizer"] == "qwen3")].groupby("config")["mask_us"].max()
    maxima = sorted(float(ln.get_xdata()[0]) for ln in cdf.get_lines() if ln.get_marker() == "s")
    assert maxima == pytest.approx(sorted(slowest[configs]))
    # the sweep over workers: one series, its points at 1, 4, 16 with each cell's mean; 64 (failed) an × on the axis
    ax = figs["mask_vs_workers"].axes[0]
    assert _legend_labels(ax) == ["valiant on spider (qwen3)"]
    mean = next(ln for ln in ax.get_lines() if ln.get_label() == "valiant on spider (qwen3)")
    assert list(mean.get_xdata()) == [1, 4, 16]
    want = cells.set_index("config").loc[["valiant__workers-1", "valiant__workers-4", "valiant__workers-16"]]
    assert list(mean.get_ydata()) == pytest.approx(list(want["mask_mean_us"]))
    crosses = [c for c in ax.collections if len(c.get_offsets())]
    assert len(crosses) == 1 and list(crosses[0].get_offsets()[:, 0]) == [64]
    # the vocabulary sweep: llguidance on spider at the three vocabulary sizes, named by tokenizer
    ax = figs["mask_vs_vocab"].axes[0]
    assert _legend_labels(ax) == ["llguidance on spider"]
    assert list(ax.get_lines()[0].get_xdata()) == [128256, 151936, 248320]
    assert sorted(t.get_text() for t in ax.texts if t.get_text() in {"llama3", "qwen3", "qwen3_6"}) == [
        "llama3", "qwen3", "qwen3_6"]
    # init time: one bar per qwen3 cell; the two that failed to compile are hatched placeholders marked ×
    ax = figs["init_time_qwen3"].axes[0]
    bars = [p for p in ax.patches if p.get_width() > 0]
    assert len(bars) == int((cells["tokenizer"] == "qwen3").sum())
    assert sum(p.get_hatch() == "//" for p in bars) == 2
    assert sum(t.get_text().startswith(" × compile") for t in ax.texts) == 2


def _texts(fig):
    out = []
    for ax in fig.axes:
        out += [t.get_text() for t in ax.texts]
        leg = ax.get_legend()
        if leg:
            out += [t.get_text() for t in leg.get_texts()]
        out += [ax.get_xlabel(), ax.get_ylabel(), ax.get_title()]
    return "\n".join(out)


def test_failed_cells_are_visible_and_axes_have_units(results):
    steps, cells = load_steps(results), load_cells(results)
    figs = report_figures.figures(steps, cells)
    prefix = _texts(figs["mask_vs_prefix_qwen3"])
    assert "× psc: compile error" in prefix
    assert "llguidance (partial: timeout 1/3, skipped 1/3)" in prefix
    assert "prefix length (tokens)" in prefix and "time per mask" in prefix
    init = _texts(figs["init_time_qwen3"])
    assert "compile error" in init and "s (log)" in init
    assert "MB" in _texts(figs["memory_qwen3"]) and "compile error" in _texts(figs["memory_qwen3"])
    workers = _texts(figs["mask_vs_workers"])
    assert "valiant__workers-64 on spider: compile OOM" in workers and "workers" in workers
    assert "vocabulary size" in _texts(figs["mask_vs_vocab"])
    cdf = _texts(figs["latency_cdf_qwen3"])
    assert "p99" in cdf and "CDF" in cdf and "× psc: compile error" in cdf
    # the hatched placeholder bar of the failed cell is drawn
    ax = figs["init_time_qwen3"].axes[0]
    assert any(p.get_hatch() == "//" for p in ax.patches)


def test_no_sweep_no_sweep_figure(results):
    cells = load_cells(results)
    assert report_figures.swept_options(cells) == ["workers"]
    assert report_figures.swept_options(cells[cells["engine"] != "valiant"]) == []
    assert report_figures.fig_mask_vs_option(cells[cells["engine"] != "valiant"], "workers") is None
    assert report_figures.fig_mask_vs_vocab(cells[cells["tokenizer"] == "qwen3"]) is None


def test_one_worker_count_is_no_workers_figure(tmp_path):
    """CPU cells carry the unused ``workers`` option: one value per line must not draw seed 000's figure 5."""
    write_cell(tmp_path, "valiant", "valiant", "spider", opts={"workers": 32, "backend": "cpu"}, base_us=200, seed=1)
    write_cell(tmp_path, "valiant", "valiant", "treebank", opts={"workers": 32, "backend": "cpu"}, base_us=300, seed=2)
    cells = load_cells(tmp_path)
    assert report_figures.swept_options(cells) == [] and report_figures.fig_mask_vs_option(cells, "workers") is None


def test_any_engine_option_sweep_is_drawn(tmp_path):
    """The sweep figure reads the swept option from run.json's engine options, for any engine: a sweep over
    LLGuidance's ``threads`` (other options equal) draws ``mask_vs_threads``; a cell whose other options differ
    is a line of its own, named by the option that differs."""
    for t, us in ((1, 400), (2, 250)):
        for opt in (True, False):
            write_cell(tmp_path, "llguidance", f"llguidance__threads-{t}_forcing-{opt}", "spider",
                       opts={"threads": t, "forcing": opt}, base_us=us, seed=t + 3 * opt)
    cells = load_cells(tmp_path)
    assert report_figures.swept_options(cells) == ["threads"]
    figs = report_figures.figures(load_steps(tmp_path), cells)
    assert "mask_vs_threads" in figs and "mask_vs_workers" not in figs
    ax = figs["mask_vs_threads"].axes[0]
    assert _legend_labels(ax) == ["llguidance on spider (qwen3) [forcing=False]",
                                  "llguidance on spider (qwen3) [forcing=True]"]
    assert ax.get_xlabel() == "threads (engine option)"
    assert all(list(ln.get_xdata()) == [1, 2] for ln in ax.get_lines())


@pytest.fixture
def small_results(tmp_path):
    root = tmp_path / "small"
    write_cell(root, "xgrammar", "xgrammar", "spider", base_us=800, seed=1)
    write_cell(root, "psc", "psc", "spider", compile_error="LALR construction did not finish")
    return root


def test_report_draws_figures_and_links_them(small_results, tmp_path):
    out = tmp_path / "report"
    write_report(small_results, out)
    readme = (out / "README.md").read_text()
    assert "## Figures" in readme and "figures/mask_vs_prefix_qwen3.png" in readme
    assert (out / "figures" / "memory_qwen3.pdf").exists()
    assert "peak_rss_compile_mb" in readme   # memory stays a column of the per-cell table


def test_cli(small_results, tmp_path):
    r = subprocess.run([sys.executable, "-m", "experiments.figures", "--results", str(small_results), "--out",
                        str(tmp_path / "f")], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "init_time_qwen3.png" in r.stdout and (tmp_path / "f" / "init_time_qwen3.pdf").exists()
    r = subprocess.run([sys.executable, "-m", "experiments.figures", "--results", str(tmp_path / "none"), "--out",
                        str(tmp_path / "g")], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert r.returncode != 0 and "no run.json" in r.stderr


def test_report_further_runs_give_the_tail_at_every_prefix_length(small_results, tmp_path):
    """``--also DIR``: its own section, the per-prefix-length p99 file, and the lengths over the 1 ms line."""
    from gcdbench.experiments.report import prefix_tails

    extra = tmp_path / "tb300"
    cell = write_cell(extra, "valiant", "valiant", "treebank", n_samples=4, base_us=900, seed=5)
    out = tmp_path / "report"
    write_report(small_results, out, also=(extra,))
    readme = (out / "README.md").read_text()
    assert f"## Further runs: `{extra}`" in readme and "figures/mask_vs_prefix_tb300_qwen3.png" in readme
    tails = pd.read_csv(out / "prefix_tails_tb300.csv")
    steps = pd.read_parquet(cell / "steps.parquet")
    assert tails["masks"].sum() == len(steps)
    assert tails["prefix_tokens"].max() == steps["prefix_tokens"].max()
    want = prefix_tails(steps).set_index("prefix_tokens")["p99_us"]
    n_over = int((want > 1000).sum())
    assert 0 < n_over < len(want)   # 900 µs growing with the prefix: some lengths over 1 ms, some not
    assert f"exceeds 1,000 µs: {n_over} of {len(want)}" in readme


def test_report_lists_engine_artifact_sizes(small_results, tmp_path):
    """The CNF counts seed 000 reports (binary rules, nonterminals, left-child nonterminals) come from run.json."""
    cell = write_cell(small_results, "valiant", "valiant", "treebank", base_us=200, seed=2)
    meta = json.loads((cell / "run.json").read_text())
    meta["inits"] = [{"init_s": 0.6, "engine_info": {"cnf": {"binary_rules": 1234, "nonterminals": 321,
                                                             "left_nonterminals": 77, "terminals": 45},
                                                     "lexer_states": 99, "trie_nodes": 5, "tuples": 6}}]
    (cell / "run.json").write_text(json.dumps(meta))
    out = tmp_path / "report"
    write_report(small_results, out)
    readme = (out / "README.md").read_text()
    section = readme.split("## Engine artifacts", 1)[1].split("## Machines", 1)[0]
    assert "**valiant**" in section and "left-child nonterminals" in section
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in section.splitlines() if "treebank" in line]
    assert ["treebank", "qwen3", "1234", "321", "77", "45", "99", "5", "6"] in rows
    assert "**xgrammar**" not in section   # no artifact keys declared for it


def _legend_labels(ax) -> list[str]:
    """The legend's series (the entries of cells drawn as failed, ``× config: reason``, left out)."""
    return [t for t in _legend_entries(ax) if not t.startswith("× ")]


def _legend_entries(ax) -> list[str]:
    leg = ax.get_legend()
    return [t.get_text() for t in leg.get_texts()] if leg else []


def assert_no_incomplete_cell_drawn_as_complete(figs: dict, cells: pd.DataFrame):
    """Every line of a cell that is not complete (any sample not ``ok``, by ``report.collect.cell_status``) carries
    its status in the legend; a bare engine-config label is allowed only for a complete cell."""
    status = {(c["config"], c["dataset"], c["tokenizer"]): c["status"] for _, c in cells.iterrows()}
    checked = 0
    for stem, fig in figs.items():
        if stem.startswith(("mask_vs_prefix", "latency_cdf")):
            for ax in fig.axes:
                if not ax.get_visible() or " (" not in ax.get_title():
                    continue
                ds, tok = ax.get_title().split(";")[0].rstrip(")").split(" (")
                for label in _legend_labels(ax):
                    config = label.split(" (")[0]
                    st = status[(config, ds, tok)]
                    assert label == series_label(config, st), (stem, ds, label, st)
                    assert st is None or label.endswith(f"({st})"), (stem, label)
                    checked += 1
        if stem == "mask_vs_vocab":
            for label in _legend_labels(fig.axes[0]):
                config, ds = label.split(" (")[0].split(" on ")
                incomplete = [st for (c, d, _), st in status.items() if c == config and d == ds and st]
                assert bool(incomplete) == label.endswith(("(partial)", "(failed)")), (label, incomplete)
                checked += 1
    assert checked


def test_failed_cells_are_never_drawn_as_complete(results):
    # LLGuidance x TreeBank as committed before: every sample engine_error, but masks up to the error
    write_cell(results, "llguidance", "llguidance_raised", "treebank", outcomes=["engine_error"] * 3, seed=7)
    # CFGzip x Spider: some samples rejected
    write_cell(results, "cfgzip", "cfgzip", "spider", outcomes=["ok", "rejected", "ok"], seed=8)
    write_cell(results, "cfgzip", "cfgzip", "spider", tokenizer="llama3", vocab_size=128256,
               outcomes=["no_eos", "ok", "ok"], seed=9)
    steps, cells = load_steps(results), load_cells(results)
    st = dict(zip(zip(cells["config"], cells["dataset"], cells["tokenizer"]), cells["status"]))
    assert st[("llguidance_raised", "treebank", "qwen3")] == "failed: engine_error 3/3"
    assert st[("cfgzip", "spider", "qwen3")] == "partial: rejected 1/3"
    figs = report_figures.figures(steps, cells)
    assert_no_incomplete_cell_drawn_as_complete(figs, cells)
    prefix = _texts(figs["mask_vs_prefix_qwen3"])
    assert "llguidance_raised (failed: engine_error 3/3)" in prefix and "cfgzip (partial: rejected 1/3)" in prefix
    # a cell in which no sample passed is drawn dotted
    tb = next(ax for ax in figs["mask_vs_prefix_qwen3"].axes if ax.get_title() == "treebank (qwen3)")
    line = next(ln for ln in tb.get_lines() if ln.get_label().startswith("llguidance_raised"))
    assert line.get_linestyle() == ":"


def test_checker_catches_a_failed_cell_drawn_as_complete(results, monkeypatch):
    """The check above can fail: with the status left out of the legend it does."""
    write_cell(results, "llguidance", "llguidance_raised", "treebank", outcomes=["engine_error"] * 3, seed=7)
    steps, cells = load_steps(results), load_cells(results)
    monkeypatch.setattr(report_figures, "series_label", lambda config, status: config)
    with pytest.raises(AssertionError):
        assert_no_incomplete_cell_drawn_as_complete(report_figures.figures(steps, cells), cells)


def test_growth_figure_per_prefix_length(tmp_path):
    """Per-prefix-length p50/p99 of two result roots (before/after a change), one panel per dataset, target line."""
    before, after = tmp_path / "before", tmp_path / "after"
    write_cell(before, "valiant", "valiant", "treebank", base_us=400, seed=1)
    write_cell(after, "valiant", "valiant", "treebank", base_us=100, seed=2)
    t = growth.prefix_percentiles(load_steps(before))
    s = load_steps(before)
    row = t[t["prefix_tokens"] == 3].iloc[0]
    x = s[s["prefix_tokens"] == 3]["mask_us"]
    assert row["masks"] == len(x) and row["p50_us"] == pytest.approx(np.median(x))
    assert row["p99_us"] == pytest.approx(np.percentile(x, 99))
    paths = growth.draw_growth(before, after, tmp_path / "figs", limit_us=1000)
    assert {p.name for p in paths} == {"growth.png", "growth.pdf"}
    fig = growth.fig_growth({"before": t, "after": growth.prefix_percentiles(load_steps(after))}, 1000)
    ax = _panel(fig, "treebank")
    assert _legend_labels(ax) == ["before p50", "before p99", "after p50", "after p99", "target 1 ms"]
    lines = {ln.get_label(): ln for ln in ax.get_lines()}
    assert list(lines["before p99"].get_xdata()) == list(t["prefix_tokens"])
    assert list(lines["before p99"].get_ydata()) == pytest.approx(list(t["p99_us"]))
    assert list(lines["target 1 ms"].get_ydata()) == [1000, 1000]


def test_report_growth_figure_against_an_earlier_commit(small_results, tmp_path):
    """``--before CSV``: an earlier run's per-prefix tails (a prefix_tails CSV kept under ``..._<commit>.csv``) are
    drawn beside the --also run's tails, with a line of before/after numbers; a CSV that is not one is refused."""
    from gcdbench.experiments.report import prefix_tails
    from gcdbench.experiments.report.text import fmt_us as _fmt_us

    extra = tmp_path / "tb300"
    cell = write_cell(extra, "valiant", "valiant", "treebank", n_samples=4, base_us=900, seed=5)
    old = prefix_tails(pd.read_parquet(cell / "steps.parquet"))
    old[["p50_us", "p99_us"]] *= 4
    kept = tmp_path / "prefix_tails_tb300_abc1234.csv"
    old.to_csv(kept, index=False)
    out = tmp_path / "report"
    write_report(small_results, out, also=(extra,), before=(kept,))
    readme = (out / "README.md").read_text()
    assert "**Growth, valiant on treebank (qwen3)**, before (abc1234) → this run (" in readme
    assert f"highest per-length p99 {_fmt_us(old['p99_us'].max())} → " in readme
    assert (out / "figures" / "growth_tb300_valiant_qwen3.png").read_bytes()[:4] == b"\x89PNG"
    bad = tmp_path / "not_tails.csv"
    bad.write_text("a,b\n1,2\n")
    with pytest.raises(SystemExit, match="columns .* missing"):
        write_report(small_results, tmp_path / "r2", also=(extra,), before=(bad,))


def _stamp(cell: Path, commit: str) -> None:
    """Give a written cell's sample rows the provenance the runner records."""
    s = pd.read_parquet(cell / "samples.parquet")
    s["git_commit"], s["git_dirty"] = commit, False
    s.to_parquet(cell / "samples.parquet", index=False)


def _two_cells_of_commit_a(root: Path) -> Path:
    """An xgrammar and an llguidance cell on Spider, both measured at commit aaaaaaa; the llguidance cell."""
    a = write_cell(root, "xgrammar", "xgrammar", "spider", base_us=800, seed=1)
    b = write_cell(root, "llguidance", "llguidance", "spider", base_us=60, seed=2)
    _stamp(a, "a" * 40)
    _stamp(b, "a" * 40)
    return b


def test_report_names_the_commits_of_each_table(tmp_path):
    """A table whose cells come from one commit says which; cells of several commits are never mixed silently."""
    root = tmp_path / "runs"
    b = _two_cells_of_commit_a(root)
    write_report(root, tmp_path / "one")
    readme = (tmp_path / "one" / "README.md").read_text()
    assert "Measured at commit `aaaaaaa` on test cpu" in readme and "all 2 cells" in readme
    assert "Cells of" not in readme
    assert list(pd.read_csv(tmp_path / "one" / "cells.csv")["commit"]) == ["aaaaaaa", "aaaaaaa"]
    _stamp(b, "b" * 40)
    write_report(root, tmp_path / "two")
    readme = (tmp_path / "two" / "README.md").read_text()
    assert "**Cells of 2 commits in this table**" in readme
    assert "`aaaaaaa` on test cpu (? cores, ? GB): 1 cell (xgrammar × spider)" in readme
    assert "`bbbbbbb` on test cpu (? cores, ? GB): 1 cell (llguidance × spider)" in readme


def test_report_names_the_machines_of_each_table(tmp_path):
    """Cells of one commit measured on two machines are named per machine, never pooled under one line."""
    root = tmp_path / "runs"
    b = _two_cells_of_commit_a(root)
    meta = json.loads((b / "run.json").read_text())
    meta["machine"] = {"cpu": "other cpu", "cpu_count": 2, "memory_gb": 23.5}
    (b / "run.json").write_text(json.dumps(meta))
    write_report(root, tmp_path / "out")
    readme = (tmp_path / "out" / "README.md").read_text()
    assert "Measured at commit" not in readme
    assert "**Cells of 2 machines in this table** (compare timings only within one machine)" in readme
    assert "`aaaaaaa` on test cpu (? cores, ? GB): 1 cell (xgrammar × spider)" in readme
    assert "`aaaaaaa` on other cpu (2 cores, 23.5 GB): 1 cell (llguidance × spider)" in readme


def test_report_removes_figures_an_earlier_report_drew(small_results, tmp_path):
    """The report owns <out>/figures: a figure of a cell no longer stored does not stay beside the new ones."""
    out = tmp_path / "report"
    (out / "figures").mkdir(parents=True)
    stale = out / "figures" / "mask_vs_prefix_llama3.png"
    stale.write_bytes(b"old")
    keep = out / "figures" / "notes.txt"
    keep.write_text("not a figure")
    write_report(small_results, out)
    assert not stale.exists() and keep.exists()
    assert (out / "figures" / "mask_vs_prefix_qwen3.png").exists()


def test_measured_at_counts_a_repeated_cell_name():
    """A group's cells of one config and dataset (one per vocabulary) are named once, with their count."""
    from gcdbench.experiments.report.text import measured_at

    rows = ([{"config": "valiant", "dataset": "go", "commit": "b", "machine": "m"}] * 3
            + [{"config": "valiant", "dataset": "java", "commit": "b", "machine": "m"}]
            + [{"config": "xgrammar", "dataset": "go", "commit": "a", "machine": "m"}] * 13)
    text = measured_at(pd.DataFrame(rows))
    assert text.startswith("**Cells of 2 commits in this table**")
    assert "`a` on m: 13 cells; `b` on m: 4 cells (valiant × go (3 cells), valiant × java)." in text
