#!/usr/bin/env bash
# Regenerates the settings table in docs/configuration.md from the settings
# table in the code (`dlq-bridge help settings`), between the markers
#   <!-- BEGIN settings -->  and  <!-- END settings -->
# The test deploy.docs fails when the two differ.
#
# usage: scripts/gen-docs.sh [DLQ_BRIDGE_BINARY]     (default build/dlq-bridge)
set -euo pipefail
cd "$(dirname "$0")/.."

bin=${1:-build/dlq-bridge}
[ -x "$bin" ] || { echo "gen-docs: no dlq-bridge binary at $bin (build first)" >&2; exit 2; }
doc=docs/configuration.md
table=$(mktemp)
trap 'rm -f "$table" "$doc.new"' EXIT
"$bin" help settings > "$table"
grep -q '^<!-- BEGIN settings -->$' "$doc" && grep -q '^<!-- END settings -->$' "$doc" ||
    { echo "gen-docs: $doc lacks the settings markers" >&2; exit 1; }
awk -v table="$table" '
    /^<!-- BEGIN settings -->$/ { print; while ((getline line < table) > 0) print line; skip = 1; next }
    /^<!-- END settings -->$/ { skip = 0 }
    !skip { print }
' "$doc" > "$doc.new"
mv "$doc.new" "$doc"
echo "gen-docs: updated $doc"
