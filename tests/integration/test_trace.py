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
from tests.lib import helpers, http1, jwtkit
from tests.lib.admin import admin, admin_proxy
from tests.lib.helpers import SlowOwner, assert_owner, assert_replay_of, course, problem
from tests.lib.records import records

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


def create(p, ids, key, *headers):
    """POST /api/courses as ids.actor with key and headers (name, value)."""
    return p.post("/api/courses", key=key, actor=ids.actor, body=course(), headers=list(headers))


def test_a_client_id_is_returned_sent_upstream_and_logged(proxy, upstream, ids):
    p = proxy()
    mine = "client-" + ids.key()
    r = create(p, ids, ids.key(), ("X-Request-Id", mine))
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
    for bad in ("has space", "x" * 129, "", "caf\u00e9"):
        key = ids.key()
        r = create(p, ids, key, ("X-Request-Id", bad))
        assert_owner(r)
        made = rid(r)
        assert MADE.fullmatch(made), made
        one_line(p, made)
        sent = upstream.requests(key=key)
        assert len(sent) == 1 and sent[0].headers.get_all("X-Request-Id") == [made], sent
    assert upstream.count(actor=ids.actor) == 4
    # Without one, idemproxy makes one per request.
    a = p.request("GET", "/things")
    b = p.request("GET", "/things")
    assert MADE.fullmatch(rid(a)) and MADE.fullmatch(rid(b)) and rid(a) != rid(b)


def test_the_upstreams_own_id_is_not_relayed(proxy, upstream, ids):
    p = proxy()
    r = create(p, ids, ids.key(), ("X-Request-Id", "mine-1"),
               ("X-Test-Header", "X-Request-Id: theirs"))
    assert_owner(r)
    assert rid(r) == "mine-1"
    assert upstream.count(actor=ids.actor) == 1


def test_idemproxys_own_answers_carry_the_id(proxy, upstream, ids):
    p = proxy({"upstream_timeout": "5s"})
    r = create(p, ids, None, ("X-Request-Id", "nokey-1"))
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
        busy = create(p, ids, key, ("X-Request-Id", "busy-1"))
        problem(busy, "operation-in-progress", 409)
        assert rid(busy) == "busy-1"
    assert_owner(owner.response)
    assert MADE.fullmatch(rid(owner.response))
    assert upstream.count(actor=ids.actor) == 1


def test_a_replay_carries_the_retrys_own_id(proxy, upstream, ids):
    p = proxy({"replay_cache": "0"})
    key = ids.key()
    first = create(p, ids, key, ("X-Request-Id", "try-1"))
    assert_owner(first)
    again = create(p, ids, key, ("X-Request-Id", "try-2"))
    assert_replay_of(again, first)
    assert rid(again) == "try-2"
    assert upstream.count(actor=ids.actor) == 1


def test_a_valid_traceparent_is_logged_and_passed_on(proxy, upstream, ids):
    p = proxy()
    r = create(p, ids, ids.key(), ("X-Request-Id", "traced-1"), ("traceparent", TRACEPARENT),
               ("tracestate", "congo=t61rcWkgMzE"))
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
        r = create(p, ids, ids.key(), ("X-Request-Id", "untraced-%d" % i),
                   ("traceparent", value))
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


# ---- joins: a replay's log line, the owner's line, the record ----

JWT_PATH = "/api/jwt"


def stored_actor(pg, key):
    rows = pg.query("SELECT actor FROM idempotency_records WHERE idem_key = %s", (key,))
    assert len(rows) == 1, rows
    return rows[0]["actor"]


def check_join(p, binary, pg, key, operation, owner_id, retry_id):
    """The retry's access line names the owner's request and trace
    (replay_of), as the owner's own line does, as `records show` and the
    records API do; key_hash and actor_hash agree across all of them."""
    owner = one_line(p, owner_id)
    retry = one_line(p, retry_id)
    assert owner["outcome"] == "owner" and retry["outcome"] == "replay", (owner, retry)
    assert "replay_of" not in owner
    assert retry["replay_of"] == {"request_id": owner["request_id"],
                                  "trace_id": owner["trace_id"]}, retry
    assert retry["trace_id"] != owner["trace_id"]
    actor = stored_actor(pg, key)
    shown = records(binary, p.conf, "show", actor, operation, key)
    assert shown.returncode == 0, shown
    cli = json.loads(shown.stdout)["record"]
    api = admin(p, "GET", "/records/scope",
                {"actor": actor, "operation": operation, "key": key})
    assert api.status == 200, api
    api = api.json()["record"]
    for rec in (cli, api):
        assert rec["request_id"] == owner["request_id"] == owner_id, rec
        assert rec["trace_id"] == owner["trace_id"], rec
        for line in (owner, retry):
            assert rec["key_hash"] == line["key_hash"], (rec, line)
            assert rec["actor_hash"] == line["actor_hash"], (rec, line)


def traced(n):
    """A traceparent of its own for request n, and its trace id."""
    trace_id = "%032x" % (0x4bf92f3577b34da6a3ce929d0e0e0000 + n)
    return "00-%s-%s-01" % (trace_id, PARENT_ID), trace_id


def test_a_replay_joins_its_owner_with_a_header_actor(binary, proxy, pg, upstream, ids):
    p = admin_proxy(proxy, {"replay_cache": "0"})
    key = ids.key()
    tp1, t1 = traced(1)
    first = create(p, ids, key, ("X-Request-Id", "owner-" + key), ("traceparent", tp1))
    assert_owner(first)
    tp2, _ = traced(2)
    again = create(p, ids, key, ("X-Request-Id", "retry-" + key), ("traceparent", tp2))
    assert_replay_of(again, first)
    assert rid(again) == "retry-" + key
    assert one_line(p, "owner-" + key)["trace_id"] == t1
    check_join(p, binary, pg, key, "course.create", "owner-" + key, "retry-" + key)
    assert upstream.count(actor=ids.actor) == 1


def test_a_replay_from_the_cache_names_its_owner(proxy, upstream, ids):
    """Replays served from the replay cache, of a record this instance
    stored or one it read, name the owner as a store replay does."""
    p = proxy()
    key = ids.key()
    tp, t = traced(3)
    assert_owner(create(p, ids, key, ("X-Request-Id", "cowner-" + key), ("traceparent", tp)))
    for i in range(3):
        r = create(p, ids, key, ("X-Request-Id", "cretry-%d-%s" % (i, key)))
        assert r.status == 201 and rid(r) == "cretry-%d-%s" % (i, key)
        line = one_line(p, "cretry-%d-%s" % (i, key))
        assert line["outcome"] == "replay", line
        assert line["replay_of"] == {"request_id": "cowner-" + key, "trace_id": t}, line
    assert upstream.count(actor=ids.actor) == 1


def test_a_replay_joins_its_owner_with_a_jwt_actor(binary, proxy, pg, upstream, ids, tmp_path):
    k = jwtkit.Key("ES256", kid="trace")
    f = tmp_path / "keys.json"
    f.write_text(jwtkit.jwks(k))
    routes = "route jwt.op {\n    match        POST %s\n    actor        jwt %s\n}\n" % (
        JWT_PATH, f)
    p = admin_proxy(proxy, {"replay_cache": "0"}, routes=routes)
    key = ids.key()
    token = jwtkit.token(k, {"sub": "user-" + key})

    def post(request_id, tp):
        return p.request("POST", JWT_PATH, [
            ("Idempotency-Key", key), ("Content-Type", "application/json"),
            ("Authorization", "Bearer " + token), ("X-Request-Id", request_id),
            ("traceparent", tp)], course())
    first = post("jowner-" + key, traced(4)[0])
    assert_owner(first)
    again = post("jretry-" + key, traced(5)[0])
    assert_replay_of(again, first)
    assert rid(again) == "jretry-" + key
    check_join(p, binary, pg, key, "jwt.op", "jowner-" + key, "jretry-" + key)
    assert token not in p.stderr_text()
    assert upstream.count(key=key) == 1
