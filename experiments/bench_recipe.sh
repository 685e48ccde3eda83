#!/usr/bin/env bash
# Run a bench recipe: a file of bench commands, one a line (`<step> <arguments of python -m
# gcdbench.experiments.bench>`; `#` starts a comment), each step's records to a bench file (commit and machine in
# it) under results/bench/<recipe name>_<commit>/<step>.json; a `plot` step draws the files it names ({out} is that
# folder) to <step>.png/.pdf. The recipes (which engines, datasets and options) live in conf/bench/. Run it alone on
# the machine (no tests, builds or other runs beside it), from a clean commit:
#
#   bash experiments/bench_recipe.sh conf/bench/edge.recipe            # every step not done yet
#   bash experiments/bench_recipe.sh conf/bench/edge.recipe batch      # named steps only
#
# A step whose output exists is skipped (the command resumes); a failing step is reported and the next one runs.
# Environment: PYTHON (default .venv/bin/python), DATA_ROOT (default ../shared/data).
set -euo pipefail -f    # -f: a recipe's [..] arguments are not file patterns
cd "$(dirname "$0")/.."
recipe=${1:?usage: bash experiments/bench_recipe.sh conf/bench/<name>.recipe [step ...]}
shift
[ -f "$recipe" ] || { echo "bench_recipe: no recipe file $recipe (the recipes are in conf/bench/)" >&2; exit 2; }
PY=${PYTHON:-.venv/bin/python}
DATA=${DATA_ROOT:-../shared/data}
if [ -n "$(git status --porcelain --untracked-files=no)" ]; then
  echo "bench_recipe: the tree has uncommitted changes; commit them first (results come from a clean commit)" >&2
  exit 2
fi
out=results/bench/$(basename "$recipe" .recipe)_$(git rev-parse --short=7 HEAD)
mkdir -p "$out"
only=" $* "
while read -r name cmd rest; do
  [[ -z $name || $name == \#* ]] && continue
  [[ $only == "  " || $only == *" $name "* ]] || continue
  args=${rest//\{out\}/$out}
  if [ "$cmd" = plot ]; then done_file=$out/$name.png; extra=(--out "$out/$name")
  else done_file=$out/$name.json; extra=(--data-root "$DATA" --out "$out/$name.json"); fi
  if [ -s "$done_file" ]; then echo "$name: done before ($done_file)"; continue; fi
  echo "== $name: $cmd $args"
  t0=$SECONDS
  # shellcheck disable=SC2086 - the recipe's arguments are words
  if "$PY" -m gcdbench.experiments.bench "$cmd" $args "${extra[@]}" > "$out/$name.log" 2>&1 < /dev/null; then
    echo "$name: $((SECONDS - t0)) s"
  else
    echo "$name: failed after $((SECONDS - t0)) s (last lines of $out/$name.log:)"; tail -5 "$out/$name.log"
  fi
done < "$recipe"
