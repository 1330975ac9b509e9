#!/usr/bin/env bash
# Create (or reuse) .venv in the repository and install gctl with its dev tools.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install --quiet -e '.[dev]' -e plugins/gctl-backfill -e plugins/gctl-dl2
