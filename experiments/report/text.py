"""Formatting shared by every report section: Markdown tables, µs and s entries, inline code, and the one sentence
that says which commits and machines a table's cells were measured at."""
from __future__ import annotations

import numpy as np
import pandas as pd

from gcdbench.experiments.provenance import NOT_ALONE_CORES as _NOT_ALONE_CORES


def get(c, key):
    """A cell value, with pandas' NaN for a missing value read as None."""
    v = c.get(key)
    return None if v is None or (isinstance(v, float) and np.isnan(v)) else v


def fmt_us(x) -> str:
    """A time in µs for a table: ``1,234`` from 100 µs up, ``12.3`` below, ``–`` when missing."""
    if x is None or (isinstance(x, float) and np.isnan(x)):
        return "–"
    return f"{x:,.0f}" if x >= 100 else f"{x:.1f}"


def fmt_s(x) -> str:
    """A time in seconds for a table: ``1.23s`` below 100 s, ``123s`` from there, ``–`` when missing."""
    if x is None or (isinstance(x, float) and np.isnan(x)):
        return "–"
    return f"{x:.2f}s" if x < 100 else f"{x:.0f}s"


def markdown(df: pd.DataFrame, parse_numbers: bool = True) -> str:
    """``df`` as a Markdown table (pandas' ``to_markdown``): missing values empty, floats as ``1,234.5``;
    ``parse_numbers=False`` prints string cells exactly as they are (Table 1's formatted entries)."""
    cells = df.astype(object).where(df.notna(), None)
    return cells.to_markdown(index=False, floatfmt=",.1f", missingval="", disable_numparse=not parse_numbers)


def md_code(s) -> str:
    """``s`` made safe inside Markdown inline code in a table or list (no backticks, pipes or raw newlines)."""
    return str(s).replace("`", "ˋ").replace("\n", "\\n").replace("\r", "\\r").replace("\t", "\\t").replace("|", "\\|")


def figure_link(stem: str) -> str:
    """The README line that shows ``figures/<stem>.png`` (its PDF is written beside it, not linked: the repository
    keeps the PNGs only, see ``.gitignore``)."""
    return f"![{stem}](figures/{stem}.png)"


def _counted(names: list[str]) -> str:
    """The names in first-seen order, a repeated one once with its count ("valiant × go (3 cells)")."""
    counts: dict[str, int] = {}
    for n in names:
        counts[n] = counts.get(n, 0) + 1
    return ", ".join(n if k == 1 else f"{n} ({k} cells)" for n, k in counts.items())


def measured_at(cells: pd.DataFrame) -> str:
    """One sentence naming the commit(s) and machine(s) the cells of one table were measured at; when they come
    from several commits or machines, how many cells each group has (and which, for every group but the largest
    unless it is small), so a table never mixes commits or machines silently."""
    if cells.empty:
        return ""
    return _measured_at(cells) + jit_note(cells) + not_alone_note(cells)


def jit_note(cells: pd.DataFrame) -> str:
    """A footnote for a table whose cells had masks inside whose timer numba loaded or compiled machine code
    (``jit_masks``, left out of the per-mask figures); empty when none had."""
    if "jit_masks" not in cells.columns:
        return ""
    hit = cells[pd.to_numeric(cells["jit_masks"], errors="coerce").fillna(0) > 0]
    if hit.empty:
        return ""
    names = [f"{c['config']} × {c['dataset']} ({int(c['jit_masks'])})" for _, c in hit.iterrows()]
    total = int(hit["jit_masks"].sum())
    return (f" **{total} mask{'s' if total > 1 else ''} compiled inside the timer** (numba loaded or compiled machine "
            f"code during the mask; left out of the per-mask figures): {_counted(names)}.")


def not_alone_note(cells: pd.DataFrame) -> str:
    """A footnote for a table whose cells ran while the machine was not alone (``not_alone``: the warning of each
    cell's line, experiments/provenance.py ``cell_not_alone``: other processes used more than ``NOT_ALONE_CORES``
    of a core on average); empty when none did or the cells do not say (stored before issue 66)."""
    if "not_alone" not in cells.columns:
        return ""
    hit = cells[cells["not_alone"].map(lambda v: isinstance(v, str) and v.startswith("not alone"))]
    if hit.empty:
        return ""
    names = [f"{c['config']} × {c['dataset']}" for _, c in hit.iterrows()]
    n = len(hit)
    return (f" **{n} cell{'s' if n > 1 else ''} ran while the machine was not alone** (other processes used more "
            f"than {_NOT_ALONE_CORES:.2f} of a core on average; their figures may be slow or noisy, run them again "
            f"with the machine alone): {_counted(names)}.")


def _measured_at(cells: pd.DataFrame) -> str:
    groups: dict[tuple, list[str]] = {}
    for _, c in cells.iterrows():
        commit, machine = c.get("commit"), c.get("machine")
        key = (tuple(commit.split("+")) if isinstance(commit, str) and commit else (),
               machine if isinstance(machine, str) else "")
        groups.setdefault(key, []).append(
            f"{c['config']} × {c['dataset']}" + (f" B={int(c['B'])}" if "B" in c and pd.notna(c.get("B")) else ""))

    def label(commits: tuple, machine: str) -> str:
        return ("+".join(f"`{x}`" for x in commits) or "an unknown commit") + (f" on {machine}" if machine else "")

    if len(groups) == 1:
        ((commits, machine), names), = groups.items()
        what = (f"commit `{commits[0]}`" if len(commits) == 1 else
                "commits " + ", ".join(f"`{x}`" for x in commits) + " (cells of mixed commits)" if commits
                else "an unknown commit")
        on = f" on {machine}" if machine else ""
        return f"Measured at {what}{on}: " + ("the one cell." if len(names) == 1 else f"all {len(names)} cells.")
    n_commits = len({commits for commits, _ in groups})
    n_machines = len({machine for _, machine in groups})
    head = (f"**Cells of {n_commits} commits in this table**" if n_commits > 1 else
            f"**Cells of {n_machines} machines in this table** (compare timings only within one machine)")
    parts = []
    for i, ((commits, machine), names) in enumerate(sorted(groups.items(), key=lambda kv: -len(kv[1]))):
        named = len(names) <= 12 or i > 0   # every group but the largest names its cells
        parts.append(f"{label(commits, machine)}: {len(names)} cell{'s' if len(names) > 1 else ''}"
                     + (f" ({_counted(names)})" if named else ""))
    return head + ": " + "; ".join(parts) + "."
