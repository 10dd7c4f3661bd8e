#!/usr/bin/env bash
# The dlq-bridge benchmark: builds build-bench/ (with -DDLQB_BENCH=ON), starts
# its own private RabbitMQ node, and in one run on that node measures
#   a) raw publish-with-confirm of 256-byte persistent messages into a quorum
#      queue, confirms awaited one by one and with a window in flight;
#   b) a dynamic shovel (ack-mode on-confirm) moving N messages from
#      dsr.dlq.manual (classic) to dsr.work (quorum): the queues replay uses;
#   c) `dlq-bridge replay --all` of the same N messages (if the command exists),
#      and the DLQ drained by a consumer that publishes nothing: the
#      classic queue's own delivery ceiling;
#   d) the daemon routing N failures from dsr.failed to the retry queue,
#      with the audit trail off and on (if the audit module writes records);
#   e) peak RSS (VmHWM) of the daemon (audit off and on) and of replay;
#   f) two daemons routing at once against one.
# It prints a table with msg/s and the ratios against the targets. It is not
# a test: nothing here passes or fails the build. bench/cluster.sh measures
# f) on the reliability suite's three-node cluster instead.
#
# usage: bench/run.sh [--messages N] [--rounds R] [--window W] [--port P]
#                     [--full] [--no-build] [--bridge PATH] [--broker 3.10|4.0]
#   --messages N  messages per measurement (default 50000)
#   --rounds R    repeat shovel, replay and routing R times, report the median
#                 (default 3; the machine is shared and noisy)
#   --window W    publishes in flight for the pipelined publish (default 512)
#   --port P      AMQP port of the private node; it also takes P+1..P+4
#                 (default 26672: below Linux's ephemeral ports, so no
#                 client socket holds one of them)
#   --full        also replay and route 200,000 messages to show RSS is flat
#   --no-build    use the binaries already in build-bench/
#   --bridge PATH measure this dlq-bridge binary instead of build-bench's
#                 (e.g. an older build, for before/after numbers)
#   --broker V    the RabbitMQ of the private node: 3.10 (default, this
#                 machine's) or 4.0 (Debian trixie's 4.0.5, chrooted from a
#                 cached root: scripts/broker-node.sh, DLQB_BROKER_VERSION)
# The shovel is the one the management UI's "Move messages" creates (direct
# amqp:/// URIs, prefetch 1000, ack-mode on-confirm, delete after the queue
# length). Daemons run with metrics off (two on one host would share a port).
set -euo pipefail

cd "$(dirname "$0")/.."
root=$(pwd)
me=bench/run.sh

messages=50000 rounds=3 window=512 port=26672 full=0 build=1 bridge=""
while [ $# -gt 0 ]; do
    case "$1" in
    --messages) messages=${2:?--messages needs a value}; shift 2 ;;
    --rounds) rounds=${2:?--rounds needs a value}; shift 2 ;;
    --window) window=${2:?--window needs a value}; shift 2 ;;
    --port) port=${2:?--port needs a value}; shift 2 ;;
    --full) full=1; shift ;;
    --no-build) build=0; shift ;;
    --bridge) bridge=${2:?--bridge needs a value}; shift 2 ;;
    --broker)
        case "${2:-}" in
        3.10 | 4.0) export DLQB_BROKER_VERSION=$2; shift 2 ;;
        *) echo "run.sh: --broker takes 3.10 or 4.0, not '${2:-}'" >&2; exit 2 ;;
        esac
        ;;
    -h|--help) sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p;}' "$0"; exit 0 ;;
    *) echo "run.sh: unknown argument '$1' (see bench/run.sh --help)" >&2; exit 2 ;;
    esac
done

# shellcheck source=bench/lib.sh
. "$root/bench/lib.sh"

bdir=$root/build-bench
node_dir=$bdir/broker
node_dirs=("$node_dir")
work=$bdir/bench-run
# The default settings keep a look's catalog checkpoint in the state
# directory: this run's own, not the user's.
export XDG_STATE_HOME=$work/state
bin=${bridge:-$bdir/dlq-bridge}
tool=$bdir/bench/dlqb-bench
url="amqp://guest:guest@127.0.0.1:$port/%2f"
mgmt="http://127.0.0.1:$((port + 1))"
full_n=200000

# ---- build and broker ----------------------------------------------------

build_bench
rm -rf "$work"
mkdir -p "$work"
start_private_node dlqb-bench

# Helpers (rate, median, paired, preloads, route ...) are in bench/lib.sh.
mib() { awk -v k="$1" 'BEGIN { if (k == "") print "n/a"; else printf "%.1f", k / 1024 }'; }

# ---- a) raw publish with confirms ---------------------------------------

single_n=$((messages / 10))
[ "$single_n" -gt 5000 ] && single_n=5000
[ "$single_n" -lt 100 ] && single_n=100
log "a) publish $single_n one by one and $messages with $window in flight into a quorum queue"
pub_single=$("$tool" publish --url "$url" --routing-key bench.quorum --declare-quorum \
    --count "$single_n" --window 1 | field rate)
"$tool" purge --url "$url" --queue bench.quorum
pub_window=$("$tool" publish --url "$url" --routing-key bench.quorum --count "$messages" \
    --window "$window" | field rate)
"$tool" purge --url "$url" --queue bench.quorum --delete
pub_classic=$("$tool" publish --url "$url" --routing-key dsr.dlq.manual --kind dlq \
    --count "$messages" --window "$window" | field rate)
purge_all

# ---- b) shovel, c) replay --------------------------------------------------

shovel_rates="" replay_rates="" replay_rss="" drain_rates=""
replay_state="not available (no 'dlq-bridge replay' command in this build)"
if "$bin" replay --help >/dev/null 2>&1; then replay_state=ok; fi

# Replays the DLQ (already holding n messages); sets r_rate and r_rss.
run_replay() {
    local n=$1 t0 t1 out
    t0=$(now)
    # --no-audit: the move itself, as before a trail was required (bench/deep.sh
    # measures replay with the trail on).
    if ! out=$("$tool" exec -- "$bin" replay --all --no-audit 2>>"$work/replay.log"); then
        replay_state="failed: $(tail -n 1 "$work/replay.log")"
        return 1
    fi
    t1=$(wait_for --queue dsr.work --at-least "$n" --empty dsr.dlq.manual)
    r_rate=$(rate "$n" "$t0" "$t1")
    r_rss=$(echo "$out" | field maxrss_kib)
}

for round in $(seq 1 "$rounds"); do
    log "b) round $round: shovel $messages messages dsr.dlq.manual -> dsr.work"
    preload_dlq "$messages"
    t0=$(now)
    start_shovel
    t1=$(wait_for --queue dsr.work --at-least "$messages" --empty dsr.dlq.manual)
    shovel_rates="$shovel_rates $(rate "$messages" "$t0" "$t1")"
    delete_shovel
    purge_all

    if [ "$replay_state" = ok ]; then
        log "c) round $round: dlq-bridge replay --all of $messages messages"
        preload_dlq "$messages"
        if run_replay "$messages"; then
            replay_rates="$replay_rates $r_rate"
            replay_rss="$r_rss"
        fi
        purge_all
    fi

    log "c) round $round: drain $messages messages from dsr.dlq.manual, publishing nothing"
    preload_dlq "$messages"
    drain_rates="$drain_rates $("$tool" drain --url "$url" --queue dsr.dlq.manual \
        --count "$messages" --window 5000 | field rate)"
    purge_all
done

# ---- d) routing, audit off and on; f) two daemons ----------------------

# route (bench/lib.sh) preloads n failures, routes them with 1 or 2 daemons
# and sets d_rate, d_rss and d_stop.

audit_key=$work/audit.key
audit_log=$work/audit.log
(umask 077 && openssl genpkey -algorithm ed25519 -out "$audit_key" 2>/dev/null)
route_off="" route_on="" route_two="" daemon_rss="" daemon_on_rss="" stop_off="" audit_state=ok
for round in $(seq 1 "$rounds"); do
    log "d) round $round: route $messages failures, audit off"
    route "$messages" 1 off
    route_off="$route_off $d_rate"
    daemon_rss=$d_rss stop_off="$stop_off $d_stop"

    if [ "$audit_state" = ok ]; then
        log "d) round $round: route $messages failures, audit on"
        rm -f "$audit_log"
        route "$messages" 1 on DLQ_BRIDGE_AUDIT_LOG="$audit_log" DLQ_BRIDGE_AUDIT_KEY_FILE="$audit_key"
        records=$( [ -f "$audit_log" ] && wc -l <"$audit_log" || echo 0)
        if [ "$records" -lt "$messages" ]; then
            audit_state="not available (the daemon wrote $records audit records for $messages hops)"
        else
            route_on="$route_on $d_rate"
            daemon_on_rss=$d_rss
        fi
    fi

    log "f) round $round: route $messages failures with two daemons"
    route "$messages" 2 two
    route_two="$route_two $d_rate"
done

# ---- e) RSS at depth ------------------------------------------------------

replay_full_rss="" daemon_full_rss="" route_full=""
if [ "$full" = 1 ]; then
    log "e) route $full_n failures (RSS at depth)"
    route "$full_n" 1 full
    daemon_full_rss=$d_rss route_full=$d_rate
    if [ "$replay_state" = ok ]; then
        log "e) replay $full_n messages (RSS at depth)"
        preload_dlq "$full_n"
        run_replay "$full_n" && replay_full_rss=$r_rss
        purge_all
    fi
fi

# ---- report -----------------------------------------------------------------

shovel=$(echo "$shovel_rates" | median)
replay=$(echo "$replay_rates" | median)
off=$(echo "$route_off" | median)
on=$(echo "$route_on" | median)
two=$(echo "$route_two" | median)
drain=$(echo "$drain_rates" | median)

verdict() { awk -v r="$1" -v t="$2" 'BEGIN { if (r == "n/a") print "n/a"; else if (r + 0 >= t) print "met"; else print "MISSED" }'; }
rss_verdict() { awk -v k="$1" 'BEGIN { if (k == "") print "n/a"; else if (k < 32768) print "met"; else print "MISSED" }'; }

printf '\n'
printf 'dlq-bridge benchmark: %s messages of 256 B, persistent, %s round(s) (median), window %s\n' \
    "$messages" "$rounds" "$window"
printf 'dlq-bridge: %s\n' "$bin"
printf 'broker: RabbitMQ %s on 127.0.0.1:%s, %s CPUs; %s\n' \
    "$(curl -s -u guest:guest "$mgmt/api/overview" | sed -n 's/.*"rabbitmq_version":"\([^"]*\)".*/\1/p')" \
    "$port" "$(nproc)" "$(date -u +%Y-%m-%dT%H:%M:%SZ)"
printf '\n| %-58s | %12s |\n' "measurement" "msg/s"
printf '| %-58s | %12s |\n' "$(printf -- '-%.0s' $(seq 58))" "-----------:"
printf '| %-58s | %12s |\n' "publish, confirm awaited one by one, quorum ($single_n msgs)" "$pub_single"
printf '| %-58s | %12s |\n' "publish, $window in flight, quorum" "$pub_window"
printf '| %-58s | %12s |\n' "publish, $window in flight, classic (dsr.dlq.manual)" "$pub_classic"
printf '| %-58s | %12s |\n' "shovel dsr.dlq.manual -> dsr.work (UI 'Move messages')" "$shovel"
printf '| %-58s | %12s |\n' "replay --all dsr.dlq.manual -> dsr.work" \
    "$([ -n "$replay_rates" ] && echo "$replay" || echo n/a)"
printf '| %-58s | %12s |\n' "drain dsr.dlq.manual, nothing published (its ceiling)" "$drain"
printf '| %-58s | %12s |\n' "routing, 1 daemon, audit off (dsr.failed -> retry)" "$off"
printf '| %-58s | %12s |\n' "routing, 1 daemon, audit on" "$([ -n "$route_on" ] && echo "$on" || echo n/a)"
printf '| %-58s | %12s |\n' "routing, 2 daemons at once (combined)" "$two"
[ -n "$route_full" ] && printf '| %-58s | %12s |\n' "routing, 1 daemon, $full_n failures" "$route_full"

# Ratios pair the measurements of one round (paired, bench/lib.sh).
r_replay=$(paired "$replay_rates" "$shovel_rates")
r_route=$(paired "$route_off" "$shovel_rates")
r_audit=$(paired "$route_on" "$route_off")
r_two=$(paired "$route_two" "$route_off")
printf '\n| %-34s | %6s | %7s | %-7s |\n' "ratio (median of per-round ratios)" "value" "target" "verdict"
printf '| %-34s | %6s | %7s | %-7s |\n' "----------------------------------" "-----:" "------:" "-------"
printf '| %-34s | %6s | %7s | %-7s |\n' "replay / shovel" "$r_replay" ">= 1.3" "$(verdict "$r_replay" 1.3)"
printf '| %-34s | %6s | %7s | %-7s |\n' "routing / shovel" "$r_route" ">= 1.0" "$(verdict "$r_route" 1.0)"
printf '| %-34s | %6s | %7s | %-7s |\n' "audit on / audit off" "$r_audit" ">= 0.8" "$(verdict "$r_audit" 0.8)"
printf '| %-34s | %6s | %7s | %-7s |\n' "two daemons / one daemon" "$r_two" "-" "-"
printf '| %-34s | %6s | %7s | %-7s |\n' "replay / drain" "$(paired "$replay_rates" "$drain_rates")" "-" "-"
printf '| %-34s | %6s | %7s | %-7s |\n' "publish window / one by one" "$(ratio "$pub_window" "$pub_single")" "-" "-"

printf '\n| %-40s | %9s | %-7s |\n' "peak RSS (VmHWM)" "MiB" "< 32"
printf '| %-40s | %9s | %-7s |\n' "----------------------------------------" "--------:" "-------"
printf '| %-40s | %9s | %-7s |\n' "daemon, $messages failures" "$(mib "$daemon_rss")" "$(rss_verdict "$daemon_rss")"
[ -n "$daemon_on_rss" ] && printf '| %-40s | %9s | %-7s |\n' "daemon, audit on, $messages failures" "$(mib "$daemon_on_rss")" "$(rss_verdict "$daemon_on_rss")"
[ -n "$daemon_full_rss" ] && printf '| %-40s | %9s | %-7s |\n' "daemon, $full_n failures" "$(mib "$daemon_full_rss")" "$(rss_verdict "$daemon_full_rss")"
printf '| %-40s | %9s | %-7s |\n' "replay, $messages messages" "$(mib "$replay_rss")" "$(rss_verdict "$replay_rss")"
[ "$full" = 1 ] && printf '| %-40s | %9s | %-7s |\n' "replay, $full_n messages" "$(mib "$replay_full_rss")" "$(rss_verdict "$replay_full_rss")"

printf '\nreplay: %s\naudit: %s\n' "$replay_state" "$audit_state"
printf 'per round (msg/s): shovel%s | replay%s | drain%s | routing off%s | on%s | two%s\n' \
    "$shovel_rates" "${replay_rates:- -}" "$drain_rates" "$route_off" "${route_on:- -}" "$route_two"
printf 'daemon shutdown after SIGTERM (s):%s\n' "$stop_off"
printf 'logs: %s\n' "$work"
