#!/usr/bin/env bash
# The test command: installs missing dependencies, then builds and tests
# dlq-bridge twice -- a RelWithDebInfo build in build/ and an
# AddressSanitizer + UndefinedBehaviorSanitizer build in build-asan/ -- running
# the unit tests and then the broker tests (each build starts its own private
# RabbitMQ node, on ports 35672.. and 36672.., so the two never collide).
#
# usage: scripts/test.sh [--quick]     --quick skips the sanitizer build
set -euo pipefail

cd "$(dirname "$0")/.."
root=$(pwd)

quick=0
for arg in "$@"; do
    case "$arg" in
    --quick) quick=1 ;;
    -h|--help) sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "test.sh: unknown argument '$arg' (usage: scripts/test.sh [--quick])" >&2; exit 2 ;;
    esac
done

started=$SECONDS
step() { printf '\n==> %s  (%ds)\n' "$*" $((SECONDS - started)); }
fail() { printf '\ntest.sh: FAILED: %s  (after %ds)\n' "$*" $((SECONDS - started)) >&2; exit 1; }

# A broker node outlives ctest only when ctest itself is interrupted; stop
# any node the broker fixture left behind so the next run starts clean.
stop_nodes() {
    for dir in "$root/build/test-broker" "$root/build-asan/test-broker" \
               "$root/build/test-broker-tls" "$root/build-asan/test-broker-tls"; do
        [ -f "$dir/server.pid" ] && "$root/scripts/broker-node.sh" stop "$dir" >/dev/null 2>&1
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
    cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
        -DDLQB_TEST_BROKER_PORT="$port" "$@" ||
        fail "cmake configure of $dir"
    step "build $dir"
    cmake --build "$dir" -j2 || fail "build of $dir"
    step "unit tests ($dir)"
    ctest --test-dir "$dir" --output-on-failure -j2 -L unit || fail "unit tests in $dir"
    step "broker tests ($dir)"
    ctest --test-dir "$dir" --output-on-failure -L broker ||
        fail "broker tests in $dir (bridge logs: $dir/tests/broker/logs/)"
}

step "dependencies"
scripts/install-deps.sh || fail "missing dependencies (see above)"

build_and_test build 35672

if [ "$quick" = 1 ]; then
    step "skipping the sanitizer build (--quick)"
else
    export ASAN_OPTIONS=detect_leaks=1
    export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
    build_and_test build-asan 36672 -DDLQB_SANITIZE=ON
fi

step "all tests passed"
