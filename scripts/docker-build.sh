#!/usr/bin/env bash
# Builds the dlq-bridge image (docker/Dockerfile, context: the repository root)
# and the example worker image, exactly as CI does, then checks that the image
# starts and answers `dlq-bridge version` as its non-root user.
#
# usage: scripts/docker-build.sh [TAG]      (default tag: dlq-bridge:local)
# Exits 3 with "no docker engine" when the docker client cannot reach an
# engine, so a machine without one fails clearly instead of pretending.
set -euo pipefail
cd "$(dirname "$0")/.."

tag=${1:-dlq-bridge:local}

if ! command -v docker >/dev/null 2>&1; then
    echo "docker-build: no docker engine: the docker client is not installed" >&2
    exit 3
fi
if ! docker info >/dev/null 2>&1; then
    echo "docker-build: no docker engine: 'docker info' cannot reach one (is the daemon running?)" >&2
    exit 3
fi

# The image ships definitions/definitions.json: refuse a stale one.
if [ -x build/dlq-bridge ]; then
    scripts/gen-definitions.sh --check build/dlq-bridge
fi

docker build -f docker/Dockerfile -t "$tag" .
docker build -t dlq-bridge-example-worker:local docker/example-worker

user=$(docker run --rm --entrypoint id "$tag" -u)
if [ "$user" = 0 ]; then
    echo "docker-build: the image runs as root" >&2
    exit 1
fi
docker run --rm "$tag" version
echo "docker-build: built $tag (runs as uid $user) and dlq-bridge-example-worker:local"
