#!/bin/sh
# The README's test command: install dependencies, build, run every test.
# Extra arguments go to `meson setup` (e.g. -Db_sanitize=address,undefined).
# BUILDDIR selects the build folder (default: build).
set -eu
cd "$(dirname "$0")/.."
scripts/deps.sh
BUILDDIR=${BUILDDIR:-build}
# CI treats warnings as errors; a newcomer's build only shows them.
if [ "${CI:-}" = true ]; then
	set -- -Dwerror=true "$@"
fi
if [ -d "$BUILDDIR" ]; then
	meson setup --reconfigure "$BUILDDIR" "$@" >/dev/null
else
	meson setup "$BUILDDIR" "$@" >/dev/null
fi
meson compile -C "$BUILDDIR"
rc=0
meson test -C "$BUILDDIR" --print-errorlogs --num-processes 2 \
	--timeout-multiplier "${TIMEOUT_MULTIPLIER:-1}" || rc=$?
python3 scripts/summary.py "$BUILDDIR/meson-logs/testlog.json" || rc=1
exit $rc
