#!/usr/bin/env bash
# Set up the environment (first run: about 3 minutes) and run every test: the pytest suite and nbval on the
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
  # The workers share the cores: each (its torch, BLAS and faiss pools, and the notebook kernels it starts) gets
  # cores / workers threads, at least one, unless set already. Two workers of 2 threads each on 2 cores spin-wait
  # for each other (OpenMP): the same notebook pair ran 1.5x longer than with 1 thread each (README, Tests).
  cores=${cores:-$(.venv/bin/python -c "import os; print(len(os.sched_getaffinity(0)) if hasattr(os, 'sched_getaffinity') else os.cpu_count() or 1)")}
  per=$(( cores / workers > 0 ? cores / workers : 1 ))
  export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$per} MKL_NUM_THREADS=${MKL_NUM_THREADS:-$per} \
    OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-$per} HUBNORM_THREADS=${HUBNORM_THREADS:-$per}
fi
exec .venv/bin/python -m pytest -q -p no:cacheprovider "${args[@]}" "$@"
