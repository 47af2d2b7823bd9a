#!/usr/bin/env bash
# Build the documentation site with warnings as errors (mkdocs.yml: strict, every link and anchor checked).
# The reference pages are generated from the code (docs/gen/), so the build imports perfsuite.
# Installs the 'docs' extra into .venv (scripts/setup.sh first). Output: site/ (or the folder given).
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/python ] || bash scripts/setup.sh
.venv/bin/python -m pip --quiet --disable-pip-version-check install -e ".[docs]"
# the banners some plugins print about MkDocs 2
export NO_MKDOCS_2_WARNING=1 DISABLE_MKDOCS_2_WARNING=true
exec .venv/bin/python -m mkdocs build --strict --site-dir "${1:-site}"
