#!/usr/bin/env bash
# Regenerate every figure and table: execute notebooks/[0-9][0-9]_*.ipynb with papermill.
#
#   bash run_all.sh [--profile default|paper-coco|paper-flickr30k|rehearse-coco|rehearse-flickr30k]
#                   [--source SOURCE] [--param NAME=VALUE ...] [--params FILE] [--results DIR]
#                   [--keep-going] [--only NAME] [--quiet] [--site]
#
# Profiles (the notebooks' `source` parameter and friends):
#   default          synthetic embeddings (hubnorm.synthetic, seeded; every number is a "synthetic analog"),
#                    small sizes: all notebooks in a few minutes on 2 CPU cores. Outputs: results/
#   --source SOURCE  your own embeddings with the default sizes and grids, e.g. --source local:/path/to/folder or
#                    --source cache:coco:ViT-B-32-quickgelu:openai; synthetic data is then forbidden in the run
#                    (HUBNORM_FORBID_SYNTHETIC=1); --source sims:/path/to/folder (released score matrices) runs
#                    every notebook: each shows what the scores give and names in a NOTE what needs embeddings
#                    (README.md, "Your own data"). Outputs: <results root>/own-<source name>/ (e.g.
#                    own-local-my-folder), CLEARED at the start of every run, so only this run's files are there.
#   paper-flickr30k  real embeddings cache:flickr30k:ViT-B-32-quickgelu:openai, paper grids and sizes.
#   paper-coco       real embeddings cache:coco:ViT-B-32-quickgelu:openai (the cross-dataset bank is the other
#                    one). Needs `python -m hubnorm.data fetch/encode ...` first: the loader's error names the
#                    commands. Outputs: results/<profile>/
#   rehearse-flickr30k, rehearse-coco
#                    the paper profile at full scale on SYNTHETIC embeddings with the exact Karpathy split sizes
#                    (written once by `python -m hubnorm.data rehearse`, into cache/rehearsal/): how long the paper
#                    run takes on this machine and whether it fits, before any download. Everything it writes
#                    says "synthetic rehearsal". Outputs: results/<profile>/
# Parameters: --param NAME=VALUE (repeatable; VALUE read as YAML: 1.0, [t2i], CLIP, null) and --params FILE (a YAML
#   or JSON mapping) set any notebook parameter (docs/parameters.md), e.g. --param bank_fraction=1.0 (the whole
#   training part as reference bank), --param model=CLIP, --param source_kwargs='{test_fraction: 0.3}'. They
#   override the profile's; each notebook receives the ones it declares and checks them at its top; a name no
#   notebook declares is an error.
# Results root: --results DIR, else $HUBNORM_RESULTS, else results/ of this checkout; the default profile writes to
#   the root itself, the others (and --source) to a folder under it named after the profile (or source).
# Executed notebooks go to <outputs>/notebooks/. Each notebook's own output (its prints and NOTE lines) streams to
# the terminal while it runs, prefixed with its number, and to <outputs>/notebooks/<name>.log; its progress bars
# (with the estimated time left) go to a side file, <outputs>/notebooks/<name>.progress.log
# (HUBNORM_PROGRESS_FILE), streamed to the terminal too, so the executed copies carry no progress lines in their
# cell outputs; then one summary line: name, seconds, ok/FAILED. Stops at the first failure
# unless --keep-going; exits non-zero naming the failed notebooks. --only NAME runs the notebooks whose file name
# contains NAME (e.g. --only 03 or --only hubness). --quiet: summary lines only. --site: then build the website
# from this run's executed notebooks (scripts/build_site.sh --notebooks <outputs>; docs/site.md).
set -uo pipefail
caller_dir=$PWD
cd "$(dirname "$0")"

profile=default
keep_going=0
only=""
quiet=0
site=0
own_source=""
user_params=()
results_root="${HUBNORM_RESULTS:-}"
while [ $# -gt 0 ]; do
  case "$1" in
    --profile) profile="${2:?--profile needs a value}"; shift 2 ;;
    --profile=*) profile="${1#*=}"; shift ;;
    --keep-going) keep_going=1; shift ;;
    --only) only="${2:?--only needs a value}"; shift 2 ;;
    --only=*) only="${1#*=}"; shift ;;
    --quiet) quiet=1; shift ;;
    --site) site=1; shift ;;
    --source) own_source="${2:?--source needs a value}"; shift 2 ;;
    --source=*) own_source="${1#*=}"; shift ;;
    --param) user_params+=(--param "${2:?--param needs NAME=VALUE}"); shift 2 ;;
    --param=*) user_params+=(--param "${1#*=}"); shift ;;
    --params) f="${2:?--params needs a file}"; [[ "$f" == /* ]] || f="$caller_dir/$f"; user_params+=(--params "$f"); shift 2 ;;
    --params=*) f="${1#*=}"; [[ "$f" == /* ]] || f="$caller_dir/$f"; user_params+=(--params "$f"); shift ;;
    --results) results_root="${2:?--results needs a folder}"; shift 2 ;;
    --results=*) results_root="${1#*=}"; shift ;;
    -h|--help) sed -n '2,40p' "$0"; exit 0 ;;
    *) echo "run_all.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done

bash scripts/bootstrap.sh || { echo "run_all.sh: scripts/bootstrap.sh failed" >&2; exit 1; }
case "$results_root" in
  "") results_root="$PWD/results" ;;
  /*) ;;
  *) results_root="$caller_dir/$results_root" ;;   # relative to where run_all.sh was called from
esac
export HF_HUB_OFFLINE=${HF_HUB_OFFLINE:-1} TRANSFORMERS_OFFLINE=${TRANSFORMERS_OFFLINE:-1} PYTHONHASHSEED=0
# The one known line of noise, dropped from the terminal and the logs: ipykernel's "Kernel is running over TCP
# without encryption" notice (once per notebook; the kernel listens on localhost only). Every other line passes.
quiet_kernel() { grep -v --line-buffered -F "Kernel is running over TCP without encryption"; }

# papermill YAML parameters per profile (each notebook receives only the ones it declares). The paper profiles use
# the papers' grids and DBSN Fig. 7's query-bank sizes 1/8 ... 1/1024 (the default adds 1/4 for its small split),
# float32 where the notebook offers it (benchmarks/reports/rehearsal.md compares it with float64), a 10 GB Sinkhorn
# score cache (each SN/DBSN fit computes the kept scores once instead of once per iteration; peak memory stays
# under 16 GB at COCO size) and the training-bank iteration study for SN only (DBSN to convergence over the full
# training banks is one GEMM pass per iteration: add it with -p on a GPU).
paper="fast: false, n_boot: 1000, dtype: float32, sinkhorn_cache_gb: 10, train_iteration_methods: [sn], dbsn_fractions: [0.125, 0.0625, 0.03125, 0.015625, 0.0078125, 0.00390625, 0.001953125, 0.0009765625]"
case "$profile" in
  default)
    params=""
    results="$results_root"
    if [ -n "$own_source" ]; then
      case "$own_source" in  # a relative local: folder is relative to where run_all.sh was called from
        local:/*) ;;
        local:*) own_source="local:$caller_dir/${own_source#local:}" ;;
        sims:/*) ;;
        sims:*) own_source="sims:$caller_dir/${own_source#sims:}" ;;
      esac
      params=$(.venv/bin/python -c 'import json, sys; print(json.dumps({"source": sys.argv[1], "cross_source": None}))' "$own_source")
      slug=$(printf '%s' "$own_source" | sed -E 's#^(local|sims):.*/([^/]+)/*$#\1:\2#; s#[^A-Za-z0-9._-]+#-#g; s#-+$##')
      results="$results_root/own-$slug"
      export HUBNORM_FORBID_SYNTHETIC=1
    fi ;;
  paper-flickr30k)
    src=cache:flickr30k:ViT-B-32-quickgelu:openai
    params="{source: '$src', source_kwargs: {}, cross_source: 'cache:coco:ViT-B-32-quickgelu:openai', cross_kwargs: {splits: [train]}, $paper}"
    results="$results_root/paper-flickr30k" ;;
  paper-coco)
    src=cache:coco:ViT-B-32-quickgelu:openai
    params="{source: '$src', source_kwargs: {}, cross_source: 'cache:flickr30k:ViT-B-32-quickgelu:openai', cross_kwargs: {splits: [train]}, $paper}"
    results="$results_root/paper-coco" ;;
  rehearse-flickr30k|rehearse-coco)
    ds=${profile#rehearse-}
    other=$([ "$ds" = coco ] && echo flickr30k || echo coco)
    for d in "$ds" "$other"; do
      echo "run_all.sh: rehearsal cache for $d (written once; 'python -m hubnorm.data rehearse --profile paper-$d --force' rewrites it)"
      .venv/bin/python -m hubnorm.data rehearse --profile "paper-$d" || { echo "run_all.sh: rehearse failed" >&2; exit 1; }
    done
    src=cache:$ds:synthetic-rehearsal:seed0
    params="{source: '$src', source_kwargs: {}, cross_source: 'cache:$other:synthetic-rehearsal:seed0', cross_kwargs: {splits: [train]}, $paper}"
    results="$results_root/$profile" ;;
  *)
    echo "run_all.sh: unknown profile '$profile' (default, paper-coco, paper-flickr30k, rehearse-coco, rehearse-flickr30k)" >&2; exit 2 ;;
esac
if [ -n "$own_source" ] && [ "$profile" != default ]; then
  echo "run_all.sh: --source runs the default profile on your data; it cannot be combined with --profile $profile" >&2
  exit 2
fi
if [ ${#user_params[@]} -gt 0 ]; then   # --param / --params override the profile's parameters
  [ -n "$params" ] || params="{}"
  params=$(.venv/bin/python scripts/notebook_params.py --merge "$params" "${user_params[@]}") || exit 2
fi
if [ -n "$own_source" ] && [ -d "$results" ]; then   # a --source run's folder holds this run's files only
  echo "run_all.sh: clearing $results (the outputs of an earlier run on this source)"
  rm -rf -- "$results"
fi
mkdir -p "$results"
export HUBNORM_RESULTS="$results"

# Data preparation of the paper and rehearsal profiles, before the notebooks (and outside their timings, like the
# CLIP encoding): the sentence embeddings of the captions for notebook 07's RSC relevance. Encoded once (minutes for
# 150,000 captions on a CPU), then read from <cache root>/encodings with a checksum.
case "$profile" in
  paper-*|rehearse-*)
    listwise=(notebooks/07_*.ipynb)   # the notebook that needs them (RSC relevance)
    lw_name=$(basename "${listwise[0]:-none}" .ipynb)
    if [ -e "${listwise[0]:-}" ] && { [ -z "$only" ] || [[ "$lw_name" == *"$only"* ]]; }; then
      t0=$(date +%s)
      echo "run_all.sh: sentence embeddings of the $src captions for $lw_name (encoded once, then cached)"
      if .venv/bin/python -m hubnorm.data encode-texts "$src" --split test --split train; then
        echo "run_all.sh: sentence embeddings ready in $(( $(date +%s) - t0 ))s (not part of the notebook times)"
      else
        echo "run_all.sh: the sentence embeddings could not be prepared (above); $lw_name will say why" >&2
      fi
    fi ;;
esac
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
    paper-*:06_*|rehearse-*:06_*)
      echo "the simulated cross-encoder needs synthetic latents and the BLIP one needs the image files;" \
           "run it by hand with -p cross_encoder blip once images are in place (see data/README.md)" ;;
  esac
}
skipped=0
ran=0
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
  ran=$((ran + 1))
  log="$out/$name.log"
  nb_params="{}"
  if [ -n "$params" ]; then  # only the parameters this notebook declares (no "unknown parameter" warnings)
    nb_params=$(.venv/bin/python scripts/notebook_params.py "$nb" "$params") || { echo "run_all.sh: bad parameters" >&2; exit 2; }
  fi
  printf '%s: running (log: %s)\n' "$name" "$log"
  prog="$out/$name.progress.log"   # the notebook's progress bars: a side file, never its cell outputs
  : >"$prog"
  export HUBNORM_PROGRESS_FILE="$prog"   # an absolute path: $results is absolute
  if [ $quiet -eq 1 ] || ! command -v stdbuf >/dev/null 2>&1 || ! tail --pid=$$ -n 0 /dev/null 2>/dev/null; then
    # --quiet, or no GNU stdbuf / tail --pid (macOS): summary lines only
    .venv/bin/python -m papermill -k python3 --cwd notebooks --no-progress-bar -y "$nb_params" "$nb" \
      "$out/$name.ipynb" 2>&1 | quiet_kernel >"$log"
    rc=${PIPESTATUS[0]}
  else
    ( .venv/bin/python -m papermill -k python3 --cwd notebooks --log-output --no-progress-bar -y "$nb_params" "$nb" \
        "$out/$name.ipynb" 2>&1 | quiet_kernel | tee "$log" | stdbuf -oL sed -u -e 's/\r/\n/g' | stdbuf -oL grep -v -E \
        '^(Input Notebook|Output Notebook|Executing notebook|Working directory|Black is not|Executing Cell|Ending Cell)' \
        | stdbuf -oL sed -u "s/^/  ${name:0:2}| /"
      exit "${PIPESTATUS[0]}" ) &
    job=$!
    # stream the side file until the notebook ends (tail stops once the job has exited and the file is read)
    tail -n +1 -s 0.5 --pid="$job" -f "$prog" | stdbuf -oL tr '\r' '\n' | grep --line-buffered -v -E '^[[:space:]]*$' \
      | stdbuf -oL sed -u "s/^/  ${name:0:2}| /"
    wait "$job"
    rc=$?
  fi
  unset HUBNORM_PROGRESS_FILE
  # a library's own tqdm bar (not hubnorm's) would still land in a cell's stderr: drop such lines from the copy
  [ -f "$out/$name.ipynb" ] && .venv/bin/python scripts/strip_notebook_metadata.py --progress-only "$out/$name.ipynb"
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
if [ -n "$only" ] && [ $ran -eq 0 ] && [ $skipped -eq 0 ]; then
  echo "run_all.sh: no notebook matches --only $only" >&2
  exit 2
fi
if [ ${#failed[@]} -gt 0 ]; then
  echo "run_all.sh: FAILED notebook(s): ${failed[*]}" >&2
  exit 1
fi
echo "run_all.sh: all notebooks ok ($skipped skipped); figures in $results/figures, tables in $results/tables"
if [ $site -eq 1 ]; then
  bash scripts/build_site.sh --notebooks "$results" || { echo "run_all.sh: the site build failed" >&2; exit 1; }
fi
