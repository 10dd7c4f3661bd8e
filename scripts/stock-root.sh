#!/usr/bin/env bash
# Runs a command as root in a throwaway copy of a stock Debian bookworm: a
# debootstrap --variant=minbase root with nothing else installed, built once
# by scripts/debian-root.sh (roots/bookworm-stock) and never changed. Each run
# gets an overlay of its own on top of it, its changes held in memory (a
# tmpfs: about 2 GB once scripts/install-deps.sh ran), so whatever the command
# installs is gone with the run and the next run starts from stock again.
# This is what a user's new bookworm machine has, not what this machine has.
#
# Inside: /proc, /sys (cgroups included), /dev and /dev/pts are the host's
# (bind-mounted in a private mount namespace: no mount outlives the run or
# shows outside it), the network is the host's (127.0.0.1 too), and the apt
# sources are those of a Debian installer's bookworm (bookworm,
# bookworm-updates, bookworm-security; refreshed with apt-get update before
# the command, as a freshly installed system has them). /var/cache/dlq-bridge
# inside is an empty folder on the host's disk (a real file system, so the
# docker engine and debootstrap work there), removed afterwards too.
#
# usage: scripts/stock-root.sh [--cache-downloads] [--bind[-rw] DIR:PATH]... COMMAND [ARG...]
#   --cache-downloads  keeps the .deb files apt downloads and npm's cache on
#                      the host (${DLQB_CACHE:-/var/cache/dlq-bridge}/stock-downloads/),
#                      shared by the runs (one at a time): a second run
#                      installs the same packages without downloading them
#   --bind DIR:PATH    bind-mounts the host's DIR at PATH inside (read-only)
#   --bind-rw DIR:PATH the same, writable (e.g. a clone the command builds in)
# COMMAND is exec'd as given (no shell left around it) with the root as the
# mount namespace's root (pivot_root, not chroot: see below), HOME=/root
# and Debian's default PATH. Exits with its status. Needs root.
set -euo pipefail
cd "$(dirname "$0")/.."

usage="usage: scripts/stock-root.sh [--cache-downloads] [--bind[-rw] DIR:PATH]... COMMAND [ARG...]"
cache_downloads=0
binds=()
while [ $# -gt 0 ]; do
    case "$1" in
    --cache-downloads) cache_downloads=1 ;;
    --bind | --bind-rw)
        case "${2:-}" in
        /*:/*) binds+=("${1#--bind}:$2"); shift ;;
        *) echo "stock-root: $1 takes DIR:PATH, both absolute, not '${2:-}' ($usage)" >&2; exit 2 ;;
        esac
        ;;
    --) shift; break ;;
    -*) echo "stock-root: unknown option '$1' ($usage)" >&2; exit 2 ;;
    *) break ;;
    esac
    shift
done
[ $# -gt 0 ] || { echo "$usage" >&2; exit 2; }
[ "$(id -u)" -eq 0 ] || { echo "stock-root: needs root (chroot, mounts)" >&2; exit 1; }

cache=${DLQB_CACHE:-/var/cache/dlq-bridge}
lower=$(scripts/debian-root.sh bookworm bookworm-stock)
mirror=$(scripts/debian-root.sh --mirror)
mkdir -p "$cache/stock-runs"
run=$(mktemp -d "$cache/stock-runs/run.XXXXXX")
cleanup() {
    # The mounts lived in the namespace of the unshare below, gone with it.
    rm -rf --one-file-system "$run"
}
trap cleanup EXIT
mkdir -p "$run/layer" "$run/merged" "$run/cache"

downloads=""
if [ "$cache_downloads" = 1 ]; then
    downloads="$cache/stock-downloads"
    mkdir -p "$downloads/apt/partial" "$downloads/npm"
    # One run at a time uses them (apt locks its archive folder and gives up).
    exec 9>"$downloads/.lock"
    flock 9
fi

# shellcheck disable=SC2016 # expanded by the inner shell
unshare --mount --propagation private -- /bin/bash -euc '
    lower=$1 run=$2 mirror=$3 downloads=$4 nbinds=$5
    shift 5
    binds=("${@:1:$nbinds}")
    shift "$nbinds"
    m=$run/merged
    # The changes to the root (about 2 GB once install-deps.sh ran) in
    # memory: gone with the namespace, no minute of deleting files after.
    mount -t tmpfs -o mode=0755 dlqb-stock "$run/layer"
    mkdir "$run/layer/upper" "$run/layer/work"
    mount -t overlay overlay -o "lowerdir=$lower,upperdir=$run/layer/upper,workdir=$run/layer/work" "$m"
    mount --rbind /proc "$m/proc"
    mount --rbind /sys "$m/sys"
    mount --rbind /dev "$m/dev"
    mkdir -p "$m/var/cache/dlq-bridge"
    mount --bind "$run/cache" "$m/var/cache/dlq-bridge"
    if [ -n "$downloads" ]; then
        mount --bind "$downloads/apt" "$m/var/cache/apt/archives"
        mkdir -p "$m/root/.npm"
        mount --bind "$downloads/npm" "$m/root/.npm"
    fi
    for b in "${binds[@]}"; do # [-rw]:DIR:PATH
        mode=${b%%:*} b=${b#*:}
        mkdir -p "$m${b#*:}"
        mount --bind "${b%%:*}" "$m${b#*:}"
        [ "$mode" = -rw ] || mount -o remount,bind,ro "$m${b#*:}"
    done
    cp /etc/resolv.conf "$m/etc/resolv.conf"
    # What the Debian installer writes and debootstrap does not: without it
    # "localhost" resolves nowhere in the root, as on no installed bookworm
    # (containers on host networking, as in the compose test, get this file).
    printf "127.0.0.1\tlocalhost\n127.0.1.1\t%s\n\n::1     localhost ip6-localhost ip6-loopback\nff02::1 ip6-allnodes\nff02::2 ip6-allrouters\n" \
        "$(hostname)" >"$m/etc/hosts"
    # Only the trust of this network, not a package: where TLS is
    # intercepted, the CA bundle of the host holds the CA npm must accept.
    cp /etc/ssl/certs/ca-certificates.crt "$m/etc/dlqb-host-ca.crt"
    # The root is thrown away afterwards: dpkg need not sync every file it
    # unpacks.
    echo force-unsafe-io >"$m/etc/dpkg/dpkg.cfg.d/dlqb-unsafe-io"
    # What scripts/test.sh looks for to know it runs in such a root.
    echo "a throwaway stock bookworm root (scripts/stock-root.sh)" >"$m/etc/dlqb-stock-root"
    cat >"$m/etc/apt/sources.list" <<EOF
deb $mirror bookworm main
deb $mirror bookworm-updates main
deb http://deb.debian.org/debian-security bookworm-security main
EOF
    env -i HOME=/root PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
        LANG=C.UTF-8 TERM="${TERM:-dumb}" chroot "$m" apt-get -qq update >&2
    # The root becomes the namespace'"'"'s root (pivot_root), not just the
    # command'"'"'s (chroot): a process that joins a mount namespace starts at
    # that namespace'"'"'s root, so under a chroot `docker exec` (and with it
    # every container healthcheck) ran in the host'"'"'s files instead of the
    # container'"'"'s: the compose test'"'"'s broker read the host'"'"'s
    # /var/lib/rabbitmq/.erlang.cookie, was refused, and stayed unhealthy.
    cd "$m"
    mkdir -p .dlqb-host
    pivot_root . .dlqb-host
    exec env -i HOME=/root PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
        LANG=C.UTF-8 TERM="${TERM:-dumb}" NODE_EXTRA_CA_CERTS=/etc/dlqb-host-ca.crt \
        DLQB_TEST_PORT_SHIFT="${DLQB_TEST_PORT_SHIFT:-0}" \
        /bin/sh -c "umount -l /.dlqb-host && rmdir /.dlqb-host && cd / && exec \"\$@\"" sh "$@"' \
    sh "$lower" "$run" "$mirror" "$downloads" "${#binds[@]}" "${binds[@]}" "$@"
