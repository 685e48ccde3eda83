"""``python -m experiments.figures --results results/runs --out results/figures``: the report's figures alone (the
command README and the report name). The figures live beside their sections in
:mod:`gcdbench.experiments.report` (``report.figures``, ``report.batch``, ``report.growth``; the cells and steps
they read: ``report.collect``): import their names from there."""
from gcdbench.experiments.report.figures import main

if __name__ == "__main__":
    main()
