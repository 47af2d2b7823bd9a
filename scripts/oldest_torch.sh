#!/usr/bin/env bash
# The oldest torch that pyproject.toml claims (the floor of its "torch>=X" requirement), tested in a second
# virtualenv (.venv-oldest-torch): the tests of the parts that call torch's API directly (cases, masks,
# modes, the float64 reference, evidence and profiling, trace reading, and tests/measure's
# test_torch_api_conformance.py: every torch name the CUDA paths call, against this torch; not the gate's statistics, numpy only) and the
# attention suite itself on the test run's small cases, with one variant per way of calling torch's attention
# (a few minutes on 2 cores, plus the download): naive_inplace (matmul, softmax and the in-place mul_/add_/masked_fill_;
# naive's out-of-place ops run in the float64 reference for every variant and case), sdpa (unpinned
# scaled_dot_product_attention), sdpa_flash (pinned through sdpa_kernel, its fused CPU kernel read from the trace;
# sdpa_math pins the same way) and flex_compiled (flex_attention under torch.compile). naive and sdpa_math run in
# the main lane: on 2 cores they cost a quarter of this lane's suite time, which it takes from the main lane.
# On Linux x86-64, PyPI's torch is the CUDA build (about 2.6 GB with its nvidia-* wheels); it runs on the CPU.
# --torch-only installs torch and stops. PERFSUITE_OLDEST_TORCH overrides the requirement (pip arguments, e.g. "torch==2.11.0 --index-url URL").
set -euo pipefail
cd "$(dirname "$0")/.."
floor=$(sed -n 's/^ *"torch>=\([0-9.]*\),.*/\1/p' pyproject.toml)
[ -n "$floor" ] || { echo "oldest_torch: no \"torch>=X\" requirement in pyproject.toml" >&2; exit 2; }
wanted=${PERFSUITE_OLDEST_TORCH:-"torch==$floor.*"}
venv=.venv-oldest-torch
pip() { "$venv/bin/python" -m pip --quiet --disable-pip-version-check "$@"; }
[ -x "$venv/bin/python" ] || "${PYTHON:-python3}" -m venv "$venv"
echo "oldest_torch: installing $wanted into $venv"
pip install $wanted  # unquoted: may hold pip options
# --torch-only: just the download and install (network-bound), e.g. in the background while other tests run
[ "${1:-}" = "--torch-only" ] && exit 0
# the build writes build/ and perfsuite.egg-info here: taken in turn with the tests' builds (validation/user_repo.py)
mkdir -p build
flock build/.perfsuite-build.lock "$venv/bin/python" -m pip --quiet --disable-pip-version-check \
    install -e . "pytest-xdist>=3.6" "nvidia-ml-py>=13"  # xdist: one worker per CPU, as scripts/test.sh runs;
# nvidia-ml-py: tests/measure/test_torch_api_conformance.py checks the NVML names gpu_state calls
"$venv/bin/python" -c "import torch; print('oldest_torch: torch', torch.__version__)"
# as scripts/test.sh: one thread per worker; its own results folder and no pytest cache, so it can run
# beside the main tests (.ci/run does)
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}" OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-PASSIVE}"
exec "$venv/bin/python" -m pytest -n "${PERFSUITE_TEST_WORKERS:-auto}" --dist loadgroup -m "not slow" -q \
    -p no:cacheprovider --perfsuite-results=perfsuite-results/oldest-torch \
    tests/attention tests/trace tests/measure tests/variants/test_numerics_findings.py \
    perfsuite/suite/test_attention.py \
    --perfsuite-variants naive_inplace,sdpa,sdpa_flash,flex_compiled "$@"
