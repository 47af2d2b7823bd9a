#!/usr/bin/env bash
# GPU verification: the suite on CUDA, short, then a Markdown report of every check (pass/fail)
# and the time per step (wall, device and their difference, TFLOP/s against the measured peak).
#
#   bash scripts/gpu_suite.sh                      # report: perfsuite-results/gpu/verification.md
#   PERFSUITE_TORCH="torch --index-url https://download.pytorch.org/whl/cu126" bash scripts/gpu_suite.sh
#
# Cases: the post's case (8x16x1024x64 bf16) and one longer sequence, every variant (torch.compile and
# flex_attention included) in every mode, timed on CUDA events with an L2 flush between rounds.
# The suite gets PERFSUITE_GPU_BUDGET_S seconds (default 420, so the whole script fits 8 minutes on
# one GPU once torch is installed); running past it is a failure in the report.
# Exit status: 0 every check passed; 1 a check failed, the suite failed or ran too long.
# Without a CUDA device it still runs end to end and writes a report that says "NO CUDA DEVICE"
# (exit 0; PERFSUITE_REQUIRE_CUDA=1 makes it exit 1). Extra arguments go to pytest.
set -uo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh || exit 1
out=${PERFSUITE_GPU_RESULTS:-perfsuite-results/gpu}
budget=${PERFSUITE_GPU_BUDGET_S:-420}
require=()
[ "${PERFSUITE_REQUIRE_CUDA:-0}" = 1 ] && require=(--require-cuda)
mkdir -p "$out"
.venv/bin/python - <<'PY'
import torch
print(f"perfsuite gpu_suite: torch {torch.__version__}, torch.version.cuda={torch.version.cuda}, "
      f"torch.version.hip={getattr(torch.version, 'hip', None)}, cuda available: {torch.cuda.is_available()}")
PY
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
command -v rocm-smi >/dev/null && rocm-smi --showdriverversion
if ! .venv/bin/python -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)'; then
    exec .venv/bin/perfsuite verify --results "$out" ${require[@]+"${require[@]}"}
fi
suite_exit=0
timeout --kill-after=20 "$budget" .venv/bin/python -m pytest -c benchmarks.ini -p no:cacheprovider \
    --perfsuite-devices cuda --perfsuite-shapes "8x16x1024x64 4x16x4096x64" --perfsuite-dtypes bf16 \
    --perfsuite-timer cuda_event --perfsuite-l2-flush on \
    --perfsuite-results "$out" --junitxml "$out/junit.xml" \
    --benchmark-max-time=0.2 --benchmark-min-rounds=10 "$@" || suite_exit=$?
# Kernels and copies per forward and per training step, read back from the traces (for the log).
.venv/bin/perfsuite trace "$out/traces" --annotation perfsuite::forward --first --top 5 || true
.venv/bin/perfsuite verify --results "$out" --suite-exit "$suite_exit" --budget-s "$budget" ${require[@]+"${require[@]}"}
