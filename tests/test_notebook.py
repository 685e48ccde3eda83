"""notebooks/explore.ipynb runs top to bottom on a small result set that this test produces with the runner."""
from __future__ import annotations

from pathlib import Path

import nbformat
import pytest

from gcdbench.experiments.runner import run
from runconf import make_cfg

REPO = Path(__file__).resolve().parents[1]
GRAMMARS = REPO / "tests" / "grammars"
NOTEBOOK = REPO / "notebooks" / "explore.ipynb"


def _cfg(out_dir: Path, engine: str):
    return make_cfg(out_dir, f"engine={engine}", "dataset=custom", f"dataset.grammar={GRAMMARS / 'tiny_sql.lark'}",
                    f"dataset.samples={GRAMMARS / 'tiny_sql.txt'}", "samples=2", "audit.per_sample=1")


def test_notebook_is_stored_without_outputs():
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nbformat.validate(nb)
    assert all(not c.get("outputs") and not c.get("execution_count") for c in nb.cells if c.cell_type == "code")
    assert "GCDBENCH_RESULTS" in "".join(c.source for c in nb.cells)


@pytest.mark.slow
def test_notebook_runs_top_to_bottom(tmp_path, monkeypatch):
    from nbclient import NotebookClient

    results = tmp_path / "runs"
    for engine in ("xgrammar", "llguidance"):
        run(_cfg(results, engine))
    monkeypatch.setenv("GCDBENCH_RESULTS", str(results))
    monkeypatch.setenv("MPLBACKEND", "module://matplotlib_inline.backend_inline")
    nb = nbformat.read(NOTEBOOK, as_version=4)
    NotebookClient(nb, timeout=300, kernel_name="python3",
                   resources={"metadata": {"path": str(NOTEBOOK.parent)}}).execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    text = "\n".join(str(o.get("text", "")) + str(o.get("data", {}).get("text/plain", "")) for o in outputs)
    assert "2 cells" in text and "xgrammar" in text and "llguidance" in text
    pngs = [o for o in outputs if "image/png" in o.get("data", {})]
    assert len(pngs) >= 4    # prefix, CDF, init, memory figures at least
    (tmp_path / "executed.ipynb").write_text(nbformat.writes(nb))


def test_notebook_on_empty_root_reports_zero_cells(tmp_path, monkeypatch):
    """With no results the first cells still run and say so, instead of failing on an empty frame."""
    from nbclient import NotebookClient

    monkeypatch.setenv("GCDBENCH_RESULTS", str(tmp_path / "nothing-here"))
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nb.cells = nb.cells[:2]
    NotebookClient(nb, timeout=120, kernel_name="python3",
                   resources={"metadata": {"path": str(NOTEBOOK.parent)}}).execute()
    assert "0 cells, 0 masks" in "".join(o.get("text", "") for o in nb.cells[1].outputs)
