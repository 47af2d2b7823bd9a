#!/usr/bin/env bash
# The tests: set up, then run pytest with the default configuration (pyproject.toml), one
# pytest-xdist worker per CPU (PERFSUITE_TEST_WORKERS=N to choose; 0 runs in this process).
# Each worker computes with one thread (OMP_NUM_THREADS=1), idle OpenMP threads sleep
# (OMP_WAIT_POLICY=PASSIVE): two workers of two threads each on two cores spun against each other
# (a 384^3 matmul took 270-340 ms instead of 13 ms; the whole run 529 s instead of 446 s on 2 cores).
# No test outcome depends on it (none depends on machine speed); both are kept when already set.
# --dist loadgroup keeps each variant/case pair's tests on one worker, which caches its evidence.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}" OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-PASSIVE}"
# --durations: the slowest tests are named in every log, to keep CI inside its time
exec .venv/bin/python -m pytest -n "${PERFSUITE_TEST_WORKERS:-auto}" --dist loadgroup --durations=25 "$@"
