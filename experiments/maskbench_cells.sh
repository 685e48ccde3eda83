#!/usr/bin/env bash
# MaskBench's preset (conf/experiment/maskbench.yaml) one cell at a time, for a small machine that runs it over
# several sittings (issue 28): every engine x valid/invalid, the slow engines as shards (dataset.shard=i/N, one cell
# each; the report adds a config's shards together), each engine compiling into its own cache folder (so its TTFM is
# a compile, and its invalid cells read what its valid cells compiled). Run it from a clean checkout, the machine alone.
#
#   bash experiments/maskbench_cells.sh [OUT [DONE]]
#
# OUT   the results folder (default results/maskbench/runs). A cell whose run ended there (run.json written, no
#       parts/ left) is not run again (the runner would resume it, running the samples its run time limit
#       skipped with the limit's time again); a cell left half done (killed: parts/ there) is resumed.
# DONE  a folder of cells packed by `python -m gcdbench.experiments.report.restore` (e.g. the cells of the same commit
#       an earlier sitting stored): a cell packed there is skipped
# Environment: CACHE_ROOT (default ~/.cache/gcdbench-maskbench: <root>/<engine> is each engine's GCDBENCH_CACHE),
# SHARDS (default 8), SLOW (default: the preset's experiment.sharded, the engines run as shards), ENGINES (default:
# the preset's), LOGS (default <CACHE_ROOT>/logs: a log per cell). `touch $OUT/STOP` stops before the next cell.
# The quick engines go first, then the shards.
set -uo pipefail
OUT=${1:-results/maskbench/runs}
DONE=${2:-}
CACHE_ROOT=${CACHE_ROOT:-$HOME/.cache/gcdbench-maskbench}
SHARDS=${SHARDS:-8}
PY=${PY:-python}
preset() {   # a key of the preset, as words (OmegaConf reads the YAML; the engine sweep is one comma-separated string)
  "$PY" -c "import sys; from omegaconf import OmegaConf as O; v = O.select(O.load(sys.argv[1]), sys.argv[2])
print(' '.join(map(str, v)) if O.is_list(v) else str(v).replace(',', ' '))" conf/experiment/maskbench.yaml "$1"
}
SLOW=${SLOW:-$(preset experiment.sharded)}
ENGINES=${ENGINES:-$(preset hydra.sweeper.params.engine)}
packed() {   # the cells of DONE's pack, one relative path a line
  [ -n "$DONE" ] && [ -e "$DONE/_restored/cells.parquet" ] || return 0
  "$PY" -c "import sys, pandas; print('\n'.join(pandas.read_parquet(sys.argv[1], columns=['cell'])['cell']))" \
    "$DONE/_restored/cells.parquet"
}
DONE_CELLS=$(packed)
LOGS=${LOGS:-$CACHE_ROOT/logs}
mkdir -p "$LOGS"
cell() {   # engine kind [shard]
  local ds=maskbench extra=()
  [ "$2" = invalid ] && ds=maskbench_invalid
  if [ -n "${3:-}" ]; then ds="${ds}_shard${3}of${SHARDS}"; extra=("dataset.shard=$3/$SHARDS"); fi
  if grep -qxF "$ds/qwen3/$1" <<< "$DONE_CELLS"; then echo "packed in $DONE: $ds/qwen3/$1"; return 0; fi
  if [ -e "$OUT/$ds/qwen3/$1/run.json" ] && [ ! -e "$OUT/$ds/qwen3/$1/parts" ]; then
    echo "ended in $OUT: $ds/qwen3/$1"; return 0
  fi
  if [ -e "$OUT/STOP" ]; then echo "$OUT/STOP: stopping before $ds/qwen3/$1"; exit 0; fi
  echo "== $(date -u '+%F %T') start $ds/qwen3/$1"
  GCDBENCH_CACHE="$CACHE_ROOT/$1" "$PY" -m experiments.run experiment=maskbench dataset=maskbench \
    dataset.kind="$2" engine="$1" out_dir="$OUT" "${extra[@]}" > "$LOGS/${ds}_$1.log" 2>&1
  local rc=$?
  echo "== $(date -u '+%F %T') end $ds/qwen3/$1 rc=$rc"
}
for e in $ENGINES; do
  if [[ " $SLOW " != *" $e "* ]]; then cell "$e" valid; cell "$e" invalid; fi
done
for e in $ENGINES; do
  if [[ " $SLOW " == *" $e "* ]]; then
    for s in $(seq 0 $((SHARDS - 1))); do cell "$e" valid "$s"; cell "$e" invalid "$s"; done
  fi
done
echo "== $(date -u '+%F %T') every cell done"
