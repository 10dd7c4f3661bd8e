#!/usr/bin/env bash
# Writes definitions/definitions.json, the broker topology in RabbitMQ's
# definitions format, from `dlq-bridge declare --print-definitions` with the
# default settings: declare and the definitions share one description
# (src/amqp/topology.c), so they cannot drift apart.
#
# Also writes definitions/compose.json, what docker/docker-compose.yml loads at
# boot: the topology plus the demo users of definitions/demo-users.json. A node
# that loads definitions at boot creates no guest user and no default vhost,
# so that file must carry both (RabbitMQ 3.10 cannot load a directory).
#
# Also writes definitions/two-pipelines.json, the topology of two pipelines
# (dsr and redaction, definitions/two-pipelines.config.json) side by side.
#
# usage: scripts/gen-definitions.sh [--check] [DLQ_BRIDGE_BINARY]
#   --check   compare instead of write; exit 1 with a diff when they differ
# The binary defaults to build/dlq-bridge. DLQ_BRIDGE_* variables of the
# caller's environment are ignored: the committed file is the default topology.
set -euo pipefail
cd "$(dirname "$0")/.."

check=0
bin=build/dlq-bridge
for arg in "$@"; do
    case "$arg" in
    --check) check=1 ;;
    -h|--help) sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) bin=$arg ;;
    esac
done
[ -x "$bin" ] || { echo "gen-definitions: no dlq-bridge binary at $bin (build first)" >&2; exit 2; }

target=definitions/definitions.json
compose=definitions/compose.json
two=definitions/two-pipelines.json
tmp=$(mktemp)
tmp_compose=$(mktemp)
tmp_two=$(mktemp)
trap 'rm -f "$tmp" "$tmp_compose" "$tmp_two"' EXIT
# shellcheck disable=SC2046
env $(env | sed -n 's/^\(DLQ_BRIDGE_[A-Za-z0-9_]*\)=.*/-u \1/p') \
    "$bin" declare --print-definitions > "$tmp"
# shellcheck disable=SC2046
env $(env | sed -n 's/^\(DLQ_BRIDGE_[A-Za-z0-9_]*\)=.*/-u \1/p') \
    "$bin" declare --print-definitions --config definitions/two-pipelines.config.json > "$tmp_two"

python3 - "$tmp" definitions/demo-users.json > "$tmp_compose" <<'PY'
import json, sys
topology = json.load(open(sys.argv[1]))
users = json.load(open(sys.argv[2]))
merged = {"vhosts": topology["vhosts"], "users": users["users"],
          "permissions": users["permissions"]}
for key in ("queues", "exchanges", "bindings"):
    merged[key] = topology[key]
print(json.dumps(merged, indent=2))
PY

if [ "$check" = 1 ]; then
    stale=0
    diff -u "$target" "$tmp" || stale=1
    diff -u "$compose" "$tmp_compose" || stale=1
    diff -u "$two" "$tmp_two" || stale=1
    if [ "$stale" = 1 ]; then
        echo "gen-definitions: $target, $compose or $two is out of date; run scripts/gen-definitions.sh" >&2
        exit 1
    fi
    exit 0
fi
chmod 644 "$tmp" "$tmp_compose" "$tmp_two"
mv "$tmp" "$target"
mv "$tmp_compose" "$compose"
mv "$tmp_two" "$two"
trap - EXIT
echo "gen-definitions: wrote $target, $compose and $two"
