#!/usr/bin/env bash
# shellcheck disable=SC2317  # cleanup runs from a trap
# The measurements behind docs/scale-out.md. Not part of make test or CI.
#
#   sh scripts/scale.sh [throughput] [table] [-r ROWS...] [-p PARTITIONS]
#
#   throughput  a private PostgreSQL (default durability), nginx as the
#               upstream (scripts/bench/upstream.nginx.conf.in) and idemproxy;
#               wrk drives owner POSTs (a new key each, scripts/bench/owner.lua)
#               for SCALE_SECONDS per run: the plain table at 1 and 64
#               connections, then the table hash-partitioned into 16 and 256
#               (idemproxy migrate --hash-partitions) at 64; then the plain
#               and both partitioned tables again at 64 with 200,000 records
#               loaded first (scripts/scale/load.sql). For each run: the
#               owners completed, the CPU time of every PostgreSQL process
#               (utime + stime from /proc, per pid, before and after), and so
#               claims + finishes per PostgreSQL CPU-second; also commits, WAL
#               bytes and idemproxy's own CPU per owner; and what planning
#               and running one batched statement (the mark-unknown, 1 and
#               16 rows) costs on that table, unnamed and prepared.
#   table       for each ROWS (default 1000000 2000000): a fresh table filled
#               by scripts/scale/load.sql (records of the sizes real ones have,
#               a tenth of them expired), then its heap, TOAST and index
#               sizes, each B-tree's depth and fanout (pgstattuple's
#               pgstatindex), VACUUM times (the first, which scans every
#               page; after the sweeper's deletes; with nothing to do), the
#               sweeper's delete of the expired tenth in batches of 500 (its
#               statement, one transaction per batch, pgbench -t), and the
#               conversion to PARTITIONS (default 16) hash partitions with
#               its time under the lock, the partitions' sizes and the VACUUM
#               of one partition.
#
# Writes bench-out/scale.csv (section,layout,rows,connections,metric,value,unit)
# and replaces the rows of the sections it ran in docs/bench/scale.csv
# (SCALE_NO_DOCS=1 leaves docs/bench/ alone). With the defaults on 2 CPUs the
# throughput phase takes about 2 minutes and the table phase about 50 s per
# million records (about 2.5 minutes for both sizes).
# Environment: SCALE_SECONDS (per wrk run, default 10), IDEMPROXY_BIN
# (default ./idemproxy), PGBIN. Must run as root (the cluster runs as user
# postgres), from anywhere.
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$(pwd -P)
BENCH=$ROOT/scripts/bench
HERE=$ROOT/scripts/scale

BIN=${IDEMPROXY_BIN:-./idemproxy}
PGBIN=${PGBIN:-/usr/lib/postgresql/15/bin}
NGINX=/usr/sbin/nginx
OUT=$ROOT/bench-out
DOCS=$ROOT/docs/bench
SECONDS_PER=${SCALE_SECONDS:-10}
NO_DOCS=${SCALE_NO_DOCS:-0}

ROWS="1000000 2000000"
PARTITIONS=16
# Throughput runs, layout:connections:records loaded (scale/load.sql) before.
THROUGHPUT_RUNS="plain:1:0 plain:64:0 16:64:0 256:64:0 plain:64:200000 16:64:200000 256:64:200000"
WORKERS=2               # idemproxy workers
WRK_THREADS=2
WARMUP_SECONDS=2
SWEEP_BATCH=500         # the sweeper's batch (proxy/sweeper.c)
SWEEP_LOCK_KEY=7594869612733442170
# shellcheck disable=SC2034  # read by free_port (scripts/lib.sh)
PORT_TRIES=200
READY_WAIT=10
# shellcheck disable=SC2034  # read by stop_pid (scripts/lib.sh)
STOP_WAIT=15
SQL_TIMEOUT=900         # seconds for one psql call (a load, a VACUUM)

say() { printf 'scale: %s\n' "$*" >&2; }
die() { say "$*"; exit 1; }
usage() {
	sed -n '3,/^# postgres), from anywhere/p' "$0" | sed 's/^# \{0,1\}//' >&2
	exit 2
}

phases=""
while [ $# -gt 0 ]; do
	case "$1" in
	throughput | table) phases="$phases $1"; shift ;;
	-r | --rows)
		shift
		ROWS=""
		while [ $# -gt 0 ] && [[ $1 =~ ^[0-9]+$ ]]; do ROWS="$ROWS $1"; shift; done
		[ -n "$ROWS" ] || usage
		;;
	-p | --partitions) [ $# -ge 2 ] || usage; PARTITIONS=$2; shift 2 ;;
	-h | --help) usage ;;
	*) usage ;;
	esac
done
[ -n "$phases" ] || phases="throughput table"
if ! [[ $PARTITIONS =~ ^[0-9]+$ ]] || [ "$PARTITIONS" -lt 2 ] || [ "$PARTITIONS" -gt 1024 ]; then
	die "PARTITIONS must be a number from 2 to 1024"
fi
if ! [[ $SECONDS_PER =~ ^[0-9]+$ ]] || [ "$SECONDS_PER" -lt 1 ]; then
	die "SCALE_SECONDS must be a number of seconds"
fi
[ "$(id -u)" -eq 0 ] || die "must run as root (the PostgreSQL cluster runs as user postgres)"
[ -x "$BIN" ] || die "$BIN not found: build it with make"
for tool in wrk "$NGINX" "$PGBIN/psql" "$PGBIN/pgbench" timeout pgrep getconf; do
	command -v "$tool" >/dev/null || die "$tool not found (make deps installs it)"
done

# shellcheck disable=SC1091  # not followed: checked on its own
. scripts/lib.sh

TMP=""
PGDIR=""
PGSOCK=""
PGPORT=""
started_pg=0
upstream_pid=""
proxy_pid=""

cleanup() {
	trap - EXIT INT TERM
	set +e
	stop_pid "$proxy_pid"
	stop_pid "$upstream_pid"
	if [ "$started_pg" = 1 ]; then
		bash "$ROOT/scripts/pg.sh" stop "$PGDIR" "$PGPORT" >/dev/null
	fi
	[ -z "$TMP" ] || rm -rf "$TMP"
}
trap cleanup EXIT
trap 'say "interrupted"; exit 130' INT
trap 'say "terminated"; exit 143' TERM

psql_on() {
	local db=$1
	shift
	timeout --foreground -k 5 $SQL_TIMEOUT "$PGBIN/psql" -h "$PGSOCK" -p "$PGPORT" -U postgres \
		-d "$db" -X -A -t -q -v ON_ERROR_STOP=1 "$@"
}
psql_q() { psql_on idemproxy "$@"; }

CSV=""
# One measured figure: section layout rows connections metric value unit.
emit() {
	printf '%s,%s,%s,%s,%s,%s,%s\n' "$@" >>"$CSV"
	say "$1 $2 rows=$3 c=$4: $5 = $6 $7"
}

now_ns() { date +%s%N; }
# Seconds between two now_ns readings, 3 decimals.
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", (b - a) / 1e9 }'; }

CLK_TCK=$(getconf CLK_TCK)

# "PID TICKS" for the postmaster and every process it started (backends,
# walwriter, checkpointer, autovacuum, ...): utime + stime of all threads.
pg_ticks() {
	local pm p stat f
	pm=$(head -n 1 "$PGSOCK/data/postmaster.pid")
	for p in "$pm" $(pgrep -P "$pm" || true); do
		stat=$(cat "/proc/$p/stat" 2>/dev/null) || continue
		read -ra f <<<"${stat##*) }"
		echo "$p $((f[11] + f[12]))"
	done
}

# CPU seconds PostgreSQL used between snapshots $1 and $2 (pg_ticks
# output): per pid, after minus before (a process that started in between
# counts whole; one that ended in between is lost, which leaves out the
# short psql sessions of the measurements themselves).
pg_cpu_between() {
	awk -v hz="$CLK_TCK" 'NR == FNR { b[$1] = $2; next } { t += $2 - ($1 in b ? b[$1] : 0) }
		END { printf "%.3f", t / hz }' "$1" "$2"
}

proc_ticks() {
	local stat f
	stat=$(cat "/proc/$1/stat" 2>/dev/null) || { echo 0; return; }
	read -ra f <<<"${stat##*) }"
	echo $((f[11] + f[12]))
}

# ---- start ----

mkdir -p "$OUT"
TMP=$(mktemp -d /tmp/idemproxy-scale.XXXXXX)
chmod 0755 "$TMP"
PGDIR=$TMP/pg
CSV=$OUT/scale.csv
echo "section,layout,rows,connections,metric,value,unit" >"$CSV"

free_port && PGPORT=$FREE_PORT
start_pg
[ -r "$PGSOCK/data/postmaster.pid" ] || die "no postmaster.pid under $PGSOCK/data"

emit meta - 0 0 cpus "$(nproc)" count
emit meta - 0 0 postgres "$(psql_q -c 'SHOW server_version' | cut -d' ' -f1)" version
emit meta - 0 0 shared_buffers "$(psql_q -c "SELECT setting::bigint * 8192 FROM pg_settings WHERE name = 'shared_buffers'")" bytes
emit meta - 0 0 date "$(date -u +%Y-%m-%d)" utc

MIGRATE_CONF=$TMP/migrate.conf
printf 'listen 127.0.0.1:1\nupstream http://127.0.0.1:1\ndatabase "%s"\n' "$conninfo" >"$MIGRATE_CONF"

# A new empty database "idemproxy", migrated; with $1 (a number) hash-partitioned.
fresh_db() {
	psql_on postgres -c "DROP DATABASE IF EXISTS idemproxy WITH (FORCE)" -c "CREATE DATABASE idemproxy"
	if [ "$1" = plain ]; then
		"$BIN" migrate -c "$MIGRATE_CONF" >"$TMP/migrate.log" 2>&1
	else
		"$BIN" migrate --hash-partitions "$1" -c "$MIGRATE_CONF" >"$TMP/migrate.log" 2>&1
	fi || {
		cat "$TMP/migrate.log" >&2
		die "idemproxy migrate failed"
	}
}

# ---- throughput: claims and finishes per PostgreSQL CPU-second ----

# Emit the planning and execution time (ms, the third of three runs) of
# the mark-unknown statement of proxy/store_sql.c for a batch of 1 and of 16
# rows, as an unnamed statement (a custom plan) and prepared (a generic
# plan), on layout $1 holding $2 loaded records: what a statement that
# joins VALUES rows to the table costs as the number of partitions grows.
STMT_HEAD="UPDATE idempotency_records r SET state = 'unknown' FROM (VALUES"
STMT_TAIL=") v (ord, actor, operation, idem_key, generation, notify)
 WHERE r.actor = v.actor AND r.operation = v.operation AND r.idem_key = v.idem_key
 AND r.generation = v.generation AND r.state IN ('in_progress', 'unknown') RETURNING v.ord"
# Rows updated and of them HOT-updated in the record table (all partitions).
TUPLES_SQL="SELECT coalesce(sum(n_tup_upd), 0), coalesce(sum(n_tup_hot_upd), 0)
 FROM pg_stat_user_tables WHERE relname ~ '^idempotency_records(_p[0-9]+)?$'"
plan_costs() {
	local layout=$1 rows=$2 n i vals params types args kind plan exec
	for n in 1 16; do
		vals="" params="" types="" args=""
		for ((i = 1; i <= n; i++)); do
			vals="$vals${vals:+, }($i, 'h:plan', 'bench.create', 'plan-$i', 1::bigint, false)"
			params="$params${params:+, }(\$$((3 * i - 2)), 'h:plan', 'bench.create', \$$((3 * i - 1)), \$$((3 * i)), false)"
			types="$types${types:+, }int, text, bigint"
			args="$args${args:+, }$i, 'plan-$i', 1"
		done
		{
			cat <<-'EOF'
				CREATE FUNCTION pg_temp.plan_ms(q text) RETURNS text LANGUAGE plpgsql AS $f$
				DECLARE j json;
				BEGIN
					FOR i IN 1..3 LOOP
						EXECUTE 'EXPLAIN (ANALYZE, FORMAT JSON) ' || q INTO j;
					END LOOP;
					RETURN (j->0->>'Planning Time') || '|' || (j->0->>'Execution Time');
				END $f$;
			EOF
			printf "SELECT 'custom|' || pg_temp.plan_ms(\$q\$%s %s %s\$q\$);\n" "$STMT_HEAD" "$vals" "$STMT_TAIL"
			echo "SET plan_cache_mode = force_generic_plan;"
			printf "PREPARE mark (%s) AS %s %s %s;\n" "$types" "$STMT_HEAD" "$params" "$STMT_TAIL"
			printf "SELECT 'generic|' || pg_temp.plan_ms(\$q\$EXECUTE mark(%s)\$q\$);\n" "$args"
		} >"$TMP/plan.sql"
		psql_q -f "$TMP/plan.sql" >"$TMP/plan.txt"
		while IFS='|' read -r kind plan exec; do
			emit throughput "$layout" "$rows" 0 "plan_ms:$kind:batch$n" "$plan" ms
			emit throughput "$layout" "$rows" 0 "exec_ms:$kind:batch$n" "$exec" ms
		done <"$TMP/plan.txt"
	done
}

throughput() {
	local spec layout c preload prefix owners pg_s wall t0 t1 commits0 commits1 lsn0 lsn1
	local upd hot all i
	local px0 px1 wal
	free_port && local up_port=$FREE_PORT
	free_port && local proxy_port=$FREE_PORT
	free_port && local sink_port=$FREE_PORT
	mkdir -p "$TMP/upstream/files"
	sed -e "s|@PREFIX@|$TMP/upstream|g" -e "s|@PORT@|$up_port|g" -e "s|@FILES@|$TMP/upstream/files|g" \
		-e "s|@SINK_PORT@|$sink_port|g" "$BENCH/upstream.nginx.conf.in" >"$TMP/upstream/nginx.conf"
	setsid "$NGINX" -p "$TMP/upstream" -c "$TMP/upstream/nginx.conf" -e "$TMP/upstream/error.log" \
		>"$TMP/upstream/stderr.log" 2>&1 &
	upstream_pid=$!
	wait_listening "$upstream_pid" "$up_port" "nginx (upstream)" "$TMP/upstream/stderr.log"
	cat >"$TMP/idemproxy.conf" <<-EOF
		listen 127.0.0.1:$proxy_port
		upstream http://127.0.0.1:$up_port
		database "$conninfo"
		workers $WORKERS
		actor header X-Actor-Id
		route bench.create {
		    match POST /api/items
		    fingerprint json
		}
	EOF
	for spec in $THROUGHPUT_RUNS; do
		IFS=: read -r layout c preload <<<"$spec"
		fresh_db "$layout"
		if [ "$preload" -gt 0 ]; then
			say "loading $preload records"
			psql_q -v n="$preload" -f "$HERE/load.sql" >/dev/null
			psql_q -c "VACUUM ANALYZE idempotency_records"
		fi
		setsid "$BIN" -c "$TMP/idemproxy.conf" >"$TMP/proxy.log" 2>&1 &
		proxy_pid=$!
		wait_listening "$proxy_pid" "$proxy_port" idemproxy "$TMP/proxy.log"
		prefix=s$RANDOM$RANDOM-$layout-$c
		wrk -t"$((c < WRK_THREADS ? c : WRK_THREADS))" -c"$c" -d"${WARMUP_SECONDS}s" \
			-s "$BENCH/owner.lua" "http://127.0.0.1:$proxy_port/api/items" -- "w$prefix" >/dev/null
		psql_q -c CHECKPOINT
		commits0=$(psql_q -c "SELECT xact_commit FROM pg_stat_database WHERE datname = 'idemproxy'")
		lsn0=$(psql_q -c "SELECT pg_current_wal_lsn()")
		pg_ticks >"$TMP/ticks.before"
		px0=$(proc_ticks "$proxy_pid")
		t0=$(now_ns)
		say "wrk owner POSTs, table $layout with $preload records, $c connection(s), ${SECONDS_PER}s"
		wrk -t"$((c < WRK_THREADS ? c : WRK_THREADS))" -c"$c" -d"${SECONDS_PER}s" --timeout 10s \
			-s "$BENCH/owner.lua" "http://127.0.0.1:$proxy_port/api/items" -- "$prefix" \
			>"$TMP/wrk.txt"
		t1=$(now_ns)
		pg_ticks >"$TMP/ticks.after"
		px1=$(proc_ticks "$proxy_pid")
		commits1=$(psql_q -c "SELECT xact_commit FROM pg_stat_database WHERE datname = 'idemproxy'")
		lsn1=$(psql_q -c "SELECT pg_current_wal_lsn()")
		wal=$(psql_q -c "SELECT pg_wal_lsn_diff('$lsn1', '$lsn0')")
		owners=$(psql_q -c "SELECT count(*) FROM idempotency_records
			WHERE idem_key LIKE '$prefix-%' AND state = 'completed'")
		pg_s=$(pg_cpu_between "$TMP/ticks.before" "$TMP/ticks.after")
		wall=$(secs "$t0" "$t1")
		[ "$owners" -gt 0 ] || { cat "$TMP/wrk.txt" >&2; die "no owner completed"; }
		local l=$layout
		[ "$l" = plain ] || l=hash$layout
		emit throughput "$l" "$preload" "$c" owners_per_s "$(awk -v n="$owners" -v w="$wall" 'BEGIN { printf "%.0f", n / w }')" 1/s
		emit throughput "$l" "$preload" "$c" pg_cpu_cores "$(awk -v p="$pg_s" -v w="$wall" 'BEGIN { printf "%.3f", p / w }')" cores
		emit throughput "$l" "$preload" "$c" claims_finishes_per_pg_cpu_s "$(awk -v n="$owners" -v p="$pg_s" 'BEGIN { printf "%.0f", 2 * n / p }')" 1/cpu-s
		emit throughput "$l" "$preload" "$c" pg_cpu_us_per_owner "$(awk -v n="$owners" -v p="$pg_s" 'BEGIN { printf "%.1f", p * 1e6 / n }')" us
		emit throughput "$l" "$preload" "$c" idemproxy_cpu_us_per_owner "$(awk -v n="$owners" -v t=$((px1 - px0)) -v hz="$CLK_TCK" 'BEGIN { printf "%.1f", t / hz * 1e6 / n }')" us
		emit throughput "$l" "$preload" "$c" commits_per_owner "$(awk -v n="$owners" -v d=$((commits1 - commits0)) 'BEGIN { printf "%.3f", d / n }')" commits
		emit throughput "$l" "$preload" "$c" wal_bytes_per_owner "$(awk -v n="$owners" -v w="$wal" 'BEGIN { printf "%.0f", w / n }')" bytes
		stop_pid "$proxy_pid"
		proxy_pid=""
		# Its backends flush their counters as they exit; the table was new
		# (and loaded by INSERT only), so they count the warm-up and the run.
		for ((i = 0; i < READY_WAIT * 10; i++)); do
			[ "$(psql_q -c "SELECT count(*) FROM pg_stat_activity
				WHERE application_name = 'idemproxy'")" = 0 ] && break
			sleep 0.1
		done
		IFS='|' read -r upd hot <<<"$(psql_q -c "$TUPLES_SQL")"
		all=$(psql_q -c "SELECT count(*) FROM idempotency_records WHERE idem_key LIKE '%$prefix-%'")
		emit throughput "$l" "$preload" "$c" updates_per_owner "$(awk -v n="$all" -v u="$upd" 'BEGIN { printf "%.2f", u / n }')" rows
		emit throughput "$l" "$preload" "$c" hot_update_share "$(awk -v u="$upd" -v h="$hot" 'BEGIN { printf "%.2f", u ? h / u : 0 }')" ratio
		[ "$c" = 1 ] || plan_costs "$l" "$preload"
	done
	stop_pid "$upstream_pid"
	upstream_pid=""
}

# ---- table: sizes, depth, VACUUM, the sweeper's deletes, the conversion ----

# Emit the sizes of the table and each index, for layout $1 and rows $2
# (on a partitioned table, summed over the partitions).
sizes() {
	local layout=$1 rows=$2 name bytes
	while IFS='|' read -r name bytes; do
		case $name in
		heap_pages) emit table "$layout" "$rows" 0 "$name" "$bytes" pages ;;
		*) emit table "$layout" "$rows" 0 "$name" "$bytes" bytes ;;
		esac
	done < <(psql_q -c "
		WITH parts AS (SELECT c.oid, c.reltoastrelid FROM pg_class c
			WHERE c.oid = 'idempotency_records'::regclass AND c.relkind = 'r'
			UNION ALL SELECT c.oid, c.reltoastrelid FROM pg_inherits i
			JOIN pg_class c ON c.oid = i.inhrelid
			WHERE i.inhparent = 'idempotency_records'::regclass)
		SELECT 'heap_bytes', sum(pg_relation_size(oid)) FROM parts
		UNION ALL SELECT 'toast_bytes', sum(pg_total_relation_size(reltoastrelid)) FROM parts
		UNION ALL SELECT 'indexes_bytes', sum(pg_indexes_size(oid)) FROM parts
		UNION ALL SELECT 'total_bytes', sum(pg_total_relation_size(oid)) FROM parts
		UNION ALL SELECT 'bytes_per_record', round(sum(pg_total_relation_size(oid)) / $rows) FROM parts
		UNION ALL SELECT 'heap_bytes_per_record', round(sum(pg_relation_size(oid)) / $rows) FROM parts
		UNION ALL SELECT 'heap_pages', (sum(pg_relation_size(oid)) / 8192)::bigint FROM parts")
	while IFS='|' read -r name bytes; do
		emit table "$layout" "$rows" 0 "index_bytes:$name" "$bytes" bytes
	done < <(psql_q -c "
		SELECT p.relname, sum(pg_relation_size(c.oid)) FROM pg_index x
		JOIN pg_class p ON p.oid = x.indexrelid
		LEFT JOIN pg_inherits i ON i.inhparent = x.indexrelid
		JOIN pg_class c ON c.oid = coalesce(i.inhrelid, x.indexrelid)
		WHERE x.indrelid = 'idempotency_records'::regclass GROUP BY p.relname ORDER BY 1")
}

# Emit depth, pages and fanout of B-tree index $1 (a plain index, or a
# partition's) as index $2 of layout $3, rows $4.
btree() {
	local idx=$1 name=$2 layout=$3 rows=$4 level internal leaf
	IFS='|' read -r level internal leaf < <(psql_q -c "
		SELECT tree_level, internal_pages, leaf_pages FROM pgstatindex('$idx')")
	emit table "$layout" "$rows" 0 "btree_levels:$name" "$((level + 1))" levels
	emit table "$layout" "$rows" 0 "btree_leaf_pages:$name" "$leaf" pages
	emit table "$layout" "$rows" 0 "btree_internal_pages:$name" "$internal" pages
	if [ "$internal" -gt 0 ]; then
		emit table "$layout" "$rows" 0 "btree_fanout:$name" \
			"$(awk -v i="$internal" -v l="$leaf" 'BEGIN { printf "%.0f", (i + l - 1) / i }')" children
	fi
}

# Time "VACUUM $2" as metric $1 of layout $3, rows $4; also the pages it scanned.
vacuum_timed() {
	local metric=$1 target=$2 layout=$3 rows=$4 t0 t1 scanned
	t0=$(now_ns)
	psql_q -c "VACUUM (VERBOSE) $target" 2>"$TMP/vacuum.log"
	t1=$(now_ns)
	emit table "$layout" "$rows" 0 "$metric" "$(secs "$t0" "$t1")" s
	scanned=$(sed -n 's/.*pages: [0-9]* removed, [0-9]* remain, \([0-9]*\) scanned.*/\1/p' "$TMP/vacuum.log" |
		awk '{ n += $1 } END { print n + 0 }')
	emit table "$layout" "$rows" 0 "${metric%_s}_pages_scanned" "$scanned" pages
}

table_run() {
	local rows=$1 t0 t1 expired left batches out lock_s
	say "table: $rows records"
	fresh_db plain
	psql_q -c "CREATE EXTENSION pgstattuple" -c "ALTER TABLE idempotency_records SET (autovacuum_enabled = off)"
	t0=$(now_ns)
	psql_q -v n="$rows" -f "$HERE/load.sql" >/dev/null
	t1=$(now_ns)
	emit table plain "$rows" 0 load_s "$(secs "$t0" "$t1")" s
	psql_q -c CHECKPOINT
	vacuum_timed vacuum_first_s idempotency_records plain "$rows"
	psql_q -c ANALYZE
	sizes plain "$rows"
	for idx in idempotency_records_pkey idempotency_records_expires_idx; do
		btree "$idx" "$idx" plain "$rows"
	done

	# The sweeper's delete, a batch per transaction, as many batches as it takes.
	expired=$(psql_q -c "SELECT count(*) FROM idempotency_records
		WHERE state = 'completed' AND expires_at <= now()")
	batches=$(((expired + SWEEP_BATCH - 1) / SWEEP_BATCH))
	cat >"$TMP/sweep.pgbench" <<-EOF
		BEGIN;
		SELECT pg_try_advisory_xact_lock($SWEEP_LOCK_KEY);
		DELETE FROM idempotency_records r USING (SELECT actor, operation, idem_key
		 FROM idempotency_records WHERE state = 'completed' AND expires_at <= now()
		 ORDER BY expires_at LIMIT $SWEEP_BATCH FOR UPDATE SKIP LOCKED) d
		 WHERE r.actor = d.actor AND r.operation = d.operation AND r.idem_key = d.idem_key
		 AND r.state = 'completed';
		COMMIT;
	EOF
	psql_q -c CHECKPOINT
	t0=$(now_ns)
	timeout -k 5 $SQL_TIMEOUT "$PGBIN/pgbench" -h "$PGSOCK" -p "$PGPORT" -U postgres -n -M prepared \
		-c 1 -t "$batches" -f "$TMP/sweep.pgbench" idemproxy >"$TMP/pgbench.txt" 2>&1 ||
		{ cat "$TMP/pgbench.txt" >&2; die "the sweeper's delete failed"; }
	t1=$(now_ns)
	left=$(psql_q -c "SELECT count(*) FROM idempotency_records
		WHERE state = 'completed' AND expires_at <= now()")
	[ "$left" -eq 0 ] || die "$left expired records left after $batches batches"
	emit table plain "$rows" 0 sweep_deleted "$expired" rows
	emit table plain "$rows" 0 sweep_delete_s "$(secs "$t0" "$t1")" s
	emit table plain "$rows" 0 sweep_delete_rows_per_s \
		"$(awk -v n="$expired" -v a="$t0" -v b="$t1" 'BEGIN { printf "%.0f", n / ((b - a) / 1e9) }')" 1/s
	emit table plain "$rows" 0 sweep_batch_ms \
		"$(awk '/^latency average/ { print $4 }' "$TMP/pgbench.txt")" ms
	vacuum_timed vacuum_after_sweep_s idempotency_records plain "$rows"
	vacuum_timed vacuum_idle_s idempotency_records plain "$rows"

	# The conversion, on what is left.
	left=$(psql_q -c "SELECT count(*) FROM idempotency_records")
	t0=$(now_ns)
	out=$("$BIN" migrate --hash-partitions "$PARTITIONS" -c "$MIGRATE_CONF" 2>&1) ||
		{ echo "$out" >&2; die "migrate --hash-partitions failed"; }
	t1=$(now_ns)
	lock_s=$(sed -n 's/.* rows copied in \([0-9.]*\) s under .*/\1/p' <<<"$out")
	[ -n "$lock_s" ] || { echo "$out" >&2; die "migrate --hash-partitions printed no time"; }
	local layout=hash$PARTITIONS
	emit convert "$layout" "$left" 0 lock_s "$lock_s" s
	emit convert "$layout" "$left" 0 lock_s_per_million_rows \
		"$(awk -v s="$lock_s" -v n="$left" 'BEGIN { printf "%.1f", s * 1e6 / n }')" s
	emit convert "$layout" "$left" 0 command_s "$(secs "$t0" "$t1")" s
	sizes "$layout" "$left"
	btree idempotency_records_p0_pkey idempotency_records_pkey "$layout/partition" "$left"
	vacuum_timed vacuum_one_partition_first_s idempotency_records_p0 "$layout/partition" "$left"
	vacuum_timed vacuum_one_partition_idle_s idempotency_records_p0 "$layout/partition" "$left"
}

case " $phases " in *" throughput "*) throughput ;; esac
case " $phases " in *" table "*) for r in $ROWS; do table_run "$r"; done ;; esac

# docs/bench/scale.csv: this run's sections replace the same sections there.
if [ "$NO_DOCS" != 1 ]; then
	sections=$(awk -F, 'NR > 1 { print $1 }' "$CSV" | sort -u | tr '\n' ' ')
	{
		if [ -f "$DOCS/scale.csv" ]; then
			awk -F, -v s=" $sections " 'NR > 1 && index(s, " " $1 " ") == 0' "$DOCS/scale.csv"
		fi
		awk 'NR > 1' "$CSV"
	} >"$TMP/rows.csv"
	{
		echo "section,layout,rows,connections,metric,value,unit"
		for section in meta throughput table convert; do
			awk -F, -v s="$section" '$1 == s' "$TMP/rows.csv"
		done
	} >"$TMP/scale.csv"
	cp "$TMP/scale.csv" "$DOCS/scale.csv"
	say "wrote $CSV and $DOCS/scale.csv"
else
	say "wrote $CSV"
fi
