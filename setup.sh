#!/usr/bin/env bash
# Set up clumpscout from scratch in ./.venv (Python >= 3.11 and pip, nothing else).
#   bash setup.sh          set up, then run the whole workflow on config.yaml
#   bash setup.sh --only   set up only (what .ci/run uses)
set -euo pipefail
cd "$(dirname "$0")"
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
    "$PY" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet -e ".[workflow,test]"
echo "clumpscout installed in $(pwd)/.venv"
if [ "${1:-}" = "--only" ]; then
    exit 0
fi
.venv/bin/snakemake --cores "${CORES:-2}" "$@"
echo
echo "Done. Results are in $(pwd)/results/ ; open $(pwd)/results/report.html"
