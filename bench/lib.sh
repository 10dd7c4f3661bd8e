# Helpers shared by bench/run.sh (one node), bench/cluster.sh (three
# nodes) and bench/broker-profile.sh. Sourced, not run; bash with `set -euo pipefail`, from the source
# root. The sourcing script sets, before it calls them:
#   me         its name, for error messages (bench/run.sh)
#   build      1 to build build-bench/, 0 for --no-build
#   bdir       build-bench/; bin: the dlq-bridge measured; tool: dlqb-bench
#   url        the AMQP URL dlqb-bench talks to (preload, depth polls, purges)
#   mgmt       the management HTTP base URL (the shovel helpers)
#   window     publishes in flight when preloading
#   work       a directory for the daemons' logs
#   node_dirs  an array: the directories of the private nodes it starts
#   node_dir, port  for start_private_node: the one node's directory and port
# and exports DLQ_BRIDGE_URL (where the daemons connect; see daemon_url).
# shellcheck shell=bash disable=SC2154

log() { printf '[bench %s] %s\n' "$(date +%T)" "$*" >&2; }
fail() { printf '%s: %s\n' "$me" "$*" >&2; exit 1; }

# ---- build, nodes ----------------------------------------------------------

build_bench() {
    if [ "$build" = 1 ]; then
        log "building $bdir"
        cmake -S . -B "$bdir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDLQB_BENCH=ON \
            -DDLQB_BROKER_TESTS=OFF >/dev/null || fail "cmake configure failed"
        cmake --build "$bdir" -j2 --target dlq-bridge dlqb-bench >/dev/null || fail "build failed"
    fi
    if ! [ -x "$bin" ] || ! [ -x "$tool" ]; then
        fail "no binaries in $bdir (run without --no-build)"
    fi
}

# Our nodes only: a node left by an interrupted run of the script is
# stopped through its own pid file; anything else on the ports is someone
# else's, and we refuse rather than measure (or disturb) it.
stop_nodes() {
    local d
    for d in "${node_dirs[@]}"; do
        scripts/broker-node.sh stop "$d" >/dev/null 2>&1 || true
    done
}
require_free_ports() {
    local p
    for p in "$@"; do
        if ss -Htln "sport = :$p" | grep -q .; then
            fail "port $p is in use by another process; choose a free range with --port"
        fi
    done
}
# Starts the one private node of bench/run.sh or bench/broker-profile.sh
# (node_dir, AMQP port $port and the four above it, named after $1) and
# declares the topology on it, exporting DLQ_BRIDGE_URL for the daemons.
# One topology for every phase: a long retry delay, so that routed tasks
# stay in dsr.retry.10m and can be counted there. Installs the EXIT trap.
start_private_node() {
    stop_nodes
    require_free_ports "$port" $((port + 1)) $((port + 2)) $((port + 3)) $((port + 4))
    rm -rf "$node_dir"
    trap cleanup EXIT
    log "starting a private broker on port $port ($node_dir)"
    scripts/broker-node.sh start "$node_dir" "$port" "$1-$port" >/dev/null ||
        fail "broker did not start; see $node_dir/log/"
    export DLQ_BRIDGE_URL=$url DLQ_BRIDGE_RETRY_DELAYS=10m DLQ_BRIDGE_METRICS_ADDR=off
    unset DLQ_BRIDGE_AUDIT_LOG DLQ_BRIDGE_AUDIT_KEY_FILE DLQ_BRIDGE_PASSWORD_FILE
    "$bin" declare >/dev/null || fail "dlq-bridge declare failed"
}
# The EXIT trap: stops the daemons still running and our nodes.
cleanup() {
    local pids
    pids=$(jobs -p)
    # shellcheck disable=SC2086 # one pid a word
    [ -n "$pids" ] && kill -TERM $pids 2>/dev/null
    stop_nodes
}

# ---- numbers -----------------------------------------------------------------

now() { date +%s.%N; }
# msg/s for count messages between two epoch times.
rate() { awk -v n="$1" -v a="$2" -v b="$3" 'BEGIN { printf "%.0f", n / (b - a) }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0 && a > 0) printf "%.2f", a / b; else print "n/a" }'; }
median() { tr ' ' '\n' | awk 'NF' | sort -n | awk '{ v[NR] = $1 } END { if (NR == 0) print "n/a"; else if (NR % 2) print v[(NR + 1) / 2]; else printf "%.0f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
field() { sed -n "s/.*$1=\([^ ]*\).*/\1/p"; }

# Ratios pair the measurements of one round (taken minutes apart at most,
# under the same background load) and report the median of those.
paired() {
    local -a a b
    read -r -a a <<<"$1"
    read -r -a b <<<"$2"
    local out="" i
    for i in "${!a[@]}"; do
        [ -n "${b[$i]:-}" ] && out="$out $(ratio "${a[$i]}" "${b[$i]}")"
    done
    echo "$out" | tr ' ' '\n' | awk 'NF && $1 != "n/a"' | sort -n |
        awk '{ v[NR] = $1 } END { if (NR == 0) print "n/a"; else if (NR % 2) print v[(NR + 1) / 2]; else printf "%.2f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

# ---- queues ------------------------------------------------------------------

purge_all() {
    "$tool" purge --url "$url" --queue dsr.work --queue dsr.failed --queue dsr.retry.10m \
        --queue dsr.dlq.manual --queue compliance_review
}
preload_dlq() { "$tool" publish --url "$url" --routing-key dsr.dlq.manual --kind dlq --count "$1" --window "$window" >/dev/null; }
preload_failed() { "$tool" publish --url "$url" --exchange dsr.dlx --routing-key "" --kind failed --count "$1" --window "$window" >/dev/null; }
# The shovel the management UI's "Move messages" creates on dsr.dlq.manual
# (direct amqp:/// URIs, prefetch 1000, ack-mode on-confirm, deleted after
# the queue's length), moving to dsr.work. Needs mgmt (the HTTP base URL).
shovel_body='{"value":{"src-protocol":"amqp091","src-uri":"amqp:///%2F","src-queue":"dsr.dlq.manual","src-prefetch-count":1000,"src-delete-after":"queue-length","dest-protocol":"amqp091","dest-uri":"amqp:///%2F","dest-queue":"dsr.work","dest-add-forward-headers":false,"ack-mode":"on-confirm"}}'
start_shovel() {
    local code
    code=$(curl -s -o /dev/null -w '%{http_code}' -u guest:guest -X PUT -H 'content-type: application/json' \
        "$mgmt/api/parameters/shovel/%2F/bench-shovel" -d "$shovel_body")
    [ "$code" = 201 ] || [ "$code" = 204 ] || fail "cannot create the shovel (HTTP $code)"
}
delete_shovel() { curl -s -o /dev/null -u guest:guest -X DELETE "$mgmt/api/parameters/shovel/%2F/bench-shovel" || true; }
wait_for() { "$tool" wait --url "$url" --timeout-ms 900000 "$@" | field epoch; }

# ---- daemons -----------------------------------------------------------------

# The URL daemon number $1 connects to: all to DLQ_BRIDGE_URL here;
# bench/cluster.sh redefines it to spread the daemons over its nodes.
daemon_url() { echo "$DLQ_BRIDGE_URL"; }

# Starts a daemon (extra env as NAME=VALUE arguments) as a child of this
# shell, so that stop_daemon can wait for it; its pid goes to last_pid.
start_daemon() {
    local logf=$1
    shift
    env "$@" "$bin" run --no-declare >"$logf" 2>&1 &
    last_pid=$!
}
# SIGTERMs a daemon and waits until it has finished its in-flight work.
stop_daemon() {
    kill -TERM "$1" 2>/dev/null || true
    wait "$1" 2>/dev/null || true
}
hwm_kib() { sed -n 's/^VmHWM:[[:space:]]*\([0-9]*\) kB/\1/p' "/proc/$1/status" 2>/dev/null; }

# Routes n preloaded failures (dsr.failed -> the retry queue) with `daemons`
# daemons at once, each started with the extra env given after the tag; sets
# d_rate (msg/s from the first start until all are routed), d_rss (the
# largest VmHWM among them, read just before they are stopped) and d_stop
# (seconds until all exited after SIGTERM). Purges the queues afterwards.
# shellcheck disable=SC2034 # d_* are read by the caller
route() {
    local n=$1 daemons=$2 tag=$3
    shift 3
    local pids="" t0 t1 p i
    preload_failed "$n"
    t0=$(now)
    for i in $(seq 1 "$daemons"); do
        start_daemon "$work/daemon-$tag-$i.log" DLQ_BRIDGE_INSTANCE="bench-$tag-$i" \
            DLQ_BRIDGE_URL="$(daemon_url "$i")" "$@"
        pids="$pids $last_pid"
    done
    t1=$(wait_for --queue dsr.retry.10m --queue dsr.dlq.manual --at-least "$n" --empty dsr.failed)
    d_rate=$(rate "$n" "$t0" "$t1")
    d_rss=0
    for p in $pids; do
        local h
        h=$(hwm_kib "$p")
        [ -n "$h" ] && [ "$h" -gt "$d_rss" ] && d_rss=$h
    done
    local s0
    s0=$(now)
    for p in $pids; do stop_daemon "$p"; done
    d_stop=$(awk -v a="$s0" -v b="$(now)" 'BEGIN { printf "%.2f", b - a }')
    if grep -q drain_timeout "$work"/daemon-"$tag"-*.log; then
        log "warning: a daemon hit its drain timeout on SIGTERM (see $work/daemon-$tag-*.log)"
    fi
    purge_all
}
