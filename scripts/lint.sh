#!/usr/bin/env bash
# ruff: lint the whole tree (configuration in pyproject.toml), and check the formatting of the files
# that are already formatted (FORMATTED below; the rest of the tree joins after one `ruff format` pass).
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/ruff ] || bash scripts/setup.sh
FORMATTED=(docs/gen tests/test_docs.py tests/report/test_plots_extra.py validation/__init__.py)
.venv/bin/ruff check .
.venv/bin/ruff format --check "${FORMATTED[@]}"
