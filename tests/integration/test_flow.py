"""The claim flow: new scope, replay, conflict, fingerprints, scopes,
in-progress and retention."""
import time

import pytest

from tests.lib import helpers
from tests.lib.helpers import problem, course, assert_owner, assert_replay_of


def test_new_scope(proxy, upstream, pg, ids):
    p = proxy()
    key = ids.key()
    r = p.post("/api/courses", key=key, actor=ids.actor, body=course(),
               headers=[("X-Test-Header", "Location: /api/courses/c001")])
    assert_owner(r, 201)
    assert r.headers.get("Location") == "/api/courses/c001"
    doc = r.json()
    assert doc["method"] == "POST" and doc["path"] == "/api/courses"
    assert doc["body_sha"] == helpers.sha(course().encode())
    got = upstream.requests(actor=ids.actor)
    assert len(got) == 1
    assert got[0].body == course().encode()
    assert got[0].headers.get("Idempotency-Key") == key
    row = pg.records.one(ids.actor)
    assert helpers.record_state(row) == "completed"
    assert helpers.record_status(row) == 201


def test_replay(proxy, upstream, ids):
    p = proxy()
    key = ids.key()
    extra = [("X-Test-Header", "Location: /api/courses/c042"),
             ("X-Test-Header", 'ETag: "v1"'),
             ("X-Test-Header", "Content-Type: application/vnd.course+json"),
             ("X-Test-Header", "X-Not-Stored: nope")]
    first = p.post("/api/courses", key=key, actor=ids.actor, body=course(), headers=extra)
    assert_owner(first, 201)
    assert first.headers.get("X-Not-Stored") == "nope"
    for _ in range(2):
        again = p.post("/api/courses", key=key, actor=ids.actor, body=course())
        assert_replay_of(again, first)
        assert again.headers.get("Location") == "/api/courses/c042"
        assert again.headers.get("ETag") == '"v1"'
        assert again.headers.get("Content-Type") == "application/vnd.course+json"
        assert again.headers.get("X-Not-Stored") is None
    assert upstream.count(actor=ids.actor) == 1


def test_conflict(proxy, upstream, pg, ids):
    p = proxy()
    key = ids.key()
    first = p.post("/api/courses", key=key, actor=ids.actor, body=course())
    assert_owner(first)
    before = pg.records.one(ids.actor)
    r = p.post("/api/courses", key=key, actor=ids.actor, body=course(title="Other title"))
    problem(r, "idempotency-conflict", 422)
    assert r.headers.get("Idempotent-Replayed") is None
    assert upstream.count(actor=ids.actor) == 1
    assert pg.records.one(ids.actor) == before
    # The original request still replays.
    assert_replay_of(p.post("/api/courses", key=key, actor=ids.actor, body=course()), first)


def test_conflict_mismatch_status_409(proxy, upstream, ids):
    p = proxy({"mismatch_status": "409"})
    key = ids.key()
    assert_owner(p.post("/api/courses", key=key, actor=ids.actor, body=course()))
    r = p.post("/api/courses", key=key, actor=ids.actor, body=course(lessons=9))
    problem(r, "idempotency-conflict", 409)
    assert upstream.count(actor=ids.actor) == 1


SAME_COURSE = {
    "keys_reordered": '{"lessons": 3, "topic": "sql", "title": "Intro to SQL"}',
    "whitespace": '{\n  "title" :"Intro to SQL",\t"topic":"sql" , "lessons":3 }\n',
    "title_trimmed": '{"title": "   Intro to SQL  ", "topic": "sql", "lessons": 3}',
    "lessons_as_string": '{"title": "Intro to SQL", "topic": "sql", "lessons": "3"}',
    "escaped_string": '{"title": "Intro to \\u0053QL", "topic": "sql", "lessons": 3}',
}


@pytest.mark.parametrize("case", sorted(SAME_COURSE))
def test_fingerprint_normalisation(proxy, upstream, ids, case):
    p = proxy()
    key = ids.key()
    first = p.post("/api/courses", key=key, actor=ids.actor, body=course())
    assert_owner(first)
    again = p.post("/api/courses", key=key, actor=ids.actor, body=SAME_COURSE[case])
    assert_replay_of(again, first)
    assert upstream.count(actor=ids.actor) == 1


@pytest.mark.parametrize("body", [course(topic="go"), course(lessons=4),
                                  course(title="Intro to NoSQL")])
def test_fingerprint_selected_field_changed(proxy, upstream, ids, body):
    p = proxy()
    key = ids.key()
    assert_owner(p.post("/api/courses", key=key, actor=ids.actor, body=course()))
    problem(p.post("/api/courses", key=key, actor=ids.actor, body=body), "idempotency-conflict", 422)
    assert upstream.count(actor=ids.actor) == 1


SAME_PAYMENT = [
    ("/api/orders/o1/payments?a=1&b=2", '{"amount": 32, "currency": "EUR", "meta": {"x": 1, "y": [1, 2]}}'),
    ("/api/orders/o1/payments?b=2&a=1", '{"meta": {"y": [1, 2], "x": 1}, "currency": "EUR", "amount": 32.0}'),
    ("/api/orders/o1/payments?a=1&b=2", '{"currency":"\\u0045UR","amount":3.2e1,"meta":{"x":1.0,"y":[1,2]}}'),
]


def test_fingerprint_whole_json(proxy, upstream, ids):
    p = proxy()
    key = ids.key()
    path, body = SAME_PAYMENT[0]
    first = p.post(path, key=key, actor=ids.actor, body=body)
    assert_owner(first)
    for path, body in SAME_PAYMENT[1:]:
        assert_replay_of(p.post(path, key=key, actor=ids.actor, body=body), first)
    changed = [
        ("/api/orders/o1/payments?a=1&b=2", '{"amount": 33, "currency": "EUR", "meta": {"x": 1, "y": [1, 2]}}'),
        ("/api/orders/o1/payments?a=1&b=2", '{"amount": 32, "currency": "EUR", "meta": {"x": 1, "y": [2, 1]}}'),
        ("/api/orders/o1/payments?a=1&b=3", SAME_PAYMENT[0][1]),
        ("/api/orders/o2/payments?a=1&b=2", SAME_PAYMENT[0][1]),
    ]
    for path, body in changed:
        problem(p.post(path, key=key, actor=ids.actor, body=body), "idempotency-conflict", 422)
    assert upstream.count(actor=ids.actor) == 1


def test_fingerprint_raw_body(proxy, upstream, ids):
    p = proxy()
    key = ids.key()
    body = '{"a": 1, "b": 2}'
    first = p.post("/api/raw", key=key, actor=ids.actor, body=body)
    assert_owner(first)
    assert_replay_of(p.post("/api/raw", key=key, actor=ids.actor, body=body), first)
    problem(p.post("/api/raw", key=key, actor=ids.actor, body='{"b": 2, "a": 1}'),
            "idempotency-conflict", 422)
    assert upstream.count(actor=ids.actor) == 1


def test_invalid_json_forwarded_and_fingerprinted_raw(proxy, upstream, ids):
    p = proxy()
    key = ids.key()
    body = b'{"title": "broken", '
    first = p.post("/api/courses", key=key, actor=ids.actor, body=body)
    assert_owner(first)
    assert upstream.requests(actor=ids.actor)[0].body == body
    assert_replay_of(p.post("/api/courses", key=key, actor=ids.actor, body=body), first)
    problem(p.post("/api/courses", key=key, actor=ids.actor, body=b'{"title": "broken",  '),
            "idempotency-conflict", 422)
    assert upstream.count(actor=ids.actor) == 1


def test_delivery_headers_not_in_scope(proxy, upstream, ids):
    p = proxy()
    key = ids.key()
    first = p.post("/api/courses", key=key, actor=ids.actor, body=course(),
                   headers=[("X-Client-Attempt", "1"), ("X-Request-Id", "r1")])
    assert_owner(first)
    again = p.post("/api/courses", key=key, actor=ids.actor, body=course(),
                   headers=[("X-Client-Attempt", "2"), ("X-Request-Id", "r2")])
    assert_replay_of(again, first)
    assert upstream.count(actor=ids.actor) == 1


def test_scope_isolation_actor(proxy, upstream, ids):
    p = proxy()
    key = ids.key()
    other = ids.actor + "-other"
    first = p.post("/api/courses", key=key, actor=ids.actor, body=course())
    assert_owner(first)
    second = p.post("/api/courses", key=key, actor=other, body=course(title="Different"))
    assert_owner(second)
    assert second.body != first.body
    assert upstream.count(actor=ids.actor) == 1
    assert upstream.count(actor=other) == 1
    assert_replay_of(p.post("/api/courses", key=key, actor=ids.actor, body=course()), first)
    assert_replay_of(p.post("/api/courses", key=key, actor=other, body=course(title="Different")), second)


def test_scope_isolation_operation(proxy, upstream, ids):
    p = proxy()
    key = ids.key()
    first = p.post("/api/courses", key=key, actor=ids.actor, body=course())
    assert_owner(first)
    second = p.post("/api/orders/o1/payments", key=key, actor=ids.actor, body=course())
    assert_owner(second)
    assert second.body != first.body
    assert upstream.count(actor=ids.actor) == 2
    assert_replay_of(p.post("/api/orders/o1/payments", key=key, actor=ids.actor, body=course()), second)


def test_in_progress(proxy, upstream, ids):
    p = proxy({"upstream_timeout": "5s"})
    key = ids.key()
    with helpers.SlowOwner(p, upstream, "/api/courses", key, ids.actor, 1.5) as owner:
        r = p.post("/api/courses", key=key, actor=ids.actor, body=course())
        problem(r, "operation-in-progress", 409)
        assert r.headers.get("Retry-After") is not None
        assert int(r.headers.get("Retry-After")) >= 0
    assert_owner(owner.response, 201)
    assert_replay_of(p.post("/api/courses", key=key, actor=ids.actor, body=course()),
                     owner.response)
    assert upstream.count(actor=ids.actor) == 1


def test_in_progress_with_other_fingerprint_is_conflict(proxy, upstream, ids):
    p = proxy({"upstream_timeout": "5s"})
    key = ids.key()
    with helpers.SlowOwner(p, upstream, "/api/courses", key, ids.actor, 1) as owner:
        r = p.post("/api/courses", key=key, actor=ids.actor, body=course(lessons=7))
        problem(r, "idempotency-conflict", 422)
    assert_owner(owner.response, 201)
    assert upstream.count(actor=ids.actor) == 1


def test_after_retention_new_execution(proxy, upstream, ids):
    p = proxy(routes="route short.op {\n match POST /api/short\n retention 1s\n}\n")
    key = ids.key()
    first = p.post("/api/short", key=key, actor=ids.actor, body=course())
    assert_owner(first)
    assert_replay_of(p.post("/api/short", key=key, actor=ids.actor, body=course()), first)
    time.sleep(1.5)
    second = p.post("/api/short", key=key, actor=ids.actor, body=course())
    assert_owner(second, 201)
    assert second.json()["n"] != first.json()["n"]
    assert upstream.count(actor=ids.actor) == 2
    assert_replay_of(p.post("/api/short", key=key, actor=ids.actor, body=course()), second)


def test_after_retention_other_fingerprint_is_new(proxy, upstream, ids):
    p = proxy(routes="route short.op {\n match POST /api/short\n retention 1s\n}\n")
    key = ids.key()
    assert_owner(p.post("/api/short", key=key, actor=ids.actor, body=course()))
    time.sleep(1.5)
    assert_owner(p.post("/api/short", key=key, actor=ids.actor, body=course(title="New")))
    assert upstream.count(actor=ids.actor) == 2
