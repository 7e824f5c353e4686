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
# Test workers (pytest-xdist): by default one per usable CPU core, at most 2 (one core: one serial process, no
# xdist); HUBNORM_TEST_WORKERS=N sets N (0 or 1: serial). --dist loadfile: each test file, and so each notebook's
# cells, runs in order on one worker. Safe in parallel: every Jupyter kernel of the run talks over Unix domain
# sockets, not TCP ports that kernels started together by two workers could both pick, and every worker writes
# notebook results into a folder of its own (tests/conftest.py).
workers=${HUBNORM_TEST_WORKERS-}
if [ -z "$workers" ]; then
  cores=$(.venv/bin/python -c "import os; print(len(os.sched_getaffinity(0)) if hasattr(os, 'sched_getaffinity') else os.cpu_count() or 1)")
  workers=$(( cores < 2 ? cores : 2 ))
elif ! [[ "$workers" =~ ^[0-9]+$ ]]; then
  echo "run_tests.sh: HUBNORM_TEST_WORKERS must be a whole number of test workers (0: one serial process); got '$workers'" >&2
  exit 2
fi
if [ "$workers" -gt 1 ]; then
  args=(-n "$workers" --dist loadfile "${args[@]}")
fi
exec .venv/bin/python -m pytest -q -p no:cacheprovider "${args[@]}" "$@"
