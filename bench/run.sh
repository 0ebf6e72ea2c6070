#!/bin/sh
# The full benchmark run (issue 5): builds the bench and the daemon, runs
# every method at every size, writes bench/results/{results.json,rtt.png,
# summary.md,machine.txt} and puts the machine and the tables into
# bench/README.md between its "results" markers.
# BUILDDIR selects the build folder (default: build-bench); extra arguments
# go to tensord-bench (e.g. --sizes 64,4K --scale 0.1 for a quick look).
# TD_BENCH_REV names the source revision when run outside a git checkout.
set -eu
cd "$(dirname "$0")/.."
BUILDDIR=${BUILDDIR:-build-bench}
OUT=bench/results

scripts/deps.sh
[ -d "$BUILDDIR" ] || meson setup "$BUILDDIR" >/dev/null
ninja -C "$BUILDDIR" bench/tensord-bench daemon/tensord >/dev/null
mkdir -p "$OUT"

{
	echo "kernel: $(uname -srvm)"
	echo "os: Debian $(cat /etc/debian_version 2>/dev/null || echo '?')"
	echo "compiler: $(${CC:-cc} --version | head -n 1)"
	echo "iceoryx: $(dpkg-query -W -f='${Version}' iceoryx 2>/dev/null || echo 'not installed')"
	echo "memory: $(awk '/MemTotal/ {printf "%.1f GiB", $2 / 1048576}' /proc/meminfo)"
	echo "git: ${TD_BENCH_REV:-$(git rev-parse --short HEAD 2>/dev/null || echo '?')}"
	echo "lscpu:"
	lscpu | grep -E '^(Architecture|CPU\(s\)|On-line|Model name|Thread|Core|Socket|NUMA node\(s\)|L1d|L2|L3|Hypervisor)' |
		sed 's/^/  /'
} >"$OUT/machine.txt"

# Five rounds: verdicts pair the methods' rounds (the median of five
# per-round ratios, with their range); later arguments override it.
"$BUILDDIR/bench/tensord-bench" --rounds 5 \
	--json "$OUT/results.json" \
	--png "$OUT/rtt.png" \
	--markdown "$OUT/summary.md" "$@"

python3 - "$OUT" <<'EOF'
import json, sys
out = sys.argv[1]
readme = "bench/README.md"
res = json.load(open(f"{out}/results.json"))
machine = open(f"{out}/machine.txt").read().rstrip()
summary = open(f"{out}/summary.md").read().rstrip()
block = (
    f"Run {res['date']} (`{res['command']}`), {res['duration_s']:.0f} s; "
    f"load average before/after: {res['machine']['loadavg_start']} / "
    f"{res['machine']['loadavg_end']}.\n\n"
    f"```\n{machine}\n```\n\n{summary}\n"
)
text = open(readme).read()
begin, end = "<!-- results:begin -->", "<!-- results:end -->"
a, b = text.index(begin) + len(begin), text.index(end)
open(readme, "w").write(text[:a] + "\n" + block + text[b:])
EOF
echo "bench: results in $OUT/, tables in bench/README.md"
