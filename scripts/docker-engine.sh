#!/usr/bin/env bash
# The project's own docker engine: a dockerd (and the containerd under it)
# with every folder of its own under ${DLQB_CACHE:-/var/cache/dlq-bridge}/docker,
# so it never touches a system engine, its containers or its images, and the
# images it builds survive between runs. No registry is reachable from these
# machines: `images` builds the Debian base images the Dockerfiles name from
# debootstrap roots (scripts/debian-root.sh). The compose v2 tool is Debian
# trixie's docker-compose package, unpacked into the same folder.
#
# usage: scripts/docker-engine.sh start    starts the engine (once; a second
#                                          start finds it running), prints
#                                          the environment for the client
#        scripts/docker-engine.sh env      prints that environment
#        scripts/docker-engine.sh images   builds the missing base images
#        scripts/docker-engine.sh stop     stops the engine by the pids it wrote
#
# `eval "$(scripts/docker-engine.sh start)"` sets DOCKER_HOST, DOCKER_CONFIG
# (holding the compose plugin) and PATH (Debian's docker client first).
# start exits 77 with one line saying why when dockerd cannot start at all
# here (not root, no docker.io, the kernel refuses containers); any other
# failure exits 1. Needs root.
set -euo pipefail
cd "$(dirname "$0")/.."

cache=${DLQB_CACHE:-/var/cache/dlq-bridge}
dir="$cache/docker"
sock="$dir/docker.sock"
ctr_sock="$dir/exec/containerd/containerd.sock"
log="$dir/dockerd.log"
# Debian's client (docker.io, the same release as the engine); not whatever
# docker happens to come first in PATH.
client=/usr/bin/docker

say() { echo "docker-engine: $*" >&2; }
skip() { echo "docker-engine: cannot start dockerd here: $*" >&2; exit 77; }

print_env() {
    printf 'export DOCKER_HOST=%q\n' "unix://$sock"
    printf 'export DOCKER_CONFIG=%q\n' "$dir/config"
    printf 'export PATH=%q\n' "/usr/bin:$PATH"
}

alive() { # pidfile
    local pid
    [ -f "$1" ] && pid=$(cat "$1") && [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null
}

# Compose v2 from trixie, fetched with apt (a private state folder, the
# machine's own mirror) and unpacked with dpkg -x: the machine's apt sources
# and package database stay as they were.
compose_plugin() {
    local plugin="$dir/config/cli-plugins/docker-compose"
    [ -x "$plugin" ] && return 0
    local mirror apt="$dir/apt" deb
    mirror=$(scripts/debian-root.sh --mirror) || return 1
    mkdir -p "$apt/lists/partial" "$apt/cache/archives/partial" "$apt/deb" "$dir/config/cli-plugins"
    echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $mirror trixie main" \
        >"$apt/sources.list"
    local opts=(-o "Dir::Etc::SourceList=$apt/sources.list" -o Dir::Etc::SourceParts=/nonexistent
        -o "Dir::State::Lists=$apt/lists" -o "Dir::Cache=$apt/cache" -o APT::Get::List-Cleanup=0)
    say "fetching compose v2 (trixie's docker-compose) from $mirror"
    if ! apt-get "${opts[@]}" update >"$apt/update.log" 2>&1; then
        say "apt-get update for trixie failed; see $apt/update.log"
        return 1
    fi
    rm -f "$apt/deb/"*.deb
    if ! (cd "$apt/deb" && apt-get "${opts[@]}" download docker-compose >"$apt/download.log" 2>&1); then
        say "apt-get download docker-compose failed; see $apt/download.log"
        return 1
    fi
    deb=$(ls "$apt/deb/"docker-compose_*.deb)
    rm -rf "$apt/unpacked"
    dpkg -x "$deb" "$apt/unpacked"
    install -m 755 "$apt/unpacked/usr/libexec/docker/cli-plugins/docker-compose" "$plugin"
    say "compose plugin: $("$plugin" version --short) ($(basename "$deb"))"
}

start() {
    [ "$(id -u)" -eq 0 ] || skip "it needs root (run as root)"
    [ -x /usr/sbin/dockerd ] && [ -x /usr/bin/containerd ] && [ -x "$client" ] ||
        skip "docker.io is not installed (scripts/install-deps.sh installs it)"
    mkdir -p "$dir/data" "$dir/exec/containerd" "$dir/containerd" "$dir/config"
    compose_plugin || exit 1
    if alive "$dir/dockerd.pid" && DOCKER_HOST="unix://$sock" "$client" version >/dev/null 2>&1; then
        print_env
        return 0
    fi
    stop_engine quiet
    # Its own containerd too: dockerd would otherwise use a system one at
    # /run/containerd/containerd.sock if one were running.
    cat >"$dir/containerd.toml" <<EOF
version = 2
root = "$dir/containerd"
state = "$dir/exec/containerd/state"
disabled_plugins = ["io.containerd.grpc.v1.cri"]
[grpc]
  address = "$ctr_sock"
[ttrpc]
  address = "$ctr_sock.ttrpc"
[debug]
  address = ""
EOF
    : >"$log"
    setsid /usr/bin/containerd --config "$dir/containerd.toml" >>"$dir/containerd.log" 2>&1 </dev/null &
    echo $! >"$dir/containerd.pid"
    local deadline=$((SECONDS + 30))
    until [ -S "$ctr_sock" ]; do
        alive "$dir/containerd.pid" || skip "containerd exited at once (last line of $dir/containerd.log: $(tail -n 1 "$dir/containerd.log"))"
        [ $SECONDS -lt $deadline ] || { stop_engine quiet; skip "containerd did not open $ctr_sock within 30 s"; }
        sleep 0.2
    done
    setsid /usr/sbin/dockerd --data-root "$dir/data" --exec-root "$dir/exec" \
        --host "unix://$sock" --pidfile "$dir/dockerd.pid" --containerd "$ctr_sock" \
        --storage-driver vfs --iptables=false --ip-masq=false --ip-forward=false --bridge=none \
        --log-level warn >>"$log" 2>&1 </dev/null &
    local launched=$!
    deadline=$((SECONDS + 60))
    until DOCKER_HOST="unix://$sock" "$client" version >/dev/null 2>&1; do
        if ! kill -0 "$launched" 2>/dev/null; then
            stop_engine quiet
            skip "dockerd exited at once (last line of $log: $(tail -n 1 "$log"))"
        fi
        if [ $SECONDS -ge $deadline ]; then
            stop_engine quiet
            skip "dockerd did not answer on $sock within 60 s (see $log)"
        fi
        sleep 0.2
    done
    say "dockerd $(DOCKER_HOST="unix://$sock" "$client" version -f '{{.Server.Version}}') up on $sock (pid $(cat "$dir/dockerd.pid"))"
    print_env
}

# Stops dockerd, then containerd, each by the pid recorded for it.
stop_engine() {
    local quiet=${1:-} f pid deadline
    for f in dockerd containerd; do
        alive "$dir/$f.pid" || { rm -f "$dir/$f.pid"; continue; }
        pid=$(cat "$dir/$f.pid")
        kill -TERM "$pid"
        # dockerd stops its containers first (up to 15 s each, in parallel).
        deadline=$((SECONDS + 40))
        while kill -0 "$pid" 2>/dev/null && [ $SECONDS -lt $deadline ]; do sleep 0.2; done
        if kill -0 "$pid" 2>/dev/null; then
            say "$f (pid $pid) did not stop within 40 s; killing it"
            kill -KILL "$pid" 2>/dev/null || true
        fi
        rm -f "$dir/$f.pid"
        [ -n "$quiet" ] || say "stopped $f (pid $pid)"
    done
    rm -f "$sock"
}

# debian:bookworm and debian:bookworm-slim from one minbase root, and
# debian:trixie-slim for the test broker, set up as the official images are:
# apt keeps no package cache or lists in a layer (docker-clean), fetches no
# translations, and the slim ones carry no documentation, man pages or
# locales (and dpkg is told to keep it so). Re-imported only when missing or
# made by an older version of this script (the label dlqb.base).
base_version=2
images() {
    eval "$(print_env)"
    local root
    have() { [ "$(docker image inspect -f '{{index .Config.Labels "dlqb.base"}}' "$1" 2>/dev/null)" = "$base_version" ]; }
    if ! have debian:bookworm || ! have debian:bookworm-slim; then
        root=$(scripts/debian-root.sh bookworm bookworm-minbase)
        import "$root" debian:bookworm full
        import "$root" debian:bookworm-slim slim
    fi
    if ! have debian:trixie-slim; then
        root=$(scripts/debian-root.sh trixie trixie-minbase)
        import "$root" debian:trixie-slim slim
    fi
}

import() { # root tag full|slim
    local root=$1 tag=$2 kind=$3 extra="$dir/base-extra"
    local skip=(-path ./proc -o -path ./sys -o -path ./dev -o -path ./.dlqb-root
        -o -path './var/lib/apt/lists/*' -o -path './var/cache/apt/*.bin')
    rm -rf "$extra"
    mkdir -p "$extra/etc/apt/apt.conf.d" "$extra/etc/dpkg/dpkg.cfg.d"
    cat >"$extra/etc/apt/apt.conf.d/docker-clean" <<'EOF2'
// No package cache in an image layer: remove downloaded packages and the
// binary caches after every dpkg run and update.
DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
APT::Update::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
EOF2
    printf 'Acquire::Languages "none";\n' >"$extra/etc/apt/apt.conf.d/docker-no-languages"
    local files=(./etc/apt/apt.conf.d/docker-clean ./etc/apt/apt.conf.d/docker-no-languages)
    if [ "$kind" = slim ]; then
        skip+=(-o -path './usr/share/man/*' -o -path './usr/share/info/*' -o -path './usr/share/locale/*'
            -o \( -path './usr/share/doc/*/*' ! -name copyright \))
        cat >"$extra/etc/dpkg/dpkg.cfg.d/docker-slim" <<'EOF2'
# no documentation beyond copyright, no man pages, no translations
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
EOF2
        files+=(./etc/dpkg/dpkg.cfg.d/docker-slim)
    fi
    say "importing $tag from $root"
    (cd "$root" && find . \( "${skip[@]}" \) -prune -o -print0 | LC_ALL=C sort -z) >"$dir/import.list"
    # proc, sys and dev stay as empty folders (the engine mounts them).
    printf './proc\0./sys\0./dev\0' >>"$dir/import.list"
    tar --numeric-owner --no-recursion -C "$root" --null -T "$dir/import.list" \
        -C "$extra" "${files[@]}" -cf - |
        docker import -c 'CMD ["bash"]' -c "LABEL dlqb.base=$base_version" - "$tag" >/dev/null
    rm -f "$dir/import.list"
}

case "${1:-}" in
start) start ;;
env) print_env ;;
images) images ;;
stop) stop_engine ;;
*) echo "usage: $0 start|env|images|stop" >&2; exit 2 ;;
esac
