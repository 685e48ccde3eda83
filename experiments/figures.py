"""``python -m experiments.figures --results results/runs --out results/figures``: the report's figures alone.
The figures live beside their sections in :mod:`gcdbench.experiments.report` (``report.figures``,
``report.batch``, ``report.growth``); this module keeps the command and the names other code imports."""
from gcdbench.experiments.report.batch import fig_batch
from gcdbench.experiments.report.collect import cell_status, load_cells, load_steps
from gcdbench.experiments.report.figures import (CAPTIONS, draw_all, fig_init_time, fig_latency_cdf,
                                                 fig_mask_vs_option, fig_mask_vs_prefix, fig_mask_vs_vocab,
                                                 fig_memory, figures, main, prefix_buckets, swept_options)
from gcdbench.experiments.report.growth import draw_growth, fig_growth, prefix_percentiles

__all__ = ["CAPTIONS", "cell_status", "draw_all", "draw_growth", "fig_batch", "fig_growth", "fig_init_time",
           "fig_latency_cdf", "fig_mask_vs_option", "fig_mask_vs_prefix", "fig_mask_vs_vocab", "fig_memory",
           "figures", "load_cells", "load_steps", "main", "prefix_buckets", "prefix_percentiles", "swept_options"]

if __name__ == "__main__":
    main()
