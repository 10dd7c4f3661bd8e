#!/usr/bin/env python3
"""Checks of the deployment files that need no broker and no docker engine.

usage: check_deploy.py compose SOURCE_DIR DLQ_BRIDGE_BINARY
       check_deploy.py docs SOURCE_DIR DLQ_BRIDGE_BINARY
       check_deploy.py systemd SOURCE_DIR DLQ_BRIDGE_BINARY
       check_deploy.py install SOURCE_DIR DLQ_BRIDGE_BINARY BUILD_DIR CMAKE

compose: docker/docker-compose.yml parses; the services, healthcheck and
  start order are there; every DLQ_BRIDGE_* variable it or the Dockerfile sets
  is one the bridge knows; every path it mounts or builds from exists; the
  Dockerfile is multi-stage, non-root, with a /healthz HEALTHCHECK, and
  copies (and .dockerignore lets in) every folder CMakeLists.txt reads; and
  the bridge's password is not in its URL. (docker compose up itself:
  scripts/compose-test.sh.)
docs: docs/configuration.md holds exactly `dlq-bridge help settings`; the
  man page docs/dlq-bridge.1.md names every command of `dlq-bridge --help`
  and every option of `dlq-bridge help COMMAND`, and every setting.
systemd: the units in packaging/systemd (the daemon, the daily audit
  reconcile, the drain, their timers, the console), filled in with this
  build's binary, both as `cmake --install` and as the package lays them
  out, pass
  `systemd-analyze verify` without a word about them and the services
  `systemd-analyze security --offline` at exposure 2.0 or less; they set only
  known DLQ_BRIDGE_* variables, hold no password, and the example config
  they name is accepted by the bridge.
install: `cmake --install` into a scratch DESTDIR gives a binary that runs,
  the units naming that binary, the example config, the definitions and docs.
Prints one line per problem and exits 1 when there is any.
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

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
    # The build stage runs CMake: every top-level folder CMakeLists.txt reads
    # must be copied in and let through .dockerignore (a missing packaging/
    # once broke `up --build`).
    copied = {source.rstrip("/").split("/")[0]
              for line in re.findall(r"^COPY\s+(?!--from)(.+)$", text, re.M) for source in line.split()[:-1]}
    with open(os.path.join(src, "CMakeLists.txt"), encoding="utf-8") as f:
        cmake = f.read()
    # What the image's build does not configure: option() texts, comments,
    # and the blocks of options that are off by default (fuzz, bench).
    cmake = re.sub(r"^\s*(#|option\().*$", "", cmake, flags=re.M)
    cmake = re.sub(r"^if\((DLQB_FUZZ|DLQB_BENCH)\).*?^endif\(\)", "", cmake, flags=re.M | re.S)
    needed = {m.split("/")[0] for m in re.findall(r"\b([a-z][a-z0-9_-]*/[A-Za-z0-9_./-]*)", cmake)
              if os.path.isdir(os.path.join(src, m.split("/")[0]))}
    needed |= set(re.findall(r"add_subdirectory\((\w+)", cmake))
    with open(os.path.join(src, ".dockerignore"), encoding="utf-8") as f:
        allowed = {line[1:].strip().rstrip("/") for line in f if line.startswith("!")}
    for folder in sorted(needed):
        if folder not in copied:
            problem(f"Dockerfile: CMakeLists.txt reads {folder}/, which the build stage does not copy")
        if folder not in allowed:
            problem(f".dockerignore: keeps out {folder}/, which CMakeLists.txt reads")


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
        helptext = run(binary, "help", cmd)
        for opt in re.findall(r"^\s+(--[a-z0-9-]+)", helptext, re.M):
            if opt not in man:
                problem(f"docs/dlq-bridge.1.md does not mention '{opt}' of '{cmd}'")
        # A command with subcommands (audit, review) lists them in its help;
        # each has its own options.
        if "subcommands:\n" in helptext:
            listed = helptext.split("subcommands:\n", 1)[1].split("\n\n", 1)[0]
            for sub in re.findall(r"^  ([a-z]+)\b", listed, re.M):
                if not re.search(rf"\b{re.escape(cmd)} {re.escape(sub)}\b", man):
                    problem(f"docs/dlq-bridge.1.md has no synopsis for '{cmd} {sub}'")
                for opt in re.findall(r"^\s+(--[a-z0-9-]+)", run(binary, cmd, sub, "--help"), re.M):
                    if opt not in man:
                        problem(f"docs/dlq-bridge.1.md does not mention '{opt}' of '{cmd} {sub}'")
    for var in known_variables(binary):
        if var not in man and var not in config_md:
            problem(f"neither the man page nor configuration.md mentions {var}")

SYSTEMD_DIR = os.path.join("packaging", "systemd")
# Each unit template and the dlq-bridge arguments its ExecStart must begin with.
SYSTEMD_UNITS = {
    "dlq-bridge.service.in": ["run", "--config"],
    "dlq-bridge-reconcile.service.in": ["audit", "reconcile", "--config"],
    "dlq-bridge-drain.service.in": ["drain", "run", "--config"],
    "dlq-bridge-console.service.in": ["console", "--config"],
}
# The two ways CMake fills the units in (DLQB_PACKAGE_LAYOUT): a dynamic
# user and the audit key lines commented out (`cmake --install`), or the
# package's static user with the key loaded.
UNIT_LAYOUTS = {
    "install": {"@DLQB_UNIT_DYNAMIC_USER@": "yes", "@DLQB_UNIT_AUDIT@": "#"},
    "package": {"@DLQB_UNIT_DYNAMIC_USER@": "no", "@DLQB_UNIT_AUDIT@": ""},
}
SYSTEMD_TIMERS = ["dlq-bridge-reconcile.timer", "dlq-bridge-drain.timer"]
EXAMPLE_CONFIG = os.path.join(SYSTEMD_DIR, "config.json")
EXAMPLE_CONFIGS = [EXAMPLE_CONFIG, os.path.join(SYSTEMD_DIR, "drain.json")]
PASSWORD_IN_URL = re.compile(r"amqps?://[^/@\s:]+:[^/@\s]+@")


def check_unit_text(text, known, where):
    for var in re.findall(r"^#?Environment=(DLQ_BRIDGE_[A-Z0-9_]+)=", text, re.M):
        if var not in known:
            problem(f"{where}: sets {var}, which the bridge does not know")
    if PASSWORD_IN_URL.search(text):
        problem(f"{where}: holds a password in a URL")
    start = re.search(r"^ExecStart=(\S+) (.*)$", text, re.M)
    if start is None:
        problem(f"{where}: no ExecStart")
        return None
    return start.group(1), start.group(2).split()


def analyze_unit(analyze, path, where, security):
    """systemd-analyze verify (no word about the unit allowed) and, for a
    service, security at exposure 2.0 or less."""
    out = subprocess.run([analyze, "verify", path], capture_output=True, text=True, check=False)
    # verify exits 0 on many mistakes (an unknown Type=, a bad directive):
    # any line about our units is a problem.
    said = [line for line in (out.stdout + out.stderr).splitlines() if "dlq-bridge" in line]
    if out.returncode != 0 or said:
        problem(f"{where}: systemd-analyze verify: exit {out.returncode}: {' | '.join(said)}")
    if not security:
        return
    sec = subprocess.run([analyze, "security", "--offline=yes", "--threshold=20", path],
                         capture_output=True, text=True, check=False)
    level = re.search(r"Overall exposure level for \S+: ([0-9.]+)", sec.stdout)
    print(f"check_deploy: {where}: systemd-analyze security: exposure "
          f"{level.group(1) if level else '?'}")
    if sec.returncode != 0:
        problem(f"{where}: systemd-analyze security: exposure above 2.0 (exit {sec.returncode})")


def check_systemd(src, binary):
    known = known_variables(binary)
    for example in EXAMPLE_CONFIGS:
        with open(os.path.join(src, example), encoding="utf-8") as f:
            if PASSWORD_IN_URL.search(f.read()):
                problem(f"{example}: holds a password in a URL")
        # The example config parses and validates (no broker needed).
        run(binary, "declare", "--print-definitions", "--config", os.path.join(src, example))
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        problem("systemd-analyze is missing (scripts/install-deps.sh installs systemd)")
    for layout, fill in UNIT_LAYOUTS.items():
        with tempfile.TemporaryDirectory() as tmp:
            check_units(src, binary, known, analyze, tmp, layout, fill)


def check_units(src, binary, known, analyze, tmp, layout, fill):
    for template, args in SYSTEMD_UNITS.items():
        where = f"{os.path.join(SYSTEMD_DIR, template)} ({layout})"
        with open(os.path.join(src, SYSTEMD_DIR, template), encoding="utf-8") as f:
            text = (f.read()
                    .replace("@DLQB_BIN_DIR@", os.path.dirname(os.path.abspath(binary)))
                    .replace("@DLQB_DOC_DIR@", os.path.join(src, "docs")))
        for placeholder, value in fill.items():
            text = text.replace(placeholder, value)
        if re.search(r"@[A-Z_]+@", text):
            problem(f"{where}: a placeholder CMake does not fill in")
        start = check_unit_text(text, known, where)
        if start is not None and start[1][:len(args)] != args:
            problem(f"{where}: ExecStart is not 'dlq-bridge {' '.join(args)} ...'")
        unit = os.path.join(tmp, template[:-len(".in")])
        with open(unit, "w", encoding="utf-8") as f:
            f.write(text)
        if analyze is not None:
            analyze_unit(analyze, unit, where, security=True)
    # Each timer names its service, which sits beside it.
    for name in SYSTEMD_TIMERS:
        timer = os.path.join(tmp, name)
        shutil.copy(os.path.join(src, SYSTEMD_DIR, name), timer)
        if analyze is not None:
            analyze_unit(analyze, timer, os.path.join(SYSTEMD_DIR, name), security=False)


def check_install(src, binary, build_dir, cmake):
    with tempfile.TemporaryDirectory() as dest:
        env = dict(os.environ, DESTDIR=dest)
        out = subprocess.run([cmake, "--install", build_dir], capture_output=True, text=True,
                             env=env, check=False)
        if out.returncode != 0:
            problem(f"cmake --install: exit {out.returncode}: {out.stderr.strip()}")
            return
        units = {f: os.path.join(d, f) for d, _, files in os.walk(dest) for f in files
                 if f.startswith("dlq-bridge") and f.endswith((".service", ".timer"))}
        want = [t[:-len(".in")] for t in SYSTEMD_UNITS] + SYSTEMD_TIMERS
        for name in want:
            if not units.get(name, "").endswith("/lib/systemd/system/" + name):
                problem(f"cmake --install: {name} is not under lib/systemd/system: {units}")
        installed = None
        for name in (t[:-len(".in")] for t in SYSTEMD_UNITS):
            if name not in units:
                continue
            with open(units[name], encoding="utf-8") as f:
                start = check_unit_text(f.read(), known_variables(binary), "installed " + name)
            if start is None:
                continue
            installed = dest + start[0]
            if not os.access(installed, os.X_OK):
                problem(f"the installed {name} starts {start[0]}, which was not installed")
                return
        if installed is None:
            return
        version = subprocess.run([installed, "--version"], capture_output=True, text=True,
                                 check=False)
        if version.returncode != 0 or "dlq-bridge" not in version.stdout:
            problem(f"the installed binary: '--version' exited {version.returncode}")
        prefix = os.path.dirname(os.path.dirname(installed))
        for path in ("share/doc/dlq-bridge/examples/config.json",
                     "share/doc/dlq-bridge/examples/drain.json",
                     "share/doc/dlq-bridge/runbook.md",
                     "share/doc/dlq-bridge/deploy-systemd.md",
                     "share/dlq-bridge/definitions/definitions.json"):
            if not os.path.isfile(os.path.join(prefix, path)):
                problem(f"cmake --install did not install {path}")


def main():
    what = sys.argv[1] if len(sys.argv) > 1 else ""
    arity = {"compose": 4, "docs": 4, "systemd": 4, "install": 6}
    if arity.get(what) != len(sys.argv):
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    src, binary = sys.argv[2:4]
    if what == "compose":
        check_compose(src, binary)
    elif what == "docs":
        check_docs(src, binary)
    elif what == "systemd":
        check_systemd(src, binary)
    else:
        check_install(src, binary, *sys.argv[4:6])
    if not problems:
        print(f"check_deploy: {what}: ok")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
