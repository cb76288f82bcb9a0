#!/usr/bin/env bash
# chromium.sh installs Debian's chromium for the browser tests of the dashboard (idempotent) and
# prints its path. scripts/test.sh calls it; `make screenshot` too. It needs root only to install.
set -euo pipefail

CHROMIUM=/usr/bin/chromium
if [ -x "$CHROMIUM" ]; then
	echo "$CHROMIUM"
	exit 0
fi
[ "$(id -u)" -eq 0 ] || { echo "chromium.sh: chromium is missing and this is not root: apt-get install chromium" >&2; exit 1; }
export DEBIAN_FRONTEND=noninteractive
log=${TMPDIR:-/tmp}/timeoutmill-chromium-apt.log
SECONDS=0
if ! { apt-get update -qq && apt-get install -y -qq -o Dpkg::Use-Pty=0 --no-install-recommends chromium fonts-dejavu-core; } >"$log" 2>&1; then
	tail -n 30 "$log" >&2
	echo "chromium.sh: apt-get install chromium failed" >&2
	exit 1
fi
echo "[chromium] installed in ${SECONDS}s" >&2
echo "$CHROMIUM"
