#!/usr/bin/env bash
# Start Debian's PostgreSQL cluster (pg_ctlcluster runs it as the postgres user; initdb and pg_ctl
# refuse root) and give root a superuser role for peer login on the local socket. Prints the server's
# URL for PERFSUITE_PG_URL (tests/history/conftest.py creates a database per test on it) as the only
# line on stdout: whatever the tools print goes to stderr.
set -euo pipefail
version=$(ls /etc/postgresql | sort -n | tail -1)
pg_ctlcluster "$version" main status >/dev/null 2>&1 || pg_ctlcluster "$version" main start >&2
runuser -u postgres -- psql -qAtc "SELECT 1 FROM pg_roles WHERE rolname = 'root'" | grep -q 1 \
    || runuser -u postgres -- psql -qc "CREATE ROLE root SUPERUSER LOGIN" >&2
echo "postgresql://root@/postgres?host=/var/run/postgresql"
