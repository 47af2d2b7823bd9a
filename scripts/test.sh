#!/usr/bin/env bash
# The tests: set up, then run pytest with the default configuration (pyproject.toml), one
# pytest-xdist worker per CPU (PERFSUITE_TEST_WORKERS=N to choose; 0 runs in this process).
# --dist loadgroup keeps each variant/case pair's tests on one worker, which caches its evidence.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# --durations: the slowest tests are named in every log, to keep CI inside its time
exec .venv/bin/python -m pytest -n "${PERFSUITE_TEST_WORKERS:-auto}" --dist loadgroup --durations=25 "$@"
