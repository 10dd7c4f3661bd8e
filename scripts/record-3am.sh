#!/usr/bin/env bash
# Records the runbook's 3 a.m. checklist (docs/runbook.md) as an operator
# sees it on a terminal of WIDTH columns (80 by default): a private
# RabbitMQ node, a DLQ of realistic items, then the checklist's commands
# typed into tmux; the capture (tmux capture-pane) goes to OUTPUT, and the
# run fails when any line is wider than the terminal or any id is shown cut
# (an id is what the operator types next). scripts/test.sh runs it at 80
# and 120 columns into build/; docs/3am-session.txt and
# docs/3am-session-120.txt are its output, committed.
#
# usage: scripts/record-3am.sh [OUTPUT [WIDTH]]   (default docs/3am-session.txt 80)
# DLQB_RECORD_PORT: the node's port base (default 26290; it uses 5 ports).
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
out=${1:-docs/3am-session.txt}
width=${2:-80}
port=${DLQB_RECORD_PORT:-26290}
dir=$(mktemp -d /tmp/dlqb-record.XXXXXX)
sock=dlqb-record-$$

cleanup() {
    tmux -L "$sock" kill-server 2>/dev/null || true
    scripts/broker-node.sh stop "$dir/node" >/dev/null 2>&1 || true
    rm -rf "$dir"
}
trap cleanup EXIT

command -v tmux >/dev/null || { echo "record-3am: needs tmux (scripts/install-deps.sh)" >&2; exit 1; }
[ -x build/dlq-bridge ] || {
    cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
    cmake --build build -j2 >/dev/null
}

# A look's checkpoint (catalog_checkpoint auto) of this run's node only.
export XDG_STATE_HOME="$dir/state"
scripts/broker-node.sh start "$dir/node" "$port" dlqb-record >/dev/null
mgmt=$((port + 1))
export DLQ_BRIDGE_URL="amqp://guest:guest@127.0.0.1:$port/%2f"
build/dlq-bridge declare >/dev/null

# Publishes one message through the management API (the node's default vhost).
publish() { # queue properties-json payload
    local body
    body=$(jq -cn --arg q "$1" --argjson p "$2" --arg b "$3" \
        '{properties: $p, routing_key: $q, payload: $b, payload_encoding: "string"}')
    curl -fsS -u guest:guest -H 'content-type: application/json' -X POST \
        -d "$body" "http://127.0.0.1:$mgmt/api/exchanges/%2f/amq.default/publish" |
        jq -e '.routed' >/dev/null
}

ago() { date -u -d "-$1" +%Y-%m-%dT%H:%M:%S.000Z; }

# A DLQ item with a valid envelope that failed max_attempts times.
dlq_item() { # request_id source basis last_error age
    local props
    props=$(jq -cn --arg id "$1" --arg src "$2" --arg basis "$3" --arg err "$4" \
        --arg at "$(ago "$5")" --arg first "$(ago "1 day")" \
        '{message_id: ("msg-" + $id), delivery_mode: 2, content_type: "application/json",
          headers: {request_id: $id, source_system: $src, legal_basis: $basis,
                    action: "deletion", attempt: 5, max_attempts: 5, replay_count: 0,
                    first_seen_at: $first, last_error: $err, dlq_reason: "max_attempts",
                    dlq_at: $at}}')
    publish dsr.dlq.manual "$props" '{"subject":"user-'"$1"'"}'
}

for i in $(seq 1 9); do
    dlq_item "R-2026-11-$((1000 + i))" crm gdpr_art_17 \
        "rejected by worker: upstream 503 from erasure-api.crm.internal" "$((40 + i)) minutes"
done
for i in 1 2 3; do
    dlq_item "R-2026-11-$((2000 + i))" billing-ledger ccpa_1798_105 \
        "worker error: timeout after 30s waiting for billing-ledger lock" "$((3 * i)) hours"
done
dlq_item "R-2026-11-3001" marketing-cdp gdpr_art_17 \
    "rejected by worker: subject not found in marketing-cdp (id 7f3c9a2e-41d8-4b6e-9a0f-2c5d8e1b7a64)" "2 days"
# A producer's hostile text: control characters and invalid UTF-8 stay '?'.
dlq_item "R-2026-11-3002" crm gdpr_art_15 $'worker error: \e[31mred\e[0m upstream 503\x07' "50 minutes"
# An invalid envelope: only what its producer sent.
publish dsr.dlq.manual "$(jq -cn --arg at "$(ago "20 minutes")" \
    '{message_id: "msg-unknown-1", headers: {last_error: "invalid envelope: request_id missing",
      dlq_reason: "invalid_envelope", dlq_at: $at}}')" 'not json'
# Two of the crm tasks were completed meanwhile: the ledger says so, as
# the worker's user (guest here), a completion writer.
for id in R-2026-11-1002 R-2026-11-1005; do
    publish dsr.completed "$(jq -cn --arg id "$id" \
        '{user_id: "guest", headers: {request_id: $id, source_system: "crm"}}')" ''
done

# Put straight into the queues above: the catalog learns of them from a
# verifying pass, as the daemon's check runs one within a minute.
build/dlq-bridge catalog verify >/dev/null

# The session: a clean shell on a WIDTHx50 terminal, `dlq-bridge` on PATH.
mkdir -p "$dir/bin"
ln -s "$repo/build/dlq-bridge" "$dir/bin/dlq-bridge"
# The operator's host as it should be: the config file names the audit
# trail, so replay records what it does (without one it would refuse).
mkdir -p "$dir/audit-keys"
(umask 077 && openssl genpkey -algorithm ed25519 -out "$dir/audit.key")
openssl pkey -in "$dir/audit.key" -pubout -out "$dir/audit-keys/operator.pem"
jq -n --arg log "$dir/audit.log" --arg key "$dir/audit.key" --arg pub "$dir/audit-keys" \
    '{audit_log: $log, audit_key_file: $key, audit_public_keys: $pub,
      completion_writers: "guest", catalog_writers: "guest"}' >"$dir/config.json"
tmux -L "$sock" -f /dev/null new-session -d -s rec -x "$width" -y 50 \
    env -i PATH="$dir/bin:/usr/bin:/bin" HOME="$dir" TERM=xterm-256color LANG=C.UTF-8 \
    DLQ_BRIDGE_URL="$DLQ_BRIDGE_URL" DLQ_BRIDGE_CONFIG="$dir/config.json" PS1='$ ' \
    PROMPT_COMMAND="tmux -L $sock wait-for -S prompt" bash --noprofile --norc
tmux -L "$sock" set-option -t rec history-limit 10000 >/dev/null
# Each prompt signals the channel (PROMPT_COMMAND): the first one is the
# shell being ready, each later one a command having finished.
tmux -L "$sock" wait-for prompt

# Types one command once the prompt is drawn (PROMPT_COMMAND runs just
# before bash prints "$ ": keys sent earlier would echo ahead of it), then
# waits until the command has finished.
type_cmd() {
    local i
    for i in $(seq 1 200); do
        [ "$(tmux -L "$sock" display-message -p -t rec '#{cursor_x}')" = 2 ] && break
        sleep 0.01
    done
    tmux -L "$sock" send-keys -t rec "$1" Enter
    tmux -L "$sock" wait-for prompt
}

type_cmd 'dlq-bridge stats'
type_cmd 'dlq-bridge inspect --limit 20'
type_cmd 'dlq-bridge inspect --reason "upstream 503"'
type_cmd 'dlq-bridge replay --reason "upstream 503" --dry-run'
type_cmd 'dlq-bridge replay --reason "upstream 503" --limit 3'
type_cmd 'dlq-bridge replay --reason "upstream 503" --rate 200'
type_cmd 'dlq-bridge stats'
type_cmd 'dlq-bridge audit show --request-id R-2026-11-1001'
type_cmd 'dlq-bridge insepct'

{
    echo "# dlq-bridge: the runbook's 3 a.m. checklist on a terminal ${width} columns wide"
    v=$(dpkg-query -W -f='${Version}' rabbitmq-server 2>/dev/null || echo '?')
    echo "# made by scripts/record-3am.sh (tmux capture-pane), RabbitMQ ${v%%-*}"
    echo
    # The trailing empty lines of the pane are not part of the session.
    # -J: a line the terminal wrapped comes back whole, so a line too wide
    # for it is seen as such (and fails the check below).
    tmux -L "$sock" capture-pane -J -p -t rec -S - -E - | sed -e :a -e '/^\n*$/{$d;N;ba' -e '}'
} > "$out"

# Characters, not bytes (mawk's length counts bytes; the ellipsis is 3).
widest=$(python3 -c 'import sys; print(max(len(l.rstrip("\n")) for l in open(sys.argv[1], encoding="utf-8")))' "$out")
if [ "$widest" -gt "$width" ]; then
    echo "record-3am: $out has a line of $widest columns (over $width)" >&2
    exit 1
fi
# An id cut shows as an ellipsis before its tail ("…11-1001"); every other
# cut ends its cell ("billing-l… ").
if LC_ALL=C grep -n $'\xe2\x80\xa6[A-Za-z0-9]' "$out" >&2; then
    echo "record-3am: $out shows an id cut (above)" >&2
    exit 1
fi
echo "record-3am: wrote $out (widest line $widest columns)"
