#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Checks tensord-bench's JSON and Markdown against each other: every
measured run keeps one median per round, and a target's ratio of two runs
of the same group is the median of the per-round ratios (with their range
and the verdict by that median), or the ratio of the pooled medians with
a single round. Asserts no timing: the expected figures come from the
run's own JSON.

Usage: check-report.py BENCH   (the tensord-bench binary; needs the
tensord-ring method, i.e. a build with libtensord and the daemon)
"""
import json
import os
import subprocess
import sys
import tempfile

METHODS = ("tensord-ring,tensord-ring-sleep,tensord-ring-lockstep,"
           "bare-spin,bare-futex")
# (markdown target, numerator, denominator, limit): issue 16's limit rows
ROWS = [
    ("ring ≤ 2× bare-spin at 64 B", "tensord-ring", "bare-spin", 2.0),
    ("ring in lock step (`tensord-ring-lockstep`) ≤ 2× bare-spin at 64 B",
     "tensord-ring-lockstep", "bare-spin", 2.0),
    ("ring, TENSORD_RING_SPIN_US=0, ≤ 1.2× bare-futex at 64 B",
     "tensord-ring-sleep", "bare-futex", 1.2),
]


def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)


def run(bench, tmp, rounds):
    js, md = os.path.join(tmp, "r.json"), os.path.join(tmp, "r.md")
    cmd = [bench, "--methods", METHODS, "--kinds", "pingpong", "--sizes",
           "64", "--modes", "nowrite", "--iters", str(60 * rounds),
           "--warmup", "20", "--rounds", str(rounds), "--json", js,
           "--markdown", md, "--timeout", "60"]
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True)
    if p.returncode != 0:
        fail(f"{' '.join(cmd)} exited {p.returncode}:\n{p.stdout}")
    with open(js) as f:
        res = json.load(f)["results"]
    with open(md) as f:
        return res, f.read()


def median(v):
    v = sorted(v)
    n = len(v)
    return v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) / 2


def check_rounds(results, rounds):
    ok = [r for r in results if r["status"] == "ok"]
    if len(ok) != len(METHODS.split(",")):
        fail(f"expected every method to run: {results}")
    for r in ok:
        rm = r.get("round_median_ns")
        if not isinstance(rm, list) or len(rm) != r["rounds"]:
            fail(f"{r['method']}: round_median_ns {rm!r} has not "
                 f"{r['rounds']} entries")
        if r["rounds"] != rounds:
            fail(f"{r['method']}: rounds {r['rounds']}, asked {rounds}")
        lo, hi = r["rtt_ns"]["min"], r["rtt_ns"]["max"]
        for m in rm:
            if not lo <= m <= hi:
                fail(f"{r['method']}: round median {m} outside the "
                     f"run's samples [{lo}, {hi}]")
    return {r["method"]: r for r in ok}


def row_of(md, target):
    for line in md.splitlines():
        if line.startswith(f"| {target} |"):
            return line
    fail(f"no row {target!r} in the markdown")


def check_rows(by, md, rounds):
    for target, a, b, limit in ROWS:
        row = row_of(md, target)
        ra, rb = by[a], by[b]
        if rounds >= 2:
            q = [x / y for x, y in zip(ra["round_median_ns"],
                                       rb["round_median_ns"])]
            med, lo, hi = median(q), min(q), max(q)
            want = f"{med:.2f}× ({lo:.2f}–{hi:.2f} over {rounds} rounds)"
            noise = lo <= limit < hi
        else:
            # one round: its median is the pooled one (which the JSON
            # rounds to whole ns, round_median_ns keeps the .5)
            for r in (ra, rb):
                if abs(r["round_median_ns"][0] - r["rtt_ns"]["median"]) > .5:
                    fail(f"{r['method']}: the one round's median is not "
                         f"the run's")
            med = ra["round_median_ns"][0] / rb["round_median_ns"][0]
            want = f"{med:.2f}× (pooled)"
            noise = False
        verdict = "met" if med <= limit else "**missed**"
        if noise:
            verdict += " (within noise)"
        if f"| {want} | {verdict} |" not in row:
            fail(f"row {row!r}: expected '{want}' and '{verdict}'")
        print(f"ok: {target}: {want}, {verdict}")


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        sys.exit(2)
    bench = sys.argv[1]
    with tempfile.TemporaryDirectory() as tmp:
        for rounds in (3, 1):
            results, md = run(bench, tmp, rounds)
            check_rows(check_rounds(results, rounds), md, rounds)
    p = subprocess.run([bench, "--rounds", "33"], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True)
    if p.returncode != 2:
        fail(f"--rounds 33 (over the cap) exited {p.returncode}")
    print("ok: --rounds over the cap is refused")


if __name__ == "__main__":
    main()
