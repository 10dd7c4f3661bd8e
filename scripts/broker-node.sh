#!/usr/bin/env bash
# Start, stop or query a private RabbitMQ node for tests and local runs.
#
# The node lives entirely under DIR (data, logs, Erlang cookie, config) and
# listens only on 127.0.0.1, on ports derived from BASE_PORT:
#   BASE_PORT      AMQP            BASE_PORT+1  management HTTP
#   BASE_PORT+2    Erlang dist     BASE_PORT+3  stream
#   BASE_PORT+4    AMQPS (TLS), only when DIR/tls/ holds ca.pem, server.pem, server.key
# except that BASE_PORT 5672 gets RabbitMQ's usual ports (15672, 25672, 5552, 5671).
# The TLS listener asks for no client certificate unless DLQB_BROKER_TLS_VERIFY
# is verify_peer (a certificate is then checked when sent, but not required).
# DIR/extra.conf, when present, is appended to the node's rabbitmq.conf;
# DIR/advanced.config, when present, is the node's advanced.config.
# It never touches a node it did not start: stop only signals the pid it recorded.
#
# Which RabbitMQ: DLQB_BROKER_VERSION at start (recorded in DIR/node.env, so
# later commands on DIR follow it):
#   3.10  (default) this machine's own rabbitmq-server (Debian bookworm: 3.10.8)
#   4.0   Debian trixie's rabbitmq-server (4.0.5, Erlang 27), installed in a
#         cached debootstrap root by scripts/debian-root.sh and run chrooted.
# A node in a root runs in a private mount namespace (unshare -m) that
# bind-mounts /proc, /dev, /sys and DIR (at the same path) into the root: the
# mounts are never visible outside that namespace and vanish with the node's
# last process, so the shared root is left as it was even after a kill -9.
#
# usage: broker-node.sh start DIR BASE_PORT [NODENAME]
#        broker-node.sh stop DIR
#        broker-node.sh env DIR     (prints the shell variables of a started node)
#        broker-node.sh join DIR OTHER_NODENAME   (joins OTHER's cluster)
#        broker-node.sh ctl DIR ARGS...   (rabbitmqctl -n NODE ARGS... on DIR's node)
#        broker-node.sh queues DIR ARGS...   (rabbitmq-queues -n NODE ARGS..., e.g. grow NODE all)
#        broker-node.sh streams DIR ARGS...  (rabbitmq-streams -n NODE ARGS..., e.g. add_replica)
set -euo pipefail

cmd=${1:-}
dir=${2:-}
[ -n "$cmd" ] && [ -n "$dir" ] || { echo "usage: $0 start|stop|kill|join|env|ctl|queues|streams DIR [BASE_PORT] [NODENAME]" >&2; exit 2; }

rabbit_bin=/usr/lib/rabbitmq/bin
here=$(cd "$(dirname "$0")" && pwd)

node_env() {
    # shellcheck disable=SC1091
    . "$dir/node.env"
    dir=${NODE_DIR:-$dir}
    export HOME="$dir/home" RABBITMQ_NODENAME
    broker_root=${BROKER_ROOT:-}
}

# The root a version runs from ("" for this machine's own), built on first use.
root_of_version() {
    case "$1" in
    3.10) echo "" ;;
    4.0) "$here/debian-root.sh" trixie trixie-rabbitmq rabbitmq-server ;;
    *) echo "broker-node: unknown DLQB_BROKER_VERSION '$1' (3.10 or 4.0)" >&2; return 2 ;;
    esac
}

# Sets the array run to the command line of a RabbitMQ program
# (rabbitmq-server, rabbitmqctl, ...) with ARGS: the program itself, or, for a
# node in $broker_root, the program chrooted into the root inside a private
# mount namespace where DIR is visible at its own path. The caller's
# environment passes through.
rabbit_cmd() {
    local prog=$1
    shift
    if [ -z "$broker_root" ]; then
        run=("$rabbit_bin/$prog" "$@")
        return
    fi
    make_mount_point
    # shellcheck disable=SC2016 # expanded by the inner shell
    run=(unshare --mount --propagation private -- /bin/sh -euc '
        r=$1 d=$2
        shift 2
        mount --rbind /proc "$r/proc"
        mount --rbind /dev "$r/dev"
        mount --rbind /sys "$r/sys"
        mount --bind "$d" "$r$d"
        exec chroot "$r" "$@"' sh "$broker_root" "$dir" "$rabbit_bin/$prog" "$@")
}

rabbit() {
    local run
    rabbit_cmd "$@"
    "${run[@]}"
}

# The folders made inside the root to mount DIR on are listed in a ledger
# beside the root, so that stop removes (when empty) exactly those and never
# one of the root's own (such as /tmp).
ledger() { echo "$broker_root.mount-points"; }

make_mount_point() {
    local p=$dir made=()
    while [ "$p" != / ] && [ ! -d "$broker_root$p" ]; do
        made+=("$p")
        p=$(dirname "$p")
    done
    [ ${#made[@]} -gt 0 ] || return 0
    (flock 9; mkdir -p "$broker_root$dir"; printf '%s\n' "${made[@]}" >>"$(ledger)") 9>"$(ledger).lock"
}

forget_mount_point() {
    [ -n "$broker_root" ] && [ -f "$(ledger)" ] || return 0
    local p=$dir
    (
        flock 9
        while [ "$p" != / ] && grep -qxF -- "$p" "$(ledger)" && rmdir "$broker_root$p" 2>/dev/null; do
            p=$(dirname "$p")
        done
        # Keep the ledger to the folders still there.
        sort -u "$(ledger)" | while read -r m; do [ ! -d "$broker_root$m" ] || echo "$m"; done >"$(ledger).new"
        mv "$(ledger).new" "$(ledger)"
    ) 9>"$(ledger).lock"
}

wait_ready() {
    local deadline=$((SECONDS + ${DLQB_BROKER_START_TIMEOUT:-90}))
    while [ $SECONDS -lt $deadline ]; do
        if ! kill -0 "$(cat "$dir/server.pid")" 2>/dev/null; then
            echo "broker-node: node exited during start; see $dir/log/" >&2
            tail -n 20 "$dir/server.out" >&2 || true
            return 1
        fi
        # Ready means: the management API answers, from *this* node (not
        # another one on the port), and the AMQP listener accepts connections.
        # (No aliveness-test: it would leave a queue in the user's broker.)
        if curl -fsS -u guest:guest "http://127.0.0.1:$MGMT_PORT/api/overview" 2>/dev/null |
               grep -q "\"node\":\"$RABBITMQ_NODENAME\"" &&
           (exec 3<>"/dev/tcp/127.0.0.1/$AMQP_PORT") 2>/dev/null; then
            # A TLS listener, when configured, must accept connections too.
            if [ -f "$dir/tls/server.pem" ] && ! (exec 3<>"/dev/tcp/127.0.0.1/$AMQPS_PORT") 2>/dev/null; then
                sleep 0.2
                continue
            fi
            return 0
        fi
        sleep 0.5
    done
    echo "broker-node: node did not answer within ${DLQB_BROKER_START_TIMEOUT:-90}s" >&2
    return 1
}

# Waits until no process of the node's group is left (beam.smp outlives the
# wrapper script by a moment, writing its last log lines: a 4.0 node would
# write them into the root itself once its namespace's mount is gone).
await_group_gone() {
    for _ in $(seq 1 40); do pgrep -g "$1" >/dev/null || return 0; sleep 0.25; done
    kill -9 -- -"$1" 2>/dev/null || true
}

case "$cmd" in
start)
    base=${3:?BASE_PORT required}
    name=${4:-dlqb-test-$base}
    mgmt=$((base + 1)) dist=$((base + 2)) stream=$((base + 3)) amqps=$((base + 4))
    if [ "$base" = 5672 ]; then mgmt=15672 dist=25672 stream=5552 amqps=5671; fi
    version=${DLQB_BROKER_VERSION:-3.10}
    broker_root=$(root_of_version "$version") || exit $?
    mkdir -p "$dir/mnesia" "$dir/log" "$dir/home"
    dir=$(cd "$dir" && pwd -P) # the path the root sees it at must be absolute
    if [ -f "$dir/server.pid" ] && kill -0 "$(cat "$dir/server.pid")" 2>/dev/null; then
        echo "broker-node: already running in $dir" >&2
        exit 0
    fi
    # Never mistake another node (or anything else) on our ports for ours.
    for p in "$base" "$mgmt"; do
        if (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
            echo "broker-node: port $p is already in use; choose another BASE_PORT" >&2
            exit 1
        fi
    done
    tls_conf=""
    if [ -f "$dir/tls/ca.pem" ] && [ -f "$dir/tls/server.pem" ] && [ -f "$dir/tls/server.key" ]; then
        tls_conf="listeners.ssl.default = 127.0.0.1:$amqps
ssl_options.cacertfile = $dir/tls/ca.pem
ssl_options.certfile = $dir/tls/server.pem
ssl_options.keyfile = $dir/tls/server.key
ssl_options.verify = ${DLQB_BROKER_TLS_VERIFY:-verify_none}
ssl_options.fail_if_no_peer_cert = false
ssl_options.versions.1 = tlsv1.2
ssl_options.versions.2 = tlsv1.3"
    fi
    cat > "$dir/rabbitmq.conf" <<EOF
listeners.tcp.default = 127.0.0.1:$base
management.tcp.ip = 127.0.0.1
management.tcp.port = $mgmt
stream.listeners.tcp.default = 127.0.0.1:$stream
loopback_users = none
log.file.level = warning
log.console = false
vm_memory_high_watermark.relative = 0.4
disk_free_limit.absolute = 50MB
$tls_conf
$(cat "$dir/extra.conf" 2>/dev/null || true)
EOF
    echo "[rabbitmq_management,rabbitmq_stream,rabbitmq_shovel,rabbitmq_shovel_management]." > "$dir/enabled_plugins"
    cat > "$dir/node.env" <<EOF
RABBITMQ_NODENAME=$name@localhost
AMQP_PORT=$base
MGMT_PORT=$mgmt
DIST_PORT=$dist
STREAM_PORT=$stream
AMQPS_PORT=$amqps
NODE_DIR=$dir
BROKER_VERSION=$version
BROKER_ROOT=$broker_root
EOF
    node_env
    (
        export RABBITMQ_NODE_IP_ADDRESS=127.0.0.1
        export RABBITMQ_NODE_PORT=$base
        export RABBITMQ_DIST_PORT=$dist
        export RABBITMQ_MNESIA_BASE="$dir/mnesia"
        export RABBITMQ_LOG_BASE="$dir/log"
        export RABBITMQ_ENABLED_PLUGINS_FILE="$dir/enabled_plugins"
        export RABBITMQ_CONFIG_FILE="$dir/rabbitmq"
        if [ -f "$dir/advanced.config" ]; then export RABBITMQ_ADVANCED_CONFIG_FILE="$dir/advanced.config"; fi
        export RABBITMQ_PID_FILE="$dir/rabbit.pid"
        export ERL_EPMD_ADDRESS=127.0.0.1
        # The distribution port listens on every interface unless told
        # otherwise (RABBITMQ_NODE_IP_ADDRESS covers AMQP only).
        export RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS="-kernel inet_dist_use_interface {127,0,0,1}"
        # A node in a root would start the root's port mapper inside its
        # namespace, where it would outlive the node; this machine's own
        # epmd (as a 3.10 node starts it) serves every version.
        if [ -n "$broker_root" ]; then epmd -daemon; fi
        rabbit_cmd rabbitmq-server
        setsid "${run[@]}" > "$dir/server.out" 2>&1 &
        echo $! > "$dir/server.pid"
    )
    . "$dir/node.env"
    wait_ready
    ;;
stop)
    [ -f "$dir/node.env" ] || exit 0
    node_env
    if [ -f "$dir/server.pid" ]; then
        pid=$(cat "$dir/server.pid")
        if kill -0 "$pid" 2>/dev/null; then
            rabbit rabbitmqctl -n "$RABBITMQ_NODENAME" stop >/dev/null 2>&1 || true
            for _ in $(seq 1 60); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
            # The wrapper was started with setsid: its process group is the node.
            kill -- -"$pid" 2>/dev/null || true
        fi
        await_group_gone "$pid"
        rm -f "$dir/server.pid"
    fi
    forget_mount_point
    ;;
kill)
    # Hard stop, as a crash or power loss would do; used by fault tests.
    [ -f "$dir/server.pid" ] || exit 0
    pid=$(cat "$dir/server.pid")
    kill -9 -- -"$pid" 2>/dev/null || true
    await_group_gone "$pid"
    rm -f "$dir/server.pid"
    node_env
    forget_mount_point
    ;;
join)
    # Makes the started node in DIR a member of OTHER's cluster (OTHER is a
    # node name, e.g. dlqb-c1-55682@localhost). Both need the same Erlang
    # cookie: copy OTHER's DIR/home/.erlang.cookie before starting this one.
    other=${3:?OTHER node name required}
    node_env
    rabbit rabbitmqctl -q -n "$RABBITMQ_NODENAME" stop_app
    rabbit rabbitmqctl -q -n "$RABBITMQ_NODENAME" join_cluster "$other"
    rabbit rabbitmqctl -q -n "$RABBITMQ_NODENAME" start_app
    . "$dir/node.env"
    wait_ready
    ;;
env)
    cat "$dir/node.env"
    ;;
ctl)
    # rabbitmqctl for DIR's node, from the node's own RabbitMQ (so through
    # the root for a 4.0 node): the tests' and benchmarks' one way to run it.
    shift 2
    node_env
    rabbit rabbitmqctl -n "$RABBITMQ_NODENAME" "$@"
    ;;
queues | streams)
    # rabbitmq-queues / rabbitmq-streams for DIR's node, the same way as ctl
    # (through the root for a 4.0 node): quorum queue and stream membership
    # (grow, shrink, add_replica, ...) after a node is replaced.
    prog=rabbitmq-$cmd
    shift 2
    node_env
    rabbit "$prog" -n "$RABBITMQ_NODENAME" "$@"
    ;;
*)
    echo "usage: $0 start|stop|kill|join|env|ctl|queues|streams DIR [BASE_PORT] [NODENAME|OTHER_NODENAME|ARGS]" >&2
    exit 2
    ;;
esac
