#!/usr/bin/env bash
# Where the broker's work goes when messages move from dsr.dlq.manual to
# dsr.work: the same preloaded messages moved by `dlq-bridge replay --all`
# and by the management UI's shovel, on a private node, R rounds each. For
# every move it prints the rate, the broker's CPU time a message (from
# /proc, user + system of the node's beam.smp) and, sampled for 1.5 s in the
# middle of the move, how busy each scheduler was and the ten processes that
# did the most work (bench/process-shares.erl). It explains the replay /
# shovel ratio of bench/run.sh (docs/performance.md); it is not a test.
#
# usage: bench/broker-profile.sh [--messages N] [--rounds R] [--port P] [--no-build]
#   --messages N  messages per move (default 100000: the move must outlast
#                 the sample)
#   --rounds R    moves of each kind, alternating (default 2)
#   --port P      AMQP port of the private node; it also takes P+1..P+4
#                 (default 28672)
#   --no-build    use the binaries already in build-bench/
set -euo pipefail

cd "$(dirname "$0")/.."
root=$(pwd)
me=bench/broker-profile.sh

messages=100000 rounds=2 port=28672 build=1 window=512
while [ $# -gt 0 ]; do
    case "$1" in
    --messages) messages=${2:?--messages needs a value}; shift 2 ;;
    --rounds) rounds=${2:?--rounds needs a value}; shift 2 ;;
    --port) port=${2:?--port needs a value}; shift 2 ;;
    --no-build) build=0; shift ;;
    -h|--help) sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p;}' "$0"; exit 0 ;;
    *) echo "broker-profile.sh: unknown argument '$1' (see bench/broker-profile.sh --help)" >&2; exit 2 ;;
    esac
done

# shellcheck source=bench/lib.sh
. "$root/bench/lib.sh"

bdir=$root/build-bench
node_dir=$bdir/profile-broker
node_dirs=("$node_dir")
bin=$bdir/dlq-bridge
tool=$bdir/bench/dlqb-bench
url="amqp://guest:guest@127.0.0.1:$port/%2f"
mgmt="http://127.0.0.1:$((port + 1))"

build_bench
start_private_node dlqb-profile

beam=$(pgrep -f "beam.smp.*$node_dir" | head -n 1)
[ -n "$beam" ] || fail "cannot find the node's beam.smp process"
ticks=$(getconf CLK_TCK)
# user + system CPU of the node so far, in clock ticks
broker_ticks() { awk '{ print $14 + $15 }' "/proc/$beam/stat"; }
# Samples the node while a move runs (started in the background, after the
# move has got going), into the file $1.
sample() {
    sleep 0.5
    # shellcheck disable=SC1090,SC1091
    scripts/broker-node.sh ctl "$node_dir" eval "$(cat bench/process-shares.erl)" >"$1" 2>&1
}
# Runs one move ($1: replay or shovel) of the preloaded DLQ and reports it.
move() {
    local kind=$1 c0 t0 t1 c1 spid out=$bdir/profile-$1.txt
    preload_dlq "$messages"
    c0=$(broker_ticks)
    t0=$(now)
    sample "$out" &
    spid=$!
    if [ "$kind" = replay ]; then
        # --no-audit: the broker's side of the move is profiled, not the trail.
        "$bin" replay --all --no-audit >/dev/null 2>"$bdir/profile-replay.log" || fail "replay failed (see $bdir/profile-replay.log)"
    else
        start_shovel
    fi
    t1=$(wait_for --queue dsr.work --at-least "$messages" --empty dsr.dlq.manual)
    c1=$(broker_ticks)
    [ "$kind" = shovel ] && delete_shovel
    wait "$spid" || true
    awk -v k="$kind" -v n="$messages" -v a="$t0" -v b="$t1" -v c=$((c1 - c0)) -v hz="$ticks" 'BEGIN {
        w = b - a; printf "\n%s: %.0f msg/s, broker CPU %.0f us a message (%.0f%% of %d cores)\n",
        k, n / w, c / hz / n * 1e6, c / hz / w / '"$(nproc)"' * 100, '"$(nproc)"' }'
    grep -v '^ok$' "$out" || true
    purge_all
}

for round in $(seq 1 "$rounds"); do
    log "round $round: replay, then shovel, $messages messages each"
    move replay
    move shovel
done
