"""Bounded chaos test for idemproxy.

    /usr/bin/python3 -m tests.chaos.chaos [--seconds N] [--clients N] [--seed N]
                            (from the repository root; `make chaos`)

Starts a private PostgreSQL cluster, the integration suite's test upstream
and two idemproxy instances (IDEMPROXY_BIN, default ./idemproxy) sharing the
database. Client threads send keyed POSTs and retry them across both
instances while a chaos thread SIGKILLs and restarts instances and restarts
PostgreSQL. Afterwards the upstream's request log, the clients' records and
the record table are held to checks 1-6 (at most one upstream effect per
(actor, key), the same 2xx for every request of a key, nothing left in
progress, no unexpected death), listed in tests/lib/checker.py; the
high-availability stage tests/ha/ha.py shares that checker and the harness
in tests/lib/harness.py.

The last line is `chaos: requests=N kills=N pg_restarts=N effects=N
violations=N`; the exit status is 0 only without violations (2 when the
harness itself could not run). The whole run, set-up and checks included,
stays within --seconds + 60 s; every process and the cluster are cleaned up
on success, failure, SIGINT and SIGTERM. A failed run keeps its work
directory (configurations, idemproxy stderr, chaos-records.json) and prints
its path; --seed repeats the same client and chaos choices (the timing
still varies from run to run).
"""
import collections
import os
import random
import subprocess
import sys
import tempfile
import threading
import time

from tests.lib import harness
from tests.lib.checker import (REQUEST_TIMEOUT, MAX_STDERR_LINES, make_body, send, is_2xx,
                               check, stuck_records)
from tests.lib.cluster import Cluster, run_as_pg, PGBIN
from tests.lib.harness import INSTANCES, HarnessError, guarded, owner_extra, proxy_settings
from tests.lib.upstream import Upstream

DEFAULT_SECONDS = 240
DEFAULT_CLIENTS = 8
BUDGET_SLACK = 55           # hard stop: SIGALRM at seconds + this
END_RESERVE = 15.0          # of --seconds, kept for the drain, sweep wait and checks
MIN_RUN = 5.0               # shortest client phase whatever --seconds says
ACTOR_COUNT = 4

LEASE = 3.0
# Quotas set far above what a run makes: the instances read the actors over
# them every second through the kills and PostgreSQL restarts, and no
# request may be refused for them.
SETTINGS = dict(proxy_settings(LEASE), actor_max_records="100000000",
                actor_max_stored_bytes="64g", quota_refresh="1s")

# Client behaviour.
MAX_RETRIES = 3
RETRY_PAUSE = (0.05, 0.6)
OVERLAP_PROB = 0.2          # first retry sent while the owner is still in flight
OVERLAP_PAUSE = (0.02, 0.3)
CONFLICT_PROB = 0.15        # a retry with a different body
SHARED_KEY_PROB = 0.15      # reuse a recent key string under another actor
RECENT_KEYS = 64
OWNER_ACTIONS = (           # (cumulative probability, header, value)
    (0.08, "X-Test-Action", "reset"),
    (0.16, "X-Test-Delay", "2"),
    (0.30, "X-Test-Delay", "0.3"),
)

# Chaos behaviour.
CHAOS_PAUSE = (1.5, 4.0)
CHAOS_KILL_PROB = 0.4
CHAOS_PG_PROB = 0.3         # after the kill share; the rest does nothing
KILL_DOWN = (0.5, 1.0)
HEALTH_POLL = 0.1
PG_CTL_TIMEOUT = 30

# Draining and checking.
JOIN_TIMEOUT = REQUEST_TIMEOUT * 2 + 5
CHAOS_JOIN_TIMEOUT = 40.0
SWEEP_WAIT = LEASE + 3.0


class Run(harness.Run):
    """Shared state of one chaos run: processes, client records (History),
    events. Client threads add records under lock; the chaos thread owns the
    instances until stop is set and it has been joined."""

    def __init__(self, seed, clients):
        super().__init__("chaos", seed, clients, tempfile.mkdtemp(prefix="idemproxy-chaos."),
                         ACTOR_COUNT)
        self.cluster = None
        self.kills = 0
        self.pg_restarts = 0
        self.recent = collections.deque(maxlen=RECENT_KEYS)
        self.chaos_thread = None

    def pick_scope(self, rng, client, seq):
        """A fresh (actor, key); sometimes a recent key string under an actor
        that has not used it yet, so scopes differ only by actor."""
        with self.lock:
            if self.recent and rng.random() < SHARED_KEY_PROB:
                key = rng.choice(list(self.recent))
                free = [a for a in self.actors if a not in self.key_actors[key]]
                if free:
                    actor = rng.choice(free)
                    self.key_actors[key].add(actor)
                    return actor, key
            actor = rng.choice(self.actors)
            key = "ck%d-%d-%012x" % (client, seq, rng.getrandbits(48))
            self.key_actors[key] = {actor}
            self.recent.append(key)
            return actor, key


# ---- set-up ----

def setup(run):
    """Cluster, upstream, migration and the instances (of a copy of the
    binary, harness.copy_binary)."""
    harness.check_binary()
    binary = harness.copy_binary(run.workdir)
    run.cluster = Cluster()
    run.upstream = Upstream()
    harness.start_instances(run, binary, run.cluster.conninfo, SETTINGS, start_proxy)


def start_proxy(p):
    """Start p and wait for its port (harness.start_proxy); from then on
    the harness has not killed it."""
    harness.start_proxy(p)
    p.harness_killed = False


# ---- clients ----

def sequence(run, rng, client, seq):
    """One scope: the owner request, then 0-3 retries alternating between
    the instances, the first possibly while the owner is still in flight,
    some with a different body."""
    actor, key = run.pick_scope(rng, client, seq)
    body = make_body(actor, key, rng)
    first = rng.randrange(INSTANCES)
    retries = rng.randint(0, MAX_RETRIES)
    overlap = retries > 0 and rng.random() < OVERLAP_PROB
    extra = owner_extra(rng, OWNER_ACTIONS)
    owner = None
    if overlap:
        owner = threading.Thread(target=send, args=(run, actor, key, first, body, "owner", extra),
                                 daemon=True)
        owner.start()
        time.sleep(rng.uniform(*OVERLAP_PAUSE))
    else:
        send(run, actor, key, first, body, "owner", extra)
    for i in range(retries):
        if run.stop.is_set():
            break
        if i > 0 or not overlap:
            time.sleep(rng.uniform(*RETRY_PAUSE))
        inst = (first + i + 1) % INSTANCES
        if rng.random() < CONFLICT_PROB:
            send(run, actor, key, inst, make_body(actor, key, rng), "conflict")
        else:
            send(run, actor, key, inst, body, "retry")
    if owner is not None:
        owner.join(JOIN_TIMEOUT)


def client_loop(run, client):
    rng = random.Random(run.seed * 1000 + client)
    seq = 0
    while not run.stop.is_set() and time.monotonic() < run.run_end:
        sequence(run, rng, client, seq)
        seq += 1


def client_main(run, client):
    guarded(run, client_loop, run, client)


# ---- chaos ----

def check_alive(run):
    """Record and restart any instance that exited without the harness
    killing it."""
    for i, p in enumerate(run.proxies):
        if p.running() or p.harness_killed:
            continue
        code = p.proc.returncode if p.proc else None
        msg = "idemproxy%d exited with %r at t=%.1f without a SIGKILL from the harness:\n%s" % (
            i, code, run.rel(time.time()), p.stderr_tail(MAX_STDERR_LINES))
        with run.lock:
            run.deaths.append(msg)
        run.event("idemproxy%d died (%r), restarting" % (i, code))
        start_proxy(p)


def pause(run, seconds):
    """Sleep up to seconds, watching the instances; False once stopping."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if run.stop.is_set() or time.monotonic() >= run.run_end:
            return False
        check_alive(run)
        time.sleep(HEALTH_POLL)
    return True


def kill_instance(run, rng):
    i = rng.randrange(INSTANCES)
    p = run.proxies[i]
    p.harness_killed = True
    p.kill()
    with run.lock:
        run.kills += 1
    run.event("SIGKILL idemproxy%d" % i)
    time.sleep(rng.uniform(*KILL_DOWN))
    start_proxy(p)
    run.event("restarted idemproxy%d" % i)


def restart_pg(run):
    c = run.cluster
    run.event("pg_ctl restart -m fast")
    r = run_as_pg([PGBIN + "/pg_ctl", "-D", c.data, "-l", os.path.join(c.dir, "log"),
                   "-m", "fast", "-w", "-t", str(PG_CTL_TIMEOUT), "restart"],
                  start_new_session=True)
    if r.returncode != 0:
        raise HarnessError("pg_ctl restart failed:\n%s%s%s" % (r.stdout, r.stderr, c.log_tail()))
    with run.lock:
        run.pg_restarts += 1
    run.event("PostgreSQL back")


def chaos_loop(run, rng):
    while pause(run, rng.uniform(*CHAOS_PAUSE)):
        x = rng.random()
        if x < CHAOS_KILL_PROB:
            kill_instance(run, rng)
        elif x < CHAOS_KILL_PROB + CHAOS_PG_PROB:
            restart_pg(run)
    check_alive(run)


def chaos_main(run, rng):
    guarded(run, chaos_loop, run, rng)


# ---- reporting ----

def print_totals(run, effects, violations):
    scopes_2xx = sum(1 for v in run.history.values() if any(is_2xx(a) for a in v))
    n_effects = sum(len(v) for v in effects.values())
    print("chaos: seed=%d clients=%d wall=%.1fs" % (run.seed, run.clients,
                                                    time.time() - run.t0))
    print("chaos: scopes=%d scopes_with_2xx=%d scopes_with_effect=%d" % (
        len(run.history), scopes_2xx, len(effects)))
    harness.print_counts(run, "chaos")
    print("chaos: requests=%d kills=%d pg_restarts=%d effects=%d violations=%d" % (
        run.requests, run.kills, run.pg_restarts, n_effects, len(violations)))


# ---- main ----

def execute(run, args):
    """Set up, run the clients and the chaos thread, drain, check; returns
    the number of violations."""
    setup(run)
    print("chaos: setup done in %.1fs, work dir %s" % (time.time() - run.t0, run.workdir))
    sys.stdout.flush()
    run.run_end = time.monotonic() + max(MIN_RUN, args.seconds - (time.time() - run.t0)
                                         - END_RESERVE)
    chaos = threading.Thread(target=chaos_main,
                             args=(run, random.Random(run.seed * 1000 + 999)), daemon=True)
    run.chaos_thread = chaos
    clients = [threading.Thread(target=client_main, args=(run, i), daemon=True)
               for i in range(run.clients)]
    for t in clients:
        t.start()
    chaos.start()
    for t in clients:
        t.join(max(0.0, run.run_end - time.monotonic()) + JOIN_TIMEOUT)
    run.stop.set()
    chaos.join(CHAOS_JOIN_TIMEOUT)
    if run.errors:
        raise HarnessError("%s: %s" % (type(run.errors[0]).__name__, run.errors[0]))
    if chaos.is_alive() or any(t.is_alive() for t in clients):
        raise HarnessError("client or chaos threads did not finish")
    check_alive(run)
    run.event("drained; waiting %.0fs for the sweeper" % SWEEP_WAIT)
    time.sleep(SWEEP_WAIT)
    check_alive(run)

    log = run.upstream.log()
    stuck = stuck_records(run.cluster.records)
    harness.stop_instances(run)
    violations, effects = check(run, log, stuck)

    harness.report_failures(run, violations, effects, "chaos")
    print_totals(run, effects, violations)
    return len(violations)


def cleanup(run):
    """Stop everything the run started: the chaos thread first (it may be
    restarting an instance or PostgreSQL), then the processes and cluster."""
    run.stop.set()
    if run.chaos_thread is not None:
        run.chaos_thread.join(CHAOS_JOIN_TIMEOUT)
    harness.kill_processes(run)
    if run.cluster is not None:
        try:
            run.cluster.destroy()
        except (AssertionError, OSError, subprocess.SubprocessError) as e:
            print("chaos: cluster cleanup failed: %s" % e, file=sys.stderr)


def main():
    ap = harness.arg_parser("bounded chaos test for idemproxy", DEFAULT_SECONDS,
                            DEFAULT_CLIENTS, "wall time budget; the run ends within it plus 60 s")
    return harness.run_main("chaos", ap, BUDGET_SLACK, Run, execute, cleanup)


if __name__ == "__main__":
    sys.exit(main())
