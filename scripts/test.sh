#!/usr/bin/env bash
# The test command: installs missing dependencies, then builds and tests
# dlq-bridge twice -- a RelWithDebInfo build in build/ and an
# AddressSanitizer + UndefinedBehaviorSanitizer build in build-asan/ -- running
# the unit tests and then the broker tests (each build starts its own private
# RabbitMQ node, on ports 31672.. and 30672.., so the two never collide).
#
# Then the compose quick start runs for real (scripts/compose-test.sh: its
# own docker engine, docker/docker-compose.yml next to RabbitMQ 4.0; about
# 1.5 minutes with its images cached, 4 without; skipped with one line only
# where dockerd cannot start at all).
#
# Then the unit and broker tests run once more under ThreadSanitizer in
# build-tsan/ (clang, ports 29672..; the audit writer, the escalator and the
# metrics server are threads), and the libFuzzer targets get a bounded run
# each in build-fuzz/ (clang).
#
# usage: scripts/test.sh [--quick] [--long]
#   --quick  skips the sanitizer, thread-sanitizer and fuzz builds
#   --long   also runs the long fault tests (label "long": a three-node
#            cluster losing a node, and every fault test longer, with
#            DLQB_TEST_LONG=1); adds about 10 minutes per build
set -euo pipefail

cd "$(dirname "$0")/.."
root=$(pwd)

quick=0
long=0
for arg in "$@"; do
    case "$arg" in
    --quick) quick=1 ;;
    --long) long=1 ;;
    -h|--help) sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p;}' "$0"; exit 0 ;;
    *) echo "test.sh: unknown argument '$arg' (usage: scripts/test.sh [--quick] [--long])" >&2; exit 2 ;;
    esac
done

started=$SECONDS
step() { printf '\n==> %s  (%ds)\n' "$*" $((SECONDS - started)); }
fail() { printf '\ntest.sh: FAILED: %s  (after %ds)\n' "$*" $((SECONDS - started)) >&2; exit 1; }

# A broker node outlives ctest only when ctest itself is interrupted; stop
# any node the broker fixture left behind so the next run starts clean.
stop_nodes() {
    local b
    for b in build build-asan build-tsan; do
        for dir in "$root/$b/test-broker" "$root/$b/test-broker-tls"; do
            [ -f "$dir/server.pid" ] && "$root/scripts/broker-node.sh" stop "$dir" >/dev/null 2>&1
        done
    done
    return 0
}
trap stop_nodes EXIT

# Builds one configuration and runs its unit tests, then its broker tests.
#   $1 build dir   $2 AMQP port of its test node   $3.. extra cmake arguments
build_and_test() {
    local dir=$1 port=$2
    shift 2
    step "configure $dir"
    cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDLQB_WERROR=ON \
        -DDLQB_TEST_BROKER_PORT="$port" "$@" ||
        fail "cmake configure of $dir"
    step "build $dir"
    cmake --build "$dir" -j2 || fail "build of $dir"
    step "unit tests ($dir)"
    ctest --test-dir "$dir" --output-on-failure -j2 -L unit || fail "unit tests in $dir"
    step "broker tests ($dir)"
    ctest --test-dir "$dir" --output-on-failure -L broker ||
        fail "broker tests in $dir (bridge logs: $dir/tests/broker/logs/)"
    if [ "$long" = 1 ]; then
        step "long tests ($dir)"
        DLQB_TEST_LONG=1 ctest --test-dir "$dir" --output-on-failure -R '^broker\.(faults|cluster)$' ||
            fail "long tests in $dir (bridge logs: $dir/tests/broker/logs/)"
    fi
}

step "dependencies"
scripts/install-deps.sh || fail "missing dependencies (see above)"

build_and_test build 31672

step "compose test (docker/docker-compose.yml, its own docker engine)"
compose_rc=0
scripts/compose-test.sh || compose_rc=$?
case "$compose_rc" in
0) ;;
77) ;; # skipped: it printed why
*) fail "compose test (logs: build/compose-test/)" ;;
esac

if [ "$quick" = 1 ]; then
    step "skipping the sanitizer build (--quick)"
else
    export ASAN_OPTIONS=detect_leaks=1
    export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
    build_and_test build-asan 30672 -DDLQB_SANITIZE=ON
    # ThreadSanitizer over the unit tests and the broker tests: the daemon's
    # threads (audit writer, escalator, metrics server and refresher) only
    # meet the main thread's shutdown and reconnects in a real run.
    export TSAN_OPTIONS=halt_on_error=1
    CC=clang build_and_test build-tsan 29672 -DDLQB_TSAN=ON -DDLQB_BROKER_TESTS=ON

    # The fuzz targets: a bounded run each, replaying tests/fuzz/corpus/
    # (seeds and every past finding) first. They need clang.
    step "configure build-fuzz"
    CC=clang cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDLQB_FUZZ=ON -DDLQB_WERROR=ON \
        -DDLQB_BROKER_TESTS=OFF || fail "cmake configure of build-fuzz"
    step "build build-fuzz"
    cmake --build build-fuzz -j2 --target fuzz_all ||
        fail "build of build-fuzz"
    step "fuzz tests (build-fuzz)"
    ctest --test-dir build-fuzz --output-on-failure -j2 -L fuzz || fail "fuzz tests in build-fuzz"
fi

step "all tests passed"
