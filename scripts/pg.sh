#!/usr/bin/env bash
# A private PostgreSQL cluster for development and demos.
#
#   scripts/pg.sh start  DIR PORT   create (first time) and start the cluster
#   scripts/pg.sh stop   DIR PORT   stop it (fast shutdown)
#   scripts/pg.sh status DIR PORT   exit 0 when it runs, 3 when it does not
#
# DIR holds the data directory (DIR/data), the log (DIR/log) and the unix
# socket; the server listens on no TCP address, so PORT only names the
# socket file. start creates the database "idemproxy" if missing and prints
# the libpq conninfo on stdout. Both start and stop are safe to repeat.
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
set -euo pipefail

PGBIN=${PGBIN:-/usr/lib/postgresql/15/bin}
PG_USER=postgres
START_WAIT=30
SOCKET_PATH_MAX=107

usage() {
	echo "usage: $0 start|stop|status DIR PORT" >&2
	exit 2
}

[ $# -eq 3 ] || usage
cmd=$1
port=$3
case "$port" in
'' | *[!0-9]*) echo "pg.sh: bad port: $port" >&2; exit 2 ;;
esac

# Run a command as the cluster's owner, from a directory it can enter.
as_pg() {
	(cd / && runuser -u "$PG_USER" -- "$@")
}

[ "$cmd" != start ] || mkdir -p "$2"
if [ ! -d "$2" ]; then
	[ "$cmd" = status ] && echo "pg.sh: not running ($2)" >&2 && exit 3
	exit 0
fi
dir=$(cd "$2" && pwd -P)
data=$dir/data
log=$dir/log

conninfo() {
	echo "host=$dir port=$1 dbname=idemproxy user=$PG_USER"
}

# The port of the running server (4th line of postmaster.pid), else $port.
running_port() {
	local p
	p=$(sed -n 4p "$data/postmaster.pid" 2>/dev/null || true)
	echo "${p:-$port}"
}

is_running() {
	[ -f "$data/PG_VERSION" ] && as_pg "$PGBIN/pg_ctl" -D "$data" status >/dev/null 2>&1
}

do_start() {
	local sock=$dir/.s.PGSQL.$port p
	if [ ${#sock} -gt $SOCKET_PATH_MAX ]; then
		echo "pg.sh: socket path too long (${#sock} > $SOCKET_PATH_MAX bytes): $sock" >&2
		echo "pg.sh: use a shorter DIR" >&2
		exit 1
	fi
	if [ "$(id -u)" -ne 0 ]; then
		echo "pg.sh: must run as root (the cluster runs as user $PG_USER)" >&2
		exit 1
	fi
	chown "$PG_USER:" "$dir"
	chmod 0700 "$dir"
	if ! as_pg test -w "$dir"; then
		echo "pg.sh: user $PG_USER cannot reach $dir (check the parent directories' permissions)" >&2
		exit 1
	fi
	if [ ! -f "$data/PG_VERSION" ]; then
		as_pg "$PGBIN/initdb" -D "$data" -A trust -U "$PG_USER" -E UTF8 \
			--locale=C.UTF-8 >"$log.initdb" 2>&1 || {
			echo "pg.sh: initdb failed:" >&2
			cat "$log.initdb" >&2
			exit 1
		}
	fi
	if ! is_running; then
		# setsid: a Ctrl-C aimed at the caller must not stop the cluster
		# behind its back; the caller stops it with "stop".
		as_pg setsid "$PGBIN/pg_ctl" -D "$data" -l "$log" -w -t "$START_WAIT" \
			-o "-c listen_addresses='' -k '$dir' -p $port" start >/dev/null </dev/null || {
			echo "pg.sh: the server did not start; $log says:" >&2
			tail -n 20 "$log" >&2 || true
			exit 1
		}
	fi
	p=$(running_port)
	if [ -z "$(as_pg "$PGBIN/psql" -h "$dir" -p "$p" -U "$PG_USER" -d postgres -Atqc \
		"SELECT 1 FROM pg_database WHERE datname = 'idemproxy'")" ]; then
		as_pg "$PGBIN/createdb" -h "$dir" -p "$p" -U "$PG_USER" idemproxy
	fi
	conninfo "$p"
}

do_stop() {
	if is_running; then
		as_pg "$PGBIN/pg_ctl" -D "$data" -m fast -w -t "$START_WAIT" stop >/dev/null
	fi
}

case "$cmd" in
start) do_start ;;
stop) do_stop ;;
status)
	if is_running; then
		conninfo "$(running_port)"
	else
		echo "pg.sh: not running ($dir)" >&2
		exit 3
	fi
	;;
*) usage ;;
esac
