#!/usr/bin/env bash
# Builds the Debian package dlq-bridge_VERSION_ARCH.deb from this tree
# (debian/: debhelper, dh with CMake's install rules) and runs lintian on it.
#
#   bookworm  on this machine, which must be Debian 12 with the build
#             dependencies installed (scripts/install-deps.sh);
#   trixie    in a throwaway overlay of the cached trixie build root
#             (scripts/debian-root.sh, scripts/in-root.sh): rabbitmq-c 0.15;
#             the build dependencies the root lacks (debhelper, go-md2man,
#             systemd-dev) are installed into the overlay from the mirror,
#             their .debs kept in /var/cache/dlq-bridge/apt/trixie.
#
# The tree is copied first (git's tracked and untracked-but-not-ignored files,
# so edits not yet committed are in), and built there: the tree itself is
# never written but for the output folder.
#
# usage: scripts/build-deb.sh [--suite bookworm|trixie] [--version VERSION]
#                             [--out DIR] [--nocheck] [--no-lintian]
#   --version   builds the tree as that version instead of debian/changelog's
#               (an entry is added to the copy's changelog), e.g. a lower one
#               for an upgrade test: --version 0.1.0~older
#   --out       where the .deb, .buildinfo and .changes go
#               (default build-deb/SUITE/)
#   --nocheck   skips the unit tests of the build (DEB_BUILD_OPTIONS=nocheck)
#   --no-lintian
# Prints the path of the .deb on stdout, the rest on stderr. Exit 1 on a
# failed build or a lintian error or warning, 2 on bad usage.
set -euo pipefail

cd "$(dirname "$0")/.."
tree=$(pwd)

usage="usage: $0 [--suite bookworm|trixie] [--version VERSION] [--out DIR] [--nocheck] [--no-lintian]"
suite=bookworm
version=""
out=""
nocheck=0
lintian=1
while [ $# -gt 0 ]; do
    case "$1" in
    --suite)
        case "${2:-}" in
        bookworm | trixie) suite=$2; shift ;;
        *) echo "build-deb: --suite takes bookworm or trixie, not '${2:-}' ($usage)" >&2; exit 2 ;;
        esac
        ;;
    --version)
        [[ "${2:-}" =~ ^[0-9][A-Za-z0-9.+~]*$ ]] ||
            { echo "build-deb: --version takes a native Debian version (e.g. 0.1.0~older), not '${2:-}'" >&2; exit 2; }
        version=$2; shift ;;
    --out) [ -n "${2:-}" ] || { echo "$usage" >&2; exit 2; }; out=$2; shift ;;
    --nocheck) nocheck=1 ;;
    --no-lintian) lintian=0 ;;
    -h | --help) sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p;}' "$0"; exit 0 ;;
    *) echo "build-deb: unknown argument '$1' ($usage)" >&2; exit 2 ;;
    esac
    shift
done
out=${out:-$tree/build-deb/$suite}
mkdir -p "$out"
out=$(cd "$out" && pwd)

# The package's version is CMake's project version: a release bumps both.
cmake_version=$(sed -n 's/^project(dlq-bridge VERSION \([0-9.]*\) .*/\1/p' CMakeLists.txt)
changelog_version=$(sed -n '1s/^dlq-bridge (\([^)]*\)).*/\1/p' debian/changelog)
case "$changelog_version" in
"$cmake_version" | "$cmake_version"[-+~]*) ;;
*) echo "build-deb: debian/changelog is at $changelog_version but CMakeLists.txt at $cmake_version" >&2; exit 1 ;;
esac

work=$(mktemp -d "${TMPDIR:-/tmp}/dlqb-deb.XXXXXX")
trap 'rm -rf "$work"' EXIT
src=$work/dlq-bridge
mkdir -p "$src"
git ls-files -z --cached --others --exclude-standard |
    while IFS= read -r -d '' f; do [ -e "$f" ] && printf '%s\0' "$f"; done |
    tar --null -T - -cf - | tar -xf - -C "$src"

if [ -n "$version" ]; then
    { printf 'dlq-bridge (%s) unstable; urgency=medium\n\n  * Built by scripts/build-deb.sh --version %s.\n\n -- %s  %s\n\n' \
        "$version" "$version" \
        "$(sed -n 's/^ -- \(.*>\)  .*/\1/p' debian/changelog | head -n 1)" "$(date -R)"
      cat debian/changelog; } >"$src/debian/changelog"
fi

build_options="${DEB_BUILD_OPTIONS:-}"
[ "$nocheck" = 1 ] && build_options="$build_options nocheck"
# Where lintian and the tests find the package.
deb=""

case "$suite" in
bookworm)
    # shellcheck disable=SC1091
    codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
    [ "$codename" = bookworm ] ||
        { echo "build-deb: --suite bookworm builds on this machine, which is '$codename', not bookworm" >&2; exit 1; }
    (cd "$src" && dpkg-checkbuilddeps) ||
        { echo "build-deb: build dependencies missing (scripts/install-deps.sh installs them)" >&2; exit 1; }
    echo "build-deb: building on this machine (bookworm)" >&2
    (cd "$src" && DEB_BUILD_OPTIONS="$build_options" dpkg-buildpackage -b -us -uc >"$work/build.log" 2>&1) ||
        { tail -n 40 "$work/build.log" >&2; echo "build-deb: dpkg-buildpackage failed (above)" >&2; exit 1; }
    ;;
trixie)
    troot=$(scripts/debian-root.sh trixie trixie-build \
        build-essential,cmake,pkg-config,librabbitmq-dev,libssl-dev,libjson-c-dev,libcmocka-dev,libmicrohttpd-dev)
    apt_cache=${DLQB_CACHE:-/var/cache/dlq-bridge}/apt/trixie
    mkdir -p "$apt_cache/partial"
    echo "build-deb: building in an overlay of $troot (trixie)" >&2
    # shellcheck disable=SC2016 # expanded by the shell in the root
    scripts/in-root.sh --bind "$work:/build" --bind "$apt_cache:/var/cache/apt/archives" \
        "$troot" "$work/overlay" /usr/bin/env DEBIAN_FRONTEND=noninteractive \
        DEB_BUILD_OPTIONS="$build_options" /bin/sh -euc '
            cd /build/dlq-bridge
            apt-get update -qq
            apt-get build-dep -y -qq --no-install-recommends ./ >/build/deps.log
            dpkg-buildpackage -b -us -uc' >"$work/build.log" 2>&1 ||
        { tail -n 40 "$work/build.log" >&2; echo "build-deb: the trixie build failed (above)" >&2; exit 1; }
    ;;
esac

for f in "$work"/dlq-bridge_*.deb "$work"/dlq-bridge-dbgsym_*.deb "$work"/dlq-bridge_*.buildinfo "$work"/dlq-bridge_*.changes; do
    [ -e "$f" ] || continue
    cp "$f" "$out/"
    case "$f" in */dlq-bridge_*.deb) deb=$out/$(basename "$f") ;; esac
done
[ -n "$deb" ] || { echo "build-deb: the build made no dlq-bridge_*.deb" >&2; exit 1; }
cp "$work/build.log" "$out/build.log"
echo "build-deb: $deb (build log: $out/build.log)" >&2

if [ "$lintian" = 1 ]; then
    # This machine's lintian (bookworm's) judges both builds; warnings and
    # errors fail, each override in debian/dlq-bridge.lintian-overrides
    # says why it is there.
    lintian --fail-on error,warning --display-info "$deb" >&2 ||
        { echo "build-deb: lintian found problems in $deb (above)" >&2; exit 1; }
    echo "build-deb: lintian: clean" >&2
fi
echo "$deb"
