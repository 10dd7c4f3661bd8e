#!/usr/bin/env bash
# The test command's own accounting of skips (scripts/test-skips.sh): a
# step forced to skip fails scripts/test.sh under CI=true, naming the step
# and its reason; without CI the run passes but lists the step, and its
# last line does not say "all tests passed". Then the ctest part: a check
# skipped in one build and run in another was checked; one that ran in no
# build is named with the first line it printed.
#   usage: tests/check_test_skips.sh SOURCE_DIR
set -euo pipefail
src=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
bad() { echo "check_test_skips: $*" >&2; exit 1; }

run() { # $1 name, then the environment and arguments; output in $tmp/$1.out, status in rc
    local name=$1
    shift
    rc=0
    env -u CI -u DLQB_STRICT DLQB_SKIPS_DIR="$tmp/skips-$name" "$@" >"$tmp/$name.out" 2>&1 || rc=$?
}

# Under CI: exit 1, the step and why on the failing line.
run ci CI=true DLQB_FORCE_SKIP=compose "$src/scripts/test.sh" --only compose
[ "$rc" = 1 ] || { cat "$tmp/ci.out"; bad "CI=true with the compose test skipped exited $rc, not 1"; }
grep -q "^test.sh: FAILED: step 'compose test' was skipped (forced by DLQB_FORCE_SKIP=compose)" "$tmp/ci.out" ||
    { cat "$tmp/ci.out"; bad "CI=true: no FAILED line naming the compose test and its reason"; }
grep -q "all tests passed" "$tmp/ci.out" && bad "CI=true: a failed run still said 'all tests passed'"

# --strict is CI's rule on any machine.
run strict DLQB_FORCE_SKIP=compose "$src/scripts/test.sh" --strict --only compose
[ "$rc" = 1 ] || { cat "$tmp/strict.out"; bad "--strict with the compose test skipped exited $rc, not 1"; }

# Without CI: exit 0, the skip listed, and the last line says not all ran.
run local DLQB_FORCE_SKIP=compose "$src/scripts/test.sh" --only compose
[ "$rc" = 0 ] || { cat "$tmp/local.out"; bad "without CI a skip exited $rc, not 0"; }
grep -q '^skipped (1):$' "$tmp/local.out" || { cat "$tmp/local.out"; bad "without CI: no 'skipped (1):' summary"; }
grep -q '^  compose test: forced by DLQB_FORCE_SKIP=compose$' "$tmp/local.out" ||
    { cat "$tmp/local.out"; bad "without CI: the summary does not name the compose test and why"; }
last=$(grep -v '^$' "$tmp/local.out" | tail -n 1)
case "$last" in
*"all tests passed"*) bad "without CI the last line says '$last' though the compose test did not run" ;;
*"not all tests ran"*) ;;
*) bad "without CI the last line is '$last', which does not say that not all tests ran" ;;
esac

# The ctest part, from real ctest JUnit files: a project whose check skips
# when SKIP_IT is set, run once skipping and once not (two builds), then
# once skipping only.
mkdir -p "$tmp/proj"
cat >"$tmp/proj/CMakeLists.txt" <<'CMAKE'
cmake_minimum_required(VERSION 3.21)
project(skips NONE)
enable_testing()
add_test(NAME unit.tool COMMAND sh -c "if [ -n \"$SKIP_IT\" ]; then echo 'no tool here: not checked'; exit 77; fi")
set_tests_properties(unit.tool PROPERTIES SKIP_RETURN_CODE 77)
add_test(NAME unit.plain COMMAND true)
CMAKE
cmake -S "$tmp/proj" -B "$tmp/proj/b" >/dev/null
summary() { # $1 skips dir: what skips_finish prints, and its status in rc
    rc=0
    (
        cd "$src"
        step() { printf '==> %s\n' "$*"; }
        fail() { printf 'FAILED: %s\n' "$*"; exit 1; }
        DLQB_SKIPS_DIR=$1
        unset CI DLQB_STRICT
        . scripts/test-skips.sh
        skips_finish
    ) >"$tmp/summary.out" 2>&1 || rc=$?
}
mkdir -p "$tmp/j1/junit" "$tmp/j2/junit"
SKIP_IT=1 ctest --test-dir "$tmp/proj/b" --output-junit "$tmp/j1/junit/trixie.unit.xml" >/dev/null
ctest --test-dir "$tmp/proj/b" --output-junit "$tmp/j1/junit/build.unit.xml" >/dev/null
summary "$tmp/j1"
grep -q "^==> all tests passed$" "$tmp/summary.out" ||
    { cat "$tmp/summary.out"; bad "a check skipped in one build and passed in another was counted as skipped"; }
SKIP_IT=1 ctest --test-dir "$tmp/proj/b" --output-junit "$tmp/j2/junit/build.unit.xml" >/dev/null
summary "$tmp/j2"
grep -q '^  ctest unit.tool: no tool here: not checked$' "$tmp/summary.out" ||
    { cat "$tmp/summary.out"; bad "a check that ran in no build is not named with its reason"; }
grep -q "unit.plain" "$tmp/summary.out" && bad "a check that ran is listed as skipped"
grep -q "all tests passed" "$tmp/summary.out" && bad "'all tests passed' with a check that ran nowhere"
echo "check_test_skips: a forced skip fails under CI and --strict, is listed without; ctest skips counted across builds"
