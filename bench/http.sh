#!/bin/bash
# The HTTP store's chunk path against tensorctl get: GB/s of reading one
# SIZE-byte tensor (default 1 GiB) over loopback HTTP (curl, the body sent
# by sendfile() from the plane's memfd), the same over a unix-domain HTTP
# socket (--http unix:PATH), and through the socket API
# (tensorctl get: the consumer maps the same memfd), both delivering the
# bytes into a pipe that dd drains. Prints each run, the best of REPS, and
# the ratio. No threshold: a figure, not a test.
#
#   bench/http.sh [SIZE_MIB [REPS]]      (BUILDDIR=build by default)
set -eu
cd "$(dirname "$0")/.."
B=${BUILDDIR:-build}
MIB=${1:-1024}
REPS=${2:-3}
bytes=$((MIB * 1048576))
dir=$(mktemp -d /tmp/td-http-bench.XXXXXX)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$B/daemon/tensord" --socket "$dir/s" --http "127.0.0.1:$port" \
	--http-prefix bench/ --max-bytes 0 --log-level warn &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$dir"' EXIT
for _ in $(seq 100); do [ -S "$dir/s" ] && break; sleep 0.05; done
head -c "$bytes" /dev/urandom >"$dir/payload"
"$B/tools/tensorctl" --socket "$dir/s" put bench/big --dtype u8 \
	--shape "$bytes" "$dir/payload" >/dev/null
rm -f "$dir/payload"

# seconds of one command line whose stdout is drained by dd
run() {
	local t0 t1
	t0=$(date +%s.%N)
	eval "$1" | dd of=/dev/null bs=1M status=none
	t1=$(date +%s.%N)
	echo "$t1 - $t0" | bc -l
}

best() { # command -> best GB/s over REPS
	local b=0 s g
	for _ in $(seq "$REPS"); do
		s=$(run "$1")
		g=$(echo "$bytes / $s / 1000000000" | bc -l)
		printf '  %.2f GB/s\n' "$g" >&2
		b=$(echo "if ($g > $b) $g else $b" | bc -l)
	done
	echo "$b"
}

echo "HTTP GET of a ${MIB} MiB chunk (curl, loopback):" >&2
h=$(best "curl -sf http://127.0.0.1:$port/zarr/bench_big/c/0")
echo "tensorctl get of the same tensor:" >&2
g=$(best "'$B/tools/tensorctl' --socket '$dir/s' get bench/big -o -")
# the same GET over a unix-domain socket (--http unix:PATH): no TCP
kill $pid
wait $pid 2>/dev/null || true
"$B/daemon/tensord" --socket "$dir/s" --http "unix:$dir/h" \
	--http-prefix bench/ --max-bytes 0 --log-level warn &
pid=$!
for _ in $(seq 100); do [ -S "$dir/h" ] && break; sleep 0.05; done
head -c "$bytes" /dev/urandom >"$dir/payload"
"$B/tools/tensorctl" --socket "$dir/s" put bench/big --dtype u8 \
	--shape "$bytes" "$dir/payload" >/dev/null
rm -f "$dir/payload"
echo "HTTP GET of the same chunk over a unix socket (curl --unix-socket):" >&2
u=$(best "curl -sf --unix-socket '$dir/h' http://t/zarr/bench_big/c/0")
printf 'best: http %.2f GB/s, http over unix %.2f GB/s, tensorctl get %.2f GB/s, http/get %.2f, unix/get %.2f\n' \
	"$h" "$u" "$g" "$(echo "$h / $g" | bc -l)" "$(echo "$u / $g" | bc -l)"
