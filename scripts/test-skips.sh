# shellcheck shell=bash
# What scripts/test.sh did not run, and why. Sourced by scripts/test.sh.
#
# A step that cannot run here (no docker engine for the compose test, a
# ctest check whose tool is missing, a part left out by --quick or
# --broker) is a skip, never a pass: a run that skipped anything does not
# end with "all tests passed". Under CI (CI=true or 1) or --strict a skip
# fails the run with its reason, so a CI machine that lost its docker
# engine, its browser or its clang cannot land a change those steps would
# have caught. Without CI the run ends saying which steps were skipped and
# why.
#
# A ctest check skipped in one build and passed in another (unit.format in
# the trixie build root, which has no clang-format 14) was checked: only a
# check that ran in no build counts as skipped. ctest writes a JUnit file
# per run (skip_junit gives its path); the summary reads them all.
#
# DLQB_FORCE_SKIP=step[,step...] makes those steps skip as if they could
# not run here (for the test of this file: tests/check_test_skips.sh);
# the steps that honour it are the ones that can skip on their own
# (compose, stock), and any step test.sh runs through skip_forced.
#
# State lives in $DLQB_SKIPS_DIR (default build/test-skips/, emptied at the
# start of a run), a file per lane so the lanes need no lock.

skips_dir=${DLQB_SKIPS_DIR:-build/test-skips}

# True under CI or --strict: a skip then fails the run.
skips_strict() {
    case "${CI:-}" in true | TRUE | True | 1) return 0 ;; esac
    [ "${DLQB_STRICT:-0}" = 1 ]
}

# Empties the record at the start of a run.
skips_reset() {
    rm -rf "$skips_dir"
    mkdir -p "$skips_dir/junit"
}

# Records that step $1 was skipped, for reason $2. Under CI it fails the
# run there and then (the caller's fail function).
skip_step() {
    local name=$1 reason=$2
    printf '%s\t%s\n' "$name" "$reason" >>"$skips_dir/steps.$BASHPID.tsv"
    printf 'test.sh: SKIPPED: %s: %s\n' "$name" "$reason" >&2
    if skips_strict; then
        fail "step '$name' was skipped ($reason); under CI every step must run"
    fi
    return 0
}

# True when DLQB_FORCE_SKIP names step $1.
skip_forced() {
    case ",${DLQB_FORCE_SKIP:-}," in *",$1,"*) return 0 ;; esac
    return 1
}

# The JUnit file for one ctest run: $1 build dir, $2 what it ran.
skip_junit() {
    printf '%s/junit/%s.%s.xml' "$(cd "$skips_dir" && pwd)" "$(basename "$1")" "$2"
}

# Prints "name<TAB>reason" for every ctest check that was skipped in every
# build that had it and ran in none: the first line of what it printed is
# its reason.
skips_from_junit() {
    local files=("$skips_dir"/junit/*.xml)
    [ -e "${files[0]}" ] || return 0
    awk '
        /<testcase / {
            name = $0; sub(/.*<testcase name="/, "", name); sub(/".*/, "", name)
            status = $0; sub(/.*status="/, "", status); sub(/".*/, "", status)
            if (status == "run" || status == "fail") ran[name] = 1
            else if (!(name in why)) { why[name] = "skipped"; want = name }
            next
        }
        want != "" && /<system-out>/ {
            line = $0; sub(/.*<system-out>/, "", line); sub(/<\/system-out>.*/, "", line)
            if (line != "") why[want] = line
            want = ""
        }
        /<\/testcase>/ { want = "" }
        END { for (n in why) if (!(n in ran)) printf "ctest %s\t%s\n", n, why[n] }
    ' "${files[@]}" | LC_ALL=C sort
}

# Ends the run: "all tests passed" only when nothing was skipped; under
# CI a skip fails it; otherwise the skips are listed, one a line, and the
# last line says the run passed with skips.
skips_finish() {
    local list
    list=$( { cat "$skips_dir"/steps.*.tsv 2>/dev/null || true; skips_from_junit; } | awk -F '\t' '!seen[$1]++')
    if [ -z "$list" ]; then
        step "all tests passed"
        return 0
    fi
    local n
    n=$(printf '%s\n' "$list" | wc -l)
    printf '\nskipped (%d):\n' "$n"
    printf '%s\n' "$list" | awk -F '\t' '{ printf "  %s: %s\n", $1, $2 }'
    if skips_strict; then
        fail "$n step(s) skipped (listed above); under CI every step must run"
    fi
    step "passed, but $n step(s) did not run (listed above): not all tests ran"
}
