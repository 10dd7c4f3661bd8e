#!/usr/bin/env bash
# The test command: installs missing dependencies, then builds and tests
# dlq-bridge, each build running the unit tests and then the broker tests
# against a private RabbitMQ node of its own (scripts/broker-node.sh):
#   build/       RelWithDebInfo, RabbitMQ 3.10.8 (this machine's, Debian bookworm), ports 31672..
#   build-rmq4/  RelWithDebInfo, RabbitMQ 4.0.5 (Debian trixie's, run chrooted from a
#                cached debootstrap root that scripts/debian-root.sh builds once), ports 28672..
#   build-asan/  AddressSanitizer + UndefinedBehaviorSanitizer, RabbitMQ 3.10, ports 30672..
#   build-tsan/  ThreadSanitizer (clang; the audit writer, the escalator and the metrics
#                server are threads), RabbitMQ 3.10, ports 29672..
# The sanitizer builds stay on 3.10: they look for faults in the bridge's own
# memory and threads, which no broker version changes, and running them on
# both would double the longest part of CI; every broker difference is covered
# by build-rmq4. Every build is compiled and unit-tested first; then three
# lanes run side by side, each with its own nodes and its own log under
# build/ (printed when all have ended, a failed lane's last): 3.10 (the
# broker suites of build/, then of build-asan/), 4.0 (build-rmq4/'s, then
# build-tsan/'s) and packaging (build-trixie/ against trixie's rabbitmq-c
# 0.15, bookworm's being 0.11, with its unit tests inside a cached trixie
# build root; tests/deb/test-deb.sh taking the Debian package through
# install, upgrade and purge in a fresh bookworm root and piuparts; then the
# libFuzzer targets, a bounded run each in build-fuzz/, clang; then the
# runbook's 3 a.m. transcripts, which --quick runs in the 3.10 lane).
# DLQB_TEST_SERIAL=1 runs the lanes one after the other, streamed. Every
# build but build-trixie (a packager's view) treats compiler warnings as
# errors (-DDLQB_WERROR=ON).
#
# First, after installing what is missing here, scripts/stock-check.sh runs
# scripts/install-deps.sh and a browser smoke in a throwaway stock bookworm
# root (debootstrap minbase, nothing preinstalled): a dependency only this
# machine provides fails the run there (7 to 8 minutes with its downloads
# cached, measured on 2 cores at load 16 to 20; the first run also downloads
# about 490 MB; not with --quick or --broker, nor inside such a root). It
# runs in the background beside the builds and the lanes, and is waited for
# before the compose test.
#
# After the lanes the compose quick start runs for real
# (scripts/compose-test.sh: its own docker engine, docker/docker-compose.yml
# next to RabbitMQ 4.0; about 1.5 minutes with its images cached, 4 without;
# skipped with one line only where dockerd cannot start at all; not with
# --quick or --broker).
#
# A step that cannot run (no docker engine, a ctest check whose tool is
# missing) or that an option leaves out is a skip, not a pass: the run then
# ends listing what did not run and why, and its last line does not say
# "all tests passed". Under CI (CI=true, as .ci/run has it) or --strict a
# skip fails the run with its reason (scripts/test-skips.sh).
#
# usage: scripts/test.sh [--quick] [--long] [--broker 3.10|4.0] [--strict] [--only compose]
#   --quick   skips the stock bookworm check, the sanitizer, thread-sanitizer,
#             fuzz and rabbitmq-c 0.15 builds and the package test (each
#             named as skipped at the end)
#   --long    also runs the long fault tests (label "long": a three-node
#             cluster losing a node, and every fault test longer, with
#             DLQB_TEST_LONG=1); adds about 10 minutes per build
#   --broker  runs the broker suites against that RabbitMQ only (build/ for
#             3.10, build-rmq4/ for 4.0; the sanitizer builds only with 3.10),
#             e.g. `scripts/test.sh --broker 4.0 --quick` to chase a 4.x bug
#   --strict  a skipped step fails the run (the default under CI=true)
#   --only compose  the dependencies, then the compose test alone
# DLQB_FORCE_SKIP=compose[,stock] makes those steps skip as if they could not
# run here (the test of the skip accounting, tests/check_test_skips.sh).
# DLQB_TEST_PORT_SHIFT=N (default 0) moves every build's ports by N, so a
# second checkout on the same machine can test beside the first.
set -euo pipefail

cd "$(dirname "$0")/.."
root=$(pwd)
# Debian's own tools before anything a machine adds in front of them (a
# pyenv python3 with its own pip packages instead of python3-yaml, a docker
# client in /usr/local/bin): the suite tests what a bookworm has.
export PATH=/usr/sbin:/usr/bin:/sbin:/bin:$PATH

usage="usage: scripts/test.sh [--quick] [--long] [--broker 3.10|4.0] [--strict] [--only compose]"
quick=0
long=0
broker=all
only=""
while [ $# -gt 0 ]; do
    case "$1" in
    --quick) quick=1 ;;
    --long) long=1 ;;
    --broker)
        case "${2:-}" in
        3.10 | 4.0) broker=$2; shift ;;
        *) echo "test.sh: --broker takes 3.10 or 4.0, not '${2:-}' ($usage)" >&2; exit 2 ;;
        esac
        ;;
    --strict) export DLQB_STRICT=1 ;;
    --only)
        case "${2:-}" in
        compose) only=$2; shift ;;
        *) echo "test.sh: --only takes compose, not '${2:-}' ($usage)" >&2; exit 2 ;;
        esac
        ;;
    -h|--help) sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p;}' "$0"; exit 0 ;;
    *) echo "test.sh: unknown argument '$1' ($usage)" >&2; exit 2 ;;
    esac
    shift
done
shift_by=${DLQB_TEST_PORT_SHIFT:-0}
case "$shift_by" in
-[0-9]* | [0-9]*) [ "$shift_by" -eq "$shift_by" ] 2>/dev/null ||
    { echo "test.sh: DLQB_TEST_PORT_SHIFT must be an integer, not '$shift_by'" >&2; exit 2; } ;;
*) echo "test.sh: DLQB_TEST_PORT_SHIFT must be an integer, not '$shift_by'" >&2; exit 2 ;;
esac
port() { echo $(($1 + shift_by)); }
wants() { [ "$broker" = all ] || [ "$broker" = "$1" ]; }

started=$SECONDS
step() { printf '\n==> %s  (%ds)\n' "$*" $((SECONDS - started)); }
fail() { printf '\ntest.sh: FAILED: %s  (after %ds)\n' "$*" $((SECONDS - started)) >&2; exit 1; }
# shellcheck source=scripts/test-skips.sh
. scripts/test-skips.sh
skips_reset

# A broker node outlives ctest only when ctest itself is interrupted; stop
# any node the broker fixture left behind so the next run starts clean.
stop_nodes() {
    local b
    [ "$only" = "" ] || return 0 # this run started no node (and another run's are not its own)
    # (build-rmq4's node is RabbitMQ 4.0 on ports 28672..: broker-node.sh
    # stop follows what the node's node.env recorded.)
    for b in build build-rmq4 build-asan build-tsan; do
        for dir in "$root/$b/test-broker" "$root/$b/test-broker-tls" "$root/$b/test-cluster/n"[123]; do
            [ -f "$dir/server.pid" ] && "$root/scripts/broker-node.sh" stop "$dir" >/dev/null 2>&1
        done
    done
    return 0
}
# A stock bookworm check still running in the background when the run
# fails is stopped too.
stop_all() {
    [ -z "${stock_pid:-}" ] || kill "$stock_pid" 2>/dev/null || true
    local pid
    for pid in "${lane_pids[@]}"; do
        pkill -TERM -P "$pid" 2>/dev/null || true
        kill "$pid" 2>/dev/null || true
    done
    stop_nodes
}
trap stop_all EXIT

# Builds one configuration and runs its unit tests.
#   $1 build dir   $2 AMQP port of its test node   $3 RabbitMQ version
#   $4.. extra cmake arguments
build_and_unit() {
    local dir=$1 port=$2 version=$3
    shift 3
    step "configure $dir (RabbitMQ $version)"
    cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDLQB_WERROR=ON \
        -DDLQB_TEST_BROKER_PORT="$port" -DDLQB_TEST_BROKER_VERSION="$version" "$@" ||
        fail "cmake configure of $dir"
    step "build $dir"
    cmake --build "$dir" -j2 || fail "build of $dir"
    step "unit tests ($dir)"
    ctest --test-dir "$dir" --output-on-failure -j2 -L unit --output-junit "$(skip_junit "$dir" unit)" ||
        fail "unit tests in $dir"
}

# The long fault tests of one build (--long only).
long_tests() {
    local dir=$1
    [ "$long" = 1 ] || return 0
    step "long tests ($dir)"
    DLQB_TEST_LONG=1 ctest --test-dir "$dir" --output-on-failure -R '^broker\.(faults|cluster)$' \
        --output-junit "$(skip_junit "$dir" long)" ||
        fail "long tests in $dir (bridge logs: $dir/tests/broker/logs/)"
}

# Runs the broker suites of one build against its own node, streamed.
#   $1 build dir   $2 its RabbitMQ version
broker_tests() {
    step "broker tests ($1, RabbitMQ $2)"
    ctest --test-dir "$1" --output-on-failure -L broker --output-junit "$(skip_junit "$1" broker)" ||
        fail "broker tests in $1 (bridge logs: $1/tests/broker/logs/)"
}

# Lanes: sequences of steps that run beside each other, each in the
# background with its output in its own log, printed when all have ended
# (a failed lane's last, so the end of the run shows what failed). The
# broker suites of a build wait mostly on their node and on the bridge's
# timers (measured: load average 0.6 on 2 cores while build/'s suites ran
# alone, its node's beam.smp at 15 % of a core), so two builds' suites
# against their own nodes, and the package and fuzz steps, overlap well:
# the last CI run, all four suites one after the other, failed at 2,744 s
# with TSan's suites, the trixie build, the package and fuzz still to come;
# in lanes on the same machine, at a load of 4 to 8 from other work, all
# of it had ended after 1,590 s. DLQB_TEST_SERIAL=1 runs the lanes one after the other, streamed
# (for a machine already loaded by other work).
lane_names=()
lane_pids=()
lane_logs=()
lane() {
    local name=$1 log=$2
    shift 2
    if [ "${DLQB_TEST_SERIAL:-0}" = 1 ]; then
        step "lane $name"
        "$@"
        return 0
    fi
    step "lane $name in the background: $log"
    mkdir -p "$(dirname "$log")"
    ("$@") >"$log" 2>&1 &
    lane_names+=("$name")
    lane_pids+=($!)
    lane_logs+=("$log")
}
await_lanes() {
    local i rc failed=() order=()
    for i in "${!lane_pids[@]}"; do
        rc=0
        wait "${lane_pids[$i]}" || rc=$?
        step "lane ${lane_names[$i]} ended (exit $rc)"
        if [ "$rc" = 0 ]; then order=("$i" "${order[@]}"); else order+=("$i"); failed+=("${lane_names[$i]}"); fi
    done
    for i in "${order[@]}"; do
        printf '\n==== lane %s: %s ====\n' "${lane_names[$i]}" "${lane_logs[$i]}"
        cat "${lane_logs[$i]}"
    done
    lane_names=()
    lane_pids=()
    lane_logs=()
    [ ${#failed[@]} -eq 0 ] || fail "lane ${failed[*]} (its log is printed above)"
}

# The compose quick start on its own docker engine; exit 77 is a skip
# (dockerd cannot start here), which it gives one line of reason for.
compose_test() {
    step "compose test (docker/docker-compose.yml, its own docker engine)"
    local rc=0
    scripts/compose-test.sh || rc=$?
    case "$rc" in
    0) ;;
    77) skip_step "compose test" "$(cat build/compose-test/skipped.txt 2>/dev/null || echo "compose-test.sh gave no reason")" ;;
    *) fail "compose test (logs: build/compose-test/)" ;;
    esac
}

step "dependencies"
scripts/install-deps.sh || fail "missing dependencies (see above)"

if [ "$only" = compose ]; then
    compose_test
    skips_finish
    exit 0
fi

# In a stock root already (scripts/stock-test.sh), install-deps.sh above
# started from stock: the check would repeat it.
# It runs in the background while the first builds and broker suites run
# (it waits mostly on downloads and dpkg, they on their brokers), and is
# waited for before the compose test.
stock_pid=""
if [ "$quick" = 0 ] && [ "$broker" = all ] && [ ! -e /etc/dlqb-stock-root ] && skip_forced stock; then
    skip_step "stock bookworm check" "forced by DLQB_FORCE_SKIP"
elif [ "$quick" = 0 ] && [ "$broker" = all ] && [ ! -e /etc/dlqb-stock-root ]; then
    step "stock bookworm check in the background (install-deps.sh and the browser smoke from stock; build/stock-check.out)"
    mkdir -p build
    scripts/stock-check.sh >build/stock-check.out 2>&1 &
    stock_pid=$!
fi
stock_check_wait() {
    local rc=0
    [ -n "$stock_pid" ] || return 0
    wait "$stock_pid" || rc=$?
    stock_pid=""
    step "stock bookworm check ended (exit $rc)"
    cat build/stock-check.out
    [ "$rc" = 0 ] || fail "stock bookworm check (log: build/stock-check.log)"
}

# Builds the bridge in build-trixie/ against Debian trixie's rabbitmq-c 0.15
# and runs the cmocka unit tests there: chrooted into a cached trixie build
# root, with the source tree bind-mounted at /mnt inside a private mount
# namespace (so no mount outlives the step or shows outside it). The deploy.*
# checks compare files, not the library, and need tools the root lacks.
trixie_build() {
    local troot
    step "trixie build root (rabbitmq-c 0.15)"
    troot=$(scripts/debian-root.sh trixie trixie-build \
        build-essential,cmake,pkg-config,librabbitmq-dev,libssl-dev,libjson-c-dev,libcmocka-dev,libmicrohttpd-dev) ||
        fail "building the trixie build root"
    step "build-trixie: configure, build and unit tests against rabbitmq-c 0.15"
    # Its JUnit file as the root sees it (the tree is its /mnt).
    local junit
    junit=$(skip_junit build-trixie unit)
    junit=/mnt/${junit#"$root"/}
    # shellcheck disable=SC2016 # expanded by the inner shells
    unshare --mount --propagation private -- /bin/sh -euc '
        mount --rbind /proc "$1/proc"
        mount --rbind /dev "$1/dev"
        mount --bind "$2" "$1/mnt"
        exec chroot "$1" /bin/sh -euc "
            cmake -S /mnt -B /mnt/build-trixie -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDLQB_BROKER_TESTS=OFF
            cmake --build /mnt/build-trixie -j2
            ctest --test-dir /mnt/build-trixie --output-on-failure -j2 -R \"^unit[.]\" --output-junit \"\$0\"" "$3"' \
        sh "$troot" "$root" "$junit" || fail "build or unit tests against rabbitmq-c 0.15 in build-trixie"
}

# Every build first (compiling is what loads the cores), then the lanes.
full=0
if [ "$quick" = 0 ]; then full=1; fi
if wants 3.10; then build_and_unit build "$(port 31672)" 3.10; fi
if wants 4.0; then build_and_unit build-rmq4 "$(port 28672)" 4.0; fi
if [ "$full" = 1 ] && wants 3.10; then
    export ASAN_OPTIONS=detect_leaks=1
    export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
    build_and_unit build-asan "$(port 30672)" 3.10 -DDLQB_SANITIZE=ON
    # ThreadSanitizer over the unit tests and the broker tests: the daemon's
    # threads (audit writer, escalator, metrics server and refresher) only
    # meet the main thread's shutdown and reconnects in a real run.
    export TSAN_OPTIONS=halt_on_error=1
    CC=clang build_and_unit build-tsan "$(port 29672)" 3.10 -DDLQB_TSAN=ON -DDLQB_BROKER_TESTS=ON
fi
if [ "$quick" = 1 ]; then
    step "skipping the stock bookworm check, the sanitizer, fuzz, package and rabbitmq-c 0.15 builds (--quick)"
    for part in "stock bookworm check" "AddressSanitizer build" "ThreadSanitizer build" \
        "rabbitmq-c 0.15 build" "Debian package test" "fuzz targets" "compose test"; do
        skip_step "$part" "left out by --quick"
    done
fi
if [ "$broker" != all ]; then
    other=4.0
    [ "$broker" = 4.0 ] && other=3.10
    skip_step "RabbitMQ $other broker suites" "left out by --broker $broker"
    [ "$quick" = 1 ] || skip_step "compose test" "left out by --broker $broker"
fi

# The runbook's 3 a.m. session recorded at 80 and 120 columns, each on a
# node of its own (scripts/record-3am.sh fails on a line wider than the
# terminal or an id shown cut); docs/3am-session.txt and
# docs/3am-session-120.txt are its output, committed.
transcripts() {
    step "3 a.m. transcripts (scripts/record-3am.sh at 80 and 120 columns)"
    local w
    for w in 80 120; do
        DLQB_RECORD_PORT=$((26290 + ${DLQB_TEST_PORT_SHIFT:-0})) \
            scripts/record-3am.sh "build/3am-session-$w.txt" "$w" ||
            fail "3 a.m. transcript at $w columns (build/3am-session-$w.txt)"
    done
}

# The 3.10 lane: the plain build's suites, the transcripts (in the
# packaging lane when there is one: it ends about 25 minutes before the
# broker lanes, and this one was the longest by their 48 s), then
# AddressSanitizer's suites.
lane_310() {
    broker_tests build 3.10
    [ "$full" = 1 ] || transcripts
    long_tests build
    if [ "$full" = 1 ]; then
        broker_tests build-asan 3.10
        long_tests build-asan
    fi
}
# The 4.0 lane: the plain build on 4.0, then ThreadSanitizer's on 3.10 (its
# own node: the two lanes never share one).
lane_40() {
    if wants 4.0; then
        broker_tests build-rmq4 4.0
        long_tests build-rmq4
    fi
    if [ "$full" = 1 ] && wants 3.10; then
        broker_tests build-tsan 3.10
        long_tests build-tsan
    fi
}
# The packaging lane: the build against rabbitmq-c 0.15, the Debian package
# and the fuzz targets; none needs a test node of the other lanes.
lane_packaging() {
    trixie_build
    # The Debian package: built (lintian), installed, run against a broker,
    # upgraded, refused a downgrade, removed and purged in a fresh bookworm
    # root, then piuparts (docs/deploy-systemd.md, "Checked by the tests").
    step "Debian package (tests/deb/test-deb.sh)"
    tests/deb/test-deb.sh || fail "Debian package test (logs: build-deb/test/)"
    # The fuzz targets: a bounded run each, replaying tests/fuzz/corpus/
    # (seeds and every past finding) first. They need clang.
    step "configure build-fuzz"
    CC=clang cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDLQB_FUZZ=ON -DDLQB_WERROR=ON \
        -DDLQB_BROKER_TESTS=OFF || fail "cmake configure of build-fuzz"
    step "build build-fuzz"
    cmake --build build-fuzz -j2 --target fuzz_all || fail "build of build-fuzz"
    step "fuzz tests (build-fuzz)"
    ctest --test-dir build-fuzz --output-on-failure -j2 -L fuzz --output-junit "$(skip_junit build-fuzz fuzz)" ||
        fail "fuzz tests in build-fuzz"
    if wants 3.10; then transcripts; fi
}

if wants 3.10; then lane 3.10 build/lane-3.10.log lane_310; fi
if wants 4.0 || { [ "$full" = 1 ] && wants 3.10; }; then lane 4.0 build/lane-4.0.log lane_40; fi
if [ "$full" = 1 ]; then lane packaging build/lane-packaging.log lane_packaging; fi
await_lanes
stock_check_wait

if [ "$full" = 1 ] && [ "$broker" = all ]; then
    compose_test
fi

skips_finish
