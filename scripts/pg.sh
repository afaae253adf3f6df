#!/usr/bin/env bash
# A private PostgreSQL cluster for development and demos.
#
#   scripts/pg.sh start   DIR PORT   create (first time) and start the cluster
#   scripts/pg.sh stop    DIR PORT   stop it (fast shutdown)
#   scripts/pg.sh status  DIR PORT   exit 0 when it runs, 3 when it does not
#   scripts/pg.sh destroy DIR PORT   stop it and delete its data
#
# DIR holds the data directory (DIR/data), the log (DIR/log) and the unix
# socket; the server listens on no TCP address, so PORT only names the
# socket file. start creates the database "idemproxy" if missing and prints
# the libpq conninfo on stdout. start, stop and destroy are safe to repeat.
#
# The cluster runs as user postgres, which must be able to reach DIR. When
# it cannot (DIR is inside a private directory such as a 0700 home), the
# cluster lives in a substitute directory instead, named after DIR's
# absolute path: SUBST_ROOT/<the first 12 hex digits of its sha256>, made
# 0700 for postgres. Every command resolves DIR the same way, so the next
# start of the same DIR finds the same cluster. The printed conninfo names
# the directory the socket is really in: callers take host= from it, never
# DIR. The permissions of DIR's parents are left alone.
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
set -euo pipefail

PGBIN=${PGBIN:-/usr/lib/postgresql/15/bin}
PG_USER=postgres
START_WAIT=30
SOCKET_PATH_MAX=107
SUBST_ROOT=/var/lib/idemproxy-dev
SUBST_HEX=12
ORIGIN=origin   # in a substitute: the DIR it stands for

usage() {
	echo "usage: $0 start|stop|status|destroy DIR PORT" >&2
	exit 2
}

[ $# -eq 3 ] || usage
cmd=$1
port=$3
case "$cmd" in start | stop | status | destroy) ;; *) usage ;; esac
case "$port" in
'' | *[!0-9]*) echo "pg.sh: bad port: $port" >&2; exit 2 ;;
esac
[ -n "$2" ] || usage

# Run a command as the cluster's owner, from a directory it can enter.
as_pg() {
	(cd / && runuser -u "$PG_USER" -- "$@")
}

if [ "$cmd" = start ] && [ "$(id -u)" -ne 0 ]; then
	echo "pg.sh: must run as root (the cluster runs as user $PG_USER)" >&2
	exit 1
fi

# DIR, absolute, symbolic links resolved (it need not exist yet).
req=$(realpath -m -- "$2")
subst=$SUBST_ROOT/$(printf '%s' "$req" | sha256sum | cut -c1-"$SUBST_HEX")

# 0 when user postgres can reach DIR: search its parent (and so every
# directory above). DIR itself becomes postgres's when the cluster starts.
reachable() {
	as_pg test -x "$(dirname "$req")" 2>/dev/null
}

# Set dir to the directory the cluster lives in. start creates it (and
# DIR's parents, as before); the others only look.
if [ "$cmd" = start ]; then
	mkdir -p "$(dirname "$req")"
fi
if reachable; then
	dir=$req
	[ "$cmd" != start ] || mkdir -p "$dir"
else
	dir=$subst
	if [ "$cmd" = start ]; then
		if [ ! -d "$SUBST_ROOT" ]; then
			install -d -m 0755 -o root -g root "$SUBST_ROOT"
		fi
		if ! as_pg test -x "$SUBST_ROOT"; then
			echo "pg.sh: user $PG_USER cannot reach $req, nor $SUBST_ROOT" >&2
			exit 1
		fi
		if [ ! -d "$dir" ]; then
			install -d -m 0700 -o "$PG_USER" -g "$PG_USER" "$dir"
		fi
		if [ -f "$dir/$ORIGIN" ] && [ "$(cat "$dir/$ORIGIN")" != "$req" ]; then
			echo "pg.sh: $dir already holds the cluster of $(cat "$dir/$ORIGIN"), not $req" >&2
			exit 1
		fi
		printf '%s\n' "$req" >"$dir/$ORIGIN"
		echo "pg.sh: user $PG_USER cannot reach $req; the cluster lives in $dir" >&2
	fi
fi
if [ ! -d "$dir" ]; then
	[ "$cmd" = status ] && echo "pg.sh: not running ($req)" >&2 && exit 3
	exit 0
fi
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

# Stop, then delete what start made: a substitute whole; in DIR itself only
# the data directory and the logs (DIR goes when nothing else is left).
do_destroy() {
	do_stop
	if [ "$dir" = "$subst" ]; then
		rm -rf -- "$dir"
	else
		rm -rf -- "$data" "$log" "$log.initdb"
		rmdir -- "$dir" 2>/dev/null || true
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
destroy) do_destroy ;;
esac
