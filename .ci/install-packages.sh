#!/usr/bin/env bash
# The Debian packages the tests start for real, in one apt-get call (each test skips without its part
# outside CI, and fails in CI, where .ci/run sets PERFSUITE_REQUIRE_*):
#   chromium            the dashboard's browser tests (Playwright drives /usr/bin/chromium)
#   postgresql          the history store's PostgreSQL tests (pytest-postgresql starts its binaries)
#   slurm-wlm, munge    perfsuite fleet slurm's one-node Slurm cluster
# Idempotent: installs only what is missing; makes the munge key when the package made none.
set -euo pipefail
missing=()
[ -x /usr/bin/chromium ] || missing+=(chromium)
compgen -G "/usr/lib/postgresql/*/bin/pg_ctl" >/dev/null || missing+=(postgresql)
{ [ -x /usr/sbin/slurmctld ] && [ -x /usr/sbin/slurmd ]; } || missing+=(slurm-wlm)
[ -x /usr/sbin/munged ] || missing+=(munge)
if [ "${#missing[@]}" -gt 0 ]; then
    if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null; then
        echo "CI: missing ${missing[*]} and not root with apt-get: cannot install them" >&2
        exit 1
    fi
    echo "CI: installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
if [ ! -s /etc/munge/munge.key ]; then  # munged refuses to start without a key
    mkdir -p /etc/munge
    mungekey --create --keyfile /etc/munge/munge.key 2>/dev/null \
        || dd if=/dev/urandom of=/etc/munge/munge.key bs=128 count=1 2>/dev/null
    chown munge:munge /etc/munge/munge.key && chmod 400 /etc/munge/munge.key
fi
