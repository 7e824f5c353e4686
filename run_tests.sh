#!/usr/bin/env bash
# Set up the environment (first run: ~2 minutes) and run every test: the pytest suite and nbval on the
# committed notebooks (which must still produce their saved key numbers).
set -euo pipefail
cd "$(dirname "$0")"
bash scripts/bootstrap.sh
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 MPLBACKEND=Agg PYTHONHASHSEED=0
args=(tests)
shopt -s nullglob
nbs=(notebooks/[0-9][0-9]_*.ipynb)
if [ ${#nbs[@]} -gt 0 ]; then
  args+=(--nbval-lax --nbval-sanitize-with notebooks/nbval_sanitize.cfg "${nbs[@]}")
fi
exec .venv/bin/python -m pytest -q -p no:cacheprovider "${args[@]}" "$@"
