#!/bin/sh
# SPDX-License-Identifier: MIT
# testutil's temporary files (tu_tmp_note): a test that passed leaves
# nothing of what it noted under /tmp, a failed one leaves all of it, and
# the runner's list goes at its end. Runs tmp-cleanup.c's program ($1).
set -u
bin=$1
out=$(mktemp -d /tmp/td-tmpcheck-XXXXXX) || exit 1
fail() {
	echo "FAIL: $*"
	cat "$out/log"
	exit 1
}
TD_TMPDEMO_OUT=$out "$bin" --jobs=2 --filter 'demo/*s' >"$out/log" 2>&1 && \
	fail "the program passed: its test demo::fails fails on purpose"
TD_TMPDEMO_OUT=$out "$bin" --jobs=2 --filter 'demo/parameterized' \
	>>"$out/log" 2>&1 || fail "demo::parameterized failed"
for i in 0 1; do
	p=$(head -n1 "$out/parameterized-$i")
	case $p in /tmp/td-tmpdemo-*) ;; *) fail "case $i wrote no folder" ;; esac
	! grep -q '^lost$' "$out/parameterized-$i" || \
		fail "case $i's folder went while it ran"
	[ ! -e "$p" ] || fail "$p of demo::parameterized is still there"
done
for who in passes fails; do
	[ -s "$out/$who" ] || fail "demo::$who wrote no paths"
	grep -q '^list /tmp/td-tmplist-' "$out/$who" || \
		fail "demo::$who saw no runner's list"
	[ "$(grep -c '^/tmp/td-tmpdemo-' "$out/$who")" -eq 3 ] || \
		fail "demo::$who made $(grep -c '^/tmp/' "$out/$who") paths, not 3"
done
for p in $(grep '^/tmp/' "$out/passes"); do
	[ ! -e "$p" ] || fail "$p of demo::passes is still there"
done
for p in $(grep '^/tmp/' "$out/fails"); do
	[ -e "$p" ] || fail "$p of demo::fails was removed"
done
[ -e "$(grep '^/tmp/' "$out/fails" | head -n1)/sub/file" ] || \
	fail "what is in demo::fails's folder was removed"
list=$(sed -n 's/^list //p' "$out/passes")
[ ! -e "$list" ] || fail "the runner's list $list is still there"
rm -rf $(grep '^/tmp/td-tmpdemo-' "$out/fails") "$out"
echo "ok: a passed test's 3 paths removed, a failed test's 3 kept," \
	"list gone; parameterized cases kept their folders while running"
