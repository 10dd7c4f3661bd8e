#!/usr/bin/env bash
# Two daemons against one on a three-node cluster, the one the reliability
# suite builds (tests/broker/test_cluster.c): builds build-bench/ like
# bench/run.sh, starts three private RabbitMQ nodes with
# scripts/broker-node.sh (nodes 2 and 3 join node 1), each with the suite's
# advanced.config (dead_letter_worker_publisher_confirm_timeout 5 s),
# declares the topology through node 1 (so node 1 leads every quorum queue,
# and each has a member on all three nodes), then, R rounds in alternation,
# routes N preloaded failures from dsr.failed to the retry queue with
#   - one daemon, connected to node 1;
#   - two daemons at once, daemon 1 connected to node 1, daemon 2 to node 2.
# It prints the msg/s medians and the two/one ratio. dlqb-bench (preload,
# depth polls, purges) talks to node 3, as the suite's harness does. It is
# not a test: nothing here passes or fails the build. bench/run.sh measures
# the same on one node (its phase f).
#
# usage: bench/cluster.sh [--messages N] [--rounds R] [--window W] [--port P]
#                         [--no-build] [--bridge PATH]
#   --messages N  failures per measurement (default 20000)
#   --rounds R    repeat both measurements R times, report the median
#                 (default 3)
#   --window W    publishes in flight when preloading (default 512)
#   --port P      AMQP port of node 1; node 2 listens on P+10, node 3 on
#                 P+20, and each also takes its port +1..+4 (default 27672)
#   --no-build    use the binaries already in build-bench/
#   --bridge PATH measure this dlq-bridge binary instead of build-bench's
# The nodes live in build-bench/cluster/n1..n3 and are stopped at the end,
# also when the run fails or is interrupted. Daemons run with metrics off
# and the audit trail off.
set -euo pipefail

cd "$(dirname "$0")/.."
root=$(pwd)
me=bench/cluster.sh

messages=20000 rounds=3 window=512 port=27672 build=1 bridge=""
while [ $# -gt 0 ]; do
    case "$1" in
    --messages) messages=${2:?--messages needs a value}; shift 2 ;;
    --rounds) rounds=${2:?--rounds needs a value}; shift 2 ;;
    --window) window=${2:?--window needs a value}; shift 2 ;;
    --port) port=${2:?--port needs a value}; shift 2 ;;
    --no-build) build=0; shift ;;
    --bridge) bridge=${2:?--bridge needs a value}; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p;}' "$0"; exit 0 ;;
    *) echo "cluster.sh: unknown argument '$1' (see bench/cluster.sh --help)" >&2; exit 2 ;;
    esac
done

# shellcheck source=bench/lib.sh
. "$root/bench/lib.sh"

bdir=$root/build-bench
work=$bdir/cluster-run
bin=${bridge:-$bdir/dlq-bridge}
tool=$bdir/bench/dlqb-bench
command -v jq >/dev/null || fail "jq is needed to check where the queues' members are"

# Node i (1..3): directory, AMQP port, name, URL.
node_dirs=() node_port=() node_name=() node_url=()
for i in 1 2 3; do
    node_dirs[i - 1]=$bdir/cluster/n$i
    node_port[i]=$((port + 10 * (i - 1)))
    node_name[i]=dlqb-bench-c$i-$port
    node_url[i]="amqp://guest:guest@127.0.0.1:${node_port[i]}/%2f"
done
url=${node_url[3]}
mgmt="http://127.0.0.1:$((node_port[3] + 1))"
# The suite's setting (see docs/reliability.md); it matters only when a
# node is lost, which this benchmark does not do, but keeps the nodes alike.
advanced='[{rabbit, [{dead_letter_worker_publisher_confirm_timeout, 5000}]}].'

# ---- build and cluster -----------------------------------------------------

build_bench
stop_nodes
for i in 1 2 3; do
    p=${node_port[i]}
    require_free_ports "$p" $((p + 1)) $((p + 2)) $((p + 3)) $((p + 4))
done
rm -rf "$bdir/cluster" "$work"
mkdir -p "$work"
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# As the suite does: fresh directories, node 1's Erlang cookie for all,
# nodes 2 and 3 joined to node 1.
for i in 1 2 3; do
    d=${node_dirs[i - 1]}
    mkdir -p "$d/home"
    echo "$advanced" >"$d/advanced.config"
    if [ "$i" -gt 1 ]; then
        cp "${node_dirs[0]}/home/.erlang.cookie" "$d/home/"
        chmod 400 "$d/home/.erlang.cookie"
    fi
    log "starting node $i (${node_name[i]}) on port ${node_port[i]} ($d)"
    scripts/broker-node.sh start "$d" "${node_port[i]}" "${node_name[i]}" >/dev/null ||
        fail "node $i did not start; see $d/log/"
    if [ "$i" -gt 1 ]; then
        scripts/broker-node.sh join "$d" "${node_name[1]}@localhost" >/dev/null ||
            fail "node $i did not join node 1; see $d/log/"
    fi
done

export DLQ_BRIDGE_URL=${node_url[1]} DLQ_BRIDGE_RETRY_DELAYS=10m DLQ_BRIDGE_METRICS_ADDR=off
unset DLQ_BRIDGE_AUDIT_LOG DLQ_BRIDGE_AUDIT_KEY_FILE DLQ_BRIDGE_PASSWORD_FILE
"$bin" declare >/dev/null || fail "dlq-bridge declare failed (through node 1)"

# The quorum queues routing uses must each have a member on every node; the
# management API may take a moment to show them all.
quorum_queues="dsr.failed dsr.retry.10m dsr.work"
replicas() {
    local q
    for q in $quorum_queues; do
        curl -fsS -u guest:guest "$mgmt/api/queues/%2F/$q" 2>/dev/null |
            jq -r '"\(.name) \(.type) \(.members // [] | length) \(.leader // "none" | sub("@.*"; ""))"' ||
            echo "$q missing"
    done
}
deadline=$((SECONDS + 30))
until qs=$(replicas) && ! awk '$2 != "quorum" || $3 != 3 { bad = 1 } END { exit !bad }' <<<"$qs"; do
    [ $SECONDS -lt $deadline ] || fail "not every quorum queue has a member on each node: $(tr '\n' ';' <<<"$qs")"
    sleep 1
done
placement=$(awk '{ printf "%s%s %s members, leader %s", sep, $1, $3, $4; sep = "; " }' <<<"$qs")
log "quorum queues: $placement"

# Daemon i connects to node i.
daemon_url() { echo "${node_url[$1]}"; }

# ---- routing: one daemon, two daemons ----------------------------------------

route_one="" route_two=""
for round in $(seq 1 "$rounds"); do
    log "round $round: route $messages failures with one daemon (node 1)"
    route "$messages" 1 one
    route_one="$route_one $d_rate"
    log "round $round: route $messages failures with two daemons (nodes 1 and 2)"
    route "$messages" 2 two
    route_two="$route_two $d_rate"
done

# ---- report -----------------------------------------------------------------

one=$(echo "$route_one" | median)
two=$(echo "$route_two" | median)
r_two=$(paired "$route_two" "$route_one")

printf '\n'
printf 'dlq-bridge cluster benchmark: %s failures of 256 B, persistent, %s round(s) (median), window %s\n' \
    "$messages" "$rounds" "$window"
printf 'dlq-bridge: %s\n' "$bin"
printf 'cluster: RabbitMQ %s, 3 nodes on 127.0.0.1:%s,%s,%s, %s CPUs; %s\n' \
    "$(curl -s -u guest:guest "$mgmt/api/overview" | sed -n 's/.*"rabbitmq_version":"\([^"]*\)".*/\1/p')" \
    "${node_port[1]}" "${node_port[2]}" "${node_port[3]}" "$(nproc)" "$(date -u +%Y-%m-%dT%H:%M:%SZ)"
printf 'quorum queues: %s\n' "$placement"
printf '\n| %-58s | %12s |\n' "measurement" "msg/s"
printf '| %-58s | %12s |\n' "$(printf -- '-%.0s' $(seq 58))" "-----------:"
printf '| %-58s | %12s |\n' "routing, 1 daemon (node 1)" "$one"
printf '| %-58s | %12s |\n' "routing, 2 daemons at once (nodes 1 and 2, combined)" "$two"
printf '\n| %-34s | %6s |\n' "ratio (median of per-round ratios)" "value"
printf '| %-34s | %6s |\n' "----------------------------------" "-----:"
printf '| %-34s | %6s |\n' "two daemons / one daemon" "$r_two"
printf '\nper round (msg/s): one%s | two%s\n' "$route_one" "$route_two"
printf 'logs: %s\n' "$work"
