"""HTTP behaviour: pass-through, header handling, bodies, framing."""
import time
import uuid

import pytest

from tests.lib import helpers
from tests.lib.helpers import problem, course, assert_owner, assert_replay_of


@pytest.mark.parametrize("method", ["GET", "HEAD", "OPTIONS"])
def test_safe_methods_pass_through(proxy, upstream, pg, ids, method):
    p = proxy()
    key = ids.key()
    h = [("Idempotency-Key", key), ("X-Actor-Id", ids.actor),
         ("X-Test-Header", "X-Custom: yes"), ("X-Test-Header", 'ETag: "e1"')]
    rs = [p.request(method, "/api/courses?page=2", h) for _ in range(2)]
    for r in rs:
        assert r.status == 200, r
        assert r.headers.get("Idempotent-Replayed") is None
        assert r.headers.get("X-Custom") == "yes"
        assert r.headers.get("ETag") == '"e1"'
        if method == "HEAD":
            assert r.body == b""
        else:
            assert r.json()["method"] == method
            assert r.json()["path"] == "/api/courses?page=2"
    if method != "HEAD":
        assert rs[0].body != rs[1].body
    got = upstream.requests(actor=ids.actor)
    assert len(got) == 2
    assert all(e.method == method and e.path == "/api/courses?page=2" for e in got)
    assert pg.records.rows(ids.actor) == []


def test_get_with_status_and_body_passes_through(proxy, upstream, ids):
    p = proxy()
    r = p.request("GET", "/api/missing", [("X-Actor-Id", ids.actor), ("X-Test-Status", "404"),
                                          ("X-Test-Body", "no such thing")])
    assert r.status == 404
    assert r.body == b"no such thing"
    assert r.headers.get("Content-Type") == "text/plain"


@pytest.mark.parametrize("method,path", [("POST", "/api/unmatched"), ("PUT", "/api/courses"),
                                         ("DELETE", "/api/courses/c1"),
                                         ("POST", "/api/courses/c1/extra")])
def test_unmatched_pass_through(proxy, upstream, pg, ids, method, path):
    p = proxy()
    key = ids.key()
    h = [("Idempotency-Key", key), ("X-Actor-Id", ids.actor), ("Content-Type", "application/json")]
    rs = [p.request(method, path, h, course()) for _ in range(2)]
    want = 201 if method == "POST" else 200
    for r in rs:
        assert r.status == want, r
        assert r.headers.get("Idempotent-Replayed") is None
        assert r.json()["body_sha"] == helpers.sha(course().encode())
    assert rs[0].body != rs[1].body
    got = upstream.requests(actor=ids.actor)
    assert len(got) == 2
    assert all(e.body == course().encode() for e in got)
    assert pg.records.rows(ids.actor) == []


HOP_HEADERS = [("Connection", "close, X-Drop"), ("X-Drop", "1"), ("Keep-Alive", "timeout=5"),
               ("TE", "trailers"), ("Upgrade", "h2c"), ("Proxy-Connection", "keep-alive")]


@pytest.mark.parametrize("method,path", [("GET", "/api/courses"), ("POST", "/api/courses")])
def test_hop_by_hop_request_headers_dropped(proxy, upstream, ids, method, path):
    p = proxy()
    key = ids.key()
    h = [("Idempotency-Key", key), ("X-Actor-Id", ids.actor), ("Content-Type", "application/json"),
         ("X-Keep", "kept"), ("Via", "1.1 client-side")] + HOP_HEADERS
    r = p.request(method, path, h, course() if method == "POST" else None)
    assert r.status == (201 if method == "POST" else 200), r
    got = upstream.requests(actor=ids.actor)
    assert len(got) == 1
    up = got[0].headers
    for name in ("X-Drop", "Keep-Alive", "TE", "Upgrade", "Proxy-Connection"):
        assert up.get(name) is None, (name, up)
    assert "x-drop" not in (up.get("Connection") or "").lower()
    assert up.get("X-Keep") == "kept"
    assert up.get("Idempotency-Key") == key
    assert up.get("X-Actor-Id") == ids.actor
    assert "127.0.0.1" in (up.get("X-Forwarded-For") or ""), up
    assert up.get("X-Forwarded-Proto") == "http", up
    vias = ", ".join(up.get_all("Via"))
    assert "client-side" in vias and vias.count("1.1") >= 2, vias


def test_hop_by_hop_response_headers_dropped(proxy, upstream, ids):
    p = proxy()
    key = ids.key()
    h = [("X-Test-Header", "Connection: X-Secret-Hop"), ("X-Test-Header", "X-Secret-Hop: 1"),
         ("X-Test-Header", "Keep-Alive: timeout=99"), ("X-Test-Header", "X-End: 2")]
    r = p.post("/api/courses", key=key, actor=ids.actor, body=course(), headers=h)
    assert_owner(r)
    assert r.headers.get("X-Secret-Hop") is None
    assert r.headers.get("Keep-Alive") is None
    assert r.headers.get("X-End") == "2"


def test_forwarded_headers(proxy, upstream, ids):
    p = proxy()
    r = p.request("GET", "/api/courses", [("X-Actor-Id", ids.actor)])
    assert r.status == 200
    up = upstream.requests(actor=ids.actor)[0].headers
    assert "127.0.0.1" in (up.get("X-Forwarded-For") or ""), up
    assert up.get("X-Forwarded-Proto") == "http"
    assert up.get("Via"), up


def test_credentials_forwarded_never_stored(proxy, upstream, pg, ids):
    p = proxy()
    key = ids.key()
    secret = "tok-" + uuid.uuid4().hex
    cookie = "sess-" + uuid.uuid4().hex
    set_cookie = "sid-" + uuid.uuid4().hex
    h = [("Authorization", "Bearer " + secret), ("Cookie", "session=" + cookie),
         ("X-Test-Header", "Set-Cookie: sid=%s; Path=/; HttpOnly" % set_cookie)]
    first = p.post("/api/courses", key=key, actor=ids.actor, body=course(), headers=h)
    assert_owner(first)
    assert set_cookie in (first.headers.get("Set-Cookie") or "")
    up = upstream.requests(actor=ids.actor)[0].headers
    assert up.get("Authorization") == "Bearer " + secret
    assert up.get("Cookie") == "session=" + cookie
    text = helpers.record_text(pg.records.one(ids.actor))
    for s in (secret, cookie, set_cookie, "Set-Cookie", "Authorization"):
        assert s.lower() not in text.lower(), s
    again = p.post("/api/courses", key=key, actor=ids.actor, body=course(), headers=h[:2])
    assert_replay_of(again, first)
    assert again.headers.get("Set-Cookie") is None
    assert upstream.count(actor=ids.actor) == 1
    assert secret not in p.stderr_text() and cookie not in p.stderr_text()


def test_store_headers(proxy, upstream, ids):
    p = proxy(routes="route hdr.op {\n match POST /api/hdr\n store_headers X-Custom X-Rate\n}\n")
    key = ids.key()
    h = [("X-Test-Header", "X-Custom: c1"), ("X-Test-Header", "X-Rate: 7"),
         ("X-Test-Header", "X-Other: o1"), ("X-Test-Header", 'ETag: "t1"'),
         ("X-Test-Header", "Last-Modified: Tue, 01 Jul 2025 10:00:00 GMT"),
         ("X-Test-Header", "Content-Location: /api/hdr/1")]
    first = p.post("/api/hdr", key=key, actor=ids.actor, body=course(), headers=h)
    assert_owner(first)
    assert first.headers.get("X-Other") == "o1"
    again = p.post("/api/hdr", key=key, actor=ids.actor, body=course())
    assert_replay_of(again, first)
    assert again.headers.get("X-Custom") == "c1"
    assert again.headers.get("X-Rate") == "7"
    assert again.headers.get("ETag") == '"t1"'
    assert again.headers.get("Last-Modified") == "Tue, 01 Jul 2025 10:00:00 GMT"
    assert again.headers.get("Content-Location") == "/api/hdr/1"
    assert again.headers.get("X-Other") is None
    assert upstream.count(actor=ids.actor) == 1


def test_large_response_body_omitted_from_record(proxy, upstream, ids):
    p = proxy({"max_stored_body": "1k"})
    key = ids.key()
    first = p.post("/api/courses", key=key, actor=ids.actor, body=course(),
                   headers=[("X-Test-Action", "big:5000")])
    assert_owner(first, 201)
    assert len(first.body) == 5000
    assert first.body == (b"0123456789abcdef" * 400)[:5000]
    assert first.headers.get("Idempotency-Body-Omitted") is None
    again = p.post("/api/courses", key=key, actor=ids.actor, body=course())
    assert again.status == 201
    assert (again.headers.get("Idempotent-Replayed") or "").lower() == "true"
    assert (again.headers.get("Idempotency-Body-Omitted") or "").lower() == "true"
    assert again.body == b""
    assert again.headers.get("Content-Type") == "application/octet-stream"
    assert upstream.count(actor=ids.actor) == 1


def test_body_at_stored_limit_is_kept(proxy, upstream, ids):
    p = proxy({"max_stored_body": "1k"})
    key = ids.key()
    first = p.post("/api/courses", key=key, actor=ids.actor, body=course(),
                   headers=[("X-Test-Action", "big:1024")])
    assert_owner(first)
    again = p.post("/api/courses", key=key, actor=ids.actor, body=course())
    assert_replay_of(again, first)
    assert again.headers.get("Idempotency-Body-Omitted") is None
    assert len(again.body) == 1024


def test_chunked_request_body(proxy, upstream, ids):
    p = proxy()
    key = ids.key()
    data = course().encode()
    h = [("Idempotency-Key", key), ("X-Actor-Id", ids.actor), ("Content-Type", "application/json")]
    first = p.request("POST", "/api/courses", h, chunked=[data[:5], data[5:20], data[20:]])
    assert_owner(first)
    got = upstream.requests(actor=ids.actor)
    assert len(got) == 1
    assert got[0].body == data
    assert got[0].headers.get("Content-Length") == str(len(data))
    assert got[0].headers.get("Transfer-Encoding") is None
    # The same body sent with Content-Length is the same request.
    assert_replay_of(p.request("POST", "/api/courses", h, data), first)
    assert upstream.count(actor=ids.actor) == 1


def test_chunked_upstream_response(proxy, upstream, ids):
    p = proxy()
    key = ids.key()
    first = p.post("/api/courses", key=key, actor=ids.actor, body=course(),
                   headers=[("X-Test-Action", "chunked")])
    assert_owner(first)
    doc = first.json()
    assert doc["path"] == "/api/courses" and doc["body_sha"] == helpers.sha(course().encode())
    assert_replay_of(p.post("/api/courses", key=key, actor=ids.actor, body=course()), first)
    g = p.request("GET", "/api/courses", [("X-Actor-Id", ids.actor), ("X-Test-Action", "chunked")])
    assert g.status == 200 and g.json()["method"] == "GET"


def test_keep_alive(proxy, upstream, ids):
    p = proxy()
    key = ids.key()
    h = [("Idempotency-Key", key), ("X-Actor-Id", ids.actor), ("Content-Type", "application/json")]
    with p.client() as c:
        r1 = c.request("GET", "/api/courses", [("X-Actor-Id", ids.actor)])
        assert r1.status == 200 and not r1.closed
        r2 = c.request("POST", "/api/courses", h, course())
        assert_owner(r2)
        assert not r2.closed
        r3 = c.request("POST", "/api/courses", h, course())
        assert_replay_of(r3, r2)
        assert not r3.closed
        r4 = c.request("POST", "/api/courses", [("X-Actor-Id", ids.actor)], course())
        problem(r4, "idempotency-key-missing", 400)
        r5 = c.request("GET", "/api/courses/c1", [("X-Actor-Id", ids.actor)])
        assert r5.status == 200
    assert upstream.count(actor=ids.actor) == 3


def test_pipelined_requests(proxy, upstream, ids):
    p = proxy()
    h = [("X-Actor-Id", ids.actor)]
    with p.client() as c:
        c.send(helpers.build_request("GET", "/api/p1", h) + helpers.build_request("GET", "/api/p2", h))
        a = c.read_response()
        b = c.read_response()
    assert a.json()["path"] == "/api/p1" and b.json()["path"] == "/api/p2"


FRAMINGS = {
    "cl_and_te": [("Content-Length", "5"), ("Transfer-Encoding", "chunked")],
    "te_gzip": [("Transfer-Encoding", "gzip")],
    "te_gzip_chunked": [("Transfer-Encoding", "gzip, chunked")],
    "two_cl_differ": [("Content-Length", "5"), ("Content-Length", "6")],
    "cl_list": [("Content-Length", "5, 5")],
    "cl_not_a_number": [("Content-Length", "5x")],
}
TARGETS = {
    "matched_post": ("POST", "/api/courses", True),
    "unmatched_post": ("POST", "/api/unmatched", False),
    "get": ("GET", "/api/courses", False),
}


@pytest.mark.parametrize("target", sorted(TARGETS))
@pytest.mark.parametrize("framing", sorted(FRAMINGS))
def test_ambiguous_framing(proxy, upstream, pg, ids, framing, target):
    p = proxy()
    method, path, keyed = TARGETS[target]
    h = [("X-Actor-Id", ids.actor)]
    if keyed:
        h.append(("Idempotency-Key", ids.key()))
    h += FRAMINGS[framing]
    data = helpers.build_request(method, path, h) + b"0\r\n\r\n"
    r, closed = helpers.raw_exchange(p.port, data)
    problem(r, "bad-request", 400)
    assert closed, "the connection stayed open after an ambiguous request"
    assert upstream.count(actor=ids.actor) == 0
    assert pg.records.rows(ids.actor) == []


GARBAGE = [
    b"\x00\x01\x02\x03\r\n\r\n",
    b"GET\r\n\r\n",
    b"GET / HTTP/1.1\r\nHost: a\r\nBad Header: x\r\n\r\n",
    b"GET / HTTP/1.1\r\nHost: a\r\n folded: x\r\n\r\n",
    b"POST /api/courses HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
    b"GET / HTTP/1.1\r\nHost: a\r\nX: " + b"a" * 70000 + b"\r\n\r\n",
    b"GET / HTTP/9.9\r\nHost: a\r\n\r\n",
    b"GET / HTTP/1.1\nHost: a\n\n",
]


def test_garbage_requests_never_forwarded_or_fatal(proxy, upstream, ids):
    """Malformed heads get a 4xx problem and a closed connection; nothing
    reaches the upstream and the proxy keeps serving."""
    p = proxy()
    before = len(upstream.log())
    answered = 0
    for data in GARBAGE:
        try:
            r, closed = helpers.raw_exchange(p.port, data)
        except (helpers.ConnectionClosed, OSError):
            continue  # a reset is acceptable for a head over the limit
        answered += 1
        assert 400 <= r.status < 500, (data[:40], r)
        assert (r.headers.get("Content-Type") or "").startswith("application/problem+json")
        assert closed, data[:40]
    assert answered >= len(GARBAGE) - 1
    assert len(upstream.log()) == before
    assert p.running()
    assert p.request("GET", "/api/courses").status == 200


def test_head_error_has_no_body_and_keeps_the_connection(proxy, upstream, ids):
    """A problem answering HEAD carries headers only, so the next response on
    the same connection is read correctly."""
    p = proxy()
    with p.client() as c:
        r = c.request("HEAD", "/api/courses", [("X-Actor-Id", ids.actor),
                                               ("X-Test-Action", "reset")])
        assert r.status == 502
        assert r.body == b""
        r2 = c.request("GET", "/api/courses", [("X-Actor-Id", ids.actor)])
        assert r2.status == 200
        assert r2.json()["method"] == "GET"


def test_replayed_204_has_no_content_length(proxy, upstream, ids):
    p = proxy()
    key = ids.key()
    h = [("X-Test-Status", "204")]
    first = p.post("/api/courses", key=key, actor=ids.actor, body=course(), headers=h)
    assert first.status == 204 and first.body == b""
    assert first.headers.get("Content-Length") is None
    again = p.post("/api/courses", key=key, actor=ids.actor, body=course(), headers=h)
    assert again.status == 204 and again.body == b""
    assert (again.headers.get("Idempotent-Replayed") or "").lower() == "true"
    assert again.headers.get("Content-Length") is None
    assert upstream.count(actor=ids.actor) == 1


def test_upstream_closing_idle_connections_never_makes_unknown(proxy, upstream, pg, ids):
    """An upstream that drops keep-alive connections soon after answering:
    the pooled connection it closed is never used for a POST, so every owner
    runs exactly once and completes."""
    p = proxy()
    n = 15
    for i in range(n):
        r = p.post("/api/courses", key=ids.key(), actor=ids.actor, body=course(),
                   headers=[("X-Test-Action", "close-after:0.05")])
        assert r.status == 201, (i, r)
        time.sleep(0.1)
    assert upstream.count(actor=ids.actor) == n
    states = [helpers.record_state(row) for row in pg.records.rows(ids.actor)]
    assert states == ["completed"] * n
