"""HTTP/2 on both sides (docs/http.md, "HTTP/2"), with real clients and
servers: Debian's curl (--http2-prior-knowledge on a plain listener,
--http2 over TLS, ALPN h2 checked from -w %{http_version}), nghttp
(nghttp2-client), python3-h2 for streams with their own headers and for
flow control in the test's hands, and as upstreams the suite's HTTP/1.1
test upstream, hypercorn (an ASGI app in h2c prior-knowledge mode,
tests/lib/h2c_upstream.py) and nghttpd --no-tls. Every idempotency check
counts the upstream's executions exactly; memory is read from
/proc/PID/status."""
import hashlib
import json
import os
import subprocess
import time

import hpack
import pytest

from tests.lib import h2, helpers, jwtkit, procs, streams
from tests.lib.helpers import assert_owner, assert_replay_of, course, problem
from tests.lib.streams import bounded_proxy, footprint
from tests.lib.upstream import Upstream

MIB = streams.MIB
STREAMS = 100              # concurrent streams on one connection
KEYS = 50                  # the keys they share
LIMIT = 10                 # http2_max_concurrent_streams of the limit tests
HELD_DELAY = "3"           # X-Test-Delay of a request the upstream holds
SLOW_UPSTREAM_TIMEOUT = "8s"   # upstream_timeout where the upstream holds requests (under lease)
DOWNLOAD = 100 * MIB
RELAY_BUFFER = 256 << 10   # relay_buffer of the memory tests
# What a relayed h2 stream may hold in idemproxy at once: relay_buffer
# per direction on each of the pair's ends and the upstream connection,
# plus the stream's flow-control window (within relay_buffer): 8 of them
# is generous. The fixed part covers nghttp2's session, the allocator's
# arenas as the two workers touch them, and libevent's buffers.
RELAY_COPIES = 8
FIXED_MIB = 16
STALL_POLLS = 5            # unchanged progress readings that make a stall
STALL_STEP = 0.3
SLOW_STEPS = 64            # window openings of 16 KiB in the slow phase
SSE_EVENTS = 5


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    d = str(tmp_path_factory.mktemp("pki"))
    ca = jwtkit.Pki(d)
    return {"ca": ca.ca, "pair": ca.issue("server")}


def tls_settings(pki, **extra):
    crt, key = pki["pair"]
    s = {"tls_certificate": crt, "tls_certificate_key": key}
    s.update(extra)
    return s


MODES = {
    # mode: (curl option, scheme, TLS listener)
    "prior-knowledge": ("--http2-prior-knowledge", "http", False),
    "tls-alpn": ("--http2", "https", True),
}


def mode_proxy(proxy, pki, mode, **settings):
    _, _, tls = MODES[mode]
    return proxy(tls_settings(pki, **settings) if tls else settings or None)


def curl_to(p, pki, mode, path, **kw):
    option, scheme, tls = MODES[mode]
    host = "localhost" if tls else "127.0.0.1"
    return h2.curl("%s://%s:%d%s" % (scheme, host, p.port, path), option,
                   cacert=pki["ca"] if tls else None, **kw)


def keyed(key, actor, extra=()):
    return [("Idempotency-Key", key), ("X-Actor-Id", actor),
            ("Content-Type", "application/json")] + list(extra)


def h2_keyed(key, actor, extra=()):
    return [(k.lower(), v) for k, v in keyed(key, actor, extra)]


# ---- curl: owner, replay, conflict, in progress ----

@pytest.mark.parametrize("mode", sorted(MODES))
def test_curl_owner_replay_conflict_in_progress(proxy, upstream, pki, ids, mode):
    p = mode_proxy(proxy, pki, mode, upstream_timeout=SLOW_UPSTREAM_TIMEOUT)
    key = ids.key()
    body = course().encode()

    owner = curl_to(p, pki, mode, "/api/courses", headers=keyed(key, ids.actor), data=body)
    assert owner.http_version == "2", owner
    assert_owner(owner)
    assert upstream.count(key=key) == 1

    replay = curl_to(p, pki, mode, "/api/courses", headers=keyed(key, ids.actor), data=body)
    assert replay.http_version == "2", replay
    assert_replay_of(replay, owner)
    assert upstream.count(key=key) == 1

    other = course(title="Another course").encode()
    conflict = curl_to(p, pki, mode, "/api/courses", headers=keyed(key, ids.actor), data=other)
    assert conflict.http_version == "2", conflict
    problem(conflict, "idempotency-conflict", 422)
    assert upstream.count(key=key) == 1

    slow = ids.key()
    held = helpers.Background(lambda: curl_to(
        p, pki, mode, "/api/courses", data=body,
        headers=keyed(slow, ids.actor, [("X-Test-Delay", HELD_DELAY)])))
    assert len(upstream.wait_for(1, key=slow)) == 1, "the owner never reached the upstream"
    dup = curl_to(p, pki, mode, "/api/courses", headers=keyed(slow, ids.actor), data=body)
    assert dup.http_version == "2", dup
    problem(dup, "operation-in-progress", 409)
    assert dup.headers.get("Retry-After") is not None, dup
    first = held.join()
    assert first.http_version == "2", first
    assert_owner(first)
    assert upstream.count(key=slow) == 1
    assert_replay_of(curl_to(p, pki, mode, "/api/courses", headers=keyed(slow, ids.actor),
                             data=body), first)
    assert upstream.count(key=slow) == 1


def test_tls_listener_offers_h2_and_http11_by_alpn(proxy, upstream, pki, ids):
    p = proxy(tls_settings(pki))
    assert h2.alpn_of(p.port, pki["ca"]) == "h2"
    assert h2.alpn_of(p.port, pki["ca"], ("http/1.1",)) == "http/1.1"
    r = curl_to(p, pki, "tls-alpn", "/api/things/1", headers=[("X-Actor-Id", ids.actor)],
                extra=["--http1.1"])
    assert r.status == 200 and r.http_version == "1.1", r


# ---- nghttp ----

def test_nghttp_replay_and_pass_through(proxy, upstream, ids):
    p = proxy()
    base = "http://127.0.0.1:%d" % p.port
    key = ids.key()
    body = course().encode()
    hdrs = keyed(key, ids.actor)
    first = h2.nghttp(base + "/api/courses", hdrs, data=body)
    assert first.rc == 0, first
    assert [s for s, _ in first.responses] == [201], first
    again = h2.nghttp(base + "/api/courses", hdrs, data=body)
    assert again.rc == 0, again
    (status, headers), = again.responses
    assert status == 201 and dict(headers).get("idempotent-replayed") == "true", again
    assert again.stdout == first.stdout
    assert upstream.count(key=key) == 1

    # Two streams of one connection with one key: executed once.
    key2 = ids.key()
    both = h2.nghttp(base + "/api/courses", keyed(key2, ids.actor), data=body, multiply=2)
    assert both.rc == 0, both
    assert sorted(s for s, _ in both.responses) in ([201, 201], [201, 409]), both
    assert upstream.count(key=key2) == 1

    get = h2.nghttp(base + "/api/things/7?x=1", [("X-Actor-Id", ids.actor)])
    assert get.rc == 0 and [s for s, _ in get.responses] == [200], get
    (e,) = upstream.requests(actor=ids.actor, method="GET")
    assert e.target == "/api/things/7?x=1"
    assert json.loads(get.stdout)["n"] == e.n


def test_a_replayed_5xx_says_not_to_retry_over_h2(proxy, upstream, ids):
    """An HTTP/2 replay of a stored 500 carries x-should-retry: false,
    once; the owner's 500, the upstream's, carries none."""
    p = proxy()
    key = ids.key()
    head = h2_keyed(key, ids.actor, [("x-test-status", "500")])
    with h2.Client(p.port) as c:
        owner = c.response(c.request("POST", "/api/courses", head, body=course().encode()))
        replay = c.response(c.request("POST", "/api/courses", head, body=course().encode()))
    assert owner.status == 500 and owner.headers.get_all("x-should-retry") == [], owner
    assert_replay_of(replay, owner)
    assert replay.headers.get_all("x-should-retry") == ["false"], replay
    assert replay.headers.get("stripe-should-retry") is None, replay
    assert upstream.count(key=key) == 1


def test_http2_off(proxy, upstream, pki, ids):
    """http2 off: no h2 by ALPN, curl --http2 falls back to HTTP/1.1,
    nghttp cannot speak, and a preface on a plain listener is not HTTP/2."""
    tls = proxy(tls_settings(pki, http2="off"))
    assert h2.alpn_of(tls.port, pki["ca"]) != "h2"
    r = curl_to(tls, pki, "tls-alpn", "/api/things/1", headers=[("X-Actor-Id", ids.actor)])
    assert r.status == 200 and r.http_version == "1.1", r
    n = h2.nghttp("https://localhost:%d/api/things/nghttp" % tls.port,
                  [("X-Actor-Id", ids.actor)], extra=["-y"])
    assert not n.responses and "HTTP/2 protocol was not selected" in n.stderr, n
    plain = proxy({"http2": "off"})
    with h2.Raw(plain.port) as raw:
        raw.send(h2.frame(h2.HEADERS, h2.END_HEADERS | h2.END_STREAM, 1,
                          h2.hpack_request("GET", "/api/things/raw")))
        while raw.read(10):
            pass
        assert raw.buf == b"" or raw.buf.startswith(b"HTTP/1.1 4"), raw.buf[:200]
    assert upstream.count(path="/api/things/nghttp") == 0
    assert upstream.count(path="/api/things/raw") == 0


# ---- many streams on one connection ----

@pytest.mark.parametrize("kind", ["http1", "h2c"])
def test_100_streams_50_keys_one_connection(request, proxy, ids, kind):
    """Over an HTTP/1.1 upstream and over an h2c one (whose streams share
    its connections): each key executed once, every stream answered."""
    if kind == "h2c":
        upstream = request.getfixturevalue("h2c_upstream")
        p = proxy(h2c(upstream))
    else:
        upstream = request.getfixturevalue("upstream")
        p = proxy()
    keys = [ids.key() for _ in range(KEYS)]
    with h2.Client(p.port) as c:
        limit = c.settings().max_concurrent_streams
        assert limit >= STREAMS, limit
        sids = []
        for i in range(STREAMS):
            key = keys[i % KEYS]
            sids.append((key, c.request("POST", "/api/courses",
                                        h2_keyed(key, ids.actor, [("X-Test-Delay", "0.5")]),
                                        course().encode())))
        answers = {}
        for key, sid in sids:
            st = c.response(sid, timeout=60)
            assert st.ended and st.reset is None, st
            answers.setdefault(key, []).append(st)
    for key in keys:
        assert upstream.count(key=key) == 1, key
        owners = [s for s in answers[key]
                  if s.status == 201 and s.headers.get("Idempotent-Replayed") is None]
        assert len(owners) == 1, answers[key]
        for s in answers[key]:
            if s is owners[0]:
                continue
            if s.status == 409:
                problem(s, "operation-in-progress", 409)
            else:
                assert_replay_of(s, owners[0])
    assert len(upstream.requests(actor=ids.actor)) == KEYS


def test_max_concurrent_streams_a_client_that_waits(proxy, upstream, ids):
    """http2_max_concurrent_streams is in the SETTINGS; a client keeping to
    it opens the 11th stream when one ends, and every stream is served."""
    p = proxy({"http2_max_concurrent_streams": str(LIMIT)})
    total = 3 * LIMIT
    keys = [ids.key() for _ in range(total)]
    with h2.Client(p.port) as c:
        assert c.settings().max_concurrent_streams == LIMIT
        pending, done = list(keys), {}
        open_ = {}
        while pending or open_:
            while pending and len(open_) < LIMIT:
                key = pending.pop(0)
                open_[c.request("POST", "/api/courses", h2_keyed(key, ids.actor),
                                course().encode())] = key
            c.wait(lambda: any(c.streams[s].done for s in open_), "a stream's end", 60)
            for sid in [s for s in open_ if c.streams[s].done]:
                done[open_.pop(sid)] = c.streams[sid]
    for key in keys:
        assert_owner(done[key])
        assert upstream.count(key=key) == 1


def raw_headers_block(path, actor, step):
    """A GET the upstream holds open (an event stream waiting for step) until
    the test lets it end: no timing decides which streams are open at once."""
    return h2.hpack_request("GET", path, headers=[("x-actor-id", actor),
                                                  ("x-test-action", "sse-step:2:%s" % step)])


def test_max_concurrent_streams_a_client_that_does_not_wait(proxy, upstream, ids):
    """A client that opens an 11th stream anyway has it refused (RST_STREAM
    REFUSED_STREAM, or a GOAWAY whose last stream id is below it: not
    processed, RFC 9113 6.8) and never executed; the 10 streams before it
    are all answered."""
    p = proxy({"http2_max_concurrent_streams": str(LIMIT),
               "upstream_timeout": SLOW_UPSTREAM_TIMEOUT})
    held = [2 * i + 1 for i in range(LIMIT)]
    extra = 2 * LIMIT + 1
    with h2.Raw(p.port) as raw:
        raw.drain(10, until=lambda f: f[0] == h2.SETTINGS and not f[1] & h2.ACK)
        raw.send(h2.settings_frame(ack=True))
        step = lambda sid: "%s-%d" % (ids.actor, sid)  # noqa: E731
        for sid in held:
            raw.send(h2.frame(h2.HEADERS, h2.END_HEADERS | h2.END_STREAM, sid,
                              raw_headers_block("/api/held/%d" % sid, ids.actor, step(sid))))
        assert len(upstream.wait_for(LIMIT, actor=ids.actor)) == LIMIT
        raw.send(h2.frame(h2.HEADERS, h2.END_HEADERS | h2.END_STREAM, extra,
                          raw_headers_block("/api/held/%d" % extra, ids.actor, step(extra))))
        ended, statuses, resets, goaway = set(), {}, {}, None
        dec = hpack.Decoder()
        stepped = False
        while len(ended) < LIMIT:
            if not stepped and (extra in resets or goaway is not None):
                # The extra stream is answered: the held ones may end now.
                for sid in held:
                    upstream.step(step(sid), 1)
                stepped = True
            got = raw.frames()
            if not got and not raw.read(30):
                break
            for ftype, flags, sid, payload in got:
                if ftype == h2.HEADERS:
                    statuses[sid] = dict(dec.decode(payload)).get(":status")
                if ftype in (h2.HEADERS, h2.DATA) and flags & h2.END_STREAM:
                    ended.add(sid)
                if ftype == h2.RST_STREAM:
                    resets[sid] = int.from_bytes(payload[:4], "big")
                if ftype == h2.GOAWAY:
                    goaway = h2.goaway_of([(ftype, flags, sid, payload)])
    refused = resets.get(extra) == h2.REFUSED_STREAM or (goaway is not None and goaway[1] < extra)
    assert refused, (resets, goaway)
    assert ended >= set(held), ("streams lost", sorted(set(held) - ended), resets, goaway)
    assert all(statuses.get(s) == "200" for s in held), statuses
    assert upstream.count(path="/api/held/%d" % extra) == 0
    assert upstream.count(actor=ids.actor) == LIMIT


MAX_CONNECTIONS = 4


@pytest.mark.parametrize("workers", ["1", "2"])
def test_streams_count_against_max_connections(proxy, upstream, ids, workers):
    """Each open stream takes one of max_connections' slots (the carrying
    connection one too; all workers together): once they are taken, the
    next stream is refused with REFUSED_STREAM and never executed; the
    streams before it are all answered, and a stream opened after they end
    is served."""
    p = proxy({"max_connections": str(MAX_CONNECTIONS), "workers": workers,
               "upstream_timeout": SLOW_UPSTREAM_TIMEOUT})
    held, refused = [], None
    with h2.Client(p.port) as c:
        for i in range(MAX_CONNECTIONS + 1):
            path = "/api/slots/%d" % i
            # Held open by the upstream until the test lets it end (an
            # event stream that waits for its step), however long the
            # streams take to open: no timing decides what is concurrent.
            step = "%s-%d" % (ids.actor, i)
            sid = c.request("GET", path, [("x-actor-id", ids.actor),
                                          ("x-test-action", "sse-step:2:%s" % step)])
            st = c.streams[sid]
            c.wait(lambda: st.reset is not None or upstream.count(path=path) == 1,
                   "stream %d forwarded or refused" % sid)
            if st.reset is not None:
                refused = (sid, path, st.reset)
                break
            held.append((sid, step))
        assert refused is not None, "no stream refused with max_connections %d" % MAX_CONNECTIONS
        assert refused[2] == h2.REFUSED_STREAM, refused
        # The connection takes a slot, each held stream one.
        assert len(held) == MAX_CONNECTIONS - 1, held
        for sid, step in held:
            upstream.step(step, 1)
        for sid, _ in held:
            r = c.response(sid)
            assert r.status == 200 and r.body.count(b"data: ") == 2, c.streams[sid]
        after = c.response(c.request("GET", "/api/slots/after", [("x-actor-id", ids.actor)]))
        assert after.status == 200, after
    assert upstream.count(path=refused[1]) == 0
    print("max_connections %d, workers %s: %d streams held on one connection, the next refused"
          % (MAX_CONNECTIONS, workers, len(held)))


# ---- pass-through streams ----

def wait_stall(upstream, actor, total, client):
    """Wait until the upstream's streamed response for actor stops growing
    (STALL_POLLS readings in a row): the bytes it had written by then,
    reading the connection meanwhile (its windows stay shut)."""
    last, same = -1, 0
    end = time.monotonic() + 120
    while time.monotonic() < end:
        client.pump(STALL_STEP)
        got = upstream.requests(actor=actor)
        sent = (got[0].sent or 0) if got else 0
        if sent >= total:
            return sent
        same = same + 1 if sent == last else 0
        last = sent
        if same >= STALL_POLLS and sent > 0:
            return sent
    raise AssertionError("the upstream never stalled nor finished")


def test_download_100mib_read_slowly_then_fast_in_bounded_memory(proxy, upstream, ids):
    p = bounded_proxy(proxy, {"relay_buffer": str(RELAY_BUFFER)})
    base = footprint(p)
    bound = base + FIXED_MIB + RELAY_COPIES * RELAY_BUFFER / MIB
    with h2.Client(p.port, auto_ack=False) as c:
        sid = c.request("GET", "/files/big", [("x-actor-id", ids.actor),
                                              ("x-test-action", "stream:%d" % DOWNLOAD)],
                        keep=False)
        st = c.streams[sid]
        c.wait(lambda: st.status is not None, "the response head")
        assert st.status == 200 and st.headers.get("content-length") == str(DOWNLOAD), st
        # Not reading at all: the upstream must be held back.
        stalled = wait_stall(upstream, ids.actor, DOWNLOAD, c)
        assert stalled < DOWNLOAD, "idemproxy read the whole body while its client read nothing"
        # Reading slowly: 16 KiB at a time.
        for _ in range(SLOW_STEPS):
            before = st.length
            c.ack(sid, 16 << 10)
            c.wait(lambda: st.length > before or st.done, "more of the body")
        # Then fast: every window wide open.
        c.auto_ack = True
        c.ack(sid, DOWNLOAD)
        c.response(sid, timeout=300)
    assert st.ended and st.reset is None, st
    assert st.length == DOWNLOAD and st.digest == streams.pattern_sha(DOWNLOAD)
    peak = streams.peak_rss_mib(p.proc)
    print("h2 download %d MiB: idemproxy peak RSS %.1f MiB (%.1f after start, bound %.1f); "
          "the upstream stalled at %.1f MiB while the client read nothing"
          % (DOWNLOAD // MIB, peak, base, bound, stalled / MIB))
    assert peak < bound, (peak, bound)
    assert upstream.count(actor=ids.actor) == 1


UPLOAD = 64 * MIB


def test_upload_over_h2_byte_exact_in_bounded_memory(proxy, upstream, ids):
    """A pass-through upload as DATA frames, sent as the stream's window
    allows: byte-exact at the upstream, idemproxy's memory bounded by the
    configuration, not by the body."""
    p = bounded_proxy(proxy, {"relay_buffer": str(RELAY_BUFFER), "max_request_body": "1k"})
    base = footprint(p)
    bound = base + FIXED_MIB + RELAY_COPIES * RELAY_BUFFER / MIB
    with h2.Client(p.port) as c:
        sid = c.request("POST", "/uploads", [("x-actor-id", ids.actor),
                                             ("x-test-action", "sink")], end=False)
        for piece in streams.blocks(UPLOAD):
            c.send_data(sid, piece, end=False)
        c.send_data(sid, b"", end=True)
        st = c.response(sid, timeout=300)
    assert st.status == 201, st
    doc = st.json()
    assert doc["len"] == UPLOAD and doc["body_sha"] == streams.pattern_sha(UPLOAD), doc
    (e,) = upstream.requests(actor=ids.actor)
    assert (e.headers.get("Transfer-Encoding") or "").lower() == "chunked"
    peak = streams.peak_rss_mib(p.proc)
    print("h2 upload %d MiB: idemproxy peak RSS %.1f MiB (%.1f after start, bound %.1f)"
          % (UPLOAD // MIB, peak, base, bound))
    assert peak < bound, (peak, bound)


def test_server_sent_events_arrive_one_by_one_over_h2(proxy, upstream, ids):
    """Event i+1 is only sent once the client has event i (sse-step): a
    proxy that held events back until the end would never deliver one."""
    p = proxy()
    step = ids.key()
    with h2.Client(p.port) as c:
        sid = c.request("GET", "/events", [("x-actor-id", ids.actor),
                                           ("x-test-action", "sse-step:%d:%s" % (SSE_EVENTS, step))])
        st = c.streams[sid]
        c.wait(lambda: st.status is not None, "the response head")
        assert st.status == 200 and st.headers.get("content-type") == "text/event-stream", st
        for i in range(SSE_EVENTS):
            c.wait(lambda: bytes(st.body).count(b"\n\n") > i, "event %d" % i)
            assert not st.ended or i == SSE_EVENTS - 1, st
            if i + 1 < SSE_EVENTS:
                upstream.step(step, i + 1)
        c.response(sid)
    events = [e.split()[1] for e in bytes(st.body).split(b"\n\n") if e]
    assert events == [str(i).encode() for i in range(SSE_EVENTS)], st.body


# ---- h2 client -> HTTP/1.1 upstream ----

HOP_BY_HOP = ("connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade",
              "x-hop")


@pytest.mark.parametrize("length", [True, False], ids=["content-length", "no-length"])
def test_h2_client_to_http11_upstream_intact(proxy, upstream, ids, length):
    p = proxy()
    body = os.urandom(100 << 10)
    sent = [("x-actor-id", ids.actor), ("x-custom", "a value,  with blanks"),
            ("x-multi", "one"), ("x-multi", "two"), ("cookie", "a=1"), ("cookie", "b=2"),
            ("content-type", "application/octet-stream"), ("te", "trailers"),
            ("x-test-action", "chunked"),
            ("x-test-header", "X-Resp: r1, X-Other: o, Connection: x-hop, X-Hop: secret, "
                              "Keep-Alive: timeout=5")]
    if length:
        sent.append(("content-length", str(len(body))))
    with h2.Client(p.port, validate=False) as c:
        st = c.response(c.request("POST", "/api/echo?q=1&r=%2F", sent, body,
                                  authority="api.example:8443"))
    assert st.ended and st.status == 201, st
    (e,) = upstream.requests(actor=ids.actor)
    assert e.method == "POST" and e.target == "/api/echo?q=1&r=%2F"
    assert e.version == "HTTP/1.1"
    assert e.headers.get("Host") == "api.example:8443"
    assert e.headers.get("X-Custom") == "a value,  with blanks"
    assert ", ".join(e.headers.get_all("X-Multi")) == "one, two"
    assert e.headers.get_all("Cookie") == ["a=1; b=2"]
    assert e.body == body
    if length:
        assert e.headers.get("Content-Length") == str(len(body))
    else:   # no length from the client: chunked on HTTP/1.1
        assert e.headers.get("Content-Length") is None, e.headers
        assert (e.headers.get("Transfer-Encoding") or "").lower() == "chunked", e.headers
    assert not any(k.startswith(":") for k, _ in e.headers.pairs), e.headers
    doc = st.json()
    assert doc["n"] == e.n and doc["body_sha"] == hashlib.sha256(body).hexdigest()
    assert st.headers.get("x-resp") == "r1" and st.headers.get("x-other") == "o", st.headers
    for name in HOP_BY_HOP:
        assert st.headers.get(name) is None, (name, st.headers)
    assert all(k == k.lower() for k, _ in st.headers.pairs), st.headers


def test_early_hints_reach_an_h2_client(proxy, upstream, ids):
    p = proxy()
    with h2.Client(p.port) as c:
        st = c.response(c.request("GET", "/page", [("x-actor-id", ids.actor),
                                                  ("x-test-action", "early-hints")]))
    assert st.interim == [103], st
    assert st.status == 200 and bytes(st.body) == b'{"hinted":true}', st


def test_trailers_from_an_http11_upstream_reach_an_h2_client(proxy, upstream, ids):
    p = proxy()
    with h2.Client(p.port) as c:
        st = c.response(c.request("GET", "/api/things/t", [("x-actor-id", ids.actor),
                                                          ("te", "trailers"),
                                                          ("x-test-action", "trailers")]))
    assert st.status == 200 and st.ended, st
    (e,) = upstream.requests(actor=ids.actor)
    assert st.json()["n"] == e.n
    assert st.trailers.get("x-trailer-a") == "one", st.trailers
    assert st.trailers.get("x-trailer-b") == "two", st.trailers


# ---- h2c upstreams ----

@pytest.fixture
def h2c_upstream():
    up = Upstream(module="tests.lib.h2c_upstream")
    yield up
    up.stop()


def h2c(up):
    return {"upstream": "h2c://127.0.0.1:%d" % up.port}


def test_http11_client_to_h2c_upstream_intact(proxy, h2c_upstream, ids):
    p = proxy(h2c(h2c_upstream))
    body = os.urandom(64 << 10)
    r = p.request("POST", "/api/echo?z=%20", [
        ("X-Actor-Id", ids.actor), ("X-Custom", "v 1"), ("Cookie", "a=1; b=2"),
        ("Content-Type", "application/x-thing"), ("X-Test-Action", "echo"),
        ("X-Test-Header", "X-Resp: r1, X-Other: o")], body)
    assert r.status == 201 and r.body == body, r
    assert r.headers.get("Content-Type") == "application/x-thing"
    assert r.headers.get("X-Resp") == "r1" and r.headers.get("X-Other") == "o"
    (e,) = h2c_upstream.requests(actor=ids.actor)
    assert e.version == "2", e.version
    assert e.method == "POST" and e.path == "/api/echo?z=%20"
    assert e.headers.get("x-custom") == "v 1"
    assert e.body == body


def test_h2_client_to_h2c_upstream_intact(proxy, h2c_upstream, ids):
    p = proxy(h2c(h2c_upstream))
    body = os.urandom(200 << 10)
    with h2.Client(p.port) as c:
        st = c.response(c.request("POST", "/api/echo", [
            ("x-actor-id", ids.actor), ("x-custom", "v 2"), ("content-type", "application/x-y"),
            ("x-test-action", "echo"), ("x-test-header", "X-Resp: r2")], body))
        big = c.response(c.request("GET", "/files/b", [("x-actor-id", ids.actor),
                                                       ("x-test-action", "big:%d" % (3 * MIB))],
                                   keep=False))
    assert st.status == 201 and bytes(st.body) == body, st
    assert st.headers.get("x-resp") == "r2" and st.headers.get("content-type") == "application/x-y"
    assert big.status == 200 and big.length == 3 * MIB and big.digest == streams.pattern_sha(3 * MIB)
    got = h2c_upstream.requests(actor=ids.actor)
    assert [e.version for e in got] == ["2", "2"]
    assert got[0].headers.get("x-custom") == "v 2" and got[0].body == body


@pytest.mark.parametrize("client", ["http1", "h2"])
def test_owner_replay_conflict_through_h2c_upstream(proxy, h2c_upstream, ids, client):
    p = proxy(h2c(h2c_upstream))
    key = ids.key()

    def post(body):
        if client == "http1":
            return p.post("/api/courses", key=key, actor=ids.actor, body=body)
        with h2.Client(p.port) as c:
            return c.response(c.request("POST", "/api/courses", h2_keyed(key, ids.actor),
                                        body.encode()))

    owner = post(course())
    assert_owner(owner)
    assert json.loads(bytes(owner.body))["method"] == "POST"
    assert_replay_of(post(course()), owner)
    problem(post(course(title="Other")), "idempotency-conflict", 422)
    assert h2c_upstream.count(key=key) == 1
    assert [e.version for e in h2c_upstream.requests(key=key)] == ["2"]


@pytest.mark.parametrize("http2", ["on", "off"])
def test_https_upstream_speaks_what_alpn_picked(proxy, pki, ids, http2):
    """upstream_http2 on offers h2 by ALPN to an https upstream (hypercorn
    with TLS, which offers h2 and http/1.1); off keeps HTTP/1.1."""
    up = Upstream(tls=pki["pair"], module="tests.lib.h2c_upstream")
    try:
        p = proxy({"upstream": "https://localhost:%d" % up.port, "upstream_ca": pki["ca"],
                   "upstream_http2": http2})
        key = ids.key()
        owner = p.post("/api/courses", key=key, actor=ids.actor, body=course())
        assert_owner(owner)
        assert_replay_of(p.post("/api/courses", key=key, actor=ids.actor, body=course()), owner)
        body = os.urandom(32 << 10)
        with h2.Client(p.port) as c:
            st = c.response(c.request("POST", "/api/echo", [("x-actor-id", ids.actor),
                                                            ("x-test-action", "echo")], body))
        assert st.status == 201 and bytes(st.body) == body, st
        assert up.count(key=key) == 1
        want = "2" if http2 == "on" else "1.1"
        assert [e.version for e in up.requests(actor=ids.actor)] == [want, want]
    finally:
        up.stop()


def test_trailers_from_an_h2c_upstream_reach_an_h2_client(proxy, ids, tmp_path):
    """nghttpd --no-tls adds a trailer to every response with a body."""
    docroot = tmp_path / "htdocs"
    docroot.mkdir()
    content = os.urandom(50 << 10)
    (docroot / "file.bin").write_bytes(content)
    port = procs.free_port()
    d = subprocess.Popen(["nghttpd", "--no-tls", "-d", str(docroot), "--trailer",
                          "x-trailer-a: one", "--trailer", "x-trailer-b: two", "-a",
                          "127.0.0.1", str(port)],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         stdin=subprocess.DEVNULL)
    try:
        assert procs.wait_port(port, d), "nghttpd did not start"
        p = proxy({"upstream": "h2c://127.0.0.1:%d" % port})
        with h2.Client(p.port) as c:
            st = c.response(c.request("GET", "/file.bin", [("x-actor-id", ids.actor),
                                                           ("te", "trailers")]))
        assert st.status == 200 and bytes(st.body) == content, st
        assert st.trailers.get("x-trailer-a") == "one", st.trailers
        assert st.trailers.get("x-trailer-b") == "two", st.trailers
    finally:
        procs.terminate(d)

