"""Races and process lifecycle: concurrent duplicates (one and two
processes), restart after SIGKILL, graceful shutdown with a request in
flight."""
import signal
import threading

from tests.lib import helpers
from tests.lib.helpers import course, assert_owner, assert_replay_of

THREADS = helpers.RACE_THREADS


def test_concurrent_duplicates_one_process(proxy, upstream, ids):
    p = proxy({"upstream_timeout": "5s"})
    key = ids.key()
    owner = helpers.check_race(helpers.race([p], key, ids.actor))
    assert upstream.count(actor=ids.actor) == 1
    assert_replay_of(p.post("/api/courses", key=key, actor=ids.actor, body=course()), owner)


def test_concurrent_duplicates_two_processes(proxy, upstream, ids):
    a = proxy({"upstream_timeout": "5s"})
    b = proxy({"upstream_timeout": "5s"})
    key = ids.key()
    owner = helpers.check_race(helpers.race([a, b], key, ids.actor))
    assert upstream.count(actor=ids.actor) == 1
    for p in (a, b):
        assert_replay_of(p.post("/api/courses", key=key, actor=ids.actor, body=course()), owner)


def test_concurrent_distinct_keys(proxy, upstream, ids):
    p = proxy({"upstream_timeout": "5s"})
    keys = [ids.key() for _ in range(THREADS)]
    results = [None] * THREADS

    def one(i):
        results[i] = p.post("/api/courses", key=keys[i], actor=ids.actor, body=course(),
                            headers=[("X-Test-Delay", "0.2")])

    threads = [threading.Thread(target=one, args=(i,)) for i in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    for r in results:
        assert_owner(r, 201)
    assert upstream.count(actor=ids.actor) == THREADS


def test_replay_after_sigkill_restart(proxy, upstream, ids):
    p = proxy()
    key = ids.key()
    first = p.post("/api/courses", key=key, actor=ids.actor, body=course())
    assert_owner(first)
    p.kill()
    p.start()
    assert_replay_of(p.post("/api/courses", key=key, actor=ids.actor, body=course()), first)
    assert upstream.count(actor=ids.actor) == 1


def test_sigterm_lets_inflight_request_finish(proxy, upstream, pg, ids):
    p = proxy({"upstream_timeout": "5s", "shutdown_timeout": "5s"})
    key = ids.key()
    with helpers.SlowOwner(p, upstream, "/api/courses", key, ids.actor, 1) as owner:
        p.signal(signal.SIGTERM)
    assert isinstance(owner.response, helpers.Response), owner.response
    assert_owner(owner.response, 201)
    assert p.proc.wait(10) == 0, p.stderr_tail()
    row = pg.records.one(ids.actor)
    assert helpers.record_state(row) == "completed"
    assert helpers.record_status(row) == 201

