"""Upstream and store failures: unknown outcomes, release, recovery hold,
store unavailability."""
import threading
import time

import pytest

from tests.lib import helpers
from tests.lib.helpers import problem, course, assert_owner, assert_replay_of

POLL_LIMIT = 10.0


def test_upstream_silent_timeout_unknown(proxy, upstream, pg, ids):
    p = proxy({"upstream_timeout": "1s", "lease": "5s"})
    key = ids.key()
    t0 = time.monotonic()
    r = p.post("/api/courses", key=key, actor=ids.actor, body=course(),
               headers=[("X-Test-Action", "silent")])
    problem(r, "upstream-timeout", 504)
    assert time.monotonic() - t0 < 5
    assert helpers.record_state(pg.records.one(ids.actor)) == "unknown"
    again = p.post("/api/courses", key=key, actor=ids.actor, body=course())
    problem(again, "outcome-unknown", 409)
    assert upstream.count(actor=ids.actor) == 1


def test_upstream_reset_unknown(proxy, upstream, pg, ids):
    p = proxy()
    key = ids.key()
    r = p.post("/api/courses", key=key, actor=ids.actor, body=course(),
               headers=[("X-Test-Action", "reset")])
    problem(r, "upstream-error", 502)
    assert helpers.record_state(pg.records.one(ids.actor)) == "unknown"
    problem(p.post("/api/courses", key=key, actor=ids.actor, body=course()), "outcome-unknown", 409)
    assert upstream.count(actor=ids.actor) == 1


def test_upstream_truncated_unknown(proxy, upstream, pg, ids):
    p = proxy()
    key = ids.key()
    r = p.post("/api/courses", key=key, actor=ids.actor, body=course(),
               headers=[("X-Test-Action", "truncate")])
    problem(r, "upstream-error", 502)
    assert helpers.record_state(pg.records.one(ids.actor)) == "unknown"
    problem(p.post("/api/courses", key=key, actor=ids.actor, body=course()), "outcome-unknown", 409)
    assert upstream.count(actor=ids.actor) == 1


def test_expired_lease_outcome_unknown(proxy, upstream, pg, ids):
    """A record whose lease ran out while in progress: its owner is presumed
    gone, so a retry is held (409 outcome-unknown), not executed."""
    p = proxy({"upstream_timeout": "5s"})
    key = ids.key()
    with helpers.SlowOwner(p, upstream, "/api/courses", key, ids.actor, 1.5):
        assert pg.records.expire_lease(ids.actor) == 1
        r = p.post("/api/courses", key=key, actor=ids.actor, body=course())
        problem(r, "outcome-unknown", 409)
        assert upstream.count(actor=ids.actor) == 1
    assert upstream.count(actor=ids.actor) == 1


def test_owner_vanished(proxy, upstream, ids):
    """SIGKILL while the owner waits upstream: retries see operation-in-progress
    while the lease lives, then outcome-unknown; nothing runs twice."""
    p = proxy({"upstream_timeout": "2s", "lease": "3500ms"})
    key = ids.key()

    def first():
        try:
            p.post("/api/courses", key=key, actor=ids.actor, body=course(),
                   headers=[("X-Test-Delay", "4")])
        except (helpers.ConnectionClosed, OSError):
            pass

    t = threading.Thread(target=first)
    t.start()
    try:
        assert len(upstream.wait_for(1, actor=ids.actor)) == 1
        killed_at = time.monotonic()
        p.kill()
        p.start()
        r = p.post("/api/courses", key=key, actor=ids.actor, body=course())
        if time.monotonic() - killed_at < 2.0:
            problem(r, "operation-in-progress", 409)
            assert r.headers.get("Retry-After") is not None
        end = time.monotonic() + POLL_LIMIT
        while True:
            r = p.post("/api/courses", key=key, actor=ids.actor, body=course())
            assert r.status == 409, r
            if r.json().get("type", "").endswith("/outcome-unknown"):
                problem(r, "outcome-unknown", 409)
                break
            problem(r, "operation-in-progress", 409)
            assert time.monotonic() < end, "lease never expired"
            time.sleep(0.25)
    finally:
        t.join(15)
    assert upstream.count(actor=ids.actor) == 1


def test_store_unreachable_fail_closed(proxy, upstream, ids):
    dead = "host=127.0.0.1 port=%d dbname=idemproxy user=postgres connect_timeout=1" % helpers.free_port()
    p = proxy(database=dead)
    r = p.post("/api/courses", key=ids.key(), actor=ids.actor, body=course())
    problem(r, "store-unavailable", 503)
    assert r.headers.get("Retry-After") is not None
    assert upstream.count(actor=ids.actor) == 0
    g = p.request("GET", "/api/courses", [("X-Actor-Id", ids.actor)])
    assert g.status == 200
    assert g.json()["method"] == "GET"
    assert upstream.count(actor=ids.actor) == 1


def test_store_unreachable_fail_open(proxy, upstream, ids):
    dead = "host=127.0.0.1 port=%d dbname=idemproxy user=postgres connect_timeout=1" % helpers.free_port()
    p = proxy({"store_unavailable": "fail-open"}, database=dead)
    r = p.post("/api/courses", key=ids.key(), actor=ids.actor, body=course())
    assert r.status == 201, r
    assert (r.headers.get("Idempotency-Enforced") or "").lower() == "false"
    assert r.headers.get("Idempotent-Replayed") is None
    assert r.json()["path"] == "/api/courses"
    assert upstream.count(actor=ids.actor) == 1


def test_upstream_refused_releases(proxy, start_upstream, pg, ids):
    port = helpers.free_port()
    p = proxy(upstream_port=port)
    key = ids.key()
    r = p.post("/api/courses", key=key, actor=ids.actor, body=course())
    problem(r, "upstream-unavailable", 502)
    assert pg.records.rows(ids.actor) == []
    up = start_upstream(port)
    assert up.count(actor=ids.actor) == 0
    r = p.post("/api/courses", key=key, actor=ids.actor, body=course())
    assert_owner(r, 201)
    assert up.count(actor=ids.actor) == 1
    assert helpers.record_state(pg.records.one(ids.actor)) == "completed"


@pytest.mark.parametrize("status", [400, 422, 503])
def test_release_on(proxy, upstream, pg, ids, status):
    p = proxy()
    key = ids.key()
    r = p.post("/api/rel", key=key, actor=ids.actor, body=course(),
               headers=[("X-Test-Status", str(status))])
    assert r.status == status, r
    assert r.headers.get("Idempotent-Replayed") is None
    assert r.json()["path"] == "/api/rel"      # the upstream's own body
    assert pg.records.rows(ids.actor) == []
    again = p.post("/api/rel", key=key, actor=ids.actor, body=course())
    assert_owner(again, 201)
    assert upstream.count(actor=ids.actor) == 2
    assert helpers.record_status(pg.records.one(ids.actor)) == 201


def test_release_on_default_route_4xx(proxy, upstream, pg, ids):
    p = proxy()
    key = ids.key()
    r = p.post("/api/courses", key=key, actor=ids.actor, body=course(),
               headers=[("X-Test-Status", "409")])
    assert r.status == 409 and r.json()["path"] == "/api/courses"
    assert pg.records.rows(ids.actor) == []
    assert_owner(p.post("/api/courses", key=key, actor=ids.actor, body=course()), 201)
    assert upstream.count(actor=ids.actor) == 2


@pytest.mark.parametrize("status", [502, 504])
def test_unknown_on(proxy, upstream, pg, ids, status):
    p = proxy()
    key = ids.key()
    r = p.post("/api/rel", key=key, actor=ids.actor, body=course(),
               headers=[("X-Test-Status", str(status))])
    assert r.status == status, r
    assert r.json()["path"] == "/api/rel"      # passed on, not rewritten
    assert helpers.record_state(pg.records.one(ids.actor)) == "unknown"
    problem(p.post("/api/rel", key=key, actor=ids.actor, body=course()), "outcome-unknown", 409)
    assert upstream.count(actor=ids.actor) == 1


@pytest.mark.parametrize("status", [500, 501])
def test_5xx_stored_and_replayed(proxy, upstream, pg, ids, status):
    p = proxy()
    key = ids.key()
    first = p.post("/api/courses", key=key, actor=ids.actor, body=course(),
                   headers=[("X-Test-Status", str(status))])
    assert_owner(first, status)
    row = pg.records.one(ids.actor)
    assert helpers.record_state(row) == "completed"
    assert helpers.record_status(row) == status
    assert_replay_of(p.post("/api/courses", key=key, actor=ids.actor, body=course()), first)
    assert upstream.count(actor=ids.actor) == 1


def test_2xx_other_than_201_stored(proxy, upstream, ids):
    p = proxy()
    key = ids.key()
    first = p.post("/api/courses", key=key, actor=ids.actor, body=course(),
                   headers=[("X-Test-Status", "200")])
    assert_owner(first, 200)
    assert_replay_of(p.post("/api/courses", key=key, actor=ids.actor, body=course()), first)
    assert upstream.count(actor=ids.actor) == 1


def test_postgres_down_and_back(proxy, upstream, pg, ids):
    p = proxy()
    warm = ids.key()
    assert_owner(p.post("/api/courses", key=warm, actor=ids.actor, body=course()))
    pg.stop()
    try:
        r = p.post("/api/courses", key=ids.key(), actor=ids.actor, body=course())
        problem(r, "store-unavailable", 503)
        assert r.headers.get("Retry-After") is not None
        g = p.request("GET", "/api/courses", [("X-Actor-Id", ids.actor)])
        assert g.status == 200, g
        assert upstream.count(actor=ids.actor, method="POST") == 1
    finally:
        pg.start()
    end = time.monotonic() + POLL_LIMIT
    while True:
        key = ids.key()
        r = p.post("/api/courses", key=key, actor=ids.actor, body=course())
        if r.status == 201:
            break
        problem(r, "store-unavailable", 503)
        assert time.monotonic() < end, "the store did not come back within %ss" % POLL_LIMIT
        time.sleep(0.25)
    # Each worker reconnects on its own: the retry may meet one that has not
    # yet, and is then told to retry (503), never run again.
    def replayed():
        again = p.post("/api/courses", key=key, actor=ids.actor, body=course())
        if again.status == 503:
            problem(again, "store-unavailable", 503)
            return None
        return again

    again = helpers.poll(replayed, POLL_LIMIT, 0.25)
    assert again is not None, "a worker's store did not come back within %ss" % POLL_LIMIT
    assert_replay_of(again, r)
    assert upstream.count(actor=ids.actor, key=key) == 1


def test_client_gone_after_forward_still_recorded(proxy, upstream, pg, ids):
    """The owner's client hangs up while its request is at the upstream: the
    response is still read and recorded, so the retry gets the replay."""
    p = proxy()
    key = ids.key()
    data = helpers.build_request(
        "POST", "/api/courses",
        [("Idempotency-Key", key), ("X-Actor-Id", ids.actor),
         ("Content-Type", "application/json"), ("X-Test-Delay", "1")],
        body=course())
    c = helpers.Client(p.port)
    c.send(data)
    assert len(upstream.wait_for(1, actor=ids.actor)) == 1
    c.close()
    end = time.monotonic() + POLL_LIMIT
    while helpers.record_state(pg.records.one(ids.actor)) != "completed":
        assert time.monotonic() < end, "record never completed"
        time.sleep(0.1)
    r = p.post("/api/courses", key=key, actor=ids.actor, body=course())
    assert r.status == 201
    assert (r.headers.get("Idempotent-Replayed") or "").lower() == "true"
    assert upstream.count(actor=ids.actor) == 1
