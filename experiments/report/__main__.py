"""``python -m experiments.report`` (and ``python -m gcdbench.experiments.report``)."""
from gcdbench.experiments.report.cli import main

main()
