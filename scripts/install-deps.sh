#!/usr/bin/env bash
# Installs the Debian packages dlq-bridge needs to build and run its tests.
#
# Installs only what dpkg reports missing, so a prepared machine is left
# untouched. As root it runs apt-get (refreshing the package lists only if the
# first attempt fails); otherwise it lists what is missing and exits 1.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive

packages=(
    build-essential cmake pkg-config
    git # scripts/build-deb.sh packs the tracked files (git ls-files); minbase has no git
    librabbitmq-dev libssl-dev libjson-c-dev libcmocka-dev libmicrohttpd-dev
    rabbitmq-server curl socat prometheus openssl python3 python3-yaml python3-cryptography jq tmux
    clang clang-format libclang-rt-14-dev systemd debootstrap docker.io
    chromium
    debhelper dpkg-dev lintian piuparts go-md2man
)

missing=()
# Node for the browser test: Debian's nodejs and npm, unless a node with its
# own npm is installed already (a nodejs package that bundles npm conflicts
# with Debian's npm).
command -v node >/dev/null 2>&1 || packages+=(nodejs)
command -v npm >/dev/null 2>&1 || packages+=(npm)
for pkg in "${packages[@]}"; do
    status=$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null || true)
    [ "$status" = "install ok installed" ] || missing+=("$pkg")
done

# The console's browser test (tests/console/) drives Debian's chromium with
# playwright-core from the npm registry, kept in a cache directory outside
# the tree (never a browser download of its own: PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD),
# one folder per version so checkouts pinning different ones share a machine.
# The version (tests/console/playwright-core.version) is the newest whose
# engines accept bookworm's nodejs 18.20.4 (1.62 and later want node >= 20
# and refuse to start on 18): scripts/stock-check.sh proves it runs there.
playwright_version=$(cat "$(dirname "$0")/../tests/console/playwright-core.version")
node_dir=/var/cache/dlq-bridge/node/playwright-core-$playwright_version
install_playwright() {
    if [ -f "$node_dir/node_modules/playwright-core/package.json" ] &&
        grep -q "\"version\": \"$playwright_version\"" "$node_dir/node_modules/playwright-core/package.json"; then
        return 0
    fi
    if [ "$(id -u)" -ne 0 ] && [ ! -w "$(dirname "$node_dir")" ]; then
        echo "install-deps: playwright-core missing in $node_dir (run as root)" >&2
        return 1
    fi
    echo "install-deps: npm install playwright-core@$playwright_version into $node_dir"
    mkdir -p "$node_dir"
    PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm install --prefix "$node_dir" --no-save --no-audit \
        --no-fund "playwright-core@$playwright_version"
}

if [ ${#missing[@]} -eq 0 ]; then
    install_playwright
    exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
    echo "install-deps: missing packages: ${missing[*]}" >&2
    echo "install-deps: run as root, or: sudo apt-get install --no-install-recommends ${missing[*]}" >&2
    exit 1
fi

# Installing rabbitmq-server would start a system node on the default ports
# where the init system allows it; the tests run their own private nodes, so
# keep the service down during the install unless a policy already exists.
policy=/usr/sbin/policy-rc.d
own_policy=0
if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' > "$policy"
    chmod 755 "$policy"
    own_policy=1
fi
cleanup() { if [ "$own_policy" = 1 ]; then rm -f "$policy"; fi; }
trap cleanup EXIT

echo "install-deps: installing ${missing[*]}"
if ! apt-get install -y --no-install-recommends "${missing[@]}"; then
    echo "install-deps: install failed; refreshing package lists and retrying" >&2
    apt-get update
    apt-get install -y --no-install-recommends "${missing[@]}"
fi
install_playwright
