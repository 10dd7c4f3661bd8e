#!/usr/bin/env bash
# The layering rules of src/ (docs/architecture.md, "Where things are"),
# checked on the source text so a change that breaks one fails in ctest:
#  1. rabbitmq-c is called only under src/amqp/ (its types may appear in
#     core headers, e.g. the envelope reads an amqp_table_t; its functions
#     may not be called anywhere else);
#  2. a folder's private header (src/<folder>/*.h) is included only by that
#     folder's files and by tests;
#  3. the socket and TLS API of rabbitmq-c is included only under src/amqp/.
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

[ "$status" = 0 ] && echo "check_layers: src/ keeps its layering"
exit "$status"
