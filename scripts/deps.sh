#!/bin/sh
# Install the Debian 12 packages tensord needs to build and test; with
# --run only those the default build needs (the daemon, libtensord,
# tensorctl and the criterion suite's build): what scripts/run.sh asks,
# without the test-only tools, the Python and Vulkan stacks and npm.
# Idempotent: installs only what is missing; uses sudo only when not root.
set -eu

RUN_PKGS="meson ninja-build pkg-config gcc python3
libuv1-dev liburing-dev libxxhash-dev libcriterion-dev libcbor-dev
libjson-c-dev libmicrohttpd-dev systemd"
PKGS="$RUN_PKGS clang libclang-rt-14-dev
iceoryx libiceoryx-binding-c-dev gnuplot-nox
valgrind scdoc curl bc
libvulkan-dev mesa-vulkan-drivers glslc
python3-dev python3-numpy python3-pytest python3-torch
python3-zarr python3-dask python3-distributed python3-xarray python3-fsspec
python3-aiohttp"
run_only=false
case "${1:-}" in
--run) run_only=true; PKGS=$RUN_PKGS ;;
"") ;;
*) echo "usage: scripts/deps.sh [--run]" >&2; exit 2 ;;
esac

# The Zarr v3 reader the tests use (zarrita 0.7.5, zarr.md §12.1): npm ci
# from the committed lockfile into tests/zarr/node_modules. Node and npm
# come from Debian when they are not there (a Node 20 that ships npm is
# kept as it is).
zarrita() {
	$run_only && return 0
	dir="$(cd "$(dirname "$0")/.." && pwd)/tests/zarr"
	[ -f "$dir/node_modules/zarrita/package.json" ] &&
		grep -q '"version": "0.7.5"' \
			"$dir/node_modules/zarrita/package.json" && return 0
	echo "deps: npm ci in tests/zarr (zarrita 0.7.5)" >&2
	(cd "$dir" && npm ci --no-audit --no-fund --ignore-scripts >&2)
}

missing=""
for p in $PKGS; do
	if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null |
		grep -q "install ok installed"; then
		missing="$missing $p"
	fi
done
$run_only || command -v npm >/dev/null 2>&1 || missing="$missing nodejs npm"
if [ -z "$missing" ]; then
	zarrita
	exit 0
fi

SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
echo "deps: installing$missing" >&2
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
# shellcheck disable=SC2086
$SUDO apt-get install -y -qq --no-install-recommends $missing >&2
zarrita
