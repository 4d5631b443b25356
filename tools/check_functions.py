#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Lists the functions of src/ longer than a limit (80 lines by default) whose comment does not
say why: a function should fit in a reader's head, and one that cannot be split without hiding
its logic (a dispatch over the opcodes of a format, say) says so in the comment above it with a
sentence starting "Long:". Exits 1 when any function is long without one.

A function is what starts with a line "{" at column 0 and ends with the next "}" at column 0
(the layout clang-format gives every function in src/); its comment is the /* ... */ block that
ends on the line before its signature.

Usage: tools/check_functions.py [SRC_DIR] [--limit N] [--list]
  --list  print every long function, with or without its reason"""
import os
import re
import sys


def functions(path):
    """(name, first line, lines, comment above) of every function in the file."""
    lines = open(path, encoding="utf-8", errors="replace").read().split("\n")
    out, i = [], 0
    while i < len(lines):
        if lines[i].startswith("{"):
            sig = i - 1  # the signature: lines up to the previous blank, comment or declaration
            while sig > 0 and lines[sig - 1].strip() and not lines[sig - 1].startswith(
                    ("}", "/*", " *", "#")) and not lines[sig - 1].rstrip().endswith(";"):
                sig -= 1
            end = i
            while end < len(lines) and not lines[end].startswith("}"):
                end += 1
            comment, c = [], sig - 1
            if c >= 0 and lines[c].rstrip().endswith("*/"):
                while c >= 0:
                    comment.insert(0, lines[c])
                    if lines[c].lstrip().startswith("/*"):
                        break
                    c -= 1
            name = re.search(r"(\w+)\s*\(", " ".join(lines[sig:i]))
            out.append((name.group(1) if name else "?", sig + 1, end - i + 1, " ".join(comment)))
            i = end
        i += 1
    return out


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    limit = int(sys.argv[sys.argv.index("--limit") + 1]) if "--limit" in sys.argv else 80
    if "--limit" in sys.argv:
        args.remove(str(limit))
    src = args[0] if args else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src")
    bad = 0
    for root, _, files in sorted(os.walk(src)):
        for f in sorted(files):
            if not f.endswith((".c", ".cc", ".cu")):
                continue
            path = os.path.join(root, f)
            for name, first, n, comment in functions(path):
                if n <= limit:
                    continue
                reason = re.search(r"Long:", comment)
                if not reason:
                    bad += 1
                if not reason or "--list" in sys.argv:
                    print(f"{os.path.relpath(path, src)}:{first}: {name} is {n} lines"
                          f"{'' if reason else ' without a reason (a comment with Long:)'}")
    if bad:
        print(f"check_functions: {bad} function(s) over {limit} lines without a reason")
        return 1
    print(f"check_functions: every function over {limit} lines says why")
    return 0


if __name__ == "__main__":
    sys.exit(main())
