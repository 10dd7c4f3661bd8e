#!/usr/bin/env bash
# Evidence for one request at scale (docs/audit.md, "Evidence for one
# request"): writes a log of N hop records with the real writer
# (bench/audit-gen.c; request ids repeat every 100,000 hops, so one id
# has N/100,000 records), starts a private broker for dsr.audit.anchors,
# and times with /usr/bin/time (seconds, peak RSS):
#   audit verify          the baseline: one pass, every signature
#   audit checkpoint      the first, and one after one more 1000-record batch
#                         (with its consistency proof)
#   audit witness         checking that proof and cosigning
#   audit prove           one request's bundle (its size, its proof hashes)
#   audit verify-proof    offline, and the Python verifier on the same bundle
# R rounds of verify, prove and verify-proof, alternated. It is not a
# test: nothing here passes or fails the build.
#
# usage: bench/evidence.sh [--records N] [--rounds R] [--port P] [--no-build]
#   --records N  hop records in the log (default 1000000: about 480 MB)
#   --rounds R   runs of verify, prove, verify-proof (default 3)
#   --port P     the private broker's AMQP port (it takes P..P+4; default 26172)
#   --no-build   use the binaries already in build-bench/
set -euo pipefail

cd "$(dirname "$0")/.."
me=bench/evidence.sh
records=1000000 rounds=3 port=26172 build=1
while [ $# -gt 0 ]; do
    case "$1" in
    --records) records=${2:?--records needs a value}; shift 2 ;;
    --rounds) rounds=${2:?--rounds needs a value}; shift 2 ;;
    --port) port=${2:?--port needs a value}; shift 2 ;;
    --no-build) build=0; shift ;;
    -h|--help) sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p;}' "$0"; exit 0 ;;
    *) echo "evidence.sh: unknown argument '$1' (see bench/evidence.sh --help)" >&2; exit 2 ;;
    esac
done

bdir=build-bench
if [ "$build" = 1 ]; then
    cmake -S . -B "$bdir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDLQB_BENCH=ON \
        -DDLQB_BROKER_TESTS=OFF >/dev/null
    cmake --build "$bdir" -j2 --target dlq-bridge dlqb-audit-gen >/dev/null
fi
bin=$bdir/dlq-bridge
[ -x "$bin" ] && [ -x "$bdir/bench/dlqb-audit-gen" ] ||
    { echo "evidence.sh: no binaries in $bdir (run without --no-build)" >&2; exit 1; }
[ -x /usr/bin/time ] || { echo "evidence.sh: needs /usr/bin/time (Debian package time)" >&2; exit 1; }

work=$(mktemp -d)
# shellcheck source=bench/lib.sh
. bench/lib.sh
node_dirs=("$work/node") node_dir=$work/node url=amqp://guest:guest@127.0.0.1:$port
mgmt="http://127.0.0.1:$((port + 1))"
cleanup_all() { cleanup; rm -rf "$work"; }
start_private_node evidence
trap cleanup_all EXIT

(umask 077 && openssl genpkey -algorithm ed25519 -out "$work/key" 2>/dev/null &&
    openssl genpkey -algorithm ed25519 -out "$work/witness.key" 2>/dev/null)
mkdir "$work/keys"
openssl pkey -in "$work/key" -pubout -out "$work/keys/log.pem"
export DLQ_BRIDGE_AUDIT_LOG=$work/audit.log DLQ_BRIDGE_AUDIT_PUBLIC_KEYS=$work/keys \
    DLQ_BRIDGE_AUDIT_KEY_FILE=$work/key DLQ_BRIDGE_CONFIG=

start=$(now)
"$bdir/bench/dlqb-audit-gen" "$DLQ_BRIDGE_AUDIT_LOG" "$work/key" "$records"
written=$(awk -v a="$start" -v b="$(now)" 'BEGIN {print b - a}')
size=$(stat -c %s "$DLQ_BRIDGE_AUDIT_LOG")
printf 'log: %d records, %d MB, written in %.1f s\n' "$records" $((size / 1000000)) "$written"

# One run: "seconds max_rss_kib"; want: text its output must hold.
measure() {
    local want=$1 out
    shift
    out=$(/usr/bin/time -f 'TIME %e %M' "$@" 2>&1) || { echo "evidence.sh: '$*' failed: $out" >&2; exit 1; }
    grep -q -- "$want" <<<"$out" || { echo "evidence.sh: '$*': $out" >&2; exit 1; }
    awk '/^TIME /{print $2, $3}' <<<"$out"
}
# The stream's message count lags its appends (a reader reads up to it):
# wait, polling the management API, until it shows at least n messages.
wait_stream() {
    local i have
    for i in $(seq 120); do
        have=$(curl -s -u guest:guest "$mgmt/api/queues/%2F/dsr.audit.anchors" |
            sed -n 's/.*"messages":\([0-9]*\).*/\1/p')
        [ "${have:-0}" -ge "$1" ] && return 0
        sleep 0.5
    done
    fail "dsr.audit.anchors did not reach $1 messages"
}
median() { sort -n | awk '{v[NR]=$1} END {print (NR % 2) ? v[(NR+1)/2] : (v[NR/2] + v[NR/2+1]) / 2}'; }

witness=("$bin" audit witness --witness-key "$work/witness.key" --name bench.witness/1
    --state "$work/witness.state")
"${witness[@]}" --print-vkey > "$work/witnesses.txt"

read -r c1 k1 < <(measure 'the first of origin' "$bin" audit checkpoint)
printf 'checkpoint (first, %d records): %.2f s %d KiB\n' "$records" "$c1" "$k1"
wait_stream 1
read -r w1 wk1 < <(measure '1 checkpoint cosigned' "${witness[@]}")
printf 'witness (first): %.2f s %d KiB\n' "$w1" "$wk1"
# One more batch of 1000, then a checkpoint with its consistency proof.
"$bdir/bench/dlqb-audit-gen" "$DLQ_BRIDGE_AUDIT_LOG" "$work/key" 1000
read -r c2 k2 < <(measure 'extends the last checkpoint' "$bin" audit checkpoint)
printf 'checkpoint (after one more 1000-record batch): %.2f s %d KiB\n' "$c2" "$k2"
wait_stream 3
read -r w2 wk2 < <(measure '1 checkpoint cosigned' "${witness[@]}")
printf 'witness (consistency proof checked): %.2f s %d KiB\n' "$w2" "$wk2"
# The message a checkpoint appends (printed, not published: after one more batch).
"$bdir/bench/dlqb-audit-gen" "$DLQ_BRIDGE_AUDIT_LOG" "$work/key" 1000
msg=$("$bin" audit checkpoint --print 2>/dev/null)
printf 'a checkpoint message in the stream: %d bytes (consistency proof from the last: %s hashes)\n' \
    "$(printf '%s' "$msg" | wc -c)" "$(printf '%s' "$msg" | grep -o '"consistency":\[[^]]*\]' | grep -o '"[A-Za-z0-9+/=]*"' | wc -l)"
wait_stream 4

: > "$work/verify"; : > "$work/prove"; : > "$work/vp"; : > "$work/py"
for r in $(seq "$rounds"); do
    id=DSR-$((r * 4242 % 100000))
    read -r vs vk < <(measure 'audit log intact' "$bin" audit verify)
    rm -f "$work/b.json"
    read -r ps pk < <(measure 'bundle of' "$bin" audit prove --request-id "$id" --output "$work/b.json")
    read -r qs qk < <(measure 'evidence intact' env -u DLQ_BRIDGE_URL -u DLQ_BRIDGE_AUDIT_KEY_FILE \
        "$bin" audit verify-proof "$work/b.json" --witness-keys "$work/witnesses.txt")
    read -r ys yk < <(measure 'evidence intact' /usr/bin/python3 tests/evidence/verify_bundle.py \
        "$work/b.json" --keys "$work/keys" --witness-keys "$work/witnesses.txt")
    bsize=$(stat -c %s "$work/b.json")
    nrec=$(grep -o '"index":[0-9]*,"line"' "$work/b.json" | wc -l)
    printf 'round %d: verify %.2f s %d KiB | prove %s %.2f s %d KiB (%d records, bundle %d bytes) | verify-proof %.3f s %d KiB | python %.3f s %d KiB\n' \
        "$r" "$vs" "$vk" "$id" "$ps" "$pk" "$nrec" "$bsize" "$qs" "$qk" "$ys" "$yk"
    echo "$vs $vk" >> "$work/verify"; echo "$ps $pk" >> "$work/prove"
    echo "$qs $qk" >> "$work/vp"; echo "$ys $yk" >> "$work/py"
done
v=$(cut -d' ' -f1 "$work/verify" | median) p=$(cut -d' ' -f1 "$work/prove" | median)
q=$(cut -d' ' -f1 "$work/vp" | median) y=$(cut -d' ' -f1 "$work/py" | median)
pk=$(cut -d' ' -f2 "$work/prove" | sort -n | tail -1) vk=$(cut -d' ' -f2 "$work/verify" | sort -n | tail -1)
awk -v v="$v" -v p="$p" -v q="$q" -v y="$y" -v vk="$vk" -v pk="$pk" -v c="$c2" 'BEGIN {
    printf "median: verify %.2f s, checkpoint %.2f s, prove %.2f s (prove/verify %.2f), verify-proof %.3f s, python %.3f s; peak RSS verify %d KiB, prove %d KiB\n", v, c, p, p / v, q, y, vk, pk }'
