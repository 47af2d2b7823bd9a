#!/usr/bin/env bash
# The main job: set up, then run the timed attention suite (pytest -c benchmarks.ini).
# Extra arguments go to pytest, e.g. --benchmark-compare --benchmark-compare-fail=median:10%
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# The process conditions of every timed run (perfsuite/measure/conditions.py), set before torch starts.
eval "$(.venv/bin/python -m perfsuite.measure.conditions)"
exec .venv/bin/python -m pytest -c benchmarks.ini "$@"
