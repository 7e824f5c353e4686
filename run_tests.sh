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
# Test workers (pytest-xdist): one per CPU core this process may use, at most 4 (each holds torch, and a notebook test
# a kernel beside it); on one core none (the plain serial run). HUBNORM_TEST_WORKERS=N sets the number (0: serial).
# --dist loadfile keeps each test file on one worker, and so each notebook's cells in order in one kernel.
workers=${HUBNORM_TEST_WORKERS:-$(.venv/bin/python -c 'import os
n = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
print(min(n, 4) if n > 1 else 0)')}
if ! [[ "$workers" =~ ^[0-9]+$ ]]; then
  echo "run_tests.sh: HUBNORM_TEST_WORKERS must be a whole number of test workers (0: one serial process); got '$workers'" >&2
  exit 2
fi
if [ "$workers" -gt 0 ]; then
  args=(-n "$workers" --dist loadfile "${args[@]}")
fi
exec .venv/bin/python -m pytest -q -p no:cacheprovider "${args[@]}" "$@"
