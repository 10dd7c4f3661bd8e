#!/usr/bin/python3
"""A second, independent verifier of dlq-bridge evidence bundles.

Written from the format in docs/audit.md ("Evidence for one request"),
not from the C code: RFC 9162 inclusion proofs, C2SP signed notes
(checkpoint) and cosignature/v1 lines, the request index. Needs only
Debian's python3-cryptography.

usage: verify_bundle.py BUNDLE --keys PATH [--witness-keys FILE] [--witnesses-needed N]

PATH is a PEM public key or a directory of *.pem (*.pem.revoked: revoked).
Exit 0 intact (one line on stdout), 1 not intact (one line on stderr),
2 usage.
"""

import base64
import binascii
import hashlib
import json
import os
import struct
import sys

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

FORMAT = "dlq-bridge evidence v1"
INDEX_TAG = "dlq-bridge-index "
DASH = "\u2014 "


class Bad(Exception):
    pass


def b64(s, length=None):
    """Standard base64 with padding, in its one canonical spelling."""
    if not isinstance(s, str) or not s or len(s) % 4:
        raise Bad("bad base64")
    try:
        raw = base64.b64decode(s, validate=True)
    except (binascii.Error, ValueError):
        raise Bad("bad base64")
    if base64.b64encode(raw).decode() != s:
        raise Bad("non-canonical base64")
    if length is not None and len(raw) != length:
        raise Bad("base64 of the wrong length")
    return raw


def leaf_hash(data):
    return hashlib.sha256(b"\x00" + data).digest()


def node_hash(left, right):
    return hashlib.sha256(b"\x01" + left + right).digest()


def verify_inclusion(index, size, leaf, proof, root):
    """RFC 9162 section 2.1.3.2."""
    if index >= size:
        return False
    fn, sn, r = index, size - 1, leaf
    for p in proof:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            r = node_hash(p, r)
            if not fn & 1:
                while fn and not fn & 1:
                    fn >>= 1
                    sn >>= 1
        else:
            r = node_hash(r, p)
        fn >>= 1
        sn >>= 1
    return sn == 0 and r == root


def uint(v):
    return type(v) is int and 0 <= v < 2**63 - 1


def note_key_id(name, alg, raw_pub):
    return hashlib.sha256(name.encode() + b"\n" + bytes([alg]) + raw_pub).digest()[:4]


def raw(pub):
    return pub.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def load_keys(path):
    """[(raw public key, key object, revoked)]"""
    files = []
    if os.path.isdir(path):
        for n in sorted(os.listdir(path)):
            if n.startswith("."):
                continue
            if n.endswith(".pem") or n.endswith(".pem.revoked"):
                files.append((os.path.join(path, n), n.endswith(".revoked")))
    else:
        files.append((path, path.endswith(".pem.revoked")))
    keys = []
    for f, revoked in files:
        with open(f, "rb") as fh:
            k = serialization.load_pem_public_key(fh.read())
        if not isinstance(k, Ed25519PublicKey):
            raise ValueError(f"{f}: not an Ed25519 public key")
        keys.append((raw(k), k, revoked))
    if not keys:
        raise ValueError(f"no public key in {path}")
    return keys


def load_witnesses(path):
    out = []
    with open(path) as fh:
        for line in fh:
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            name, kid, key = line.split("+", 2)
            blob = base64.b64decode(key, validate=True)
            if len(blob) != 33 or blob[0] != 0x04:
                raise ValueError(f"witness key {name}: not a cosignature/v1 Ed25519 key")
            pub = blob[1:]
            if note_key_id(name, 0x04, pub).hex() != kid:
                raise ValueError(f"witness key {name}: key id does not match")
            out.append((name, pub, Ed25519PublicKey.from_public_bytes(pub)))
    return out


def parse_note(note):
    """(text, origin, size, root, index or None, [(name, blob)])"""
    cut = note.find("\n\n")
    if cut < 0 or "\x00" in note:
        raise Bad("not a signed note")
    text = note[: cut + 1]
    lines = text.split("\n")[:-1]
    if len(lines) < 3:
        raise Bad("not a checkpoint")
    origin, size_s, root_s = lines[0], lines[1], lines[2]
    if not origin or any(c <= " " or c > "~" or c == "+" for c in origin):
        raise Bad("bad origin")
    if not size_s.isdigit() or not size_s.isascii() or (size_s[0] == "0" and len(size_s) > 1):
        raise Bad("bad tree size")
    size = int(size_s)
    root = b64(root_s, 32)
    index = None
    if len(lines) > 3 and lines[3].startswith(INDEX_TAG):
        n_s, _, r_s = lines[3][len(INDEX_TAG):].partition(" ")
        if not n_s.isdigit() or not n_s.isascii() or (n_s[0] == "0" and len(n_s) > 1):
            raise Bad("bad index line")
        index = (int(n_s), b64(r_s, 32))
    sigs = []
    rest = note[cut + 2:]
    if not rest.endswith("\n"):
        raise Bad("signature block does not end in a newline")
    for line in rest[:-1].split("\n"):
        if not line.startswith(DASH):
            continue
        name, sp, blob_s = line[len(DASH):].partition(" ")
        if not sp:
            continue
        try:
            sigs.append((name, b64(blob_s)))
        except Bad:
            continue
    return text.encode(), origin, size, root, index, sigs


def check(bundle_bytes, keys, witnesses, need):
    body = bundle_bytes.rstrip(b"\n")
    if body != body.strip():
        raise Bad("not an evidence bundle")
    try:
        b = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise Bad("not an evidence bundle")
    if not isinstance(b, dict) or b.get("format") != FORMAT:
        raise Bad("not an evidence bundle")
    rid, note, recs, ix = b.get("request_id"), b.get("checkpoint"), b.get("records"), b.get("index")
    if not isinstance(rid, str) or not isinstance(note, str) or not isinstance(recs, list) \
            or not isinstance(ix, dict):
        raise Bad("not an evidence bundle")
    text, origin, size, root, index, sigs = parse_note(note)
    signer = None
    for name, blob in sigs:
        if name != origin or len(blob) != 68:
            continue
        for pub, k, revoked in keys:
            if note_key_id(origin, 0x01, pub) != blob[:4] or revoked:
                continue
            try:
                k.verify(blob[4:], text)
                signer = pub
            except InvalidSignature:
                pass
    if signer is None:
        raise Bad("the checkpoint carries no signature of a given public key")
    if index is None:
        raise Bad("the checkpoint carries no request index")
    cosigners = 0
    for wname, wpub, wk in witnesses:
        ok = False
        for name, blob in sigs:
            if name != wname or len(blob) != 76 or blob[:4] != note_key_id(wname, 0x04, wpub):
                continue
            t = struct.unpack(">Q", blob[4:12])[0]
            try:
                wk.verify(blob[12:], b"cosignature/v1\ntime %d\n" % t + text)
                ok = True
            except InvalidSignature:
                pass
        cosigners += ok
    if cosigners < need:
        raise Bad(f"cosigned by {cosigners} of the {len(witnesses)} witness keys given, {need} needed")
    if not recs:
        raise Bad("the bundle holds no record")
    lines = []
    for n, r in enumerate(recs, 1):
        if not isinstance(r, dict) or not isinstance(r.get("line"), str) \
                or not uint(r.get("index")) or not isinstance(r.get("proof"), list):
            raise Bad(f"record {n} is malformed")
        i = r["index"]
        if lines and i <= lines[-1]:
            raise Bad(f"record {n}: not in file order, or given twice")
        if i >= size:
            raise Bad(f"record {n}: past the checkpoint's tree")
        try:
            rec = json.loads(r["line"])
        except ValueError:
            rec = None
        if not isinstance(rec, dict) or rec.get("request_id") != rid:
            raise Bad(f"record {n} is not a record of request_id {rid}")
        proof = [b64(p, 32) for p in r["proof"]]
        if not verify_inclusion(i, size, leaf_hash(r["line"].encode("utf-8")), proof, root):
            raise Bad(f"record {n}: its inclusion proof does not lead to the checkpoint's root")
        lines.append(i)
    if not uint(ix.get("position")) or not isinstance(ix.get("proof"), list):
        raise Bad("the bundle's index entry is malformed")
    key = hashlib.sha256(b"dlq-bridge request\n" + rid.encode("utf-8")).digest()
    entry = key + b"".join(struct.pack(">Q", i) for i in lines)
    iproof = [b64(p, 32) for p in ix["proof"]]
    if not verify_inclusion(ix["position"], index[0], leaf_hash(entry), iproof, index[1]):
        raise Bad("the request index lists other lines for the request than the bundle's records")
    return rid, len(lines), size, cosigners


def main(argv):
    args, keys_path, wk_path, need = [], None, None, None
    it = iter(argv[1:])
    try:
        for a in it:
            if a == "--keys":
                keys_path = next(it)
            elif a == "--witness-keys":
                wk_path = next(it)
            elif a == "--witnesses-needed":
                need = int(next(it))
            else:
                args.append(a)
    except (StopIteration, ValueError):
        print("usage: verify_bundle.py BUNDLE --keys PATH [--witness-keys FILE] "
              "[--witnesses-needed N]", file=sys.stderr)
        return 2
    if len(args) != 1 or keys_path is None:
        print("usage: verify_bundle.py BUNDLE --keys PATH [--witness-keys FILE] "
              "[--witnesses-needed N]", file=sys.stderr)
        return 2
    try:
        keys = load_keys(keys_path)
        witnesses = load_witnesses(wk_path) if wk_path else []
    except (OSError, ValueError) as e:
        print(f"verify_bundle: {e}", file=sys.stderr)
        return 2
    if need is None:
        need = 1 if witnesses else 0
    try:
        with open(args[0], "rb") as fh:
            data = fh.read()
        rid, n, size, cos = check(data, keys, witnesses, need)
    except OSError as e:
        print(f"verify_bundle: {e}", file=sys.stderr)
        return 1
    except Bad as e:
        print(f"verify_bundle: {args[0]}: {e}", file=sys.stderr)
        return 1
    except RecursionError:
        # JSON nested deeper than Python's parser recurses: no bundle is.
        print(f"verify_bundle: {args[0]}: not an evidence bundle (nested too deep)", file=sys.stderr)
        return 1
    print(f"evidence intact: {n} records of request {rid} in a tree of {size} lines, "
          f"{cos} cosigners")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
