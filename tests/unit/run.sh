#!/bin/sh
# Run every unit-test binary given; print their lines and a total.
passed=0 failed=0 rc=0
for t in "$@"; do
	out=$("$t") || rc=1
	printf '%s\n' "$out"
	p=$(printf '%s\n' "$out" | sed -n 's/.*: \([0-9]*\) passed, \([0-9]*\) failed$/\1/p' | tail -n 1)
	f=$(printf '%s\n' "$out" | sed -n 's/.*: \([0-9]*\) passed, \([0-9]*\) failed$/\2/p' | tail -n 1)
	[ -n "$p" ] || { p=0; f=1; rc=1; echo "$t: no summary (crashed?)"; }
	passed=$((passed + p)) failed=$((failed + f))
done
echo "unit: $passed passed, $failed failed"
exit $rc
