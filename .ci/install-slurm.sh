#!/usr/bin/env bash
# A one-node Slurm for perfsuite fleet slurm's tests (tests/fleet/conftest.py starts munged, slurmctld and
# slurmd from a generated slurm.conf in a temporary folder): Debian's slurm-wlm and munge, installed
# when missing. Idempotent and quick when present.
set -euo pipefail
make_key() {  # munged refuses to start without a key; Debian's package usually makes one
    if [ ! -s /etc/munge/munge.key ]; then
        mkdir -p /etc/munge
        mungekey --create --keyfile /etc/munge/munge.key 2>/dev/null || dd if=/dev/urandom of=/etc/munge/munge.key bs=128 count=1 2>/dev/null
        chown munge:munge /etc/munge/munge.key && chmod 400 /etc/munge/munge.key
    fi
}
if [ -x /usr/sbin/slurmctld ] && [ -x /usr/sbin/slurmd ] && [ -x /usr/sbin/munged ]; then
    make_key
    exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
    echo "CI: slurm-wlm/munge missing and not root: cannot apt-get install them" >&2
    exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends slurm-wlm munge >/dev/null
make_key
