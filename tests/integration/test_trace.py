"""Request ids and trace context: X-Request-Id is the client's when valid
(1-128 visible ASCII) or one idemproxy makes, sent upstream, on every
response (relayed, replayed, idemproxy's own) and in the log; a valid W3C
traceparent is passed on and its trace id and parent id logged, an invalid
one passed on untouched and not logged. A replay's log line names the
owner's request (replay_of), as its record does, with the key hash and
actor hash the log uses."""
import json
import re

from tests.integration.test_upgrades import WS_KEY, exchange, head_bytes, status_of
from tests.lib import helpers, http1
from tests.lib.helpers import SlowOwner, assert_owner, assert_replay_of, course, problem

MADE = re.compile(r"[0-9a-f]{32}")
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "00f067aa0ba902b7"
TRACEPARENT = "00-%s-%s-01" % (TRACE_ID, PARENT_ID)


def access_lines(p, n, **match):
    """The access lines whose fields equal match, once n of them are
    flushed (workers flush on a short timer)."""
    def lines():
        out = []
        for line in p.stderr_text().splitlines():
            if line.startswith("{"):
                doc = json.loads(line)
                if doc.get("msg") == "request" and all(doc.get(k) == v for k, v in match.items()):
                    out.append(doc)
        return out
    assert helpers.poll(lambda: len(lines()) >= n), (match, p.stderr_tail())
    return lines()


def one_line(p, request_id):
    got = access_lines(p, 1, request_id=request_id)
    assert len(got) == 1, got
    return got[0]


def rid(resp):
    ids = resp.headers.get_all("X-Request-Id")
    assert len(ids) == 1, (ids, resp)
    return ids[0]


def test_a_client_id_is_returned_sent_upstream_and_logged(proxy, upstream, ids):
    p = proxy()
    mine = "client-" + ids.key()
    r = p.post("/api/courses", key=ids.key(), actor=ids.actor, body=course(),
               headers=[("X-Request-Id", mine)])
    assert_owner(r)
    assert rid(r) == mine
    sent = upstream.requests(actor=ids.actor)
    assert len(sent) == 1 and sent[0].headers.get_all("X-Request-Id") == [mine], sent
    line = one_line(p, mine)
    assert line["outcome"] == "owner" and "trace_id" not in line and "replay_of" not in line
    # A relayed pass-through keeps it too.
    g = p.request("GET", "/things", [("X-Request-Id", mine + "-get")])
    assert g.status == 200 and rid(g) == mine + "-get"
    assert upstream.count(actor=ids.actor) == 1


def test_an_invalid_id_is_replaced(proxy, upstream, ids):
    p = proxy()
    for bad in ("has space", "x" * 129, ""):
        r = p.post("/api/courses", key=ids.key(), actor=ids.actor, body=course(),
                   headers=[("X-Request-Id", bad)])
        assert_owner(r)
        made = rid(r)
        assert MADE.fullmatch(made), made
        one_line(p, made)
    sent = upstream.requests(actor=ids.actor)
    assert len(sent) == 3
    assert all(MADE.fullmatch(e.headers.get("X-Request-Id") or "") for e in sent), sent
    # Without one, idemproxy makes one per request.
    a = p.request("GET", "/things")
    b = p.request("GET", "/things")
    assert MADE.fullmatch(rid(a)) and MADE.fullmatch(rid(b)) and rid(a) != rid(b)


def test_the_upstreams_own_id_is_not_relayed(proxy, upstream, ids):
    p = proxy()
    r = p.post("/api/courses", key=ids.key(), actor=ids.actor, body=course(),
               headers=[("X-Request-Id", "mine-1"), ("X-Test-Header", "X-Request-Id: theirs")])
    assert_owner(r)
    assert rid(r) == "mine-1"
    assert upstream.count(actor=ids.actor) == 1


def test_idemproxys_own_answers_carry_the_id(proxy, upstream, ids):
    p = proxy({"upstream_timeout": "5s"})
    r = p.post("/api/courses", actor=ids.actor, body=course(), headers=[("X-Request-Id", "nokey-1")])
    problem(r, "idempotency-key-missing", 400)
    assert rid(r) == "nokey-1"
    assert one_line(p, "nokey-1")["status"] == 400
    bad, _ = http1.raw_exchange(p.port, b"POST /api/courses HTTP/1.1\r\nHost: x\r\n"
                                        b"X-Request-Id: framing-1\r\n"
                                        b"Content-Length: 1\r\nContent-Length: 2\r\n\r\nab")
    # A head that cannot be read names no id of its own: idemproxy makes one.
    assert bad.status == 400 and MADE.fullmatch(rid(bad)), bad
    assert one_line(p, rid(bad))["status"] == 400
    key = ids.key()
    with SlowOwner(p, upstream, "/api/courses", key, ids.actor, 1.5) as owner:
        busy = p.post("/api/courses", key=key, actor=ids.actor, body=course(),
                      headers=[("X-Request-Id", "busy-1")])
        problem(busy, "operation-in-progress", 409)
        assert rid(busy) == "busy-1"
    assert_owner(owner.response)
    assert MADE.fullmatch(rid(owner.response))
    assert upstream.count(actor=ids.actor) == 1


def test_a_replay_carries_the_retrys_own_id(proxy, upstream, ids):
    p = proxy({"replay_cache": "0"})
    key = ids.key()
    first = p.post("/api/courses", key=key, actor=ids.actor, body=course(),
                   headers=[("X-Request-Id", "try-1")])
    assert_owner(first)
    again = p.post("/api/courses", key=key, actor=ids.actor, body=course(),
                   headers=[("X-Request-Id", "try-2")])
    assert_replay_of(again, first)
    assert rid(again) == "try-2"
    assert upstream.count(actor=ids.actor) == 1


def test_a_valid_traceparent_is_logged_and_passed_on(proxy, upstream, ids):
    p = proxy()
    r = p.post("/api/courses", key=ids.key(), actor=ids.actor, body=course(),
               headers=[("X-Request-Id", "traced-1"), ("traceparent", TRACEPARENT),
                        ("tracestate", "congo=t61rcWkgMzE")])
    assert_owner(r)
    sent = upstream.requests(actor=ids.actor)
    assert len(sent) == 1
    assert sent[0].headers.get_all("traceparent") == [TRACEPARENT]
    assert sent[0].headers.get_all("tracestate") == ["congo=t61rcWkgMzE"]
    line = one_line(p, "traced-1")
    assert line["trace_id"] == TRACE_ID and line["parent_id"] == PARENT_ID, line


def test_an_invalid_traceparent_is_passed_on_untouched_and_not_logged(proxy, upstream, ids):
    p = proxy()
    bad = ["00-%s-%s-01" % (TRACE_ID.upper(), PARENT_ID),
           "00-%s-%s-01" % ("0" * 32, PARENT_ID),
           "01-%s-%s-01" % (TRACE_ID, PARENT_ID),
           "garbage"]
    for i, value in enumerate(bad):
        r = p.post("/api/courses", key=ids.key(), actor=ids.actor, body=course(),
                   headers=[("X-Request-Id", "untraced-%d" % i), ("traceparent", value)])
        assert_owner(r)
        line = one_line(p, "untraced-%d" % i)
        assert "trace_id" not in line and "parent_id" not in line, line
    sent = upstream.requests(actor=ids.actor)
    assert sorted(e.headers.get("traceparent") for e in sent) == sorted(bad)


def test_a_101_carries_the_id(proxy, upstream, ids):
    p = proxy()
    out, _ = exchange(p.port, head_bytes("GET", "/chat", [
        ("X-Actor-Id", ids.actor), ("Connection", "Upgrade"), ("Upgrade", "websocket"),
        ("Sec-WebSocket-Key", WS_KEY), ("Sec-WebSocket-Version", "13"),
        ("X-Request-Id", "switch-1"), ("X-Test-Action", "switch:asked")]))
    assert status_of(out) == 101, out
    head = out.split(b"\r\n\r\n", 1)[0].split(b"\r\n")
    assert [l for l in head if l.lower().startswith(b"x-request-id:")] == \
        [b"X-Request-Id: switch-1"], out
    sent = upstream.requests(actor=ids.actor)
    assert len(sent) == 1 and sent[0].headers.get("X-Request-Id") == "switch-1"
