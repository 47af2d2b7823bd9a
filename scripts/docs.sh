#!/usr/bin/env bash
# Build the documentation site with warnings as errors (mkdocs.yml: strict, every link and anchor checked).
# The reference pages are generated from the code (docs/gen/), so the build imports perfsuite.
# The 'docs' extra comes with scripts/setup.sh (installed here when missing). Output: site/ (or the folder given).
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/python ] || bash scripts/setup.sh
# setup.sh installs the docs extra; installing again (it reinstalls perfsuite) only where it is missing,
# so a build beside a running test session (.ci/run) leaves .venv as it is
.venv/bin/python -c "import mkdocs, material, mkdocstrings, mkdocs_gen_files" 2>/dev/null \
    || .venv/bin/python -m pip --quiet --disable-pip-version-check install -e ".[docs]"
# the banners some plugins print about MkDocs 2
export NO_MKDOCS_2_WARNING=1 DISABLE_MKDOCS_2_WARNING=true
exec .venv/bin/python -m mkdocs build --strict --site-dir "${1:-site}"
