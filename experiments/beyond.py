"""``python -m experiments.beyond --results results/suite --also results/runs --out results``: the "Beyond Table 1"
section alone. It lives in :mod:`gcdbench.experiments.report.beyond`; this module keeps the command and the names
other code imports."""
from gcdbench.experiments.report.beyond import (AMBIGUITY, beyond_section, cells_table, collect_cells,
                                                disagreements, fig_growth, gold_vs_sampled, growth, loglog_slope,
                                                main, profile_explained)
from gcdbench.experiments.report.collect import SAMPLED_SUFFIX, SUITE_ORDER, is_beyond, run_dirs

__all__ = ["AMBIGUITY", "SAMPLED_SUFFIX", "SUITE_ORDER", "beyond_section", "cells_table", "collect_cells",
           "disagreements", "fig_growth", "gold_vs_sampled", "growth", "is_beyond", "loglog_slope", "main",
           "profile_explained", "run_dirs"]

if __name__ == "__main__":
    main()
