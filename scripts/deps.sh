#!/bin/sh
# Install the Debian 12 packages tensord needs to build and test.
# Idempotent: installs only what is missing; uses sudo only when not root.
set -eu

PKGS="meson ninja-build pkg-config gcc clang libclang-rt-14-dev
libuv1-dev liburing-dev libxxhash-dev libcriterion-dev libcbor-dev
libjson-c-dev
iceoryx libiceoryx-binding-c-dev gnuplot-nox
python3 systemd valgrind scdoc
libvulkan-dev mesa-vulkan-drivers glslc
python3-dev python3-numpy python3-pytest python3-torch"

missing=""
for p in $PKGS; do
	if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null |
		grep -q "install ok installed"; then
		missing="$missing $p"
	fi
done
[ -z "$missing" ] && exit 0

SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
echo "deps: installing$missing" >&2
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
# shellcheck disable=SC2086
$SUDO apt-get install -y -qq --no-install-recommends $missing >&2
