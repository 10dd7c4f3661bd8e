#!/usr/bin/env bash
# Builds the dlq-bridge image (docker/Dockerfile, context: the repository root)
# and the example worker image on the project's own docker engine
# (scripts/docker-engine.sh: its own dockerd, the Debian base images built
# from debootstrap roots), then checks that the image starts and answers
# `dlq-bridge version` as its non-root user, and prints the images' sizes.
# The images stay in the engine's cache for scripts/compose-test.sh.
#
# usage: scripts/docker-build.sh [TAG]      (default tag: dlq-bridge:local; as root)
# Exits 3 with "no docker engine" and the reason when dockerd cannot start here.
set -euo pipefail
cd "$(dirname "$0")/.."

tag=${1:-dlq-bridge:local}
case "$tag" in
-*) echo "usage: $0 [TAG]" >&2; exit 2 ;;
esac

# The image ships definitions/definitions.json: refuse a stale one.
if [ -x build/dlq-bridge ]; then
    scripts/gen-definitions.sh --check build/dlq-bridge
fi

cache=${DLQB_CACHE:-/var/cache/dlq-bridge}
mkdir -p "$cache/docker"
exec 9>"$cache/docker/lock"
flock -w 1800 9 || { echo "docker-build: the engine's lock ($cache/docker/lock) was held for 30 minutes" >&2; exit 1; }
rc=0
engine_env=$(scripts/docker-engine.sh start) || rc=$?
if [ "$rc" = 77 ]; then
    echo "docker-build: no docker engine (see the line above)" >&2
    exit 3
fi
[ "$rc" = 0 ] || exit 1
trap 'scripts/docker-engine.sh stop' EXIT
eval "$engine_env"
scripts/docker-engine.sh images

docker build --network host -f docker/Dockerfile -t "$tag" .
docker build --network host -t dlq-bridge-example-worker:local docker/example-worker

user=$(docker run --rm --network none --entrypoint id "$tag" -u)
if [ "$user" = 0 ]; then
    echo "docker-build: the image runs as root" >&2
    exit 1
fi
docker run --rm --network none "$tag" version
docker image ls --format '{{.Repository}}:{{.Tag}} {{.Size}}' "${tag%%:*}"
docker image ls --format '{{.Repository}}:{{.Tag}} {{.Size}}' dlq-bridge-example-worker
echo "docker-build: built $tag (runs as uid $user) and dlq-bridge-example-worker:local"
