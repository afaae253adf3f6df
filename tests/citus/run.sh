#!/usr/bin/env bash
# idemproxy on a three-node Citus cluster (`make citus CITUS_SRC=DIR`).
#
#   tests/citus/run.sh SRC
#
# Builds and installs Citus from the source tree SRC (scripts/citus.sh
# build; skipped when the installed one is from the same source), starts a
# coordinator and two workers on loopback in a fresh directory under /tmp,
# migrates the coordinator's database and distributes idempotency_records by
# idem_key (idemproxy migrate, then migrate --distribute), runs the store
# integration tests against the coordinator (IDEMPROXY_TEST_DATABASE), then
# the Citus chaos run (tests/citus/chaos.py: keyed traffic while a worker is
# SIGKILLed and restarted and the coordinator restarted), then the
# benchmark against one plain PostgreSQL beside it (tests/citus/bench.sh),
# and stops and deletes the cluster, also on failure or interruption.
#
# CITUS_TESTS overrides the pytest arguments (files and -k), CITUS_SECONDS
# the chaos run's budget (default 90), CITUS_BENCH=0 leaves the benchmark
# out, CITUS_KEEP=1 keeps the cluster. The exit status is the tests', or
# when they pass the chaos run's, or when it passes the benchmark's.
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
set -euo pipefail
cd "$(dirname "$0")/../.."

PY=/usr/bin/python3
PORT_TRIES=50
SECONDS_BUDGET=${CITUS_SECONDS:-90}

say() { echo "citus: $*"; }
die() { echo "citus: $*" >&2; exit 1; }

[ $# -eq 1 ] || die "usage: $0 CITUS_SRC"
src=$1
[ "$(id -u)" -eq 0 ] || die "must run as root (installs Citus; the nodes run as postgres)"

# The store tests that make sense on a distributed table: a scope's owner,
# replay, conflict, races between instances, leases and fencing, recovery,
# the sweeper and its tombstones, the records commands and the admin API's,
# the per-actor limits and quotas, forwarded keys, operations named by the
# body, and the cache. Left out: tests that
# stop or restart the session's database (pg.stop/pg.start in test_cache.py;
# private_pg is a plain PostgreSQL of the test's own anyway).
DEFAULT_TESTS=(tests/integration/test_flow.py tests/integration/test_concurrency.py
	tests/integration/test_recovery.py tests/integration/test_records.py
	tests/integration/test_admin.py tests/integration/test_cache.py
	tests/integration/test_quotas.py tests/integration/test_expired_keys.py
	tests/integration/test_admission.py tests/integration/test_forward_key.py
	tests/integration/test_operation_from.py
	-k "not store_is_down and not disabled_cache_still_replays_from_store")

port_busy() {
	(exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# A port P with P, P+1 and P+2 free on loopback.
free_ports() {
	local i p
	for ((i = 0; i < PORT_TRIES; i++)); do
		p=$((20000 + RANDOM % 30000))
		if ! port_busy "$p" && ! port_busy $((p + 1)) && ! port_busy $((p + 2)); then
			echo "$p"
			return 0
		fi
	done
	die "no three free loopback ports in $PORT_TRIES tries"
}

sh scripts/citus.sh build "$src"

base=$(mktemp -d /tmp/idemproxy-citus.XXXXXX)
# shellcheck disable=SC2317  # run by the EXIT trap
cleanup() {
	if [ "${CITUS_KEEP:-0}" = 1 ]; then
		say "kept the cluster in $base (scripts/citus.sh destroy $base)"
	else
		sh scripts/citus.sh destroy "$base" || true
		rm -rf -- "$base"
	fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

port=$(free_ports)
conninfo=$(sh scripts/citus.sh start "$base" "$port" | tail -n 1)
say "coordinator 127.0.0.1:$port, workers :$((port + 1)) :$((port + 2)) in $base"
say "conninfo: $conninfo"

conf=$base/migrate.conf
"$PY" - "$conninfo" "$conf" <<'EOF'
import sys
from tests.lib.proxy import BASE_ROUTES, base_settings, render_conf
with open(sys.argv[2], "w") as f:
    f.write(render_conf(base_settings(1, sys.argv[1]), BASE_ROUTES))
EOF
./idemproxy migrate -c "$conf"
./idemproxy migrate --distribute -c "$conf"
./idemproxy migrate status -c "$conf"

status=0
if [ -n "${CITUS_TESTS:-}" ]; then
	# shellcheck disable=SC2206  # the caller's words
	tests=($CITUS_TESTS)
else
	tests=("${DEFAULT_TESTS[@]}")
fi
say "tests: ${tests[*]}"
IDEMPROXY_TEST_DATABASE=$conninfo "$PY" -m pytest -p no:cacheprovider -q "${tests[@]}" ||
	status=$?
say "the store tests on Citus exited with $status"

chaos=0
"$PY" -m tests.citus.chaos --base "$base" --seconds "$SECONDS_BUDGET" || chaos=$?
say "the Citus chaos run exited with $chaos"
[ "$status" -ne 0 ] || status=$chaos

bench=0
if [ "${CITUS_BENCH:-1}" != 0 ]; then
	bash tests/citus/bench.sh "$base" "$conninfo" || bench=$?
	say "the Citus benchmark exited with $bench"
else
	say "CITUS_BENCH=0: the benchmark is left out"
fi
[ "$status" -ne 0 ] || status=$bench
exit "$status"
