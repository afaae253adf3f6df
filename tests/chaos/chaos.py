#!/usr/bin/python3
"""Bounded chaos test for idemproxy.

    /usr/bin/python3 tests/chaos/chaos.py [--seconds N] [--clients N] [--seed N]

Starts a private PostgreSQL cluster, the integration suite's test upstream
and two idemproxy instances (IDEMPROXY_BIN, default ./idemproxy) sharing the
database. Client threads send keyed POSTs and retry them across both
instances while a chaos thread SIGKILLs and restarts instances and restarts
PostgreSQL. Afterwards the upstream's request log, the clients' records and
the record table are checked:

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
import json
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

DEFAULT_SECONDS = 240
DEFAULT_CLIENTS = 8
BUDGET_SLACK = 55           # hard stop: SIGALRM at seconds + this
END_RESERVE = 15.0          # of --seconds, kept for the drain, sweep wait and checks
MIN_RUN = 5.0               # shortest client phase whatever --seconds says
INSTANCES = 2
ACTOR_COUNT = 4
ROUTE_PATH = "/api/chaos"
OWNER_STATUS = 201          # the upstream's default answer to a POST

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
REQUEST_TIMEOUT = 8.0       # per request; the proxy answers within ~2 s
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
NO_ANSWER_ACTIONS = ("reset", "silent", "truncate")

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
STUCK_GRACE = "1 second"
STUCK_COLUMNS = ("actor", "idem_key", "state", "lease_owner", "lease_expires_at",
                 "generation", "created_at")
MAX_VIOLATIONS_SHOWN = 20
MAX_HISTORIES_SHOWN = 5
MAX_STDERR_LINES = 20
KEY_HASH_PREFIX = 8         # hex digits of sha256(key) matched in proxy logs
BODY_SHOWN = 200


class Abort(Exception):
    """SIGTERM or the wall-time budget ran out."""


class HarnessError(Exception):
    """The harness could not set up or run (not a product violation)."""


def on_signal(signum, frame):
    raise Abort("signal %d" % signum)


class Run:
    """Shared state of one chaos run: processes, client records, events.
    Client threads add records under lock; the chaos thread owns the
    instances until stop is set and it has been joined."""

    def __init__(self, seed, clients):
        self.seed = seed
        self.clients = clients
        self.t0 = time.time()
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.run_end = 0.0
        self.workdir = tempfile.mkdtemp(prefix="idemproxy-chaos.")
        self.cluster = None
        self.upstream = None
        self.proxies = []
        self.history = collections.OrderedDict()  # (actor, key) -> [attempt]
        self.events = []                          # (time, text) from the chaos thread
        self.deaths = []                          # unexpected exits, as messages
        self.requests = 0
        self.kills = 0
        self.pg_restarts = 0
        self.recent = collections.deque(maxlen=RECENT_KEYS)
        self.key_actors = {}
        self.actors = ["chaos-actor-%d" % i for i in range(ACTOR_COUNT)]
        self.chaos_thread = None
        self.errors = []                          # exceptions from the threads

    def rel(self, t):
        return t - self.t0

    def event(self, text):
        with self.lock:
            self.events.append((time.time(), text))

    def add(self, actor, key, attempt):
        with self.lock:
            self.requests += 1
            self.history.setdefault((actor, key), []).append(attempt)

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

def make_body(actor, key, rng):
    return json.dumps({"actor": actor, "key": key, "nonce": rng.getrandbits(64),
                       "amount": rng.randint(1, 10000)}, sort_keys=True).encode()


def send(run, actor, key, inst, body, kind, extra=()):
    """One POST to instance inst; the outcome (or the error when no response
    arrived) is added to the scope's history."""
    headers = [("Idempotency-Key", key), ("X-Actor-Id", actor),
               ("Content-Type", "application/json")] + list(extra)
    a = {"t0": time.time(), "inst": inst, "kind": kind,
         "extra": ["%s: %s" % h for h in extra], "sent_sha": helpers.sha(body),
         "status": None}
    try:
        r = helpers.request(run.proxies[inst].port, "POST", ROUTE_PATH, headers, body,
                            timeout=REQUEST_TIMEOUT)
        a["status"] = r.status
        a["replayed"] = r.headers.get("Idempotent-Replayed")
        a["ctype"] = r.headers.get("Content-Type")
        a["body"] = r.body
        a["problem"] = problem_name(r)
    except (OSError, helpers.ConnectionClosed, ValueError) as e:
        a["error"] = "%s: %s" % (type(e).__name__, e)
    a["t1"] = time.time()
    run.add(actor, key, a)


def problem_name(r):
    ctype = (r.headers.get("Content-Type") or "").split(";")[0].strip().lower()
    if ctype != helpers.PROBLEM_CTYPE:
        return None
    try:
        t = r.json().get("type", "")
    except (ValueError, AttributeError):
        return "(unparsable problem)"
    return t[len(helpers.PROBLEM_BASE):] if t.startswith(helpers.PROBLEM_BASE) else t


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


# ---- checks ----

def expected_answer(e):
    """(status, body) the upstream sent for log entry e, None when it sent none."""
    if (e.headers.get("X-Test-Action") or "") in NO_ANSWER_ACTIONS:
        return None
    body = json.dumps({"n": e.n, "method": e.method, "path": e.path,
                       "body_sha": helpers.sha(e.body)}).encode()
    return int(e.headers.get("X-Test-Status") or OWNER_STATUS), body


def is_2xx(a):
    return a["status"] is not None and 200 <= a["status"] < 300


def check(run, log, stuck):
    """Violations as (check number, scope or None, message)."""
    out = []
    effects = collections.defaultdict(list)
    for e in log:
        if e.method == "POST" and e.path.split("?")[0] == ROUTE_PATH:
            effects[(e.headers.get("X-Actor-Id"), e.headers.get("Idempotency-Key"))].append(e)

    for scope, es in effects.items():
        attempts = run.history.get(scope)
        if attempts is None:
            out.append((1, scope, "%d upstream effect(s) for a scope no client used" % len(es)))
            continue
        if len(es) > 1:
            out.append((1, scope, "%d upstream effects: n=%s" % (len(es), [e.n for e in es])))
        sent = {a["sent_sha"] for a in attempts}
        for e in es:
            if helpers.sha(e.body) not in sent:
                out.append((1, scope, "effect n=%d carries a body no client sent" % e.n))

    for scope, attempts in run.history.items():
        ok = [a for a in attempts if is_2xx(a)]
        if not ok:
            continue
        es = effects.get(scope, [])
        if not es:
            out.append((2, scope, "%d 2xx response(s) but no upstream effect" % len(ok)))
        ref = ok[0]
        for a in ok[1:]:
            if a["status"] != ref["status"] or a["body"] != ref["body"]:
                out.append((3, scope, "2xx responses differ: %d %r vs %d %r" % (
                    ref["status"], ref["body"][:BODY_SHOWN], a["status"], a["body"][:BODY_SHOWN])))
        fresh = [a for a in ok if (a.get("replayed") or "").lower() != "true"]
        if len(fresh) > 1:
            out.append((3, scope, "%d 2xx responses not marked Idempotent-Replayed" % len(fresh)))
        if len(es) == 1:
            want = expected_answer(es[0])
            if want is None:
                out.append((3, scope, "2xx although the upstream never answered effect n=%d"
                            % es[0].n))
            elif any((a["status"], a["body"]) != want for a in ok):
                out.append((3, scope, "2xx differs from the upstream's answer %d %r" % want))
        for a in ok:
            try:
                got = json.loads(a["body"].decode("utf-8")).get("body_sha")
            except (ValueError, AttributeError):
                got = None
            if got != a["sent_sha"]:
                out.append((4, scope, "%s on idemproxy%d got body_sha %r, sent %s" % (
                    a["kind"], a["inst"], got, a["sent_sha"])))

    for row in stuck:
        out.append((5, stored_scope(run, row),
                    "record still in_progress: %s" % ", ".join(
                        "%s=%s" % (k, row.get(k)) for k in STUCK_COLUMNS)))

    for msg in run.deaths:
        out.append((6, None, msg))
    for i, p in enumerate(run.proxies):
        if helpers.sanitizer_report(p.bin, p.stderr_text()):
            out.append((6, None, "sanitizer report in %s" % p.stderr_path))
    return out, effects


def stored_scope(run, row):
    """The client scope of a record row (the store may prefix the actor with
    its source, e.g. "h:"), or None."""
    key = str(row.get("idem_key"))
    actor = str(row.get("actor"))
    for a in run.key_actors.get(key, ()):
        if actor.endswith(a):
            return a, key
    return None


def stuck_records(run):
    ident, _ = run.cluster.records.table()
    return run.cluster.query(
        "SELECT * FROM %s WHERE state::text = 'in_progress' "
        "AND lease_expires_at < now() - interval '%s'" % (ident, STUCK_GRACE))


# ---- reporting ----

def fmt_attempt(run, a):
    s = "  t=%7.3f..%7.3f idemproxy%d %-8s %-20s " % (
        run.rel(a["t0"]), run.rel(a["t1"]), a["inst"], a["kind"], ",".join(a["extra"]) or "-")
    if a["status"] is None:
        return s + "no response (%s)" % a["error"]
    s += "%d" % a["status"]
    if a.get("replayed"):
        s += " replayed=%s" % a["replayed"]
    if a.get("problem"):
        s += " problem=%s" % a["problem"]
    else:
        s += " body=%r" % a["body"][:BODY_SHOWN]
    return s + " sent_sha=%s" % a["sent_sha"][:16]


def print_history(run, scope, effects):
    actor, key = scope
    print("history of actor=%s key=%s:" % (actor, key))
    attempts = sorted(run.history.get(scope, []), key=lambda a: a["t0"])
    for a in attempts:
        print(fmt_attempt(run, a))
    for e in effects.get(scope, []):
        print("  upstream n=%d t=%7.3f %s %s body_sha=%s" % (
            e.n, run.rel(e.t), e.method, e.path, helpers.sha(e.body)[:16])
            + "".join(" %s=%s" % (h, e.headers.get(h)) for h in
                      ("X-Test-Action", "X-Test-Delay") if e.headers.get(h)))
    if attempts:
        lo = min(a["t0"] for a in attempts) - 1.0
        hi = max(a["t1"] for a in attempts) + 1.0
        for t, text in run.events:
            if lo <= t <= hi:
                print("  chaos t=%7.3f %s" % (run.rel(t), text))
    mark = helpers.sha(key.encode())[:KEY_HASH_PREFIX]
    print("  idemproxy log lines with this key's hash (any actor):")
    for i, p in enumerate(run.proxies):
        lines = [ln for ln in p.stderr_text().splitlines() if mark in ln]
        for ln in lines[:MAX_STDERR_LINES]:
            print("  idemproxy%d: %s" % (i, ln))
        if len(lines) > MAX_STDERR_LINES:
            print("  idemproxy%d: ... %d more lines" % (i, len(lines) - MAX_STDERR_LINES))


def dump_records(run, effects, path):
    def attempt(a):
        d = dict(a)
        if "body" in d:
            d["body"] = d["body"].decode("utf-8", "replace")
        return d
    doc = {
        "seed": run.seed,
        "t0": run.t0,
        "events": run.events,
        "scopes": [{"actor": s[0], "key": s[1], "attempts": [attempt(a) for a in v],
                    "effects": [{"n": e.n, "t": e.t, "headers": e.headers.pairs,
                                 "body_sha": helpers.sha(e.body)} for e in effects.get(s, [])]}
                   for s, v in run.history.items()],
    }
    with open(path, "w") as f:
        json.dump(doc, f, indent=1)


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
            if (a.get("replayed") or "").lower() == "true":
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
    stuck = stuck_records(run)
    for i, p in enumerate(run.proxies):
        code = p.stop()
        if code != 0:
            with run.lock:
                run.deaths.append("idemproxy%d exited with %r after SIGTERM:\n%s"
                                  % (i, code, p.stderr_tail()))
    violations, effects = check(run, log, stuck)

    for num, scope, msg in violations[:MAX_VIOLATIONS_SHOWN]:
        where = "actor=%s key=%s: " % scope if scope else ""
        print("violation (check %d): %s%s" % (num, where, msg))
    if len(violations) > MAX_VIOLATIONS_SHOWN:
        print("... %d more violations" % (len(violations) - MAX_VIOLATIONS_SHOWN))
    shown = []
    for _, scope, _ in violations:
        if scope and scope not in shown and len(shown) < MAX_HISTORIES_SHOWN:
            shown.append(scope)
            print_history(run, scope, effects)
    if violations:
        path = os.path.join(run.workdir, "chaos-records.json")
        dump_records(run, effects, path)
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
