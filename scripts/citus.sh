#!/bin/sh
# Citus from source, and a three-node Citus cluster on loopback.
#
#   scripts/citus.sh build SRC          build and install Citus from SRC
#   scripts/citus.sh start BASE PORT    create (first time) and start the cluster
#   scripts/citus.sh stop BASE          stop it (fast shutdown)
#   scripts/citus.sh destroy BASE       stop it and delete its data
#   scripts/citus.sh status BASE        exit 0 when all three nodes run, 3 if not
#   scripts/citus.sh kill-worker BASE N         SIGKILL worker N's postmaster (1 or 2)
#   scripts/citus.sh start-worker BASE N        start worker N again (crash recovery)
#   scripts/citus.sh restart-coordinator BASE   restart the coordinator (fast)
#
# build copies SRC (a Citus source tree, e.g. a checkout of v13.2.2) to
# build/citus-src, never touching SRC itself, installs the Debian packages
# it needs (scripts/deps.sh citus), fixes what PostgreSQL 15's headers make
# necessary and configures, compiles and installs it into the PostgreSQL of
# $PG_CONFIG. It does nothing when the citus.so installed there was built by
# this script from the same source (build/citus.stamp).
#
# The one fix: PostgreSQL 15.20's commands/dbcommands.h declares
# have_createdb_privilege(), which Citus 13.2's pg_version_compat.h also
# defines (static) for PostgreSQL 15; the definition is removed from the
# copy only when the installed headers declare the function.
#
# start makes BASE/coordinator (PORT), BASE/worker1 (PORT+1) and
# BASE/worker2 (PORT+2), each a data directory (data/), a log (log) and its
# unix socket, owned by user postgres; each listens on 127.0.0.1 with trust
# authentication, preloads citus, and has the database "idemproxy" with the
# citus extension. The coordinator knows itself (citus_set_coordinator_host)
# and both workers (citus_add_node). The last line start prints is the
# coordinator's libpq conninfo. start, stop and destroy are safe to repeat.
set -eu

PG_CONFIG=${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}
PG_USER=postgres
DB=idemproxy
START_WAIT=60
STOP_WAIT=60
ORPHAN_WAIT=30
SRC_COPY=build/citus-src
STAMP=build/citus.stamp
NODES="coordinator worker1 worker2"

say() { echo "citus: $*" >&2; }
die() { say "$*"; exit 1; }

usage() {
	echo "usage: $0 build SRC | start BASE PORT | stop|destroy|status|restart-coordinator BASE" >&2
	echo "       $0 kill-worker|start-worker BASE 1|2" >&2
	exit 2
}

# Run a command as the clusters' owner, from a directory it can enter.
as_pg() {
	(cd / && runuser -u "$PG_USER" -- "$@")
}

need_root() {
	[ "$(id -u)" -eq 0 ] || die "must run as root (installs into PostgreSQL; the nodes run as $PG_USER)"
}

# ---- build ----------------------------------------------------------------

# A digest of SRC's source files (not of objects a build left there).
source_digest() {
	(cd "$1" && find . -type f ! -path './.git/*' ! -name '*.o' ! -name '*.so' \
		! -name '*.bc' ! -name '*.d' ! -name config.log ! -name config.status -print |
		LC_ALL=C sort | xargs -d '\n' sha256sum) | sha256sum | cut -c1-64
}

do_build() {
	src=$1
	[ -d "$src" ] || die "no such directory: $src"
	if [ ! -f "$src/configure" ] || [ ! -f "$src/src/include/pg_version_compat.h" ]; then
		die "$src does not look like a Citus source tree (no configure, src/include/pg_version_compat.h)"
	fi
	need_root
	sh scripts/deps.sh citus
	pkglib=$("$PG_CONFIG" --pkglibdir)
	incserver=$("$PG_CONFIG" --includedir-server)
	digest=$(source_digest "$src")
	if [ -f "$STAMP" ] && [ -f "$pkglib/citus.so" ]; then
		want=$(cat "$STAMP")
		have="$digest $(sha256sum "$pkglib/citus.so" | cut -c1-64)"
		if [ "$want" = "$have" ]; then
			say "citus.so in $pkglib is already built from this source; not rebuilt"
			return 0
		fi
	fi
	say "copying $src to $SRC_COPY"
	rm -rf "$SRC_COPY"
	mkdir -p "$SRC_COPY"
	(cd "$src" && tar -cf - --exclude=./.git .) | (cd "$SRC_COPY" && tar -xf -)
	# Objects a build left in SRC: this build makes its own.
	find "$SRC_COPY" \( -name '*.o' -o -name '*.so' -o -name '*.bc' \) -type f -delete
	rm -f "$SRC_COPY/config.status" "$SRC_COPY/Makefile.global"
	compat=$SRC_COPY/src/include/pg_version_compat.h
	if grep -q 'have_createdb_privilege' "$incserver/commands/dbcommands.h" 2>/dev/null &&
		grep -q '^have_createdb_privilege(void)' "$compat"; then
		say "$incserver/commands/dbcommands.h declares have_createdb_privilege: removing Citus's own definition"
		perl -0pi -e 's/static inline bool\nhave_createdb_privilege\(void\)\n\{.*?\n\}\n//s' "$compat"
		! grep -q '^have_createdb_privilege(void)' "$compat" ||
			die "could not remove have_createdb_privilege from $compat"
	fi
	say "configuring (PG_CONFIG=$PG_CONFIG)"
	(cd "$SRC_COPY" && PG_CONFIG=$PG_CONFIG ./configure --without-libcurl >configure.out 2>&1) || {
		tail -n 30 "$SRC_COPY/configure.out" >&2
		die "configure failed ($SRC_COPY/configure.out)"
	}
	say "compiling ($SRC_COPY/make.out)"
	(cd "$SRC_COPY" && make -j2 >make.out 2>&1) || {
		grep -E 'error:|\*\*\*' "$SRC_COPY/make.out" | head -n 30 >&2
		die "make failed ($SRC_COPY/make.out)"
	}
	(cd "$SRC_COPY" && make install >install.out 2>&1) || {
		tail -n 30 "$SRC_COPY/install.out" >&2
		die "make install failed ($SRC_COPY/install.out)"
	}
	echo "$digest $(sha256sum "$pkglib/citus.so" | cut -c1-64)" >"$STAMP"
	say "installed $pkglib/citus.so ($(sed -n 's/^PACKAGE_VERSION=.//p' "$SRC_COPY/configure" | tr -d "'"))"
}

# ---- cluster --------------------------------------------------------------

PGBIN=$("$PG_CONFIG" --bindir 2>/dev/null || echo /usr/lib/postgresql/15/bin)

# node_port NAME: the node's port (BASE/port holds the coordinator's).
node_port() {
	p=$(cat "$base/port" 2>/dev/null) || die "$base holds no cluster (no $base/port)"
	case "$1" in
	coordinator) echo "$p" ;;
	worker1) echo $((p + 1)) ;;
	worker2) echo $((p + 2)) ;;
	esac
}

is_running() {
	[ -f "$base/$1/data/PG_VERSION" ] &&
		as_pg "$PGBIN/pg_ctl" -D "$base/$1/data" status >/dev/null 2>&1
}

# psql_node NAME SQL: run SQL as postgres in the node's idemproxy database.
psql_node() {
	as_pg env PGOPTIONS="-c client_min_messages=warning" "$PGBIN/psql" -X -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$(node_port "$1")" \
		-U "$PG_USER" -d "${3:-$DB}" -Atqc "$2"
}

start_node() {
	n=$1
	d=$base/$n
	if is_running "$n"; then
		return 0
	fi
	as_pg setsid "$PGBIN/pg_ctl" -D "$d/data" -l "$d/log" -w -t "$START_WAIT" start \
		>/dev/null </dev/null || {
		say "$n did not start; $d/log says:"
		tail -n 20 "$d/log" >&2 || true
		exit 1
	}
}

init_node() {
	n=$1
	d=$base/$n
	port=$(node_port "$n")
	install -d -m 0700 -o "$PG_USER" -g "$PG_USER" "$d"
	if [ ! -f "$d/data/PG_VERSION" ]; then
		as_pg "$PGBIN/initdb" -D "$d/data" -A trust -U "$PG_USER" -E UTF8 \
			--locale=C.UTF-8 >"$d/initdb.log" 2>&1 || {
			cat "$d/initdb.log" >&2
			die "initdb failed for $n"
		}
		cat >>"$d/data/postgresql.conf" <<EOF
# scripts/citus.sh: node $n of the cluster in $base
port = $port
listen_addresses = '127.0.0.1'
unix_socket_directories = '$d'
shared_preload_libraries = 'citus'
max_connections = 200
max_prepared_transactions = 200
citus.node_conninfo = 'sslmode=disable'
fsync = off
full_page_writes = off
EOF
	fi
}

do_start() {
	need_root
	cport=$1
	pkglib=$("$PG_CONFIG" --pkglibdir)
	[ -f "$pkglib/citus.so" ] || die "citus is not installed in $pkglib (run: $0 build SRC)"
	mkdir -p "$base"
	if [ -f "$base/port" ] && [ "$(cat "$base/port")" != "$cport" ]; then
		die "$base already holds the cluster on port $(cat "$base/port"), not $cport"
	fi
	echo "$cport" >"$base/port"
	chmod 0755 "$base"
	as_pg test -x "$base" || die "user $PG_USER cannot reach $base (check its parents' permissions)"
	for n in $NODES; do
		init_node "$n"
		start_node "$n"
		if [ -z "$(psql_node "$n" "SELECT 1 FROM pg_database WHERE datname = '$DB'" postgres)" ]; then
			as_pg "$PGBIN/createdb" -h 127.0.0.1 -p "$(node_port "$n")" -U "$PG_USER" "$DB"
		fi
		psql_node "$n" "CREATE EXTENSION IF NOT EXISTS citus" >/dev/null
	done
	psql_node coordinator "SELECT citus_set_coordinator_host('127.0.0.1', $cport)" >/dev/null
	for n in worker1 worker2; do
		wp=$(node_port "$n")
		if [ -z "$(psql_node coordinator \
			"SELECT 1 FROM pg_dist_node WHERE nodename = '127.0.0.1' AND nodeport = $wp")" ]; then
			psql_node coordinator "SELECT citus_add_node('127.0.0.1', $wp)" >/dev/null
		fi
	done
	echo "host=127.0.0.1 port=$cport dbname=$DB user=$PG_USER"
}

do_stop() {
	for n in worker2 worker1 coordinator; do
		if is_running "$n"; then
			as_pg "$PGBIN/pg_ctl" -D "$base/$n/data" -m fast -w -t "$STOP_WAIT" stop >/dev/null
		fi
	done
}

worker_name() {
	case "$1" in
	1 | 2) echo "worker$1" ;;
	*) die "no worker $1 (1 or 2)" ;;
	esac
}

# SIGKILL the worker's postmaster, as a crash would, then wait (bounded) for
# its backends to notice and exit, so that start-worker finds the data
# directory free; those still there after ORPHAN_WAIT seconds are killed.
do_kill_worker() {
	n=$(worker_name "$1")
	pidfile=$base/$n/data/postmaster.pid
	is_running "$n" || die "$n is not running"
	pid=$(sed -n 1p "$pidfile")
	kids=$(ps -o pid= --ppid "$pid" | tr -s ' \n' ' ')
	kill -KILL "$pid"
	i=0
	while :; do
		alive=""
		for k in $pid $kids; do
			kill -0 "$k" 2>/dev/null && alive="$alive $k"
		done
		[ -n "$alive" ] || break
		i=$((i + 1))
		if [ "$i" -ge $((ORPHAN_WAIT * 10)) ]; then
			# shellcheck disable=SC2086  # a list of pids
			kill -KILL $alive 2>/dev/null || true
		fi
		[ "$i" -lt $((ORPHAN_WAIT * 10 + 50)) ] || die "$n's processes did not exit:$alive"
		sleep 0.1
	done
	say "$n (postmaster $pid) killed"
}

do_start_worker() {
	n=$(worker_name "$1")
	start_node "$n"
	say "$n running"
}

do_restart_coordinator() {
	as_pg setsid "$PGBIN/pg_ctl" -D "$base/coordinator/data" -l "$base/coordinator/log" \
		-m fast -w -t "$START_WAIT" restart >/dev/null </dev/null || {
		tail -n 20 "$base/coordinator/log" >&2 || true
		die "the coordinator did not restart"
	}
	say "coordinator restarted"
}

[ $# -ge 2 ] || usage
cmd=$1
case "$cmd" in
build)
	[ $# -eq 2 ] || usage
	do_build "$2"
	exit 0
	;;
start)
	[ $# -eq 3 ] || usage
	case "$3" in '' | *[!0-9]*) die "bad port: $3" ;; esac
	;;
kill-worker | start-worker) [ $# -eq 3 ] || usage ;;
stop | destroy | status | restart-coordinator) [ $# -eq 2 ] || usage ;;
*) usage ;;
esac
base=$(realpath -m -- "$2")

case "$cmd" in
start) do_start "$3" ;;
stop) [ ! -f "$base/port" ] || do_stop ;;
destroy)
	if [ -f "$base/port" ]; then
		do_stop
		rm -rf -- "$base/coordinator" "$base/worker1" "$base/worker2" "$base/port"
		rmdir -- "$base" 2>/dev/null || true
	fi
	;;
status)
	for n in $NODES; do
		is_running "$n" || { say "$n is not running ($base)"; exit 3; }
	done
	echo "host=127.0.0.1 port=$(node_port coordinator) dbname=$DB user=$PG_USER"
	;;
kill-worker) do_kill_worker "$3" ;;
start-worker) do_start_worker "$3" ;;
restart-coordinator) do_restart_coordinator ;;
esac
