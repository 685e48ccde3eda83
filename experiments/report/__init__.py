"""Tables and figures from stored results only: every cell (a folder with a ``run.json``, or a re-stored cell) under
the results folders given.

``python -m experiments.report [--results results/runs] [--out results] [--also DIR ...] [--batch DIR ...]
[--before CSV ...] [--cliffs DIR] [--maskbench DIR] [--seeds DIR]`` (``gcdbench-report``) writes ``<out>/README.md`` with every section of
:data:`build.SECTIONS`, in order: Table 1 (seed 000's layout; ``table1.md``, ``.csv``, ``.tex``), every cell
(``cells.csv``), the disagreements with each engine's declared profile (``disagreements.csv.gz``), unreadable cells,
engine artifacts, machines, each ``--also`` folder (per-prefix-length tails, growth figure), "Beyond Table 1"
(the grammar suite and sampled decoding), batch decoding (``batch.csv``), the fuzzed grammars (``--cliffs``),
MaskBench (``--maskbench``), the other seeds' tables (``--seeds``) and the figures (``figures/``); and prints Table 1.

Modules: :mod:`.collect` reads cells into frames (the only reader of result files), one module per section
(:mod:`.table1`, :mod:`.cells`, :mod:`.disagreements`, :mod:`.growth`, :mod:`.beyond`, :mod:`.batch`,
:mod:`.cliffs`, :mod:`.maskbench`, :mod:`.seeds`, :mod:`.figures`) with the figures it draws, :mod:`.plot` and :mod:`.text` for what they share,
:mod:`.packed` and :mod:`.restore` for re-stored (slim) results. A damaged cell is skipped with one warning line
naming the file; every healthy cell is still reported.
"""
from gcdbench.experiments.report.batch import batch_overview, batch_section, batch_table
from gcdbench.experiments.report.build import SECTIONS, write_report
from gcdbench.experiments.report.cells import (artifacts, audit_agreement, audit_text, cell_summary,
                                               details)
from gcdbench.experiments.report.cli import main
from gcdbench.experiments.report.collect import (DATASET_ORDER, Unreadable, audit_counts, batch_stats,
                                                 cell_commits, cell_stats, cell_status, collect, collect_batch,
                                                 find_runs, has_profile_columns, is_batch, load_cells, load_steps,
                                                 provenance, read_cell_file, single_mode, warn)
from gcdbench.experiments.report.disagreements import (DISAGREEMENT_COLUMNS, disagreement_line,
                                                       disagreement_section, disagreements, write_disagreements)
from gcdbench.experiments.report.growth import further_runs, prefix_tails, read_before
from gcdbench.experiments.report.table1 import complexity, table1
from gcdbench.experiments.report.text import markdown, measured_at

__all__ = ["DATASET_ORDER", "DISAGREEMENT_COLUMNS", "SECTIONS", "Unreadable", "artifacts", "audit_agreement",
           "audit_counts", "audit_text", "batch_overview", "batch_section", "batch_stats", "batch_table",
           "cell_commits", "cell_stats", "cell_status", "cell_summary", "collect", "collect_batch", "complexity",
           "details", "disagreement_line", "disagreement_section", "disagreements", "find_runs", "further_runs",
           "has_profile_columns", "is_batch", "load_cells", "load_steps", "main", "markdown", "measured_at",
           "prefix_tails", "provenance", "read_before", "read_cell_file", "single_mode", "table1", "warn",
           "write_disagreements", "write_report"]
