#!/usr/bin/env bash
# `make test`: build, unit tests and the integration suite, first with the
# normal binary, then with the sanitizer build. Prints one line per stage
# and, last, "total: N passed, N failed"; exits non-zero when anything
# failed, crashed or ran no test.
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
set -uo pipefail

cd "$(dirname "$0")/.." || exit 1
exec </dev/null
export PYTHONDONTWRITEBYTECODE=1
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1}

PY=/usr/bin/python3
JOBS=$(nproc 2>/dev/null || echo 2)
SUITE_TIMEOUT=1200     # seconds for one integration run (it takes about 7 minutes)
LOG_DIR=$(mktemp -d /tmp/idemproxy-test.XXXXXX)
chmod 755 "$LOG_DIR"   # the store test's cluster runs as postgres inside it
UNIT_PG_PORT=${UNIT_PG_PORT:-55431}

# The store's unit test talks to a real cluster of its own.
cleanup() {
	bash scripts/pg.sh stop "$LOG_DIR/pg" "$UNIT_PG_PORT" >/dev/null 2>&1
	rm -rf "$LOG_DIR"
}
trap cleanup EXIT
if dsn=$(bash scripts/pg.sh start "$LOG_DIR/pg" "$UNIT_PG_PORT" | tail -n 1); then
	export IDEMPROXY_TEST_DSN=$dsn
else
	echo "unit: could not start PostgreSQL for the store test"
fi

total_passed=0
total_failed=0
summary=()

# record STAGE PASSED FAILED
record() {
	total_passed=$((total_passed + $2))
	total_failed=$((total_failed + $3))
	summary+=("$1: $2 passed, $3 failed")
}

# build STAGE MAKEARGS...: a failed build counts as one failure.
build() {
	local stage=$1
	shift
	if make --no-print-directory -j"$JOBS" "$@"; then
		return 0
	fi
	echo "$stage: build failed"
	record "$stage" 0 1
	return 1
}

# unit STAGE MAKEARGS...: run `make unit`, read its "unit: N passed, N failed".
unit() {
	local stage=$1 out p f rc
	shift
	out=$LOG_DIR/$stage.log
	make --no-print-directory -j"$JOBS" "$@" unit 2>&1 | tee "$out"
	rc=${PIPESTATUS[0]}
	read -r p f < <(sed -n 's/^unit: \([0-9]*\) passed, \([0-9]*\) failed$/\1 \2/p' "$out" | tail -n 1)
	if [ -z "${p:-}" ]; then
		echo "$stage: no unit summary (exit $rc)"
		p=0 f=1
	elif [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
		echo "$stage: make unit exited $rc"
		f=1
	elif [ $((p + f)) -eq 0 ]; then
		echo "$stage: ran no test"
		f=1
	fi
	record "$stage" "$p" "$f"
}

# integration STAGE BINARY: the pytest suite against BINARY.
integration() {
	local stage=$1 bin=$2 out rc p f e
	out=$LOG_DIR/$stage.log
	IDEMPROXY_BIN=$bin timeout -k 10 "$SUITE_TIMEOUT" \
		"$PY" -m pytest -p no:cacheprovider -q tests/integration 2>&1 | tee "$out"
	rc=${PIPESTATUS[0]}
	# pytest's closing line, e.g. "3 failed, 97 passed, 1 error in 61.2s".
	local last
	last=$(grep -E '^[=[:space:]]*[0-9]+ [a-z]+.* in [0-9.]+s' "$out" | tail -n 1)
	p=$(grep -oE '[0-9]+ passed' <<<"$last" | grep -oE '[0-9]+' || true)
	f=$(grep -oE '[0-9]+ failed' <<<"$last" | grep -oE '[0-9]+' || true)
	e=$(grep -oE '[0-9]+ errors?' <<<"$last" | grep -oE '[0-9]+' || true)
	p=${p:-0} f=$((${f:-0} + ${e:-0}))
	if [ -z "$last" ]; then
		echo "$stage: pytest printed no summary (exit $rc)"
		f=$((f + 1))
	elif [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
		echo "$stage: pytest exited $rc"
		f=1
	elif [ "$p" -eq 0 ] && [ "$f" -eq 0 ]; then
		echo "$stage: ran no test"
		f=1
	fi
	record "$stage" "$p" "$f"
}

echo "== build"
if build build; then
	echo "== unit"
	unit unit
	echo "== integration (./idemproxy)"
	integration integration ./idemproxy
fi

echo "== build (sanitizers)"
if build build-asan SANITIZE=1; then
	echo "== unit (sanitizers)"
	unit unit-asan SANITIZE=1
	echo "== integration (./idemproxy-asan)"
	integration integration-asan ./idemproxy-asan
fi

echo
for line in "${summary[@]}"; do
	echo "$line"
done
echo "total: $total_passed passed, $total_failed failed"
[ "$total_failed" -eq 0 ]
