#!/usr/bin/env bash
# Create .venv (if missing) and install perfsuite into it, torch first.
# PERFSUITE_TORCH chooses the torch requirement (default torch==2.13.0: a CPU build here,
# the CUDA build from PyPI on a Linux GPU machine); it may hold pip options, for example
#   PERFSUITE_TORCH="torch==2.11.0 --index-url https://download.pytorch.org/whl/cu126"  (CUDA 12)
#   PERFSUITE_TORCH="torch --index-url https://download.pytorch.org/whl/rocm6.4"      (ROCm)
# When set, it is installed even into an existing .venv (pip changes torch only if the
# installed one does not satisfy it), and setup stops if torch still does not match.
# PYTHON chooses the interpreter.
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-python3}
pip() { .venv/bin/python -m pip --quiet --disable-pip-version-check "$@"; }
if [ ! -x .venv/bin/python ]; then
    echo "perfsuite setup: creating .venv with $($python --version)"
    "$python" -m venv .venv
fi
if [ -n "${PERFSUITE_TORCH:-}" ]; then
    echo "perfsuite setup: installing $PERFSUITE_TORCH (PERFSUITE_TORCH)"
    pip install $PERFSUITE_TORCH  # unquoted: may hold pip options
    wanted=$(printf '%s\n' $PERFSUITE_TORCH | grep -m1 -E '^torch([=<>!~ ]|$)' || true)
    if [ -n "$wanted" ] && ! .venv/bin/python - "$wanted" <<'PY'
import sys
from importlib.metadata import version
try:
    from packaging.requirements import Requirement
except ImportError:  # a new venv: pip's own copy
    from pip._vendor.packaging.requirements import Requirement
req = Requirement(sys.argv[1])
installed = version("torch").split("+")[0]
sys.exit(0 if req.specifier.contains(installed, prereleases=True) else 1)
PY
    then
        echo "perfsuite setup: .venv has torch $(.venv/bin/python -c 'import torch; print(torch.__version__)'), not $wanted;" \
             "remove .venv and run again" >&2
        exit 1
    fi
elif ! .venv/bin/python -c "import torch" >/dev/null 2>&1; then
    echo "perfsuite setup: installing torch==2.13.0"
    pip install torch==2.13.0
fi
# transformers: so the test run covers the hf_* variants (it does not depend on torch, so torch stays as installed);
# docs: scripts/docs.sh builds the site with it
pip install -e ".[dev,transformers,docs]"
echo "perfsuite setup: $(.venv/bin/python -c 'import torch, transformers; print("torch", torch.__version__, "cuda available:", torch.cuda.is_available(), "transformers", transformers.__version__)')"
