#!/usr/bin/env bash
# Runs every test: starts the real servers the acceptance tests need (installing them on a fresh
# machine), runs `go test -race ./...` against them, and stops the servers it started.
# KEEP_SERVICES=1 leaves them running; servers that were already up are left as they were.
set -euo pipefail
cd "$(dirname "$0")/.."

services=scripts/services.sh
already_up=0
if "$services" status >/dev/null 2>&1; then already_up=1; fi

"$services" up
if [[ $already_up == 0 && ${KEEP_SERVICES:-0} != 1 ]]; then
  trap '"$services" down >/dev/null 2>&1 || true' EXIT
fi

# shellcheck disable=SC1090
source <("$services" env)
# The dashboard's browser tests drive Debian's chromium; this installs it once.
TIMEOUTMILL_TEST_CHROMIUM=$(scripts/chromium.sh)
export TIMEOUTMILL_TEST_CHROMIUM
go test -race -count=1 -timeout "${TEST_TIMEOUT:-60m}" ./...
