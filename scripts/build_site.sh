#!/usr/bin/env bash
# Build the companion's website, offline, from executed notebooks (never re-executing them): every notebook with
# its figures, equations and tables, a figure gallery, search, the methods, teaching, install and citation pages,
# the published numbers. Output: site/_build/html/ (open index.html, or publish the folder: docs/site.md).
#
#   bash scripts/build_site.sh                          # the committed notebooks (default run, synthetic data)
#   bash scripts/build_site.sh --notebooks results      # a run's executed notebooks (run_all.sh output folder)
#   bash scripts/build_site.sh --out /tmp/site          # another output folder
#
# `bash run_all.sh --site` runs the notebooks first, then builds from that run.
set -euo pipefail
cd "$(dirname "$0")/.."
case "${1:-}" in -h|--help) sed -n '2,10p' "$0"; exit 0 ;; esac
bash scripts/bootstrap.sh
exec .venv/bin/python site/hubsite.py build "$@"
