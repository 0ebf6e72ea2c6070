#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Product source stays in pieces one can read: no file and no function
over the limits below (issue "Structure before growth").

Usage: size-limits.py DIR...   (e.g. daemon libclient proto transport tools)
       size-limits.py --self-test  (the brace counting on known samples)

Reads every .c and .h file under each DIR, prints each file over
MAX_FILE_LINES lines and each function over MAX_FUNC_LINES lines
(from its opening to its closing brace, found by counting braces outside
comments, strings and character literals), and exits 1 when there is
one, else 0. With --list it also prints the largest files and functions.
"""
import os
import re
import sys

MAX_FILE_LINES = 1200
MAX_FUNC_LINES = 120


def strip(text):
    """The text with comments, strings and char literals blanked (newlines
    kept, so line numbers stay)."""
    out = []
    i, n = 0, len(text)
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
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n)
            out.append(c + re.sub(r"[^\n]", " ", text[i + 1:j - 1]) + c)
            i = j
        elif c == "#" and (i == 0 or text[i - 1] == "\n"):
            # a preprocessor line (with its continuations)
            j = i
            while True:
                k = text.find("\n", j)
                if k < 0:
                    k = n
                    break
                if k > 0 and text[k - 1] == "\\":
                    j = k + 1
                    continue
                break
            out.append(re.sub(r"[^\n]", " ", text[i:k]))
            i = k
        else:
            out.append(c)
            i += 1
    return "".join(out)


NAME = re.compile(r"([A-Za-z_]\w*)\s*\($")


def functions(text):
    """(name, first line, line count) of each function definition."""
    s = strip(text)
    depth = 0
    head_start = 0  # where the text before a top-level brace begins
    start = None
    for i, c in enumerate(s):
        if c == "{":
            if depth == 0:
                head = s[head_start:i].strip()
                if head.endswith(")"):
                    # the name is the word before the parameter list
                    lvl, k = 0, len(head) - 1
                    while k >= 0:
                        if head[k] == ")":
                            lvl += 1
                        elif head[k] == "(":
                            lvl -= 1
                            if lvl == 0:
                                break
                        k -= 1
                    m = NAME.search(head[:k + 1])
                    start = (m.group(1) if m else "?", i)
                else:
                    start = None
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                if start:
                    name, at = start
                    first = s.count("\n", 0, at) + 1
                    last = s.count("\n", 0, i) + 1
                    yield name, first, last - first + 1
                start = None
                head_start = i + 1
        elif c == ";" and depth == 0:
            head_start = i + 1


def self_test():
    """The counting this check relies on, on samples with known answers."""
    body = "\tx++;\n" * (MAX_FUNC_LINES - 2)
    sample = (
        "/* a comment with { braces } */\n"
        "static const char *s = \"{\";\n"
        "static const struct t tab[] = {\n\t{1, 2},\n};\n"
        "static int\nshort_one(int a, void (*cb)(int))\n{\n"
        "\tif (a) {\n\t\tcb('}');\n\t}\n\treturn 0; // }\n}\n"
        "#define M(x) { x }\n"
        "int at_limit(void)\n{\n" + body + "}\n"
        "int over(void)\n{\n" + body + "\tx++;\n}\n")
    got = list(functions(sample))
    want = [("short_one", 8, 6), ("at_limit", 16, MAX_FUNC_LINES),
            ("over", 16 + MAX_FUNC_LINES + 1, MAX_FUNC_LINES + 1)]
    if got != want:
        print(f"self-test: got {got}, want {want}")
        return 1
    print("self-test: ok")
    return 0


def main(argv):
    if argv[1:] == ["--self-test"]:
        return self_test()
    listing = "--list" in argv
    dirs = [a for a in argv[1:] if a != "--list"]
    if not dirs:
        print(__doc__, file=sys.stderr)
        return 2
    bad = 0
    files, funcs = [], []
    for d in dirs:
        for root, _, names in os.walk(d):
            for name in sorted(names):
                if not name.endswith((".c", ".h")):
                    continue
                path = os.path.join(root, name)
                with open(path, encoding="utf-8", errors="replace") as f:
                    text = f.read()
                lines = text.count("\n")
                files.append((lines, path))
                if lines > MAX_FILE_LINES:
                    print(f"{path}: {lines} lines (limit {MAX_FILE_LINES})")
                    bad += 1
                for fn, first, count in functions(text):
                    funcs.append((count, f"{path}:{first}: {fn}()"))
                    if count > MAX_FUNC_LINES:
                        print(f"{path}:{first}: {fn}() is {count} lines "
                              f"(limit {MAX_FUNC_LINES})")
                        bad += 1
    if listing:
        for lines, path in sorted(files)[-10:]:
            print(f"  {lines:5} {path}")
        for count, where in sorted(funcs)[-15:]:
            print(f"  {count:5} {where}")
    if not files:
        print("no source files found", file=sys.stderr)
        return 2
    print(f"{len(files)} files, {len(funcs)} functions, {bad} over the limits")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
