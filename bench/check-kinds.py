#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Checks which runs tensord-bench makes of the methods whose matrix is
not "everything": bare-futex runs fan-out 1->4 and paced streams (the
floor of those cells) and verifies every payload there, bare-spin stays
ping-pong only, socket-copy is n/a above 64 MiB with its reason, and the
Markdown's fan-out and paced tables show bare-futex and not bare-spin,
and the fan-out's CPU by process is the JSON's split of the same run;
--warmup applies to paced runs too, every measured message of a paced
run is a latency (skipped ones too), and a run matrix larger than the
report keeps is refused before anything starts.
Smoke-sized runs (seconds); asserts no timing.

Usage: check-kinds.py BENCH   (the tensord-bench binary; needs no
library: the bare limits and the socket copy are always built)
"""
import subprocess
import sys
import tempfile

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
from benchrun import fail, run_bench  # noqa: E402

METHODS = "bare-futex,bare-spin,socket-copy"
ITERS, WARMUP, ROUNDS = 30, 3, 3  # ping-pong and fan-out; warm-up a round
BIG = 1 << 30


def run(bench, tmp):
    return run_bench(bench, ["--smoke", "--methods", METHODS, "--sizes",
                             f"64,{BIG}", "--iters", str(ITERS), "--warmup",
                             str(WARMUP), "--rounds", str(ROUNDS),
                             "--timeout", "20"], tmp)


def runs(results, method, kind=None):
    return [r for r in results if r["method"] == method and
            (kind is None or r["kind"] == kind)]


def check_json(results):
    fan = runs(results, "bare-futex", "fanout")
    # fan-out runs sizes up to 64 MiB: 64 B in both modes
    if sorted(r["mode"] for r in fan) != ["nowrite", "write"] or \
            any(r["size"] != 64 or r["consumers"] != 4 for r in fan):
        fail(f"bare-futex fan-out runs: {fan}")
    for r in fan:
        want = 4 * (ITERS + ROUNDS * WARMUP)
        if r["status"] != "ok" or r["verified"] != want:
            fail(f"bare-futex fan-out {r['mode']}: every consumer must "
                 f"verify every payload: {r}")
    paced = runs(results, "bare-futex", "paced")
    got = sorted((r["rate_hz"], r["consumers"]) for r in paced)
    if got != [(30, 1), (30, 4), (1000, 1), (1000, 4)]:
        fail(f"bare-futex paced runs (rate, consumers): {got}")
    for r in paced:
        # a latest-value consumer may skip, never check nothing
        if r["status"] != "ok" or r["verified"] < r["consumers"] or \
                r["one_way_ns"]["count"] < 1:
            fail(f"bare-futex paced {r['rate_hz']} Hz 1->"
                 f"{r['consumers']}: {r}")
    for m in ("bare-spin", "socket-copy"):
        other = [r for r in runs(results, m) if r["kind"] != "pingpong"]
        if other:
            fail(f"{m} runs only ping-pong, ran {other}")
        if not any(r["status"] == "ok" and r["size"] == 64
                   for r in runs(results, m, "pingpong")):
            fail(f"{m} did not run ping-pong at 64 B")
    for m, words in (("socket-copy", "socket copy runs up to 64 MiB"),
                     ("bare-futex", "bare limits run up to 64 MiB")):
        big = [r for r in runs(results, m, "pingpong") if r["size"] == BIG]
        if len(big) != 2 or any(r["status"] != "n/a" or
                                words not in r["reason"] for r in big):
            fail(f"{m} at 1 GiB must be n/a ({words}): {big}")


def table(md, title):
    """The lines of the Markdown table under the heading title."""
    at = md.find(title)
    if at < 0:
        fail(f"no table '{title}' in the Markdown")
    lines = md[at:].split("\n")[2:]
    return lines[:next((i for i, l in enumerate(lines)
                        if not l.startswith("|")), len(lines))]


def check_fanout_tables(md):
    for w in ("write", "nowrite"):
        rows = table(md, f"### Fan-out 1→4: Median round trip in µs "
                     f"(p99), mode {w}\n")
        if "| bare-futex |" not in rows[0] or "bare-spin" in rows[0] or \
                not any(r.startswith("| 64 B |") for r in rows):
            fail(f"fan-out {w} table: " + "\n".join(rows))


def check_cpu_split(md, results):
    """Each fan-out cell "producer / consumers / service" is that run's
    JSON totals scaled to its CPU per handoff, and sums to it."""
    for w in ("write", "nowrite"):
        rows = table(md, "### Fan-out 1→4: CPU per handoff by process in "
                     f"µs: producer / consumers (all) / tensord or RouDi, "
                     f"mode {w}\n")
        head = [c.strip() for c in rows[0].strip("|").split("|")]
        r = next(r for r in runs(results, "bare-futex", "fanout")
                 if r["mode"] == w and r["size"] == 64)
        cpu = r["cpu_ns"]
        total = cpu["producer"] + cpu["consumers"] + cpu["service"]
        cells = [c.strip() for c in next(
            x for x in rows if x.startswith("| 64 B |")).strip("|")
            .split("|")]
        got = [float(v) for v in cells[head.index("bare-futex")].split("/")]
        want = [cpu[k] * cpu["per_handoff"] / total / 1e3
                for k in ("producer", "consumers", "service")]
        if total <= 0 or any(abs(g - x) > 0.051 for g, x in
                             zip(got, want)) or len(got) != 3 or \
                abs(sum(got) - cpu["per_handoff"] / 1e3) > 0.2:
            fail(f"fan-out {w} CPU by process {got}, JSON {cpu}")


def check_markdown(md):
    check_fanout_tables(md)
    rows = table(md, "### Paced streams")[2:]
    if sum("| bare-futex |" in r for r in rows) != 4 or \
            any("bare-spin" in r for r in rows):
        fail("paced table rows: " + "\n".join(rows))
    notes = md[md.find("### Not measured"):]
    if "- socket-copy (n/a, from 1 GiB" not in notes:
        fail("'Not measured' does not list socket-copy at 1 GiB:\n" + notes)


def check_paced_warmup(bench, tmp):
    """--warmup applies to paced runs as to the others (it was ignored
    there: always 100 at 1 kHz)."""
    res = run_bench(bench, ["--kinds", "paced", "--methods", "bare-futex",
                            "--rates", "1000", "--iters", "20", "--warmup",
                            "7", "--rounds", "1", "--timeout", "20"],
                    tmp)[0]
    if len(res) != 2 or any(r["status"] != "ok" or
                            r["warmup_per_round"] != 7 for r in res):
        fail(f"paced runs with --warmup 7: {res}")


def check_paced_skips(bench, tmp):
    """Every measured message of a paced run is a latency, those a
    consumer skipped for a newer one included (counted with the newer
    one's latency, and as skipped): 100 kHz, faster than a futex wake
    here, so the consumers skip; the count asserted does not depend on
    how many."""
    res, md = run_bench(bench, ["--kinds", "paced", "--methods",
                                "bare-futex", "--rates", "100000", "--iters",
                                "400", "--warmup", "20", "--rounds", "1",
                                "--timeout", "20"], tmp)
    for r in res:
        want = r.get("samples", 0) * r["consumers"]
        if r["status"] != "ok" or r["one_way_ns"]["count"] != want or \
                not 0 <= r["skipped"] < want:
            fail(f"paced 100 kHz 1->{r['consumers']}: {want} latencies "
                 f"expected: {r}")
        print(f"ok: paced 100 kHz 1->{r['consumers']}: {want} latencies, "
              f"{r['skipped']} of them skipped")
    if "| latencies (skipped) |" not in md:
        fail("the paced table does not show the skipped messages")


def check_matrix_cap(bench):
    """A matrix of more runs than the report keeps (512) is refused at
    once, not cut short without a word: every method, 16 sizes, both
    modes is 17 x 16 x 2 ping-pong runs."""
    sizes = ",".join(str(64 << i) for i in range(16))
    try:
        p = subprocess.run([bench, "--kinds", "pingpong", "--sizes", sizes,
                            "--iters", "1", "--warmup", "0", "--no-settle"],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True, timeout=20)
    except subprocess.TimeoutExpired:
        fail("a matrix of 544 runs was started, not refused")
    if p.returncode != 2 or "at most 512" not in p.stdout:
        fail(f"a matrix of 544 runs: exit {p.returncode}\n{p.stdout}")


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        sys.exit(2)
    with tempfile.TemporaryDirectory() as tmp:
        results, md = run(sys.argv[1], tmp)
        check_json(results)
        check_markdown(md)
        check_cpu_split(md, results)
        # without ping-pong runs the fan-out tables still get their sizes
        check_fanout_tables(run_bench(sys.argv[1], [
            "--smoke", "--kinds", "fanout", "--methods", METHODS,
            "--sizes", "64", "--timeout", "20"], tmp)[1])
        check_paced_warmup(sys.argv[1], tmp)
        check_paced_skips(sys.argv[1], tmp)
    check_matrix_cap(sys.argv[1])
    print("ok: bare-futex in fan-out and paced runs with every payload "
          "verified; bare-spin and socket-copy ping-pong only; "
          "socket-copy n/a at 1 GiB; fan-out CPU split as in the JSON; "
          "--warmup in paced runs; a matrix over the cap refused")


if __name__ == "__main__":
    main()
