#!/usr/bin/env bash
# Longer fuzzing runs than the bounded ones in the test suite.
#
# Builds the libFuzzer targets in build-fuzz/ (clang, ASan + UBSan) and runs
# each for SECONDS (default 600), JOBS targets at a time (default: the number
# of CPUs). New inputs go to build-fuzz/fuzz-work/<target>/; a crash leaves
# its input in build-fuzz/fuzz-work/artifacts/. A finding becomes a
# regression test by copying its input into tests/fuzz/corpus/<target>/
# (replayed by every `ctest -L fuzz`) once the bug is fixed.
#
# usage: scripts/fuzz.sh [--seconds N] [--jobs N] [TARGET...]
#        targets: the names of tests/fuzz/fuzz_<name>.c (default: all)
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=600
jobs=$(nproc)
targets=()
while [ $# -gt 0 ]; do
    case "$1" in
    --seconds) seconds=${2:?}; shift 2 ;;
    --jobs) jobs=${2:?}; shift 2 ;;
    -h|--help) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "fuzz.sh: unknown option '$1'" >&2; exit 2 ;;
    *) targets+=("$1"); shift ;;
    esac
done
if [ ${#targets[@]} -eq 0 ]; then
    for f in tests/fuzz/fuzz_*.c; do t=${f#tests/fuzz/fuzz_}; targets+=("${t%.c}"); done
fi

CC=clang cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDLQB_FUZZ=ON \
    -DDLQB_BROKER_TESTS=OFF >/dev/null
cmake --build build-fuzz -j"$jobs" --target $(printf 'fuzz_%s ' "${targets[@]}") >/dev/null

work=build-fuzz/fuzz-work
mkdir -p "$work/artifacts"
export ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
status=0
run_one() {
    local t=$1
    mkdir -p "$work/$t"
    build-fuzz/tests/fuzz/fuzz_"$t" -max_total_time="$seconds" -max_len=8192 -timeout=10 \
        -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$work/artifacts/$t-" \
        "$work/$t" "tests/fuzz/corpus/$t" > "$work/$t.log" 2>&1
}
pids=()
names=()
for t in "${targets[@]}"; do
    while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do sleep 1; done
    run_one "$t" &
    pids+=($!)
    names+=("$t")
done
for i in "${!pids[@]}"; do
    t=${names[$i]}
    if wait "${pids[$i]}"; then
        printf '%-10s ok   %s\n' "$t" "$(grep -E '^stat::number_of_executed_units' "$work/$t.log" | awk '{print $2 " runs"}')"
    else
        status=1
        printf '%-10s FAIL see %s and %s/artifacts/\n' "$t" "$work/$t.log" "$work"
    fi
done
exit $status
