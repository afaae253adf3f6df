# Shell helpers shared by scripts/run.sh, scripts/bench.sh and scripts/scale.sh
# (bash). The including script defines say and die, READY_WAIT and STOP_WAIT,
# and PORT_TRIES when it calls free_port.

# 0 when something accepts TCP connections on 127.0.0.1:$1.
port_busy() {
	(exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# Set FREE_PORT to a free loopback port that no earlier call returned.
USED_PORTS=""
FREE_PORT=""
free_port() {
	local i p
	for ((i = 0; i < PORT_TRIES; i++)); do
		p=$((20000 + (RANDOM * 7 + i) % 30000))
		case " $USED_PORTS " in *" $p "*) continue ;; esac
		if ! port_busy "$p"; then
			USED_PORTS="$USED_PORTS $p"
			# shellcheck disable=SC2034  # read by the including script
			FREE_PORT=$p
			return 0
		fi
	done
	die "no free loopback port found in $PORT_TRIES tries"
}

# wait_listening PID PORT NAME [LOG]: wait (bounded by READY_WAIT) until
# PORT accepts connections; fail if PID exits first, showing LOG's tail.
wait_listening() {
	local pid=$1 port=$2 name=$3 log=${4:-} i
	for ((i = 0; i < READY_WAIT * 10; i++)); do
		if ! kill -0 "$pid" 2>/dev/null; then
			if [ -n "$log" ]; then
				tail -n 20 "$log" >&2 || true
				die "$name exited during start-up (its output: $log)"
			fi
			die "$name exited during start-up (see the messages above)"
		fi
		port_busy "$port" && return 0
		sleep 0.1
	done
	die "$name did not accept connections on 127.0.0.1:$port within ${READY_WAIT}s"
}

# SIGTERM pid $1, wait up to STOP_WAIT seconds, then SIGKILL.
stop_pid() {
	local pid=$1 i
	[ -n "$pid" ] || return 0
	kill -TERM "$pid" 2>/dev/null || return 0
	for ((i = 0; i < STOP_WAIT * 10; i++)); do
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.1
	done
	if kill -0 "$pid" 2>/dev/null; then
		say "pid $pid did not stop within ${STOP_WAIT}s, killing it"
		kill -KILL "$pid" 2>/dev/null || true
	fi
	wait "$pid" 2>/dev/null || true
}

# start_pg: a private PostgreSQL cluster (scripts/pg.sh, default
# durability) in PGDIR on PGPORT; sets conninfo, started_pg=1 (the
# including script's cleanup stops it) and PGSOCK, the socket's directory
# (conninfo's host=). ROOT is the repository root.
start_pg() {
	say "PostgreSQL cluster in $PGDIR (fsync on, synchronous_commit on)"
	conninfo=$(bash "$ROOT/scripts/pg.sh" start "$PGDIR" "$PGPORT") || die "could not start PostgreSQL"
	# shellcheck disable=SC2034  # read by the including script's cleanup
	started_pg=1
	PGSOCK=$(sed -n 's/^host=\([^ ]*\) .*/\1/p' <<<"$conninfo")
	[ -n "$PGSOCK" ] || die "pg.sh printed no host: $conninfo"
}
