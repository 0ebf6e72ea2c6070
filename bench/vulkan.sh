#!/bin/sh
# GPU stages through tensord against one process with a memcpy
# (examples/vulkan/vk-pipeline.c, docs/fastpath.md "GPU stages").
# Alternates the two pipelines ROUNDS times per size against a private
# daemon and prints a markdown table of the medians over rounds and the
# ratio ring / copy. Needs a build with -Dvulkan (BUILDDIR, default build).
#
#   bench/vulkan.sh [ROUNDS]        # default 5
set -eu
cd "$(dirname "$0")/.."
BUILDDIR=${BUILDDIR:-build}
ROUNDS=${1:-5}
PIPE="$BUILDDIR/examples/vulkan/example-vk-pipeline"
[ -x "$PIPE" ] || { echo "vulkan.sh: $PIPE not built (-Dvulkan)" >&2; exit 1; }
TMP=$(mktemp -d)
trap 'kill $DPID 2>/dev/null; rm -rf "$TMP"' EXIT
"$BUILDDIR/daemon/tensord" --socket "$TMP/td.sock" --log-level warn &
DPID=$!
export TENSORD_SOCKET="$TMP/td.sock"
sleep 0.3
for spec in 1048576:200 67108864:15; do
	bytes=${spec%:*}
	frames=${spec#*:}
	r=1
	while [ "$r" -le "$ROUNDS" ]; do
		"$PIPE" ring bench/vk "$bytes" "$frames" >>"$TMP/ring.$bytes"
		"$PIPE" copy "$bytes" "$frames" >>"$TMP/copy.$bytes"
		r=$((r + 1))
	done
done
python3 - "$TMP" <<'PY'
import re, statistics, sys
d = sys.argv[1]
def grab(path, pat):
    return [float(m.group(1)) for m in re.finditer(pat, open(path).read())]
print("| tensor | pipeline | fps | latency median µs | produce µs | handoff µs | reduce µs | bytes copied per frame |")
print("|---|---|---|---|---|---|---|---|")
for b in (1048576, 67108864):
    size = "1 MiB" if b == 1048576 else "64 MiB"
    med = statistics.median
    rf = med(grab(f"{d}/ring.{b}", r"ring: .*?: ([\d.]+) fps"))
    rl = med(grab(f"{d}/ring.{b}", r"ring: .*latency median (\d+)"))
    rp = med(grab(f"{d}/ring.{b}", r"median produce (\d+)"))
    rr = med(grab(f"{d}/ring.{b}", r"median reduce (\d+)"))
    cf = med(grab(f"{d}/copy.{b}", r"copy: .*?: ([\d.]+) fps"))
    cl = med(grab(f"{d}/copy.{b}", r"copy: .*latency median (\d+)"))
    cp = med(grab(f"{d}/copy.{b}", r"median produce (\d+)"))
    cm = med(grab(f"{d}/copy.{b}", r"memcpy (\d+) us"))
    cr = med(grab(f"{d}/copy.{b}", r"memcpy \d+ us, reduce (\d+)"))
    print(f"| {size} | ring (2 processes) | {rf:.1f} | {rl:.0f} | {rp:.0f} | — | {rr:.0f} | 0 |")
    print(f"| {size} | copy (1 process) | {cf:.1f} | {cl:.0f} | {cp:.0f} | {cm:.0f} (memcpy) | {cr:.0f} | {b} |")
    print(f"| {size} | ratio ring / copy | {rf/cf:.2f} | {rl/cl:.2f} | | | | |")
    bad = sum(1 for l in open(f"{d}/ring.{b}") if "frames match" in l and not re.search(r"(\d+) of \1 frames", l))
    bad += sum(1 for l in open(f"{d}/copy.{b}") if "frames match" in l and not re.search(r"(\d+) of \1 frames", l))
    if bad:
        print(f"\n**{bad} runs at {size} had frames that did not match**")
PY
