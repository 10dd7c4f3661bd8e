#!/usr/bin/env bash
# The README's "run the bridge" command: install what is missing (as root),
# build, start a local RabbitMQ when nothing answers at DLQ_BRIDGE_URL,
# declare the topology and run `dlq-bridge run` in the foreground.
# Extra arguments go to `dlq-bridge run`.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j2 >/dev/null

url=${DLQ_BRIDGE_URL:-amqp://guest:guest@localhost:5672/%2f}
# host and port from the URL (userinfo stripped; port defaults per scheme)
hostport=${url#*://}; hostport=${hostport##*@}; hostport=${hostport%%/*}
host=${hostport%%:*}
port=5672; [ "${url%%://*}" = amqps ] && port=5671
[ "$hostport" != "$host" ] && port=${hostport##*:}

if ! (exec 3<>"/dev/tcp/$host/$port") 2>/dev/null; then
    case "$host" in
    localhost|127.0.0.1)
        node_dir=${DLQB_LOCAL_BROKER_DIR:-$PWD/.local-broker}
        echo "run-local: nothing answers at $host:$port; starting a local RabbitMQ in $node_dir" >&2
        scripts/broker-node.sh start "$node_dir" "$port" dlqb-local
        echo "run-local: management UI at http://localhost:$( . "$node_dir/node.env"; echo "$MGMT_PORT")/ (guest/guest, loopback only)" >&2
        ;;
    *)
        echo "run-local: nothing answers at $host:$port and it is not this machine; start the broker first" >&2
        exit 1
        ;;
    esac
fi

build/dlq-bridge declare >/dev/null
exec build/dlq-bridge run "$@"
