#!/usr/bin/env bash
# Every ops command on a deep DLQ: for each depth N it loads N items into
# dsr.dlq.manual (one in a thousand from source_system billing, spread
# through it) and times, each with the peak RSS of the command and of the
# broker:
#   inspect --source-system billing, stats, resolve of the last item,
#   audit reconcile, replay --source-system billing, the daemon's SLA
#   escalator reaching an overdue item behind all N, replay --all; the
#   failure group overview (stats --by group, and the console's groups
#   page) of N items of 50 causes, and
#   of N items whose errors are all distinct (the hostile case: 1000 groups
#   kept, the rest counted as other);
# and beside them, in the same run, the anchors: the management UI's
# "Get messages" (requeue) and "Move messages" (a shovel) of the whole
# queue, and the raw rate at which one consumer reads it (dlqb-bench drain).
# Prints a Markdown table (docs/performance.md, "Deep DLQ").
#
# usage: bench/deep.sh [--depths "10000 100000 1000000"] [--port P] [--no-build]
#                      [--get-max N] [--only groups|moves|catalog|reconcile|snapshot]
#   --depths   the depths to measure (default 10000 100000 1000000)
#   --port P   AMQP port of the private node; it also takes P+1..P+4 (default 24672)
#   --get-max  the deepest queue "Get messages" is tried on (default 100000: its
#              answer is one JSON document of every message, held in the broker's
#              memory; at 1,000,000 that is most of a gigabyte)
#   --no-build use the binaries already in build-bench/ (DLQB_BENCH_DIR: another
#              build directory, e.g. to compare two builds in turn)
#   --only groups  only the group overview rows (and their loads)
#   --only moves   only the move rows: replay --source-system billing (1 in
#              1,000 moved, the rest held) against an unfiltered pass of the
#              same depth (inspect, and replay --all), each on a fresh load
#   --only reconcile only `audit reconcile` of N items (loaded outside the
#              bridge: every one unrecorded, the heaviest case for its memory)
#   --only catalog only the catalog rows: N items of 50 causes loaded straight
#              into the DLQ (outside the bridge), `catalog verify` (the catalog's
#              first build: a pass and N events), the first look (the whole stream
#              folded, a checkpoint written), then warm looks from the checkpoint:
#              inspect --source-system billing, stats --by group, and the console's
#              groups page (its second request: the console keeps its fold),
#              four looks at once, and the pass they replace (--scan)
#   --only snapshot a fresh reader (no checkpoint) of the catalog stream at N
#              items: folding from event 0, against folding from a snapshot once
#              retention cut the events before it (dsr.catalog declared again
#              with 8 MiB segments; after `catalog snapshot`, a max-length-bytes
#              policy of the snapshot's size and some that cuts the rest)
set -euo pipefail
cd "$(dirname "$0")/.."

me=bench/deep.sh
depths="10000 100000 1000000"
port=24672
build=1
get_max=100000
window=1000
only=
while [ $# -gt 0 ]; do
    case "$1" in
    --depths) depths=${2:?--depths needs a value}; shift 2 ;;
    --port) port=${2:?--port needs a value}; shift 2 ;;
    --get-max) get_max=${2:?--get-max needs a value}; shift 2 ;;
    --no-build) build=0; shift ;;
    --only) only=${2:?--only needs a value}; shift 2
        case "$only" in groups | moves | catalog | reconcile | snapshot) ;; *) echo "deep.sh: --only takes groups, moves, catalog, reconcile or snapshot" >&2; exit 2 ;; esac ;;
    -h|--help) sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p;}' "$0"; exit 0 ;;
    *) echo "deep.sh: unknown argument '$1' (see bench/deep.sh --help)" >&2; exit 2 ;;
    esac
done

bdir=${DLQB_BENCH_DIR:-build-bench}
node_dir=$bdir/broker-deep
node_dirs=("$node_dir")
work=$bdir/bench-deep
# The default settings keep a look's catalog checkpoint in the state
# directory: this run's own, not the user's.
export XDG_STATE_HOME=$work/state
bin=$bdir/dlq-bridge
tool=$bdir/bench/dlqb-bench
url="amqp://guest:guest@127.0.0.1:$port/%2f"
mgmt="http://127.0.0.1:$((port + 1))"
# shellcheck source=bench/lib.sh
. bench/lib.sh

build_bench
rm -rf "$work"
mkdir -p "$work"
start_private_node dlqb-deep
# The node's own process (beam.smp): rabbit.pid; server.pid is its wrapper.
broker_pid=$(cat "$node_dir/rabbit.pid")
(umask 077 && openssl genpkey -algorithm ed25519 -out "$work/audit.key" 2>/dev/null)
openssl pkey -in "$work/audit.key" -pubout -out "$work/audit.pub.pem"
audit_env=(DLQ_BRIDGE_AUDIT_LOG="$work/audit.log" DLQ_BRIDGE_AUDIT_KEY_FILE="$work/audit.key"
    DLQ_BRIDGE_AUDIT_PUBLIC_KEYS="$work/audit.pub.pem")

mib() { awk -v k="$1" 'BEGIN { if (k == "" || k == 0) print "n/a"; else printf "%.0f", k / 1024 }'; }
rss_kib() { sed -n 's/^VmRSS:[[:space:]]*\([0-9]*\) kB/\1/p' "/proc/$1/status" 2>/dev/null || echo 0; }

# The broker's peak RSS while a phase runs: a sampler writes the largest
# VmRSS it saw (every 200 ms) to a file until it is stopped.
sampler_start() {
    (peak=0; while :; do r=$(rss_kib "$broker_pid"); [ "${r:-0}" -gt "$peak" ] && peak=$r && echo "$peak" >"$work/broker.peak"; sleep 0.2; done) &
    sampler=$!
    echo 0 >"$work/broker.peak"
}
sampler_stop() { kill "$sampler" 2>/dev/null; wait "$sampler" 2>/dev/null || true; cat "$work/broker.peak"; }

load() { # N [extra dlqb-bench publish flags]
    local n=$1
    shift
    "$tool" publish --url "$url" --routing-key dsr.dlq.manual --kind dlq --count "$n" \
        --window "$window" --source-every 1000 --dlq-age-ms 7200000 --id-prefix deep "$@" | field rate
}

rows=()
row() { rows+=("| $1 | $2 | $3 | $4 | $5 | $6 |"); }

# Runs a command under dlqb-bench exec (its output to a file), with the
# broker sampled; adds a row: depth, what, seconds, items/s, command MiB, broker MiB.
timed() { # depth label n_for_rate command...
    local depth=$1 label=$2 n=$3
    shift 3
    log "$label at $depth: broker RSS before $(mib "$(rss_kib "$broker_pid")") MiB"
    sampler_start
    "$tool" exec -- "$@" >"$work/out" 2>"$work/err" || true
    local b
    b=$(sampler_stop)
    local line secs kib status
    line=$(grep '^EXEC ' "$work/out" | tail -n 1)
    secs=$(echo "$line" | field seconds)
    kib=$(echo "$line" | field maxrss_kib)
    status=$(echo "$line" | field status)
    if [ "$status" != 0 ]; then
        log "$label at $depth exited $status: $(tail -n 2 "$work/err" | tr '\n' ' ')"
        label="$label (exit $status)"
    fi
    row "$depth" "$label" "$secs" "$(rate "$n" 0 "$secs")" "$(mib "$kib")" "$(mib "$b")"
}

# The console's failure groups page at depth N (the items loaded): signed in
# as guest, one GET / timed; the command MiB column is the console's peak
# RSS (VmHWM) after the page, not curl's.
console_row() { # N [REQUESTS: time the last of this many, default 1]
    local n=$1 reqs=${2:-1} cport=$((port + 9)) jar="$work/console.jar" cpid i
    DLQ_BRIDGE_URL="$url" DLQ_BRIDGE_CONSOLE_ADDR="127.0.0.1:$cport" "$bin" console \
        >"$work/console.log" 2>&1 &
    cpid=$!
    for i in $(seq 100); do
        curl -s -o /dev/null "http://127.0.0.1:$cport/login" && break
        sleep 0.1
    done
    curl -s -c "$jar" -o /dev/null -d 'user=guest&password=guest' "http://127.0.0.1:$cport/login"
    for i in $(seq $((reqs - 1))); do curl -sf -b "$jar" -o /dev/null "http://127.0.0.1:$cport/" || true; done
    sampler_start
    local t0 t1 b hwm
    t0=$(date +%s.%N)
    curl -sf -b "$jar" -o "$work/page" "http://127.0.0.1:$cport/" ||
        log "console groups page at $n failed: $(tail -n 2 "$work/console.log" | tr '\n' ' ')"
    t1=$(date +%s.%N)
    b=$(sampler_stop)
    hwm=$(sed -n 's/^VmHWM:[[:space:]]*\([0-9]*\) kB/\1/p' "/proc/$cpid/status")
    kill "$cpid"
    wait "$cpid" 2>/dev/null || true
    grep -q "$n items in dsr.dlq.manual" "$work/page" || log "console groups page at $n: not $n items"
    local secs
    secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }')
    local what="console: failure groups page (50 causes)"
    [ "$reqs" -gt 1 ] && what="catalog: console failure groups page (warm, request $reqs)"
    row "$n" "$what" "$secs" "$(rate "$n" "$t0" "$t1")" \
        "$(mib "$hwm")" "$(mib "$b")"
}

# The group overview at depth N: N items of 50 causes, then N items whose
# errors are all distinct.
groups_rows() { # N
    local n=$1
    purge_all
    load "$n" --causes 50 >/dev/null
    timed "$n" "stats --by group (50 causes)" "$n" "$bin" stats --by group --json
    timed "$n" "stats (by dlq_reason, the same items: the cost of grouping)" "$n" "$bin" stats --json
    console_row "$n"
    purge_all
    load "$n" --distinct-errors >/dev/null
    timed "$n" "stats --by group (every error distinct: 1000 groups + other)" "$n" \
        "$bin" stats --by group --json
    purge_all
}

# The filtered move against unfiltered passes of the same depth (issue 29:
# a filtered move must stay linear): each on a fresh load of N items.
moves_rows() { # N
    local n=$1
    audit_env=(DLQ_BRIDGE_AUDIT_LOG="$work/audit-moves-$n.log" DLQ_BRIDGE_AUDIT_KEY_FILE="$work/audit.key"
        DLQ_BRIDGE_AUDIT_PUBLIC_KEYS="$work/audit.pub.pem")
    purge_all
    load "$n" >/dev/null
    log "depth $n: broker at $(mib "$(rss_kib "$broker_pid")") MiB before the moves"
    timed "$n" "inspect --source-system billing (unfiltered pass: holds all)" "$n" \
        "$bin" inspect --source-system billing --json
    timed "$n" "replay --source-system billing ($((n / 1000)) moved)" "$n" env "${audit_env[@]}" \
        "$bin" replay --source-system billing --json
    local left
    left=$("$tool" depth --url "$url" --queue dsr.dlq.manual)
    [ "$left" = $((n - n / 1000)) ] || log "replay --source-system billing at $n left $left, not $((n - n / 1000))"
    purge_all
    load "$n" >/dev/null
    log "depth $n: broker at $(mib "$(rss_kib "$broker_pid")") MiB before replay --all"
    timed "$n" "replay --all" "$n" env "${audit_env[@]}" "$bin" replay --all
    purge_all
}

# The catalog's rows at depth N (docs/performance.md, "The catalog").
catalog_rows() { # N
    local n=$1
    purge_all
    rm -f "$work/catalog.ckpt"
    load "$n" --causes 50 >/dev/null
    timed "$n" "catalog verify (first build: a pass and $n events)" "$n" "$bin" catalog verify --json
    export DLQ_BRIDGE_CATALOG_CHECKPOINT="$work/catalog.ckpt"
    timed "$n" "catalog: first look (inspect --source-system billing, whole stream folded)" "$n" \
        "$bin" inspect --source-system billing --json
    grep -q '"source":"catalog"' "$work/out" || log "first look at $n did not answer from the catalog"
    timed "$n" "catalog: inspect --source-system billing (warm)" "$n" "$bin" inspect --source-system billing --json
    grep -q '"source":"catalog"' "$work/out" || log "warm inspect at $n did not answer from the catalog"
    timed "$n" "catalog: stats --by group (warm)" "$n" "$bin" stats --by group --json
    grep -q '"source":"catalog"' "$work/out" || log "warm stats at $n did not answer from the catalog"
    console_row "$n" 2
    looks_at_once_row "$n"
    # The pass a look replaced, in the same run (what a first look is held to).
    timed "$n" "inspect --source-system billing --scan (the pass)" "$n" \
        "$bin" inspect --source-system billing --scan --json
    export DLQ_BRIDGE_CATALOG_CHECKPOINT=none
    purge_all
}

# A policy on dsr.catalog (its definition's JSON members).
catalog_policy() { # DEFINITION
    curl -s -o /dev/null -w '%{http_code}' -u guest:guest -X PUT -H 'content-type: application/json' \
        -d "{\"pattern\": \"^dsr\\\\.catalog\$\", \"apply-to\": \"queues\", \"definition\": {$1}}" \
        "$mgmt/api/policies/%2f/catalog-retention" | grep -q '^20[14]$' || fail "cannot set the catalog's policy"
}

# The snapshot rows at depth N (docs/performance.md, "The catalog").
snapshot_rows() { # N
    local n=$1 seg=$((8 << 20)) i
    purge_all
    # A fresh reader each time: no checkpoint (the default keeps one).
    export DLQ_BRIDGE_CATALOG_CHECKPOINT=none
    curl -s -o /dev/null -u guest:guest -X DELETE "$mgmt/api/queues/%2f/dsr.catalog"
    catalog_policy "\"stream-max-segment-size-bytes\": $seg"
    "$bin" declare >/dev/null || fail "dlq-bridge declare failed"
    load "$n" --causes 50 >/dev/null
    timed "$n" "catalog verify (first build: a pass and $n events)" "$n" "$bin" catalog verify --json
    timed "$n" "snapshot: fresh reader, stream not cut (from event 0)" "$n" \
        "$bin" inspect --source-system billing --json
    grep -q '"source":"catalog"' "$work/out" || log "fresh look at $n did not answer from the catalog"
    timed "$n" "catalog snapshot ($n items)" "$n" "$bin" catalog snapshot --json
    # Keep about the snapshot and two segments: the events before it go at
    # the next segment rolled (markers of looks roll one soon enough).
    catalog_policy "\"stream-max-segment-size-bytes\": $seg, \"max-length-bytes\": $(( n * 260 + 2 * seg ))"
    for i in $(seq 200); do
        "$tool" publish --url "$url" --routing-key dsr.catalog --count 2000 --size 4096 --kind raw >/dev/null
        grep -q '"from_snapshot":true' <("$bin" inspect --limit 1 --json 2>/dev/null) && break
    done
    timed "$n" "snapshot: fresh reader, stream cut (from the snapshot)" "$n" \
        "$bin" inspect --source-system billing --json
    grep -q '"from_snapshot":true' "$work/out" || log "look at $n after the cut did not fold from the snapshot"
    grep -q '"source":"catalog"' "$work/out" || log "look at $n after the cut did not answer from the catalog"
    curl -s -o /dev/null -u guest:guest -X DELETE "$mgmt/api/policies/%2f/catalog-retention"
    purge_all
}

# Four looks started at once (three inspects, one stats --by group), warm:
# the seconds until the last ends; each must answer from the catalog, and
# each inspect must count all N items (issue 29: two looks at once used to
# split the queue between them).
looks_at_once_row() { # N
    local n=$1 i pids=() t0 t1 b bad=0 secs
    sampler_start
    t0=$(date +%s.%N)
    for i in 1 2 3; do
        "$bin" inspect --source-system billing --json >"$work/look$i" 2>"$work/look$i.err" &
        pids+=($!)
    done
    "$bin" stats --by group --json >"$work/look4" 2>"$work/look4.err" &
    pids+=($!)
    for i in "${pids[@]}"; do wait "$i" || bad=$((bad + 1)); done
    t1=$(date +%s.%N)
    b=$(sampler_stop)
    for i in 1 2 3 4; do
        grep -q '"source":"catalog"' "$work/look$i" || { log "look $i of 4 at $n: not from the catalog"; bad=$((bad + 1)); }
    done
    for i in 1 2 3; do
        grep -q "\"total\":$n[,}]" "$work/look$i" || { log "inspect $i of 4 at $n: not $n items"; bad=$((bad + 1)); }
    done
    secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }')
    row "$n" "catalog: four looks at once (3 inspect, 1 stats --by group), warm: until the last ends$([ "$bad" = 0 ] || echo " ($bad failed)")" \
        "$secs" "$(rate "$n" 0 "$secs")" "-" "$(mib "$b")"
}

for n in $depths; do
    if [ "$only" = reconcile ]; then
        purge_all
        audit_env=(DLQ_BRIDGE_AUDIT_LOG="$work/audit-$n.log" DLQ_BRIDGE_AUDIT_KEY_FILE="$work/audit.key"
            DLQ_BRIDGE_AUDIT_PUBLIC_KEYS="$work/audit.pub.pem")
        load "$n" >/dev/null
        timed "$n" "resolve (the last item)" "$n" env "${audit_env[@]}" "$bin" resolve \
            --message-id "deep-$((n - 1))" --note bench --json
        # The broker puts the pass's held items back for a while after it
        # ends (4.0.5: minutes at a million): reconcile reads them all.
        for _ in $(seq 600); do
            ready=$(curl -s -u guest:guest "$mgmt/api/queues/%2f/dsr.dlq.manual" |
                sed -n 's/.*"messages_ready":\([0-9]*\).*/\1/p')
            [ "${ready:-0}" -ge $((n - 1)) ] && break
            sleep 1
        done
        timed "$n" "audit reconcile" "$n" env "${audit_env[@]}" "$bin" audit reconcile --json
        grep -q "\"items\":$((n - 1))," "$work/out" || log "audit reconcile at $n did not read $((n - 1)) items"
        purge_all
        continue
    fi
    if [ "$only" = catalog ]; then
        catalog_rows "$n"
        continue
    fi
    if [ "$only" = snapshot ]; then
        snapshot_rows "$n"
        continue
    fi
    if [ "$only" = groups ]; then
        groups_rows "$n"
        continue
    fi
    if [ "$only" = moves ]; then
        moves_rows "$n"
        continue
    fi
    purge_all
    # A trail of its own per depth: the purges between depths remove items
    # behind dlq-bridge's back, which reconcile would rightly call MISSING.
    audit_env=(DLQ_BRIDGE_AUDIT_LOG="$work/audit-$n.log" DLQ_BRIDGE_AUDIT_KEY_FILE="$work/audit.key"
        DLQ_BRIDGE_AUDIT_PUBLIC_KEYS="$work/audit.pub.pem")
    log "depth $n: loading"
    lrate=$(load "$n")
    log "depth $n: loaded at $lrate msg/s"
    timed "$n" "inspect --source-system billing" "$n" "$bin" inspect --source-system billing --json
    timed "$n" "stats" "$n" "$bin" stats --json
    timed "$n" "resolve (the last item)" "$n" env "${audit_env[@]}" "$bin" resolve \
        --message-id "deep-$((n - 1))" --note bench --json
    timed "$n" "audit reconcile" "$n" env "${audit_env[@]}" "$bin" audit reconcile --json
    timed "$n" "replay --source-system billing" "$n" env "${audit_env[@]}" "$bin" replay \
        --source-system billing --json

    # The SLA escalator: one overdue item behind all the others.
    "$tool" publish --url "$url" --routing-key dsr.dlq.manual --kind dlq --count 1 --window 1 \
        --dlq-age-ms 172800000 --id-prefix overdue >/dev/null
    sampler_start
    t0=$(now)
    start_daemon "$work/daemon.log" "${audit_env[@]}" DLQ_BRIDGE_DLQ_SLA=1d
    dpid=$last_pid
    t1=$(wait_for --queue compliance_review --at-least 1)
    drss=$(hwm_kib "$dpid")
    stop_daemon "$dpid"
    b=$(sampler_stop)
    d=$(depth_now=$("$tool" depth --url "$url" --queue dsr.dlq.manual); echo "$depth_now")
    secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }')
    row "$n" "SLA escalator: first pass reaches the overdue tail" "$secs" "$(rate "$n" "$t0" "$t1")" \
        "$(mib "$drss")" "$(mib "$b")"
    log "depth $n: after the escalator the DLQ holds $d"

    if [ "$n" -le "$get_max" ]; then
        sampler_start
        t0=$(now)
        code=$(curl -s -o "$work/get.json" -w '%{http_code}' -u guest:guest -X POST \
            -H 'content-type: application/json' "$mgmt/api/queues/%2F/dsr.dlq.manual/get" \
            -d "{\"count\":$n,\"ackmode\":\"ack_requeue_true\",\"encoding\":\"auto\",\"truncate\":50}")
        t1=$(now)
        b=$(sampler_stop)
        got=$(jq length "$work/get.json" 2>/dev/null || echo 0)
        rm -f "$work/get.json"
        row "$n" "anchor: management UI Get messages ($got got, HTTP $code)" \
            "$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }')" "$(rate "$got" "$t0" "$t1")" "-" "$(mib "$b")"
    else
        row "$n" "anchor: management UI Get messages" "not run" "-" "-" "-"
    fi

    purge_all
    load "$n" >/dev/null
    sampler_start
    t0=$(now)
    start_shovel
    t1=$(wait_for --queue dsr.work --at-least "$n" --empty dsr.dlq.manual)
    b=$(sampler_stop)
    delete_shovel
    row "$n" "anchor: management UI Move messages (shovel), all" \
        "$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }')" "$(rate "$n" "$t0" "$t1")" "-" "$(mib "$b")"
    purge_all
    load "$n" >/dev/null
    # Text output: --json lists every moved item, which is memory by design.
    timed "$n" "replay --all" "$n" env "${audit_env[@]}" "$bin" replay --all
    purge_all
    load "$n" >/dev/null
    sampler_start
    line=$("$tool" drain --url "$url" --queue dsr.dlq.manual --count "$n" --window 5000)
    b=$(sampler_stop)
    row "$n" "anchor: one consumer reads the queue (dlqb-bench drain)" "$(echo "$line" | field seconds)" \
        "$(echo "$line" | field rate)" "-" "$(mib "$b")"
    row "$n" "(load: publish with $window confirms in flight)" "-" "$lrate" "-" "-"
    groups_rows "$n"
done

echo
# The node's own version (DLQB_BROKER_VERSION=4.0 runs a chrooted one, not this machine's package).
rmq_version=$(curl -s -u guest:guest "$mgmt/api/overview" | sed -n 's/.*"rabbitmq_version":"\([^"]*\)".*/\1/p')
echo "bench/deep.sh --depths \"$depths\" on $(nproc) cores, RabbitMQ ${rmq_version:-$(dpkg-query -W -f='${Version}' rabbitmq-server 2>/dev/null)}"
echo
echo "| depth | what | seconds | items/s | command peak RSS MiB | broker peak RSS MiB |"
echo "| ---: | --- | ---: | ---: | ---: | ---: |"
printf '%s\n' "${rows[@]}"
