#!/usr/bin/env bash
# ruff: lint and check the formatting of the whole tree (configuration in pyproject.toml).
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/ruff ] || bash scripts/setup.sh
.venv/bin/ruff check .
.venv/bin/ruff format --check .
