#!/usr/bin/env bash
# The compose quick start, run for real (docs/compose-test.md): starts the
# project's own docker engine (scripts/docker-engine.sh), builds the images
# with docker/Dockerfile and the example worker's, runs docker/docker-compose.yml
# with tests/compose/override.yml (only the broker image and the network
# swapped) and checks what a user would see; then the broker restarted under
# the bridge, the bridge killed, and `down`.
#
# usage: scripts/compose-test.sh      (as root; scripts/test.sh runs it)
# Exits 0 passed, 1 failed (logs in build/compose-test/), 77 skipped: only
# when dockerd cannot start here at all (or DLQB_FORCE_SKIP names compose),
# with one line saying why, also in build/compose-test/skipped.txt.
# DLQB_COMPOSE_KEEP=1 leaves the stack and the engine running afterwards.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
out=$root/build/compose-test
cache=${DLQB_CACHE:-/var/cache/dlq-bridge}
project=dlqb-compose-test
started=$SECONDS

say() { printf 'compose-test: %s  (%ds)\n' "$*" $((SECONDS - started)); }
fail() { printf 'compose-test: FAILED: %s (logs: %s)\n' "$*" "$out" >&2; exit 1; }

mkdir -p "$out" "$cache/docker"
rm -f "$out"/*.log "$out"/*.txt
# A skip says why in one line, here and in skipped.txt (scripts/test.sh
# names it in its summary).
skipped() {
    echo "compose-test: SKIPPED: $*"
    echo "$*" >"$out/skipped.txt"
    exit 77
}
case ",${DLQB_FORCE_SKIP:-}," in *,compose,*) skipped "forced by DLQB_FORCE_SKIP=${DLQB_FORCE_SKIP}" ;; esac
# One user of the engine at a time (another clone's test, docker-build.sh).
exec 9>"$cache/docker/lock"
flock -w 1800 9 || fail "the engine's lock ($cache/docker/lock) was held for 30 minutes"
# The stack listens on fixed ports of this machine's loopback (host
# networking: tests/compose/override.yml). Another stack on them (a second
# checkout's compose test, one inside scripts/stock-test.sh's root, which
# has its own engine and lock) is waited for, 10 minutes at most.
port_busy() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
for port in 5672 15672 9464 19672 19369; do
    waited=0
    while port_busy "$port"; do
        [ "$waited" -lt 600 ] || fail "port $port on 127.0.0.1 is still taken after 10 minutes (another stack?)"
        [ "$waited" -gt 0 ] || say "port $port is taken (another stack?): waiting for it"
        sleep 5
        waited=$((waited + 5))
    done
done

rc=0
engine_env=$(scripts/docker-engine.sh start 2>"$out/engine.log") || rc=$?
if [ "$rc" = 77 ]; then
    skipped "$(tail -n 1 "$out/engine.log" | sed 's/^docker-engine: //')"
fi
engine=1
eval "$engine_env"
C=(docker compose -p "$project" -f docker/docker-compose.yml -f tests/compose/override.yml)

cleanup() {
    local st=$?
    set +e
    if [ -n "${DLQB_COMPOSE_KEEP:-}" ]; then
        echo "compose-test: DLQB_COMPOSE_KEEP: the stack and the engine are left running (scripts/docker-engine.sh stop)" >&2
    elif [ -n "${engine:-}" ]; then
        if [ "$st" -ne 0 ]; then
            "${C[@]}" ps -a >"$out/ps.txt" 2>&1
            "${C[@]}" logs --no-color --timestamps >"$out/compose.log" 2>&1
            # An unhealthy container's healthcheck output lives only in the
            # engine until `down` removes it.
            for id in $("${C[@]}" ps -a -q 2>/dev/null); do
                docker inspect --format '{{.Name}} {{json .State.Health}}' "$id"
            done >"$out/health.txt" 2>&1
            tail -n 200 "$cache/docker/dockerd.log" >"$out/dockerd.log" 2>&1
        fi
        "${C[@]}" --profile ops down -v --remove-orphans --timeout 20 >>"$out/down.log" 2>&1
        docker image prune -f >/dev/null 2>&1
        scripts/docker-engine.sh stop 2>>"$out/engine.log"
    fi
    [ "$st" -eq 0 ] || echo "compose-test: logs kept in $out" >&2
    exit "$st"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

[ "$rc" = 0 ] || fail "the engine did not start: $(tail -n 1 "$out/engine.log")"
cat "$out/engine.log"
step=$SECONDS
scripts/docker-engine.sh images 2>>"$out/engine.log" || fail "building the base images"
say "engine and base images ready"

# The demo's credentials are public (docs/least-privilege.md); still, no
# password on a command line: curl reads it from a private file.
umask 077
printf 'user = "admin:admin-dev-only"\n' >"$out/curl-admin.conf"
bridge_password=$(head -n 1 docker/secrets/bridge-password.txt)
api() { local path=$1; shift; curl -fsS -K "$out/curl-admin.conf" "$@" "http://127.0.0.1:15672/api/$path"; }
jq_api() { api "$1" | jq -r "$2"; }
depth() { jq_api "queues/%2F/$1" '.messages // 0'; }
metric() { # name{labels} -> value (0 when absent)
    curl -fsS http://127.0.0.1:9464/metrics | awk -v m="$1" '$1 == m { v = $2 } END { print v + 0 }'
}
# until DESCRIPTION SECONDS COMMAND...: polls COMMAND until it succeeds.
until_ok() {
    local what=$1 deadline=$((SECONDS + $2))
    shift 2
    until "$@" >"$out/last-poll.txt" 2>&1; do
        [ $SECONDS -lt $deadline ] || fail "$what (not within ${deadline}s; last: $(tail -c 300 "$out/last-poll.txt"))"
        sleep 0.5
    done
}
equals() { [ "$("${@:2}")" = "$1" ]; }
at_least() { [ "$("${@:2}")" -ge "$1" ]; }

# Leftovers of an interrupted run (this project's, in this engine only).
"${C[@]}" --profile ops down -v --remove-orphans --timeout 5 >"$out/down.log" 2>&1 ||
    fail "cleaning an earlier run"

step=$SECONDS
say "docker compose up --build"
"${C[@]}" build >"$out/build.log" 2>&1 || fail "compose build: $(grep -m1 -i error "$out/build.log")"
say "images built in $((SECONDS - step))s"
"${C[@]}" up -d --wait --wait-timeout 300 >"$out/up.log" 2>&1 ||
    fail "compose up: $(tail -n 3 "$out/up.log" | tr '\n' ' ')"
say "stack up and healthy"

# --- what a user sees -------------------------------------------------------
equals 4 jq_api overview '.rabbitmq_version | split(".")[0]' ||
    fail "the broker is not RabbitMQ 4.x: $(jq_api overview .rabbitmq_version)"
# Every queue, exchange, binding and user of the definitions, and no guest.
want=$(jq -r '(.queues[] | "queue \(.name) \(.arguments["x-queue-type"] // "classic")"),
              (.exchanges[] | "exchange \(.name)"), (.users[] | "user \(.name)")' definitions/compose.json | sort)
have=$(api definitions | jq -r '(.queues[] | "queue \(.name) \(.arguments["x-queue-type"] // "classic")"),
              (.exchanges[] | "exchange \(.name)"), (.users[] | "user \(.name)")' | sort)
[ "$want" = "$have" ] || fail "the broker did not load definitions/compose.json: $(diff <(echo "$want") <(echo "$have") | tr '\n' ' ')"
[ "$(api bindings/%2F/e/dsr.dlx/q/dsr.failed | jq length)" = 1 ] || fail "binding dsr.dlx -> dsr.failed missing"

# The bridge: its own unprivileged user, connected as dlq-bridge with the
# password from the secret, which appears in neither argv, env nor logs.
bridge_container=$("${C[@]}" ps -q dlq-bridge)
pid=$(docker inspect -f '{{.State.Pid}}' "$bridge_container")
[ "$(tr '\0' ' ' </proc/"$pid"/cmdline)" = "dlq-bridge run --no-declare " ] ||
    fail "the bridge's process is '$(tr '\0' ' ' </proc/"$pid"/cmdline)'"
uids=$(awk '/^Uid:/ { print $2, $3, $4, $5 }' /proc/"$pid"/status)
[ "$uids" = "10001 10001 10001 10001" ] || fail "the bridge runs as uids $uids, not 10001"
until_ok "a connection of user dlq-bridge" 30 equals dlq-bridge jq_api connections '[.[] | select(.user == "dlq-bridge")][0].user'
for where in "/proc/$pid/cmdline" "/proc/$pid/environ"; do
    ! grep -qF "$bridge_password" "$where" || fail "the bridge's password is in $where"
done
"${C[@]}" logs --no-color >"$out/logs-1.txt" 2>&1
! grep -qF "$bridge_password" "$out/logs-1.txt" || fail "the bridge's password is in the logs"
[ "$(curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:9464/healthz)" = 200 ] ||
    fail "/healthz on the published port 9464 does not answer 200"
say "broker 4.x with the definitions; bridge uid 10001, connected, healthy"

# The demo tasks end up as the compose file's comments say: 3 of 12 in the
# DLQ after max_attempts, 9 completions, nothing left on the way.
check_settled() { # completed dlq [at_least: duplicates allowed]
    until_ok "$2 tasks in dsr.dlq.manual" 120 "${3:-equals}" "$2" depth dsr.dlq.manual
    until_ok "$1 completions in dsr.completed" 60 at_least "$1" depth dsr.completed
    local q
    for q in dsr.work dsr.failed dsr.retry.1s dsr.retry.5s dsr.retry.30s dsr.retry.2m; do
        until_ok "$q empty" 60 equals 0 depth "$q"
    done
}
check_settled 9 3
until_ok "12 retries counted" 30 equals 12 metric dlq_bridge_retries_scheduled_total
until_ok "3 dead-lettered for max_attempts" 30 equals 3 metric 'dlq_bridge_dead_lettered_total{reason="max_attempts"}'
# Retried through dsr.retry.1s (every failed task's first retry) and
# dsr.retry.5s (the always-failing ones' second), as the broker counts.
until_ok "9 messages through dsr.retry.1s" 30 equals 9 jq_api queues/%2F/dsr.retry.1s '.message_stats.publish // 0'
until_ok "3 messages through dsr.retry.5s" 30 equals 3 jq_api queues/%2F/dsr.retry.5s '.message_stats.publish // 0'

# dlq_items EXPECTED_IDS: the DLQ's items (read, requeued) are exactly the
# always-failing tasks, each with the reason, the attempt and its path.
dlq_items() {
    api queues/%2F/dsr.dlq.manual/get -X POST -H 'content-type: application/json' \
        -d '{"count":100,"ackmode":"ack_requeue_true","encoding":"auto"}' >"$out/dlq.json" ||
        fail "reading dsr.dlq.manual through the management API"
    local bad
    bad=$(jq -r '.[].properties.headers | select(.dlq_reason != "max_attempts" or .attempt != 3
            or .last_error != "rejected by worker" or .demo_fate != 3
            or ([.["x-death"][].queue] | index("dsr.retry.5s") | not)) | .request_id' "$out/dlq.json")
    [ -z "$bad" ] || fail "DLQ items without reason max_attempts, attempt 3, last_error or a pass through dsr.retry.5s: $bad"
    [ "$(jq -r '[.[].properties.headers.request_id] | unique | length' "$out/dlq.json")" = "$1" ] ||
        fail "the DLQ holds $(jq -r '[.[].properties.headers.request_id] | unique | join(" ")' "$out/dlq.json"), not $1 distinct tasks"
}
dlq_items 3

# The operator's view: stats (in a container of the bridge's image, as the
# operator), the audit trail verified in the bridge's container, reconciled.
ops() { "${C[@]}" run --rm -T ops "$@" 2>>"$out/ops.log"; }
ops stats --json >"$out/stats.json" || fail "dlq-bridge stats: $(tail -n 1 "$out/ops.log")"
jq -e '.queues["dsr.dlq.manual"].depth == 3 and .dlq_reasons == {"max_attempts": 3}' "$out/stats.json" >/dev/null ||
    fail "stats does not show the 3 DLQ items for max_attempts: $(jq -c '{dlq: .queues["dsr.dlq.manual"], dlq_reasons}' "$out/stats.json")"
"${C[@]}" exec -T dlq-bridge dlq-bridge audit verify >"$out/verify-1.txt" 2>&1 ||
    fail "audit verify in the bridge container: $(tail -n 2 "$out/verify-1.txt")"
ops audit reconcile >"$out/reconcile-1.txt" || fail "audit reconcile: $(tail -n 2 "$out/reconcile-1.txt")"
grep -q "missing 0" "$out/reconcile-1.txt" || fail "audit reconcile: $(cat "$out/reconcile-1.txt")"
say "demo settled: 3 in the DLQ with their reasons, 9 done, 12 retries; stats, audit verify and reconcile agree"

# --- the broker stopped and started again under the bridge -----------------
"${C[@]}" stop rabbitmq >>"$out/up.log" 2>&1 || fail "compose stop rabbitmq"
until_ok "the bridge reporting the broker gone" 60 equals 0 metric dlq_bridge_connected
"${C[@]}" start rabbitmq >>"$out/up.log" 2>&1 || fail "compose start rabbitmq"
until_ok "the broker healthy again" 120 equals healthy docker inspect -f '{{.State.Health.Status}}' "$("${C[@]}" ps -q rabbitmq)"
until_ok "the bridge reconnected" 120 equals 1 metric dlq_bridge_connected
[ "$(curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:9464/healthz)" = 200 ] || fail "/healthz after the reconnect"
[ "$(docker inspect -f '{{.RestartCount}}' "$bridge_container")" = 0 ] || fail "the bridge restarted instead of reconnecting"
# The management API reports a queue's counts from its periodic stats: just
# after the node's restart the DLQ is there before its "messages" is (read
# as 0; the last CI run failed on it once). Three items that never come
# back within 30 s are lost.
until_ok "the DLQ's 3 items after the broker's restart (lost?)" 30 equals 3 depth dsr.dlq.manual
# A new batch of demo tasks (the worker publishes one per start).
"${C[@]}" restart example-worker >>"$out/up.log" 2>&1 || fail "compose restart example-worker"
check_settled 18 6
until_ok "24 retries counted" 30 equals 24 metric dlq_bridge_retries_scheduled_total
dlq_items 6
say "broker restarted: the bridge reconnected by itself, the second batch settled"

# --- the bridge killed in the middle of a batch ----------------------------
seen=$(metric dlq_bridge_failures_seen_total)
"${C[@]}" restart example-worker >>"$out/up.log" 2>&1 || fail "compose restart example-worker"
until_ok "the third batch reaching the bridge" 60 at_least $((seen + 1)) metric dlq_bridge_failures_seen_total
before=$(metric dlq_bridge_failures_seen_total)
kill -KILL "$pid"
say "bridge (pid $pid) killed with $((before - seen)) of the third batch's failures settled"
# restart: unless-stopped brings it back (a crash, not a stop).
until_ok "the bridge restarted by its restart policy" 60 at_least 1 docker inspect -f '{{.RestartCount}}' "$bridge_container"
until_ok "the restarted bridge healthy" 60 equals 200 curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:9464/healthz
check_settled 27 9 at_least
dlq_items 9
"${C[@]}" exec -T dlq-bridge dlq-bridge audit verify >"$out/verify-2.txt" 2>&1 ||
    fail "audit verify after the kill: $(tail -n 2 "$out/verify-2.txt")"
ops audit reconcile >"$out/reconcile-2.txt" || fail "audit reconcile after the kill: $(tail -n 2 "$out/reconcile-2.txt")"
grep -q "missing 0" "$out/reconcile-2.txt" || fail "audit reconcile after the kill: $(cat "$out/reconcile-2.txt")"
# Every task of the three batches: done or in the DLQ, none lost.
ops_completed=$("${C[@]}" run --rm -T --no-deps -v "$root/docker/secrets/operator-password.txt:/run/operator_password:ro" --entrypoint python3 example-worker - <tests/compose/completed.py 2>>"$out/ops.log") ||
    fail "reading dsr.completed: $(tail -n 1 "$out/ops.log")"
echo "$ops_completed" >"$out/completed.txt"
done_ids=$(sort -u "$out/completed.txt")
dlq_ids=$(jq -r '.[].properties.headers.request_id' "$out/dlq.json" | sort -u)
published=$("${C[@]}" logs --no-color example-worker | grep -c "published 12 demo tasks")
[ "$published" = 3 ] || fail "the worker published $published batches, not 3"
all=$(printf '%s\n%s\n' "$done_ids" "$dlq_ids" | sort -u | wc -l)
[ "$(echo "$done_ids" | wc -l)" = 27 ] && [ "$all" = 36 ] ||
    fail "of 36 tasks, $(echo "$done_ids" | wc -l) done and $(echo "$dlq_ids" | wc -l) in the DLQ ($all distinct)"
say "bridge killed mid-batch: restarted, nothing lost (27 done, 9 in the DLQ, the trail verifies and reconciles)"

# --- down ------------------------------------------------------------------
"${C[@]}" --profile ops down --timeout 20 >>"$out/down.log" 2>&1 || fail "compose down"
[ -z "$(docker ps -aq)" ] || fail "containers left after down: $(docker ps -a --format '{{.Names}} {{.Status}}')"
! pgrep -f "containerd-shim.*-address $cache/docker/" >/dev/null || fail "container processes left after down"
docker volume inspect "${project}_audit" >/dev/null 2>&1 || fail "down removed the audit trail's volume"
say "down: nothing left running (the audit volume stays until down -v)"
echo "compose-test: passed in $((SECONDS - started))s"
