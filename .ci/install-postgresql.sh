#!/usr/bin/env bash
# The PostgreSQL server binaries the history store's tests start (tests/history/conftest.py):
# Debian's postgresql package, installed when pg_ctl is missing. Idempotent and quick when present.
set -euo pipefail
if compgen -G "/usr/lib/postgresql/*/bin/pg_ctl" >/dev/null; then
    exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
    echo "CI: PostgreSQL binaries missing and not root: cannot apt-get install postgresql" >&2
    exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends postgresql >/dev/null
