"""What a report section is: a name and a function from the report's context to README lines (it may also write
its own CSV files and figures under ``context.out``). The sections, in README order, are listed once, in
:data:`gcdbench.experiments.report.build.SECTIONS`."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import pandas as pd


@dataclass
class Context:
    """The report's inputs (the command line) and the cells every section shares, read once."""
    results: Path                      # --results: Table 1's cells
    out: Path                          # --out
    tokenizer: str = "qwen3"
    also: tuple = ()                   # --also: further run folders
    batch: tuple = ()                  # --batch: batch-mode folders
    before: tuple = ()                 # --before: per-prefix tail CSVs of earlier runs
    cliffs: Path | None = None         # --cliffs: the fuzzed-grammar folder
    maskbench: Path | None = None      # --maskbench: the MaskBench (JSON Schema) cells
    seeds: Path | None = None          # --seeds: the cells of the other seeds' tables (Java, Go, SQL)
    shapes: Path | None = None         # --shapes: the grammar-shape cells (experiment=shapes)
    ratio_base: str | None = None      # --ratio-base: the config Table 1's ratios divide by (None: an adapter's
                                       # speed_baseline, see report/table1.py ratio_base)
    cells: pd.DataFrame = field(default_factory=pd.DataFrame)   # single-mode cells under ``results``
    cold_cells: pd.DataFrame = field(default_factory=pd.DataFrame)   # cells under ``results`` run with cold=true
    batch_roots: list = field(default_factory=list)              # folders holding batch-mode cells
    table1_md: str = ""                # Table 1 as Markdown (the command prints it)

    @property
    def command(self) -> str:
        """The report command that makes this README (its first line quotes it)."""
        return (f"python -m experiments.report --results {self.results} --out {self.out}"
                + (" --also " + " ".join(map(str, self.also)) if self.also else "")
                + (" --batch " + " ".join(map(str, self.batch)) if self.batch else "")
                + (" --before " + " ".join(map(str, self.before)) if self.before else "")
                + (f" --maskbench {self.maskbench}" if self.maskbench else "")
                + (f" --seeds {self.seeds}" if self.seeds else "")
                + (f" --shapes {self.shapes}" if self.shapes else "")
                + (f" --ratio-base {self.ratio_base}" if self.ratio_base else ""))


@dataclass(frozen=True)
class Section:
    """One part of the report: ``lines(context)`` returns its README lines ([] when it has nothing to show)."""
    name: str
    lines: Callable[[Context], list[str]]
    help: str = ""
