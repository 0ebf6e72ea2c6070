#!/bin/sh
# The README's run command: install dependencies, build, and run the daemon
# in the foreground on the default socket, with no config file. Arguments
# go to tensord (e.g. --socket /tmp/t.sock, --log-level debug).
set -eu
cd "$(dirname "$0")/.."
scripts/deps.sh --run
BUILDDIR=${BUILDDIR:-build}
if [ ! -d "$BUILDDIR" ]; then
	meson setup "$BUILDDIR" >/dev/null
fi
meson compile -C "$BUILDDIR" >&2
exec "$BUILDDIR/daemon/tensord" "$@"
