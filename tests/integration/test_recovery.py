"""Leases and what happens after a failure: recovery forward, fencing of a
stalled owner, in_progress wait, and the sweeper. Every test counts the
upstream's effects exactly."""
import signal
import threading
import time

from tests.lib import helpers
from tests.lib.helpers import problem, course, assert_owner, assert_replay_of


FORWARD_ROUTE = """
route pay.forward {
    match        POST /api/forward
    recovery     forward
}
"""

WAIT_ROUTE = """
route pay.wait {
    match        POST /api/wait
    in_progress  wait 3s
}
"""



def test_recovery_forward_takes_over_unknown(proxy, upstream, pg, ids):
    """An unknown outcome with `recovery forward`: the first retry takes the
    record over (a new, larger generation) and forwards again with the same
    key; the retry after that replays."""
    p = proxy(routes=FORWARD_ROUTE)
    key = ids.key()
    first = p.post("/api/forward", key=key, actor=ids.actor, body=course(),
                   headers=[("X-Test-Action", "reset")])
    problem(first, "upstream-error", 502)
    row = pg.records.one(ids.actor)
    assert helpers.record_state(row) == "unknown"
    first_generation = row["generation"]
    again = p.post("/api/forward", key=key, actor=ids.actor, body=course())
    assert_owner(again)
    seen = upstream.requests(actor=ids.actor)
    assert len(seen) == 2
    assert [e.headers.get("Idempotency-Key") for e in seen] == [key, key]
    row = pg.records.one(ids.actor)
    assert helpers.record_state(row) == "completed" and row["generation"] > first_generation
    assert_replay_of(p.post("/api/forward", key=key, actor=ids.actor, body=course()), again)
    assert upstream.count(actor=ids.actor) == 2


def test_recovery_forward_takes_over_expired_lease(proxy, upstream, pg, ids):
    p = proxy({"upstream_timeout": "5s"}, routes=FORWARD_ROUTE)
    key = ids.key()
    with helpers.SlowOwner(p, upstream, "/api/forward", key, ids.actor, 1.5) as owner:
        first_generation = pg.records.one(ids.actor)["generation"]
        assert pg.records.expire_lease(ids.actor) == 1
        taker = p.post("/api/forward", key=key, actor=ids.actor, body=course())
        assert_owner(taker)
    # The first owner's finish came later with the old generation: refused.
    assert_owner(owner.response)
    assert "lease generation changed" in p.stderr_text()
    row = pg.records.one(ids.actor)
    assert row["generation"] > first_generation
    assert_replay_of(p.post("/api/forward", key=key, actor=ids.actor, body=course()), taker)
    assert upstream.count(actor=ids.actor) == 2


def test_recovery_forward_other_fingerprint_conflicts(proxy, upstream, pg, ids):
    """Recovery never takes over a record of a different request."""
    p = proxy(routes=FORWARD_ROUTE)
    key = ids.key()
    problem(p.post("/api/forward", key=key, actor=ids.actor, body=course(),
                   headers=[("X-Test-Action", "reset")]), "upstream-error", 502)
    problem(p.post("/api/forward", key=key, actor=ids.actor, body=course(title="Other")),
            "idempotency-conflict", 422)
    assert helpers.record_state(pg.records.one(ids.actor)) == "unknown"
    assert upstream.count(actor=ids.actor) == 1


def test_recovery_hold_keeps_unknown(proxy, upstream, pg, ids):
    p = proxy()
    key = ids.key()
    problem(p.post("/api/courses", key=key, actor=ids.actor, body=course(),
                   headers=[("X-Test-Action", "reset")]), "upstream-error", 502)
    first_generation = pg.records.one(ids.actor)["generation"]
    for _ in range(3):
        problem(p.post("/api/courses", key=key, actor=ids.actor, body=course()),
                "outcome-unknown", 409)
    assert pg.records.one(ids.actor)["generation"] == first_generation
    assert upstream.count(actor=ids.actor) == 1


def test_fencing_stalled_owner(proxy, upstream, pg, ids):
    """Instance A owns a record and stalls (SIGSTOP) past its lease while the
    upstream answers; instance B's retry takes over (recovery forward) and
    completes. A wakes (SIGCONT): its finish is refused and logged, its
    client still gets its own upstream response, and the record stays B's."""
    settings = {"upstream_timeout": "1s", "store_timeout": "500ms", "lease": "2s"}
    a = proxy(settings, routes=FORWARD_ROUTE)
    b = proxy(settings, routes=FORWARD_ROUTE)
    key = ids.key()
    with helpers.SlowOwner(a, upstream, "/api/forward", key, ids.actor, 0.3) as owner:
        first_generation = pg.records.one(ids.actor)["generation"]
        a.signal(signal.SIGSTOP)
        try:
            time.sleep(2.5)  # past A's lease
            taker = b.post("/api/forward", key=key, actor=ids.actor, body=course())
            assert_owner(taker)
        finally:
            a.signal(signal.SIGCONT)
    assert isinstance(owner.response, helpers.Response), owner.response
    assert owner.response.status in (201, 502, 504), owner.response
    assert helpers.poll(lambda: "lease generation changed" in a.stderr_text()), a.stderr_tail()
    row = pg.records.one(ids.actor)
    assert helpers.record_state(row) == "completed" and row["generation"] > first_generation
    for p in (a, b):
        assert_replay_of(p.post("/api/forward", key=key, actor=ids.actor, body=course()), taker)
    assert upstream.count(actor=ids.actor) == 2


def test_fencing_hold_stalled_owner_still_completes(proxy, upstream, pg, ids):
    """With recovery hold nobody takes the record over: a stalled owner that
    wakes after its lease still records its real outcome (its generation
    still holds), and retries replay it."""
    p = proxy({"upstream_timeout": "1s", "store_timeout": "500ms", "lease": "2s",
               "sweep_interval": "200ms"})
    key = ids.key()
    with helpers.SlowOwner(p, upstream, "/api/courses", key, ids.actor, 0.3) as owner:
        p.signal(signal.SIGSTOP)
        try:
            time.sleep(2.5)
            probe = pg.records.one(ids.actor)
            assert helpers.record_state(probe) == "in_progress"
        finally:
            p.signal(signal.SIGCONT)
    assert_owner(owner.response)
    assert helpers.poll(lambda: helpers.record_state(pg.records.one(ids.actor)) == "completed")
    assert_replay_of(p.post("/api/courses", key=key, actor=ids.actor, body=course()),
                     owner.response)
    assert upstream.count(actor=ids.actor) == 1


def test_in_progress_wait_gets_replay(proxy, upstream, pg, ids):
    """A duplicate that arrives while the owner runs waits for it and gets
    the replay, well before its wait would end (it is woken, not polling)."""
    p = proxy(routes=WAIT_ROUTE)
    key = ids.key()
    with helpers.SlowOwner(p, upstream, "/api/wait", key, ids.actor, 1.0) as owner:
        t0 = time.monotonic()
        dup = p.post("/api/wait", key=key, actor=ids.actor, body=course())
        waited = time.monotonic() - t0
    assert_owner(owner.response)
    assert_replay_of(dup, owner.response)
    assert waited < 2.5, waited
    assert upstream.count(actor=ids.actor) == 1


def test_in_progress_wait_across_instances(proxy, upstream, pg, ids):
    """The waiter is on another instance than the owner: the owner's finish
    reaches it through PostgreSQL (LISTEN/NOTIFY)."""
    a = proxy(routes=WAIT_ROUTE)
    b = proxy(routes=WAIT_ROUTE)
    key = ids.key()
    with helpers.SlowOwner(a, upstream, "/api/wait", key, ids.actor, 1.0) as owner:
        t0 = time.monotonic()
        dup = b.post("/api/wait", key=key, actor=ids.actor, body=course())
        waited = time.monotonic() - t0
    assert_replay_of(dup, owner.response)
    assert waited < 2.5, waited
    assert upstream.count(actor=ids.actor) == 1


def test_in_progress_wait_times_out(proxy, upstream, pg, ids):
    """The owner outlasts the wait: 409 operation-in-progress after it."""
    p = proxy({"upstream_timeout": "5s"}, routes=WAIT_ROUTE.replace("wait 3s", "wait 500ms"))
    key = ids.key()
    with helpers.SlowOwner(p, upstream, "/api/wait", key, ids.actor, 2.0) as owner:
        t0 = time.monotonic()
        dup = p.post("/api/wait", key=key, actor=ids.actor, body=course())
        waited = time.monotonic() - t0
        problem(dup, "operation-in-progress", 409)
        assert 0.4 < waited < 1.9, waited
    assert_owner(owner.response)
    assert upstream.count(actor=ids.actor) == 1


def test_in_progress_wait_owner_released(proxy, upstream, pg, ids):
    """The owner's request was not accepted (release_on): the waiter claims
    the freed slot itself and runs once."""
    p = proxy(routes=WAIT_ROUTE)
    key = ids.key()
    with helpers.SlowOwner(p, upstream, "/api/wait", key, ids.actor, 1.0,
                           headers=[("X-Test-Status", "503")]) as owner:
        dup = p.post("/api/wait", key=key, actor=ids.actor, body=course())
    assert owner.response.status == 503
    assert_owner(dup)
    assert upstream.count(actor=ids.actor) == 2


def test_in_progress_wait_many(proxy, upstream, pg, ids):
    """Ten waiters on two workers and two instances: all get the replay."""
    a = proxy(routes=WAIT_ROUTE)
    b = proxy(routes=WAIT_ROUTE)
    key = ids.key()
    results = []
    with helpers.SlowOwner(a, upstream, "/api/wait", key, ids.actor, 1.0) as owner:
        def dup(p):
            results.append(p.post("/api/wait", key=key, actor=ids.actor, body=course()))
        threads = [threading.Thread(target=dup, args=((a, b)[i % 2],)) for i in range(10)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(10)
    assert len(results) == 10
    for r in results:
        assert_replay_of(r, owner.response)
    assert upstream.count(actor=ids.actor) == 1


def test_sweeper_deletes_expired_and_marks_stale(proxy, upstream, pg, ids):
    """The sweeper deletes completed records past retention, marks
    in_progress records whose lease ran out as unknown, and never deletes
    an in_progress or unknown record."""
    p = proxy({"sweep_interval": "200ms", "upstream_timeout": "5s"},
              routes="""
route short.keep {
    match        POST /api/short
    retention    1s
}
""")
    done_key, unknown_key, stale_key = ids.key(), ids.key(), ids.key()
    assert_owner(p.post("/api/short", key=done_key, actor=ids.actor, body=course()))
    problem(p.post("/api/short", key=unknown_key, actor=ids.actor, body=course(),
                   headers=[("X-Test-Action", "reset")]), "upstream-error", 502)
    with helpers.SlowOwner(p, upstream, "/api/short", stale_key, ids.actor + "-stale", 3.0):
        pg.records.expire_lease(stale_key)

        def swept():
            keys = {r["idem_key"]: helpers.record_state(r) for r in pg.records.rows(ids.actor)}
            return done_key not in keys and keys.get(stale_key) == "unknown" and keys
        keys = helpers.poll(swept)
        assert keys, pg.records.rows(ids.actor)
        assert keys[unknown_key] == "unknown"
    # The stalled owner came back with the record's own generation: its
    # outcome still lands on the record the sweeper marked.
    assert helpers.poll(lambda: helpers.record_state(pg.records.one(stale_key)) == "completed")
    assert upstream.count(actor=ids.actor) == 2
    assert upstream.count(actor=ids.actor + "-stale") == 1


def test_sigterm_deadline_records_unknown(proxy, upstream, pg, ids):
    """SIGTERM, and the owner outlasts shutdown_timeout: idemproxy exits 0
    soon after the deadline, having marked the record unknown (its client
    gets 503 shutting-down, which names the cut-off instead of blaming the
    upstream), so a retry learns the outcome is unknown at once instead of
    waiting out a 30 s lease; nothing runs twice. The owner's log line
    counts durations: upstream_us is the time at the upstream, never a
    timestamp."""
    settings = {"upstream_timeout": "5s", "lease": "30s", "shutdown_timeout": "1s"}
    p = proxy(settings)
    key = ids.key()
    with helpers.SlowOwner(p, upstream, "/api/courses", key, ids.actor, 3.0) as owner:
        t0 = time.monotonic()
        p.signal(signal.SIGTERM)
        assert p.proc.wait(10) == 0, p.stderr_tail()
        stopped = time.monotonic() - t0
    assert stopped < 2.8, stopped
    problem(owner.response, "shutting-down", 503)
    assert "shutdown_timeout" in owner.response.json()["detail"]
    assert helpers.record_state(pg.records.one(ids.actor)) == "unknown"
    lines = [l for l in p.log_lines() if l.get("msg") == "request" and l.get("outcome") == "unknown"]
    assert len(lines) == 1, lines
    line = lines[0]
    assert line["status"] == 503
    # Cut off at the 1 s deadline: about a second at the upstream, within the whole.
    assert 500_000 <= line["upstream_us"] <= line["duration_us"] < 10_000_000, line
    q = proxy(settings)
    problem(q.post("/api/courses", key=key, actor=ids.actor, body=course()),
            "outcome-unknown", 409)
    assert upstream.count(actor=ids.actor) == 1


def test_sigterm_waiting_duplicate_answered(proxy, upstream, pg, ids):
    """A duplicate waiting (in_progress wait) when the deadline passes gets
    a 409 (in progress, or outcome-unknown once the owner was cut off and
    recorded unknown), not a dropped connection."""
    admin_port = helpers.free_port()
    p = proxy({"upstream_timeout": "5s", "shutdown_timeout": "500ms",
               "admin": "127.0.0.1:%d" % admin_port},
              routes=WAIT_ROUTE.replace("wait 3s", "wait 4s"))
    key = ids.key()
    got = []

    def waiting():
        r = helpers.request(admin_port, "GET", "/metrics",
                            [("Host", "127.0.0.1:%d" % admin_port)])
        return "\nidemproxy_waits_total 1\n" in r.body.decode()
    with helpers.SlowOwner(p, upstream, "/api/wait", key, ids.actor, 3.0):
        t = threading.Thread(target=lambda: got.append(
            p.post("/api/wait", key=key, actor=ids.actor, body=course())))
        t.start()
        # SIGTERM only once the duplicate is waiting (however loaded the machine).
        assert helpers.poll(waiting, 5.0, 0.02)
        p.signal(signal.SIGTERM)
        t.join(10)
        assert p.proc.wait(10) == 0
    assert len(got) == 1
    # In progress, or, when it was re-checking the record as the owner was
    # cut off and recorded unknown, outcome-unknown: a 409 that tells the
    # truth either way.
    assert got[0].status == 409, got[0]
    assert got[0].json()["type"].rsplit("/", 1)[1] in ("operation-in-progress",
                                                       "outcome-unknown"), got[0]
    assert upstream.count(actor=ids.actor) == 1
