#!/usr/bin/env bash
# The tests: set up, then run pytest with the default configuration (pyproject.toml), one
# pytest-xdist worker per CPU plus one (PERFSUITE_TEST_WORKERS=N to choose; 0 runs in this process):
# the end-to-end tests spend part of their time waiting (a child process starting, a call limit
# running out, a signal), and the extra worker uses that time.
# Each worker computes with one thread (OMP_NUM_THREADS=1), idle OpenMP threads sleep
# (OMP_WAIT_POLICY=PASSIVE): two workers of two threads each on two cores spin against each other,
# which made the test run several times slower. Timing tests do not depend on it (no test outcome
# depends on machine speed); both are kept when already set.
# --dist loadgroup keeps each variant/case pair's tests on one worker, which caches its evidence.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}" OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-PASSIVE}"
workers=${PERFSUITE_TEST_WORKERS:-$(($(nproc) + 1))}
# --durations: the slowest tests are named in every log, to keep CI inside its time
exec .venv/bin/python -m pytest -n "$workers" --dist loadgroup --durations=25 "$@"
