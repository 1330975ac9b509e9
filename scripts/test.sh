#!/usr/bin/env bash
# Set up the environment and run every check CI runs: lint, format, types, tests.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup-venv.sh
echo "== ruff check"; .venv/bin/ruff check .
echo "== ruff format --check"; .venv/bin/ruff format --check .
echo "== mypy (strict, gctl/)"; .venv/bin/mypy
echo "== pytest"; .venv/bin/pytest "$@"
