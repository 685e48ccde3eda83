#!/usr/bin/env bash
# A preset's sweep over datasets x tokenizers x engines one cell at a time, for a small machine that runs it over
# several sittings (issue 30's seed_tables: 150 cells of up to 10 min): the same runner and preset as
# `python -m experiments.run -m experiment=EXPERIMENT`, one `experiments.run` call a cell, each cell's log kept.
# Run it from a clean checkout, the machine alone.
#
#   bash experiments/sweep_cells.sh EXPERIMENT [OUT [DONE]]
#
# OUT   the results folder (default: the preset's out_dir). A cell whose run ended there (run.json written, no
#       parts/ left) is not run again: the runner would resume it, running the samples its run time limit
#       skipped in a second session with the limit's time again; remove its folder to run it again. A cell left
#       half done (killed: parts/ there) is resumed by the runner.
# DONE  a folder of cells packed by `python -m gcdbench.experiments.report.restore` (e.g. what an earlier sitting
#       stored and committed): a cell packed there (<dataset>/<tokenizer>/<engine>) is skipped
# Environment: DATASETS, TOKENIZERS, ENGINES (default: the preset's hydra.sweeper.params lists; set one to run a
# part first), LOGS (default $GCDBENCH_CACHE/logs/EXPERIMENT, $GCDBENCH_CACHE defaulting to ~/.cache/gcdbench),
# PY (default python). Tokenizers are the outer loop, then datasets, then engines: a (dataset, tokenizer) group's
# engines run back to back, on one machine when one sitting holds the group.
# `touch $OUT/STOP` stops before the next cell.
set -uo pipefail
EXP=${1:?usage: sweep_cells.sh EXPERIMENT [OUT [DONE]]}
PY=${PY:-python}
CONF=conf/experiment/$EXP.yaml
[ -e "$CONF" ] || { echo "no preset $CONF (run from the repository root)" >&2; exit 2; }
preset() {   # a key of the preset as words ('' when absent; the sweep lists are comma-separated strings)
  "$PY" -c "import sys; from omegaconf import OmegaConf as O; v = O.select(O.load(sys.argv[1]), sys.argv[2])
print('' if v is None else ' '.join(map(str, v)) if O.is_list(v) else str(v).replace(',', ' '))" "$CONF" "$1"
}
OUT=${2:-$(preset out_dir)}
DONE=${3:-}
[ -n "$OUT" ] || { echo "$CONF sets no out_dir: give OUT" >&2; exit 2; }
DATASETS=${DATASETS:-$(preset hydra.sweeper.params.dataset)}
TOKENIZERS=${TOKENIZERS:-$(preset hydra.sweeper.params.tokenizer)}
ENGINES=${ENGINES:-$(preset hydra.sweeper.params.engine)}
TOKENIZERS=${TOKENIZERS:-qwen3}
LOGS=${LOGS:-${GCDBENCH_CACHE:-$HOME/.cache/gcdbench}/logs/$EXP}
mkdir -p "$LOGS"
DONE_CELLS=""
if [ -n "$DONE" ] && [ -e "$DONE/_restored/cells.parquet" ]; then
  DONE_CELLS=$("$PY" -c "import sys, pandas as pd
print('\n'.join(pd.read_parquet(sys.argv[1], columns=['cell'])['cell']))" "$DONE/_restored/cells.parquet")
fi
for tok in $TOKENIZERS; do
  for ds in $DATASETS; do
    for e in $ENGINES; do
      if grep -qxF "$ds/$tok/$e" <<< "$DONE_CELLS"; then echo "packed in $DONE: $ds/$tok/$e"; continue; fi
      if [ -e "$OUT/$ds/$tok/$e/run.json" ] && [ ! -e "$OUT/$ds/$tok/$e/parts" ]; then
        echo "ended in $OUT: $ds/$tok/$e"; continue
      fi
      if [ -e "$OUT/STOP" ]; then echo "$OUT/STOP: stopping before $ds/$tok/$e"; exit 0; fi
      echo "== $(date -u '+%F %T') start $ds/$tok/$e"
      "$PY" -m experiments.run experiment="$EXP" dataset="$ds" tokenizer="$tok" engine="$e" out_dir="$OUT" \
        > "$LOGS/${ds}_${tok}_${e}.log" 2>&1
      echo "== $(date -u '+%F %T') end $ds/$tok/$e rc=$?"
    done
  done
done
echo "== $(date -u '+%F %T') every cell done"
