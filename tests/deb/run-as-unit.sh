#!/bin/bash
# Runs an installed service's ExecStart the way systemd would, for a root
# where systemd is not PID 1 (tests/deb/test-deb.sh, inside the throwaway
# copy): as the unit's User= and its group, under its UMask=, with only its
# Environment= lines, its LoadCredential= files copied into a credentials
# directory only that user reads (%d), %S the state directory root, and the
# StateDirectory= made with StateDirectoryMode=. It reads all of that from
# the installed unit file, so a change of the unit is what gets tested.
# The sandboxing directives (ProtectSystem=, ...) are not applied: the test
# checks them with systemd-analyze instead.
#
# usage: run-as-unit.sh UNIT     e.g. run-as-unit.sh dlq-bridge.service
# Execs the command (its pid is the caller's); exit 2 when the unit lacks
# what this needs.
set -euo pipefail

unit=${1:?usage: run-as-unit.sh UNIT}
file=""
for dir in /etc/systemd/system /usr/lib/systemd/system /lib/systemd/system; do
    [ -f "$dir/$unit" ] && { file=$dir/$unit; break; }
done
[ -n "$file" ] || { echo "run-as-unit: no installed $unit" >&2; exit 2; }

value() { sed -n "s/^$1=//p" "$file"; }
user=$(value User | tail -n 1)
[ -n "$user" ] || { echo "run-as-unit: $unit has no User=" >&2; exit 2; }
getent passwd "$user" >/dev/null || { echo "run-as-unit: no user $user (the package should have made it)" >&2; exit 2; }
umask_value=$(value UMask | tail -n 1)
state=$(value StateDirectory | tail -n 1)
state_mode=$(value StateDirectoryMode | tail -n 1)
creds=/run/credentials/$unit
state_root=/var/lib

# %d, %S and %% as systemd expands them in Environment= and ExecStart=.
expand() {
    local s=$1
    s=${s//%d/$creds}
    s=${s//%S/$state_root}
    printf '%s' "${s//%%/%}"
}

if [ -n "$state" ]; then
    install -d -o "$user" -g "$(id -gn "$user")" -m "${state_mode:-0755}" "$state_root/$state"
fi

rm -rf "$creds"
install -d -o "$user" -m 0500 "$creds"
while IFS= read -r spec; do
    name=${spec%%:*} path=${spec#*:}
    [ -r "$path" ] || { echo "run-as-unit: credential $name: cannot read $path (systemd would refuse to start $unit)" >&2; exit 1; }
    install -o "$user" -m 0400 "$path" "$creds/$name"
done < <(value LoadCredential)

env_args=()
while IFS= read -r assignment; do
    env_args+=("$(expand "$assignment")")
done < <(value Environment)

exec_start=$(value ExecStart | tail -n 1)
read -r -a command <<<"$(expand "$exec_start")"
[ "${#command[@]}" -gt 0 ] || { echo "run-as-unit: $unit has no ExecStart=" >&2; exit 2; }

[ -n "$umask_value" ] && umask "$umask_value"
exec setpriv --reuid="$user" --regid="$(id -g "$user")" --init-groups --no-new-privs \
    env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin "${env_args[@]}" "${command[@]}"
