#!/usr/bin/env bash
# pg_ctl for pytest-postgresql when the tests run as root (CI does): initdb and pg_ctl refuse root,
# so this runs Debian's pg_ctl as the postgres user, after giving it the data folder's parent
# (pytest's temporary folder for the server) and a way through pytest's private temporary folders.
# PERFSUITE_PG_BIN: the folder of the real pg_ctl (tests/history/conftest.py sets it).
set -euo pipefail
pgdata=""
previous=""
for arg in "$@"; do
    case "$previous" in -D|--pgdata) pgdata=$arg ;; esac
    case "$arg" in --pgdata=*) pgdata=${arg#--pgdata=} ;; esac
    previous=$arg
done
if [ -n "$pgdata" ]; then
    parent=$(dirname "$pgdata")
    chown -R postgres "$parent"
    folder=$parent
    while [ "$folder" != "/" ]; do chmod o+x "$folder" 2>/dev/null || true; folder=$(dirname "$folder"); done
fi
exec runuser -u postgres -- "$PERFSUITE_PG_BIN/pg_ctl" "$@"
