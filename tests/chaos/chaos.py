#!/usr/bin/python3
"""Bounded chaos test for idemproxy.

    /usr/bin/python3 tests/chaos/chaos.py [--seconds N] [--clients N] [--seed N]

Starts a private PostgreSQL cluster, the integration suite's test upstream
and two idemproxy instances (IDEMPROXY_BIN, default ./idemproxy) sharing the
database. Client threads send keyed POSTs and retry them across both
instances while a chaos thread SIGKILLs and restarts instances and restarts
PostgreSQL. Afterwards the upstream's request log, the clients' records and
the record table are checked (tests/chaos/checker.py, which the
high-availability stage tests/ha/ha.py shares):

  1. at most one upstream effect per (actor, key)
  2. exactly one effect for every (actor, key) where a client saw a 2xx
  3. every 2xx for a key is the same response: the owner's, byte for byte
     the upstream's answer to the single effect, and at most one of them is
     not marked Idempotent-Replayed
  4. a 2xx body's body_sha is the sha256 of the body sent with that request
     (no response ever reaches another actor or another body)
  5. no record left in_progress with a lease expired over a second ago
  6. no instance died except by the harness's SIGKILL, no sanitizer report

The last line is `chaos: requests=N kills=N pg_restarts=N effects=N
violations=N`; the exit status is 0 only without violations (2 when the
harness itself could not run). The whole run, set-up and checks included,
stays within --seconds + 60 s; every process and the cluster are cleaned up
on success, failure, SIGINT and SIGTERM. A failed run keeps its work
directory (configurations, idemproxy stderr, chaos-records.json) and prints
its path; --seed repeats the same client and chaos choices (the timing
still varies from run to run).
"""
import argparse
import collections
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))

import pytest  # noqa: E402  (Proxy.start reports a failed start with pytest.fail)

import helpers  # noqa: E402
from conftest import (Cluster, Proxy, render_conf, base_settings, BASE_ROUTES,  # noqa: E402
                      idemproxy_bin, run_as_pg, PGBIN)
from checker import (ROUTE_PATH, REQUEST_TIMEOUT, MAX_STDERR_LINES,  # noqa: E402
                     History, make_body, send, is_2xx, is_replay, check, stuck_records,
                     report_violations, dump_records)

DEFAULT_SECONDS = 240
DEFAULT_CLIENTS = 8
BUDGET_SLACK = 55           # hard stop: SIGALRM at seconds + this
END_RESERVE = 15.0          # of --seconds, kept for the drain, sweep wait and checks
MIN_RUN = 5.0               # shortest client phase whatever --seconds says
INSTANCES = 2
ACTOR_COUNT = 4

LEASE = 3.0
SETTINGS = {
    "workers": "2",
    "upstream_timeout": "1s",
    "lease": "%ds" % LEASE,
    "store_timeout": "1s",
    "shutdown_timeout": "2s",
    "sweep_interval": "1s",
}
ROUTES = """
route chaos.op {
    match        POST %s
    actor        header X-Actor-Id
    fingerprint  json
    recovery     hold
    in_progress  reject
}
""" % ROUTE_PATH

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


class Abort(Exception):
    """SIGTERM or the wall-time budget ran out."""


class HarnessError(Exception):
    """The harness could not set up or run (not a product violation)."""


def on_signal(signum, frame):
    raise Abort("signal %d" % signum)


class Run(History):
    """Shared state of one chaos run: processes, client records (History),
    events. Client threads add records under lock; the chaos thread owns the
    instances until stop is set and it has been joined."""

    def __init__(self, seed, clients):
        super().__init__()
        self.seed = seed
        self.clients = clients
        self.stop = threading.Event()
        self.run_end = 0.0
        self.workdir = tempfile.mkdtemp(prefix="idemproxy-chaos.")
        self.cluster = None
        self.upstream = None
        self.kills = 0
        self.pg_restarts = 0
        self.recent = collections.deque(maxlen=RECENT_KEYS)
        self.actors = ["chaos-actor-%d" % i for i in range(ACTOR_COUNT)]
        self.chaos_thread = None
        self.errors = []                          # exceptions from the threads

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
    """Cluster, upstream, migration and the instances. The binary is copied
    into the work directory (same name, so sanitizer_report still knows an
    -asan build) so that a rebuild during the run cannot break a restart."""
    if not os.access(idemproxy_bin(), os.X_OK):
        raise HarnessError("%s is not built (set IDEMPROXY_BIN)" % idemproxy_bin())
    os.mkdir(os.path.join(run.workdir, "bin"))
    binary = os.path.join(run.workdir, "bin", os.path.basename(idemproxy_bin()))
    shutil.copy2(idemproxy_bin(), binary)
    run.cluster = Cluster()
    run.upstream = helpers.Upstream(os.path.join(ROOT, "tests", "integration", "upstream.py"))
    conninfo = run.cluster.conninfo

    migrate_conf = os.path.join(run.workdir, "migrate.conf")
    with open(migrate_conf, "w") as f:
        f.write(render_conf(base_settings(run.upstream.port, conninfo), BASE_ROUTES))
    r = subprocess.run([binary, "migrate", "-c", migrate_conf], stdin=subprocess.DEVNULL,
                       capture_output=True, text=True, timeout=60)
    if r.returncode != 0 or helpers.sanitizer_report(binary, r.stderr):
        raise HarnessError("migrate failed (%d):\n%s%s" % (r.returncode, r.stdout, r.stderr))

    for i in range(INSTANCES):
        s = base_settings(run.upstream.port, conninfo)
        s.update(SETTINGS)
        p = Proxy(run.workdir, render_conf(s, ROUTES), "idemproxy%d" % i)
        p.bin = binary
        r = subprocess.run([binary, "-t", "-c", p.conf], stdin=subprocess.DEVNULL,
                           capture_output=True, text=True, timeout=30)
        if r.returncode != 0:
            raise HarnessError("idemproxy -t rejects the configuration:\n%s%s"
                               % (r.stdout, r.stderr))
        p.harness_killed = False
        run.proxies.append(p)
        start_proxy(p)


def start_proxy(p):
    """Start p and wait for its port; raises HarnessError when it does not come up."""
    try:
        p.start()
    except pytest.fail.Exception as e:
        raise HarnessError(str(e))
    p.harness_killed = False


# ---- clients ----

def owner_extra(rng):
    x = rng.random()
    for p, name, value in OWNER_ACTIONS:
        if x < p:
            return [(name, value)]
    return []


def sequence(run, rng, client, seq):
    """One scope: the owner request, then 0-3 retries alternating between
    the instances, the first possibly while the owner is still in flight,
    some with a different body."""
    actor, key = run.pick_scope(rng, client, seq)
    body = make_body(actor, key, rng)
    first = rng.randrange(INSTANCES)
    retries = rng.randint(0, MAX_RETRIES)
    overlap = retries > 0 and rng.random() < OVERLAP_PROB
    extra = owner_extra(rng)
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


def client_main(run, client):
    rng = random.Random(run.seed * 1000 + client)
    seq = 0
    try:
        while not run.stop.is_set() and time.monotonic() < run.run_end:
            sequence(run, rng, client, seq)
            seq += 1
    except Exception as e:  # reported by the main thread
        run.errors.append(e)
        run.stop.set()


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


def chaos_main(run, rng):
    try:
        while pause(run, rng.uniform(*CHAOS_PAUSE)):
            x = rng.random()
            if x < CHAOS_KILL_PROB:
                kill_instance(run, rng)
            elif x < CHAOS_KILL_PROB + CHAOS_PG_PROB:
                restart_pg(run)
        check_alive(run)
    except Exception as e:  # reported by the main thread
        run.errors.append(e)
        run.stop.set()


# ---- reporting ----

def print_totals(run, effects, violations):
    statuses = collections.Counter()
    problems = collections.Counter()
    noresp = replays = 0
    for attempts in run.history.values():
        for a in attempts:
            if a["status"] is None:
                noresp += 1
                continue
            statuses[a["status"]] += 1
            if a.get("problem"):
                problems[a["problem"]] += 1
            if is_replay(a):
                replays += 1
    scopes_2xx = sum(1 for v in run.history.values() if any(is_2xx(a) for a in v))
    n_effects = sum(len(v) for v in effects.values())
    print("chaos: seed=%d clients=%d wall=%.1fs" % (run.seed, run.clients,
                                                    time.time() - run.t0))
    print("chaos: scopes=%d scopes_with_2xx=%d scopes_with_effect=%d" % (
        len(run.history), scopes_2xx, len(effects)))
    print("chaos: statuses %s" % " ".join("%d=%d" % kv for kv in sorted(statuses.items())))
    print("chaos: problems %s" % " ".join("%s=%d" % kv for kv in sorted(problems.items())))
    print("chaos: no_response=%d replays=%d" % (noresp, replays))
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
    for i, p in enumerate(run.proxies):
        code = p.stop()
        if code != 0:
            with run.lock:
                run.deaths.append("idemproxy%d exited with %r after SIGTERM:\n%s"
                                  % (i, code, p.stderr_tail()))
    violations, effects = check(run, log, stuck)

    report_violations(run, violations, effects)
    if violations:
        path = os.path.join(run.workdir, "chaos-records.json")
        dump_records(run, effects, path, run.seed)
        print("chaos: records in %s" % path)
    print_totals(run, effects, violations)
    return len(violations)


def cleanup(run, keep):
    """Stop everything the run started: the chaos thread first (it may be
    restarting an instance or PostgreSQL), then the processes and cluster."""
    run.stop.set()
    if run.chaos_thread is not None:
        run.chaos_thread.join(CHAOS_JOIN_TIMEOUT)
    for p in run.proxies:
        try:
            if p.running():
                p.kill()
        except OSError:
            pass
    if run.upstream is not None:
        try:
            run.upstream.stop()
        except OSError:
            pass
    if run.cluster is not None:
        try:
            run.cluster.destroy()
        except (AssertionError, OSError, subprocess.SubprocessError) as e:
            print("chaos: cluster cleanup failed: %s" % e, file=sys.stderr)
    if keep:
        print("chaos: kept %s" % run.workdir)
    else:
        shutil.rmtree(run.workdir, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description="bounded chaos test for idemproxy")
    ap.add_argument("--seconds", type=int, default=DEFAULT_SECONDS,
                    help="wall time budget; the run ends within it plus 60 s")
    ap.add_argument("--clients", type=int, default=DEFAULT_CLIENTS)
    ap.add_argument("--seed", type=int, default=None)
    args = ap.parse_args()
    if args.seconds < 1 or args.clients < 1:
        ap.error("--seconds and --clients must be positive")
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 31)
    os.environ.setdefault("ASAN_OPTIONS", "detect_leaks=1:abort_on_error=0")
    os.environ.setdefault("UBSAN_OPTIONS", "print_stacktrace=1")

    run = Run(seed, args.clients)
    print("chaos: seed=%d binary=%s seconds=%d clients=%d" % (
        seed, idemproxy_bin(), args.seconds, args.clients))
    sys.stdout.flush()
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGALRM, on_signal)
    signal.alarm(args.seconds + BUDGET_SLACK)
    status = 2
    try:
        status = 0 if execute(run, args) == 0 else 1
    except KeyboardInterrupt:
        print("chaos: interrupted (seed=%d)" % seed)
        status = 130
    except (Abort, HarnessError, AssertionError, OSError, subprocess.SubprocessError) as e:
        print("chaos: harness error (seed=%d): %s" % (seed, e))
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        cleanup(run, keep=status != 0)
    return status


if __name__ == "__main__":
    sys.exit(main())
