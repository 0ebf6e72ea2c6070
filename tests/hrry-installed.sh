#!/bin/sh
# Install into a DESTDIR, then build tests/hrry-installed.c against the
# installed <tensord/hrry.h> and libtensord found by pkg-config only (the
# source tree's headers are not on the include path), and run it.
set -eu
src=$(dirname "$0")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"${TD_MESON:-meson}" install -C "$TD_BUILD_ROOT" --destdir "$tmp/dest" \
	--no-rebuild --quiet >"$tmp/install.log" 2>&1 ||
	{ cat "$tmp/install.log"; exit 1; }
pc=$(find "$tmp/dest" -name tensord.pc | head -n1)
test -n "$pc" || { echo "tensord.pc not installed"; exit 1; }
test -n "$(find "$tmp/dest" -path '*/include/tensord/hrry.h')" ||
	{ echo "tensord/hrry.h not installed"; exit 1; }
export PKG_CONFIG_PATH="$(dirname "$pc")"
export PKG_CONFIG_SYSROOT_DIR="$tmp/dest"
export PKG_CONFIG_LIBDIR="$(dirname "$pc")"
cflags=$(pkg-config --cflags tensord)
libs=$(pkg-config --libs tensord)
# (with a sysroot, pkg-config prefixes variables with it too)
libdir=$(pkg-config --variable=libdir tensord)
san=
case "${TD_SANITIZE:-none}" in none | '') ;; *) san="-fsanitize=$TD_SANITIZE" ;; esac
${CC:-cc} -std=c11 -Wall -Wextra -Werror $san $cflags "$src/hrry-installed.c" \
	$libs -Wl,-rpath,"$libdir" -o "$tmp/prog"
# the installed library, not the build tree's
unset LD_LIBRARY_PATH
ldd "$tmp/prog" | grep -q "$tmp/dest" || { ldd "$tmp/prog"; exit 1; }
"$tmp/prog" "$tmp/file.hrry"
