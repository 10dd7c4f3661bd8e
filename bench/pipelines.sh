#!/usr/bin/env bash
# Several pipelines on one daemon: does one pipeline's flood slow the others
# beyond their share (issue 22)? Builds build-bench/ (as bench/run.sh does),
# starts its own private RabbitMQ node, declares the three built-in pipelines
# of a config file (dsr, redaction, reconciliation, each with its built-in
# profile) and, R times in alternation, measures with one `dlq-bridge run`
# serving all three:
#   a) the dsr routing rate alone: N failures preloaded in dsr.failed until
#      all are in dsr.retry.10m, the other two pipelines idle (the baseline);
#   b) the same N while reconciliation is flooded: F*N failures preloaded in
#      reconciliation.failed as well, both routed at once; the dsr rate and
#      its ratio to a), the reconciliation rate until dsr is done, dsr's
#      share of the two, and the rate of all (N + F*N) until both are done;
#   c) the latency of single dsr failures published one at a time (from the
#      publish until the task is in dsr.retry.10m or the DLQ; S samples,
#      median and p95, and the median of the probes' own publish confirms,
#      the broker's part of it): idle (after a), the daemon warm) and during
#      the flood (after dsr's part of b) is done, reconciliation routing);
#   d) unless --no-separate, a), b) and c) again with two daemons, `run`
#      with DLQ_BRIDGE_PIPELINE=dsr and with DLQ_BRIDGE_PIPELINE=reconciliation
#      (the same as `run --pipeline NAME`; redaction is not served), for
#      comparison: the same figures, and one daemon's against two's.
# Every task carries its profile's identity headers (dlqb-bench --profile).
# It prints a table of medians and of per-round ratios. It is not a test:
# nothing here passes or fails the build, and no figure is asserted.
#
# usage: bench/pipelines.sh [--messages N] [--flood F] [--samples S]
#                           [--rounds R] [--window W] [--port P]
#                           [--no-separate] [--no-build] [--bridge PATH]
#                           [--broker 3.10|4.0]
#   --messages N   dsr failures per routing measurement (default 50000)
#   --flood F      reconciliation gets F times N failures (default 4)
#   --samples S    latency samples per phase (default 50)
#   --rounds R     repeat every phase R times, report the median (default 3)
#   --window W     publishes in flight when preloading (default 512)
#   --port P       AMQP port of the private node; it also takes P+1..P+4
#                  (default 29672; busy ports are refused)
#   --no-separate  skip d) (two daemons, one pipeline each)
#   --no-build     use the binaries already in build-bench/
#   --bridge PATH  measure this dlq-bridge binary instead of build-bench's
#   --broker V     the RabbitMQ of the private node: 3.10 (default) or 4.0
#                  (scripts/broker-node.sh, DLQB_BROKER_VERSION)
# Daemons run with metrics and the audit trail off, retry delay 10m (so
# routed tasks stay in N.retry.10m and can be counted); depths are read
# with passive queue.declare (every 10 ms for rates, 1 ms for latency).
set -euo pipefail

cd "$(dirname "$0")/.."
root=$(pwd)
me=bench/pipelines.sh

messages=50000 flood=4 samples=50 rounds=3 window=512 port=29672 separate=1 build=1 bridge=""
while [ $# -gt 0 ]; do
    case "$1" in
    --messages) messages=${2:?--messages needs a value}; shift 2 ;;
    --flood) flood=${2:?--flood needs a value}; shift 2 ;;
    --samples) samples=${2:?--samples needs a value}; shift 2 ;;
    --rounds) rounds=${2:?--rounds needs a value}; shift 2 ;;
    --window) window=${2:?--window needs a value}; shift 2 ;;
    --port) port=${2:?--port needs a value}; shift 2 ;;
    --no-separate) separate=0; shift ;;
    --no-build) build=0; shift ;;
    --bridge) bridge=${2:?--bridge needs a value}; shift 2 ;;
    --broker)
        case "${2:-}" in
        3.10 | 4.0) export DLQB_BROKER_VERSION=$2; shift 2 ;;
        *) echo "pipelines.sh: --broker takes 3.10 or 4.0, not '${2:-}'" >&2; exit 2 ;;
        esac
        ;;
    -h|--help) sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p;}' "$0"; exit 0 ;;
    *) echo "pipelines.sh: unknown argument '$1' (see bench/pipelines.sh --help)" >&2; exit 2 ;;
    esac
done
for v in "$messages" "$flood" "$samples" "$rounds" "$window" "$port"; do
    case "$v" in
    '' | *[!0-9]* | 0) echo "pipelines.sh: '$v' is not a positive integer" >&2; exit 2 ;;
    esac
done

# shellcheck source=bench/lib.sh
. "$root/bench/lib.sh"

bdir=$root/build-bench
node_dir=$bdir/pipelines-broker
node_dirs=("$node_dir")
work=$bdir/pipelines-run
bin=${bridge:-$bdir/dlq-bridge}
tool=$bdir/bench/dlqb-bench
url="amqp://guest:guest@127.0.0.1:$port/%2f"
mgmt="http://127.0.0.1:$((port + 1))"
flood_n=$((flood * messages))

build_bench
rm -rf "$work"
mkdir -p "$work"
# The three built-in pipelines, default queue names (N.failed, N.dlx,
# N.retry.10m ...; dsr's are today's), every policy the top level's.
(umask 077 && printf '%s\n' '{"pipelines": {"dsr": {}, "redaction": {}, "reconciliation": {}}}' \
    >"$work/pipelines.json")
export DLQ_BRIDGE_CONFIG=$work/pipelines.json
start_private_node dlqb-pipelines

# ---- helpers -----------------------------------------------------------------

# The queues of pipeline $1 (dsr's review queue is compliance_review).
queues_of() {
    local review=$1.review
    [ "$1" = dsr ] && review=compliance_review
    echo "$1.work $1.failed $1.retry.10m $1.dlq.manual $review"
}
purge_pipelines() {
    local args=() q
    for q in $(queues_of dsr) $(queues_of redaction) $(queues_of reconciliation); do
        args+=(--queue "$q")
    done
    "$tool" purge --url "$url" "${args[@]}"
}
# preload PIPELINE COUNT: COUNT failures with the pipeline's profile (named
# as the pipeline) into its failure inbox, through its dead-letter exchange.
preload() {
    "$tool" publish --url "$url" --exchange "$1.dlx" --routing-key "" --kind failed \
        --profile "$1" --count "$2" --window "$window" >/dev/null
}
# The epoch at which pipeline $1 has routed $2 (its inbox empty).
routed_at() { wait_for --queue "$1.retry.10m" --queue "$1.dlq.manual" --at-least "$2" --empty "$1.failed"; }
# How many pipeline $1 has routed so far.
routed_count() {
    "$tool" wait --url "$url" --queue "$1.retry.10m" --queue "$1.dlq.manual" --at-least 0 | field count
}
# latency: S dsr failures one at a time; sets l_median, l_p95, l_confirm
# (the median of the probes' own publish confirms: the broker's part of
# the first hop) and l_busy (1: the flood was still on at the end).
latency() {
    local out
    out=$("$tool" latency --url "$url" --exchange dsr.dlx --routing-key "" --kind failed \
        --profile dsr --count "$samples" --queue dsr.retry.10m --queue dsr.dlq.manual \
        --busy reconciliation.failed --timeout-ms 60000)
    l_median=$(echo "$out" | field median_ms)
    l_p95=$(echo "$out" | field p95_ms)
    l_confirm=$(echo "$out" | field confirm_ms)
    l_busy=$(echo "$out" | field busy)
}

# Starts the daemons of a phase: mode one (one `run` serving the three
# pipelines) or separate (a `run` for dsr and one for reconciliation);
# their pids go to pids.
start_daemons() {
    local mode=$1 tag=$2
    pids=""
    if [ "$mode" = one ]; then
        start_daemon "$work/daemon-$tag.log" DLQ_BRIDGE_INSTANCE="bench-$tag"
        pids=$last_pid
    else
        local p
        for p in dsr reconciliation; do
            start_daemon "$work/daemon-$tag-$p.log" DLQ_BRIDGE_INSTANCE="bench-$tag-$p" \
                DLQ_BRIDGE_PIPELINE="$p"
            pids="$pids $last_pid"
        done
    fi
}
stop_daemons() {
    local p
    for p in $pids; do stop_daemon "$p"; done
    pids=""
}

# Every task preloaded is valid for its profile and on its first attempt,
# so all go to a retry queue: a task in a DLQ means the figures are wrong.
check_dlqs() {
    local q d
    for q in dsr.dlq.manual reconciliation.dlq.manual redaction.dlq.manual; do
        d=$("$tool" depth --url "$url" --queue "$q")
        [ "$d" = 0 ] || log "warning: $d task(s) in $q after $1 (see $work/daemon-$1*.log)"
    done
}

# alone MODE TAG: phase a); sets a_rate, then takes the idle latency
# samples (l_median, l_p95) with the daemons still running.
alone() {
    local mode=$1 tag=$2 t0 t1
    preload dsr "$messages"
    t0=$(now)
    start_daemons "$mode" "$tag"
    t1=$(routed_at dsr "$messages")
    a_rate=$(rate "$messages" "$t0" "$t1")
    latency
    stop_daemons
    check_dlqs "$tag"
    purge_pipelines
}
# flooded MODE TAG: phase b); sets b_rate (dsr), b_recon (reconciliation
# until dsr is done), b_overlap (both until dsr is done), b_total (N + F*N
# until both are done); between dsr's end and reconciliation's it takes
# the flood latency samples (l_median, l_p95, l_busy).
flooded() {
    local mode=$1 tag=$2 t0 t1 t2 recon
    preload reconciliation "$flood_n"
    preload dsr "$messages"
    t0=$(now)
    start_daemons "$mode" "$tag"
    t1=$(routed_at dsr "$messages")
    recon=$(routed_count reconciliation)
    b_rate=$(rate "$messages" "$t0" "$t1")
    b_recon=$(rate "$recon" "$t0" "$t1")
    b_overlap=$(rate $((messages + recon)) "$t0" "$t1")
    latency
    if [ "$l_busy" != 1 ]; then
        log "warning: reconciliation.failed was empty before the last latency sample (raise --flood)"
        flood_short=$((flood_short + 1))
    fi
    t2=$(routed_at reconciliation "$flood_n")
    b_total=$(rate $((messages + flood_n)) "$t0" "$t2")
    stop_daemons
    check_dlqs "$tag"
    purge_pipelines
}

# ---- the rounds ----------------------------------------------------------------

pids="" flood_short=0
one_a="" one_b="" one_recon="" one_overlap="" one_total=""
sep_a="" sep_b="" sep_recon="" sep_overlap="" sep_total=""
one_lat_a="" one_p95_a="" one_cf_a="" one_lat_b="" one_p95_b="" one_cf_b=""
sep_lat_a="" sep_p95_a="" sep_cf_a="" sep_lat_b="" sep_p95_b="" sep_cf_b=""
for round in $(seq 1 "$rounds"); do
    log "a) round $round: one daemon, $messages dsr failures, the others idle; then $samples latency samples"
    alone one "one-a-$round"
    one_a="$one_a $a_rate" one_lat_a="$one_lat_a $l_median" one_p95_a="$one_p95_a $l_p95"
    one_cf_a="$one_cf_a $l_confirm"
    log "b) round $round: one daemon, $messages dsr failures and $flood_n reconciliation failures"
    flooded one "one-b-$round"
    one_b="$one_b $b_rate" one_recon="$one_recon $b_recon" one_overlap="$one_overlap $b_overlap"
    one_total="$one_total $b_total" one_lat_b="$one_lat_b $l_median" one_p95_b="$one_p95_b $l_p95"
    one_cf_b="$one_cf_b $l_confirm"
    if [ "$separate" = 1 ]; then
        log "d) round $round: two daemons (one pipeline each), $messages dsr failures alone"
        alone separate "sep-a-$round"
        sep_a="$sep_a $a_rate" sep_lat_a="$sep_lat_a $l_median" sep_p95_a="$sep_p95_a $l_p95"
        sep_cf_a="$sep_cf_a $l_confirm"
        log "d) round $round: two daemons, $messages dsr and $flood_n reconciliation failures"
        flooded separate "sep-b-$round"
        sep_b="$sep_b $b_rate" sep_recon="$sep_recon $b_recon" sep_overlap="$sep_overlap $b_overlap"
        sep_total="$sep_total $b_total" sep_lat_b="$sep_lat_b $l_median" sep_p95_b="$sep_p95_b $l_p95"
        sep_cf_b="$sep_cf_b $l_confirm"
    fi
done

# ---- report -----------------------------------------------------------------------

# Decimal medians (latency in ms); median (bench/lib.sh) rounds to integers
# only for an even count of rounds.
median_ms() { tr ' ' '\n' | awk 'NF' | sort -n | awk '{ v[NR] = $1 } END { if (NR == 0) print "n/a"; else if (NR % 2) print v[(NR + 1) / 2]; else printf "%.1f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
row() { printf '| %-62s | %10s | %10s |\n' "$@"; }
sep_or_na() { if [ "$separate" = 1 ]; then echo "$1" | median; else echo n/a; fi; }

printf '\n'
printf 'dlq-bridge pipelines benchmark: dsr %s failures, reconciliation flood %s (x%s), %s latency samples, %s round(s) (median)\n' \
    "$messages" "$flood_n" "$flood" "$samples" "$rounds"
printf 'dlq-bridge: %s\n' "$bin"
printf 'broker: RabbitMQ %s on 127.0.0.1:%s, %s CPUs, load average %s; %s\n' \
    "$(curl -s -u guest:guest "$mgmt/api/overview" | sed -n 's/.*"rabbitmq_version":"\([^"]*\)".*/\1/p')" \
    "$port" "$(nproc)" "$(cut -d' ' -f1-3 /proc/loadavg)" "$(date -u +%Y-%m-%dT%H:%M:%SZ)"
printf '\n'
row "routing (msg/s)" "one daemon" "two daemons"
row "$(printf -- '-%.0s' $(seq 62))" "---------:" "---------:"
row "a) dsr alone (the other pipelines idle)" "$(echo "$one_a" | median)" "$(sep_or_na "$sep_a")"
row "b) dsr while reconciliation is flooded" "$(echo "$one_b" | median)" "$(sep_or_na "$sep_b")"
row "b) reconciliation, until dsr is done" "$(echo "$one_recon" | median)" "$(sep_or_na "$sep_recon")"
row "b) both, until dsr is done" "$(echo "$one_overlap" | median)" "$(sep_or_na "$sep_overlap")"
row "b) all $((messages + flood_n)), until both are done" "$(echo "$one_total" | median)" "$(sep_or_na "$sep_total")"

# Ratios pair the measurements of one round (paired, bench/lib.sh); the
# share is dsr's part of what both routed while both were busy.
printf '\n'
row "ratio (median of per-round ratios; fair: see docs/performance.md)" "one daemon" "two daemons"
row "$(printf -- '-%.0s' $(seq 62))" "---------:" "---------:"
row "b) dsr flooded / a) dsr alone" "$(paired "$one_b" "$one_a")" \
    "$([ "$separate" = 1 ] && paired "$sep_b" "$sep_a" || echo n/a)"
row "b) dsr's share of both, until dsr is done (fair: 0.50)" "$(paired "$one_b" "$one_overlap")" \
    "$([ "$separate" = 1 ] && paired "$sep_b" "$sep_overlap" || echo n/a)"
row "b) both until dsr is done / a) dsr alone" "$(paired "$one_overlap" "$one_a")" \
    "$([ "$separate" = 1 ] && paired "$sep_overlap" "$sep_a" || echo n/a)"
row "one daemon / two daemons: a) dsr alone" "$([ "$separate" = 1 ] && paired "$one_a" "$sep_a" || echo n/a)" "-"
row "one daemon / two daemons: b) dsr flooded" "$([ "$separate" = 1 ] && paired "$one_b" "$sep_b" || echo n/a)" "-"

lat_row() { printf '| %-40s | %9s | %9s | %7s |\n' "$@"; }
lat_rows() {
    lat_row "$1, median of $samples samples" "$(echo "$2" | median_ms)" "$(echo "$4" | median_ms)" \
        "$(paired "$4" "$2")"
    lat_row "$1, p95 of $samples samples" "$(echo "$3" | median_ms)" "$(echo "$5" | median_ms)" \
        "$(paired "$5" "$3")"
    lat_row "$1, its publish confirm, median" "$(echo "$6" | median_ms)" "$(echo "$7" | median_ms)" \
        "$(paired "$7" "$6")"
}
printf '\n'
lat_row "c) dsr latency (ms)" "idle" "flooded" "ratio"
lat_row "----------------------------------------" "--------:" "--------:" "------:"
lat_rows "one daemon" "$one_lat_a" "$one_p95_a" "$one_lat_b" "$one_p95_b" "$one_cf_a" "$one_cf_b"
[ "$separate" = 1 ] &&
    lat_rows "two daemons" "$sep_lat_a" "$sep_p95_a" "$sep_lat_b" "$sep_p95_b" "$sep_cf_a" "$sep_cf_b"
[ "$separate" = 1 ] &&
    lat_row "median, one daemon / two daemons" "$(paired "$one_lat_a" "$sep_lat_a")" \
        "$(paired "$one_lat_b" "$sep_lat_b")" "-"
[ "$flood_short" -gt 0 ] &&
    printf '\nwarning: in %s round(s) the flood ended before the last latency sample\n' "$flood_short"

printf '\nper round (msg/s): one a)%s | b)%s | recon%s | total%s\n' "$one_a" "$one_b" "$one_recon" "$one_total"
[ "$separate" = 1 ] &&
    printf 'per round (msg/s): two a)%s | b)%s | recon%s | total%s\n' "$sep_a" "$sep_b" "$sep_recon" "$sep_total"
printf 'per round latency (ms): one idle median%s p95%s | flooded median%s p95%s\n' \
    "$one_lat_a" "$one_p95_a" "$one_lat_b" "$one_p95_b"
[ "$separate" = 1 ] &&
    printf 'per round latency (ms): two idle median%s p95%s | flooded median%s p95%s\n' \
        "$sep_lat_a" "$sep_p95_a" "$sep_lat_b" "$sep_p95_b"
printf 'logs: %s\n' "$work"
