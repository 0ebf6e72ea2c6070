#!/bin/sh
# Usage: installed.sh PROGRAM.c HEADER... -- [ARGS...]
# Install into a DESTDIR, then build PROGRAM.c against the installed
# headers and libtensord found by pkg-config only (the source tree is not
# on the include path), check that every function the HEADERs mark for
# export is exported by the installed library, and run PROGRAM with ARGS
# (%TMP% in an argument: a private folder removed afterwards).
set -eu
prog=$1
shift
headers=
while [ $# -gt 0 ] && [ "$1" != -- ]; do
	headers="$headers $1"
	shift
done
[ $# -gt 0 ] && shift
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"${TD_MESON:-meson}" install -C "$TD_BUILD_ROOT" --destdir "$tmp/dest" \
	--no-rebuild --quiet >"$tmp/install.log" 2>&1 ||
	{ cat "$tmp/install.log"; exit 1; }
pc=$(find "$tmp/dest" -name tensord.pc | head -n1)
test -n "$pc" || { echo "tensord.pc not installed"; exit 1; }
export PKG_CONFIG_PATH="$(dirname "$pc")"
export PKG_CONFIG_SYSROOT_DIR="$tmp/dest"
export PKG_CONFIG_LIBDIR="$(dirname "$pc")"
cflags=$(pkg-config --cflags tensord)
libs=$(pkg-config --libs tensord)
# (with a sysroot, pkg-config prefixes variables with it too)
libdir=$(pkg-config --variable=libdir tensord)
for h in $headers; do
	f=$(find "$tmp/dest" -path "*/include/tensord/$h" | head -n1)
	test -n "$f" || { echo "tensord/$h not installed"; exit 1; }
	# every declared API function is in the dynamic symbol table
	for fn in $(sed -n 's/^TD_[A-Z_]*API [^(]*[ *]\(td_[a-z0-9_]*\)(.*/\1/p' "$f"); do
		nm -D --defined-only "$libdir/libtensord.so" |
			grep -q " $fn@" ||
			{ echo "$h declares $fn; libtensord does not export it"; exit 1; }
	done
done
san=
case "${TD_SANITIZE:-none}" in none | '') ;; *) san="-fsanitize=$TD_SANITIZE" ;; esac
${CC:-cc} -std=c11 -Wall -Wextra -Werror $san $cflags "$prog" \
	$libs -Wl,-rpath,"$libdir" -o "$tmp/prog"
# the installed library, not the build tree's
unset LD_LIBRARY_PATH
ldd "$tmp/prog" | grep -q "$tmp/dest" || { ldd "$tmp/prog"; exit 1; }
n=$#
while [ "$n" -gt 0 ]; do
	a=$1
	shift
	case $a in *%TMP%*) a="$tmp${a#*%TMP%}" ;; esac
	set -- "$@" "$a"
	n=$((n - 1))
done
"$tmp/prog" "$@"
