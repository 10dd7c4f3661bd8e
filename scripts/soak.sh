#!/usr/bin/env bash
# Soak test (not in CI): mixed traffic for MINUTES (default 60) through two
# bridges and a TCP proxy, with faults all along -- one bridge SIGKILLed and
# restarted every minute, the proxy cut every 90 s (every other cut while it
# swallows the broker's confirms) -- then the conservation check. Prints the
# long-lived bridge's VmRSS every 10 s and, at the end, lost and duplicated
# counts. Uses build-rel/ and its own broker node (AMQP port PORT, default
# 55677, and the four above it).
#
# usage: scripts/soak.sh [--minutes N] [--rate TASKS_PER_S] [--port PORT]
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

minutes=60 rate=25 port=55677
while [ $# -gt 0 ]; do
    case "$1" in
    --minutes) minutes=${2:?}; shift 2 ;;
    --rate) rate=${2:?}; shift 2 ;;
    --port) port=${2:?}; shift 2 ;;
    -h|--help) sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "soak.sh: unknown argument '$1'" >&2; exit 2 ;;
    esac
done

build=$root/build-rel
node=$build/soak-broker
logs=$build/soak-logs
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" -j2 --target dlq-bridge test_broker_soak >/dev/null
mkdir -p "$logs"
trap 'scripts/broker-node.sh stop "$node" >/dev/null 2>&1 || true' EXIT
scripts/broker-node.sh start "$node" "$port" "dlqb-soak-$port"

started=$SECONDS
DLQB_TEST_NODE_DIR=$node DLQB_BRIDGE_BIN=$build/dlq-bridge DLQB_SOURCE_DIR=$root \
DLQB_TEST_LOG_DIR=$logs DLQB_SOAK_MINUTES=$minutes DLQB_SOAK_RATE=$rate \
    "$build/tests/broker/test_broker_soak" 2>&1 | grep -v '^20[0-9][0-9]-' | tee "$logs/soak-$(date +%Y%m%d-%H%M%S).txt"
status=${PIPESTATUS[0]}
echo "soak.sh: finished in $((SECONDS - started)) s with status $status (bridge logs: $logs/)"
exit "$status"
