"""The keyed-request history and its checker, shared by the chaos test
(tests/chaos/chaos.py) and the high-availability stage (tests/ha/ha.py).

A run records every request a client sent as an attempt (a dict: t0, t1,
inst, kind, extra, sent_sha, status, replayed, ctype, body, problem or
error) under its scope (actor, key) in History.history; check() then holds
those attempts against the upstream's request log and the record table:

  1. at most one upstream effect per (actor, key)
  2. exactly one effect for every (actor, key) where a client saw a 2xx
  3. every 2xx for a key is the same response: the owner's, byte for byte
     the upstream's answer to the single effect, and at most one of them is
     not marked Idempotent-Replayed
  4. a 2xx body's body_sha is the sha256 of the body sent with that request
     (no response ever reaches another actor or another body)
  5. no record left in_progress with a lease expired over a second ago
  6. no instance died except by the harness's SIGKILL, no sanitizer report

The caller's run object is a History with a `proxies` list (Proxy objects
of tests/lib/proxy.py, each with .port, .bin and its stderr) and `deaths`.
"""
import collections
import json
import threading
import time

from tests.lib import expect, http1, procs

ROUTE_PATH = "/api/chaos"
OWNER_STATUS = 201          # the upstream's default answer to a POST
NO_ANSWER_ACTIONS = ("reset", "silent", "truncate")
REQUEST_TIMEOUT = 8.0       # per request; the proxy answers within ~2 s

STUCK_GRACE = "1 second"
STUCK_COLUMNS = ("actor", "idem_key", "state", "lease_owner", "lease_expires_at",
                 "generation", "created_at")
MAX_VIOLATIONS_SHOWN = 20
MAX_HISTORIES_SHOWN = 5
MAX_STDERR_LINES = 20
KEY_HASH_PREFIX = 8         # hex digits of sha256(key) matched in proxy logs
BODY_SHOWN = 200


class History:
    """What the clients saw: attempts by scope, the harness's events and
    the instances' unexpected deaths. Client threads add under lock."""

    def __init__(self):
        self.t0 = time.time()
        self.lock = threading.Lock()
        self.history = collections.OrderedDict()  # (actor, key) -> [attempt]
        self.events = []                          # (time, text) from the fault thread
        self.deaths = []                          # unexpected exits, as messages
        self.requests = 0
        self.key_actors = {}                      # key -> {actor}
        self.proxies = []

    def rel(self, t):
        return t - self.t0

    def event(self, text):
        with self.lock:
            self.events.append((time.time(), text))

    def add(self, actor, key, attempt):
        with self.lock:
            self.requests += 1
            self.history.setdefault((actor, key), []).append(attempt)


# ---- clients ----

def make_body(actor, key, rng):
    return json.dumps({"actor": actor, "key": key, "nonce": rng.getrandbits(64),
                       "amount": rng.randint(1, 10000)}, sort_keys=True).encode()


def send(run, actor, key, inst, body, kind, extra=(), timeout=REQUEST_TIMEOUT):
    """One POST to instance inst; the outcome (or the error when no response
    arrived) is added to the scope's history and returned."""
    headers = [("Idempotency-Key", key), ("X-Actor-Id", actor),
               ("Content-Type", "application/json")] + list(extra)
    a = {"t0": time.time(), "inst": inst, "kind": kind,
         "extra": ["%s: %s" % h for h in extra], "sent_sha": expect.sha(body),
         "status": None}
    try:
        r = http1.request(run.proxies[inst].port, "POST", ROUTE_PATH, headers, body,
                            timeout=timeout)
        a["status"] = r.status
        a["replayed"] = r.headers.get("Idempotent-Replayed")
        a["ctype"] = r.headers.get("Content-Type")
        a["body"] = r.body
        a["problem"] = problem_name(r)
    except (OSError, http1.ConnectionClosed, ValueError) as e:
        a["error"] = "%s: %s" % (type(e).__name__, e)
    a["t1"] = time.time()
    run.add(actor, key, a)
    return a


def problem_name(r):
    ctype = (r.headers.get("Content-Type") or "").split(";")[0].strip().lower()
    if ctype != expect.PROBLEM_CTYPE:
        return None
    try:
        t = r.json().get("type", "")
    except (ValueError, AttributeError):
        return "(unparsable problem)"
    return t[len(expect.PROBLEM_BASE):] if t.startswith(expect.PROBLEM_BASE) else t


# ---- checks ----

def expected_answer(e):
    """(status, body) the upstream sent for log entry e, None when it sent none."""
    if (e.headers.get("X-Test-Action") or "") in NO_ANSWER_ACTIONS:
        return None
    body = json.dumps({"n": e.n, "method": e.method, "path": e.path,
                       "body_sha": expect.sha(e.body)}).encode()
    return int(e.headers.get("X-Test-Status") or OWNER_STATUS), body


def is_2xx(a):
    return a["status"] is not None and 200 <= a["status"] < 300


def is_replay(a):
    return (a.get("replayed") or "").lower() == "true"


def effects_by_scope(log):
    """The upstream log's POSTs to ROUTE_PATH by (actor, key)."""
    effects = collections.defaultdict(list)
    for e in log:
        if e.method == "POST" and e.path.split("?")[0] == ROUTE_PATH:
            effects[(e.headers.get("X-Actor-Id"), e.headers.get("Idempotency-Key"))].append(e)
    return effects


def check(run, log, stuck):
    """Violations as (check number, scope or None, message)."""
    out = []
    effects = effects_by_scope(log)

    for scope, es in effects.items():
        attempts = run.history.get(scope)
        if attempts is None:
            out.append((1, scope, "%d upstream effect(s) for a scope no client used" % len(es)))
            continue
        if len(es) > 1:
            out.append((1, scope, "%d upstream effects: n=%s" % (len(es), [e.n for e in es])))
        sent = {a["sent_sha"] for a in attempts}
        for e in es:
            if expect.sha(e.body) not in sent:
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
        fresh = [a for a in ok if not is_replay(a)]
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
        if procs.sanitizer_report(p.bin, p.stderr_text()):
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


def stuck_records(records):
    """in_progress rows whose lease ran out over STUCK_GRACE ago
    (records: a tests.lib.records.Records)."""
    ident, _ = records.table()
    return records.query(
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


def print_history(run, scope, effects, label="chaos"):
    actor, key = scope
    print("history of actor=%s key=%s:" % (actor, key))
    attempts = sorted(run.history.get(scope, []), key=lambda a: a["t0"])
    for a in attempts:
        print(fmt_attempt(run, a))
    for e in effects.get(scope, []):
        print("  upstream n=%d t=%7.3f %s %s body_sha=%s" % (
            e.n, run.rel(e.t), e.method, e.path, expect.sha(e.body)[:16])
            + "".join(" %s=%s" % (h, e.headers.get(h)) for h in
                      ("X-Test-Action", "X-Test-Delay") if e.headers.get(h)))
    if attempts:
        lo = min(a["t0"] for a in attempts) - 1.0
        hi = max(a["t1"] for a in attempts) + 1.0
        for t, text in run.events:
            if lo <= t <= hi:
                print("  %s t=%7.3f %s" % (label, run.rel(t), text))
    mark = expect.sha(key.encode())[:KEY_HASH_PREFIX]
    print("  idemproxy log lines with this key's hash (any actor):")
    for i, p in enumerate(run.proxies):
        lines = [ln for ln in p.stderr_text().splitlines() if mark in ln]
        for ln in lines[:MAX_STDERR_LINES]:
            print("  idemproxy%d: %s" % (i, ln))
        if len(lines) > MAX_STDERR_LINES:
            print("  idemproxy%d: ... %d more lines" % (i, len(lines) - MAX_STDERR_LINES))


def report_violations(run, violations, effects, label="chaos"):
    """Print the violations (at most MAX_VIOLATIONS_SHOWN) and the full
    history of the first MAX_HISTORIES_SHOWN scopes they name."""
    for num, scope, msg in violations[:MAX_VIOLATIONS_SHOWN]:
        where = "actor=%s key=%s: " % scope if scope else ""
        print("violation (check %d): %s%s" % (num, where, msg))
    if len(violations) > MAX_VIOLATIONS_SHOWN:
        print("... %d more violations" % (len(violations) - MAX_VIOLATIONS_SHOWN))
    shown = []
    for _, scope, _ in violations:
        if scope and scope not in shown and len(shown) < MAX_HISTORIES_SHOWN:
            shown.append(scope)
            print_history(run, scope, effects, label)


def dump_records(run, effects, path, seed=None):
    def attempt(a):
        d = dict(a)
        if "body" in d:
            d["body"] = d["body"].decode("utf-8", "replace")
        return d
    doc = {
        "seed": seed,
        "t0": run.t0,
        "events": run.events,
        "scopes": [{"actor": s[0], "key": s[1], "attempts": [attempt(a) for a in v],
                    "effects": [{"n": e.n, "t": e.t, "headers": e.headers.pairs,
                                 "body_sha": expect.sha(e.body)} for e in effects.get(s, [])]}
                   for s, v in run.history.items()],
    }
    with open(path, "w") as f:
        json.dump(doc, f, indent=1)
