#!/usr/bin/env bash
# The tests: set up, then run pytest with the default configuration (pyproject.toml).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python -m pytest "$@"
