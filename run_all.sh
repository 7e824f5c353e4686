#!/usr/bin/env bash
# Regenerate every figure and table: execute notebooks/[0-9][0-9]_*.ipynb with papermill.
#
#   bash run_all.sh [--profile default|shared|paper-coco|paper-flickr30k] [--keep-going] [--only NAME]
#
# Profiles (the notebooks' `source` parameter and friends):
#   default          synthetic embeddings (hubnorm.synthetic, seeded; every number is a "synthetic analog"),
#                    small sizes: all notebooks in a few minutes on 2 CPU cores. Outputs: results/
#   shared           real CLIP embeddings from ../shared/data/embeddings/ (Flickr8k 100 images x 5 captions,
#                    ViT-B/32) when that folder exists. Tiny: a smoke test on real data. Outputs: results/shared/
#   paper-flickr30k  real embeddings cache:flickr30k:ViT-B-32-quickgelu:openai, paper grids and sizes.
#   paper-coco       real embeddings cache:coco:ViT-B-32-quickgelu:openai (the cross-dataset bank is the other
#                    one). Needs `python -m hubnorm.data fetch/encode ...` first: the loader's error names the
#                    commands. Outputs: results/<profile>/
# Executed notebooks go to <outputs>/notebooks/. One line per notebook: name, seconds, ok/FAILED. Stops at the
# first failure unless --keep-going; exits non-zero naming the failed notebooks. --only NAME runs the notebooks
# whose file name contains NAME (e.g. --only 03 or --only hubness).
set -uo pipefail
cd "$(dirname "$0")"

profile=default
keep_going=0
only=""
while [ $# -gt 0 ]; do
  case "$1" in
    --profile) profile="${2:?--profile needs a value}"; shift 2 ;;
    --profile=*) profile="${1#*=}"; shift ;;
    --keep-going) keep_going=1; shift ;;
    --only) only="${2:?--only needs a value}"; shift 2 ;;
    --only=*) only="${1#*=}"; shift ;;
    -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
    *) echo "run_all.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done

bash scripts/bootstrap.sh || { echo "run_all.sh: scripts/bootstrap.sh failed" >&2; exit 1; }
export HF_HUB_OFFLINE=${HF_HUB_OFFLINE:-1} TRANSFORMERS_OFFLINE=${TRANSFORMERS_OFFLINE:-1} PYTHONHASHSEED=0

SHARED_EMB="${HUBNORM_SHARED_DATA:-../shared/data}/embeddings"
# papermill YAML parameters per profile (notebooks ignore parameters they do not declare)
case "$profile" in
  default)
    params=""
    results="results" ;;
  shared)
    folder="$SHARED_EMB/flickr8k-100x5-clip-vitb32"
    if [ ! -d "$folder" ]; then
      echo "run_all.sh: profile 'shared' needs the real embeddings in $folder (the shared data folder beside" \
           "the repository; set HUBNORM_SHARED_DATA to point elsewhere). Use --profile default otherwise." >&2
      exit 1
    fi
    folder=$(cd "$folder" && pwd)
    params="{source: 'local:$folder', source_kwargs: {test_fraction: 0.34}, cross_source: null, fast: true, n_boot: 200, nnn_fractions: [1.0, 0.5], dbsn_fractions: [1.0, 0.5, 0.25, 0.125], taus: [0.005, 0.01, 0.015, 0.02, 0.025], batch_size: 16}"
    results="results/shared" ;;
  paper-flickr30k)
    params="{source: 'cache:flickr30k:ViT-B-32-quickgelu:openai', source_kwargs: {}, cross_source: 'cache:coco:ViT-B-32-quickgelu:openai', cross_kwargs: {splits: [train]}, fast: false, n_boot: 1000}"
    results="results/paper-flickr30k" ;;
  paper-coco)
    params="{source: 'cache:coco:ViT-B-32-quickgelu:openai', source_kwargs: {}, cross_source: 'cache:flickr30k:ViT-B-32-quickgelu:openai', cross_kwargs: {splits: [train]}, fast: false, n_boot: 1000}"
    results="results/paper-coco" ;;
  *)
    echo "run_all.sh: unknown profile '$profile' (default, shared, paper-coco, paper-flickr30k)" >&2; exit 2 ;;
esac
export HUBNORM_RESULTS="$PWD/$results"
out="$results/notebooks"
mkdir -p "$out"

shopt -s nullglob
notebooks=(notebooks/[0-9][0-9]_*.ipynb)
failed=()
start_all=$(date +%s)
echo "run_all.sh: profile $profile -> $results/ (${#notebooks[@]} notebooks)"
# Notebooks that cannot run in a profile, with the reason (printed, not counted as failures).
skip_reason() {
  case "$profile:$1" in
    shared:05_*|paper-*:05_*)
      echo "the simulated cross-encoder needs synthetic latents and the BLIP one needs the image files;" \
           "run it by hand with -p cross_encoder blip once images are in place (see data/README.md)" ;;
  esac
}
skipped=0
for nb in "${notebooks[@]}"; do
  name=$(basename "$nb" .ipynb)
  if [ -n "$only" ] && [[ "$name" != *"$only"* ]]; then continue; fi
  why=$(skip_reason "$name")
  if [ -n "$why" ]; then
    printf '%-40s %5s   skipped: %s\n' "$name" "-" "$why"
    skipped=$((skipped + 1))
    continue
  fi
  t0=$(date +%s)
  log="$out/$name.log"
  if [ -n "$params" ]; then
    .venv/bin/python -m papermill -k python3 --cwd notebooks -y "$params" "$nb" "$out/$name.ipynb" >"$log" 2>&1
  else
    .venv/bin/python -m papermill -k python3 --cwd notebooks "$nb" "$out/$name.ipynb" >"$log" 2>&1
  fi
  rc=$?
  secs=$(( $(date +%s) - t0 ))
  if [ $rc -eq 0 ]; then
    printf '%-40s %5ss  ok\n' "$name" "$secs"
  else
    printf '%-40s %5ss  FAILED (log: %s)\n' "$name" "$secs" "$log"
    grep -E "^[A-Za-z]*(Error|Exception)|PapermillExecutionError" "$log" | tail -3 | sed 's/^/    /'
    failed+=("$name")
    [ $keep_going -eq 1 ] || break
  fi
done
echo "run_all.sh: total $(( $(date +%s) - start_all ))s"
if [ ${#failed[@]} -gt 0 ]; then
  echo "run_all.sh: FAILED notebook(s): ${failed[*]}" >&2
  exit 1
fi
echo "run_all.sh: all notebooks ok ($skipped skipped); figures in $results/figures, tables in $results/tables"
