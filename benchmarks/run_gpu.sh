#!/usr/bin/env bash
# The GPU checks in one command (NVIDIA): first the gpu tests (pytest -m gpu tests/test_gpu.py: every fast path and
# every method on cuda against the plain form and the CPU), then benchmarks/bench_gpu.py: exact NNN and the
# log-sum-exp kernel vs the bare GEMM at a 1M-caption bank, faiss GPU IVF vs exact (NNN Table A5), streaming DBSN
# at Flickr30k train scale, and the wall time of `bash run_all.sh` (default profile). About 10-20 minutes.
#
#   bash benchmarks/run_gpu.sh [--dry-run] [bench_gpu.py arguments, e.g. --reps 1 --skip dbsn --cpu-reference]
#
# Writes into HUBNORM_GPU_OUT (default benchmarks/reports): gpu_tests.log, gpu.md and gpu.csv; the report is
# rewritten after every section (marked PARTIAL until the last), so a run stopped by a time limit keeps what it
# measured. On a machine whose image lacks POT (the one third-party need of `import hubnorm` beyond torch,
# numpy, scipy, pandas, tqdm, pyyaml), install its wheel first.
# PYTHON: the interpreter (default ../.venv/bin/python, else python3); it needs torch with CUDA, numpy, scipy,
# pandas, tqdm, pyyaml, POT and pytest (requirements-gpu.txt adds faiss's GPU build; without faiss section 2 is
# skipped with the reason). hubnorm is imported from lib/ when that interpreter has not installed it.
# HUBNORM_GPU_RUN_ALL=0 leaves out the run_all.sh section (a machine without the notebook tools).
# --dry-run: the same steps on the CPU at toy sizes (HUBNORM_GPU_TEST_DEVICE=cpu, bench_gpu.py --device cpu --tiny),
# a check of this script and of the tests' logic, not of a GPU; its report is gpu_tiny.md.
# Exit status: 0 when every step passed (or there is no CUDA device: nothing to measure), 1 when the tests failed
# (the benchmark still runs), else the benchmark's.
set -euo pipefail
cd "$(dirname "$0")"
PY=${PYTHON:-../.venv/bin/python}
if [ -z "${PYTHON:-}" ] && [ ! -x "$PY" ]; then PY=python3; fi
if ! command -v "$PY" >/dev/null 2>&1; then
  echo "run_gpu.sh: PYTHON='$PY' is not an interpreter on this machine" >&2; exit 2
fi
case "$PY" in */*) PY="$(cd "$(dirname "$PY")" && pwd)/$(basename "$PY")" ;; esac   # the tests run from the root
OUT=${HUBNORM_GPU_OUT:-reports}
if [ -e "$OUT" ] && [ ! -d "$OUT" ]; then
  echo "run_gpu.sh: HUBNORM_GPU_OUT='$OUT' exists and is not a folder: name a folder for the reports" >&2; exit 2
fi
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
case "${HUBNORM_GPU_RUN_ALL:-1}" in
  0) run_all=() ;;
  1) run_all=(--run-all) ;;
  *) echo "run_gpu.sh: HUBNORM_GPU_RUN_ALL must be 0 or 1; got '${HUBNORM_GPU_RUN_ALL}'" >&2; exit 2 ;;
esac
dry=0
if [ "${1:-}" = "--dry-run" ]; then dry=1; shift; fi
"$PY" -c "import hubnorm" 2>/dev/null || export PYTHONPATH="$(cd ../lib && pwd)${PYTHONPATH:+:$PYTHONPATH}"
"$PY" -c "import hubnorm" || { echo "run_gpu.sh: $PY cannot import hubnorm (see docs/install.md)" >&2; exit 2; }
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 MPLBACKEND=Agg PYTHONHASHSEED=0
if [ "$dry" = 1 ]; then
  export HUBNORM_GPU_TEST_DEVICE=cpu
  bench=(--device cpu --tiny)
else
  "$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" || {
    echo "run_gpu.sh: torch sees no CUDA device; nothing to measure (see docs/install.md, 'Check the GPU is used')."
    exit 0
  }
  bench=("${run_all[@]}")
fi
echo "run_gpu.sh: 1/2 gpu tests -> $OUT/gpu_tests.log"
tests=0
(cd .. && "$PY" -m pytest -q -rs -m gpu -p no:cacheprovider tests/test_gpu.py) >"$OUT/gpu_tests.log" 2>&1 || tests=1
tail -n 3 "$OUT/gpu_tests.log"
echo "run_gpu.sh: 2/2 bench_gpu.py -> $OUT"
"$PY" bench_gpu.py "${bench[@]}" --out-dir "$OUT" "$@"
exit "$tests"
