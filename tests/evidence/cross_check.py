#!/usr/bin/python3
"""Runs both evidence verifiers on the same bundles and requires the same
verdict from each: `dlq-bridge audit verify-proof` (C) and
verify_bundle.py (Python, written from docs/audit.md alone).

usage: cross_check.py DLQ_BRIDGE MAKE_BUNDLES [DIR]

Without DIR, MAKE_BUNDLES writes a fresh set into a temporary directory
(good-*.json must verify, bad-*.json must not); with DIR, the bundles
already there are checked (the broker test writes its good ones); tampered
copies of the first good bundle are always made here as well (bytes changed,
records dropped or swapped, a NUL in the request id, bytes before or after
the document, nesting 100,000 deep). Each
verifier is given the log's public keys (DIR/keys) and a one-witness
policy (DIR/witnesses.txt). Exit 0 when both agree with the expectation
on every bundle, else 1 naming the first that does not.
"""

import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    return p.returncode, (p.stdout + p.stderr).strip()


def derive(d, good):
    """Tampered copies of the first good bundle: bytes changed along it,
    each record dropped, the second bundle's record swapped in, the
    cosignature lines removed from its checkpoint."""
    with open(os.path.join(d, good[0]), "rb") as fh:
        a = fh.read()
    with open(os.path.join(d, good[1]), "rb") as fh:
        other = json.loads(fh.read())
    made = []

    def put(name, data):
        with open(os.path.join(d, name), "wb") as fh:
            fh.write(data)
        made.append(name)

    for k in range(32):
        at = k * (len(a) - 1) // 31
        put(f"bad-byte-{at:05d}.json", a[:at] + bytes([a[at] ^ 0x01]) + a[at + 1:])
    doc = json.loads(a)
    for k in range(len(doc["records"])):
        t = json.loads(a)
        del t["records"][k]
        put(f"bad-dropped-{k}.json", json.dumps(t, separators=(",", ":")).encode() + b"\n")
    t = json.loads(a)
    t["records"][0] = other["records"][0]
    put("bad-swapped.json", json.dumps(t, separators=(",", ":")).encode() + b"\n")
    t = json.loads(a)
    text, _, sigs = t["checkpoint"].partition("\n\n")
    log_line = sigs.split("\n")[0]
    t["checkpoint"] = text + "\n\n" + log_line + "\n"
    put("bad-uncosigned.json", json.dumps(t, separators=(",", ":")).encode() + b"\n")
    # Where two readers of one format are most likely to differ: a NUL in a
    # string (read as the part before it by a C string), bytes after or
    # before the document, and nesting deeper than a recursive parser goes.
    t = json.loads(a)
    rid = t["request_id"]
    t["request_id"] = rid + "\u0000" + rid + "-other"
    put("bad-nul-request-id.json", json.dumps(t, separators=(",", ":")).encode() + b"\n")
    t = json.loads(a)
    t["request_id"] = rid[:-1] + "\u0000" + rid[-1:]
    put("bad-nul-inside-request-id.json", json.dumps(t, separators=(",", ":")).encode() + b"\n")
    body = a.rstrip(b"\n")
    for name, data in (("trailing-space", body + b" \n"), ("trailing-tab", body + b"\n\t"),
                       ("leading-space", b" " + body + b"\n"), ("trailing-cr", body + b"\r\n"),
                       ("trailing-bytes", body + b"x\n"), ("two-documents", body + body + b"\n"),
                       ("trailing-nul", body + b"\x00\n")):
        put(f"bad-{name}.json", data)
    put("bad-deep-nesting.json", b"[" * 100000 + b"]" * 100000 + b"\n")
    put("bad-deep-in-records.json", body[:-1] + b',"x":' + b"[" * 100000 + b"]" * 100000 + b"}\n")
    return made


def check_dir(bridge, d):
    names = sorted(n for n in os.listdir(d) if n.endswith(".json"))
    good = [n for n in names if n.startswith("good-")]
    bad = [n for n in names if n.startswith("bad-")]
    if len(good) >= 2:
        # The tampered copies of the first good one, beside any bad ones
        # the directory came with.
        bad = sorted(set(bad) | set(derive(d, good)))
        names = sorted(good + bad)
    if not good or not bad:
        print(f"cross_check: no good-*.json or bad-*.json in {d}", file=sys.stderr)
        return 1
    keys, wk = os.path.join(d, "keys"), os.path.join(d, "witnesses.txt")
    # No config file, no broker: the auditor's machine.
    env = dict(os.environ, DLQ_BRIDGE_AUDIT_PUBLIC_KEYS=keys, DLQ_BRIDGE_CONFIG="")
    env.pop("DLQ_BRIDGE_URL", None)
    failures = 0
    for n in names:
        f = os.path.join(d, n)
        want = 0 if n in good else 1
        c = subprocess.run([bridge, "audit", "verify-proof", f, "--witness-keys", wk,
                            "--witnesses-needed", "1"], capture_output=True, text=True,
                           timeout=60, env=env)
        py = subprocess.run(["/usr/bin/python3", os.path.join(HERE, "verify_bundle.py"), f,
                             "--keys", keys, "--witness-keys", wk, "--witnesses-needed", "1"],
                            capture_output=True, text=True, timeout=60)
        if c.returncode != want or py.returncode != want:
            failures += 1
            print(f"{n}: expected exit {want}; C {c.returncode} ({(c.stdout + c.stderr).strip()}); "
                  f"Python {py.returncode} ({(py.stdout + py.stderr).strip()})")
        # A refusal is one line from each, never a crash or a traceback.
        for out in (c.stderr, py.stderr):
            if want == 1 and (out.count("\n") != 1 or "Traceback" in out):
                failures += 1
                print(f"{n}: a refusal must be one line: {out!r}")
    print(f"cross_check: {len(good)} good and {len(bad)} tampered bundles, "
          f"{failures} disagreement{'s' if failures != 1 else ''}")
    return 1 if failures else 0


def main(argv):
    if len(argv) not in (3, 4):
        print(__doc__, file=sys.stderr)
        return 2
    bridge, make = argv[1], argv[2]
    if len(argv) == 4:
        return check_dir(bridge, argv[3])
    with tempfile.TemporaryDirectory(prefix="dlqb-evidence-") as d:
        r = subprocess.run([make, d], capture_output=True, text=True, timeout=300)
        if r.returncode != 0:
            print(f"cross_check: make_bundles failed: {r.stderr.strip()}", file=sys.stderr)
            return 1
        return check_dir(bridge, d)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
