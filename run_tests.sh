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
# Test workers (pytest-xdist): HUBNORM_TEST_WORKERS=N runs N workers (--dist loadfile: each test file, and so each
# notebook's cells, in order on one worker). The default is 0, one serial process: with two workers a notebook
# kernel once failed to bind its TCP port ("Address already in use": kernels started at the same time by two
# processes can pick the same free port), so parallel runs are opt-in until the kernels use another transport.
workers=${HUBNORM_TEST_WORKERS:-0}
if ! [[ "$workers" =~ ^[0-9]+$ ]]; then
  echo "run_tests.sh: HUBNORM_TEST_WORKERS must be a whole number of test workers (0: one serial process); got '$workers'" >&2
  exit 2
fi
if [ "$workers" -gt 0 ]; then
  args=(-n "$workers" --dist loadfile "${args[@]}")
fi
exec .venv/bin/python -m pytest -q -p no:cacheprovider "${args[@]}" "$@"
