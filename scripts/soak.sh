#!/usr/bin/env bash
# Soak test (not in CI): mixed traffic for MINUTES (default 60), in rounds of
# N tasks (default 20000; each round publishes, works through, drains and
# counts, with two bridges of its own), through a TCP proxy, with faults all
# along -- the second bridge SIGKILLed and restarted every minute, the proxy
# cut every 90 s (every other cut while it swallows the broker's confirms).
# Both bridges write one audit trail, which must verify at the end. Prints
# the first bridge's VmRSS every 10 s and, per round and at the end, lost
# and duplicated counts. Uses build-rel/ and its own broker node (AMQP port
# PORT, default 55677, and the four above it).
#
# usage: scripts/soak.sh [--minutes N] [--round-tasks N] [--port PORT]
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

minutes=60 round=20000 port=55677
while [ $# -gt 0 ]; do
    case "$1" in
    --minutes) minutes=${2:?}; shift 2 ;;
    --round-tasks) round=${2:?}; shift 2 ;;
    --port) port=${2:?}; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p;}' "$0"; exit 0 ;;
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
DLQB_TEST_LOG_DIR=$logs DLQB_SOAK_MINUTES=$minutes DLQB_SOAK_ROUND_TASKS=$round \
    "$build/tests/broker/test_broker_soak" 2>&1 | grep --line-buffered -v '^20[0-9][0-9]-' | tee "$logs/soak-$(date +%Y%m%d-%H%M%S).txt"
status=${PIPESTATUS[0]}
echo "soak.sh: finished in $((SECONDS - started)) s with status $status (bridge logs: $logs/)"
exit "$status"
