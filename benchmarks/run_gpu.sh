#!/usr/bin/env bash
# GPU benchmark (NVIDIA): writes benchmarks/reports/gpu.md and gpu.csv. Needs the GPU environment
# (pip install -r requirements-gpu.txt, or conda env create -f environment.yml; see docs/install.md).
# Sections: exact NNN at a 1M-caption bank vs the bare GEMM, faiss GPU IVF vs exact (NNN Table A5), streaming DBSN
# at Flickr30k train scale, and the wall time of `bash run_all.sh` (default profile). About 10-20 minutes.
# Extra arguments go to bench_gpu.py (e.g. --cpu-reference to also time exact NNN on the CPU, --skip dbsn).
set -euo pipefail
cd "$(dirname "$0")"
PY=${PYTHON:-../.venv/bin/python}
[ -x "$PY" ] || PY=python
"$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" || {
  echo "run_gpu.sh: torch sees no CUDA device; nothing to measure (see docs/install.md, 'Check the GPU is used')."
  exit 0
}
"$PY" bench_gpu.py --run-all "$@"
