#!/usr/bin/env bash
# Create .venv (if missing) and install perfsuite into it, torch first.
# PERFSUITE_TORCH chooses the torch requirement, as pip arguments (default torch==2.13.0: a CPU build
# here, the CUDA 12 build from PyPI on a Linux GPU machine); a ROCm or other CUDA build comes from
# PyTorch's index, e.g. PERFSUITE_TORCH="torch --index-url https://download.pytorch.org/whl/rocm6.4". PYTHON chooses the interpreter.
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
    echo "perfsuite setup: creating .venv with $($python --version)"
    "$python" -m venv .venv
fi
# PERFSUITE_TORCH set: install it even over an existing torch (e.g. a CUDA or ROCm build over a CPU one).
if [ -n "${PERFSUITE_TORCH:-}" ] || ! .venv/bin/python -c "import torch" >/dev/null 2>&1; then
    echo "perfsuite setup: installing ${PERFSUITE_TORCH:-torch==2.13.0}"
    .venv/bin/python -m pip install --quiet --disable-pip-version-check ${PERFSUITE_TORCH:-torch==2.13.0}  # unquoted: may hold pip options
fi
.venv/bin/python -m pip install --quiet --disable-pip-version-check -e ".[dev]"
echo "perfsuite setup: $(.venv/bin/python -c 'import torch; print("torch", torch.__version__, "cuda available:", torch.cuda.is_available())')"
