#!/usr/bin/env bash
# shellcheck disable=SC2317  # stop_pid and cleanup run from traps
# `make bench`: idemproxy against nginx, HAProxy and PostgreSQL's own ceiling.
#
#   scripts/bench.sh [-s SECONDS] [-r ROUNDS] [-w WORKERS] [--skip-million]
#
# On loopback, in one run (about 10 minutes on 2 CPUs with the defaults): a
# private PostgreSQL cluster (default durability), nginx as the fixed
# upstream, idemproxy, nginx and HAProxy as reverse proxies in front of it,
# then wrk at 1 and 64 connections:
#   (a) pass-through GET, idemproxy vs the nginx proxy and vs HAProxy
#       (scripts/bench/haproxy.cfg.in: nbthread = WORKERS, upstream
#       keep-alive with http-reuse always, no logging), both setting the
#       same forwarding headers idemproxy adds (X-Forwarded-For, -Proto,
#       -Host, X-Real-IP, Forwarded, Via), and vs nginx's default proxy,
#       which adds none (information), with the CPU time per request of
#       each proxy's processes (/proc/PID/stat). The target's reference is
#       the faster of nginx and HAProxy (median rps) at each connection
#       count ("ref: nginx" or "ref: haproxy"), its CPU per request included;
#   (b) owner POST (a new key per request) vs pgbench running the same claim
#       and finish statements as two transactions, prepared (the ceiling)
#       and unnamed (information), at 1 client and at half the owner's 64
#       connections (PGB_CLIENTS_64), each run on an emptied table; and
#       owner at 1 connection vs its
#       floor, 1 / (1/PASS + 1/PGB) rps: one exchange through the faster
#       pass-through reference of (a) (PASS, its median rps at 1) plus one
#       prepared claim+finish pair of pgbench (PGB, its median at 1), the
#       least an owner request costs done in series (needs (a) and (b));
#   (c) replay POST over 100 completed keys vs nginx answering the same
#       status, headers and body from memory (generated from one replay
#       fetched at start-up) with the same WORKERS workers, at 1 and 64;
#   (d) (b) and (c) again with 1,000,000 records in the table;
#   (e) idemproxy's peak RSS after 1,000 idle keep-alive connections;
#   (f) a 1 GiB download and a 1 GiB upload (curl) through idemproxy and
#       through the nginx proxy with proxy_buffering and
#       proxy_request_buffering off, best of STREAM_RUNS each, MiB/s (the
#       upstream nginx serves the file from memory and passes uploads on to
#       scripts/bench/sink.py, which reads them whole before it answers);
#   (g) idemproxy's RSS with 100 clients that stop reading large responses;
#   (h) the fingerprint of a 1 MiB JSON body, nine shapes, CPU ms and heap
#       beyond the body (tests/unit/test_fingerprint.c, IDEMPROXY_FP_BENCH=1),
#       against the raw-bytes fingerprint of the same body;
#   (i) owner and replay POSTs with `actor jwt` (an ES256 and an RS256
#       token, scripts/bench/jwt.py) against the same with the header actor;
#   (j) pass-through GET and owner POST through a TLS listener (a second
#       idemproxy with tls_certificate) against the nginx proxy's TLS
#       listener with the same certificate;
#   (k) HTTP/2 in cleartext (prior knowledge) with h2load: pass-through GET
#       against nginx's http2 listener setting the same forwarding headers,
#       with the CPU time per request of each, and replay POSTs of one
#       completed key against nginx's static answer over http2; at "1" one
#       connection of one stream, at
#       "64" H2_CLIENTS connections of 64/H2_CLIENTS streams each. h2load
#       reports no percentiles: the p50 column holds its mean. When h2load
#       or nginx's http2 module is missing the output says so and (k) is
#       left out;
#   (l) gRPC unary pass-through with h2load (POST /bench.Echo/Unary, one
#       length-prefixed message, content-type application/grpc, te:
#       trailers) through a second idemproxy with `upstream h2c://`
#       against nginx's grpc_pass, the same workers, with the CPU time per
#       request of each, at 1 and 64 concurrent streams as in (k); the
#       upstream is nginx's echo module answering each call with its own
#       message and grpc-status 0 (scripts/bench/grpc_client.py serve when
#       the module is missing), both proxies probed with a grpcio client
#       before and after. Without h2load, nginx's grpc module or an
#       upstream the output says so and (l) is left out.
# (a), (b), (c), (i), (k) and (l) run ROUNDS rounds interleaved at each connection
# count (A B A B ..., or A B C D in (a), as the machine is noisy) and report the median rps and
# p99 with min-max, their ratios from the medians; (d), (j) run once, (e)-(h)
# as described. Prints one table and a target check per row (the targets in
# docs/performance.md), writes bench-out/bench.csv, bench-out/bench.png
# (gnuplot) and bench-out/bench.txt, and copies the CSV and PNG to
# docs/bench/ (not after a run with BENCH_ONLY).
#
# Environment: BENCH_SECONDS (per measured run, default 5), BENCH_ROUNDS
# (1-9, default 3), BENCH_WORKERS (idemproxy and nginx workers, default the
# number of CPUs), BENCH_SKIP_MILLION=1 (skip (d)), BENCH_NO_DOCS=1 (leave
# docs/bench/ alone), BENCH_ONLY="k ..." (run only these sections; the
# others are reported as "-"), IDEMPROXY_BIN (default ./idemproxy), BENCH_PROXY_LOG=FILE
# (idemproxy's stderr, one line per request; default /dev/null, as nginx
# runs with access_log off), BENCH_BASELINE_BIN=PATH (another idemproxy
# binary, say one built before a change: (a), (b) and (c) run it too, as a
# third side in the same rounds, and add "vs baseline" rows and checks),
# BENCH_GRPC_UPSTREAM=grpcio ((l)'s upstream in python3-grpcio even when
# nginx's echo module is there).
# Runtime: 14 x 2 x ROUNDS runs for (a) (b) (c) (i) and 12 more for (d) (j),
# each BENCH_SECONDS plus well under a second of set-up, then the 1M load
# and (e)-(h) (a minute or two together): with the defaults 96 runs, about
# 10 minutes on 2 CPUs (an estimate); BENCH_SECONDS=2 BENCH_ROUNDS=2
# BENCH_SKIP_MILLION=1 (64 runs) took 2m50s.
# A missed target is reported, not an error: the exit status is 1 only when
# something could not be measured (and then docs/bench/ is left alone).
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$(pwd -P)
HERE=$ROOT/scripts/bench

BIN=${IDEMPROXY_BIN:-./idemproxy}
BASE_BIN=${BENCH_BASELINE_BIN:-}
GRPC_UPSTREAM=${BENCH_GRPC_UPSTREAM:-}
FP_BIN=${FP_BENCH_BIN:-build/release/tests/test_fingerprint}
PGBIN=${PGBIN:-/usr/lib/postgresql/15/bin}
NGINX=/usr/sbin/nginx
HAPROXY=/usr/sbin/haproxy
PY=/usr/bin/python3
OUT=$ROOT/bench-out
DOCS=$ROOT/docs/bench

SECONDS_PER=${BENCH_SECONDS:-5}
ROUNDS=${BENCH_ROUNDS:-3}
WORKERS=${BENCH_WORKERS:-$(nproc)}
SKIP_MILLION=${BENCH_SKIP_MILLION:-0}
NO_DOCS=${BENCH_NO_DOCS:-0}
PROXY_LOG=${BENCH_PROXY_LOG:-/dev/null}
ONLY=${BENCH_ONLY:-}

CONNS="1 64"              # connection counts of every wrk run
PGB_CLIENTS_64=32         # pgbench's clients in (b)'s 64-connection rounds
WRK_THREADS=2             # wrk -t, and pgbench -j (both at most CONNS)
H2_CLIENTS=8              # (k): h2load connections at 64 concurrent streams
WRK_TIMEOUT=10s           # wrk --timeout: a slower response counts as an error
WARMUP_SECONDS=2          # unmeasured wrk run before the pass-through runs
REPLAY_KEYS=100           # completed keys the replay runs cycle over
MILLION=1000000           # records loaded for (d)
IDLE_CONNS=1000           # idle keep-alive connections for (e)
IDLE_SECONDS=3            # how long (e) holds them open
STREAM_BYTES=1073741824   # (f): the size of the download and of the upload
STREAM_RUNS=5             # (f): runs of each transfer, the best counts
SLOW_READERS=100          # (g): clients that stop reading
SLOW_SECONDS=3            # (g): how long they hold their responses
ERROR_PCT_MAX=1           # more failed requests than this (%) voids a run
MAX_SECONDS=60            # largest BENCH_SECONDS accepted
MAX_ROUNDS=9              # largest BENCH_ROUNDS accepted
FD_LIMIT=16384            # ulimit -n for everything started here
READY_WAIT=10             # seconds to wait for each listener
# shellcheck disable=SC2034  # read by stop_pid (scripts/lib.sh)
STOP_WAIT=15              # seconds to wait for a process to exit after SIGTERM
RUN_GRACE=30              # seconds a measured run may overrun before it is killed
SQL_TIMEOUT=120           # seconds for one psql call (the 1M load included)
# shellcheck disable=SC2034  # read by free_port (scripts/lib.sh)
PORT_TRIES=200            # candidate ports tried for each listener
ECHO_MODULE=/usr/lib/nginx/modules/ngx_http_echo_module.so # (l)'s upstream
GRPC_SERVE_PROCS=2        # (l): processes of the grpcio upstream, when it is the one
GRPC_PAYLOAD=bench-echo-0123456789abcdef # (l): the message of every call (27 bytes)

# The targets (docs/performance.md, Targets).
TARGET_PASS_RPS=1.0       # pass-through rps >= this x the faster of nginx and HAProxy, at 64 connections
TARGET_PASS_P99=1.1       # pass-through p99 <= this x that reference's, at 64 connections
TARGET_PASS_CPU=1.0       # pass-through CPU per request <= this x that reference's, at 64
TARGET_OWNER_64=1.5       # owner rps at 64 >= this x pgbench prepared at PGB_CLIENTS_64 clients
TARGET_OWNER_FLOOR=0.9    # owner rps >= this x its floor (pass-through + pgbench pair), at 1
TARGET_STATIC=1.0         # replay rps >= this x nginx answering the same from memory, at 1 and 64
TARGET_STATIC_P99=1.5     # replay p99 <= this x that nginx's, at 1 and 64
TARGET_MILLION=0.8        # at 1M records >= this x the empty-table rps
TARGET_RSS_MIB=64         # peak RSS with 1,000 idle connections, and with (g)
TARGET_STREAM=0.9         # (f): idemproxy MiB/s >= this x nginx's
TARGET_FP_MS=10           # (h): CPU ms per 1 MiB JSON body
TARGET_FP_MIB=4           # (h): heap MiB beyond the body
TARGET_JWT=0.9            # (i): actor jwt rps >= this x the header actor's
TARGET_H2_PASS=1.0        # (k): h2 pass-through rps >= this x nginx http2's, at 64 streams
TARGET_GRPC_PASS=1.0      # (l): gRPC pass-through rps >= this x nginx grpc_pass's, at 64 streams
TARGET_BASELINE=0.95      # BENCH_BASELINE_BIN: rps >= this x the baseline's (the rounds' noise)

# The fixed values pgbench sends, as idemproxy would for the bench route.
PGB_FINGERPRINT='\x9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08'
PGB_HEADERS=$'Content-Type: application/json\r\n'
PGB_BODY='{"id":"c001"}'
PGB_LEASE_MS=60000
PGB_RETENTION_MS=86400000

usage() {
	sed -n '3,/^# something could not/p' "$0" | sed 's/^# \{0,1\}//' >&2
	exit 2
}

say() { printf 'bench: %s\n' "$*" >&2; }
die() { say "$*"; exit 1; }
# 0 when section $1 runs: every one, unless BENCH_ONLY names some.
want() { [ -z "$ONLY" ] || [[ " $ONLY " == *" $1 "* ]]; }

while [ $# -gt 0 ]; do
	case "$1" in
	-s | --seconds) [ $# -ge 2 ] || usage; SECONDS_PER=$2; shift 2 ;;
	-r | --rounds) [ $# -ge 2 ] || usage; ROUNDS=$2; shift 2 ;;
	-w | --workers) [ $# -ge 2 ] || usage; WORKERS=$2; shift 2 ;;
	--skip-million) SKIP_MILLION=1; shift ;;
	-h | --help) usage ;;
	*) usage ;;
	esac
done

for sec in $ONLY; do
	case "$sec" in [a-l]) ;; *) die "BENCH_ONLY names sections a to l: $sec" ;; esac
done
case "$SECONDS_PER" in '' | *[!0-9]*) die "BENCH_SECONDS must be a number of seconds: $SECONDS_PER" ;; esac
case "$WORKERS" in '' | *[!0-9]*) die "BENCH_WORKERS must be a number: $WORKERS" ;; esac
case "$ROUNDS" in '' | *[!0-9]*) die "BENCH_ROUNDS must be a number: $ROUNDS" ;; esac
if [ "$SECONDS_PER" -lt 1 ] || [ "$SECONDS_PER" -gt $MAX_SECONDS ]; then
	die "BENCH_SECONDS must be 1-$MAX_SECONDS"
fi
[ "$WORKERS" -ge 1 ] || die "BENCH_WORKERS must be at least 1"
if [ "$ROUNDS" -lt 1 ] || [ "$ROUNDS" -gt $MAX_ROUNDS ]; then
	die "BENCH_ROUNDS must be 1-$MAX_ROUNDS"
fi
SECONDS_PER=$((10#$SECONDS_PER)) # "08" is not octal below
ROUNDS=$((10#$ROUNDS))

[ "$(id -u)" -eq 0 ] || die "must run as root (the PostgreSQL cluster runs as user postgres)"
[ -x "$BIN" ] || die "$BIN not found: build it with make"
[ -z "$BASE_BIN" ] || [ -x "$BASE_BIN" ] || die "BENCH_BASELINE_BIN: $BASE_BIN is not an executable"
case "$GRPC_UPSTREAM" in '' | grpcio) ;; *) die "BENCH_GRPC_UPSTREAM is grpcio or empty: $GRPC_UPSTREAM" ;; esac
! want a || command -v "$HAPROXY" >/dev/null || die "$HAPROXY not found (make deps installs it: haproxy)"
for tool in wrk curl "$NGINX" "$PGBIN/pgbench" "$PGBIN/psql" gnuplot "$PY" timeout pgrep getconf; do
	command -v "$tool" >/dev/null || die "$tool not found (make deps installs it)"
done
if [ "$(ulimit -n)" != unlimited ] && [ "$(ulimit -n)" -lt $FD_LIMIT ]; then
	ulimit -n $FD_LIMIT 2>/dev/null || die "cannot raise the open-file limit to $FD_LIMIT (ulimit -n)"
fi

# ---- processes and clean-up ----

TMP=""
SHM=""
PGDIR=""
PGSOCK=""         # the socket's directory: host= of pg.sh's conninfo
PGPORT=""
conninfo=""       # set by start_pg (scripts/lib.sh)
started_pg=0
upstream_pid=""
sink_pid=""
nginx_pid=""
haproxy_pid=""   # (a): HAProxy, the second pass-through reference
proxy_pid=""
tls_proxy_pid=""
base_pid=""      # BENCH_BASELINE_BIN's idemproxy
grpc_up_pid=""   # (l): the gRPC upstream, nginx's gRPC proxy, idemproxy's
grpc_nginx_pid=""
grpc_proxy_pid=""
child_pid=""

# shellcheck disable=SC1091  # not followed: checked on its own
. scripts/lib.sh   # after the cd above: paths are from the repository root

cleanup() {
	trap - EXIT INT TERM
	set +e
	stop_pid "$child_pid"
	stop_pid "$proxy_pid"
	stop_pid "$tls_proxy_pid"
	stop_pid "$base_pid"
	stop_pid "$grpc_proxy_pid"
	stop_pid "$grpc_nginx_pid"
	stop_pid "$grpc_up_pid"
	stop_pid "$nginx_pid"
	stop_pid "$haproxy_pid"
	stop_pid "$upstream_pid"
	stop_pid "$sink_pid"
	if [ "$started_pg" = 1 ]; then
		bash "$ROOT/scripts/pg.sh" stop "$PGDIR" "$PGPORT" >/dev/null
	fi
	[ -z "$TMP" ] || rm -rf "$TMP"
	[ -z "$SHM" ] || rm -rf "$SHM"
}
trap cleanup EXIT
trap 'say "interrupted"; exit 130' INT
trap 'say "terminated"; exit 143' TERM

# Stop with idemproxy's log when it is no longer running.
check_proxy() {
	kill -0 "$proxy_pid" 2>/dev/null && return 0
	if [ "$PROXY_LOG" = /dev/null ]; then
		die "idemproxy exited during the benchmark (rerun with BENCH_PROXY_LOG=FILE to keep its log)"
	fi
	tail -n 30 "$PROXY_LOG" >&2 || true
	die "idemproxy exited during the benchmark (the end of $PROXY_LOG is above)"
}

# The same for the idemproxy of pid $1 named $2 (the baseline, (l)'s).
check_other() {
	kill -0 "$1" 2>/dev/null && return 0
	[ "$PROXY_LOG" = /dev/null ] || tail -n 30 "$PROXY_LOG" >&2 || true
	die "$2 exited during the benchmark (rerun with BENCH_PROXY_LOG=FILE to keep its log)"
}

# Run command $3... in the background with stdout and stderr to file $2 ("-":
# stdout unchanged, stderr to ours), killed after $1 seconds, and wait for
# it. Waiting in the wait builtin lets a trapped Ctrl-C or SIGTERM act at
# once; cleanup then stops the command by its pid (child_pid). The caller
# must not redirect this function's own output: the traps print through it.
run_bounded() {
	local limit=$1 out=$2 rc=0
	shift 2
	if [ "$out" = - ]; then
		timeout -k 5 "$limit" "$@" &
	else
		timeout -k 5 "$limit" "$@" >"$out" 2>&1 &
	fi
	child_pid=$!
	wait "$child_pid" || rc=$?
	child_pid=""
	return $rc
}

# Fill the @NAME@ placeholders of template $1 into file $2 from NAME=VALUE args.
render() {
	local in=$1 out=$2 kv expr=()
	shift 2
	for kv in "$@"; do
		expr+=(-e "s|@${kv%%=*}@|${kv#*=}|g")
	done
	sed "${expr[@]}" "$in" >"$out"
}

psql_q() {
	timeout --foreground -k 5 $SQL_TIMEOUT "$PGBIN/psql" -h "$PGSOCK" -p "$PGPORT" -U postgres \
		-d idemproxy -X -A -t -q -v ON_ERROR_STOP=1 "$@"
}

# ---- measurements ----
#
# Every counted run appends its figures to the lists in the ALL_* arrays,
# keyed "SCENARIO:CONNECTIONS" (space-separated, one entry per round);
# RPS, P50, P99, REQS and ERRS hold the last run's until summarize() turns
# the lists into medians (RPS, P50, P99, CPU), minima and maxima (*_MIN,
# *_MAX) and counts (NRUN). A figure that could not be measured is absent,
# and MISSING counts it.

declare -A RPS P50 P99 REQS ERRS
# h2load's requests done and succeeded, those failed, errored or timed out,
# and the answers other than 2xx, summed over a scenario's runs
declare -A H2_DONE H2_OK H2_FAIL H2_NOT2XX
declare -A ALL_RPS ALL_P50 ALL_P99 ALL_CPU
declare -A RPS_MIN RPS_MAX P99_MIN P99_MAX CPU CPU_MIN CPU_MAX NRUN
MISSING=0
CLK_TCK=$(getconf CLK_TCK)

# Print a wrk latency ("812.00us", "1.02ms", "2.10s", "1.50m") in ms.
to_ms() {
	awk -v v="$1" 'BEGIN {
		n = v + 0; u = v; sub(/^[0-9.]+/, "", u)
		if (u == "us") n /= 1000; else if (u == "s") n *= 1000
		else if (u == "m") n *= 60000; else if (u != "ms") exit 1
		printf "%.3f", n }'
}

# Append value $3 to the list of key $2 in ALL_* array $1 (a name).
add_figure() {
	local -n list=$1
	list[$2]="${list[$2]:-}${list[$2]:+ }$3"
}

# Drop the last value of key $2's list in ALL_* array $1 (a voided run).
drop_figure() {
	local -n rounds=$1
	case "${rounds[$2]:-}" in
	*" "*) rounds[$2]=${rounds[$2]% *} ;;
	*) unset "rounds[$2]" ;;
	esac
}

# Run wrk: scenario $1 at $2 connections against URL $3, extra wrk arguments
# after; store its requests/s, p50, p99, request and error counts, and add
# them to the scenario's rounds. A run with more than ERROR_PCT_MAX % failed
# requests counts as not measured.
run_wrk() {
	local name=$1 c=$2 url=$3 t=$WRK_THREADS out rps p50 p99 reqs errs
	shift 3
	[ "$c" -ge "$t" ] || t=$c
	unset "RPS[$name:$c]" "P50[$name:$c]" "P99[$name:$c]" "REQS[$name:$c]" "ERRS[$name:$c]"
	out=$TMP/wrk-$name-$c.txt
	say "wrk $name, $c connection(s), ${SECONDS_PER}s"
	if ! run_bounded $((SECONDS_PER + RUN_GRACE)) "$out" \
		wrk -t"$t" -c"$c" -d"${SECONDS_PER}s" --timeout "$WRK_TIMEOUT" --latency \
		"$url" "$@"; then
		cat "$out" >&2
		say "wrk failed for $name at $c connections"
		MISSING=$((MISSING + 1))
		return 0
	fi
	rps=$(awk '/^Requests\/sec:/ { print $2 }' "$out")
	p50=$(awk '$1 == "50%" { print $2 }' "$out")
	p99=$(awk '$1 == "99%" { print $2 }' "$out")
	reqs=$(awk '/ requests in / { print $1 }' "$out")
	errs=$(awk '/Non-2xx or 3xx responses:/ { n += $NF }
		/Socket errors:/ { gsub(/,/, ""); n += $4 + $6 + $8 + $10 }
		END { print n + 0 }' "$out")
	if [ -z "$rps" ] || [ -z "$p50" ] || [ -z "$p99" ] || [ -z "$reqs" ] ||
		! p50=$(to_ms "$p50") || ! p99=$(to_ms "$p99"); then
		cat "$out" >&2
		say "could not read wrk's report for $name at $c connections"
		MISSING=$((MISSING + 1))
		return 0
	fi
	keep_run "$name" "$c" connections "$rps" "$p50" "$p99" "$reqs" "$errs" "$out"
}

# Keep a run of scenario $1 at $2 $3 (connections or streams): its rps $4,
# p50 $5 and p99 $6 ("": the tool gives none) in ms, its requests $7 and
# failed ones $8, its report in file $9. A run with more than
# ERROR_PCT_MAX % failed requests counts as not measured.
keep_run() {
	local name=$1 c=$2 unit=$3 rps=$4 p50=$5 p99=$6 reqs=$7 errs=$8 out=$9
	if awk -v e="$errs" -v r="$reqs" -v m=$ERROR_PCT_MAX 'BEGIN { exit !(r == 0 || e * 100 > r * m) }'; then
		cat "$out" >&2
		say "$name at $c $unit: $errs of $reqs requests failed (more than $ERROR_PCT_MAX%): not counted"
		MISSING=$((MISSING + 1))
		return 0
	fi
	RPS[$name:$c]=$rps
	P50[$name:$c]=$p50
	REQS[$name:$c]=$reqs
	ERRS[$name:$c]=$errs
	add_figure ALL_RPS "$name:$c" "$rps"
	add_figure ALL_P50 "$name:$c" "$p50"
	if [ -n "$p99" ]; then
		P99[$name:$c]=$p99
		add_figure ALL_P99 "$name:$c" "$p99"
	fi
}

# Print the CPU clock ticks (utime + stime, /proc/PID/stat fields 14 and
# 15, all threads) of process $1 and of its children (nginx's workers).
proc_ticks() {
	local pid=$1 total=0 p stat kids f
	mapfile -t kids < <(pgrep -P "$pid" || true)
	for p in "$pid" "${kids[@]}"; do
		stat=$(cat "/proc/$p/stat" 2>/dev/null) || continue
		read -ra f <<<"${stat##*) }" # f[0] is field 3 (the state)
		total=$((total + f[11] + f[12]))
	done
	echo "$total"
}

# Run $2 (run_wrk or run_h2load) with arguments $3... with the CPU time of
# process $1 and its children measured around it; a counted run adds its
# CPU microseconds per request to ALL_CPU.
run_cpu() {
	local pid=$1 run=$2 name=$3 c=$4 before after
	shift 2
	before=$(proc_ticks "$pid")
	"$run" "$@"
	after=$(proc_ticks "$pid")
	[ -n "${RPS[$name:$c]:-}" ] || return 0
	add_figure ALL_CPU "$name:$c" "$(awk -v t=$((after - before)) -v hz="$CLK_TCK" -v n="${REQS[$name:$c]}" \
		'BEGIN { printf "%.2f", t * 1e6 / hz / n }')"
}

run_wrk_cpu() {
	local pid=$1
	shift
	run_cpu "$pid" run_wrk "$@"
}

# Run h2load: scenario $1 at $2 concurrent streams (1: one connection of
# one; more: H2_CLIENTS connections sharing them) against URL $3, extra
# h2load arguments after; keeps its figures as run_wrk does, its mean
# latency in the p50 place (h2load reports no percentiles).
run_h2load() {
	local name=$1 c=$2 url=$3 clients=1 streams=1 t=1 out rps mean reqs errs
	shift 3
	if [ "$c" -gt 1 ]; then
		clients=$H2_CLIENTS streams=$((c / H2_CLIENTS)) t=$WRK_THREADS
	fi
	unset "RPS[$name:$c]" "P50[$name:$c]" "P99[$name:$c]" "REQS[$name:$c]" "ERRS[$name:$c]"
	out=$TMP/h2load-$name-$c.txt
	say "h2load $name, $clients connection(s) x $streams stream(s), ${SECONDS_PER}s"
	if ! run_bounded $((SECONDS_PER + RUN_GRACE)) "$out" \
		h2load -t"$t" -c"$clients" -m"$streams" -D "$SECONDS_PER" "$@" "$url"; then
		cat "$out" >&2
		say "h2load failed for $name at $c streams"
		MISSING=$((MISSING + 1))
		return 0
	fi
	rps=$(awk '/^finished in/ { print $4 }' "$out")
	mean=$(awk '/^time for request:/ { print $6 }' "$out")
	reqs=$(awk '/^requests:/ { print $2 }' "$out")
	# failed, errored and timed out requests, and 4xx and 5xx answers
	errs=$(awk '/^requests:/ { n += $10 + $12 + $14 } /^status codes:/ { n += $7 + $9 }
		END { print n + 0 }' "$out")
	H2_DONE[$name]=$((${H2_DONE[$name]:-0} + $(awk '/^requests:/ { print $6 + 0 }' "$out")))
	H2_OK[$name]=$((${H2_OK[$name]:-0} + $(awk '/^requests:/ { print $8 + 0 }' "$out")))
	H2_FAIL[$name]=$((${H2_FAIL[$name]:-0} + $(awk '/^requests:/ { print $10 + $12 + $14 }' "$out")))
	H2_NOT2XX[$name]=$((${H2_NOT2XX[$name]:-0} + $(awk '/^status codes:/ { print $5 + $7 + $9 }' "$out")))
	if [ -z "$rps" ] || [ -z "$mean" ] || [ -z "$reqs" ] || ! mean=$(to_ms "$mean"); then
		cat "$out" >&2
		say "could not read h2load's report for $name at $c streams"
		MISSING=$((MISSING + 1))
		return 0
	fi
	keep_run "$name" "$c" streams "$rps" "$mean" "" "$reqs" "$errs" "$out"
}

# Check that owner run $1 at $2 connections, keys prefixed $3, of operation
# $4 [bench.create], created one completed record per answered request;
# otherwise void the run (and drop it from the rounds).
check_owner_records() {
	local name=$1 c=$2 prefix=$3 op=${4:-bench.create} completed answered
	[ -n "${RPS[$name:$c]:-}" ] || return 0
	answered=$((${REQS[$name:$c]} - ${ERRS[$name:$c]}))
	completed=$(psql_q -c "SELECT count(*) FROM idempotency_records
		WHERE operation = '$op' AND idem_key LIKE '$prefix-%' AND state = 'completed'") || completed=0
	if [ "$completed" -lt "$answered" ]; then
		say "$name at $c connections: $completed completed records for ${REQS[$name:$c]} requests: not counted"
		unset "RPS[$name:$c]"
		drop_figure ALL_RPS "$name:$c"
		drop_figure ALL_P50 "$name:$c"
		drop_figure ALL_P99 "$name:$c"
		MISSING=$((MISSING + 1))
	fi
}

# The PostgreSQL ceiling at $1 clients with pgbench query mode $2 (prepared:
# the statements planned once, the ceiling proper; extended: unnamed
# statements planned on every execution, as proxy/store.c sends them today),
# round $3: claim + finish pairs per second, added to the rounds of the key
# pgbench_MODE. Each round has its own operation, so that every pair it
# counts is checked against its own completed records.
run_pgbench() {
	local c=$1 mode=$2 round=$3 j=$WRK_THREADS out tps txns completed op clients=$1
	[ "$c" = 1 ] || clients=$PGB_CLIENTS_64
	[ "$clients" -ge "$j" ] || j=$clients
	op=pgbench.$mode.c$c.r$round
	out=$TMP/pgbench-$mode-$c.txt
	psql_q -c CHECKPOINT || true
	say "pgbench claim+finish -M $mode, $clients client(s), ${SECONDS_PER}s"
	if ! run_bounded $((SECONDS_PER + RUN_GRACE)) "$out" \
		"$PGBIN/pgbench" -h "$PGSOCK" -p "$PGPORT" -U postgres -n -M "$mode" \
		-c "$clients" -j "$j" -T "$SECONDS_PER" -f "$HERE/claim-finish.pgbench" \
		-D actor=bench -D op="$op" -D fp="$PGB_FINGERPRINT" \
		-D owner="pgbench" -D lease=$PGB_LEASE_MS -D status=201 \
		-D headers="$PGB_HEADERS" -D body="$PGB_BODY" -D retention=$PGB_RETENTION_MS \
		idemproxy; then
		cat "$out" >&2
		say "pgbench failed at $c clients"
		MISSING=$((MISSING + 1))
		return 0
	fi
	tps=$(awk '/^tps = / { print $3; exit }' "$out")
	if [ -z "$tps" ] || grep -Eq '^number of failed transactions: [1-9]' "$out"; then
		cat "$out" >&2
		say "pgbench at $c clients: no usable result"
		MISSING=$((MISSING + 1))
		return 0
	fi
	# every transaction pgbench counts must have left a completed record
	txns=$(awk '/^number of transactions actually processed:/ { print $NF; exit }' "$out")
	completed=$(psql_q -c "SELECT count(*) FROM idempotency_records
		WHERE operation = '$op' AND state = 'completed'") || completed=0
	if [ -z "$txns" ] || [ "$completed" -lt "$txns" ]; then
		cat "$out" >&2
		say "pgbench at $c clients: $completed completed records for ${txns:-?} pairs: not counted"
		MISSING=$((MISSING + 1))
		return 0
	fi
	RPS[pgbench_$mode:$c]=$tps
	add_figure ALL_RPS "pgbench_$mode:$c" "$tps"
}

# Empty the table for the next run of (b) and write its pages out.
empty_table() {
	psql_q -c "TRUNCATE idempotency_records" -c CHECKPOINT || die "cannot empty idempotency_records"
}

# Print "MEDIAN MIN MAX COUNT" of the numbers $@ (nothing when there are none).
stats() {
	[ $# -gt 0 ] || return 0
	printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 }
		END {
			if (NR % 2) m = v[(NR + 1) / 2]
			else m = sprintf("%.3f", (v[NR / 2] + v[NR / 2 + 1]) / 2)
			printf "%s %s %s %d\n", m, v[1], v[NR], NR
		}'
}

# Turn the rounds of every scenario into its median, minimum, maximum and
# count.
summarize() {
	local k med lo hi n
	for k in "${!ALL_RPS[@]}"; do
		# shellcheck disable=SC2086  # the list splits into its numbers
		read -r med lo hi n <<<"$(stats ${ALL_RPS[$k]})"
		RPS[$k]=$med RPS_MIN[$k]=$lo RPS_MAX[$k]=$hi NRUN[$k]=$n
		unset "P50[$k]" "P99[$k]"
		if [ -n "${ALL_P50[$k]:-}" ]; then
			# shellcheck disable=SC2086
			read -r med _ _ _ <<<"$(stats ${ALL_P50[$k]})"
			P50[$k]=$med
		fi
		if [ -n "${ALL_P99[$k]:-}" ]; then
			# shellcheck disable=SC2086
			read -r med lo hi _ <<<"$(stats ${ALL_P99[$k]})"
			P99[$k]=$med P99_MIN[$k]=$lo P99_MAX[$k]=$hi
		fi
		if [ -n "${ALL_CPU[$k]:-}" ]; then
			# shellcheck disable=SC2086
			read -r med lo hi _ <<<"$(stats ${ALL_CPU[$k]})"
			CPU[$k]=$med CPU_MIN[$k]=$lo CPU_MAX[$k]=$hi
		fi
	done
}

# ---- start ----

mkdir -p "$OUT"
TMP=$(mktemp -d /tmp/idemproxy-bench.XXXXXX)
chmod 0755 "$TMP" # the cluster below runs as postgres and must reach $TMP/pg
PGDIR=$TMP/pg
T0=$(date +%s)

free_port && PGPORT=$FREE_PORT
free_port && UPSTREAM_PORT=$FREE_PORT
free_port && NGINX_PORT=$FREE_PORT
free_port && PROXY_PORT=$FREE_PORT
free_port && TLS_PROXY_PORT=$FREE_PORT
free_port && NGINX_TLS_PORT=$FREE_PORT
free_port && STATIC_PORT=$FREE_PORT
free_port && FWD_PORT=$FREE_PORT
free_port && NGINX_H2_PORT=$FREE_PORT
free_port && STATIC_H2_PORT=$FREE_PORT
free_port && BASE_PORT=$FREE_PORT
free_port && GRPC_UP_PORT=$FREE_PORT
free_port && GRPC_PROXY_PORT=$FREE_PORT
free_port && GRPC_NGINX_PORT=$FREE_PORT
free_port && HAPROXY_PORT=$FREE_PORT

start_pg
fsync=$(psql_q -c "SHOW fsync") || die "cannot query PostgreSQL"
sync_commit=$(psql_q -c "SHOW synchronous_commit") || die "cannot query PostgreSQL"
if [ "$fsync" != on ] || [ "$sync_commit" != on ]; then
	die "PostgreSQL runs with fsync=$fsync synchronous_commit=$sync_commit, expected on/on"
fi

# (f), (g): the file to download lives in memory (tmpfs), so the disk is
# not what is measured; uploads go to the sink.
SHM=$(mktemp -d /dev/shm/idemproxy-bench.XXXXXX 2>/dev/null || mktemp -d "$TMP/shm.XXXXXX")
mkdir -p "$SHM/files"
if want f || want g; then
	head -c $STREAM_BYTES /dev/zero >"$SHM/files/big" || die "cannot make the $STREAM_BYTES-byte file"
	chmod 0644 "$SHM/files/big"
fi
# nginx's workers run as an unprivileged user: they must read the file.
chmod 0755 "$SHM" "$SHM/files"
setsid "$PY" "$HERE/sink.py" 0 >"$TMP/sink.port" 2>"$TMP/sink.log" &
sink_pid=$!
for ((i = 0; i < READY_WAIT * 10; i++)); do
	SINK_PORT=$(head -n 1 "$TMP/sink.port" 2>/dev/null || true)
	[ -z "$SINK_PORT" ] || break
	sleep 0.1
done
[ -n "$SINK_PORT" ] || die "the upload sink did not start (see $TMP/sink.log)"

# (i): a key set and a token of each kind; (j): one certificate for both
# TLS listeners (nginx reads it as its unprivileged workers' master: root).
JWT_TOKENS=$("$PY" "$HERE/jwt.py" "$TMP/jwks.json") || die "could not make the JWT keys (python3-cryptography)"
ES_AUTH="Bearer $(sed -n 1p <<<"$JWT_TOKENS")"
RS_AUTH="Bearer $(sed -n 2p <<<"$JWT_TOKENS")"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
	-keyout "$TMP/tls.key" -out "$TMP/tls.crt" -subj /CN=localhost \
	-addext subjectAltName=IP:127.0.0.1,DNS:localhost >/dev/null 2>&1 ||
	die "could not make the TLS certificate"

mkdir -p "$TMP/upstream" "$TMP/nginx"
render "$HERE/upstream.nginx.conf.in" "$TMP/upstream/nginx.conf" \
	PREFIX="$TMP/upstream" PORT="$UPSTREAM_PORT" FILES="$SHM/files" SINK_PORT="$SINK_PORT"
render "$HERE/idemproxy.conf.in" "$TMP/idemproxy.conf" \
	PORT="$PROXY_PORT" UPSTREAM_PORT="$UPSTREAM_PORT" CONNINFO="$conninfo" WORKERS="$WORKERS" \
	JWKS="$TMP/jwks.json"
render "$HERE/idemproxy.conf.in" "$TMP/idemproxy-tls.conf" \
	PORT="$TLS_PROXY_PORT" UPSTREAM_PORT="$UPSTREAM_PORT" CONNINFO="$conninfo" WORKERS="$WORKERS" \
	JWKS="$TMP/jwks.json"
printf 'tls_certificate %s\ntls_certificate_key %s\n' "$TMP/tls.crt" "$TMP/tls.key" >>"$TMP/idemproxy-tls.conf"

"$BIN" -t -c "$TMP/idemproxy.conf" >/dev/null || die "the generated idemproxy.conf does not check out"
"$BIN" -t -c "$TMP/idemproxy-tls.conf" >/dev/null || die "the generated idemproxy-tls.conf does not check out"
"$BIN" migrate -c "$TMP/idemproxy.conf" >"$TMP/migrate.log" 2>&1 || {
	cat "$TMP/migrate.log" >&2
	die "idemproxy migrate failed"
}

# setsid: a Ctrl-C must reach this script, not the services; cleanup stops
# them in order.
setsid "$NGINX" -p "$TMP/upstream" -c "$TMP/upstream/nginx.conf" -e "$TMP/upstream/error.log" \
	>"$TMP/upstream/stderr.log" 2>&1 &
upstream_pid=$!
wait_listening "$upstream_pid" "$UPSTREAM_PORT" "nginx (upstream)" "$TMP/upstream/stderr.log"

setsid "$BIN" -c "$TMP/idemproxy.conf" >"$PROXY_LOG" 2>&1 &
proxy_pid=$!
wait_listening "$proxy_pid" "$PROXY_PORT" "idemproxy" "$PROXY_LOG"

# BENCH_BASELINE_BIN: the other binary with the same configuration, on its
# own port, the same database (the same schema: migrate above ran the
# binary under test's migrations; the baseline must accept them).
BASE=http://127.0.0.1:$BASE_PORT/api/items
if [ -n "$BASE_BIN" ]; then
	render "$HERE/idemproxy.conf.in" "$TMP/idemproxy-base.conf" \
		PORT="$BASE_PORT" UPSTREAM_PORT="$UPSTREAM_PORT" CONNINFO="$conninfo" WORKERS="$WORKERS" \
		JWKS="$TMP/jwks.json"
	"$BASE_BIN" -t -c "$TMP/idemproxy-base.conf" >/dev/null ||
		die "the baseline $BASE_BIN does not accept the generated idemproxy.conf"
	setsid "$BASE_BIN" -c "$TMP/idemproxy-base.conf" >>"$PROXY_LOG" 2>&1 &
	base_pid=$!
	wait_listening "$base_pid" "$BASE_PORT" "idemproxy (baseline)" "$PROXY_LOG"
	say "baseline: $BASE_BIN on :$BASE_PORT"
fi

IDEM=http://127.0.0.1:$PROXY_PORT/api/items
NGX=http://127.0.0.1:$NGINX_PORT/api/items
NGX_FWD=http://127.0.0.1:$FWD_PORT/api/items
STATIC=http://127.0.0.1:$STATIC_PORT/api/items
RUN_ID=$(od -An -N6 -tx1 /dev/urandom | tr -d ' \n')
REPLAY_BODY='{"name":"widget","qty":1,"tags":["bench"]}' # replay.lua's and client.py's

# POST replay.lua's request with key $2 to URL $1, head to $3, body to $4.
fetch_post() {
	run_bounded $((READY_WAIT + 5)) "$TMP/curl-post.log" curl -sS --max-time $READY_WAIT \
		-o "$4" -D "$3" -H "Idempotency-Key: $2" -H "X-Actor-Id: bench" \
		-H "Content-Type: application/json" --data-binary "$REPLAY_BODY" "$1" || {
		cat "$TMP/curl-post.log" >&2
		die "POST $1 failed"
	}
}

# Print the header names of response head $1, lower-case and sorted, but
# those nginx always sets its own way (Server, Date, Connection).
head_names() {
	tr -d '\r' <"$1" | awk -F: 'NR > 1 && NF > 1 { n = tolower($1)
		if (n != "server" && n != "date" && n != "connection") print n }' | sort
}

# (c): nginx's answer from memory is generated from a real replay, so that
# it carries the same status, headers and body: complete one key, replay it
# and write an nginx server that returns the same. Its Idempotency-Key-Expires
# is this replay's, a fixed date of the same length.
STATIC_KEY=s$RUN_ID-0
"$PY" "$HERE/client.py" warm "$PROXY_PORT" "s$RUN_ID" 1 || die "could not complete the probe key"
fetch_post "$IDEM" "$STATIC_KEY" "$TMP/replay.head" "$TMP/replay.body"
STATIC_STATUS=$(awk 'NR == 1 { print $2 }' "$TMP/replay.head")
grep -qi '^Idempotent-Replayed: true' "$TMP/replay.head" ||
	die "the probe POST was not answered as a replay: $(head -c 300 "$TMP/replay.head")"
if LC_ALL=C grep -q "[\\'\$]" "$TMP/replay.body" || [ "$(head_names "$TMP/replay.head" | grep -c '^content-type$')" != 1 ]; then
	die "the replay's body or headers cannot be written in nginx.conf: $(cat "$TMP/replay.head" "$TMP/replay.body")"
fi
{
	echo "server {"
	echo "	listen 127.0.0.1:$STATIC_PORT reuseport;"
	echo "	listen 127.0.0.1:$STATIC_H2_PORT http2 reuseport;"
	echo "	server_tokens off;"
	echo "	location / {"
	tr -d '\r' <"$TMP/replay.head" | awk 'NR > 1 && index($0, ":") {
		n = substr($0, 1, index($0, ":") - 1); v = substr($0, index($0, ":") + 1)
		sub(/^[ \t]+/, "", v); sub(/[ \t]+$/, "", v); l = tolower(n)
		if (v ~ /["\\$]/) { print "bad header " n > "/dev/stderr"; exit 1 }
		if (l == "content-type") printf "\t\tdefault_type \"%s\";\n", v
		else if (l != "content-length" && l != "server" && l != "date" && l != "connection")
			printf "\t\tadd_header %s \"%s\" always;\n", n, v }' || die "a replay header cannot be written in nginx.conf"
	printf "\t\treturn %s '%s';\n" "$STATIC_STATUS" "$(cat "$TMP/replay.body")"
	echo "	}"
	echo "}"
} >"$TMP/nginx/static.conf"

render "$HERE/proxy.nginx.conf.in" "$TMP/nginx/nginx.conf" \
	PREFIX="$TMP/nginx" PORT="$NGINX_PORT" FWD_PORT="$FWD_PORT" UPSTREAM_PORT="$UPSTREAM_PORT" WORKERS="$WORKERS" \
	TLS_PORT="$NGINX_TLS_PORT" TLS_CERT="$TMP/tls.crt" TLS_KEY="$TMP/tls.key" \
	H2_PORT="$NGINX_H2_PORT" STATIC_CONF="$TMP/nginx/static.conf"
setsid "$NGINX" -p "$TMP/nginx" -c "$TMP/nginx/nginx.conf" -e "$TMP/nginx/error.log" \
	>"$TMP/nginx/stderr.log" 2>&1 &
nginx_pid=$!
wait_listening "$nginx_pid" "$NGINX_PORT" "nginx (proxy)" "$TMP/nginx/stderr.log"
wait_listening "$nginx_pid" "$STATIC_PORT" "nginx (static)" "$TMP/nginx/stderr.log"
wait_listening "$nginx_pid" "$FWD_PORT" "nginx (forwarding headers)" "$TMP/nginx/stderr.log"
wait_listening "$nginx_pid" "$NGINX_H2_PORT" "nginx (http2)" "$TMP/nginx/stderr.log"
# (c) compares replays with this nginx's static server: it must have as
# many workers as idemproxy (worker_processes WORKERS, checked here).
for ((i = 0; i < READY_WAIT * 10; i++)); do
	NGINX_WORKERS=$(pgrep -c -P "$nginx_pid" || true)
	[ "$NGINX_WORKERS" != "$WORKERS" ] || break
	sleep 0.1
done
[ "$NGINX_WORKERS" = "$WORKERS" ] || die "the nginx proxy runs $NGINX_WORKERS workers, not $WORKERS"

# (a): HAProxy, one process of WORKERS threads, setting the same forwarding
# headers as the nginx proxy's FWD_PORT server.
HAP=http://127.0.0.1:$HAPROXY_PORT/api/items
if want a; then
	mkdir -p "$TMP/haproxy"
	render "$HERE/haproxy.cfg.in" "$TMP/haproxy/haproxy.cfg" \
		PREFIX="$TMP/haproxy" PORT="$HAPROXY_PORT" UPSTREAM_PORT="$UPSTREAM_PORT" WORKERS="$WORKERS"
	"$HAPROXY" -c -q -f "$TMP/haproxy/haproxy.cfg" >"$TMP/haproxy/check.log" 2>&1 || {
		cat "$TMP/haproxy/check.log" >&2
		die "the generated haproxy.cfg does not check out"
	}
	setsid "$HAPROXY" -db -f "$TMP/haproxy/haproxy.cfg" >"$TMP/haproxy/stderr.log" 2>&1 &
	haproxy_pid=$!
	wait_listening "$haproxy_pid" "$HAPROXY_PORT" "HAProxy" "$TMP/haproxy/stderr.log"
fi

# The same request to nginx: the same status, header names and body bytes.
fetch_post "$STATIC" "$STATIC_KEY" "$TMP/static.head" "$TMP/static.body"
if [ "$(awk 'NR == 1 { print $2 }' "$TMP/static.head")" != "$STATIC_STATUS" ] ||
	! cmp -s "$TMP/replay.body" "$TMP/static.body" ||
	[ "$(head_names "$TMP/replay.head")" != "$(head_names "$TMP/static.head")" ]; then
	cat "$TMP/replay.head" "$TMP/replay.body" >&2
	echo >&2
	cat "$TMP/static.head" "$TMP/static.body" >&2
	die "nginx's static answer differs from idemproxy's replay (above)"
fi
STATIC_NOTE="replay $(wc -c <"$TMP/replay.head")+$(wc -c <"$TMP/replay.body") bytes (head+body), nginx static $(wc -c <"$TMP/static.head")+$(wc -c <"$TMP/static.body") (its own Server, Date, Connection)"
say "static answer: $STATIC_NOTE"

say "upstream :$UPSTREAM_PORT, nginx proxy :$NGINX_PORT (static :$STATIC_PORT), HAProxy :$HAPROXY_PORT, idemproxy :$PROXY_PORT (workers $WORKERS)"

# (a) pass-through GET, nginx with idemproxy's forwarding headers, idemproxy,
# HAProxy with the same headers and nginx as configured by default
# alternating, with the CPU time of each proxy's own processes (not the
# upstream's, not wrk's)
if want a; then
	for url in "$NGX_FWD" "$NGX" "$HAP" "$IDEM" ${BASE_BIN:+"$BASE"}; do
		run_bounded $((WARMUP_SECONDS + RUN_GRACE)) /dev/null \
			wrk -t$WRK_THREADS -c64 -d${WARMUP_SECONDS}s "$url" ||
			say "warm-up against $url failed"
	done
	for c in $CONNS; do
		for ((r = 1; r <= ROUNDS; r++)); do
			say "(a) round $r of $ROUNDS"
			run_wrk_cpu "$nginx_pid" nginx_fwd "$c" "$NGX_FWD"
			run_wrk_cpu "$proxy_pid" get "$c" "$IDEM"
			[ -z "$BASE_BIN" ] || run_wrk_cpu "$base_pid" base_get "$c" "$BASE"
			run_wrk_cpu "$haproxy_pid" haproxy_fwd "$c" "$HAP"
			run_wrk_cpu "$nginx_pid" nginx_get "$c" "$NGX"
		done
	done
	check_proxy
	kill -0 "$haproxy_pid" 2>/dev/null || die "HAProxy exited during the benchmark (see $TMP/haproxy/stderr.log)"
	[ -z "$BASE_BIN" ] || check_other "$base_pid" "idemproxy (baseline)"
fi

# (b) the pgbench ceiling, prepared and unnamed, and owner POSTs, each run
# on an emptied table; fresh keys (and pgbench operations) every round
if want b; then
	for c in $CONNS; do
		for ((r = 1; r <= ROUNDS; r++)); do
			say "(b) round $r of $ROUNDS"
			empty_table
			run_pgbench "$c" prepared "$r"
			empty_table
			run_pgbench "$c" extended "$r"
			empty_table
			run_wrk owner "$c" "$IDEM" -s "$HERE/owner.lua" -- "o$RUN_ID-$c-$r"
			check_owner_records owner "$c" "o$RUN_ID-$c-$r"
			if [ -n "$BASE_BIN" ]; then
				empty_table
				run_wrk base_owner "$c" "$BASE" -s "$HERE/owner.lua" -- "ob$RUN_ID-$c-$r"
				check_owner_records base_owner "$c" "ob$RUN_ID-$c-$r"
			fi
		done
	done
	check_proxy
	[ -z "$BASE_BIN" ] || check_other "$base_pid" "idemproxy (baseline)"
fi

# (c) replay POSTs over REPLAY_KEYS completed keys and nginx's static
# answer to the same request (the same workers) alternating
REPLAY_PREFIX=r$RUN_ID
"$PY" "$HERE/client.py" warm "$PROXY_PORT" "$REPLAY_PREFIX" $REPLAY_KEYS ||
	die "could not complete the $REPLAY_KEYS replay keys"
if [ -n "$BASE_BIN" ] && want c; then
	# the same completed keys, replayed once by the baseline (its cache)
	"$PY" "$HERE/client.py" warm "$BASE_PORT" "$REPLAY_PREFIX" $REPLAY_KEYS ||
		die "the baseline could not replay the $REPLAY_KEYS replay keys"
fi
if want c; then
	for c in $CONNS; do
		for ((r = 1; r <= ROUNDS; r++)); do
			say "(c) round $r of $ROUNDS"
			run_wrk replay "$c" "$IDEM" -s "$HERE/replay.lua" -- "$REPLAY_PREFIX" $REPLAY_KEYS
			[ -z "$BASE_BIN" ] || run_wrk base_replay "$c" "$BASE" -s "$HERE/replay.lua" -- "$REPLAY_PREFIX" $REPLAY_KEYS
			run_wrk nginx_static "$c" "$STATIC" -s "$HERE/replay.lua" -- "$REPLAY_PREFIX" $REPLAY_KEYS
		done
	done
	check_proxy
	[ -z "$BASE_BIN" ] || check_other "$base_pid" "idemproxy (baseline)"
fi

# (i) actor jwt next to the header actor, alternating at each count
if want i; then
	for c in $CONNS; do
		for ((r = 1; r <= ROUNDS; r++)); do
			say "(i) owner round $r of $ROUNDS"
			psql_q -c CHECKPOINT || true
			run_wrk owner_hdr "$c" "$IDEM" -s "$HERE/owner.lua" -- "oh$RUN_ID-$c-$r"
			check_owner_records owner_hdr "$c" "oh$RUN_ID-$c-$r"
			run_wrk owner_es "$c" "$IDEM" -s "$HERE/owner.lua" -- "oe$RUN_ID-$c-$r" /api/jwt-es "$ES_AUTH"
			check_owner_records owner_es "$c" "oe$RUN_ID-$c-$r" bench.jwt_es
			run_wrk owner_rs "$c" "$IDEM" -s "$HERE/owner.lua" -- "or$RUN_ID-$c-$r" /api/jwt-rs "$RS_AUTH"
			check_owner_records owner_rs "$c" "or$RUN_ID-$c-$r" bench.jwt_rs
		done
	done
	"$PY" "$HERE/client.py" warm "$PROXY_PORT" "$REPLAY_PREFIX" $REPLAY_KEYS /api/jwt-es "$ES_AUTH" ||
		die "could not complete the ES256 replay keys"
	"$PY" "$HERE/client.py" warm "$PROXY_PORT" "$REPLAY_PREFIX" $REPLAY_KEYS /api/jwt-rs "$RS_AUTH" ||
		die "could not complete the RS256 replay keys"
	for c in $CONNS; do
		for ((r = 1; r <= ROUNDS; r++)); do
			say "(i) replay round $r of $ROUNDS"
			run_wrk replay_hdr "$c" "$IDEM" -s "$HERE/replay.lua" -- "$REPLAY_PREFIX" $REPLAY_KEYS
			run_wrk replay_es "$c" "$IDEM" -s "$HERE/replay.lua" -- "$REPLAY_PREFIX" $REPLAY_KEYS /api/jwt-es "$ES_AUTH"
			run_wrk replay_rs "$c" "$IDEM" -s "$HERE/replay.lua" -- "$REPLAY_PREFIX" $REPLAY_KEYS /api/jwt-rs "$RS_AUTH"
		done
	done
	check_proxy
fi

# (j) through TLS listeners: a second idemproxy, and nginx's TLS port
if want j; then
	setsid "$BIN" -c "$TMP/idemproxy-tls.conf" >>"$PROXY_LOG" 2>&1 &
	tls_proxy_pid=$!
	wait_listening "$tls_proxy_pid" "$TLS_PROXY_PORT" "idemproxy (TLS)" "$PROXY_LOG"
	IDEM_TLS=https://127.0.0.1:$TLS_PROXY_PORT/api/items
	NGX_TLS=https://127.0.0.1:$NGINX_TLS_PORT/api/items
	for c in $CONNS; do
		run_wrk nginx_tls_get "$c" "$NGX_TLS"
		run_wrk tls_get "$c" "$IDEM_TLS"
		run_wrk nginx_tls_post "$c" "$NGX_TLS" -s "$HERE/owner.lua" -- "nt$RUN_ID-$c"
		run_wrk tls_owner "$c" "$IDEM_TLS" -s "$HERE/owner.lua" -- "ot$RUN_ID-$c"
		check_owner_records tls_owner "$c" "ot$RUN_ID-$c"
	done
	stop_pid "$tls_proxy_pid"
	tls_proxy_pid=""
	check_proxy
fi

# (k) HTTP/2 with h2load: what is missing for it is said, not fatal
H2_NOTE=""
if want k; then
	if ! command -v h2load >/dev/null; then
		H2_NOTE="h2load not found (nghttp2-client): (k) not measured"
	elif ! "$NGINX" -V 2>&1 | grep -q -- --with-http_v2_module; then
		H2_NOTE="$NGINX has no http2 module: (k) not measured"
	fi
	[ -z "$H2_NOTE" ] || say "$H2_NOTE"
fi
if want k && [ -z "$H2_NOTE" ]; then
	IDEM_H2=http://127.0.0.1:$PROXY_PORT/api/items
	NGX_H2=http://127.0.0.1:$NGINX_H2_PORT/api/items
	STATIC_H2=http://127.0.0.1:$STATIC_H2_PORT/api/items
	if ! run_bounded $((READY_WAIT + 5)) "$TMP/curl-h2.log" curl -sS --max-time $READY_WAIT \
		--http2-prior-knowledge -o /dev/null "$IDEM_H2"; then
		cat "$TMP/curl-h2.log" >&2
		H2_NOTE="idemproxy does not answer HTTP/2 with prior knowledge: (k) not measured"
		say "$H2_NOTE"
		MISSING=$((MISSING + 1))
	fi
fi
if want k && [ -z "$H2_NOTE" ]; then
	printf '%s' "$REPLAY_BODY" >"$TMP/replay-body.json"
	H2_REPLAY=(-d "$TMP/replay-body.json" -H "idempotency-key: $STATIC_KEY" -H "x-actor-id: bench"
		-H "content-type: application/json")
	for c in $CONNS; do
		for ((r = 1; r <= ROUNDS; r++)); do
			say "(k) round $r of $ROUNDS"
			run_cpu "$nginx_pid" run_h2load nginx_h2 "$c" "$NGX_H2"
			run_cpu "$proxy_pid" run_h2load h2_get "$c" "$IDEM_H2"
			run_h2load h2_replay "$c" "$IDEM_H2" "${H2_REPLAY[@]}"
			run_h2load nginx_h2_static "$c" "$STATIC_H2" "${H2_REPLAY[@]}"
		done
	done
	check_proxy
fi

# (l) gRPC unary pass-through: a second idemproxy with `upstream h2c://`
# and nginx's grpc_pass in front of one gRPC upstream; what is missing for
# it is said, not fatal
GRPC_NOTE=""
GRPC_UP_NAME=""
if want l; then
	mkdir -p "$TMP/grpc-up" "$TMP/grpc-nginx"
	render "$HERE/grpc-proxy.nginx.conf.in" "$TMP/grpc-nginx/nginx.conf" \
		PREFIX="$TMP/grpc-nginx" PORT="$GRPC_NGINX_PORT" UPSTREAM_PORT="$GRPC_UP_PORT" WORKERS="$WORKERS"
	render "$HERE/grpc-idemproxy.conf.in" "$TMP/idemproxy-grpc.conf" \
		PORT="$GRPC_PROXY_PORT" UPSTREAM_PORT="$GRPC_UP_PORT" CONNINFO="$conninfo" WORKERS="$WORKERS"
	if ! command -v h2load >/dev/null; then
		GRPC_NOTE="h2load not found (nghttp2-client): (l) not measured"
	elif ! "$NGINX" -t -p "$TMP/grpc-nginx" -c "$TMP/grpc-nginx/nginx.conf" -e "$TMP/grpc-nginx/error.log" \
		>"$TMP/grpc-nginx/check.log" 2>&1; then
		GRPC_NOTE="$NGINX does not accept grpc_pass (ngx_http_grpc_module: $(grep -m 1 emerg "$TMP/grpc-nginx/check.log" || tail -n 1 "$TMP/grpc-nginx/check.log")): (l) not measured"
	elif ! "$PY" -c 'import grpc' 2>/dev/null; then
		GRPC_NOTE="python3-grpcio not found (the probe of both proxies): (l) not measured"
	elif ! "$BIN" -t -c "$TMP/idemproxy-grpc.conf" >"$TMP/grpc-idemproxy-check.log" 2>&1; then
		cat "$TMP/grpc-idemproxy-check.log" >&2
		GRPC_NOTE="idemproxy does not accept upstream h2c:// (above): (l) not measured"
		MISSING=$((MISSING + 1))
	fi
	if [ -z "$GRPC_NOTE" ] && [ -z "$GRPC_UPSTREAM" ] && [ -f "$ECHO_MODULE" ]; then
		render "$HERE/grpc-upstream.nginx.conf.in" "$TMP/grpc-up/nginx.conf" \
			PREFIX="$TMP/grpc-up" PORT="$GRPC_UP_PORT" ECHO_MODULE="$ECHO_MODULE"
		if "$NGINX" -t -p "$TMP/grpc-up" -c "$TMP/grpc-up/nginx.conf" -e "$TMP/grpc-up/error.log" \
			>"$TMP/grpc-up/check.log" 2>&1; then
			GRPC_UP_NAME="nginx echo module, 1 worker"
		else
			say "nginx's echo module does not load ($(tail -n 1 "$TMP/grpc-up/check.log")): (l)'s upstream is python3-grpcio"
		fi
	fi
	[ -n "$GRPC_NOTE" ] || [ -n "$GRPC_UP_NAME" ] || GRPC_UP_NAME="python3-grpcio, $GRPC_SERVE_PROCS processes"
	[ -z "$GRPC_NOTE" ] || say "$GRPC_NOTE"
fi
if want l && [ -z "$GRPC_NOTE" ]; then
	if [ "${GRPC_UP_NAME#nginx}" != "$GRPC_UP_NAME" ]; then
		setsid "$NGINX" -p "$TMP/grpc-up" -c "$TMP/grpc-up/nginx.conf" -e "$TMP/grpc-up/error.log" \
			>"$TMP/grpc-up/stderr.log" 2>&1 &
	else
		setsid "$PY" "$HERE/grpc_client.py" serve "$GRPC_UP_PORT" $GRPC_SERVE_PROCS \
			>"$TMP/grpc-up/stderr.log" 2>&1 &
	fi
	grpc_up_pid=$!
	wait_listening "$grpc_up_pid" "$GRPC_UP_PORT" "the gRPC upstream" "$TMP/grpc-up/stderr.log"
	setsid "$NGINX" -p "$TMP/grpc-nginx" -c "$TMP/grpc-nginx/nginx.conf" -e "$TMP/grpc-nginx/error.log" \
		>"$TMP/grpc-nginx/stderr.log" 2>&1 &
	grpc_nginx_pid=$!
	wait_listening "$grpc_nginx_pid" "$GRPC_NGINX_PORT" "nginx (grpc_pass)" "$TMP/grpc-nginx/stderr.log"
	setsid "$BIN" -c "$TMP/idemproxy-grpc.conf" >>"$PROXY_LOG" 2>&1 &
	grpc_proxy_pid=$!
	wait_listening "$grpc_proxy_pid" "$GRPC_PROXY_PORT" "idemproxy (h2c upstream)" "$PROXY_LOG"
	# one call as h2load sends it: an uncompressed length-prefixed message
	printf '\0\0\0\0'"\\x$(printf %02x ${#GRPC_PAYLOAD})"'%s' "$GRPC_PAYLOAD" >"$TMP/grpc-msg.bin"
	for port in "$GRPC_UP_PORT" "$GRPC_NGINX_PORT" "$GRPC_PROXY_PORT"; do
		if ! run_bounded $((READY_WAIT + 20)) "$TMP/grpc-probe.log" \
			"$PY" "$HERE/grpc_client.py" probe "$port" "$TMP/grpc-msg.bin"; then
			cat "$TMP/grpc-probe.log" >&2
			GRPC_NOTE="a gRPC call through :$port did not come back OK with its message: (l) not measured"
			say "$GRPC_NOTE"
			MISSING=$((MISSING + 1))
			break
		fi
	done
fi
if want l && [ -z "$GRPC_NOTE" ]; then
	IDEM_GRPC=http://127.0.0.1:$GRPC_PROXY_PORT/bench.Echo/Unary
	NGX_GRPC=http://127.0.0.1:$GRPC_NGINX_PORT/bench.Echo/Unary
	GRPC_ARGS=(-d "$TMP/grpc-msg.bin" -H "content-type: application/grpc" -H "te: trailers")
	for url in "$NGX_GRPC" "$IDEM_GRPC"; do
		run_bounded $((WARMUP_SECONDS + RUN_GRACE)) /dev/null \
			h2load -t$WRK_THREADS -c$H2_CLIENTS -m$((64 / H2_CLIENTS)) -D $WARMUP_SECONDS \
			"${GRPC_ARGS[@]}" "$url" || say "warm-up against $url failed"
	done
	for c in $CONNS; do
		for ((r = 1; r <= ROUNDS; r++)); do
			say "(l) round $r of $ROUNDS"
			run_cpu "$grpc_nginx_pid" run_h2load nginx_grpc "$c" "$NGX_GRPC" "${GRPC_ARGS[@]}"
			run_cpu "$grpc_proxy_pid" run_h2load grpc "$c" "$IDEM_GRPC" "${GRPC_ARGS[@]}"
		done
	done
	check_other "$grpc_proxy_pid" "idemproxy (h2c upstream)"
	# and still answering every call as gRPC after the load
	for port in "$GRPC_NGINX_PORT" "$GRPC_PROXY_PORT"; do
		if ! run_bounded $((READY_WAIT + 20)) "$TMP/grpc-probe.log" \
			"$PY" "$HERE/grpc_client.py" probe "$port" "$TMP/grpc-msg.bin"; then
			cat "$TMP/grpc-probe.log" >&2
			say "after (l), a gRPC call through :$port did not come back OK with its message"
			MISSING=$((MISSING + 1))
		fi
	done
	stop_pid "$grpc_proxy_pid"
	stop_pid "$grpc_nginx_pid"
	stop_pid "$grpc_up_pid"
	grpc_proxy_pid="" grpc_nginx_pid="" grpc_up_pid=""
fi

# (d) the same with MILLION records in the table
if [ "$SKIP_MILLION" = 1 ] || ! want d; then
	say "skipping the $MILLION-record runs (BENCH_SKIP_MILLION=1 or BENCH_ONLY)"
else
	say "loading $MILLION records"
	t=$(date +%s)
	run_bounded $SQL_TIMEOUT - "$PGBIN/psql" -h "$PGSOCK" -p "$PGPORT" -U postgres -d idemproxy \
		-X -q -v ON_ERROR_STOP=1 -v n=$MILLION -f "$HERE/load-million.sql" ||
		die "loading $MILLION records failed"
	# VACUUM as well as ANALYZE: a freshly loaded table would otherwise get
	# an insert-triggered autovacuum in the middle of the runs below.
	psql_q -c "VACUUM (ANALYZE) idempotency_records" -c CHECKPOINT ||
		die "VACUUM ANALYZE after the load failed"
	say "loaded in $(($(date +%s) - t))s: $(psql_q -c "SELECT pg_size_pretty(pg_total_relation_size('idempotency_records'))")"
	for c in $CONNS; do
		psql_q -c CHECKPOINT || true
		run_wrk owner_1m "$c" "$IDEM" -s "$HERE/owner.lua" -- "m$RUN_ID-$c"
		check_owner_records owner_1m "$c" "m$RUN_ID-$c"
	done
	for c in $CONNS; do
		run_wrk replay_1m "$c" "$IDEM" -s "$HERE/replay.lua" -- "$REPLAY_PREFIX" $REPLAY_KEYS
	done
	check_proxy
fi

# Run client.py MODE (idle or slow) for $2 seconds with the arguments after;
# it prints idemproxy's "VmRSS_KiB VmHWM_KiB", read into MEM_RSS_KIB and
# MEM_HWM_KIB (empty, and counted missing, when it failed).
measure_memory() {
	local mode=$1 secs=$2
	shift 2
	MEM_RSS_KIB=""
	MEM_HWM_KIB=""
	if run_bounded $((secs + RUN_GRACE)) "$TMP/$mode.txt" \
		"$PY" "$HERE/client.py" "$mode" "$PROXY_PORT" "$proxy_pid" "$@"; then
		read -r MEM_RSS_KIB MEM_HWM_KIB <"$TMP/$mode.txt" || true
	fi
	if [ -z "$MEM_HWM_KIB" ]; then
		cat "$TMP/$mode.txt" >&2 || true
		say "the $mode measurement failed"
		MISSING=$((MISSING + 1))
	fi
	check_proxy
}

RSS_KIB="" HWM_KIB="" SLOW_RSS_KIB="" FP_LINES="" # (e), (g), (h) when left out
# (e) RSS with IDLE_CONNS idle keep-alive connections
if want e; then
	say "opening $IDLE_CONNS idle keep-alive connections for ${IDLE_SECONDS}s"
	measure_memory idle $IDLE_SECONDS $IDLE_CONNS $IDLE_SECONDS
	RSS_KIB=$MEM_RSS_KIB
	HWM_KIB=$MEM_HWM_KIB
fi

# Print $1 / $2 with two decimals, or "" when either is missing or $2 is 0.
ratio() {
	awk -v a="$1" -v b="$2" 'BEGIN { if (a != "" && b != "" && b + 0 != 0) printf "%.2f", a / b }'
}

# 0 when $1 $2 $3 holds numerically (op ">=" or "<=").
holds() {
	awk -v a="$1" -v op="$2" -v b="$3" 'BEGIN { exit !(op == ">=" ? a + 0 >= b + 0 : a + 0 <= b + 0) }'
}

# Print "met" or "MISSED" for $1 OP $3, "n/a" when $1 is missing.
verdict() {
	if [ -z "$1" ]; then
		echo "n/a"
	elif holds "$1" "$2" "$3"; then
		echo "met"
	else
		echo "MISSED"
	fi
}

# Print number $2 in printf format $1, or "-" when it is missing.
fmt() {
	if [ -z "$2" ]; then
		echo "-"
	else
		# shellcheck disable=SC2059  # the format is the argument
		printf "$1" "$2"
	fi
}

# (f) streaming: one transfer with curl; store MiB/s under $1:$2 ($2 "down" or
# "up") when it moved all STREAM_BYTES, keeping the best of the runs.
declare -A MIBS
run_curl() {
	local name=$1 dir=$2 url=$3 out=$TMP/curl-$1-$2.txt size secs code mibs
	if [ "$dir" = down ]; then
		run_bounded $RUN_GRACE "$out" curl -sS -o /dev/null \
			-w '%{size_download} %{time_total} %{http_code}\n' "$url/big/big" || true
	else
		run_bounded $RUN_GRACE "$out" curl -sS -o /dev/null -T "$SHM/files/big" \
			-w '%{size_upload} %{time_total} %{http_code}\n' "$url/upload/put-$name" || true
	fi
	read -r size secs code <"$out" || true
	case "$code" in 200 | 201) ;; *) size=0 ;; esac
	if [ "${size:-0}" != $STREAM_BYTES ]; then
		cat "$out" >&2
		say "$name ${dir}load moved ${size:-0} of $STREAM_BYTES bytes (status ${code:-none})"
		return 0
	fi
	mibs=$(awk -v b="$size" -v t="$secs" 'BEGIN { printf "%.1f", b / 1048576 / t }')
	if [ -z "${MIBS[$name:$dir]:-}" ] || holds "$mibs" ">=" "${MIBS[$name:$dir]}"; then
		MIBS[$name:$dir]=$mibs
	fi
}

if want f; then
	say "(f) 1 GiB download and upload, $STREAM_RUNS runs each, idemproxy and nginx alternating"
	for dir in down up; do
		for ((i = 0; i < STREAM_RUNS; i++)); do
			run_curl nginx $dir "http://127.0.0.1:$NGINX_PORT"
			run_curl idemproxy $dir "http://127.0.0.1:$PROXY_PORT"
		done
		for name in nginx idemproxy; do
			[ -n "${MIBS[$name:$dir]:-}" ] || MISSING=$((MISSING + 1))
		done
	done
	check_proxy
fi

# (g) RSS with SLOW_READERS clients that stop reading 1 GiB responses
if want g; then
	say "(g) $SLOW_READERS clients that stop reading their 1 GiB responses, ${SLOW_SECONDS}s"
	measure_memory slow $SLOW_SECONDS $SLOW_READERS $SLOW_SECONDS /big/big
	SLOW_RSS_KIB=$MEM_RSS_KIB
fi

# (h) the fingerprint unit benchmark: "fingerprint SHAPE JSON_MS RAW_MS RATIO MIB OK"
if want h; then
	say "(h) fingerprints of 1 MiB JSON bodies (unit benchmark)"
	FP_LINES=$(IDEMPROXY_FP_BENCH=1 "$FP_BIN" | grep -E '^fingerprint [a-z0-9-]+ +[0-9.-]+ ') || FP_LINES=""
	[ -n "$FP_LINES" ] || { say "the fingerprint benchmark ($FP_BIN) gave nothing"; MISSING=$((MISSING + 1)); }
fi

# ---- report ----

CSV=$OUT/bench.csv
TXT=$OUT/bench.txt
DAT=$TMP/chart.dat
CHECKS=()
TABLE=()
W_RPS=23                  # table width of "rps (min–max)"
W_P99=20                  # table width of "p99 (min–max)"
CSV_PAD=,,,,,,,,,,,,,     # the 13 columns after "result", empty
: >"$DAT"
echo "section,scenario,connections,idemproxy_rps,idemproxy_p50_ms,idemproxy_p99_ms,reference,reference_rps,reference_p50_ms,reference_p99_ms,rps_ratio,p99_ratio,peak_rss_mib,target,result,idemproxy_rps_min,idemproxy_rps_max,idemproxy_p99_min_ms,idemproxy_p99_max_ms,reference_rps_min,reference_rps_max,reference_p99_min_ms,reference_p99_max_ms,rounds,reference_rounds,idemproxy_cpu_us_per_req,reference_cpu_us_per_req,cpu_ratio" >"$CSV"

# The empty-table figures are the references of (d): copy their rounds
# under the keys row() looks up, then take the medians of everything.
for c in $CONNS; do
	for k in owner replay; do
		[ -z "${ALL_RPS[$k:$c]:-}" ] || ALL_RPS[${k}_ref:$c]=${ALL_RPS[$k:$c]}
		[ -z "${ALL_P50[$k:$c]:-}" ] || ALL_P50[${k}_ref:$c]=${ALL_P50[$k:$c]}
		[ -z "${ALL_P99[$k:$c]:-}" ] || ALL_P99[${k}_ref:$c]=${ALL_P99[$k:$c]}
	done
done
summarize

# Copy the figures of key $2 in array $1 (a name) to key $3, if it has any.
copy_figure() {
	local -n fig=$1
	[ -z "${fig[$2]:-}" ] || fig[$3]=${fig[$2]}
}

# (a): the target's reference at each count is the faster (median rps) of
# the nginx proxy and HAProxy, both with the forwarding headers: its
# figures are copied to pass_ref, its name to REF_NAME.
declare -A REF_NAME
for c in $CONNS; do
	src=nginx_fwd
	REF_NAME[$c]="ref: nginx"
	if [ -n "${RPS[haproxy_fwd:$c]:-}" ] &&
		{ [ -z "${RPS[nginx_fwd:$c]:-}" ] || ! holds "${RPS[nginx_fwd:$c]}" ">=" "${RPS[haproxy_fwd:$c]}"; }; then
		src=haproxy_fwd
		REF_NAME[$c]="ref: haproxy"
	fi
	for arr in RPS RPS_MIN RPS_MAX P50 P99 P99_MIN P99_MAX CPU CPU_MIN CPU_MAX NRUN; do
		copy_figure $arr "$src:$c" "pass_ref:$c"
	done
done

# (b): the floor of an owner at one connection, done in series: one
# exchange through the faster pass-through reference of (a) plus one
# prepared claim+finish pair of pgbench, 1 / (1/PASS + 1/PGB) rps, from the
# medians of the same run (needs (a) and (b)).
FLOOR_PASS=${RPS[pass_ref:1]:-}
FLOOR_PGB=${RPS[pgbench_prepared:1]:-}
FLOOR_NOTE="not measured: needs (a) and (b) in the same run"
if [ -n "$FLOOR_PASS" ] && [ -n "$FLOOR_PGB" ]; then
	RPS[owner_floor:1]=$(awk -v a="$FLOOR_PASS" -v b="$FLOOR_PGB" 'BEGIN { printf "%.1f", 1 / (1 / a + 1 / b) }')
	NRUN[owner_floor:1]=1
	FLOOR_NOTE="1 / (1/$(fmt %.0f "$FLOOR_PASS") + 1/$(fmt %.0f "$FLOOR_PGB")) = $(fmt %.0f "${RPS[owner_floor:1]}") rps (pass-through ${REF_NAME[1]#ref: } at 1, pgbench prepared pairs/s at 1: medians)"
fi

# Print $2 right-aligned in $1 columns (an en dash is 3 bytes, 1 column).
pad() {
	local LC_ALL=C
	local w=$1 s=$2 t
	t=${s//–/-}
	printf '%*s%s' $((w > ${#t} ? w - ${#t} : 0)) "" "$s"
}

# Print median $2 in printf format $1 with "(min–max)" of $3 and $4 when
# there were $5 > 1 rounds; "-" when it is missing.
cell() {
	if [ -z "$2" ]; then
		echo "-"
	elif [ "${5:-1}" -gt 1 ]; then
		# shellcheck disable=SC2059  # the format is the argument
		printf "$1 ($1–$1)" "$2" "$3" "$4"
	else
		# shellcheck disable=SC2059
		printf "$1" "$2"
	fi
}

# Append a table line: section, label, connections, rps cell, p50, p99
# cell, reference name, its rps cell, p50, p99 cell, rps ratio, p99 ratio.
table_line() {
	TABLE+=("$(printf '%-3s %-20s %5s %s %8s %s   %-18s %s %8s %s   %6s %6s' \
		"$1" "$2" "$3" "$(pad $W_RPS "$4")" "$5" "$(pad $W_P99 "$6")" \
		"$7" "$(pad $W_RPS "$8")" "$9" "$(pad $W_P99 "${10}")" "${11}" "${12}")")
}

# Add a target check "$1 VALUE (target OP T): met" for value $2, op $3,
# target $4, and set VERDICT.
add_check() {
	VERDICT=$(verdict "$2" "$3" "$4")
	CHECKS+=("$(printf '%-44s %5s (target %s %s): %s' "$1" "$(fmt %.2f "$2")" "$3" "$4" "$VERDICT")")
}

# For each quintuple (check label, target name, value, op, target): add_check,
# and append "NAME OP TARGET" to the caller's target and the verdict to its
# result ("met/MISSED").
add_checks() {
	target="" result=""
	while [ $# -ge 5 ]; do
		add_check "$1" "$3" "$4" "$5"
		target+="${target:+; }$2 $4 $5"
		result+="${result:+/}$VERDICT"
		shift 5
	done
}

# One row (none for a section BENCH_ONLY leaves out): section (b-info,
# j-info, k-info: information only, no target; c-static: replays against
# nginx's static answer), label, idemproxy key, reference
# name, reference key, chart slot (0: not charted), connections. Appends to
# the table, the CSV, the chart data and the target checks; (a) adds its
# CPU per request line.
row() {
	local sec=$1 label=$2 key=$3:$7 refname=$4 refkey=$5:$7 slot=$6 c=$7
	want "${sec%%-*}" || return 0
	local rps=${RPS[$key]:-} p50=${P50[$key]:-} p99=${P99[$key]:-} n=${NRUN[$key]:-}
	local rrps=${RPS[$refkey]:-} rp50=${P50[$refkey]:-} rp99=${P99[$refkey]:-} rn=${NRUN[$refkey]:-}
	local cpu=${CPU[$key]:-} rcpu=${CPU[$refkey]:-}
	local rr pr cr="" target="" result="" what t
	rr=$(ratio "$rps" "$rrps")
	pr=$(ratio "$p99" "$rp99")
	case "$sec" in a | a-nginx | a-haproxy | a-info | a-base | k | l) cr=$(ratio "$cpu" "$rcpu") ;; esac
	case "$sec" in
	a)
		if [ "$c" = 64 ]; then
			add_checks "pass-through rps ratio, $c conns" "rps ratio" "$rr" ">=" $TARGET_PASS_RPS \
				"pass-through p99 ratio, $c conns" "p99 ratio" "$pr" "<=" $TARGET_PASS_P99 \
				"pass-through CPU/request ratio, $c conns" "CPU/request ratio" "$cr" "<=" $TARGET_PASS_CPU
		else
			target="none at 1 connection"
			result="info"
		fi
		;;
	a-nginx | a-haproxy)
		target="none: information; the target row takes the faster of nginx and HAProxy"
		result="info"
		;;
	a-info)
		target="none: nginx without forwarding headers; information"
		result="info"
		;;
	b)
		if [ "$c" = 1 ]; then
			target="none at 1 connection: the floor row is the target"
			result="info"
		else
			add_checks "owner/pgbench ratio, $c conns" "rps ratio" "$rr" ">=" $TARGET_OWNER_64
		fi
		;;
	b-info)
		target="none: unnamed statements; information"
		result="info"
		;;
	c-static)
		add_checks "replay/nginx static ratio, $c conns" "rps ratio" "$rr" ">=" $TARGET_STATIC \
			"replay/nginx static p99 ratio, $c conns" "p99 ratio" "$pr" "<=" $TARGET_STATIC_P99
		;;
	j-info | k-info)
		target="none: reported"
		result="info"
		;;
	k)
		if [ "$c" = 64 ]; then
			add_checks "h2 pass-through rps ratio, $c streams" "rps ratio" "$rr" ">=" $TARGET_H2_PASS \
				"h2 pass-through CPU/req ratio, $c streams" "CPU/request ratio" "$cr" "<=" $TARGET_PASS_CPU
		else
			target="none at 1 stream"
			result="info"
		fi
		;;
	l)
		if [ "$c" = 64 ]; then
			add_checks "gRPC pass-through rps ratio, $c streams" "rps ratio" "$rr" ">=" $TARGET_GRPC_PASS \
				"gRPC pass-through CPU/req ratio, $c streams" "CPU/request ratio" "$cr" "<=" $TARGET_PASS_CPU
		else
			target="none at 1 stream"
			result="info"
		fi
		;;
	a-base)
		add_checks "vs baseline: $label rps, $c conns" "rps ratio vs baseline" "$rr" ">=" $TARGET_BASELINE \
			"vs baseline: $label CPU, $c conns" "CPU/request ratio vs baseline" "$cr" "<=" \
			"$(awk -v t=$TARGET_BASELINE 'BEGIN { printf "%.2f", 2 - t }')"
		;;
	b-base | c-base)
		add_checks "vs baseline: $label rps, $c conns" "rps ratio vs baseline" "$rr" ">=" $TARGET_BASELINE
		;;
	*)
		case "$sec" in
		b-floor) what="owner/floor ratio" t=$TARGET_OWNER_FLOOR ;;
		d) what="$label 1M/empty ratio" t=$TARGET_MILLION ;;
		i) what="$label/header ratio" t=$TARGET_JWT ;;
		esac
		add_checks "$what, $c conns" "rps ratio" "$rr" ">=" "$t"
		;;
	esac
	table_line "${sec%%-*}" "$label" "$c" \
		"$(cell %.0f "$rps" "${RPS_MIN[$key]:-}" "${RPS_MAX[$key]:-}" "$n")" "$(fmt %.2f "$p50")" \
		"$(cell %.2f "$p99" "${P99_MIN[$key]:-}" "${P99_MAX[$key]:-}" "$n")" \
		"$refname" "$(cell %.0f "$rrps" "${RPS_MIN[$refkey]:-}" "${RPS_MAX[$refkey]:-}" "$rn")" "$(fmt %.2f "$rp50")" \
		"$(cell %.2f "$rp99" "${P99_MIN[$refkey]:-}" "${P99_MAX[$refkey]:-}" "$rn")" \
		"$(fmt %.2f "$rr")" "$(fmt %.2f "$pr")"
	if [ "${sec%%-*}" = a ] || [ "$sec" = k ] || [ "$sec" = l ]; then
		table_line "" "  CPU us/request" "$c" \
			"$(cell %.1f "$cpu" "${CPU_MIN[$key]:-}" "${CPU_MAX[$key]:-}" "$n")" - - "$refname" \
			"$(cell %.1f "$rcpu" "${CPU_MIN[$refkey]:-}" "${CPU_MAX[$refkey]:-}" "$rn")" - - \
			"$(fmt %.2f "$cr")" -
	fi
	echo "${sec%%-*},$label,$c,$rps,$p50,$p99,$refname,$rrps,$rp50,$rp99,$rr,$pr,,$target,$result,${RPS_MIN[$key]:-},${RPS_MAX[$key]:-},${P99_MIN[$key]:-},${P99_MAX[$key]:-},${RPS_MIN[$refkey]:-},${RPS_MAX[$refkey]:-},${P99_MIN[$refkey]:-},${P99_MAX[$refkey]:-},$n,$rn,$cpu,$rcpu,$cr" >>"$CSV"
	[ "$slot" = 0 ] || printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$c" "$slot" "${rps:-NaN}" "${rrps:-NaN}" \
		"${RPS_MIN[$key]:-NaN}" "${RPS_MAX[$key]:-NaN}" "${RPS_MIN[$refkey]:-NaN}" "${RPS_MAX[$refkey]:-NaN}" >>"$DAT"
}

for c in $CONNS; do
	row a "pass-through GET" get "${REF_NAME[$c]}" pass_ref 1 "$c"
	row a-nginx "pass-through GET" get "nginx proxy, fwd" nginx_fwd 0 "$c"
	row a-haproxy "pass-through GET" get "haproxy, fwd" haproxy_fwd 0 "$c"
	row a-info "pass-through GET" get "nginx proxy, plain" nginx_get 0 "$c"
	[ -z "$BASE_BIN" ] || row a-base "pass-through GET" get "baseline" base_get 0 "$c"
done
for c in $CONNS; do
	pgb="pgbench"
	[ "$c" = 1 ] || pgb="pgbench @$PGB_CLIENTS_64"
	row b "owner POST" owner "$pgb prepared" pgbench_prepared 2 "$c"
	row b-info "owner POST" owner "$pgb unnamed" pgbench_extended 0 "$c"
	[ "$c" != 1 ] || row b-floor "owner POST" owner "floor (pass+pgb)" owner_floor 3 "$c"
	[ -z "$BASE_BIN" ] || row b-base "owner POST" owner "baseline" base_owner 0 "$c"
done
for c in $CONNS; do
	row c-static "replay POST" replay "nginx static" nginx_static 4 "$c"
	[ -z "$BASE_BIN" ] || row c-base "replay POST" replay "baseline" base_replay 0 "$c"
done
for c in $CONNS; do
	row i "owner jwt ES256" owner_es "owner header" owner_hdr 0 "$c"
	row i "owner jwt RS256" owner_rs "owner header" owner_hdr 0 "$c"
	row i "replay jwt ES256" replay_es "replay header" replay_hdr 0 "$c"
	row i "replay jwt RS256" replay_rs "replay header" replay_hdr 0 "$c"
done
for c in $CONNS; do
	row j-info "TLS pass-through" tls_get "nginx TLS proxy" nginx_tls_get 0 "$c"
	row j-info "TLS owner POST" tls_owner "nginx TLS proxy" nginx_tls_post 0 "$c"
done
for c in $CONNS; do
	row k "h2 pass-through GET" h2_get "nginx http2, fwd" nginx_h2 0 "$c"
	row k-info "h2 replay POST" h2_replay "nginx static h2" nginx_h2_static 0 "$c"
done
for c in $CONNS; do
	row l "gRPC unary POST" grpc "nginx grpc_pass" nginx_grpc 0 "$c"
done
if [ "$SKIP_MILLION" != 1 ]; then
	for c in $CONNS; do
		row d "owner POST @1M" owner_1m "empty table" owner_ref 5 "$c"
	done
	for c in $CONNS; do
		row d "replay POST @1M" replay_1m "empty table" replay_ref 6 "$c"
	done
fi

RSS_MIB=""
HWM_MIB=""
if [ -n "$HWM_KIB" ]; then
	RSS_MIB=$(awk -v k="$RSS_KIB" 'BEGIN { printf "%.1f", k / 1024 }')
	HWM_MIB=$(awk -v k="$HWM_KIB" 'BEGIN { printf "%.1f", k / 1024 }')
fi
if want e; then
	rss_result=$(verdict "$HWM_MIB" "<=" $TARGET_RSS_MIB)
	echo "e,peak RSS with $IDLE_CONNS idle conns,$IDLE_CONNS,,,,,,,,,,$HWM_MIB,peak RSS <= $TARGET_RSS_MIB MiB,$rss_result$CSV_PAD" >>"$CSV"
	CHECKS+=("$(printf '%-44s %5s (target <= %s MiB): %s' "peak RSS (VmHWM), $IDLE_CONNS idle conns, MiB" "$(fmt %.1f "$HWM_MIB")" $TARGET_RSS_MIB "$rss_result")")
fi

# (f): MiB/s of idemproxy against nginx's.
SDAT=$TMP/stream.dat
: >"$SDAT"
slot=1
if want f; then
	for dir in down up; do
		label=$([ $dir = down ] && echo "download 1 GiB" || echo "upload 1 GiB")
		a=${MIBS[idemproxy:$dir]:-}
		b=${MIBS[nginx:$dir]:-}
		r=$(ratio "$a" "$b")
		res=$(verdict "$r" ">=" $TARGET_STREAM)
		echo "f,$label (MiB/s),1,$a,,,nginx proxy (buffering off),$b,,,$r,,,MiB/s ratio >= $TARGET_STREAM,$res$CSV_PAD" >>"$CSV"
		table_line f "$label" 1 "$(fmt %.0f "$a")" - - "nginx proxy" "$(fmt %.0f "$b")" - - "$(fmt %.2f "$r")" -
		CHECKS+=("$(printf '%-44s %5s (target >= %s): %s' "$label MiB/s ratio" "$(fmt %.2f "$r")" $TARGET_STREAM "$res")")
		printf '%s\t%s\t%s\n' "$slot" "${a:-NaN}" "${b:-NaN}" >>"$SDAT"
		slot=$((slot + 1))
	done
fi
SLOW_MIB=""
[ -z "$SLOW_RSS_KIB" ] || SLOW_MIB=$(awk -v k="$SLOW_RSS_KIB" 'BEGIN { printf "%.1f", k / 1024 }')
if want g; then
	slow_result=$(verdict "$SLOW_MIB" "<=" $TARGET_RSS_MIB)
	echo "g,RSS with $SLOW_READERS slow readers,$SLOW_READERS,,,,,,,,,,$SLOW_MIB,RSS <= $TARGET_RSS_MIB MiB,$slow_result$CSV_PAD" >>"$CSV"
	CHECKS+=("$(printf '%-44s %5s (target <= %s MiB): %s' "RSS (VmRSS), $SLOW_READERS slow readers, MiB" "$(fmt %.1f "$SLOW_MIB")" $TARGET_RSS_MIB "$slow_result")")
fi

FP_TABLE=()
while read -r _ shape json raw fratio mib _; do
	[ -n "$shape" ] || continue
	res_ms=$(verdict "$json" "<=" $TARGET_FP_MS)
	res_mib=$(verdict "$mib" "<=" $TARGET_FP_MIB)
	echo "h,fingerprint $shape (ms),1,$json,,,raw bytes,$raw,,,$fratio,,$mib,ms <= $TARGET_FP_MS; MiB beyond the body <= $TARGET_FP_MIB,$res_ms/$res_mib$CSV_PAD" >>"$CSV"
	FP_TABLE+=("$(printf '%-3s %-20s %8s ms %8s ms raw %6s x %6s MiB' h "$shape" "$json" "$raw" "$fratio" "$mib")")
	CHECKS+=("$(printf '%-44s %5s (target <= %s ms): %s; %s MiB (<= %s): %s' "fingerprint 1 MiB $shape, ms" "$json" $TARGET_FP_MS "$res_ms" "$mib" $TARGET_FP_MIB "$res_mib")")
done <<EOF_FP
$FP_LINES
EOF_FP

ELAPSED=$(($(date +%s) - T0))
{
	echo
	echo "idemproxy benchmark: $(date -u +'%Y-%m-%d %H:%M UTC'), $(nproc) CPUs ($(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)), workers $WORKERS"
	echo "wrk -t$WRK_THREADS (-t1 at 1 connection), ${SECONDS_PER}s per run; pgbench -c 1, and -c $PGB_CLIENTS_64 in the 64-connection rounds, -j $WRK_THREADS (pairs/s); PostgreSQL $(psql_q -c 'SHOW server_version' || echo '?'), fsync on, synchronous_commit on"
	echo "$("$BIN" --version 2>&1 | head -n 1), $("$NGINX" -v 2>&1 | sed 's|.*/|nginx |') (worker_processes $WORKERS, upstream keepalive 64)"
	echo "(a) (b) (c) (i) (k) (l): $ROUNDS rounds, the sides alternating (four in (a)); rps and p99 are the medians (min–max) of the rounds, ratios of the medians; (d) (j): one run"
	echo "(a) nginx proxy, fwd and haproxy, fwd: with the forwarding headers idemproxy sends; the target row's reference is the faster of the two at each count (ref: nginx or ref: haproxy); plain: nginx's default, none of them (information)"
	if want a; then
		echo "(a) $("$HAPROXY" -v 2>&1 | head -n 1 | sed 's/ - https.*//'): nbthread $WORKERS, mode http, option forwardfor, http-reuse always, no logging"
	fi
	echo "(b) owner vs floor at 1: $FLOOR_NOTE"
	echo "(a) CPU us/request: utime+stime of idemproxy's process, of the nginx proxy's master and workers, of HAProxy's process, per request; (b): each run on an emptied table"
	echo "(c) nginx static: the same request answered from memory with the replay's status, headers and body, $NGINX_WORKERS workers: $STATIC_NOTE"
	echo "(k) h2load, HTTP/2 with prior knowledge: at 1 one connection of one stream, at 64 $H2_CLIENTS connections of $((64 / H2_CLIENTS)) streams; the p50 column is h2load's mean (it has no percentiles); replays of one completed key${H2_NOTE:+; $H2_NOTE}"
	if want l; then
		echo "(l) gRPC unary with h2load: POST /bench.Echo/Unary, one ${#GRPC_PAYLOAD}-byte message, te: trailers; idemproxy upstream h2c:// vs nginx grpc_pass (both with the forwarding headers, workers $WORKERS); upstream: ${GRPC_UP_NAME:-none}${GRPC_NOTE:+; $GRPC_NOTE}"
		for k in grpc nginx_grpc; do
			[ -n "${H2_DONE[$k]:-}" ] || continue
			# (h2load counts the status of a stream still open at the end
			# of -D, not its request: 2xx may exceed done by a few)
			if [ "${H2_DONE[$k]}" = "${H2_OK[$k]}" ] && [ "${H2_FAIL[$k]}" = 0 ] && [ "${H2_NOT2XX[$k]}" = 0 ]; then
				echo "(l) $k: all ${H2_DONE[$k]} requests of its runs succeeded, none answered other than 2xx"
			else
				echo "(l) $k: NOT all succeeded with 2xx: ${H2_DONE[$k]} done, ${H2_OK[$k]} succeeded, ${H2_FAIL[$k]} failed/errored/timed out, ${H2_NOT2XX[$k]} 3xx-5xx"
			fi
		done
	fi
	[ -z "$BASE_BIN" ] || echo "baseline (a) (b) (c): $BASE_BIN, $("$BASE_BIN" --version 2>&1 | head -n 1), in the same rounds, on :$BASE_PORT with the same configuration and database; vs baseline: target rps >= $TARGET_BASELINE x (no regression beyond the rounds' noise)"
	[ -z "$ONLY" ] || echo "only the sections $ONLY were run (BENCH_ONLY): the others show -"
	echo
	TABLE=("$(printf '%-3s %-20s %5s %s %8s %s   %-18s %s %8s %s   %6s %6s' \
		"" "scenario" "conns" "$(pad $W_RPS "rps (min–max)")" "p50 ms" "$(pad $W_P99 "p99 ms (min–max)")" \
		"reference" "$(pad $W_RPS "ref rps (min–max)")" "p50 ms" "$(pad $W_P99 "p99 ms (min–max)")" "rps x" "p99 x")" \
		"${TABLE[@]}")
	printf '%s\n' "${TABLE[@]}"
	if want e; then
		printf '%-3s %-20s %5s %10s\n' "e" "peak RSS (VmHWM)" "$IDLE_CONNS" "$(fmt %.1f "$HWM_MIB") MiB"
		echo "    (VmRSS with the $IDLE_CONNS connections open: $(fmt %.1f "$RSS_MIB") MiB; VmHWM is the peak over the whole run)"
	fi
	if want g; then
		printf '%-3s %-20s %5s %10s\n' "g" "RSS, slow readers" "$SLOW_READERS" "$(fmt %.1f "$SLOW_MIB") MiB"
		echo "    (f: MiB/s in the rps columns; g: VmRSS while $SLOW_READERS clients hold 1 GiB responses unread)"
	fi
	if want h; then
		printf '%s\n' "${FP_TABLE[@]}"
		echo "    (h: CPU ms of one fingerprint of a 1 MiB JSON body, the raw-bytes one, their ratio, heap beyond the body)"
	fi
	echo
	echo "targets (docs/performance.md; medians of $ROUNDS rounds where there are rounds):"
	printf '  %s\n' "${CHECKS[@]}"
	echo
	echo "wall time ${ELAPSED}s; CSV $CSV, chart $OUT/bench.png"
} | tee "$TXT"

subtitle="$(nproc) CPUs, workers $WORKERS, wrk ${SECONDS_PER}s per run, medians of $ROUNDS rounds (bars: min-max), $(date -u +%Y-%m-%d); peak RSS with $IDLE_CONNS idle connections: $(fmt %.1f "$HWM_MIB") MiB"
if [ -n "$ONLY" ]; then
	say "no chart for a run of some sections (BENCH_ONLY)"
elif ! gnuplot -e "data='$DAT'; sdata='$SDAT'; out='$OUT/bench.png'; subtitle='$subtitle'" "$HERE/chart.gp" 2>"$TMP/gnuplot.log"; then
	cat "$TMP/gnuplot.log" >&2
	say "gnuplot failed: no chart"
	MISSING=$((MISSING + 1))
fi

if [ "$MISSING" -gt 0 ]; then
	say "$MISSING measurement(s) could not be made (see above); docs/bench/ left unchanged"
	exit 1
fi
if [ "$NO_DOCS" = 1 ] || [ -n "$ONLY" ]; then
	say "docs/bench/ left unchanged (BENCH_NO_DOCS=1 or BENCH_ONLY)"
	exit 0
fi
mkdir -p "$DOCS"
cp "$CSV" "$DOCS/bench.csv"
cp "$OUT/bench.png" "$DOCS/bench.png"
say "copied to docs/bench/bench.csv and docs/bench/bench.png"
