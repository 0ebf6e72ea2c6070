#!/usr/bin/env python3
"""Print the seed folders of a fuzz target as listed in tests/fuzz/meson.build
(the 'seeds' entries of its fuzz_targets dict), one line, space separated,
plus the upstream golden folders for fuzz-hrry when they exist."""
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
# Upstream vectors are never copied into the repository; when the folder
# is there (TD_VECTORS_DIR, else ../shared/vectors beside the checkout)
# its golden Hurray files seed fuzz-hrry too.
if name == "hrry":
    # its own seeds sit in a meson variable the pattern above cannot see
    seeds.append(os.path.join(root, "tests", "data", "hrry-seeds"))
    vectors = os.environ.get("TD_VECTORS_DIR",
                             os.path.join(root, "..", "shared", "vectors"))
    golden = os.path.join(vectors, "hurray", "golden")
    seeds += [golden, os.path.join(golden, "descriptors")]
print(" ".join(s for s in seeds if os.path.isdir(s)))
