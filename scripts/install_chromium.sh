#!/usr/bin/env bash
# Debian's headless chromium for the dashboard's browser tests (tests/dashboard/test_browser.py drives it
# with Playwright; Playwright's own browser download cannot work offline). Idempotent: quick when installed.
set -euo pipefail
if [ -x /usr/bin/chromium ]; then
    exit 0
fi
if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null; then
    echo "install_chromium: not root or no apt-get; install chromium yourself (the browser tests skip without it)" >&2
    exit 0
fi
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium >/dev/null
echo "install_chromium: $(/usr/bin/chromium --version)"
