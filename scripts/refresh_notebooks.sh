#!/usr/bin/env bash
# Re-execute notebooks in place with their default parameters (the "default" profile of run_all.sh), so that the
# committed .ipynb files carry the outputs nbval checks (run_tests.sh). The editable source of each notebook is
# its jupytext pair notebooks/NN_name.py: its cells are copied into the .ipynb first, then the notebook runs,
# then volatile metadata and stderr debris are stripped (scripts/strip_notebook_metadata.py) and the .ipynb is
# stamped with a fingerprint of its cells (scripts/notebook_pair.py).
#
# Safety: before anything runs, every selected .ipynb is compared with its .py. If an .ipynb holds cell changes
# its .py does not (edited in Jupyter without the jupytext pairing, after the last refresh), the script refuses,
# names the file and says how to keep or drop the edit: a refresh never silently wipes an edit.
#
#   bash scripts/refresh_notebooks.sh              # every notebooks/[0-9][0-9]_*.py
#   bash scripts/refresh_notebooks.sh 01 03        # the notebooks whose names start with these prefixes
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
export HF_HUB_OFFLINE=${HF_HUB_OFFLINE:-1} TRANSFORMERS_OFFLINE=${TRANSFORMERS_OFFLINE:-1} PYTHONHASHSEED=0
export HUBNORM_RESULTS="${HUBNORM_RESULTS:-$PWD/results}" HUBNORM_PROGRESS=0
unset HUBNORM_PROGRESS_FILE
shopt -s nullglob
srcs=()
if [ $# -eq 0 ]; then
  srcs=(notebooks/[0-9][0-9]_*.py)
else
  for p in "$@"; do
    matched=(notebooks/"$p"*.py)
    if [ ${#matched[@]} -eq 0 ]; then echo "refresh_notebooks.sh: no notebooks/$p*.py" >&2; exit 2; fi
    srcs+=("${matched[@]}")
  done
fi
refuse=0
for src in "${srcs[@]}"; do
  .venv/bin/python scripts/notebook_pair.py check "$src" "${src%.py}.ipynb" || refuse=1
done
if [ $refuse -ne 0 ]; then
  echo "refresh_notebooks.sh: nothing was executed" >&2
  exit 1
fi
for src in "${srcs[@]}"; do
  nb="${src%.py}.ipynb"
  t0=$(date +%s)
  fresh="$(mktemp --suffix=.ipynb)"
  tmp="$(mktemp --suffix=.ipynb)"
  .venv/bin/jupytext --quiet --to ipynb -o "$fresh" "$src"   # the cells exactly as in the .py source
  .venv/bin/python -m papermill -k python3 --cwd notebooks "$fresh" "$tmp" --log-level WARNING
  .venv/bin/python scripts/strip_notebook_metadata.py "$tmp" "$nb"
  .venv/bin/python scripts/notebook_pair.py stamp "$nb"
  rm -f "$tmp" "$fresh"
  .venv/bin/jupytext --quiet --sync "$nb"                # keep the pair's timestamps in step
  echo "refreshed $nb in $(( $(date +%s) - t0 ))s"
done
# the Colab copies (site/colab/) and the README's launch table follow the notebooks' cells (tests/test_site.py)
.venv/bin/python site/hubsite.py sync
