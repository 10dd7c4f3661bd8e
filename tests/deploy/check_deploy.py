#!/usr/bin/env python3
"""Checks of the deployment files that need no broker and no docker engine.

usage: check_deploy.py compose SOURCE_DIR DLQ_BRIDGE_BINARY
       check_deploy.py docs SOURCE_DIR DLQ_BRIDGE_BINARY

compose: docker/docker-compose.yml parses; the services, healthcheck and
  start order are there; every DLQ_BRIDGE_* variable it or the Dockerfile sets
  is one the bridge knows; every path it mounts or builds from exists; the
  Dockerfile is multi-stage, non-root, with a /healthz HEALTHCHECK; and the
  bridge's password is not in its URL.
docs: docs/configuration.md holds exactly `dlq-bridge help settings`; the
  man page docs/dlq-bridge.1.md names every command of `dlq-bridge --help`
  and every option of `dlq-bridge help COMMAND`, and every setting.
Prints one line per problem and exits 1 when there is any.
"""
import os
import re
import subprocess
import sys

problems = []


def problem(text):
    problems.append(text)
    print(f"check_deploy: {text}")


def run(binary, *args):
    env = {k: v for k, v in os.environ.items() if not k.startswith("DLQ_BRIDGE_")}
    out = subprocess.run([binary, *args], capture_output=True, text=True, env=env, check=False)
    if out.returncode != 0:
        problem(f"'dlq-bridge {' '.join(args)}' exited {out.returncode}: {out.stderr.strip()}")
    return out.stdout


def known_variables(binary):
    table = run(binary, "help", "settings")
    names = set(re.findall(r"`(DLQ_BRIDGE_[A-Z0-9_]+)`", table))
    if "DLQ_BRIDGE_URL" not in names:
        problem("'dlq-bridge help settings' lists no DLQ_BRIDGE_URL")
    return names


def environment_of(service):
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) if "=" in item else (item, None) for item in env)
    return env


def check_compose(src, binary):
    try:
        import yaml
    except ImportError:
        problem("python3-yaml is missing (scripts/install-deps.sh installs it)")
        return
    compose_dir = os.path.join(src, "docker")
    compose_path = os.path.join(compose_dir, "docker-compose.yml")
    with open(compose_path, encoding="utf-8") as f:
        doc = yaml.safe_load(f)
    services = doc.get("services") or {}
    for name in ("rabbitmq", "dlq-bridge", "example-worker"):
        if name not in services:
            problem(f"compose: no service '{name}'")
    if problems:
        return
    known = known_variables(binary)

    def here(path):
        return os.path.normpath(os.path.join(compose_dir, path))

    for name, svc in services.items():
        for key in environment_of(svc):
            if key.startswith("DLQ_BRIDGE_") and key not in known:
                problem(f"compose: service '{name}' sets {key}, which dlq-bridge does not know")
        for vol in svc.get("volumes") or []:
            source = vol.split(":")[0] if isinstance(vol, str) else vol.get("source", "")
            if source.startswith((".", "/")) and not os.path.exists(here(source)):
                problem(f"compose: service '{name}' mounts {source}, which does not exist")
        build = svc.get("build")
        if build is not None:
            context = build if isinstance(build, str) else build.get("context", ".")
            dockerfile = "Dockerfile" if isinstance(build, str) else build.get("dockerfile", "Dockerfile")
            if not os.path.isdir(here(context)):
                problem(f"compose: service '{name}' builds from {context}, which does not exist")
            elif not os.path.isfile(os.path.join(here(context), dockerfile)):
                problem(f"compose: service '{name}' has no {dockerfile} in {context}")
    for name, secret in (doc.get("secrets") or {}).items():
        if "file" in secret and not os.path.isfile(here(secret["file"])):
            problem(f"compose: secret '{name}' file {secret['file']} does not exist")

    rabbit = services["rabbitmq"]
    if not re.match(r"rabbitmq:[0-9.]+-management", str(rabbit.get("image", ""))):
        problem("compose: rabbitmq does not use the official image with the management plugin")
    if "healthcheck" not in rabbit:
        problem("compose: rabbitmq has no healthcheck")
    targets = {v.split(":")[1] for v in rabbit.get("volumes") or [] if isinstance(v, str)}
    conf = next((v.split(":")[0] for v in rabbit.get("volumes") or []
                 if isinstance(v, str) and v.split(":")[1].startswith("/etc/rabbitmq/conf.d/")), None)
    if conf is None:
        problem("compose: no rabbitmq.conf is mounted into /etc/rabbitmq/conf.d/")
    else:
        with open(here(conf), encoding="utf-8") as f:
            m = re.search(r"^\s*load_definitions\s*=\s*(\S+)", f.read(), re.M)
        if m is None:
            problem(f"compose: {conf} does not set load_definitions")
        elif m.group(1) not in targets:
            problem(f"compose: load_definitions names {m.group(1)}, which is not mounted")

    bridge = services["dlq-bridge"]
    dep = (bridge.get("depends_on") or {}).get("rabbitmq") if isinstance(bridge.get("depends_on"), dict) else None
    if not dep or dep.get("condition") != "service_healthy":
        problem("compose: dlq-bridge does not wait for rabbitmq to be healthy")
    url = environment_of(bridge).get("DLQ_BRIDGE_URL", "")
    if re.match(r"amqps?://[^/@]*:[^/@]*@", url or ""):
        problem("compose: DLQ_BRIDGE_URL holds a password; use DLQ_BRIDGE_PASSWORD_FILE")

    check_dockerfile(src, known)


def check_dockerfile(src, known):
    path = os.path.join(src, "docker", "Dockerfile")
    with open(path, encoding="utf-8") as f:
        text = f.read()
    stages = re.findall(r"^FROM\s+(\S+)", text, re.M)
    if len(stages) < 2 or not stages[0].startswith("debian:bookworm") or stages[-1] != "debian:bookworm-slim":
        problem(f"Dockerfile: expected a debian:bookworm build stage and a bookworm-slim runtime, got {stages}")
    users = re.findall(r"^USER\s+(\S+)", text, re.M)
    if not users or users[-1].split(":")[0] in ("0", "root"):
        problem("Dockerfile: the runtime stage does not switch to a non-root user")
    if not re.search(r"^HEALTHCHECK\b[^\n]*(\\\n[^\n]*)*/healthz", text, re.M):
        problem("Dockerfile: no HEALTHCHECK on /healthz")
    if not re.search(r'^ENTRYPOINT\s+\["dlq-bridge"\]', text, re.M):
        problem("Dockerfile: ENTRYPOINT is not dlq-bridge")
    for key in re.findall(r"^ENV\s+(DLQ_BRIDGE_[A-Z0-9_]+)=", text, re.M):
        if key not in known:
            problem(f"Dockerfile: sets {key}, which dlq-bridge does not know")
    for line in re.findall(r"^COPY\s+(?!--from)(.+)$", text, re.M):
        for source in line.split()[:-1]:
            if not os.path.exists(os.path.join(src, source)):
                problem(f"Dockerfile: copies {source}, which does not exist")


def check_docs(src, binary):
    with open(os.path.join(src, "docs", "configuration.md"), encoding="utf-8") as f:
        config_md = f.read()
    table = run(binary, "help", "settings")
    if table.strip() == "" or table not in config_md:
        problem("docs/configuration.md does not hold the output of 'dlq-bridge help settings' "
                "(run scripts/gen-docs.sh)")

    with open(os.path.join(src, "docs", "dlq-bridge.1.md"), encoding="utf-8") as f:
        man = f.read()
    usage = run(binary, "--help")
    block = usage.split("commands:\n", 1)[1].split("\n\n", 1)[0] if "commands:\n" in usage else ""
    commands = [line.split()[0] for line in block.splitlines() if line.strip()]
    if not commands:
        problem("'dlq-bridge --help' lists no commands")
    for cmd in commands:
        if not re.search(rf"^#+ .*\b{re.escape(cmd)}\b", man, re.M):
            problem(f"docs/dlq-bridge.1.md has no section for the command '{cmd}'")
        if cmd in ("help", "version"):
            continue
        for opt in re.findall(r"^\s+(--[a-z0-9-]+)", run(binary, "help", cmd), re.M):
            if opt not in man:
                problem(f"docs/dlq-bridge.1.md does not mention '{opt}' of '{cmd}'")
    for var in known_variables(binary):
        if var not in man and var not in config_md:
            problem(f"neither the man page nor configuration.md mentions {var}")


def main():
    if len(sys.argv) != 4 or sys.argv[1] not in ("compose", "docs"):
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    what, src, binary = sys.argv[1:]
    (check_compose if what == "compose" else check_docs)(src, binary)
    if not problems:
        print(f"check_deploy: {what}: ok")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
