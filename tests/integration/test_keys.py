"""Checks before the claim: key presence and syntax, actor, body size."""
import pytest

from tests.lib import helpers
from tests.lib.helpers import problem, course


def test_no_key_required(proxy, upstream, pg, ids):
    p = proxy()
    r = p.post("/api/courses", actor=ids.actor, body=course())
    problem(r, "idempotency-key-missing", 400)
    assert upstream.count(actor=ids.actor) == 0
    assert pg.records.rows(ids.actor) == []


def test_no_key_optional(proxy, upstream, pg, ids):
    p = proxy()
    r = p.post("/api/optional", actor=ids.actor, body=course())
    helpers.assert_owner(r, 201)
    assert r.json()["path"] == "/api/optional"
    assert upstream.count(actor=ids.actor) == 1
    assert pg.records.rows(ids.actor) == []


def test_optional_key_given_is_enforced(proxy, upstream, ids):
    p = proxy()
    key = ids.key()
    first = p.post("/api/optional", key=key, actor=ids.actor, body=course())
    helpers.assert_owner(first)
    again = p.post("/api/optional", key=key, actor=ids.actor, body=course())
    helpers.assert_replay_of(again, first)
    assert upstream.count(actor=ids.actor) == 1


BAD_KEYS = {
    "empty": b"",
    "too_long_256": b"k" * 256,
    "quoted_too_long_256": b'"' + b"k" * 256 + b'"',
    "unterminated_quote": b'"unterminated',
    "space_inside": b"two words",
    "non_ascii": "clé".encode("utf-8"),
}


@pytest.mark.parametrize("case", sorted(BAD_KEYS))
def test_invalid_key(proxy, upstream, pg, ids, case):
    p = proxy()
    r = p.post("/api/courses", key=BAD_KEYS[case], actor=ids.actor, body=course())
    problem(r, "idempotency-key-invalid", 400)
    assert upstream.count(actor=ids.actor) == 0
    assert pg.records.rows(ids.actor) == []


# Control characters are not valid in any HTTP field value, so the HTTP
# layer rejects them before the key is looked at (framing comes first).
@pytest.mark.parametrize("value", [b"abc\x01def", b"abc\x7fdef"])
def test_control_char_in_key_is_bad_request(proxy, upstream, pg, ids, value):
    p = proxy()
    r = p.post("/api/courses", key=value, actor=ids.actor, body=course())
    problem(r, "bad-request", 400)
    assert upstream.count(actor=ids.actor) == 0
    assert pg.records.rows(ids.actor) == []


def test_key_of_255_chars_is_valid(proxy, upstream, ids):
    p = proxy()
    r = p.post("/api/courses", key="k" * 255, actor=ids.actor, body=course())
    helpers.assert_owner(r)
    assert upstream.count(actor=ids.actor) == 1


def test_quoted_and_bare_key_are_the_same(proxy, upstream, ids):
    p = proxy()
    key = ids.key()
    first = p.post("/api/courses", key='"%s"' % key, actor=ids.actor, body=course())
    helpers.assert_owner(first)
    again = p.post("/api/courses", key=key, actor=ids.actor, body=course())
    helpers.assert_replay_of(again, first)
    assert upstream.count(actor=ids.actor) == 1
    # The key goes upstream unchanged, as the client wrote it.
    assert upstream.requests(actor=ids.actor)[0].headers.get("Idempotency-Key") == '"%s"' % key


def test_actor_missing(proxy, upstream, pg, ids):
    p = proxy()
    key = ids.key()
    r = p.post("/api/courses", key=key, body=course())
    problem(r, "actor-missing", 401)
    assert upstream.count(key=key) == 0
    assert pg.records.rows(key) == []


def test_anonymous_route_needs_no_actor(proxy, upstream, ids):
    p = proxy()
    key = ids.key()
    first = p.post("/api/anon", key=key, body=course())
    helpers.assert_owner(first)
    again = p.post("/api/anon", key=key, body=course())
    helpers.assert_replay_of(again, first)
    assert upstream.count(key=key) == 1


@pytest.mark.parametrize("framing", ["content-length", "chunked"])
def test_body_too_large(proxy, upstream, pg, ids, framing):
    p = proxy({"max_request_body": "1k"})
    big = course(title="x" * 2000)
    h = [("Idempotency-Key", ids.key()), ("X-Actor-Id", ids.actor),
         ("Content-Type", "application/json")]
    if framing == "chunked":
        data = big.encode()
        r = p.request("POST", "/api/courses", h, chunked=[data[:700], data[700:1400], data[1400:]])
    else:
        r = p.request("POST", "/api/courses", h, big)
    problem(r, "request-too-large", 413)
    assert upstream.count(actor=ids.actor) == 0
    assert pg.records.rows(ids.actor) == []


def test_body_at_limit_is_accepted(proxy, upstream, ids):
    p = proxy({"max_request_body": "1k"})
    body = course(title="x" * 100)
    body = body[:-1] + " " * (1024 - len(body)) + "}"
    assert len(body) == 1024
    r = p.post("/api/courses", key=ids.key(), actor=ids.actor, body=body)
    helpers.assert_owner(r)
    assert upstream.count(actor=ids.actor) == 1
