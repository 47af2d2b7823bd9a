#!/usr/bin/env bash
# Offline setup for a machine with no package index (a lent GPU machine, an air-gapped cluster):
# use the interpreter PERFSUITE_PYTHON names with the torch, triton and transformers already
# installed in it, and install nothing from the network. perfsuite itself is installed from this
# working tree (`pip install --no-index --no-deps --no-build-isolation -e .`), unless that
# interpreter already imports this tree's perfsuite with its pytest plugin.
# Stops (exit 1) naming every required package the interpreter lacks.
set -euo pipefail
cd "$(dirname "$0")/.."
py=${PERFSUITE_PYTHON:?set PERFSUITE_PYTHON to the interpreter that has torch installed}
"$py" - <<'PY'
import importlib.util, sys
required = ["torch", "numpy", "pytest", "pytest_benchmark", "hypothesis", "pip", "setuptools"]
missing = [name for name in required if importlib.util.find_spec(name) is None]
if "setuptools" not in missing:  # an editable install builds a wheel: setuptools >= 70.1, or the wheel package
    from importlib.metadata import version
    found = version("setuptools")
    major, minor = (int(part) for part in found.split(".")[:2])
    if (major, minor) < (70, 1) and importlib.util.find_spec("wheel") is None:
        missing.append(f"wheel (setuptools {found} needs it; or setuptools >= 70.1)")
if missing:
    sys.exit(f"perfsuite offline setup: {sys.executable} lacks {', '.join(missing)}; "
             "install them there (offline: from wheels you bring) or choose another PERFSUITE_PYTHON")
# perfsuite is installed with --no-deps: runs work without these, but are not recorded in the history store
lacking = [name for name in ("sqlalchemy", "scipy") if importlib.util.find_spec(name) is None]
if lacking:
    print(f"perfsuite offline setup: warning: {sys.executable} lacks {', '.join(lacking)}; runs will not be "
          "recorded in the history store (bring their wheels to record them)")
PY
here=$(pwd -P)
installed=$("$py" -I - <<'PY' 2>/dev/null || true
from importlib.metadata import entry_points
from pathlib import Path
import perfsuite
plugin = any(ep.name == "perfsuite" for ep in entry_points(group="pytest11"))
print(Path(perfsuite.__file__).resolve().parent.parent if plugin else "")
PY
)
if [ "$installed" != "$here" ]; then
    echo "perfsuite offline setup: installing perfsuite from $here into $("$py" -c 'import sys; print(sys.prefix)') (no index, no dependencies)"
    PIP_NO_INDEX=1 "$py" -m pip install --quiet --disable-pip-version-check --no-index --no-deps \
        --no-build-isolation -e .
fi
"$py" - <<'PY'
import importlib.metadata as md
import torch
def version(name):
    try:
        return md.version(name)
    except md.PackageNotFoundError:
        return "not installed"
print(f"perfsuite offline setup: torch {torch.__version__} (cuda {torch.version.cuda}, "
      f"available: {torch.cuda.is_available()}), triton {version('triton')}, "
      f"transformers {version('transformers')}, perfsuite {version('perfsuite')}")
PY
