#!/usr/bin/env bash
# Execute the notebooks in place with their default parameters (the "default" profile of run_all.sh), so that
# the committed .ipynb files carry the outputs nbval checks (run_tests.sh). Volatile papermill metadata
# (timings, paths, environment) is stripped afterwards so that a refresh with unchanged results only changes
# what really changed.
#
#   bash scripts/refresh_notebooks.sh              # every notebooks/[0-9][0-9]_*.ipynb
#   bash scripts/refresh_notebooks.sh 00 03        # the notebooks whose names start with these prefixes
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
export HF_HUB_OFFLINE=${HF_HUB_OFFLINE:-1} TRANSFORMERS_OFFLINE=${TRANSFORMERS_OFFLINE:-1} PYTHONHASHSEED=0
export HUBNORM_RESULTS="${HUBNORM_RESULTS:-$PWD/results}"
shopt -s nullglob
nbs=()
if [ $# -eq 0 ]; then
  nbs=(notebooks/[0-9][0-9]_*.ipynb)
else
  for p in "$@"; do nbs+=(notebooks/"$p"*.ipynb); done
fi
for nb in "${nbs[@]}"; do
  t0=$(date +%s)
  tmp="$(mktemp --suffix=.ipynb)"
  .venv/bin/python -m papermill -k python3 --cwd notebooks "$nb" "$tmp" --log-level WARNING
  .venv/bin/python scripts/strip_notebook_metadata.py "$tmp" "$nb"
  rm -f "$tmp"
  echo "refreshed $nb in $(( $(date +%s) - t0 ))s"
done
