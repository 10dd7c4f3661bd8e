#!/usr/bin/env bash
# The broker tests' node fixture: scripts/broker-node.sh with retries.
#
# A start can fail when a port the node needs is held for a moment by
# someone else, typically RabbitMQ's CLI tools talking to another node (they
# bind that node's distribution port + 10000 .. + 10010). A failed start is
# stopped and tried again, up to three times.
#
# usage: node-fixture.sh start|restart DIR PORT
#        node-fixture.sh stop DIR
set -u

cmd=${1:-} dir=${2:-} port=${3:-}
node_script="$(cd "$(dirname "$0")/../.." && pwd)/scripts/broker-node.sh"

start() {
    for attempt in 1 2 3; do
        if bash "$node_script" start "$dir" "$port"; then
            return 0
        fi
        echo "node-fixture: start $attempt of 3 on port $port failed" >&2
        bash "$node_script" stop "$dir" >/dev/null 2>&1 || true
        sleep 2 # let a transient holder of the port go away
    done
    echo "node-fixture: cannot start a node in $dir on ports $port..$((port + 4))" >&2
    return 1
}

case "$cmd" in
start) [ -n "$port" ] || { echo "usage: $0 start DIR PORT" >&2; exit 2; }; start ;;
restart)
    [ -n "$port" ] || { echo "usage: $0 restart DIR PORT" >&2; exit 2; }
    bash "$node_script" stop "$dir" && start
    ;;
stop) exec bash "$node_script" stop "$dir" ;;
*) echo "usage: $0 start|restart|stop DIR [PORT]" >&2; exit 2 ;;
esac
