#!/usr/bin/env bash
# Run every performance benchmark; reports land in benchmarks/reports/<name>.md and .csv.
# Run late on a quiet machine (check `uptime`): ratios are taken within one run, absolute times are noisy.
set -euo pipefail
cd "$(dirname "$0")"
PY=${PYTHON:-../.venv/bin/python}
$PY bench_topk.py
# memory of NNN at 200k x 5k, BLIP cross-encoder latency
for f in bench_nnn_memory.py bench_cross_encoder.py; do [ -f "$f" ] && $PY "$f"; done
# the evaluator's ranks: numpy vs torch counting against the GEMM
$PY bench_ranks.py
$PY bench_sweeps.py
$PY bench_faiss_nnn.py
$PY bench_sinkhorn.py
# the certificate's near-duplicate search: faiss vs a torch +-1 product (CPU, CUDA) vs numpy bit counts
$PY bench_hamming.py
$PY bench_score_certificate.py
# float64 SN in memory: kernel-domain vs log-domain iterations, and POT
$PY bench_sinkhorn64.py
# why every timed peer starts after an idle interval: OpenBLAS threads spin-wait after a call
$PY bench_blas_spin.py
# float32 vs float64: every table of notebooks 04 and 05 compared at the printed precision
$PY bench_float32.py
# notebook 07's caption encoding: batch size and precision of the sentence encoder
$PY bench_text_encoding.py
# scores as input: memory-mapped bank matrices against embeddings, and a 3 GB fit against one read of the file
$PY bench_scores.py
$PY bench_scores_read.py
# Dask backend (needs the distributed extra): 1 vs 2 workers on a 1.6 GB sharded bank
$PY -c "import distributed" 2>/dev/null && $PY bench_distributed.py
