"""``python -m experiments.beyond --results results/suite --also results/runs --out results``: the "Beyond Table 1"
section alone (the command README and the report name). The section lives in
:mod:`gcdbench.experiments.report.beyond`: import its names from there."""
from gcdbench.experiments.report.beyond import main

if __name__ == "__main__":
    main()
