#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The documentation's code blocks and links, for tests/e2e/test_docs.sh.

    doc_blocks.py extract PAGE OUTDIR   one line per fenced block that concerns the test:
                                        run LINE FILE | skip LINE REASON | file LINE NAME FILE [AS]
    doc_blocks.py lint ROOT PAGE...     ok/FAIL lines: links and anchors, the README's length,
                                        words of the development setting, every page reachable
                                        from the README, markers on the blocks they mean

A marker, the last line before a fence (blank lines between allowed), says what the test does
with that block:  <!-- doc-test: skip (REASON) -->  or  <!-- doc-test: file NAME[, as PATH] -->.
Blocks marked sh or bash run; other languages are code or output and do not.
"""
import os
import re
import sys

RUN = {"sh", "bash"}
FENCE = re.compile(r"^ {0,3}(```+)\s*([A-Za-z0-9_+-]*)")
MARKER = re.compile(r"^<!--\s*doc-test:\s*(.*?)\s*-->\s*$")
README_MAX_LINES = 250


def blocks(path):
    """(line of the fence, language, text, marker or None, line of the marker) per block, and
    markers that precede no block, as (line, marker)."""
    lines = open(path, encoding="utf-8").read().split("\n")
    out, stray = [], []
    marker = None
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        mk = MARKER.match(lines[i].strip())
        if mk:
            if marker:
                stray.append(marker)
            marker = (i + 1, mk.group(1))
        elif m:
            fence, lang = m.group(1), m.group(2).lower()
            start = i
            body = []
            i += 1
            while i < len(lines) and not lines[i].lstrip().startswith(fence):
                body.append(lines[i])
                i += 1
            out.append((start + 1, lang, "\n".join(body) + "\n", marker[1] if marker else None,
                        marker[0] if marker else None))
            marker = None
        elif lines[i].strip() and marker:
            stray.append(marker)
            marker = None
        i += 1
    if marker:
        stray.append(marker)
    return out, stray


def parse_marker(text):
    """('skip', reason) or ('file', name, as_path or '') or None."""
    m = re.match(r"skip\s*\(?(.*?)\)?$", text)
    if m and m.group(1):
        return ("skip", m.group(1))
    m = re.match(r"file\s+([\w.+-]+)(?:\s*,\s*as\s+(\S+))?$", text)
    if m:
        return ("file", m.group(1), m.group(2) or "")
    return None


def extract(page, outdir):
    os.makedirs(outdir, exist_ok=True)
    found, _ = blocks(page)
    for n, (line, lang, text, marker, _) in enumerate(found):
        kind = parse_marker(marker) if marker else None
        name = os.path.join(outdir, "%03d" % n)
        if kind and kind[0] == "skip":
            print("skip\t%d\t%s" % (line, kind[1]))
        elif kind and kind[0] == "file":
            open(name, "w", encoding="utf-8").write(text)
            print("file\t%d\t%s\t%s\t%s" % (line, kind[1], name, kind[2]))
        elif lang in RUN:
            open(name, "w", encoding="utf-8").write(text)
            print("run\t%d\t%s" % (line, name))


def slug(heading):
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    s = re.sub(r"`", "", heading.strip().lower())
    s = "".join(c for c in s if c.isalnum() or c in " -_")
    return s.replace(" ", "-")


def anchors(path):
    found, seen = set(), {}
    in_fence = False
    for line in open(path, encoding="utf-8"):
        if FENCE.match(line):
            in_fence = not in_fence
        if in_fence:
            continue
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if m:
            s = slug(m.group(1))
            k = seen.get(s, 0)
            seen[s] = k + 1
            found.add(s if k == 0 else "%s-%d" % (s, k))
    return found


# Words of the development setting, not of the project: issue numbers and trackers, sessions,
# the sibling folders of a development checkout.
FORBIDDEN = [
    (re.compile(r"\bissues?\b", re.I), "speaks of issues"),
    (re.compile(r"\bsessions?\b", re.I), "speaks of sessions"),
    (re.compile(r"\.\./shared\b"), "a development checkout's sibling folder (../shared)"),
    (re.compile(r"(?<![\w&/])#\d+\b"), "an issue or pull-request number"),
]


def lint(root, pages):
    bad = 0

    def fail(msg):
        nonlocal bad
        bad += 1
        print("FAIL " + msg)

    links = {}
    for page in pages:
        path = os.path.join(root, page)
        text = open(path, encoding="utf-8").read()
        links[page] = set()
        in_fence = False
        for no, line in enumerate(text.split("\n"), 1):
            if FENCE.match(line):
                in_fence = not in_fence
            for rx, why in FORBIDDEN:
                if rx.search(line):
                    fail("%s:%d: %s: %s" % (page, no, why, line.strip()[:120]))
            if in_fence:
                continue
            for target in re.findall(r"\]\(([^)\s]+)\)", line):
                if re.match(r"[a-z]+:", target):
                    continue
                file, _, anchor = target.partition("#")
                dest = os.path.normpath(os.path.join(os.path.dirname(path), file)) if file else path
                if not os.path.exists(dest):
                    fail("%s:%d: a link to %s, which does not exist" % (page, no, target))
                    continue
                rel = os.path.relpath(dest, root)
                links[page].add(rel)
                if anchor and dest.endswith(".md") and anchor not in anchors(dest):
                    fail("%s:%d: a link to #%s, not a heading of %s" % (page, no, anchor, rel))
        found, stray = blocks(path)
        for line, marker in stray:
            fail("%s:%d: a doc-test marker that precedes no code block: %s" % (page, line, marker))
        for line, lang, _, marker, mline in found:
            if marker is None:
                continue
            kind = parse_marker(marker)
            if kind is None:
                fail("%s:%d: a doc-test marker the test does not know: %s" % (page, mline, marker))
            elif kind[0] == "skip" and lang not in RUN:
                fail("%s:%d: a skip marker on a %s block, which would not run anyway" %
                     (page, mline, lang or "plain"))
    n = len(open(os.path.join(root, "README.md"), encoding="utf-8").read().rstrip("\n").split("\n"))
    if n > README_MAX_LINES:
        fail("README.md has %d lines (at most %d)" % (n, README_MAX_LINES))
    else:
        print("ok   README.md has %d lines (at most %d)" % (n, README_MAX_LINES))
    # every page reachable from the README
    seen, todo = {"README.md"}, ["README.md"]
    while todo:
        for nxt in links.get(todo.pop(), ()):
            if nxt in links and nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    for page in pages:
        if page not in seen:
            fail("%s is not linked from the README, nor from a page it links" % page)
    if not bad:
        print("ok   %d pages: links and anchors resolve, every page is reachable from the "
              "README, no words of the development setting, markers on the blocks they mean"
              % len(pages))
    return bad


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "extract":
        extract(sys.argv[2], sys.argv[3])
    elif len(sys.argv) >= 3 and sys.argv[1] == "lint":
        sys.exit(1 if lint(sys.argv[2], sys.argv[3:]) else 0)
    else:
        sys.exit(__doc__)
