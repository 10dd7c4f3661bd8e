#!/usr/bin/env bash
# The README's test command as a new user would run it: a fresh stock Debian
# bookworm (scripts/stock-root.sh: debootstrap minbase, nothing else
# installed), a clone of this checkout's HEAD, and scripts/test.sh in it,
# which installs everything itself (scripts/install-deps.sh) and builds the
# trixie roots it needs from nothing. Nothing of this machine is used but the
# kernel, the network and the Debian mirror its apt sources name.
#
# The clone lives on the host's disk (under ${DLQB_CACHE:-/var/cache/dlq-bridge}/stock-runs/),
# bind-mounted at /root/dlq-bridge inside, so its build folders and logs can
# be read during and after the run; removed afterwards unless --keep. The
# roots and the docker engine of the run live in an empty
# /var/cache/dlq-bridge of its own, removed afterwards too: a run downloads
# all of it again (490 MB of bookworm packages, then the trixie roots) and
# takes longer than scripts/test.sh on a prepared machine (the trixie roots
# and the compose images are built cold). Measured on 2 cores at load 16 to
# 20: install-deps.sh done after 473 s, the build after 800 s, the unit tests
# (32) passed and the broker tests started at 857 s. A whole run, every
# step passing (dd20f5e, load 2 to 6): 2,174 s.
#
# usage: scripts/stock-test.sh [--keep] [TEST.SH ARGUMENT...]
#        scripts/stock-test.sh [--keep] --command COMMAND [ARG...]
#   e.g. DLQB_TEST_PORT_SHIFT=500 scripts/stock-test.sh
#        scripts/stock-test.sh --keep --quick
#        scripts/stock-test.sh --command /bin/bash -c 'scripts/install-deps.sh && ...'
#   --command runs COMMAND in the clone instead of scripts/test.sh (to chase
#   one suite that fails only there).
# The test nodes share this machine's network: give another checkout's
# running suite a different DLQB_TEST_PORT_SHIFT. Needs root; uses both cores
# for as long as scripts/test.sh does, and more. Exits with test.sh's status.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

keep=0
if [ "${1:-}" = --keep ]; then keep=1; shift; fi
command=(scripts/test.sh)
if [ "${1:-}" = --command ]; then
    shift
    [ $# -gt 0 ] || { echo "stock-test: --command needs a command" >&2; exit 2; }
    command=()
fi
[ "$(id -u)" -eq 0 ] || { echo "stock-test: needs root (scripts/stock-root.sh)" >&2; exit 1; }

cache=${DLQB_CACHE:-/var/cache/dlq-bridge}
mkdir -p "$cache/stock-runs"
clone=$(mktemp -d "$cache/stock-runs/clone.XXXXXX")
# shellcheck disable=SC2317 # run by the EXIT trap
cleanup() {
    if [ "$keep" = 1 ]; then
        echo "stock-test: the clone and its logs stay in $clone" >&2
    else
        rm -rf --one-file-system "$clone"
    fi
}
trap cleanup EXIT
git clone -q --no-local "$root" "$clone/dlq-bridge"
echo "stock-test: $(git -C "$clone/dlq-bridge" log -1 --format='%h %s') in a stock bookworm root" >&2
start=$SECONDS
rc=0
# shellcheck disable=SC2016 # expanded inside the root
scripts/stock-root.sh --bind-rw "$clone/dlq-bridge:/root/dlq-bridge" \
    /bin/sh -c 'cd /root/dlq-bridge && exec "$@"' sh "${command[@]}" "$@" || rc=$?
echo "stock-test: ${command[*]} $* exited $rc after $((SECONDS - start)) s in a stock bookworm root" >&2
exit "$rc"
