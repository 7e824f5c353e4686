#!/usr/bin/env bash
# Regenerate every figure and table: execute notebooks/[0-9][0-9]_*.ipynb with papermill.
#
#   bash run_all.sh [--profile default|paper-coco|paper-flickr30k|rehearse-coco|rehearse-flickr30k]
#                   [--source SOURCE] [--param NAME=VALUE ...] [--params FILE] [--results DIR]
#                   [--keep-going] [--only NAME] [--quiet] [--site]
#
# Profiles (the notebooks' `source` parameter and friends):
#   default          synthetic embeddings (hubnorm.synthetic, seeded; every number is a "synthetic analog"),
#                    small sizes: all notebooks in a few minutes on 2 CPU cores, with the real column beside them
#                    (small public releases of real embeddings, fetched once by pinned commit and sha256 into the
#                    cache: python -m hubnorm.data fetch-real; offline without them: one NOTE, the run goes on).
#                    Outputs: results/
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
# cell outputs; then one summary line: name, seconds, ok/FAILED; at the end <outputs>/SUMMARY.md (+ SUMMARY.csv,
# SUMMARY_gains.csv): every PASS/DIFFERS line with the data it ran on, every gain beside the published one, the
# notebooks' statuses. Stops at the first failure
# unless --keep-going; exits non-zero naming the failed notebooks. --only NAME runs the notebooks whose file name
# contains NAME (e.g. --only 03 or --only hubness). --quiet: summary lines only. --site: then build the website
# from this run's executed notebooks (scripts/build_site.sh --notebooks <outputs>; docs/site.md).
# A thin wrapper: the profiles, their parameters and results folders, and what each notebook needs are data
# (tools/hubnorm_tools/profiles.yaml); the runner, tools/hubnorm_tools/runner.py, reads them and runs the notebooks.
set -uo pipefail
caller_dir=$PWD
cd "$(dirname "$0")"
for a in "$@"; do
  case "$a" in
    -h|--help) sed -n '2,47p' "$0"; exit 0 ;;
  esac
done
bash scripts/bootstrap.sh || { echo "run_all.sh: scripts/bootstrap.sh failed" >&2; exit 1; }
export HF_HUB_OFFLINE=${HF_HUB_OFFLINE:-1} TRANSFORMERS_OFFLINE=${TRANSFORMERS_OFFLINE:-1} PYTHONHASHSEED=0
exec .venv/bin/python -m hubnorm_tools.runner --root "$PWD" --caller-dir "$caller_dir" "$@"
