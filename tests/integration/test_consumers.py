"""What API consumers are told (docs/http.md, "For API consumers"): X-Should-Retry on every
problem, Link to the published contract, an adaptive Retry-After on
operation-in-progress, X-Should-Retry: false on replays of a stored 5xx,
Stripe-shaped errors, Idempotency-Key-Expires on
completed records, keys from the body, a query parameter or another
header, and headers in the fingerprint. Every idempotency test counts the
upstream's effects exactly."""
import email.utils
import json
import time

from tests.lib import helpers
from tests.lib.helpers import SlowOwner, assert_owner, assert_replay_of, course, problem

CONTRACT = "https://api.example.com/docs/idempotency"
OWNER_DELAY = 2.0           # seconds an owner is held upstream (< upstream_timeout)
SETTINGS = {"upstream_timeout": "10s", "lease": "40s"}

STRIPE_ROUTE = """
route charge.create {
    match        POST /v1/charges
    fingerprint  body
    errors       stripe
}
"""
WEBHOOK_ROUTES = """
route webhook.event {
    match        POST /hooks/events
    key_from     json event.id
}
route webhook.delivery {
    match        POST /hooks/deliveries
    key_from     header X-Delivery-Id
}
route webhook.query {
    match        POST /hooks/query
    key_from     query delivery
}
route versioned.create {
    match        POST /api/versioned
    fingerprint_headers  Api-Version
}
"""
# Routes that store the upstream's own retry advice, to show that a replay
# of a stored 5xx says its own instead.
FINAL_ROUTES = """
route final.plain {
    match          POST /api/final
    store_headers  X-Should-Retry Stripe-Should-Retry
}
route final.stripe {
    match          POST /v1/final
    fingerprint    body
    errors         stripe
    store_headers  X-Should-Retry Stripe-Should-Retry
}
"""
ADVICE_TRUE = [("X-Test-Header", "X-Should-Retry: true"),
               ("X-Test-Header", "Stripe-Should-Retry: true")]


def should_retry(resp, value):
    assert resp.headers.get_all("X-Should-Retry") == [value], resp


def expires_at(resp):
    """The Idempotency-Key-Expires date as a Unix time."""
    v = resp.headers.get("Idempotency-Key-Expires")
    assert v and v.endswith(" GMT"), resp
    return email.utils.parsedate_to_datetime(v).timestamp()


# ---- X-Should-Retry and Link ----

def test_every_problem_says_whether_to_retry(proxy, upstream, ids):
    p = proxy(dict(SETTINGS, contract_url=CONTRACT))
    key = ids.key()
    r = p.post("/api/courses", actor=ids.actor, body=course())
    problem(r, "idempotency-key-missing", 400)
    should_retry(r, "false")
    with SlowOwner(p, upstream, "/api/courses", key, ids.actor, 1.0) as owner:
        r = p.post("/api/courses", key=key, actor=ids.actor, body=course())
        problem(r, "operation-in-progress", 409)
        should_retry(r, "true")
        assert int(r.headers.get("Retry-After")) >= 1
        assert int(r.headers.get("Retry-After-Ms")) >= 1000
    assert_owner(owner.response)
    r = p.post("/api/courses", key=key, actor=ids.actor, body=course(title="Other"))
    problem(r, "idempotency-conflict", 422)
    should_retry(r, "false")
    assert r.headers.get("Retry-After") is None
    # An unknown outcome can never succeed: SDKs must stop retrying it.
    k2 = ids.key()
    problem(p.post("/api/courses", key=k2, actor=ids.actor, body=course(),
                   headers=[("X-Test-Action", "reset")]), "upstream-error", 502)
    r = p.post("/api/courses", key=k2, actor=ids.actor, body=course())
    problem(r, "outcome-unknown", 409)
    should_retry(r, "false")
    # The HTTP layer's own answers too.
    resp, _ = helpers.raw_exchange(p.port, b"POST /api/courses HTTP/1.1\r\nHost: t\r\n"
                                   b"Content-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n")
    assert resp.status == 400
    should_retry(resp, "false")
    for resp in (r, resp):
        assert resp.headers.get_all("Link") == ['<%s>; rel="describedby"' % CONTRACT], resp
    assert upstream.count(actor=ids.actor) == 2


def test_unavailable_store_and_upstream_may_be_retried(proxy, upstream, ids):
    down = proxy(SETTINGS, database="host=127.0.0.1 port=%d connect_timeout=1"
                 % helpers.free_port())
    r = down.post("/api/courses", key=ids.key(), actor=ids.actor, body=course())
    problem(r, "store-unavailable", 503)
    should_retry(r, "true")
    assert r.headers.get("Retry-After") == "1" and r.headers.get("Retry-After-Ms") == "1000"
    assert r.headers.get("Link") is None    # no contract_url: no Link
    nowhere = proxy(SETTINGS, upstream_port=helpers.free_port())
    r = nowhere.post("/api/courses", key=ids.key(), actor=ids.actor, body=course())
    problem(r, "upstream-unavailable", 502)
    should_retry(r, "true")
    assert upstream.count(actor=ids.actor) == 0


# ---- adaptive Retry-After ----

def test_retry_after_follows_the_routes_owners(proxy, upstream, ids):
    """Once owners of the route are known to take about OWNER_DELAY, a
    duplicate is told to come back when the running owner should be done:
    more than the 1 s floor, less than the owner's whole duration, never
    past the lease."""
    # Two workers: the owners' durations are shared, so wherever the
    # duplicate lands it is told the same.
    p = proxy(dict(SETTINGS, workers="2"))
    # Cold: nothing known yet, the floor.
    key = ids.key()
    with SlowOwner(p, upstream, "/api/courses", key, ids.actor + "-0", 1.0) as first:
        r = p.post("/api/courses", key=key, actor=ids.actor + "-0", body=course())
        problem(r, "operation-in-progress", 409)
        assert r.headers.get("Retry-After-Ms") == "1000", r
    assert_owner(first.response)
    for i in (1, 2):      # owners of about OWNER_DELAY
        with SlowOwner(p, upstream, "/api/courses", ids.key(), "%s-%d" % (ids.actor, i),
                       OWNER_DELAY) as o:
            pass
        assert_owner(o.response)
    key = ids.key()
    with SlowOwner(p, upstream, "/api/courses", key, ids.actor, OWNER_DELAY) as owner:
        time.sleep(0.3)
        r = p.post("/api/courses", key=key, actor=ids.actor, body=course())
        problem(r, "operation-in-progress", 409)
        ms = int(r.headers.get("Retry-After-Ms"))
        assert 1000 < ms < OWNER_DELAY * 1.1 * 1000, ms
        assert int(r.headers.get("Retry-After")) == -(-ms // 1000)
    assert_owner(owner.response)
    for actor in [ids.actor] + ["%s-%d" % (ids.actor, i) for i in range(3)]:
        assert upstream.count(actor=actor) == 1, actor


# ---- errors stripe ----

def stripe_error(resp, status, etype, code):
    assert resp.status == status, resp
    assert resp.headers.get("Content-Type") == "application/json", resp
    doc = json.loads(resp.body)
    assert set(doc) == {"error"}, doc
    assert doc["error"]["type"] == etype and doc["error"]["code"] == code, doc
    assert doc["error"]["message"], doc
    return doc


def test_stripe_errors(proxy, upstream, ids):
    p = proxy(SETTINGS, routes=STRIPE_ROUTE)
    key = ids.key()
    form = b"amount=100&currency=usd"
    post = lambda body, k=key, **kw: p.post("/v1/charges", key=k, actor=ids.actor,
                                             body=body, **kw)
    with SlowOwner(p, upstream, "/v1/charges", key, ids.actor, 1.0, body=form) as owner:
        r = post(form)
        stripe_error(r, 409, "idempotency_error", "operation_in_progress")
        assert r.headers.get("Stripe-Should-Retry") == "true"
        should_retry(r, "true")
    assert_owner(owner.response)
    assert_replay_of(post(form), owner.response)
    # Other parameters with the same key: 400, as Stripe answers it.
    r = post(b"amount=200&currency=usd")
    stripe_error(r, 400, "idempotency_error", "idempotency_conflict")
    assert r.headers.get("Stripe-Should-Retry") == "false"
    r = p.post("/v1/charges", actor=ids.actor, body=form)
    stripe_error(r, 400, "invalid_request_error", "idempotency_key_missing")
    assert upstream.count(actor=ids.actor) == 1


# ---- Idempotency-Key-Expires ----

def test_completed_records_say_when_their_key_expires(proxy, upstream, ids):
    p = proxy(dict(SETTINGS, retention="1h"))
    key = ids.key()
    now = time.time()
    owner = p.post("/api/courses", key=key, actor=ids.actor, body=course())
    assert_owner(owner)
    t_owner = expires_at(owner)
    assert now + 3600 - 5 <= t_owner <= now + 3600 + 5, (owner, now)
    for _ in range(3):      # from the store and from the cache alike
        r = p.post("/api/courses", key=key, actor=ids.actor, body=course())
        assert_replay_of(r, owner)
        assert abs(expires_at(r) - t_owner) <= 2, (r, owner)
    # Not on answers of records that are not completed.
    r = p.post("/api/courses", key=ids.key(), actor=ids.actor, body=course(),
               headers=[("X-Test-Status", "400")])
    assert r.status == 400 and r.headers.get("Idempotency-Key-Expires") is None, r
    assert upstream.count(actor=ids.actor) == 2


def test_a_stored_5xx_is_replayed_as_final(proxy, upstream, ids):
    """The owner's 500 is the upstream's, its advice as sent; every replay
    of it says X-Should-Retry: false (and Stripe-Should-Retry: false under
    `errors stripe`) once, in place of the stored advice: retrying gets the
    same stored 500. A stored non-5xx keeps the upstream's advice."""
    p = proxy(SETTINGS, routes=FINAL_ROUTES)
    for path, stripe in (("/api/final", False), ("/v1/final", True)):
        key = ids.key()
        head = ADVICE_TRUE + [("X-Test-Status", "500")]
        owner = p.post(path, key=key, actor=ids.actor, body=course(), headers=head)
        assert owner.status == 500 and owner.headers.get("Idempotent-Replayed") is None, owner
        assert owner.headers.get_all("X-Should-Retry") == ["true"], owner
        assert owner.headers.get_all("Stripe-Should-Retry") == ["true"], owner
        for _ in range(2):      # from the store and from the cache alike
            r = p.post(path, key=key, actor=ids.actor, body=course(), headers=head)
            assert_replay_of(r, owner)
            should_retry(r, "false")
            assert r.headers.get_all("Stripe-Should-Retry") == (["false"] if stripe else []), r
        # Without stored advice: the replay's own alone.
        key = ids.key()
        owner = p.post(path, key=key, actor=ids.actor, body=course(),
                       headers=[("X-Test-Status", "599")])
        assert owner.status == 599 and owner.headers.get("X-Should-Retry") is None, owner
        r = p.post(path, key=key, actor=ids.actor, body=course())
        assert_replay_of(r, owner)
        should_retry(r, "false")
        assert r.headers.get_all("Stripe-Should-Retry") == (["false"] if stripe else []), r
    # A stored 201 is the outcome as the upstream advised it.
    key = ids.key()
    owner = p.post("/api/final", key=key, actor=ids.actor, body=course(), headers=ADVICE_TRUE)
    assert owner.status == 201, owner
    r = p.post("/api/final", key=key, actor=ids.actor, body=course())
    assert_replay_of(r, owner)
    should_retry(r, "true")
    assert r.headers.get_all("Stripe-Should-Retry") == ["true"], r
    assert upstream.count(actor=ids.actor) == 5


# ---- key_from and fingerprint_headers ----

def test_key_from_the_json_body(proxy, upstream, ids):
    """A webhook's event id is its key: a redelivery is replayed."""
    p = proxy(SETTINGS, routes=WEBHOOK_ROUTES)
    event = {"event": {"id": "evt_" + ids.key(), "type": "paid"}}
    first = p.post("/hooks/events", actor=ids.actor, body=json.dumps(event).encode())
    assert_owner(first)
    again = p.post("/hooks/events", actor=ids.actor, body=json.dumps(event).encode())
    assert_replay_of(again, first)
    # An integer id is a key too; another type, or none, is not.
    numeric = {"event": {"id": int(time.time() * 1000), "type": "paid"}}
    assert_owner(p.post("/hooks/events", actor=ids.actor, body=json.dumps(numeric).encode()))
    problem(p.post("/hooks/events", actor=ids.actor,
                   body=json.dumps({"event": {"id": {"x": 1}}}).encode()),
            "idempotency-key-invalid", 400)
    problem(p.post("/hooks/events", actor=ids.actor, body=b'{"event": {}}'),
            "idempotency-key-missing", 400)
    # A body nested too deep to look into is a request without the key
    # (and the worker survives it).
    deep = b'{"event": {"id": "e"}, "x": ' + b"[" * 200000 + b"]" * 200000 + b"}"
    problem(p.post("/hooks/events", actor=ids.actor, body=deep),
            "idempotency-key-missing", 400)
    # The Idempotency-Key header does not stand in for the body's id.
    problem(p.post("/hooks/events", key=ids.key(), actor=ids.actor, body=b'{}'),
            "idempotency-key-missing", 400)
    assert upstream.count(actor=ids.actor) == 2


def test_key_from_another_header_and_the_query(proxy, upstream, ids):
    p = proxy(SETTINGS, routes=WEBHOOK_ROUTES)
    d = ids.key()
    hdr = [("X-Delivery-Id", d)]
    first = p.post("/hooks/deliveries", actor=ids.actor, body=course(), headers=hdr)
    assert_owner(first)
    assert_replay_of(p.post("/hooks/deliveries", actor=ids.actor, body=course(), headers=hdr),
                     first)
    problem(p.post("/hooks/deliveries", actor=ids.actor, body=course(),
                   headers=hdr + [("X-Delivery-Id", "other")]), "idempotency-key-invalid", 400)
    first = p.post("/hooks/query?delivery=%s&x=1" % d, actor=ids.actor, body=course())
    assert_owner(first)
    # The query's order does not matter; a repeated parameter is refused.
    assert_replay_of(p.post("/hooks/query?x=1&delivery=" + d, actor=ids.actor, body=course()),
                     first)
    problem(p.post("/hooks/query?delivery=a&delivery=b", actor=ids.actor, body=course()),
            "idempotency-key-invalid", 400)
    problem(p.post("/hooks/query?x=1", actor=ids.actor, body=course()),
            "idempotency-key-missing", 400)
    assert upstream.count(actor=ids.actor) == 2


def test_fingerprint_headers(proxy, upstream, ids):
    p = proxy(SETTINGS, routes=WEBHOOK_ROUTES)
    key = ids.key()
    v1 = [("Api-Version", "2024-01-01")]
    first = p.post("/api/versioned", key=key, actor=ids.actor, body=course(), headers=v1)
    assert_owner(first)
    assert_replay_of(p.post("/api/versioned", key=key, actor=ids.actor, body=course(),
                            headers=v1), first)
    problem(p.post("/api/versioned", key=key, actor=ids.actor, body=course(),
                   headers=[("Api-Version", "2025-01-01")]), "idempotency-conflict", 422)
    problem(p.post("/api/versioned", key=key, actor=ids.actor, body=course()),
            "idempotency-conflict", 422)
    # Routes without fingerprint_headers ignore the header.
    k2 = ids.key()
    first = p.post("/api/courses", key=k2, actor=ids.actor, body=course(), headers=v1)
    assert_replay_of(p.post("/api/courses", key=k2, actor=ids.actor, body=course(),
                            headers=[("Api-Version", "x")]), first)
    assert upstream.count(actor=ids.actor) == 2
