#!/usr/bin/env bash
# The layering rules of src/ (docs/architecture.md, "Where things are"),
# checked on the source text so a change that breaks one fails in ctest:
#  1. rabbitmq-c is called only under src/amqp/ (its types may appear in
#     core headers, e.g. the envelope reads an amqp_table_t; its functions
#     may not be called anywhere else);
#  2. a folder's private header (src/<folder>/*.h) is included only by that
#     folder's files and by tests;
#  3. the socket and TLS API of rabbitmq-c is included only under src/amqp/;
#  4. a public header (include/dlqb/X.h) belongs to the folder of its own
#     .c (src/<folder>/X.c; the few without one are named below), and a
#     file includes only the headers of its own folder and the floors below
#     it, so a call up the floors fails here even where it would link;
#  5. the console (src/console/) includes no header of the command line
#     (src/cli/): it sits below it;
#  6. the operation level owns the passes and the trail: dlqb_scan_run is
#     called only under src/amqp/ and src/ops/, and a trail with its anchor
#     publisher (dlqb_audit_open, dlqb_anchor_start) is opened only under
#     src/ops/ (ops_session_open), by every front end and the daemon alike;
#  7. a function named ops_... is defined only under src/ops/ (the command
#     line's own helpers are cli_...).
# usage: tests/check_layers.sh SOURCE_DIR
set -u
root=${1:?usage: check_layers.sh SOURCE_DIR}
cd "$root" || exit 2
status=0

# 1. A call is an identifier amqp_... followed by "(", outside comments.
#    Comment lines (starting with / * or *) are skipped; so are the
#    functions defined in amqp/ and only declared in headers.
calls=$(grep -rnE '\bamqp_[a-z0-9_]+[[:space:]]*\(' src include --include='*.c' --include='*.h' |
    grep -vE '^src/amqp/' |
    grep -vE '^[^:]+:[0-9]+:[[:space:]]*(/\*|\*)' || true)
if [ -n "$calls" ]; then
    echo "check_layers: rabbitmq-c is called outside src/amqp/:"
    echo "$calls"
    status=1
fi

# 2. Private headers stay in their folder.
for h in src/*/*.h; do
    folder=$(dirname "$h")
    name=$(basename "$h")
    # (a public header of the same name, "dlqb/NAME", is another file)
    users=$(grep -rnE "#include \"([./]*)?(src/)?([a-z]+/)?$name\"" src | grep -v '"dlqb/' |
        cut -d: -f1 | sort -u | grep -v "^$folder/" || true)
    if [ -n "$users" ]; then
        echo "check_layers: $h is private to $folder/ but included by: $(echo $users)"
        status=1
    fi
done

# 3. Sockets and TLS of rabbitmq-c: the transport only.
sockets=$(grep -rnE '#include <amqp_(tcp|ssl)_socket\.h>' src include | grep -vE '^src/amqp/' || true)
if [ -n "$sockets" ]; then
    echo "check_layers: rabbitmq-c's socket API is included outside src/amqp/:"
    echo "$sockets"
    status=1
fi

# 4. The floors, bottom up, and what each folder may include. ops is the
#    operation level over amqp; the daemon (its escalator's moves) and the
#    console stand on it, side by side: neither uses the other.
allowed() {
    case $1 in
        core) echo "core" ;;
        os) echo "core os" ;;
        audit) echo "core os audit" ;;
        amqp) echo "core os audit amqp" ;;
        ops) echo "core os audit amqp ops" ;;
        daemon) echo "core os audit amqp ops daemon" ;;
        console) echo "core os audit amqp ops console" ;;
        cli) echo "core os audit amqp daemon ops console cli" ;;
        *) echo "" ;;
    esac
}
# The folder of a public header: that of its own .c, or for a header
# without one (declarations of several files, or of none) named here.
header_folder() {
    case $1 in
        audit) echo audit ;;   # records, writer, verify, query: src/audit/*.c
        names | stop) echo core ;; # constants and a type only
        ops) echo ops ;;       # src/ops/*.c
        *)
            local c
            c=$(ls src/*/"$1".c 2>/dev/null)
            if [ "$(echo "$c" | grep -c .)" = 1 ]; then
                c=${c#src/}
                echo "${c%%/*}"
            fi
            ;;
    esac
}
for f in src/*/*.[ch]; do
    folder=${f#src/}
    folder=${folder%%/*}
    ok=" $(allowed "$folder") "
    for h in $(sed -nE 's|^[[:space:]]*#[[:space:]]*include[[:space:]]+"dlqb/([a-z_0-9]+)\.h".*|\1|p' "$f"); do
        hf=$(header_folder "$h")
        if [ -z "$hf" ]; then
            echo "check_layers: $f includes dlqb/$h.h, which has no src/<folder>/$h.c: name its folder in header_folder"
            status=1
        elif [ "${ok#* $hf }" = "$ok" ]; then
            echo "check_layers: $f ($folder) includes dlqb/$h.h of $hf/, a floor above it"
            status=1
        fi
    done
done

# 5. The console below the command line.
for h in src/cli/*.h; do
    name=$(basename "$h")
    users=$(grep -lE "#include \"([./]*)?(src/)?(cli/)?$name\"" src/console/*.[ch] 2>/dev/null || true)
    if [ -n "$users" ]; then
        echo "check_layers: the console includes the command line's $h: $(echo $users)"
        status=1
    fi
done

# 6. Passes and trails through the operation level.
calls=$(grep -rnE '\b(dlqb_scan_run|dlqb_audit_open|dlqb_anchor_start)[[:space:]]*\(' src --include='*.c' |
    grep -vE '^src/(ops|amqp|audit)/' |
    grep -vE '^[^:]+:[0-9]+:[[:space:]]*(/\*|\*)' || true)
calls="$calls$(grep -rnE '\b(dlqb_audit_open|dlqb_anchor_start)[[:space:]]*\(' src/amqp --include='*.c' |
    grep -vE '^src/amqp/anchor\.c:' | grep -vE '^[^:]+:[0-9]+:[[:space:]]*(/\*|\*)' || true)"
if [ -n "$calls" ]; then
    echo "check_layers: a pass or a trail opened above the operation level (src/ops/):"
    echo "$calls"
    status=1
fi

# 7. ops_ names belong to src/ops/: a definition starts a line (its type
#    first) and ends with "(" ... ") {".
defs=$(grep -rnE '^[a-z][a-z_0-9 ]*[ *]ops_[a-z_0-9]+\(' src --include='*.c' | grep -vE '^src/ops/' || true)
if [ -n "$defs" ]; then
    echo "check_layers: ops_ functions defined outside src/ops/:"
    echo "$defs"
    status=1
fi

[ "$status" = 0 ] && echo "check_layers: src/ keeps its layering"
exit "$status"
