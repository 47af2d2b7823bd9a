#!/usr/bin/env bash
# A one-node Slurm for perfsuite fleet slurm's tests (tests/fleet/conftest.py starts munged, slurmctld and
# slurmd from a generated slurm.conf in a temporary folder): Debian's slurm-wlm and munge, installed
# when missing. Idempotent and quick when present.
set -euo pipefail
if [ -x /usr/sbin/slurmctld ] && [ -x /usr/sbin/slurmd ] && [ -x /usr/sbin/munged ]; then
    exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
    echo "CI: slurm-wlm/munge missing and not root: cannot apt-get install them" >&2
    exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends slurm-wlm munge >/dev/null
