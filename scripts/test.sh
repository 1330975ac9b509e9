#!/usr/bin/env bash
# Set up the environment and run every check CI runs: lint, format, types, tests.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup-venv.sh
echo "== ruff check"; .venv/bin/ruff check .
echo "== ruff format --check"; .venv/bin/ruff format --check .
echo "== mypy (strict, gctl/)"; .venv/bin/mypy
# The man page and completion tests run groff, man, lexgrog, zsh and fish, the
# alerting-rule tests promtool, and the remote-dataset tests rsync: as root, install
# the Debian packages that have them when missing.
missing=()
for need in groff:groff-base man:man-db lexgrog:man-db zsh:zsh fish:fish promtool:prometheus \
  rsync:rsync; do
  command -v "${need%%:*}" >/dev/null || missing+=("${need#*:}")
done
if [ ${#missing[@]} -gt 0 ] && [ "$(id -u)" -eq 0 ]; then
  echo "== apt-get install ${missing[*]}"
  apt=(apt-get install -y -qq --no-install-recommends "${missing[@]}")
  DEBIAN_FRONTEND=noninteractive "${apt[@]}" >/dev/null ||
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive "${apt[@]}" >/dev/null; }
fi
echo "== pytest"; .venv/bin/pytest "$@"
