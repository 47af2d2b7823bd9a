#!/usr/bin/env bash
# Create .venv (if missing) and install perfsuite into it, torch first.
# PERFSUITE_TORCH chooses the torch requirement (default torch==2.13.0: a CPU build here,
# the CUDA build from PyPI on a Linux GPU machine). PYTHON chooses the interpreter.
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
    echo "perfsuite setup: creating .venv with $($python --version)"
    "$python" -m venv .venv
fi
if ! .venv/bin/python -c "import torch" >/dev/null 2>&1; then
    echo "perfsuite setup: installing ${PERFSUITE_TORCH:-torch==2.13.0}"
    .venv/bin/python -m pip install --quiet --disable-pip-version-check ${PERFSUITE_TORCH:-torch==2.13.0}  # unquoted: may hold pip options
fi
# transformers: so the test run covers the hf_* variants (it does not depend on torch, so torch stays as installed)
.venv/bin/python -m pip install --quiet --disable-pip-version-check -e ".[dev,transformers]"
echo "perfsuite setup: $(.venv/bin/python -c 'import torch, transformers; print("torch", torch.__version__, "cuda available:", torch.cuda.is_available(), "transformers", transformers.__version__)')"
