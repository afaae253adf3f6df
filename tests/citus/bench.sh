#!/usr/bin/env bash
# idemproxy on the Citus cluster against idemproxy on one PostgreSQL, in one
# run on the same machine (the last step of `make citus`).
#
#   tests/citus/bench.sh BASE CONNINFO
#
# BASE is the running cluster's directory (tests/citus/run.sh), CONNINFO its
# coordinator, migrated and distributed. The script starts, beside it, one
# plain PostgreSQL 15 with the nodes' settings (fsync and full_page_writes
# off, TCP on loopback; only shared_preload_libraries differs), nginx as the
# upstream (answers at once) and two idemproxy processes with the same
# configuration (2 workers, replay_cache 0 so every replay is read from the
# store), one per database. Then, interleaved per round (plain, Citus):
#   - owner POSTs (a new key per request) with wrk at 1 and 64 connections;
#   - replays of 100 completed keys at 1 and 64 connections;
#   - the share of the Citus coordinator's distributed statements that ran on
#     one shard (citus_stat_counters: query_execution_single_shard against
#     query_execution_multi_shard, counted over the owner and replay runs);
#   - the sweeper: SWEEP_ROWS expired records loaded, the time from the first
#     deletion to an empty table, deletions per second (and the same
#     counters over the sweep).
# CITUS_BENCH_SECONDS (default 8) per wrk run, CITUS_BENCH_ROUNDS (default
# 3; medians reported), CITUS_BENCH_SWEEP_ROWS (default 20000).
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
set -euo pipefail
cd "$(dirname "$0")/../.."

SECS=${CITUS_BENCH_SECONDS:-8}
ROUNDS=${CITUS_BENCH_ROUNDS:-3}
SWEEP_ROWS=${CITUS_BENCH_SWEEP_ROWS:-20000}
REPLAY_KEYS=100
WORKERS=2
PGBIN=/usr/lib/postgresql/15/bin
PG_USER=postgres
START_WAIT=30
SWEEP_WAIT=300
BIN=${IDEMPROXY_BIN:-./idemproxy}
BODY='{"name":"widget","qty":1,"tags":["bench"]}' # owner.lua's and replay.lua's

say() { echo "citus-bench: $*"; }
die() { echo "citus-bench: $*" >&2; exit 1; }

[ $# -eq 2 ] || die "usage: $0 BASE CONNINFO"
base=$1
citus_dsn=$2
for t in wrk nginx curl; do
	command -v "$t" >/dev/null || [ -x "/usr/sbin/$t" ] || die "$t is missing (scripts/deps.sh bench)"
done
NGINX=$(command -v nginx || echo /usr/sbin/nginx)

dir=$base/bench
rm -rf -- "$dir"
mkdir -p "$dir"
chmod 0755 "$dir"

port_busy() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
used_ports=" "
free_port() { # a free port not in $used_ports (the caller adds it there)
	local i p
	for ((i = 0; i < 50; i++)); do
		p=$((20000 + RANDOM % 12000)) # below the ephemeral range
		case $used_ports in *" $p "*) continue ;; esac
		port_busy "$p" && continue
		echo "$p"
		return 0
	done
	die "no free loopback port in 50 tries"
}
wait_port() { # PORT NAME PID LOG
	local i
	for ((i = 0; i < START_WAIT * 10; i++)); do
		port_busy "$1" && return 0
		kill -0 "$3" 2>/dev/null || break
		sleep 0.1
	done
	tail -n 20 "$4" >&2 || true
	die "$2 did not listen on :$1 within ${START_WAIT}s"
}

pids=()
plain_started=0
# shellcheck disable=SC2317  # run by the EXIT trap
cleanup() {
	local p
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
	[ "$plain_started" = 0 ] ||
		runuser -u "$PG_USER" -- "$PGBIN/pg_ctl" -D "$dir/plain/data" -m fast -w stop >/dev/null 2>&1 || true
}
trap cleanup EXIT

# ---- the plain PostgreSQL, with the Citus nodes' settings ----
plain_port=$(free_port) && used_ports+="$plain_port "
install -d -m 0700 -o "$PG_USER" -g "$PG_USER" "$dir/plain"
runuser -u "$PG_USER" -- "$PGBIN/initdb" -D "$dir/plain/data" -A trust -U "$PG_USER" -E UTF8 \
	--locale=C.UTF-8 >"$dir/plain/initdb.log" 2>&1 || { cat "$dir/plain/initdb.log" >&2; die "initdb failed"; }
cat >>"$dir/plain/data/postgresql.conf" <<EOF
# tests/citus/bench.sh: the plain PostgreSQL beside the Citus cluster
port = $plain_port
listen_addresses = '127.0.0.1'
unix_socket_directories = '$dir/plain'
max_connections = 200
fsync = off
full_page_writes = off
EOF
runuser -u "$PG_USER" -- "$PGBIN/pg_ctl" -D "$dir/plain/data" -l "$dir/plain/log" -w -t "$START_WAIT" start >/dev/null
plain_started=1
runuser -u "$PG_USER" -- "$PGBIN/createdb" -h 127.0.0.1 -p "$plain_port" idemproxy
plain_dsn="host=127.0.0.1 port=$plain_port dbname=idemproxy user=$PG_USER sslmode=disable"

psql_q() { # DSN SQL...
	local dsn=$1
	shift
	timeout -k 5 120 "$PGBIN/psql" "$dsn" -X -A -t -q -v ON_ERROR_STOP=1 "$@"
}

# ---- nginx, the upstream ----
up_port=$(free_port) && used_ports+="$up_port "
mkdir -p "$dir/upstream"
cat >"$dir/upstream/nginx.conf" <<EOF
worker_processes 1;
daemon off;
pid $dir/upstream/nginx.pid;
error_log $dir/upstream/error.log warn;
events { worker_connections 4096; }
http {
	access_log off;
	default_type application/json;
	keepalive_requests 1000000;
	client_body_temp_path $dir/upstream/body;
	proxy_temp_path $dir/upstream/proxy;
	fastcgi_temp_path $dir/upstream/fastcgi;
	uwsgi_temp_path $dir/upstream/uwsgi;
	scgi_temp_path $dir/upstream/scgi;
	server {
		listen 127.0.0.1:$up_port;
		location / { return 201 '{"id":"c001"}'; }
	}
}
EOF
"$NGINX" -p "$dir/upstream" -c "$dir/upstream/nginx.conf" >"$dir/upstream/stderr.log" 2>&1 &
pids+=($!)
wait_port "$up_port" "nginx (upstream)" $! "$dir/upstream/stderr.log"

# ---- one idemproxy per database ----
write_conf() { # FILE PORT DSN
	cat >"$1" <<EOF
listen 127.0.0.1:$2
upstream http://127.0.0.1:$up_port
database "$3"
workers $WORKERS
replay_cache 0
sweep_interval 1s
actor header X-Actor-Id
route bench.create {
	match POST /api/items
	fingerprint json
}
EOF
}
declare -A PORT DSN PID
DSN[plain]=$plain_dsn
DSN[citus]=$citus_dsn
for s in plain citus; do
	PORT[$s]=$(free_port) && used_ports+="${PORT[$s]} "
	write_conf "$dir/$s.conf" "${PORT[$s]}" "${DSN[$s]}"
	"$BIN" -t -c "$dir/$s.conf" >/dev/null
done
"$BIN" migrate -c "$dir/plain.conf" >"$dir/migrate.log" 2>&1 || { cat "$dir/migrate.log" >&2; die "migrate failed"; }
"$BIN" migrate status -c "$dir/citus.conf" | grep -q "distributed by idem_key" ||
	die "the coordinator's idempotency_records is not distributed"
psql_q "$citus_dsn" -c "ALTER SYSTEM SET citus.enable_stat_counters = on" -c "SELECT pg_reload_conf()" >/dev/null
for s in plain citus; do
	psql_q "${DSN[$s]}" -c "TRUNCATE idempotency_records" >/dev/null
done

start_proxy() { # STORE
	"$BIN" -c "$dir/$1.conf" >>"$dir/$1.log" 2>&1 &
	PID[$1]=$!
	pids+=("${PID[$1]}")
	wait_port "${PORT[$1]}" "idemproxy ($1)" "${PID[$1]}" "$dir/$1.log"
}
stop_proxy() { # STORE
	kill "${PID[$1]}" 2>/dev/null || true
	wait "${PID[$1]}" 2>/dev/null || true
}

counters() { # the coordinator's "single multi" for database idemproxy
	psql_q "$citus_dsn" -F ' ' -c "SELECT query_execution_single_shard, query_execution_multi_shard
		FROM citus_stat_counters WHERE name = current_database()"
}

declare -A ALL ERRS
errors=0
run_wrk() { # NAME STORE CONNECTIONS SCRIPT ARGS...
	local name=$1 s=$2 c=$3 script=$4 out rps bad t=2
	shift 4
	[ "$c" -ge "$t" ] || t=$c
	out=$dir/wrk-$name-$s-$c.txt
	timeout -k 5 $((SECS + 60)) wrk -t"$t" -c"$c" -d"${SECS}s" --timeout 10s \
		"http://127.0.0.1:${PORT[$s]}/api/items" -s "$script" -- "$@" >"$out" 2>&1 ||
		{ cat "$out" >&2; die "wrk failed: $name $s at $c"; }
	rps=$(awk '/^Requests\/sec:/ { print $2 }' "$out")
	bad=$(awk '/Non-2xx or 3xx responses:/ { n += $NF } /Socket errors:/ { gsub(/,/, ""); n += $4 + $6 + $8 + $10 } END { print n + 0 }' "$out")
	[ -n "$rps" ] || { cat "$out" >&2; die "no rate in wrk's report: $name $s at $c"; }
	ALL[$name:$s:$c]="${ALL[$name:$s:$c]:-} $rps"
	ERRS[$name:$s:$c]=$((${ERRS[$name:$s:$c]:-0} + bad))
	errors=$((errors + bad))
	say "$name $s @$c: $rps rps, $bad not 2xx"
}
median() { tr ' ' '\n' <<<"$1" | awk 'NF' | sort -g | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else printf "%.2f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

run_id=$(od -An -N4 -tx1 /dev/urandom | tr -d ' \n')
for s in plain citus; do
	start_proxy "$s"
	for ((k = 0; k < REPLAY_KEYS; k++)); do
		code=$(curl -s -o /dev/null -w '%{http_code}' -X POST -H "Idempotency-Key: rp$run_id-$k" \
			-H 'X-Actor-Id: bench' -H 'Content-Type: application/json' --data "$BODY" \
			"http://127.0.0.1:${PORT[$s]}/api/items")
		[ "$code" = 201 ] || die "completing replay key $k through $s answered $code"
	done
done

read -r single0 multi0 < <(counters)
for ((r = 1; r <= ROUNDS; r++)); do
	for c in 1 64; do
		for s in plain citus; do
			run_wrk owner "$s" "$c" scripts/bench/owner.lua "o$run_id-$r-$c"
		done
		for s in plain citus; do
			run_wrk replay "$s" "$c" scripts/bench/replay.lua "rp$run_id" "$REPLAY_KEYS"
		done
	done
done
read -r single1 multi1 < <(counters)
for s in plain citus; do
	n=$(psql_q "${DSN[$s]}" -c "SELECT count(*) FROM idempotency_records WHERE state <> 'completed'")
	[ "$n" = 0 ] || die "$s: $n records not completed after the runs"
	stop_proxy "$s"
done

# ---- the sweeper ----
declare -A SWEEP
read -r single2 multi2 < <(counters)
for s in plain citus; do
	psql_q "${DSN[$s]}" -c "TRUNCATE idempotency_records" >/dev/null
	sed "s/now() + interval '24 hours'/now() - interval '1 minute'/" scripts/bench/load-million.sql >"$dir/load-expired.sql"
	psql_q "${DSN[$s]}" -v n="$SWEEP_ROWS" -f "$dir/load-expired.sql" >/dev/null
	start_proxy "$s"
	t0=""
	deadline=$((SECONDS + SWEEP_WAIT))
	while :; do
		n=$(psql_q "${DSN[$s]}" -c "SELECT count(*) FROM idempotency_records")
		now=$(date +%s.%N)
		if [ -z "$t0" ] && [ "$n" -lt "$SWEEP_ROWS" ]; then t0=$now n0=$n; fi
		[ "$n" -gt 0 ] || break
		[ "$SECONDS" -lt "$deadline" ] || die "$s: $n of $SWEEP_ROWS expired records left after ${SWEEP_WAIT}s"
		sleep 0.1
	done
	[ "$n0" -gt 0 ] || die "$s: the $SWEEP_ROWS records went between two looks: raise CITUS_BENCH_SWEEP_ROWS"
	# from the first deletion seen: the rows deleted since then over the time
	SWEEP[$s]=$(awk -v a="$t0" -v b="$now" -v n="$n0" 'BEGIN { printf "%.0f", n / (b - a) }')
	say "sweeper $s: $SWEEP_ROWS expired records deleted, ${SWEEP[$s]} deletions/s"
	stop_proxy "$s"
done
read -r single3 multi3 < <(counters)

# ---- the table ----
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2fx", a / b; else print "-" }'; }
share() { awk -v s="$1" -v m="$2" 'BEGIN { if (s + m > 0) printf "%.1f%%", 100 * s / (s + m); else print "-" }'; }
echo
echo "idemproxy on Citus (coordinator + 2 workers, 32 shards) vs one PostgreSQL, same machine, same run"
echo "wrk ${SECS}s per run, $ROUNDS rounds interleaved (median rps), $WORKERS idemproxy workers, replay_cache 0"
printf '%-22s %12s %12s %10s\n' scenario "PostgreSQL" Citus "Citus/PG"
for k in owner:1 owner:64 replay:1 replay:64; do
	p=$(median "${ALL[${k%%:*}:plain:${k##*:}]}")
	q=$(median "${ALL[${k%%:*}:citus:${k##*:}]}")
	printf '%-22s %12s %12s %10s\n' "${k%%:*} POST @${k##*:}" "$p" "$q" "$(ratio "$q" "$p")"
done
printf '%-22s %12s %12s %10s\n' "sweeper deletions/s" "${SWEEP[plain]}" "${SWEEP[citus]}" "$(ratio "${SWEEP[citus]}" "${SWEEP[plain]}")"
echo "Citus statements on one shard (citus_stat_counters):"
echo "  owner and replay runs: $((single1 - single0)) single-shard, $((multi1 - multi0)) multi-shard ($(share $((single1 - single0)) $((multi1 - multi0))) single)"
echo "  sweep of $SWEEP_ROWS records: $((single3 - single2)) single-shard, $((multi3 - multi2)) multi-shard"
echo "answers other than 2xx: $errors"
[ "$errors" -eq 0 ] || die "$errors answers were not 2xx"
