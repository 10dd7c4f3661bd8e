#!/usr/bin/env bash
# The dependencies on a stock Debian bookworm: runs scripts/install-deps.sh in
# a throwaway copy of a stock bookworm root (scripts/stock-root.sh: debootstrap
# minbase, nothing preinstalled), then checks there that the tools the suite
# calls are Debian's own and that the browser side of tests/console/ works:
# playwright-core starts Debian's chromium from Debian's node and loads one
# page under the console's Content-Security-Policy (tests/console/smoke.js).
# A dependency that only a prepared machine provides (a node, npm or python3
# that is not Debian's, a package install-deps forgets) fails it here.
#
# Each run starts from stock; the .deb files and npm's cache are kept between
# runs (--cache-downloads), so only the first run downloads (about 490 MB).
# Needs root. Exits 1 with the reason on failure.
#
# usage: scripts/stock-check.sh
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

[ $# -eq 0 ] || { echo "usage: scripts/stock-check.sh" >&2; exit 2; }
[ "$(id -u)" -eq 0 ] || { echo "stock-check: needs root (scripts/stock-root.sh)" >&2; exit 1; }

log=$root/build/stock-check.log
mkdir -p "$root/build"
echo "stock-check: install-deps.sh and the browser smoke in a stock bookworm root (log: $log)"
# shellcheck disable=SC2016 # expanded inside the root
if ! scripts/stock-root.sh --cache-downloads --bind "$root:/src" /bin/bash -euc '
    fail() { echo "stock-check: $*" >&2; exit 1; }
    /src/scripts/install-deps.sh || fail "scripts/install-deps.sh failed on a stock bookworm"
    # What the suite runs must be Debian packages, not what happened to be
    # first in PATH on the machine that wrote the scripts.
    for tool in node npm python3 chromium cmake clang docker debootstrap curl jq git; do
        p=$(command -v "$tool") || fail "$tool is not installed by install-deps.sh"
        dpkg -S "$(readlink -f "$p")" >/dev/null 2>&1 || fail "$tool ($p) is not from a Debian package"
    done
    python3 -c "import yaml" || fail "python3-yaml missing for /usr/bin/python3"
    version=$(cat /src/tests/console/playwright-core.version)
    NODE_PATH=/var/cache/dlq-bridge/node/playwright-core-$version/node_modules \
        node /src/tests/console/smoke.js ||
        fail "the browser smoke failed with $(node --version) and playwright-core $version"
' >"$log" 2>&1; then
    tail -n 20 "$log" >&2
    echo "stock-check: FAILED on a stock bookworm (whole log: $log)" >&2
    exit 1
fi
grep '^smoke.js:' "$log"
