#!/usr/bin/env bash
# Issue 29 ("Valiant at the edge"): every row of its table measured in one run of the bench harness, each to a
# bench file (records with commit and machine) under results/bench/edge_<commit>/, with the work counters that
# profile each row. Run it alone on the machine (no tests, builds or other runs beside it), from a clean commit:
#
#   bash experiments/edge_bench.sh            # every step not done yet (a step whose file exists is skipped)
#   bash experiments/edge_bench.sh batch      # named steps only
#
# Steps: sql (Valiant, GLRMask, PSC on Spider and sp-op, 30 samples), sql_counters (Valiant's work per mask),
# treebank (Valiant, all 300 samples) and treebank_counters, ambiguous (Valiant on ambiguous_binary at 10 ... 2,000
# terminals: the growth), batch (Valiant, B = 8, 16, 32, one process and two processes stepping together) and
# batch_threads (the same with threads=2 in one process), pre3_json (Pre3's front ends beside PSC on the suite's
# JSON, 30 samples), then the batch figure. Environment: PYTHON (default .venv/bin/python), DATA_ROOT (default
# ../shared/data).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
DATA=${DATA_ROOT:-../shared/data}
if [ -n "$(git status --porcelain --untracked-files=no)" ]; then
  echo "edge_bench: the tree has uncommitted changes; commit them first (results come from a clean commit)" >&2
  exit 2
fi
out=results/bench/edge_$(git rev-parse --short=7 HEAD)
mkdir -p "$out"
want=" ${*:-sql sql_counters treebank treebank_counters ambiguous batch batch_threads pre3_json} "

step() {
  local name=$1; shift
  [[ $want == *" $name "* ]] || return 0
  if [ -s "$out/$name.json" ]; then echo "$name: done before ($out/$name.json)"; return 0; fi
  echo "== $name: $*"
  local t0=$SECONDS
  if "$PY" -m gcdbench.experiments.bench "$@" --data-root "$DATA" --out "$out/$name.json" > "$out/$name.log" 2>&1; then
    echo "$name: $((SECONDS - t0)) s"
  else
    echo "$name: failed after $((SECONDS - t0)) s (last lines of $out/$name.log:)"; tail -5 "$out/$name.log"
  fi
}

step sql masks --engine valiant glrmask psc --dataset spider spider_spop --n 30
step sql_counters masks --engine valiant --dataset spider spider_spop --n 30 --counters
step treebank masks --engine valiant --dataset treebank --n all
step treebank_counters masks --engine valiant --dataset treebank --n all --counters
step ambiguous masks --engine valiant --dataset ambiguous_binary --n all "dataset.lengths=[10,50,200,500,1000,2000]"
step batch batch --engine valiant --dataset spider spider_spop treebank --batch 8 16 32 --processes 1 2 --steps 200
step batch_threads batch --engine valiant --dataset spider spider_spop treebank --batch 8 16 32 --threads 2 --steps 200
step pre3_json masks --engine pre3 psc --dataset json --n 30 --sweep pre3.front_end=chars,lexer
if [ -s "$out/batch.json" ] && [ -s "$out/batch_threads.json" ] && [ ! -s "$out/batch.png" ]; then
  "$PY" -m gcdbench.experiments.bench plot "$out/batch.json" "$out/batch_threads.json" --out "$out/batch"
fi
