"""Admission of owners: `actor_max_owners` and `max_owners` refuse a claim
beyond them with 429 too-many-requests (Retry-After, X-Should-Retry: true)
before the claim is made, so nothing reaches the upstream; another actor,
replays, conflicts, duplicates in progress, pass-through and unkeyed
requests are never refused; a place frees when its owner ends; every
refusal is counted by reason and logged. The upstream holds the owners
(X-Test-Hold) for as long as a test says, and every test counts the
upstream's effects exactly."""
import json
import uuid

from tests.lib import helpers
from tests.lib.admin import admin_proxy, metrics, poll_metrics
from tests.lib.helpers import SlowOwner, assert_owner, assert_replay_of, course, problem

ACTOR_BOUND = 2
ROUTES = """
route adm.pay {
    match             POST /api/adm
    actor_max_owners  %d
}
""" % ACTOR_BOUND
PATH = "/api/adm"
REASON = "idemproxy_refusals_total"
ACTIVE = "idemproxy_owners_active"


def hold_id():
    return "hold-" + uuid.uuid4().hex


def held(p, upstream, key, actor, hold, path=PATH):
    """An owner the upstream holds until upstream.release(hold)."""
    return SlowOwner(p, upstream, path, key, actor, 0, headers=[("X-Test-Hold", hold)])


def refused(resp):
    """resp is the 429 of a limit: its problem, Retry-After and X-Should-Retry."""
    doc = problem(resp, "too-many-requests", 429)
    assert resp.headers.get("X-Should-Retry") == "true", resp
    after = resp.headers.get("Retry-After")
    assert after is not None and after.isdigit() and int(after) >= 1, resp
    assert int(resp.headers.get("Retry-After-Ms")) >= 1000, resp
    return doc


def access_lines(p, route, status):
    """The access lines of route with status, once flushed."""
    def lines():
        return [d for d in p.log_lines()
                if d.get("msg") == "request" and d.get("route") == route
                and d.get("status") == status]
    return helpers.poll(lines) or lines()


def test_actor_over_its_bound_is_refused_others_served(proxy, upstream, ids):
    """An actor with actor_max_owners owners held gets 429 for a new key,
    and nothing of it reaches the upstream; another actor is served at the
    same time; the actor's replay (from the store: no replay cache), its
    conflict and its duplicate in progress are answered as ever; once the
    held owners end the actor is served again."""
    p = admin_proxy(proxy, {"replay_cache": "0"}, routes=ROUTES)
    other = "other-" + uuid.uuid4().hex
    done_key = ids.key()
    done = p.post(PATH, key=done_key, actor=ids.actor, body=course())
    assert_owner(done)
    hold = hold_id()
    keys = [ids.key() for _ in range(ACTOR_BOUND)]
    owners = [held(p, upstream, k, ids.actor, hold) for k in keys]
    try:
        for o in owners:
            o.__enter__()
        assert upstream.count(actor=ids.actor) == 1 + ACTOR_BOUND
        assert poll_metrics(p, lambda m: m.get(ACTIVE) == ACTOR_BOUND), metrics(p).all(ACTIVE)
        over = p.post(PATH, key=ids.key(), actor=ids.actor, body=course())
        doc = refused(over)
        assert "actor_max_owners" in doc["detail"], doc
        assert upstream.count(actor=ids.actor) == 1 + ACTOR_BOUND
        served = p.post(PATH, key=ids.key(), actor=other, body=course())
        assert_owner(served)
        assert upstream.count(actor=other) == 1
        # The actor's answers that are not a new owner are not refused.
        assert_replay_of(p.post(PATH, key=done_key, actor=ids.actor, body=course()), done)
        problem(p.post(PATH, key=done_key, actor=ids.actor, body=course(title="Other")),
                "idempotency-conflict", 422)
        problem(p.post(PATH, key=keys[0], actor=ids.actor, body=course()),
                "operation-in-progress", 409)
        assert upstream.count(actor=ids.actor) == 1 + ACTOR_BOUND
    finally:
        upstream.release(hold)
        for o in owners:
            o.__exit__(None, None, None)
    for o in owners:
        assert_owner(o.response)
    again = p.post(PATH, key=ids.key(), actor=ids.actor, body=course())
    assert_owner(again)
    assert upstream.count(actor=ids.actor) == 2 + ACTOR_BOUND
    m = poll_metrics(p, lambda m: m.get(REASON, reason="actor_max_owners") == 1)
    assert m, metrics(p).all(REASON)
    assert m.get(REASON, reason="max_owners") == 0
    assert poll_metrics(p, lambda m: m.get(ACTIVE) == 0), metrics(p).all(ACTIVE)
    lines = access_lines(p, "adm.pay", 429)
    assert len(lines) == 1 and lines[0]["outcome"] == "rejected", lines


def test_refused_key_runs_later(proxy, upstream, ids):
    """A key refused at the bound was never claimed: the same request runs
    once the actor has room, and its retry replays it."""
    p = proxy({"replay_cache": "0"}, routes=ROUTES.replace("%d" % ACTOR_BOUND, "1"))
    hold = hold_id()
    key = ids.key()
    with held(p, upstream, ids.key(), ids.actor, hold) as owner:
        refused(p.post(PATH, key=key, actor=ids.actor, body=course()))
        assert upstream.count(actor=ids.actor) == 1
        upstream.release(hold)
    assert_owner(owner.response)
    first = p.post(PATH, key=key, actor=ids.actor, body=course())
    assert_owner(first)
    assert_replay_of(p.post(PATH, key=key, actor=ids.actor, body=course()), first)
    assert upstream.count(actor=ids.actor) == 2


def test_max_owners_bounds_the_instance(proxy, upstream, ids):
    """max_owners counts every actor's owners on the instance (both
    workers): at the bound any actor's new key gets 429, pass-through and
    unkeyed requests still go; a place frees when the owner ends."""
    p = admin_proxy(proxy, {"max_owners": "1"}, routes=ROUTES)
    other = "other-" + uuid.uuid4().hex
    hold = hold_id()
    with held(p, upstream, ids.key(), ids.actor, hold) as owner:
        for actor in (other, ids.actor, other):
            doc = refused(p.post("/api/courses", key=ids.key(), actor=actor, body=course()))
            assert "max_owners" in doc["detail"], doc
        assert upstream.count(actor=other) == 0
        unkeyed = p.post("/api/optional", actor=other, body=course())
        assert unkeyed.status == 201, unkeyed
        safe = p.request("GET", "/api/courses", [("X-Actor-Id", other)])
        assert safe.status == 200, safe
        assert upstream.count(actor=other) == 2
        upstream.release(hold)
    assert_owner(owner.response)
    assert_owner(p.post("/api/courses", key=ids.key(), actor=other, body=course()))
    assert upstream.count(actor=other) == 3 and upstream.count(actor=ids.actor) == 1
    m = poll_metrics(p, lambda m: m.get(REASON, reason="max_owners") == 3)
    assert m, metrics(p).all(REASON)
    assert m.get(REASON, reason="actor_max_owners") == 0


def test_stripe_words(proxy, upstream, ids):
    """Under `errors stripe` the refusal is a rate_limit_error (the SDKs'
    RateLimitError), retryable."""
    routes = ROUTES.replace("actor_max_owners  %d" % ACTOR_BOUND,
                            "actor_max_owners  1\n    errors stripe")
    p = proxy(routes=routes)
    hold = hold_id()
    with held(p, upstream, ids.key(), ids.actor, hold) as owner:
        r = p.post(PATH, key=ids.key(), actor=ids.actor, body=course())
        assert r.status == 429, r
        err = json.loads(r.body)["error"]
        assert err["type"] == "rate_limit_error" and err["code"] == "too_many_requests", err
        assert r.headers.get("Stripe-Should-Retry") == "true", r
        upstream.release(hold)
    assert_owner(owner.response)
    assert upstream.count(actor=ids.actor) == 1


BASE = "upstream http://127.0.0.1:1\nactor header X-Actor\n"


def test_check_names_file_and_line(binary, tmp_path):
    """-t names the file and line of a bad limit; -T shows the limits in
    force, a route's own over the top level's."""
    conf = tmp_path / "a.conf"
    for bad, word in (("max_owners -1", "max_owners"), ("max_owners many", "max_owners"),
                      ("actor_max_owners x", "actor_max_owners")):
        r = helpers.check_config(binary, conf, BASE + bad + "\nroute r {\n    match POST /r\n}\n")
        assert r.returncode == 1, r
        assert r.stderr.startswith("%s:3: " % conf) and word in r.stderr, r.stderr
    r = helpers.check_config(binary, conf, BASE + "route r {\n    match POST /r\n"
                             "    actor_max_owners 0x\n}\n")
    assert r.returncode == 1 and r.stderr.startswith("%s:5: " % conf), r.stderr
    text = (BASE + "max_owners 100\nactor_max_owners 5\n"
            "route r {\n    match POST /r\n}\n"
            "route s {\n    match POST /s\n    actor_max_owners off\n}\n"
            "route t {\n    match POST /t\n    actor_max_owners 7\n}\n")
    r = helpers.check_config(binary, conf, text)
    assert r.returncode == 0, r.stderr
    out = helpers.show_config(binary, conf)
    assert "\nmax_owners 100\n" in out, out
    routes = out.split("\nroute ")[1:]
    assert ["    actor_max_owners 5" in routes[0], "    actor_max_owners off" in routes[1],
            "    actor_max_owners 7" in routes[2]] == [True, True, True], out
    bare = helpers.check_config(binary, conf, BASE + "route r {\n    match POST /r\n}\n")
    assert bare.returncode == 0, bare.stderr
    out = helpers.show_config(binary, conf)
    assert "\nmax_owners off\n" in out and "    actor_max_owners off\n" in out, out
