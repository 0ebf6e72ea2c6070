#!/usr/bin/env python3
"""Print the seed folders of a fuzz target as listed in tests/fuzz/meson.build
(the 'seeds' entries of its fuzz_targets dict), one line, space separated."""
import os
import re
import sys

name = sys.argv[1].removeprefix("fuzz-")
root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
text = open(os.path.join(root, "tests/fuzz/meson.build")).read()
m = re.search(r"'" + re.escape(name) + r"'\s*:\s*\{(.*?)\}\s*,?\s*\n", text,
              re.S)
seeds = []
if m:
    for rel in re.findall(r"'(tests/data/[^']*)'", m.group(1)):
        seeds.append(os.path.join(root, rel))
print(" ".join(s for s in seeds if os.path.isdir(s)))
