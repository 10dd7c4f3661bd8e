#!/usr/bin/env bash
# Runs a command as root chrooted into a throwaway copy of a cached Debian
# root (scripts/debian-root.sh): an overlay whose lower layer is the cached
# root, never written, and whose upper layer UPPER holds every change the
# command makes. Calls with the same UPPER see one another's changes (install
# a package in one, check it in the next); removing UPPER throws the copy
# away. Instant and small where a `cp -a` of the root is not.
#
# The overlay, /proc, /dev and each --bind live in a private mount namespace
# (unshare -m), so no mount outlives the command or shows outside it, even
# after a kill -9. The command is exec'd (no shell waits in between): a
# caller that starts it in the background holds its pid, and a signal sent
# there reaches the command itself.
#
# usage: scripts/in-root.sh [--bind HOST_DIR:ROOT_DIR]... ROOT UPPER COMMAND [ARG]...
#   --bind  mounts HOST_DIR at ROOT_DIR inside the copy (ROOT_DIR is made in
#           the upper layer), e.g. a package cache, the source tree
# Needs root (mount, chroot). Exit status: the command's; 2 on bad usage.
set -euo pipefail

usage="usage: $0 [--bind HOST_DIR:ROOT_DIR]... ROOT UPPER COMMAND [ARG]..."
binds=()
while [ $# -gt 0 ]; do
    case "$1" in
    --bind)
        case "${2:-}" in
        /*:/*) binds+=("$2"); shift 2 ;;
        *) echo "in-root: --bind takes HOST_DIR:ROOT_DIR (absolute paths), not '${2:-}'" >&2; exit 2 ;;
        esac
        ;;
    *) break ;;
    esac
done
[ $# -ge 3 ] || { echo "$usage" >&2; exit 2; }
root=$1 upper=$2
shift 2
[ -f "$root/.dlqb-root" ] || { echo "in-root: $root is not a root made by scripts/debian-root.sh" >&2; exit 2; }
[ "$(id -u)" -eq 0 ] || { echo "in-root: needs root (mount, chroot)" >&2; exit 1; }

# The overlay's work directory must be on the upper layer's file system.
mkdir -p "$upper/data" "$upper/work" "$upper/mnt"

# shellcheck disable=SC2016 # expanded by the inner shell
exec unshare --mount --propagation private -- /bin/sh -euc '
    root=$1 upper=$2 nbinds=$3
    shift 3
    m=$upper/mnt
    mount -t overlay overlay -o "lowerdir=$root,upperdir=$upper/data,workdir=$upper/work" "$m"
    mount --rbind /proc "$m/proc"
    mount --rbind /dev "$m/dev"
    while [ "$nbinds" -gt 0 ]; do
        src=${1%%:*} dst=${1#*:}
        mkdir -p "$m$dst"
        mount --bind "$src" "$m$dst"
        shift
        nbinds=$((nbinds - 1))
    done
    exec chroot "$m" "$@"' sh "$root" "$upper" "${#binds[@]}" "${binds[@]}" "$@"
