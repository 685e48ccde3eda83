"""The machine's state in the cell's line (issue 66): a cell whose sessions ran while other processes used the
machine says so in the line the runner prints when it ends (report.cell_summary) and in the footnote of every
report table that holds it (report.text.measured_at); a cell stored before machine states were recorded, or run
alone, reads as before. Fake provenance records only: no real load, nothing timed."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from gcdbench.experiments import provenance
from gcdbench.experiments.report.cells import cell_summary
from gcdbench.experiments.report.text import measured_at, not_alone_note

STORED = Path(__file__).resolve().parents[1] / "results/gpu/NVIDIA_H200/runs/spider/qwen3/valiant"
ALONE = {"wall_s": 20.0, "others_cpu_s": 0.5, "others_cores": 0.025, "alone": True}
BUSY = {"wall_s": 10.0, "others_cpu_s": 15.0, "others_cores": 1.5, "alone": False, "load_before": [0.5, 0.4, 0.3],
        "load_after": [2.0, 1.0, 0.5]}


def test_cell_not_alone_sums_the_busy_sessions_and_names_the_threshold():
    assert provenance.cell_not_alone([]) == "" and provenance.cell_not_alone(None) == ""
    assert provenance.cell_not_alone([{"id": 1}, {"id": 2, "machine_state": ALONE}]) == ""   # stored before; alone
    assert provenance.cell_not_alone([{"id": 1, "machine_state": BUSY}]) == (
        "not alone: other processes used 15.0 s CPU during the cell (1.50 cores on average, above 0.10)")
    two = provenance.cell_not_alone([{"id": 1, "machine_state": ALONE}, {"id": 2, "machine_state": BUSY},
                                     {"id": 3, "machine_state": {**BUSY, "others_cpu_s": 5.0}}])
    assert two == ("not alone: other processes used 20.0 s CPU during the cell in 2 of its 3 sessions (1.00 cores "
                   "on average, above 0.10)")
    # the threshold is the one machine_state flags with (a session just above it is not alone, just below alone)
    t = provenance.NOT_ALONE_CORES
    for cores, alone in ((t * 1.5, False), (t * 0.5, True)):
        st = provenance.machine_state({"t": 0.0, "busy_s": 0.0, "own_s": 0.0},
                                      {"t": 100.0, "busy_s": 100.0 * cores, "own_s": 0.0})
        assert st["alone"] is alone and (provenance.cell_not_alone([{"machine_state": st}]) == "") is alone


def _cell(tmp_path: Path, *states) -> Path:
    """A copy of a small stored cell whose sessions carry ``states`` (none: as stored, before machine states)."""
    out = tmp_path / "spider" / "qwen3" / "valiant"
    shutil.copytree(STORED, out)
    if states:
        meta = json.loads((out / "run.json").read_text())
        base = meta["sessions"][0]
        meta["sessions"] = [{**base, "id": k + 1, "machine_state": st} for k, st in enumerate(states)]
        (out / "run.json").write_text(json.dumps(meta))
    return out


@pytest.mark.skipif(not STORED.is_dir(), reason=f"no stored cell {STORED} in this checkout")
def test_the_cell_line_warns_when_the_machine_was_not_alone(tmp_path):
    stored = cell_summary(_cell(tmp_path / "stored"))
    assert "not alone" not in stored   # stored before machine states: the line as it was
    assert cell_summary(_cell(tmp_path / "alone", ALONE)) == stored
    busy = cell_summary(_cell(tmp_path / "busy", ALONE, BUSY))
    assert busy == stored + ("; not alone: other processes used 15.0 s CPU during the cell in 1 of its 2 sessions "
                             "(1.50 cores on average, above 0.10)")


def test_a_table_footnotes_its_cells_that_ran_not_alone():
    cells = pd.DataFrame([{"config": "valiant", "dataset": "spider", "commit": "abc1234", "machine": "m",
                           "not_alone": ""},
                          {"config": "psc", "dataset": "spider", "commit": "abc1234", "machine": "m",
                           "not_alone": provenance.cell_not_alone([{"machine_state": BUSY}])},
                          {"config": "psc", "dataset": "go", "commit": "abc1234", "machine": "m",
                           "not_alone": float("nan")}])
    assert not_alone_note(cells.iloc[[0, 2]]) == "" and not_alone_note(cells.drop(columns=["not_alone"])) == ""
    note = not_alone_note(cells)
    assert note == (" **1 cell ran while the machine was not alone** (other processes used more than 0.10 of a "
                    "core on average; their figures may be slow or noisy, run them again with the machine alone): "
                    "psc × spider.")
    assert measured_at(cells) == "Measured at commit `abc1234` on m: all 3 cells." + note
