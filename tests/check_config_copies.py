#!/usr/bin/env python3
"""No function copies a dlqb_config by value (docs/architecture.md, "The
config by pointer"): it is some 64 KB, and a copy on a thread's or a
request's stack has cost this project a series of stack fixes. Checked on
the source text of src/ and include/, comments and strings left out:

  1. a dlqb_config that is not a pointer: a local, a member, a parameter
     or a return value (static storage, one per process, is allowed);
  2. a copy through a pointer: `= *cfg;` or memcpy from a config pointer
     (or of sizeof(dlqb_config)).

The whole-config copies that must exist (a trial copy that a bad setting
must not touch, a pipeline's own config derived from the daemon's) all go
through dlqb_config_copy and dlqb_config_take in src/core/config.c, the
only functions exempt. (The console's per-user override is a copy of the
broker part alone, console_user_broker.)

usage: check_config_copies.py SOURCE_DIR
"""
import pathlib
import re
import sys

EXEMPT = {("src/core/config.c", "dlqb_config_copy"), ("src/core/config.c", "dlqb_config_take")}


def strip(text):
    """Comments and string/char literals blanked, line breaks kept."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            out.append(c + " " * (min(j, n) - i - 1) + c)
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def function_spans(text):
    """(name, first line, last line) of each top-level function body."""
    spans, depth, start, name = [], 0, None, None
    for m in re.finditer(r"[{}]|\b([A-Za-z_]\w*)\s*\([^;{}]*\)\s*(?=\{)", text):
        tok = m.group(0)
        if m.group(1) and depth == 0:
            name = m.group(1)
        elif tok == "{":
            if depth == 0:
                start = (name, text.count("\n", 0, m.start()) + 1)
            depth += 1
        elif tok == "}":
            depth -= 1
            if depth == 0 and start is not None:
                spans.append((start[0], start[1], text.count("\n", 0, m.start()) + 1))
                start, name = None, None
    return spans


def main():
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".")
    bad = []
    by_value = re.compile(r"\bdlqb_config\s+(?!\*)([A-Za-z_]\w*)\s*([;=,)\[(])")
    for path in sorted(list(root.glob("src/**/*.[ch]")) + list(root.glob("include/**/*.h"))):
        rel = path.relative_to(root).as_posix()
        text = strip(path.read_text(encoding="utf-8", errors="replace"))
        exempt = [(a, b) for (f, a, b) in function_spans(text) if (rel, f) in EXEMPT]
        pointers = set(re.findall(r"\bdlqb_config\s*\*\s*(?:const\s+)?([A-Za-z_]\w*)", text))
        lines = text.split("\n")
        for no, line in enumerate(lines, 1):
            if any(a <= no <= b for a, b in exempt):
                continue
            for m in by_value.finditer(line):
                if re.search(r"\bstatic\b", line[: m.start()]) and m.group(2) != "(":
                    continue  # static storage: the one loaded config of a command
                what = "returns" if m.group(2) == "(" else "holds"
                bad.append(f"{rel}:{no}: {what} a dlqb_config by value ('{m.group(1)}')")
            for name in pointers:
                if re.search(r"=\s*\*\s*" + re.escape(name) + r"\s*;", line) or re.search(
                    r"\bmemcpy\s*\([^,]*,\s*&?\s*\*?\s*" + re.escape(name) + r"\s*,", line
                ):
                    bad.append(f"{rel}:{no}: copies the config '{name}' points to")
            if re.search(r"\bmemcpy\b.*\bsizeof\s*\(?\s*dlqb_config\s*\)", line):
                bad.append(f"{rel}:{no}: copies a whole dlqb_config")
    for b in bad:
        print("check_config_copies: " + b)
    if bad:
        print("check_config_copies: pass `const dlqb_config *`; a derived config is "
              "dlqb_config_copy's (dlqb/config.h)")
        return 1
    print("check_config_copies: no dlqb_config is copied by value")
    return 0


if __name__ == "__main__":
    sys.exit(main())
