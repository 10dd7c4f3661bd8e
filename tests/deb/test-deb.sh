#!/usr/bin/env bash
# The Debian package, end to end (issue 32; docs/deploy-systemd.md):
#  1. scripts/build-deb.sh builds it (lintian must be clean); the same
#     package at a lower version (VERSION~older) is made from it, for the
#     upgrade;
#  2. in a throwaway overlay of the cached bookworm minbase root
#     (scripts/in-root.sh: the cached root is never written) the older one is
#     installed with `apt install ./dlq-bridge_*.deb`; the operator's steps
#     (broker URL in config.json, the password file) are done; the daemon is
#     started as its unit would start it (tests/deb/run-as-unit.sh: systemd
#     is not PID 1 here) against a private RabbitMQ node and a failed task
#     is routed to the DLQ;
#  3. the package is upgraded to the new one: the operator's config, the
#     key pair, the audit trail and the ledger cache stay byte for byte; the
#     files, owners, modes and conffiles are checked, `systemd-analyze
#     verify` and `security` run on the installed units (exposure at most
#     2.0, as docs/deploy-systemd.md says), the maintainer scripts do not
#     start or enable anything and only try-restart on upgrade; the new
#     daemon routes a second task and `audit verify` checks the trail
#     both versions wrote;
#  4. a downgrade back to the older one is refused;
#  5. remove keeps config, keys and trail; purge removes config.json and
#     the private key, keeps the (non-empty) trail with its public key;
#     Installed again after that purge: a new key pair, its public key beside
#     the kept one (both installs' records verify), a task routed; purged
#     again. The shipped config loads on the minimal root after the first
#     install (ca-certificates, which its tls_ca_file names, comes as a
#     dependency);
#  6. piuparts (install, purge; install the older from a local archive,
#     upgrade to the new, remove, purge) in a copy of the same cached root.
#
# usage: tests/deb/test-deb.sh [--keep] [--reuse]
#   --keep   leaves build-deb/test/ (the root's overlay, logs) for a look
#   --reuse  takes the two .debs a previous run left in build-deb/test/debs/
#            instead of building them (while working on this script)
# Needs root. DLQB_TEST_PORT_SHIFT=N moves the broker's ports (26672+N..)
# and the daemon's metrics port (26680+N). Exit 1 on any failed check.
set -euo pipefail

cd "$(dirname "$0")/../.."
tree=$(pwd)
keep=0
reuse=0
for arg in "$@"; do
    case "$arg" in
    --keep) keep=1 ;;
    --reuse) reuse=1 ;;
    *) echo "usage: tests/deb/test-deb.sh [--keep] [--reuse]" >&2; exit 2 ;;
    esac
done

shift_by=${DLQB_TEST_PORT_SHIFT:-0}
amqp_port=$((26672 + shift_by))
mgmt_port=$((amqp_port + 1))
metrics_port=$((26680 + shift_by))
work=$tree/build-deb/test
upper=$work/root
broker=$work/broker
apt_cache=${DLQB_CACHE:-/var/cache/dlq-bridge}/apt/bookworm
bridge_password=deb-test-bridge-password

started=$SECONDS
step() { printf '\n==> test-deb: %s  (%ds)\n' "$*" $((SECONDS - started)); }
failures=0
fail() { echo "test-deb: FAIL: $*" >&2; failures=$((failures + 1)); }
die() { echo "test-deb: FAIL: $*" >&2; exit 1; }

daemon_pid=""
broker_start=""
cleanup() {
    # A node still starting is let finish, so that it can be stopped.
    [ -n "$broker_start" ] && wait "$broker_start" 2>/dev/null
    if [ -n "$daemon_pid" ] && kill -0 "$daemon_pid" 2>/dev/null; then
        kill -TERM "$daemon_pid" 2>/dev/null || true
        wait "$daemon_pid" 2>/dev/null || true
    fi
    [ -f "$broker/server.pid" ] && scripts/broker-node.sh stop "$broker" >/dev/null 2>&1
    if [ "$keep" = 0 ]; then rm -rf "$upper" "$work/piuparts"; fi
    return 0
}
trap cleanup EXIT

# A command as root inside the throwaway copy of the bookworm root.
in_root_args() {
    root_args=(--bind "$work/debs:/debs" --bind "$tree/tests/deb:/tests"
        --bind "$apt_cache:/var/cache/apt/archives" "$bookworm" "$upper")
}
in_root() { scripts/in-root.sh "${root_args[@]}" "$@"; }
apt_in_root() { in_root /usr/bin/env DEBIAN_FRONTEND=noninteractive apt-get -y -q "$@"; }

# The management API of the test node (its guest user, on loopback only).
api() { curl -fsS -u guest:guest -H 'content-type: application/json' "$@"; }
queue_depth() { api "http://127.0.0.1:$mgmt_port/api/queues/%2f/$1" | jq -r '.messages // 0'; }

# Awaits a condition (a shell command) for at most $1 seconds.
await() {
    local limit=$1 i=0
    shift
    while ! "$@"; do
        i=$((i + 1))
        [ "$i" -le $((limit * 5)) ] || return 1
        sleep 0.2
    done
}

# A task into dsr.work, taken by a worker that rejects it (basic.reject,
# requeue=false, through the management API's get): the broker dead-letters
# it into dsr.failed, where the daemon takes it. max_attempts 1: its first
# failure is its last, so it goes to the DLQ.
fail_a_task() {
    local id=$1
    api -X POST "http://127.0.0.1:$mgmt_port/api/exchanges/%2f/amq.default/publish" -d "$(jq -cn --arg id "$id" '{
        routing_key: "dsr.work", payload: "{}", payload_encoding: "string",
        properties: {message_id: $id, delivery_mode: 2, headers: {
            request_id: $id, source_system: "deb-test", legal_basis: "gdpr_art_17",
            action: "deletion", max_attempts: 1}}}')" | jq -e '.routed' >/dev/null ||
        die "publishing $id to dsr.work was not routed"
    await 10 sh -c "[ \"\$(curl -fsS -u guest:guest http://127.0.0.1:$mgmt_port/api/queues/%2f/dsr.work | jq -r '.messages // 0')\" -ge 1 ]" ||
        die "$id never reached dsr.work"
    api -X POST "http://127.0.0.1:$mgmt_port/api/queues/%2f/dsr.work/get" \
        -d '{"count":1,"ackmode":"reject_requeue_false","encoding":"auto"}' |
        jq -e --arg id "$id" '.[0].properties.message_id == $id' >/dev/null ||
        die "the worker did not get $id from dsr.work"
}

# The DLQ item with this message id: its dlq_reason (peeked, requeued).
dlq_reason_of() {
    api -X POST "http://127.0.0.1:$mgmt_port/api/queues/%2f/dsr.dlq.manual/get" \
        -d '{"count":100,"ackmode":"ack_requeue_true","encoding":"auto"}' |
        jq -r --arg id "$1" '.[] | select(.properties.message_id == $id) | .properties.headers.dlq_reason'
}
in_dlq() { [ -n "$(dlq_reason_of "$1")" ]; }

# Starts the installed daemon as its unit would, waits for /healthz.
start_daemon() {
    # Not through in_root (a function: its background copy would be a
    # subshell): started directly, every step execs, so $! is the daemon.
    scripts/in-root.sh "${root_args[@]}" /tests/run-as-unit.sh dlq-bridge.service >>"$work/daemon.log" 2>&1 &
    daemon_pid=$!
    await 30 curl -fs -o /dev/null "http://127.0.0.1:$metrics_port/healthz" ||
        { tail -n 20 "$work/daemon.log" >&2; die "the daemon never became healthy (log: $work/daemon.log)"; }
}
# SIGTERM, as systemctl stop: it must finish and exit 0.
stop_daemon() {
    local rc=0
    kill -TERM "$daemon_pid"
    wait "$daemon_pid" || rc=$?
    daemon_pid=""
    [ "$rc" = 0 ] || fail "the daemon exited $rc on SIGTERM (log: $work/daemon.log)"
}

# The operator's config.json: the broker URL (the password is a file of its
# own), the trail and its keys, metrics on the test's port.
operator_config() {
    in_root /bin/sh -euc "
    cat >/etc/dlq-bridge/config.json <<EOF
{
  \"audit_log\": \"/var/lib/dlq-bridge/audit.log\",
  \"audit_public_keys\": \"/etc/dlq-bridge/audit-keys\",
  \"url\": \"amqp://dlq-bridge@127.0.0.1:$amqp_port/%2f\",
  \"metrics_addr\": \"127.0.0.1:$metrics_port\",
  \"log_format\": \"json\",
  \"instance\": \"deb-test\"
}
EOF"
}

# A task failed while the daemon runs must land in the DLQ, by max_attempts.
route_one() {
    fail_a_task "$1"
    await 20 in_dlq "$1" || die "$1 did not reach dsr.dlq.manual (log: $work/daemon.log)"
    [ "$(dlq_reason_of "$1")" = max_attempts ] || fail "$1 is in the DLQ with dlq_reason '$(dlq_reason_of "$1")', not max_attempts"
}

# The package rebuilt as a lower VERSION, without compiling it again (that
# second build was half of this test's time): the same files, the control
# file's Version and the version preinst compares against lowered, the
# only two places the version is in the package's behaviour.
# `scripts/build-deb.sh --version` builds the tree at a version for real.
at_lower_version() {
    local deb=$1 lower=$2 out=$3 tmp=$work/repack
    rm -rf "$tmp"
    dpkg-deb -R "$deb" "$tmp"
    sed -i "s/^Version: .*/Version: $lower/" "$tmp/DEBIAN/control"
    grep -q "^this_version=\"$version\"\$" "$tmp/DEBIAN/preinst" ||
        die "preinst has no this_version=\"$version\" line to lower"
    sed -i "s/^this_version=\"$version\"\$/this_version=\"$lower\"/" "$tmp/DEBIAN/preinst"
    dpkg-deb --root-owner-group -b "$tmp" "$out/dlq-bridge_${lower}_$(dpkg-deb -f "$deb" Architecture).deb" >/dev/null
    rm -rf "$tmp"
    echo "$out/dlq-bridge_${lower}_$(dpkg-deb -f "$deb" Architecture).deb"
}

# stat of a path in the root: "owner:group mode".
stat_in_root() { in_root stat -c '%U:%G %a' "$1" 2>/dev/null; }
expect_stat() {
    local got
    got=$(stat_in_root "$1") || { fail "$1 is missing"; return; }
    [ "$got" = "$2" ] || fail "$1 is '$got', not '$2'"
}
sum_in_root() { in_root sha256sum "$@"; }

if [ "$reuse" = 1 ]; then
    find "$work" -mindepth 1 -maxdepth 1 ! -name debs -exec rm -rf {} +
else
    rm -rf "$work"
fi
mkdir -p "$work/debs/new" "$work/debs/old" "$apt_cache/partial"

# The broker node starts (a minute on a loaded machine) while the
# packages build.
scripts/broker-node.sh start "$broker" "$amqp_port" "dlqb-deb-$amqp_port" >"$work/broker.log" 2>&1 &
broker_start=$!

step "the cached bookworm root"
bookworm=$(scripts/debian-root.sh bookworm bookworm-minbase) || die "no bookworm-minbase root"
in_root_args

if [ "$reuse" = 1 ]; then
    new_deb=$(ls "$work"/debs/new/dlq-bridge_*.deb) && old_deb=$(ls "$work"/debs/old/dlq-bridge_*.deb) ||
        die "--reuse: no .debs in $work/debs/ (run once with --keep)"
    version=$(dpkg-deb -f "$new_deb" Version)
    old_version=$(dpkg-deb -f "$old_deb" Version)
else
    step "build the package (scripts/build-deb.sh; lintian)"
    new_deb=$(scripts/build-deb.sh --nocheck --out "$work/debs/new") || die "the package build or lintian failed"
    version=$(dpkg-deb -f "$new_deb" Version)
    old_version="$version~older"
    step "the same package as $old_version (for the upgrade)"
    old_deb=$(at_lower_version "$new_deb" "$old_version" "$work/debs/old")
fi
dpkg --compare-versions "$old_version" lt "$version" || die "$old_version does not sort before $version"

step "the maintainer scripts: nothing enabled or started; on upgrade only a try-restart"
ctl=$work/control
dpkg-deb -e "$new_deb" "$ctl"
grep -q 'deb-systemd-invoke try-restart' "$ctl/postinst" || fail "postinst does not try-restart the units on upgrade"
# (A `deb-systemd-helper enable` under `was-enabled` only keeps an
# operator's own choice over an upgrade.)
grep -Eq '^\s*(deb-systemd-invoke (start|restart)|systemctl (--system )?(start|restart|enable))' "$ctl/postinst" &&
    fail "postinst starts or enables a unit: $(grep -E '^\s*(deb-systemd-invoke (start|restart)|systemctl (--system )?(start|restart|enable))' "$ctl/postinst")"
grep -q 'deb-systemd-invoke stop' "$ctl/prerm" || fail "prerm does not stop the units on remove"
grep -q 'preinst-systemd-stop\|deb-systemd-invoke stop' "$ctl/preinst" && fail "preinst stops the units before an upgrade"
[ "$(cat "$ctl/conffiles")" = /etc/dlq-bridge/config.json ] || fail "conffiles is '$(tr '\n' ' ' <"$ctl/conffiles")', not /etc/dlq-bridge/config.json"

step "broker: a RabbitMQ node on $amqp_port, a broker user for the bridge"
wait "$broker_start" ||
    { tail -n 20 "$work/broker.log" >&2; die "the test broker did not start"; }
scripts/broker-node.sh ctl "$broker" add_user dlq-bridge "$bridge_password" >/dev/null
scripts/broker-node.sh ctl "$broker" set_permissions -p / dlq-bridge '.*' '.*' '.*' >/dev/null

step "fresh root: apt install ./$(basename "$old_deb")"
apt_in_root update >"$work/apt.log" 2>&1 || die "apt-get update in the root (log: $work/apt.log)"
apt_in_root install --no-install-recommends "/debs/old/$(basename "$old_deb")" >"$work/install-old.log" 2>&1 ||
    { tail -n 20 "$work/install-old.log" >&2; die "installing $old_version failed"; }
grep -q 'nothing is enabled or started' "$work/install-old.log" || fail "the first install does not say that nothing is started"
grep -q 'made the audit key pair' "$work/install-old.log" || fail "the first install does not say it made the audit key pair"
# The shipped config loads on this minimal root (its tls_ca_file is
# ca-certificates', which the package depends on): drain status reads the
# config and needs no broker.
dpkg-deb -f "$new_deb" Depends | grep -qw ca-certificates ||
    fail "the package does not depend on ca-certificates, whose bundle its shipped config names"
rc=0
in_root dlq-bridge drain status >"$work/shipped-config.log" 2>&1 || rc=$?
[ "$rc" = 0 ] || fail "the shipped config does not load on a minimal root (exit $rc: $(tail -n 1 "$work/shipped-config.log"))"

step "the operator's part: broker URL, password; the daemon ($old_version) as its unit runs it"
operator_config
in_root /bin/sh -euc "
    install -m 0600 /dev/null /etc/dlq-bridge/bridge_password
    echo '$bridge_password' >/etc/dlq-bridge/bridge_password"
start_daemon
route_one deb-task-1
stop_daemon
# A ledger cache the drain keeps there (drain.json's ledger_cache): the
# package must never touch one.
in_root setpriv --reuid=dlq-bridge --regid=dlq-bridge --init-groups \
    sh -c 'echo "ledger cache of the test" >/var/lib/dlq-bridge/drain-ledger.cache'
kept="/etc/dlq-bridge/config.json /etc/dlq-bridge/bridge_password /etc/dlq-bridge/audit.key /etc/dlq-bridge/audit-keys/$(uname -n).pem /var/lib/dlq-bridge/audit.log /var/lib/dlq-bridge/drain-ledger.cache"
# shellcheck disable=SC2086 # a list of paths
before=$(sum_in_root $kept) || die "a file the upgrade must keep is missing before it"

step "upgrade: apt install ./$(basename "$new_deb")"
apt_in_root install --no-install-recommends "/debs/new/$(basename "$new_deb")" >"$work/upgrade.log" 2>&1 ||
    { tail -n 20 "$work/upgrade.log" >&2; die "the upgrade to $version failed"; }
[ "$(in_root dpkg-query -W -f='${Version}' dlq-bridge)" = "$version" ] || fail "dlq-bridge is not at $version after the upgrade"
# shellcheck disable=SC2086
after=$(sum_in_root $kept) || fail "a file the upgrade must keep is gone"
[ "$before" = "$after" ] || fail "the upgrade changed the operator's config, keys, trail or cache: $(diff <(echo "$before") <(echo "$after") | tr '\n' ' ')"
grep -q 'made the audit key pair' "$work/upgrade.log" && fail "the upgrade made a new audit key pair"

step "files, owners, modes, conffiles"
expect_stat /usr/bin/dlq-bridge "root:root 755"
expect_stat /etc/dlq-bridge/config.json "root:root 644"
expect_stat /etc/dlq-bridge/audit.key "root:root 600"
expect_stat "/etc/dlq-bridge/audit-keys/$(uname -n).pem" "root:root 644"
expect_stat /var/lib/dlq-bridge "dlq-bridge:dlq-bridge 700"
expect_stat /var/lib/dlq-bridge/audit.log "dlq-bridge:dlq-bridge 600"
for f in /usr/share/man/man1/dlq-bridge.1.gz /usr/share/dlq-bridge/alerts.yml \
    /usr/share/dlq-bridge/grafana-dashboard.json /usr/share/dlq-bridge/definitions/definitions.json \
    /usr/share/doc/dlq-bridge/copyright /usr/lib/sysusers.d/dlq-bridge.conf /usr/lib/tmpfiles.d/dlq-bridge.conf; do
    expect_stat "$f" "root:root 644"
done
in_root getent passwd dlq-bridge | grep -q ':/var/lib/dlq-bridge:/usr/sbin/nologin$' ||
    fail "the user dlq-bridge is not a system user with home /var/lib/dlq-bridge and no login: $(in_root getent passwd dlq-bridge)"
in_root dpkg-query -W -f='${Conffiles}\n' dlq-bridge | grep -q '^ /etc/dlq-bridge/config.json [0-9a-f]\{32\}$' ||
    fail "config.json is not a conffile of the installed package"
# The pristine conffile has the trail on and no password.
dpkg-deb --fsys-tarfile "$new_deb" | tar -xOf - ./etc/dlq-bridge/config.json >"$work/config.json"
jq -e '.audit_log == "/var/lib/dlq-bridge/audit.log" and .audit_public_keys == "/etc/dlq-bridge/audit-keys"' \
    "$work/config.json" >/dev/null || fail "the shipped config.json does not turn the audit trail on"
grep -Eq 'amqps?://[^/@:]+:[^/@]+@|password' "$work/config.json" && fail "the shipped config.json holds a password"
in_root man -w dlq-bridge >/dev/null 2>&1 || in_root test -s /usr/share/man/man1/dlq-bridge.1.gz || fail "no manual page"
units="dlq-bridge.service dlq-bridge-reconcile.service dlq-bridge-reconcile.timer dlq-bridge-drain.service dlq-bridge-drain.timer dlq-bridge-console.service"
for u in $units; do
    expect_stat "/lib/systemd/system/$u" "root:root 644"
    in_root test -e "/etc/systemd/system/multi-user.target.wants/$u" && fail "$u is enabled by the package"
    in_root test -e "/etc/systemd/system/timers.target.wants/$u" && fail "$u is enabled by the package"
done

# Each unit's Documentation= file:// link opens (not a .gz beside it).
for u in $units; do
    for doc in $(in_root sed -n 's/^Documentation=//p' "/lib/systemd/system/$u"); do
        case "$doc" in
        file://*) in_root test -f "${doc#file://}" || fail "$u: Documentation= $doc is not in the package" ;;
        esac
    done
done

step "systemd-analyze verify and security on the installed units"
# shellcheck disable=SC2086,SC2016
in_root /bin/sh -c 'cd /lib/systemd/system && systemd-analyze verify '"$units"' 2>&1' >"$work/verify.log" || true
if grep -q 'dlq-bridge' "$work/verify.log"; then
    fail "systemd-analyze verify: $(grep dlq-bridge "$work/verify.log" | tr '\n' ' ')"
fi
for u in dlq-bridge.service dlq-bridge-reconcile.service dlq-bridge-drain.service dlq-bridge-console.service; do
    exposure=$(in_root systemd-analyze security --offline=yes --threshold=20 "/lib/systemd/system/$u" 2>&1 |
        sed -n 's/.*Overall exposure level for [^:]*: \([0-9.]*\).*/\1/p')
    echo "test-deb: $u: exposure ${exposure:-?} (docs/deploy-systemd.md: 1.5, at most 2.0)"
    [ -n "$exposure" ] && awk -v e="$exposure" 'BEGIN { exit !(e <= 2.0) }' || fail "$u: exposure '${exposure:-?}' above 2.0"
done

step "the upgraded daemon ($version) routes a failed task; audit verify over both runs"
start_daemon
route_one deb-task-2
stop_daemon
# As an operator on the host: the trail and keys from config.json, the default.
in_root dlq-bridge audit verify >"$work/verify-trail.log" 2>&1 ||
    fail "audit verify of the trail both versions wrote: $(tail -n 3 "$work/verify-trail.log")"
for id in deb-task-1 deb-task-2; do
    in_root dlq-bridge audit show --request-id "$id" >"$work/show-$id.log" 2>&1
    grep -q 'dsr.dlq.manual' "$work/show-$id.log" ||
        fail "the trail does not show $id going to the DLQ"
done

step "a downgrade to $old_version is refused"
if apt_in_root install --allow-downgrades --no-install-recommends "/debs/old/$(basename "$old_deb")" >"$work/downgrade.log" 2>&1; then
    fail "the downgrade to $old_version was not refused"
fi
grep -q 'refusing to downgrade' "$work/downgrade.log" || fail "the refused downgrade does not say why"
[ "$(in_root dpkg-query -W -f='${Version} ${Status}' dlq-bridge)" = "$version install ok installed" ] ||
    fail "after the refused downgrade dlq-bridge is '$(in_root dpkg-query -W -f='${Version} ${Status}' dlq-bridge)'"

step "remove: config, keys and trail stay"
# shellcheck disable=SC2086
before=$(sum_in_root $kept) || die "a file remove must keep is missing before it"
apt_in_root remove dlq-bridge >"$work/remove.log" 2>&1 || die "apt-get remove failed (log: $work/remove.log)"
in_root test -e /usr/bin/dlq-bridge && fail "remove left /usr/bin/dlq-bridge"
# shellcheck disable=SC2086
[ "$(sum_in_root $kept 2>/dev/null)" = "$before" ] || fail "remove changed config, keys, trail or cache"

step "purge: what the package made goes, the trail stays with its public key"
apt_in_root purge dlq-bridge >"$work/purge.log" 2>&1 || die "apt-get purge failed (log: $work/purge.log)"
in_root test -e /etc/dlq-bridge/config.json && fail "purge left config.json"
in_root test -e /etc/dlq-bridge/audit.key && fail "purge left the audit key the package made"
in_root test -e /etc/dlq-bridge/.package-made && fail "purge left its list of made files"
in_root test -e /etc/dlq-bridge/bridge_password || fail "purge removed the operator's bridge_password"
in_root test -s /var/lib/dlq-bridge/audit.log || fail "purge removed the audit trail"
in_root test -e "/etc/dlq-bridge/audit-keys/$(uname -n).pem" || fail "purge removed the public key of the kept trail"
grep -q 'kept the audit trail' "$work/purge.log" || fail "purge does not say it kept the audit trail"

step "installed again after the purge: a new key pair beside the kept public key; both installs' records verify"
apt_in_root install --no-install-recommends "/debs/new/$(basename "$new_deb")" >"$work/reinstall.log" 2>&1 ||
    { tail -n 20 "$work/reinstall.log" >&2; die "installing $version again after the purge failed"; }
grep -q 'made the audit key pair' "$work/reinstall.log" || fail "the install after the purge made no key pair"
in_root test -e "/etc/dlq-bridge/audit-keys/$(uname -n).pem" || fail "the install after the purge lost the kept public key"
npub=$(in_root sh -c 'ls /etc/dlq-bridge/audit-keys/*.pem | wc -l')
[ "$npub" = 2 ] || fail "after the reinstall audit-keys holds $npub public keys, not the kept one and the new one"
operator_config
start_daemon
route_one deb-task-3
stop_daemon
in_root dlq-bridge audit verify >"$work/verify-reinstall.log" 2>&1 ||
    fail "audit verify over the records of both installs: $(tail -n 3 "$work/verify-reinstall.log")"
apt_in_root purge dlq-bridge >"$work/purge-again.log" 2>&1 || die "the second purge failed (log: $work/purge-again.log)"

step "piuparts: install, purge; the older from an archive, upgrade, remove, purge"
repo=$work/piuparts/repo
mkdir -p "$repo"
cp "$old_deb" "$repo/"
(cd "$repo" && dpkg-scanpackages --multiversion . >Packages 2>/dev/null)
mirror=$(scripts/debian-root.sh --mirror)
# Left by systemd, which the package depends on and piuparts purges after
# it (its tmpfiles make them: provision.conf /root/.ssh, systemd.conf the
# private/ directories; coredump and pstore its services'), not by
# dlq-bridge: the purge of dlq-bridge alone is checked above.
systemd_leftovers=()
for d in /root/.ssh/ /var/cache/private/ /var/lib/private/ /var/log/private/ \
    /var/lib/systemd/coredump/ /var/lib/systemd/pstore/; do
    systemd_leftovers+=(--ignore="$d")
done
if ! piuparts --existing-chroot="$bookworm" --distribution=bookworm --mirror="$mirror main" \
    --bindmount="$repo" --extra-repo="deb [trusted=yes] file://$repo ./" \
    --tmpdir="$work/piuparts" "${systemd_leftovers[@]}" \
    "$new_deb" >"$work/piuparts.log" 2>&1; then
    grep -E '(ERROR|FAIL):' -A8 "$work/piuparts.log" | head -n 30 >&2 || true
    fail "piuparts (log: $work/piuparts.log)"
fi
grep -q 'PASS: All tests' "$work/piuparts.log" || fail "piuparts did not pass all tests (log: $work/piuparts.log)"
# Its upgrade test runs only when the package is in an archive: the local one.
grep -q 'apt-cache knows about the following packages: dlq-bridge' "$work/piuparts.log" &&
    grep -q "Get:1 file:$repo ./ dlq-bridge $old_version" "$work/piuparts.log" ||
    fail "piuparts did not test the upgrade from $old_version (log: $work/piuparts.log)"

step "no maintainer script said a word of error"
# (dash's "script: line: ..." lines: e.g. a #DEBHELPER# token in a comment
# turns the rest of that line into a command.)
if grep -h '/var/lib/dpkg/info/dlq-bridge\.[a-z]*: [0-9]*: ' "$work"/{install-old,upgrade,downgrade,remove,purge}.log; then
    fail "a maintainer script of dlq-bridge printed an error (above)"
fi

step "done: $failures failure(s)"
[ "$failures" = 0 ]
