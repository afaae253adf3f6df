#!/usr/bin/env bash
# shellcheck disable=SC2317  # stop_pid and cleanup run from traps
# `make run`: idemproxy in front of the demo upstream, ready for curl.
#
# Starts a private PostgreSQL cluster under .run/pg when
# idemproxy.conf.example configures no database (scripts/pg.sh moves it to
# /var/lib/idemproxy-dev/ when user postgres cannot reach .run/pg, e.g. in
# a clone under a 0700 home), applies the migrations,
# starts scripts/demo-upstream.py on 127.0.0.1:3000 and ./idemproxy on
# 127.0.0.1:8080, prints what to try, and waits. Ctrl-C or SIGTERM stops
# all three.
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$(pwd -P)

CONF=${IDEMPROXY_CONF:-idemproxy.conf.example}
BIN=${IDEMPROXY_BIN:-./idemproxy}
PY=/usr/bin/python3
RUNDIR=$ROOT/.run
PGDIR=$RUNDIR/pg
PGPORT_DEFAULT=54329
UPSTREAM_PORT=3000
PROXY_ADDR=127.0.0.1
PROXY_PORT=8080
ADMIN_PORT=9901
READY_WAIT=10     # seconds to wait for each listener
STOP_WAIT=15      # seconds to wait for a process to exit after SIGTERM

upstream_pid=""
proxy_pid=""
started_pg=0

say() { printf 'run: %s\n' "$*" >&2; }
die() { say "$*"; exit 1; }

. scripts/lib.sh   # after the cd above: paths are from the repository root

cleanup() {
	trap - EXIT INT TERM
	set +e
	say "stopping"
	stop_pid "$proxy_pid"
	stop_pid "$upstream_pid"
	if [ "$started_pg" = 1 ]; then
		bash scripts/pg.sh stop "$PGDIR" "$PGPORT" && say "PostgreSQL stopped"
	fi
}
trap cleanup EXIT
trap 'exit 0' INT
trap 'exit 0' TERM

[ -x "$BIN" ] || die "$BIN not found: build it with make"
[ -f "$CONF" ] || die "$CONF not found"

if port_busy "$UPSTREAM_PORT"; then
	die "port 127.0.0.1:$UPSTREAM_PORT is busy: stop whatever listens there (the demo upstream needs it)"
fi
for port in "$PROXY_PORT" "$ADMIN_PORT"; do
	if port_busy "$port"; then
		die "port $PROXY_ADDR:$port is busy: stop whatever listens there (idemproxy needs it)"
	fi
done

"$BIN" -t -c "$CONF" || die "$CONF does not check out"

if grep -Eq '^[[:space:]]*database[[:space:]]' "$CONF"; then
	say "using the database configured in $CONF"
else
	PGPORT=$PGPORT_DEFAULT
	mkdir -p "$RUNDIR"
	conninfo=$(bash scripts/pg.sh start "$PGDIR" "$PGPORT") || die "could not start PostgreSQL under $PGDIR"
	started_pg=1
	# pg.sh reports the port a cluster left running from before uses, and
	# the socket's real directory (not $PGDIR when postgres cannot reach it).
	PGPORT=$(sed -n 's/.* port=\([0-9]*\).*/\1/p' <<<"$conninfo")
	PGHOST=$(sed -n 's/^host=\([^ ]*\) .*/\1/p' <<<"$conninfo")
	if [ -z "$PGPORT" ] || [ -z "$PGHOST" ]; then
		die "pg.sh printed no host and port: $conninfo"
	fi
	export PGHOST PGPORT PGDATABASE=idemproxy PGUSER=postgres
	say "PostgreSQL: $conninfo"
fi

"$BIN" migrate -c "$CONF" || die "migrate failed"

"$PY" scripts/demo-upstream.py "$UPSTREAM_PORT" &
upstream_pid=$!
wait_listening "$upstream_pid" "$UPSTREAM_PORT" "the demo upstream"

"$BIN" -c "$CONF" &
proxy_pid=$!
wait_listening "$proxy_pid" "$PROXY_PORT" "idemproxy"

P=http://$PROXY_ADDR:$PROXY_PORT
# The records CLI from another terminal: the conf's database, else libpq's
# PG* environment, which is the private cluster's only in this process.
if [ "$started_pg" = 1 ]; then
	RECORDS_HOW="in the private cluster's environment:
  cd $ROOT
  export PGHOST=$PGHOST PGPORT=$PGPORT PGDATABASE=$PGDATABASE PGUSER=$PGUSER"
else
	RECORDS_HOW="with the database $CONF configures:
  cd $ROOT"
fi
cat <<MSG

idemproxy listens on $P, in front of the demo upstream on http://127.0.0.1:$UPSTREAM_PORT.
Try, from another terminal:

  # create a course (201, Location)
  curl -i -X POST $P/api/courses -H 'Idempotency-Key: demo-1' -H 'X-Actor-Id: alice' \\
       -H 'Content-Type: application/json' -d '{"title": "SQL basics", "topic": "sql", "lessons": 3}'

  # the same request again: the stored response, with Idempotent-Replayed: true
  curl -i -X POST $P/api/courses -H 'Idempotency-Key: demo-1' -H 'X-Actor-Id: alice' \\
       -H 'Content-Type: application/json' -d '{"title": "SQL basics", "topic": "sql", "lessons": 3}'

  # the same key with another title: 422 idempotency-conflict
  curl -i -X POST $P/api/courses -H 'Idempotency-Key: demo-1' -H 'X-Actor-Id: alice' \\
       -H 'Content-Type: application/json' -d '{"title": "SQL advanced", "topic": "sql", "lessons": 3}'

  # no key: 400 idempotency-key-missing
  curl -i -X POST $P/api/courses -H 'X-Actor-Id: alice' \\
       -H 'Content-Type: application/json' -d '{"title": "SQL basics", "topic": "sql", "lessons": 3}'

  # reads pass through: one course, created once
  curl -i $P/api/courses

  # the admin listener: readiness, Prometheus metrics, records that need an operator
  curl -i http://$PROXY_ADDR:$ADMIN_PORT/readyz
  curl -s http://$PROXY_ADDR:$ADMIN_PORT/metrics | grep requests_total
  curl -s http://$PROXY_ADDR:$ADMIN_PORT/records

  # the operator page, in a browser on this machine (leave the token empty:
  # this configuration has no admin_token)
  http://$PROXY_ADDR:$ADMIN_PORT/ui

  # the records CLI: the records that need an operator, then the one above
  # (its actor in the stored form, "h:" and the X-Actor-Id value), run $RECORDS_HOW
  $BIN records -c $CONF list
  $BIN records -c $CONF show h:alice course.create demo-1

Press Ctrl-C to stop.
MSG

# Wait for either process; if one exits by itself, stop the other.
set +e
wait -n "$proxy_pid" "$upstream_pid"
rc=$?
set -e
if ! kill -0 "$proxy_pid" 2>/dev/null; then
	proxy_pid=""
	say "idemproxy exited (status $rc)"
else
	upstream_pid=""
	say "the demo upstream exited (status $rc)"
fi
# Ctrl-C reaches the whole process group: a clean stop is a success.
[ "$rc" -eq 0 ] && exit 0
exit 1
