#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Puts QKV_API on a line of its own before every function declaration at file scope of a C
header (include/qkv.h and its parts, include/qkv/*.h), or with --check lists the declarations
that lack it and exits 1.

    tools/mark_exports.py include/qkv/*.h           mark what is missing (idempotent)
    tools/mark_exports.py --check include/qkv/*.h   fail if a declaration is unmarked

A declaration is a statement at file scope (inside extern "C" counts as file scope; comments,
strings and preprocessor lines are skipped) that ends with ';', has a '(' and is not a typedef.
static inline definitions end with '}' and are left alone: they are compiled into the caller.
Having a line of its own, the macro leaves a declaration's lines and their alignment as they
were (glib's GLIB_AVAILABLE_IN_ALL is placed the same way)."""
import re
import sys


def unmarked_declarations(src):
    """Offsets of the first character of every file-scope function declaration without QKV_API."""
    found, i, n, depth, start = [], 0, len(src), 0, None
    while i < n:
        c = src[i]
        if src.startswith('/*', i):
            i = src.index('*/', i) + 2
            continue
        if src.startswith('//', i):
            i = src.index('\n', i)
            continue
        if c == '#' and src[src.rfind('\n', 0, i) + 1:i].strip() == '':
            while True:  # a preprocessor line, with its continuations
                j = src.index('\n', i)
                i = j + 1 if src[j - 1] == '\\' else j
                if i == j:
                    break
            continue
        if c in '"\'':
            i += 1
            while src[i] != c:
                i += 2 if src[i] == '\\' else 1
            i += 1
            continue
        if c.isspace():
            i += 1
            continue
        if depth == 0 and start is None:
            start = i
        if c == '{' and depth == 0 and re.match(r'extern\s*"C"\s*$', src[start:i]):
            start = None  # extern "C" { of C++: what it holds is file scope
        elif c == '}' and depth == 0:
            start = None  # the end of extern "C"
        elif c == '{':
            depth += 1
        elif c == '}':
            depth -= 1
            if depth == 0 and not re.match(r'(typedef|struct|enum|union)\b', src[start:i]):
                start = None  # the end of a function definition (static inline)
        elif c == ';' and depth == 0:
            text = src[start:i]
            if '(' in text and not re.match(r'(typedef|QKV_API)\b', text):
                found.append(start)
            start = None
        i += 1
    return found


def main(argv):
    check = '--check' in argv
    paths = [a for a in argv if a != '--check']
    if not paths:
        sys.exit(__doc__)
    missing = 0
    for path in paths:
        src = open(path).read()
        todo = unmarked_declarations(src)
        missing += len(todo)
        if check:
            for off in todo:
                line = src.count('\n', 0, off) + 1
                print(f'{path}:{line}: no QKV_API: {src[off:src.index(chr(10), off)]}')
            continue
        for off in reversed(todo):
            at_line_start = off == 0 or src[off - 1] == '\n'
            src = src[:off] + ('QKV_API\n' if at_line_start else 'QKV_API ') + src[off:]
        open(path, 'w').write(src)
        if todo:
            print(f'{path}: {len(todo)} declarations marked', file=sys.stderr)
    sys.exit(1 if check and missing else 0)


if __name__ == '__main__':
    main(sys.argv[1:])
