#!/usr/bin/env bash
# Set up gctl and replay the bundled Philly trace through the Gandiva scheduler
# and the FIFO and 2D-LAS baselines, side by side (the simulator: no hosts, no root needed).
# Any `gctl sim run` option may follow, e.g. --json.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup-venv.sh
exec .venv/bin/gctl sim run traces/philly_models_trace3.csv --cluster 5x8 --policy gandiva --compare fifo,las "$@"
