#!/usr/bin/env bash
# The suite on a CUDA machine, short: every variant (torch.compile and flex_attention included) in
# every mode (forward, backward, forward+backward) on the post's case (8x16x1024x64 bf16 causal)
# and one longer sequence, timed briefly, then the kernels and copies each variant made per
# forward and per training step, read back from its Chrome traces.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/python -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else "no CUDA device: torch.cuda.is_available() is False")'
status=0
.venv/bin/python -m pytest -c benchmarks.ini -p no:cacheprovider \
    --perfsuite-devices cuda --perfsuite-shapes "8x16x1024x64 4x16x4096x64" --perfsuite-dtypes bf16 \
    --perfsuite-results perfsuite-results/gpu --benchmark-max-time=0.2 --benchmark-min-rounds=10 "$@" || status=$?
.venv/bin/perfsuite trace perfsuite-results/gpu/traces --annotation perfsuite::forward --first --top 5
.venv/bin/perfsuite trace perfsuite-results/gpu/traces --annotation perfsuite::forward_backward --first --top 5
.venv/bin/perfsuite report perfsuite-results/gpu/run.json --markdown perfsuite-results/gpu/report.md \
    --html perfsuite-results/gpu/report.html --plots perfsuite-results/gpu
exit $status
