#!/usr/bin/env python3
"""Count individual test cases from meson's testlog.json.

Criterion suites run with TAP output (one `ok`/`not ok` line per Test()),
and the Python binding's pytest suite prints the same lines (its conftest);
every other meson test counts once by its result. Skips are reported apart
and never counted as passed. Prints `N passed, M failed, K skipped`.
"""
import json
import re
import sys

passed = failed = skipped = 0
with open(sys.argv[1]) as f:
    for line in f:
        t = json.loads(line)
        out = t.get("stdout") or ""
        tap = [l for l in out.splitlines() if re.match(r"^(not )?ok\b", l)]
        if t.get("protocol") == "tap" or tap:
            for l in tap:
                if "# SKIP" in l or "# skip" in l:
                    skipped += 1
                elif l.startswith("not ok"):
                    failed += 1
                else:
                    passed += 1
            if not tap and t["result"] != "OK":
                failed += 1
            elif t["result"] not in ("OK", "SKIP", "EXPECTEDFAIL") and \
                    not any(l.startswith("not ok") for l in tap):
                failed += 1  # crashed or timed out after its TAP lines
        else:
            r = t["result"]
            if r == "SKIP":
                skipped += 1
            elif r in ("OK", "EXPECTEDFAIL"):
                passed += 1
            else:
                failed += 1
print(f"{passed} passed, {failed} failed, {skipped} skipped")
sys.exit(1 if failed else 0)
