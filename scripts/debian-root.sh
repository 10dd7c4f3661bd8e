#!/usr/bin/env bash
# Builds (once) and prints the path of a cached Debian root made by
# debootstrap, for the tests that need software this machine's own release
# does not ship: a RabbitMQ 4.x node (trixie's rabbitmq-server) and the base
# images of the compose test (bookworm minbase).
#
# The root lives outside the clone, in ${DLQB_CACHE:-/var/cache/dlq-bridge}/roots/NAME,
# so a second run (or a second clone) reuses it; a missing or half-built root
# is built again (it is built in NAME.partial and renamed when complete).
# The mirror is the one this machine's apt sources name, never a fixed host.
#
# usage: scripts/debian-root.sh SUITE NAME [PACKAGE,...]
#   e.g. scripts/debian-root.sh trixie trixie-rabbitmq rabbitmq-server
# Prints the root's path on stdout; progress goes to stderr. Needs root.
#        scripts/debian-root.sh --mirror
# Prints the mirror it would use (for other scripts that fetch from Debian).
set -euo pipefail

# The first http(s) URI of the machine's Debian sources: deb822 first, then
# the one-line format.
mirror_of_this_machine() {
    local uri=""
    if compgen -G "/etc/apt/sources.list.d/*.sources" >/dev/null; then
        uri=$(awk '/^URIs:/ { for (i = 2; i <= NF; i++) if ($i ~ /^https?:\/\// && $i !~ /security/) { print $i; exit } }' \
            /etc/apt/sources.list.d/*.sources)
    fi
    if [ -z "$uri" ] && [ -f /etc/apt/sources.list ]; then
        uri=$(awk '$1 == "deb" { for (i = 2; i <= NF; i++) if ($i ~ /^https?:\/\// && $i !~ /security/) { print $i; exit } }' \
            /etc/apt/sources.list)
    fi
    echo "$uri"
}

mirror=${DLQB_DEBIAN_MIRROR:-$(mirror_of_this_machine)}
if [ -z "$mirror" ]; then
    echo "debian-root: no Debian mirror in /etc/apt/sources.list{,.d}; set DLQB_DEBIAN_MIRROR" >&2
    exit 1
fi
if [ "${1:-}" = --mirror ]; then
    echo "$mirror"
    exit 0
fi

suite=${1:-}
name=${2:-}
include=${3:-}
if [ -z "$suite" ] || [ -z "$name" ]; then
    echo "usage: $0 SUITE NAME [PACKAGE,...]" >&2
    exit 2
fi
case "$name" in
*/* | .* | "") echo "debian-root: NAME must be a plain folder name, got '$name'" >&2; exit 2 ;;
esac

cache=${DLQB_CACHE:-/var/cache/dlq-bridge}
root="$cache/roots/$name"
stamp="$root/.dlqb-root"
want="suite=$suite include=$include"

if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
    echo "$root"
    exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
    echo "debian-root: building $root needs root (debootstrap)" >&2
    exit 1
fi
command -v debootstrap >/dev/null || {
    echo "debian-root: debootstrap is not installed (scripts/install-deps.sh installs it)" >&2
    exit 1
}


mkdir -p "$cache/roots"
# One build of NAME at a time: a second caller (another node starting, another
# clone) waits for the first and then finds the root built.
exec 8>"$cache/roots/$name.lock"
flock 8
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
    echo "$root"
    exit 0
fi
partial="$root.partial"
# A half-built root from an interrupted run may still have a mount inside.
for m in proc sys dev; do
    mountpoint -q "$partial/$m" 2>/dev/null && umount -l "$partial/$m"
done
rm -rf "$partial" "$root"

echo "debian-root: building $suite root '$name' from $mirror (a few minutes, once)" >&2
args=(--variant=minbase)
[ -n "$include" ] && args+=("--include=$include")
# Keep the service scripts of what gets installed from starting anything.
if ! debootstrap "${args[@]}" "$suite" "$partial" "$mirror" >"$cache/roots/$name.log" 2>&1; then
    echo "debian-root: debootstrap of $suite failed; last lines of $cache/roots/$name.log:" >&2
    tail -n 15 "$cache/roots/$name.log" >&2
    exit 1
fi
rm -rf "$partial/var/cache/apt/archives/"*.deb
echo "$want" >"$partial/.dlqb-root"
mv "$partial" "$root"
echo "$root"
