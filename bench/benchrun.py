# SPDX-License-Identifier: MIT
"""One tensord-bench run for the check scripts (check-report.py,
check-kinds.py): its JSON results and its Markdown, or FAIL and exit 1
with the bench's output when it exits nonzero."""
import json
import os
import subprocess
import sys


def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)


def run_bench(bench, args, tmp):
    js, md = os.path.join(tmp, "r.json"), os.path.join(tmp, "r.md")
    # the suite runs tests side by side: the CPUs are never idle there
    cmd = [bench, *args, "--no-settle", "--json", js, "--markdown", md]
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True)
    if p.returncode != 0:
        fail(f"{' '.join(cmd)} exited {p.returncode}:\n{p.stdout}")
    with open(js) as f:
        res = json.load(f)["results"]
    with open(md) as f:
        return res, f.read()
