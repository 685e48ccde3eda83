"""Repeats run back to back and the cell's line (issue 66): ``repeats=R interleave=false`` prints one line per repeat
(as an interleaved sweep's jobs do, one each), and a machine that was not alone is said once per cell: in the cell's
line (report.cell_summary), or, where no line is shown, by the runner on stderr. The machine's state is faked busy
(runner.machine_state replaced): no real load, nothing timed."""
from __future__ import annotations

import subprocess
import sys

from runconf import make_cfg, words
from gcdbench.experiments import runner
from gcdbench.experiments.report.cells import cell_summary

BUSY = {"wall_s": 10.0, "others_cpu_s": 15.0, "others_cores": 1.5, "alone": False, "load_before": [0.5, 0.4, 0.3],
        "load_after": [2.0, 1.0, 0.5]}
#: the command (``python -m gcdbench.experiments.run ...``) with every session's machine state faked busy
BUSY_COMMAND = ("import runpy, sys\nimport gcdbench.experiments.runner as r\n"
                f"r.machine_state = lambda before, after: dict({BUSY!r})\n"
                "sys.argv = ['gcdbench-run'] + sys.argv[1:]\n"
                "runpy.run_module('gcdbench.experiments.run', run_name='__main__', alter_sys=True)\n")
LINE = "not alone: other processes used 15.0 s CPU during the cell (1.50 cores on average"


def test_repeats_back_to_back_print_a_line_each_that_says_not_alone_once(tmp_path):
    runs = tmp_path / "runs"
    r = subprocess.run([sys.executable, "-c", BUSY_COMMAND, "engine=null_engine", *words(tmp_path, "abc de", "xy"),
                        "tokenizer=bytes", "progress=false", "audit.per_sample=0", "repeats=2", "interleave=false",
                        f"out_dir={runs}"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    cells = runs / "custom_letters" / "bytes"
    assert sorted(p.name for p in cells.iterdir()) == ["null_engine", "null_engine__repeat-1"]
    lines = [ln for ln in r.stdout.splitlines() if ": pass 2/2," in ln]
    assert len(lines) == 2, r.stdout   # one per repeat, not the last one's only
    # repeat 0 is the cell a run without repeats makes (same folder, same identity); later ones say which they are
    assert "repeat" not in lines[0].split(":")[0] and lines[1].split(":")[0].endswith("repeat 1"), lines
    assert all(ln.count("not alone") == 1 and LINE in ln for ln in lines), lines
    assert "not alone" not in r.stderr and r.stdout.count("not alone") == 2, (r.stdout, r.stderr)


def test_the_runner_warns_itself_only_where_no_line_is_shown(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(runner, "machine_state", lambda before, after: dict(BUSY))
    data = words(tmp_path, "abc de")
    runner.run(make_cfg(tmp_path / "runs", "engine=null_engine", *data, "audit.per_sample=0"))
    out, err = capsys.readouterr()
    assert err.count("not alone") == 1 and "warning: null_engine: the machine was not alone" in err, err
    assert "not alone" not in out
    shown = []
    runner.run(make_cfg(tmp_path / "runs", "engine=null_engine", *data, "audit.per_sample=0", "fresh=true"),
               on_cell=lambda cell: shown.append(cell_summary(cell)))
    out, err = capsys.readouterr()
    assert "not alone" not in out + err   # the line says it
    assert len(shown) == 1 and shown[0].count("not alone") == 1 and LINE in shown[0], shown
