#!/usr/bin/env bash
# The README's "run the bridge" command: install what is missing (as root),
# build, start a local RabbitMQ when nothing answers at DLQ_BRIDGE_URL,
# declare the topology and run `dlq-bridge run` in the foreground, with the
# audit trail on: a compliance deployment without one is a mistake, so the
# quick start has one too. Extra arguments go to `dlq-bridge run`.
#
# The trail lives in DLQB_LOCAL_STATE_DIR (default .local-state/): an
# Ed25519 key pair made on the first run (audit.key, 0600; its public key
# in audit-keys/), the log audit/audit.log, and config.json naming them,
# which the bridge reads as DLQ_BRIDGE_CONFIG. Point the ops commands in
# another shell at the same file (printed at start) and they record into
# the same trail. A DLQ_BRIDGE_CONFIG of your own is used instead, and the
# environment beats the file (DLQ_BRIDGE_AUDIT_LOG= turns the trail off).
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

if [ -z "${DLQ_BRIDGE_CONFIG+set}" ]; then
    state=${DLQB_LOCAL_STATE_DIR:-$PWD/.local-state}
    mkdir -p "$state/audit" "$state/audit-keys"
    if [ ! -e "$state/audit.key" ]; then
        # umask first: the private key is never readable by others, not even
        # between its creation and a chmod (the bridge refuses such a key).
        (umask 077 && openssl genpkey -algorithm ed25519 -out "$state/audit.key")
        openssl pkey -in "$state/audit.key" -pubout -out "$state/audit-keys/local.pem"
        echo "run-local: made the audit key pair $state/audit.key (public key in $state/audit-keys/)" >&2
    fi
    if [ ! -e "$state/config.json" ]; then
        # Paths only, no secret: the file may be read by anyone on the machine.
        # replay trusts completions, and a look catalog events, only from
        # the URL's user: the bridge, the ops commands and a local worker of
        # this quick start share it.
        user=guest
        case "${url#*://}" in *@*) user=${url#*://}; user=${user%%@*}; user=${user%%:*} ;; esac
        jq -n --arg log "$state/audit/audit.log" --arg key "$state/audit.key" \
            --arg pub "$state/audit-keys" --arg user "$user" \
            '{audit_log: $log, audit_key_file: $key, audit_public_keys: $pub,
              completion_writers: $user, catalog_writers: $user}' \
            >"$state/config.json"
    fi
    export DLQ_BRIDGE_CONFIG=$state/config.json
    echo "run-local: audit trail on ($state/audit/audit.log); for the ops commands in another shell:" >&2
    echo "    export DLQ_BRIDGE_CONFIG=$DLQ_BRIDGE_CONFIG" >&2
fi

build/dlq-bridge declare >/dev/null
exec build/dlq-bridge run "$@"
