"""The per-worker replay cache: completed records answer retries without a
store round trip, and never anything else. One worker, so every request of a
test meets the same cache."""
import time

from tests.lib import helpers
from tests.lib.helpers import problem, course, assert_owner, assert_replay_of

ONE_WORKER = {"workers": "1"}
CACHE_MAX_AGE = 5.0   # REPLAY_CACHE_MAX_AGE_US in proxy/worker.c


def test_replay_served_from_cache_while_store_is_down(proxy, upstream, pg, ids):
    p = proxy(ONE_WORKER)
    key = ids.key()
    first = p.post("/api/courses", key=key, actor=ids.actor, body=course())
    assert_owner(first)
    pg.stop()
    try:
        # The completed record is cached: replay and conflict need no store.
        assert_replay_of(p.post("/api/courses", key=key, actor=ids.actor, body=course()), first)
        problem(p.post("/api/courses", key=key, actor=ids.actor, body=course(title="Other")),
                "idempotency-conflict", 422)
        # Anything not cached still needs the store.
        problem(p.post("/api/courses", key=ids.key(), actor=ids.actor, body=course()),
                "store-unavailable", 503)
        # Another actor's same key is another scope, never the cached record.
        problem(p.post("/api/courses", key=key, actor=ids.actor + "-other", body=course()),
                "store-unavailable", 503)
    finally:
        pg.start()
    assert upstream.count(actor=ids.actor) == 1


def test_in_progress_is_never_cached(proxy, upstream, pg, ids):
    """A duplicate during the owner's run is answered from the store
    (in progress), and the replay after it carries the owner's response."""
    p = proxy(ONE_WORKER)
    key = ids.key()
    with helpers.SlowOwner(p, upstream, "/api/courses", key, ids.actor, 1) as owner:
        problem(p.post("/api/courses", key=key, actor=ids.actor, body=course()),
                "operation-in-progress", 409)
    assert_owner(owner.response)
    assert_replay_of(p.post("/api/courses", key=key, actor=ids.actor, body=course()),
                     owner.response)
    assert upstream.count(actor=ids.actor) == 1


def test_cache_entry_honours_retention(proxy, upstream, ids):
    p = proxy(ONE_WORKER, routes="route short.op {\n match POST /api/short\n retention 1s\n}\n")
    key = ids.key()
    first = p.post("/api/short", key=key, actor=ids.actor, body=course())
    assert_owner(first)
    assert_replay_of(p.post("/api/short", key=key, actor=ids.actor, body=course()), first)
    time.sleep(1.3)
    again = p.post("/api/short", key=key, actor=ids.actor, body=course())
    assert_owner(again)
    assert again.body != first.body
    assert upstream.count(actor=ids.actor) == 2


def test_operator_release_seen_within_cache_bound(proxy, upstream, pg, ids):
    """Deleting a completed record (what an operator's release does) is
    contradicted by a worker's cache for at most CACHE_MAX_AGE seconds."""
    p = proxy(ONE_WORKER)
    key = ids.key()
    first = p.post("/api/courses", key=key, actor=ids.actor, body=course())
    assert_owner(first)
    assert_replay_of(p.post("/api/courses", key=key, actor=ids.actor, body=course()), first)
    pg.query("DELETE FROM idempotency_records WHERE idem_key = %s", (key,))
    deadline = time.monotonic() + CACHE_MAX_AGE + 2.0
    while True:
        r = p.post("/api/courses", key=key, actor=ids.actor, body=course())
        if r.headers.get("Idempotent-Replayed") is None:
            break
        assert time.monotonic() < deadline, "release still unseen after the cache bound"
        time.sleep(0.5)
    assert_owner(r)
    assert upstream.count(actor=ids.actor) == 2


def test_disabled_cache_still_replays_from_store(proxy, upstream, pg, ids):
    p = proxy({"workers": "1", "replay_cache": "0"})
    key = ids.key()
    first = p.post("/api/courses", key=key, actor=ids.actor, body=course())
    pg.stop()
    try:
        problem(p.post("/api/courses", key=key, actor=ids.actor, body=course()),
                "store-unavailable", 503)
    finally:
        pg.start()
    end = time.monotonic() + 10
    while True:
        r = p.post("/api/courses", key=key, actor=ids.actor, body=course())
        if r.status != 503:
            break
        assert time.monotonic() < end
        time.sleep(0.25)
    assert_replay_of(r, first)
    assert upstream.count(actor=ids.actor) == 1
