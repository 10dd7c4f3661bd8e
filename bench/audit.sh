#!/usr/bin/env bash
# Reading the audit trail at scale: writes a log of N hop records with the
# real writer (bench/audit-gen.c; request ids repeat every 100,000 hops),
# then times `dlq-bridge audit verify` (the baseline) and `dlq-bridge audit
# show --request-id` on it, alternated, R rounds each, with /usr/bin/time.
# Prints each run's seconds and peak RSS, the medians and show/verify. It
# needs no broker. It is not a test: nothing here passes or fails the build.
#
# usage: bench/audit.sh [--records N] [--rounds R] [--no-build]
#   --records N  hop records in the log (default 500000: about 270 MB)
#   --rounds R   runs of each command (default 3; the machine is shared)
#   --no-build   use the binaries already in build-bench/
set -euo pipefail

cd "$(dirname "$0")/.."
records=500000 rounds=3 build=1
while [ $# -gt 0 ]; do
    case "$1" in
    --records) records=${2:?--records needs a value}; shift 2 ;;
    --rounds) rounds=${2:?--rounds needs a value}; shift 2 ;;
    --no-build) build=0; shift ;;
    -h|--help) sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p;}' "$0"; exit 0 ;;
    *) echo "audit.sh: unknown argument '$1' (see bench/audit.sh --help)" >&2; exit 2 ;;
    esac
done

bdir=build-bench
if [ "$build" = 1 ]; then
    cmake -S . -B "$bdir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDLQB_BENCH=ON \
        -DDLQB_BROKER_TESTS=OFF >/dev/null
    cmake --build "$bdir" -j2 --target dlq-bridge dlqb-audit-gen >/dev/null
fi
[ -x "$bdir/dlq-bridge" ] && [ -x "$bdir/bench/dlqb-audit-gen" ] ||
    { echo "audit.sh: no binaries in $bdir (run without --no-build)" >&2; exit 1; }
[ -x /usr/bin/time ] || { echo "audit.sh: needs /usr/bin/time (Debian package time)" >&2; exit 1; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# The writer's key pair: it signs with the private key; verify and show
# are given only the public key, as an auditor would be.
(umask 077 && openssl genpkey -algorithm ed25519 -out "$work/key" 2>/dev/null)
openssl pkey -in "$work/key" -pubout -out "$work/key.pub.pem"
export DLQ_BRIDGE_AUDIT_LOG=$work/audit.log DLQ_BRIDGE_AUDIT_PUBLIC_KEYS=$work/key.pub.pem

start=$(date +%s.%N)
"$bdir/bench/dlqb-audit-gen" "$DLQ_BRIDGE_AUDIT_LOG" "$work/key" "$records"
written=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN {print b - a}')
size=$(stat -c %s "$DLQ_BRIDGE_AUDIT_LOG")
printf 'log: %d records, %d MB, written in %.1f s\n' "$records" $((size / 1000000)) "$written"

# One run: "seconds max_rss_kib"; the command's own output is checked
# (a verify that fails or a show that finds nothing measures nothing).
measure() {
    local out
    out=$(/usr/bin/time -f 'TIME %e %M' "$bdir/dlq-bridge" audit "$@" 2>&1) ||
        { echo "audit.sh: 'audit $*' failed: $out" >&2; exit 1; }
    grep -q 'audit log intact' <<<"$out" || { echo "audit.sh: 'audit $*': $out" >&2; exit 1; }
    if [ "$1" = show ]; then
        grep -q 'hops\? recorded for' <<<"$out" || { echo "audit.sh: show found nothing" >&2; exit 1; }
    fi
    awk '/^TIME /{print $2, $3}' <<<"$out"
}

median() { sort -n | awk '{v[NR]=$1} END {print (NR % 2) ? v[(NR+1)/2] : (v[NR/2] + v[NR/2+1]) / 2}'; }

: > "$work/verify" ; : > "$work/show"
for r in $(seq "$rounds"); do
    read -r vs vk < <(measure verify)
    read -r ss sk < <(measure show --request-id "DSR-$((r * 4242 % 100000))")
    printf 'round %d: verify %.2f s %d KiB   show %.2f s %d KiB\n' "$r" "$vs" "$vk" "$ss" "$sk"
    echo "$vs $vk" >> "$work/verify"
    echo "$ss $sk" >> "$work/show"
done
v=$(cut -d' ' -f1 "$work/verify" | median) s=$(cut -d' ' -f1 "$work/show" | median)
vk=$(cut -d' ' -f2 "$work/verify" | sort -n | tail -1) sk=$(cut -d' ' -f2 "$work/show" | sort -n | tail -1)
awk -v n="$records" -v v="$v" -v s="$s" -v vk="$vk" -v sk="$sk" 'BEGIN {
    printf "median: verify %.2f s (%.0f records/s), show %.2f s; show/verify %.2f; " \
           "peak RSS verify %d KiB, show %d KiB\n", v, n / v, s, s / v, vk, sk }'
