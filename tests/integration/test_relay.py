"""The transparent relay (docs/http.md, "Everything else streams"): what idemproxy does not intercept
streams through in both directions with bounded memory; upgrades become
tunnels; 103 reaches the client; an owner's large response streams and its
record omits the body; a response that breaks off never looks complete.

Sizes are scaled down under the sanitizer build (slower, and with a larger
fixed footprint); memory there is checked as growth over the proxy's own
footprint after start, so the assertion keeps its meaning: memory does not
grow with the body."""
import json
import socket
import time

import pytest
import websocket

from tests.lib import helpers, streams
from tests.lib.helpers import assert_owner, course, problem
from tests.lib.streams import act, bounded_proxy, footprint, passthrough

MIB = streams.MIB
RSS_LIMIT_MIB = 64
SSE_EVENTS = 5
SSE_GAP_S = 0.4
SSE_LATE_S = 0.15
SLOW_READERS = 20


def assert_bounded(p, base_mib):
    """Peak memory within RSS_LIMIT_MIB (release build), or grown by less than
    it over the footprint after start (sanitizer build)."""
    peak = streams.peak_rss_mib(p.proc)
    print("idemproxy peak RSS %.1f MiB (%.1f MiB after start)" % (peak, base_mib))
    if streams.is_asan():
        assert peak - base_mib < RSS_LIMIT_MIB, (peak, base_mib)
    else:
        assert peak < RSS_LIMIT_MIB, peak


# ---- downloads ----

@pytest.mark.parametrize("framing,action,size,asan_size", [
    ("content-length", "stream", 1024 * MIB, 128 * MIB),
    ("chunked", "stream-chunked", 256 * MIB, 64 * MIB),
])
def test_download_streams_byte_exact_in_bounded_memory(proxy, upstream, ids, framing, action,
                                                        size, asan_size):
    p = bounded_proxy(proxy)
    base = footprint(p)
    n = streams.scaled(size, asan_size)
    r = streams.exchange(p.port, "GET", "/files/big", passthrough(ids.actor) +
                         [act("%s:%d" % (action, n))])
    assert r.status == 200 and r.complete, r
    assert r.length == n and r.digest == streams.pattern_sha(n)
    if framing == "chunked":
        assert (r.headers.get("Transfer-Encoding") or "").lower() == "chunked"
    else:
        assert r.headers.get("Content-Length") == str(n)
    assert_bounded(p, base)
    assert upstream.count(actor=ids.actor) == 1


def test_close_delimited_body(proxy, upstream, ids):
    """No length from the upstream: chunked to an HTTP/1.1 client, complete
    only on the upstream's clean close; up to our close for HTTP/1.0."""
    p = proxy()
    n = 3 * MIB + 17
    r = streams.exchange(p.port, "GET", "/files/c", passthrough(ids.actor) +
                         [act("stream-close:%d" % n)])
    assert r.status == 200 and r.complete and not r.closed, r
    assert (r.headers.get("Transfer-Encoding") or "").lower() == "chunked"
    assert r.length == n and r.digest == streams.pattern_sha(n)
    with streams.Conn(p.port) as c:
        c.sock.sendall(("GET /files/c HTTP/1.0\r\nX-Actor-Id: %s\r\n"
                        "X-Test-Action: stream-close:%d\r\n\r\n" % (ids.actor, n)).encode())
        r10 = c.read_response()
    assert r10.status == 200 and r10.headers.get("Transfer-Encoding") is None
    assert r10.headers.get("Content-Length") is None
    assert r10.length == n and r10.digest == streams.pattern_sha(n)


def test_server_sent_events_arrive_as_they_are_sent(proxy, upstream, ids):
    p = proxy()
    late = []
    with streams.Conn(p.port) as c:
        c.send_request("GET", "/events", passthrough(ids.actor) +
                       [act("sse:%d:%s" % (SSE_EVENTS, SSE_GAP_S))])
        status, headers = c.head()
        assert status == 200
        assert headers.get("Content-Type") == "text/event-stream"
        seen, text = 0, b""
        deadline = time.monotonic() + SSE_EVENTS * SSE_GAP_S + 5
        while seen < SSE_EVENTS and time.monotonic() < deadline:
            if not c.buf and not c.fill():
                break
            now = time.time()
            text += c.buf
            c.buf = b""
            while b"\n\n" in text:
                event, text = text.split(b"\n\n", 1)
                line = event.split(b"data: ", 1)[1]
                i, sent = line.split()
                late.append((int(i), now - float(sent)))
                seen += 1
    assert [i for i, _ in late] == list(range(SSE_EVENTS)), late
    assert all(lag < SSE_LATE_S for _, lag in late), late


# ---- uploads ----

@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_upload_streams_byte_exact_in_bounded_memory(proxy, upstream, ids, chunked):
    """A pass-through upload of any size (max_request_body is for intercepted
    requests only) reaches the upstream byte-exact, framed as sent."""
    p = bounded_proxy(proxy, {"max_request_body": "1k"})
    base = footprint(p)
    n = streams.scaled(256 * MIB, 64 * MIB)
    r = streams.exchange(p.port, "POST", "/uploads", passthrough(ids.actor) + [act("sink")],
                         body_size=n, chunked=chunked, keep=True)
    assert r.status == 201 and r.complete, r
    doc = json.loads(bytes(r.keep))
    assert doc["len"] == n and doc["body_sha"] == streams.pattern_sha(n)
    assert_bounded(p, base)
    (got,) = upstream.requests(actor=ids.actor)
    if chunked:
        assert (got.headers.get("Transfer-Encoding") or "").lower() == "chunked"
        assert got.headers.get("Content-Length") is None
    else:
        assert got.headers.get("Content-Length") == str(n)


def test_slow_readers_do_not_fill_memory(proxy, upstream, ids):
    """Clients that stop reading their 64 MiB responses hold back their
    upstreams; memory stays bounded, then service goes on."""
    p = bounded_proxy(proxy)
    base = footprint(p)
    n = streams.scaled(64 * MIB, 16 * MIB)
    conns = []
    try:
        for _ in range(SLOW_READERS):
            c = streams.Conn(p.port)
            c.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 << 10)
            c.send_request("GET", "/files/slow", passthrough(ids.actor) +
                           [act("stream:%d" % n)])
            conns.append(c)
        for c in conns:
            status, _ = c.head()
            assert status == 200
            res = streams.Result()
            c.take(res, 64 << 10)
        assert upstream.wait_for(SLOW_READERS, actor=ids.actor)
        time.sleep(1.5)   # every upstream writes as far as it is let
        assert_bounded(p, base)
    finally:
        for c in conns:
            c.close()
    r = p.request("GET", "/api/courses", passthrough(ids.actor))
    assert r.status == 200
    assert_owner(p.post("/api/courses", key=ids.key(), actor=ids.actor, body=course()))


# ---- upgrades and interim responses ----

def test_websocket_tunnel_echo_and_close(proxy, upstream, ids):
    p = proxy({"tunnel_timeout": "10s"})
    url = "ws://127.0.0.1:%d/ws" % p.port
    hdr = ["X-Actor-Id: %s" % ids.actor, "X-Test-Action: ws-echo"]
    ws = websocket.create_connection(url, header=hdr, timeout=10)
    try:
        ws.send("hello")
        assert ws.recv() == "hello"
        blob = bytes(range(256)) * 4096   # 1 MiB, both directions through the tunnel
        ws.send_binary(blob)
        assert ws.recv() == blob
        ws.ping(b"p")
        ws.send("again")
        assert ws.recv() == "again"
    finally:
        ws.close()   # a close frame; the upstream answers it and closes
    # The client closed: the tunnel ended, the request was logged once.
    assert helpers.poll(lambda: '"status":101' in p.stderr_text(), 5)
    # The upstream closing first reaches the client too.
    ws = websocket.create_connection(url, header=hdr, timeout=10)
    ws.send("close-now")
    opcode, data = ws.recv_data(control_frame=True)
    assert opcode == websocket.ABNF.OPCODE_CLOSE
    ws.sock.settimeout(5)
    assert ws.sock.recv(1) == b""   # then the connection is closed
    ws.close()
    assert upstream.count(actor=ids.actor) == 2


def test_early_hints_reach_the_client(proxy, upstream, ids):
    p = proxy()
    r = streams.exchange(p.port, "GET", "/page", passthrough(ids.actor) + [act("early-hints")],
                         keep=True)
    assert [s for s, _ in r.interim] == [103]
    assert r.interim[0][1].get("Link") == "</style.css>; rel=preload; as=style"
    assert r.status == 200 and bytes(r.keep) == b'{"hinted":true}'
    # HTTP/1.0 clients know no interim responses.
    with streams.Conn(p.port) as c:
        c.sock.sendall(("GET /page HTTP/1.0\r\nX-Actor-Id: %s\r\nX-Test-Action: early-hints"
                        "\r\n\r\n" % ids.actor).encode())
        r10 = c.read_response()
    assert r10.interim == [] and r10.status == 200


def test_keyed_request_never_upgrades(proxy, upstream, ids):
    p = proxy()
    r = p.post("/api/courses", key=ids.key(), actor=ids.actor, body=course(),
               headers=[("Connection", "upgrade"), ("Upgrade", "websocket")])
    assert_owner(r)
    (got,) = upstream.requests(actor=ids.actor)
    assert got.headers.get("Upgrade") is None
    assert "upgrade" not in (got.headers.get("Connection") or "").lower()


# ---- owners ----

def test_large_owner_response_streams_and_its_record_omits_the_body(proxy, upstream, pg, ids):
    p = proxy({"max_stored_body": "1m"})
    key = ids.key()
    n = 8 * MIB
    h = [("Idempotency-Key", key), ("X-Actor-Id", ids.actor), ("Content-Type", "application/json"),
         act("stream:%d" % n)]
    r = streams.exchange(p.port, "POST", "/api/courses", h, body_size=None)
    assert r.status == 201 and r.complete and r.length == n, r
    assert r.digest == streams.pattern_sha(n)
    assert r.headers.get("Idempotency-Body-Omitted") is None
    again = p.post("/api/courses", key=key, actor=ids.actor, body="")
    assert again.status == 201 and again.body == b""
    assert (again.headers.get("Idempotent-Replayed") or "").lower() == "true"
    assert (again.headers.get("Idempotency-Body-Omitted") or "").lower() == "true"
    assert helpers.record_state(pg.records.one(ids.actor)) == "completed"
    assert upstream.count(actor=ids.actor) == 1


@pytest.mark.parametrize("action", ["break", "break-chunked"])
def test_owner_stream_broken_mid_body(proxy, upstream, pg, ids, action):
    """The upstream breaks off after the response streamed past
    max_stored_body: the client's connection ends short of the response's
    end, the record is unknown, a retry is not run again."""
    p = proxy({"max_stored_body": "1m"})
    key = ids.key()
    h = [("Idempotency-Key", key), ("X-Actor-Id", ids.actor), ("Content-Type", "application/json"),
         act("%s:%d" % (action, 4 * MIB))]
    r = streams.exchange(p.port, "POST", "/api/courses", h)
    assert r.status == 201 and not r.complete and r.closed, r
    assert 1 * MIB < r.length <= 4 * MIB
    assert helpers.poll(lambda: helpers.record_state(pg.records.one(ids.actor)) == "unknown", 5)
    problem(p.post("/api/courses", key=key, actor=ids.actor, body=""), "outcome-unknown", 409)
    assert upstream.count(actor=ids.actor) == 1


# ---- bodies cut short, bad input ----

@pytest.mark.parametrize("action", ["break", "break-chunked", "break-close"])
def test_passthrough_body_cut_short_never_looks_complete(proxy, upstream, ids, action):
    """A short Content-Length, a missing last chunk, a reset during a
    close-delimited body: the client's connection ends short of the end.
    (A reset may also destroy the head before idemproxy read it: a 502.)"""
    p = proxy()
    r = streams.exchange(p.port, "GET", "/files/cut", passthrough(ids.actor) +
                         [act("%s:%d" % (action, 2 * MIB))])
    if action == "break-close" and r.status == 502:
        return
    assert r.status == 200 and not r.complete and r.closed, r
    assert r.length <= 2 * MIB


def test_upstream_sending_more_than_announced(proxy, upstream, ids):
    """The bytes past the announced length never reach another exchange."""
    p = proxy({"workers": "1"})
    with p.client() as c:
        r = c.request("GET", "/x", passthrough(ids.actor) + [act("extra")])
        assert r.status == 200 and r.body == b"hello"
        again = c.request("GET", "/y", passthrough(ids.actor))
        assert again.status == 200 and again.json()["path"] == "/y"
    assert b"smuggled" not in again.body
    assert helpers.poll(lambda: "more than the response it announced" in p.stderr_text(), 5)


def test_chunk_size_overflow_is_not_relayed_as_complete(proxy, upstream, ids):
    p = proxy()
    r = streams.exchange(p.port, "GET", "/x", passthrough(ids.actor) + [act("chunk-overflow")])
    assert not r.complete and r.closed, r
    assert p.request("GET", "/y", passthrough(ids.actor)).status == 200


def test_unasked_upgrade_is_an_upstream_error(proxy, upstream, ids):
    p = proxy()
    r = p.request("GET", "/x", passthrough(ids.actor) + [act("upgrade-unasked")])
    problem(r, "upstream-error", 502)


def test_client_data_on_a_refused_upgrade_is_no_request(proxy, upstream, ids):
    """Bytes a client sends after an upgrade request that the upstream turns
    down never become a request: the connection closes after the answer."""
    p = proxy()
    with streams.Conn(p.port) as c:
        c.sock.sendall(("GET /chat HTTP/1.1\r\nHost: t\r\nX-Actor-Id: %s\r\n"
                        "Connection: upgrade\r\nUpgrade: websocket\r\n\r\n"
                        "GET /smuggled HTTP/1.1\r\nHost: t\r\nX-Actor-Id: %s\r\n\r\n"
                        % (ids.actor, ids.actor)).encode())
        r = c.read_response(keep=True)
        assert r.status == 200 and r.closed, r
    assert [g.path for g in upstream.requests(actor=ids.actor)] == ["/chat"]


def test_stalled_upload_times_out(proxy, upstream, ids):
    """A client that stops sending its streamed body for client_timeout gets
    408 and its connection closed; the upstream never gets the rest."""
    p = proxy({"client_timeout": "1s"})
    with streams.Conn(p.port) as c:
        c.sock.sendall(("POST /uploads HTTP/1.1\r\nHost: t\r\nX-Actor-Id: %s\r\n"
                        "X-Test-Action: sink\r\nContent-Length: 100000\r\n\r\n" % ids.actor
                        ).encode() + b"x" * 1000)
        r = c.read_response(keep=True)
    assert r.status == 408 and r.closed, r
    assert json.loads(bytes(r.keep))["type"].endswith("/request-timeout")
    # The sink logs a request once it read the whole body: never.
    time.sleep(0.5)
    assert upstream.count(actor=ids.actor) == 0


# ---- the connection around a streamed exchange ----

def send_head_then_wait_continue(c, method, path, headers, length):
    """Send a head with Expect: 100-continue and read the 100 it gets."""
    head = "%s %s HTTP/1.1\r\nHost: t\r\n" % (method, path) + \
        "".join("%s: %s\r\n" % kv for kv in headers) + \
        "Expect: 100-continue\r\nContent-Length: %d\r\n\r\n" % length
    c.sock.sendall(head.encode())
    status, _ = c.head()
    return status


@pytest.mark.parametrize("keyed", [False, True], ids=["streamed", "intercepted"])
def test_expect_continue_is_answered_by_idemproxy(proxy, upstream, ids, keyed):
    p = proxy()
    body = course().encode()
    h = passthrough(ids.actor) + [("Content-Type", "application/json")]
    if keyed:
        h.append(("Idempotency-Key", ids.key()))
    with streams.Conn(p.port) as c:
        assert send_head_then_wait_continue(c, "POST", "/api/courses" if keyed else "/up",
                                            h, len(body)) == 100
        c.sock.sendall(body)
        r = c.read_response(keep=True)
    assert r.status == 201 and json.loads(bytes(r.keep))["body_sha"] == helpers.sha(body)
    (got,) = upstream.requests(actor=ids.actor)
    assert got.headers.get("Expect") is None and got.body == body


def test_keep_alive_after_streamed_exchanges(proxy, upstream, ids):
    """A streamed upload and a streamed download leave the connection ready
    for the next request, pipelined or not."""
    p = proxy()
    n = 3 * MIB
    with streams.Conn(p.port) as c:
        c.send_request("POST", "/uploads", passthrough(ids.actor) + [act("sink")], body_size=n)
        up = c.read_response(keep=True)
        assert up.status == 201 and not up.closed and json.loads(bytes(up.keep))["len"] == n
        c.send_request("GET", "/files/a", passthrough(ids.actor) + [act("stream-chunked:%d" % n)])
        c.send_request("GET", "/files/b", passthrough(ids.actor))
        down = c.read_response()
        assert down.status == 200 and down.complete and down.digest == streams.pattern_sha(n)
        nxt = c.read_response(keep=True)
        assert nxt.status == 200 and json.loads(bytes(nxt.keep))["path"] == "/files/b"
    assert upstream.count(actor=ids.actor) == 3


def test_upstream_answering_before_the_body_ends(proxy, upstream, ids):
    """The upstream answers a streamed upload before reading it: the client
    gets the answer, then the connection closes (the rest of its body is
    never taken for a next request)."""
    p = proxy()
    with streams.Conn(p.port) as c:
        c.sock.sendall(("POST /early HTTP/1.1\r\nHost: t\r\nX-Actor-Id: %s\r\n"
                        "X-Test-Action: answer-early\r\nContent-Length: %d\r\n\r\n"
                        % (ids.actor, 64 * MIB)).encode() + b"x" * 4096)
        r = c.read_response()
        assert r.status == 413 and r.closed, r
        assert c.wait_closed(5)
    assert upstream.count(actor=ids.actor) == 1


def test_malformed_streamed_body_closes(proxy, upstream, ids):
    """A streamed chunked body that turns malformed: 400 and the connection
    closed; what follows is no request."""
    p = proxy()
    with streams.Conn(p.port) as c:
        c.sock.sendall(("POST /bad HTTP/1.1\r\nHost: t\r\nX-Actor-Id: %s\r\n"
                        "Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\nzz\r\n"
                        "GET /smuggled HTTP/1.1\r\nHost: t\r\n\r\n" % ids.actor).encode())
        r = c.read_response()
        assert r.status == 400 and r.closed, r
    assert "/smuggled" not in [g.path for g in upstream.requests()]


def test_client_leaving_a_download_frees_it(proxy, upstream, ids):
    p = proxy()
    c = streams.Conn(p.port)
    c.send_request("GET", "/files/gone", passthrough(ids.actor) + [act("stream:%d" % (512 * MIB))])
    status, _ = c.head()
    assert status == 200
    c.close()
    # The exchange ended with its client: logged, nothing in flight.
    assert helpers.poll(lambda: '"path":"/files/gone"' in p.stderr_text(), 5)
    assert p.request("GET", "/next", passthrough(ids.actor)).status == 200


def test_head_request_passes_through(proxy, upstream, ids):
    p = proxy()
    r = streams.exchange(p.port, "HEAD", "/files/h", passthrough(ids.actor) +
                         [act("stream:%d" % MIB)])
    assert r.status == 200 and r.complete and r.length == 0
    assert r.headers.get("Content-Length") == str(MIB)


def read_chunked_with_trailers(c):
    """A chunked body as it came: (body, the trailer section's lines)."""
    body = b""
    while True:
        size = int(c.line().split(b";", 1)[0], 16)
        if size == 0:
            break
        while len(c.buf) < size + 2:
            assert c.fill(), "closed inside a chunk"
        body, c.buf = body + c.buf[:size], c.buf[size + 2:]
    trailers = []
    while True:
        line = c.line()
        if not line:
            return body, trailers
        trailers.append(line)


TRAILER_LINES = [b"X-Trailer-A: one", b"X-Trailer-B: two"]


def test_trailers_reach_an_http11_client(proxy, upstream, ids):
    """A chunked response's trailer section reaches an HTTP/1.1 client as
    the upstream sent it, and the connection goes on; an HTTP/1.0 client
    gets the body without them."""
    p = proxy()
    with streams.Conn(p.port) as c:
        for _ in range(2):
            c.send_request("GET", "/api/things/t", passthrough(ids.actor) + [act("trailers")])
            status, headers = c.head()
            assert status == 200, (status, headers)
            assert (headers.get("Transfer-Encoding") or "").lower() == "chunked", headers
            assert headers.get("Content-Length") is None, headers
            body, trailers = read_chunked_with_trailers(c)
            assert json.loads(body)["n"] >= 1
            assert trailers == TRAILER_LINES, trailers
    assert upstream.count(actor=ids.actor) == 2
    with streams.Conn(p.port) as c:
        c.sock.sendall(("GET /api/things/t HTTP/1.0\r\nX-Actor-Id: %s\r\nX-Test-Action: trailers"
                        "\r\n\r\n" % ids.actor).encode())
        status, headers = c.head()
        while c.fill():
            pass
    assert status == 200 and headers.get("Transfer-Encoding") is None, headers
    assert json.loads(bytes(c.buf))["n"] >= 1
    assert b"X-Trailer" not in c.buf


def test_a_length_response_keeps_its_length_for_a_te_trailers_client(proxy, upstream, ids):
    """An HTTP/1.1 upstream's Content-Length response that announces no
    Trailer keeps its length, even to a client that said TE: trailers."""
    p = proxy()
    with streams.Conn(p.port) as c:
        c.send_request("GET", "/api/things/len", passthrough(ids.actor) + [("TE", "trailers")])
        status, headers = c.head()
        assert status == 200, (status, headers)
        assert headers.get("Transfer-Encoding") is None, headers
        assert int(headers.get("Content-Length") or 0) > 0, headers
    assert upstream.count(actor=ids.actor) == 1


def test_owner_trailers_reach_the_owner_not_the_replay(proxy, upstream, ids):
    """An owner's response held whole goes to its client chunked, trailers
    after the body; the record keeps no trailers, so its replay has none."""
    p = proxy()
    key = ids.key()
    h = [("Idempotency-Key", key), ("X-Actor-Id", ids.actor), ("Content-Type", "application/json"),
         act("trailers")]
    with streams.Conn(p.port) as c:
        c.sock.sendall(("POST /api/courses HTTP/1.1\r\nHost: t\r\n%sContent-Length: %d\r\n\r\n"
                        % ("".join("%s: %s\r\n" % kv for kv in h), len(course()))).encode()
                       + course().encode())
        status, headers = c.head()
        assert status == 201, (status, headers)
        assert (headers.get("Transfer-Encoding") or "").lower() == "chunked", headers
        assert headers.get("Content-Length") is None, headers
        body, trailers = read_chunked_with_trailers(c)
    assert trailers == TRAILER_LINES, trailers
    again = p.post("/api/courses", key=key, actor=ids.actor, body=course())
    assert (again.headers.get("Idempotent-Replayed") or "").lower() == "true"
    assert again.status == 201 and again.body == body
    assert again.headers.get("X-Trailer-A") is None
    assert upstream.count(actor=ids.actor) == 1
