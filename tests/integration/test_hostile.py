"""What a client controls (docs/http.md, "Bad input"): nothing a request sends may skip
enforcement, confuse the scope or exhaust the proxy. Each test counts the
upstream's effects exactly."""
import json
import os
import socket
import threading
import time

import pytest

from tests.lib import helpers
from tests.lib.admin import admin_proxy, poll_metrics
from tests.lib.cluster import Cluster
from tests.lib.helpers import problem, course, assert_owner, assert_replay_of

# Spellings of POST /api/courses that frameworks route to one handler.
BYPASS_VARIANTS = [
    "/api/courses/",
    "/api//courses",
    "/api/%63ourses",
    "/api/%63%6F%75rses",
    "/api/courses;x=1",
    "/api;v=2/courses",
    "/API/Courses",
    "/api/./courses",
    "/api/x/../courses",
    "/api/x/..;/courses",
    "/api/%2e/courses",
    "/api/courses/.",
    "http://test/api/courses",
    "HTTP://test:8080/api/courses/",
]


def test_path_variants_are_enforced(proxy, upstream, ids):
    """Every spelling of an intercepted path is intercepted: without a key
    nothing goes upstream; with one the operation runs once, the upstream
    gets the target as sent, and a retry in any spelling is a replay."""
    p = proxy()
    for v in BYPASS_VARIANTS:
        r = p.post(v, actor=ids.actor, body=course())
        problem(r, "idempotency-key-missing", 400)
    assert upstream.count(actor=ids.actor) == 0
    for v in BYPASS_VARIANTS:
        key = ids.key()
        first = p.post(v, key=key, actor=ids.actor, body=course())
        assert_owner(first)
        sent = upstream.requests(key=key)
        assert [e.target for e in sent] == [v]
        assert_replay_of(p.post("/api/courses", key=key, actor=ids.actor, body=course()), first)
        assert_replay_of(p.post(v, key=key, actor=ids.actor, body=course()), first)
        other = BYPASS_VARIANTS[(BYPASS_VARIANTS.index(v) + 1) % len(BYPASS_VARIANTS)]
        assert_replay_of(p.post(other, key=key, actor=ids.actor, body=course()), first)
        assert upstream.count(key=key) == 1
    assert upstream.count(actor=ids.actor) == len(BYPASS_VARIANTS)


def test_parameter_segments_keep_their_case(proxy, upstream, ids):
    """Literal segments match in any case; a {name} segment is part of the
    fingerprint as sent, so /orders/ABC and /orders/abc never share one."""
    p = proxy()
    key = ids.key()
    first = p.post("/api/orders/ABC/payments", key=key, actor=ids.actor, body=course())
    assert_owner(first)
    assert_replay_of(p.post("/API/Orders/ABC/PAYMENTS/", key=key, actor=ids.actor,
                            body=course()), first)
    r = p.post("/api/orders/abc/payments", key=key, actor=ids.actor, body=course())
    problem(r, "idempotency-conflict", 422)
    assert upstream.count(key=key) == 1


CASE_ROUTE = """
route exact.op {
    match        POST /api/Exact/{id}
    match_case   sensitive
}
"""


def test_match_case_sensitive(proxy, upstream, ids):
    p = proxy(routes=CASE_ROUTE)
    r = p.post("/api/Exact/1", actor=ids.actor, body=course())
    problem(r, "idempotency-key-missing", 400)
    assert upstream.count(actor=ids.actor) == 0
    # Another spelling is another path for this route: not intercepted.
    r = p.post("/api/exact/1", actor=ids.actor, body=course())
    assert_owner(r)
    assert upstream.count(actor=ids.actor) == 1
    # Slashes, dots and encodings still normalise.
    r = p.post("/api//%45xact/./1/", actor=ids.actor, body=course())
    problem(r, "idempotency-key-missing", 400)
    assert upstream.count(actor=ids.actor) == 1


def raw_request(port, line, actor, body=b"{}"):
    data = (line.encode("latin-1") + b"\r\nHost: test\r\nX-Actor-Id: " + actor.encode() +
            b"\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body) +
            body)
    return helpers.raw_exchange(port, data)


@pytest.mark.parametrize("method", ["post", "Post", "pOST", "POST1", "PO.ST", "PO~ST"])
def test_methods_are_upper_case(proxy, upstream, ids, method):
    """A method is A-Z, '-' and '_': 'post' can never slip past a POST route."""
    p = proxy()
    for key in (None, ids.key()):
        extra = "\r\nIdempotency-Key: %s" % key if key else ""
        r, closed = raw_request(p.port, "%s /api/courses HTTP/1.1%s" % (method, extra), ids.actor)
        problem(r, "bad-request", 400)
        assert closed
    assert upstream.count(actor=ids.actor) == 0


def test_extension_methods_pass_through(proxy, upstream, ids):
    p = proxy()
    for method in ("M-SEARCH", "VERSION-CONTROL", "BASELINE_CONTROL"):
        r = p.request(method, "/api/courses", [("X-Actor-Id", ids.actor)])
        assert r.status == 200, r
        assert r.json()["method"] == method
    assert upstream.count(actor=ids.actor) == 3


def test_connect_is_refused(proxy, upstream, ids):
    """CONNECT never reaches the upstream, whatever its target (an origin-form
    path included): 400 bad-request, the connection closed, logged and
    counted like any refusal at the HTTP layer."""
    p = admin_proxy(proxy)
    targets = ["/api/courses", "/anything?x=1", "127.0.0.1:%d" % upstream.port, "*",
               "http://test/api/courses"]
    for target in targets:
        for key in (None, ids.key()):
            extra = "\r\nIdempotency-Key: %s" % key if key else ""
            r, closed = raw_request(p.port, "CONNECT %s HTTP/1.1%s" % (target, extra), ids.actor)
            body = problem(r, "bad-request", 400)
            assert "CONNECT" in body["detail"], body
            assert closed
    assert upstream.count(actor=ids.actor) == 0
    assert upstream.count(method="CONNECT") == 0
    refused = 2 * len(targets)
    assert poll_metrics(p, lambda m: m.get("idemproxy_http_refusals_total", status="400")
                        == refused), "not counted"
    lines = helpers.poll(lambda: [d for d in p.log_lines() if d.get("status") == 400 and
                                  d.get("outcome") == "rejected"][refused - 1:])
    assert lines, p.stderr_tail()
    # Still an ordinary proxy for everything else.
    assert p.request("GET", "/api/courses", [("X-Actor-Id", ids.actor)]).status == 200
    assert upstream.count(actor=ids.actor) == 1


UNDERSCORED = [("X_Actor_Id", "mallory"), ("x_other", "1"), ("X-Fine_", "2")]


def underscored_names(entry):
    return [k for k, _ in entry.headers.pairs if "_" in k]


def test_underscore_header_names_never_reach_the_upstream(proxy, upstream, ids):
    """CGI, WSGI and PHP read X_Actor_Id as X-Actor-Id: such names are
    dropped on the way upstream (intercepted and relayed alike), counted;
    idemproxy itself compares names exactly, so X_Actor_Id is no actor."""
    p = admin_proxy(proxy)
    key = ids.key()
    owner = p.post("/api/courses", key=key, actor=ids.actor, body=course(), headers=UNDERSCORED)
    assert_owner(owner)
    assert_replay_of(p.post("/api/courses", key=key, actor=ids.actor, body=course(),
                            headers=UNDERSCORED), owner)
    r = p.request("GET", "/api/courses", [("X-Actor-Id", ids.actor)] + UNDERSCORED)
    assert r.status == 200
    sent = upstream.requests(actor=ids.actor)
    assert [e.method for e in sent] == ["POST", "GET"]
    for e in sent:
        assert underscored_names(e) == [], e.headers
        assert e.headers.get_all("X-Actor-Id") == [ids.actor]
    # X_Actor_Id does not stand in for the actor header.
    other = ids.key()
    problem(p.post("/api/courses", key=other, body=course(), headers=UNDERSCORED),
            "actor-missing", 401)
    assert upstream.count(key=other) == 0
    assert upstream.count(key=key) == 1
    # The replay went nowhere: two forwarded requests dropped three each.
    assert poll_metrics(p, lambda m: m.get("idemproxy_headers_dropped_total",
                                           reason="underscore") == 6), "not counted"


def test_underscores_in_headers_on_keeps_them(proxy, upstream, ids):
    p = admin_proxy(proxy, {"underscores_in_headers": "on"})
    key = ids.key()
    assert_owner(p.post("/api/courses", key=key, actor=ids.actor, body=course(),
                        headers=UNDERSCORED))
    sent = upstream.requests(key=key)
    assert len(sent) == 1
    assert underscored_names(sent[0]) == [k for k, _ in UNDERSCORED]
    assert sent[0].headers.get("X_Actor_Id") == "mallory"
    m = poll_metrics(p, lambda m: m.get("idemproxy_headers_dropped_total",
                                        reason="underscore") is not None)
    assert m.get("idemproxy_headers_dropped_total", reason="underscore") == 0


UNNORMALISABLE = ["/api/%zz", "/api/%4", "/api/courses%", "/api/%00", "/api/a%00b",
                  "/../api/courses", "/api/../../courses", "/api/%2e%2e/%2E%2E/x",
                  "http://test/../x"]


@pytest.mark.parametrize("target", UNNORMALISABLE)
def test_unnormalisable_targets_are_refused(proxy, upstream, ids, target):
    p = proxy()
    for method in ("POST", "GET"):
        for key in (None, ids.key()):
            headers = [("X-Actor-Id", ids.actor)] + ([("Idempotency-Key", key)] if key else [])
            r = p.request(method, target, headers, body=b"{}" if method == "POST" else None)
            problem(r, "bad-request", 400)
    assert upstream.count(actor=ids.actor) == 0


def test_own_headers_stripped_both_ways(proxy, upstream, pg, ids):
    """Only idemproxy sets its markers: a client's never reach the upstream,
    an upstream's never reach a client nor the record."""
    p = proxy({"replay_cache": "0"})
    markers = [("Idempotent-Replayed", "true"), ("Idempotency-Enforced", "false"),
               ("Idempotency-Body-Omitted", "true"),
               ("Idempotency-Key-Expires", "Thu, 01 Jan 2037 00:00:00 GMT")]
    up_markers = [("X-Test-Header", "%s: %s" % kv) for kv in markers]
    key = ids.key()
    first = p.post("/api/courses", key=key, actor=ids.actor, body=course(),
                   headers=markers + up_markers + [("X-Test-Header", "X-Kept: yes")])
    assert_owner(first)
    sent = upstream.requests(key=key)[0].headers
    for name, value in markers:
        assert sent.get(name) is None, name
        if name == "Idempotency-Key-Expires":
            # idemproxy's own (a completed record's), never the upstream's.
            assert len(first.headers.get_all(name)) == 1 and first.headers.get(name) != value
        else:
            assert first.headers.get(name) is None, name
    again = p.post("/api/courses", key=key, actor=ids.actor, body=course(), headers=markers)
    assert_replay_of(again, first)
    assert again.headers.get_all("Idempotent-Replayed") == ["true"]
    assert again.headers.get_all("Idempotency-Key-Expires") != [markers[-1][1]]
    for name in ("Idempotency-Enforced", "Idempotency-Body-Omitted"):
        assert again.headers.get(name) is None, name
    stored = bytes(pg.records.one(ids.actor)["response_headers"] or b"").decode("latin-1")
    for name, _ in markers:
        assert name.lower() not in stored.lower(), stored
    # Pass-through, both ways.
    r = p.request("GET", "/api/courses", [("X-Actor-Id", ids.actor)] + markers + up_markers)
    assert r.status == 200
    got = upstream.requests(actor=ids.actor, method="GET")[0].headers
    for name, _ in markers:
        assert got.get(name) is None and r.headers.get(name) is None, name
    assert upstream.count(actor=ids.actor) == 2


FORWARDING = [("X-Forwarded-For", "10.0.0.1"), ("X-Forwarded-For", "10.0.0.2"),
              ("X-Forwarded-Proto", "https"), ("X-Forwarded-Host", "api.example"),
              ("Forwarded", "for=10.0.0.1;proto=https"), ("X-Real-IP", "10.0.0.1"),
              ("Via", "1.1 edge")]


def test_forwarding_headers_from_untrusted_peer_are_replaced(proxy, upstream, ids):
    p = proxy()
    r = p.request("GET", "/api/courses", [("X-Actor-Id", ids.actor)] + FORWARDING)
    assert r.status == 200
    up = upstream.requests(actor=ids.actor)[0].headers
    assert up.get_all("X-Forwarded-For") == ["127.0.0.1"]
    assert up.get_all("X-Forwarded-Proto") == ["http"]
    assert up.get_all("X-Forwarded-Host") == ["test"]
    assert up.get_all("Forwarded") == ['for=127.0.0.1;host="test";proto=http']
    assert up.get_all("X-Real-IP") == ["127.0.0.1"]
    assert up.get_all("Via") == ["1.1 edge, 1.1 idemproxy"]
    assert upstream.count(actor=ids.actor) == 1


def test_forwarding_headers_from_trusted_peer_are_kept(proxy, upstream, ids):
    p = proxy({"trusted_proxies": "10.0.0.0/8 127.0.0.0/8 ::1"})
    key = ids.key()
    r = p.post("/api/courses", key=key, actor=ids.actor, body=course(), headers=FORWARDING)
    assert_owner(r)
    up = upstream.requests(key=key)[0].headers
    assert up.get_all("X-Forwarded-For") == ["10.0.0.1, 10.0.0.2, 127.0.0.1"]
    assert up.get_all("X-Forwarded-Proto") == ["https"]
    assert up.get_all("X-Forwarded-Host") == ["api.example"]
    assert up.get_all("Forwarded") == ['for=10.0.0.1;proto=https, for=127.0.0.1;host="test";'
                                       'proto=http']
    assert up.get_all("X-Real-IP") == ["10.0.0.1"]
    assert upstream.count(key=key) == 1


BAD_ACTORS = {
    "too_long_257": b"a" * 257,
    "very_long_3000": b"a" * 3000,
    "not_utf8": b"user-\xff\xfe",
    "overlong_utf8": b"user-\xc0\xaf",
    "tab": b"user\t1",
    "c1_control": b"user\xc2\x851",
    "empty": b"",
}


@pytest.mark.parametrize("case", sorted(BAD_ACTORS))
def test_invalid_actor(proxy, upstream, pg, ids, case):
    """Never claimed: 401 actor-invalid, not a 503 nor an unenforced forward."""
    p = proxy({"store_unavailable": "fail-open"})
    key = ids.key()
    r = p.post("/api/courses", key=key, actor=BAD_ACTORS[case], body=course())
    problem(r, "actor-invalid", 401)
    assert upstream.count(key=key) == 0
    assert pg.records.rows(key) == []


def test_actor_given_twice_is_invalid(proxy, upstream, pg, ids):
    p = proxy()
    key = ids.key()
    r = p.post("/api/courses", key=key, actor=ids.actor, body=course(),
               headers=[("X-Actor-Id", ids.actor + "-2")])
    problem(r, "actor-invalid", 401)
    assert upstream.count(key=key) == 0
    assert pg.records.rows(key) == []


@pytest.mark.parametrize("actor", [b"a" * 256, "Jos\u00e9-\u03a9-\u6771\u4eac".encode()])
def test_valid_actor_limits(proxy, upstream, ids, actor):
    p = proxy()
    key = ids.key()
    first = p.post("/api/courses", key=key, actor=actor, body=course())
    assert_owner(first)
    assert_replay_of(p.post("/api/courses", key=key, actor=actor, body=course()), first)
    assert upstream.count(key=key) == 1


WAIT_ROUTE = """
route bounded.wait {
    match        POST /api/bounded
    in_progress  wait 20s
}
"""


def test_waiters_are_bounded(proxy, upstream, ids):
    """With max_connections 10 and one worker, 5 duplicates may wait; the
    others get the 409 at once, before the owner is done. One effect."""
    p = proxy({"max_connections": "10", "workers": "1", "upstream_timeout": "8s"},
              routes=WAIT_ROUTE)
    key = ids.key()
    dups = 7
    results = [None] * dups
    done_at = [None] * dups

    def one(i):
        try:
            results[i] = p.post("/api/bounded", key=key, actor=ids.actor, body=course())
        except Exception as e:  # reported by the assertions below
            results[i] = e
        done_at[i] = time.monotonic()

    with helpers.SlowOwner(p, upstream, "/api/bounded", key, ids.actor, 3) as owner:
        threads = [threading.Thread(target=one, args=(i,)) for i in range(dups)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
    assert_owner(owner.response)
    rejected = [i for i, r in enumerate(results) if r.status == 409]
    replays = [i for i, r in enumerate(results) if r.status == 201]
    assert len(rejected) == 2 and len(replays) == 5, results
    for i in rejected:
        problem(results[i], "operation-in-progress", 409)
    for i in replays:
        assert_replay_of(results[i], owner.response)
    assert max(done_at[i] for i in rejected) < min(done_at[i] for i in replays)
    assert upstream.count(key=key) == 1


def nested(depth, sep=""):
    return ("[" + sep) * depth + "1" + (sep + "]") * depth


def test_json_too_deep_is_fingerprinted_raw(proxy, upstream, ids):
    """Past 256 levels the body is raw bytes: the same bytes replay, a
    reformatted body conflicts. Up to 256 it is canonical JSON."""
    p = proxy()
    key = ids.key()
    first = p.post("/api/orders/1/payments", key=key, actor=ids.actor, body=nested(300))
    assert_owner(first)
    assert_replay_of(p.post("/api/orders/1/payments", key=key, actor=ids.actor,
                            body=nested(300)), first)
    r = p.post("/api/orders/1/payments", key=key, actor=ids.actor, body=nested(300, " "))
    problem(r, "idempotency-conflict", 422)
    key2 = ids.key()
    first2 = p.post("/api/orders/1/payments", key=key2, actor=ids.actor, body=nested(256))
    assert_owner(first2)
    assert_replay_of(p.post("/api/orders/1/payments", key=key2, actor=ids.actor,
                            body=nested(256, " ")), first2)
    assert upstream.count(key=key) == 1 and upstream.count(key=key2) == 1


def test_stray_bytes_after_bodiless_response(proxy, upstream, ids):
    """An upstream that sends bytes after a HEAD or 204 answer loses that
    connection: the next request gets its own response, on another one."""
    p = proxy({"workers": "1"})
    cases = [("HEAD", [], "stray:0"), ("HEAD", [], "stray:0.2"),
             ("GET", [("X-Test-Status", "204")], "stray:0"),
             ("GET", [("X-Test-Status", "204")], "stray:0.2")]
    for method, extra, action in cases:
        r = p.request(method, "/api/courses",
                      [("X-Actor-Id", ids.actor), ("X-Test-Action", action)] + extra)
        assert r.status in (200, 204) and r.body == b"", r
        for pause in (0.0, 0.4):
            time.sleep(pause)
            before = len(upstream.requests(actor=ids.actor))
            r = p.request("GET", "/api/courses", [("X-Actor-Id", ids.actor)])
            assert r.status == 200 and r.body != b"stray", r
            assert r.json()["method"] == "GET"
            log = upstream.requests(actor=ids.actor)
            assert len(log) == before + 1
    assert upstream.count(actor=ids.actor) == len(cases) * 3
    first_bodiless = upstream.requests(actor=ids.actor)[0]
    after = upstream.requests(actor=ids.actor)[1]
    assert after.peer != first_bodiless.peer


def log_lines(p):
    return [l for l in p.stderr_text().splitlines() if not l.startswith("---- start")]


def test_log_lines_stay_valid_json(proxy, upstream, ids):
    """Long fields are cut, with a mark; the line never is."""
    p = proxy()
    path = "/api/" + "p" * 3000
    r = p.request("GET", path, [("X-Actor-Id", ids.actor)])
    assert r.status == 200
    method = "M" * 2000
    r = p.request(method, "/api/courses", [("X-Actor-Id", ids.actor)])
    assert r.status == 200
    assert helpers.poll(lambda: sum('"msg":"request"' in l for l in log_lines(p)) >= 2)
    access = []
    for line in log_lines(p):
        doc = json.loads(line)  # every line is JSON
        if doc.get("msg") == "request":
            access.append(doc)
    by_path = [d for d in access if d["path"].startswith("/api/ppp")]
    assert len(by_path) == 1
    d = by_path[0]
    assert d["path"].endswith("\u2026(%d bytes)" % len(path)) and len(d["path"]) <= 1024
    assert d["status"] == 200 and d["outcome"] == "pass"
    by_method = [d for d in access if d["method"].startswith("MMM")]
    assert len(by_method) == 1
    assert by_method[0]["method"].endswith("\u2026(2000 bytes)")
    assert by_method[0]["status"] == 200
    assert upstream.count(actor=ids.actor) == 2


# ---- connections ----

def test_max_connections(proxy, upstream, ids):
    """At the limit (all workers together) nothing more is accepted; a
    connection waiting in the backlog is served once another closes."""
    p = proxy({"max_connections": "4", "workers": "2", "client_timeout": "30s"})
    idle = [socket.create_connection(("127.0.0.1", p.port), timeout=5) for _ in range(4)]
    try:
        # An idle connection is served: each of the four was accepted.
        for s in idle:
            s.sendall(helpers.build_request("GET", "/api/courses",
                                            [("X-Actor-Id", ids.actor)]))
        helpers.poll(lambda: upstream.count(actor=ids.actor) == 4)
        assert upstream.count(actor=ids.actor) == 4
        waiting = socket.create_connection(("127.0.0.1", p.port), timeout=5)
        waiting.sendall(helpers.build_request("GET", "/api/courses",
                                              [("X-Actor-Id", ids.actor)]))
        waiting.settimeout(1.0)
        with pytest.raises(socket.timeout):
            waiting.recv(1)
        assert upstream.count(actor=ids.actor) == 4
        idle.pop().close()
        waiting.settimeout(10)
        assert waiting.recv(12).startswith(b"HTTP/1.1 200")
        waiting.close()
        assert upstream.count(actor=ids.actor) == 5
    finally:
        for s in idle:
            s.close()


def cpu_seconds(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def open_fds(pid):
    return len(os.listdir("/proc/%d/fd" % pid))


FD_LIMIT = 96


def test_out_of_descriptors(proxy, upstream, ids):
    """Under a low descriptor limit with more idle clients than it allows,
    accepting pauses instead of spinning: little CPU, a warning at most once
    a second, and it serves again by itself once clients leave."""
    p = proxy({"workers": "1", "client_timeout": "60s"}, start=False)
    p.prefix = ["prlimit", "--nofile=%d:%d" % (FD_LIMIT, FD_LIMIT), "--"]
    p.start()
    pid = p.proc.pid
    # Its limit cannot hold max_connections: it says so at start.
    assert "the descriptor limit (%d) is below" % FD_LIMIT in p.stderr_text()
    free = FD_LIMIT - open_fds(pid)
    clients = [socket.create_connection(("127.0.0.1", p.port), timeout=5)
               for _ in range(free + 20)]
    try:
        assert helpers.poll(lambda: "cannot accept connections" in p.stderr_text(), 5)
        assert "Too many open files" in p.stderr_text()
        lines0, cpu0, t0 = len(log_lines(p)), cpu_seconds(pid), time.monotonic()
        time.sleep(3)
        cpu, lines, spent = cpu_seconds(pid) - cpu0, len(log_lines(p)) - lines0, \
            time.monotonic() - t0
        assert cpu < 0.3 * spent, "%.2fs of CPU in %.2fs" % (cpu, spent)
        assert lines <= spent + 2, p.stderr_tail()
        assert p.running()
    finally:
        for c in clients:
            c.close()
    r = helpers.poll(lambda: p.request("GET", "/api/courses", [("X-Actor-Id", ids.actor)],
                                       timeout=2), 10, 0.2)
    assert r and r.status == 200, r
    assert upstream.count(actor=ids.actor) == 1


# ---- a claim whose answer is lost ----

class PgLink:
    """A TCP relay to a PostgreSQL server that can stop passing the
    server's replies (the client's statements still arrive): a claim that
    commits but whose answer never comes back."""

    def __init__(self, port):
        self.target = port
        self.lsock = socket.socket()
        self.lsock.bind(("127.0.0.1", 0))
        self.lsock.listen(16)
        self.port = self.lsock.getsockname()[1]
        self.dropping = False
        self.pairs = []
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                c, _ = self.lsock.accept()
            except OSError:
                return
            s = socket.create_connection(("127.0.0.1", self.target))
            with self.lock:
                self.pairs.append((c, s))
            threading.Thread(target=self._pump, args=(c, s, False), daemon=True).start()
            threading.Thread(target=self._pump, args=(s, c, True), daemon=True).start()

    def _pump(self, src, dst, reply):
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                if reply and self.dropping:
                    continue
                dst.sendall(data)
        except OSError:
            pass
        for x in (src, dst):
            try:
                x.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def drop_replies(self, on):
        self.dropping = on
        if not on:
            with self.lock:
                for c, s in self.pairs:
                    for x in (c, s):
                        try:
                            x.shutdown(socket.SHUT_RDWR)
                        except OSError:
                            pass
                self.pairs = []

    def close(self):
        self.lsock.close()
        self.drop_replies(False)


class TcpCluster(Cluster):
    listen_addresses = "127.0.0.1"


def test_lost_claim_is_removed(private_pg, proxy, upstream, ids):
    """The claim commits but its answer is lost: 503 (even fail-open, the
    request is never forwarded), then the claim is deleted by its lease
    token once the store answers again, and a retry runs once."""
    pgx = private_pg(TcpCluster)
    link = PgLink(pgx.port)
    try:
        db = "host=127.0.0.1 port=%d dbname=idemproxy user=postgres" % link.port
        p = proxy({"workers": "1", "store_timeout": "1s", "store_unavailable": "fail-open"},
                  database=db, wait_store=True)
        key = ids.key()
        link.drop_replies(True)
        r = p.post("/api/courses", key=key, actor=ids.actor, body=course())
        problem(r, "store-unavailable", 503)
        assert upstream.count(key=key) == 0
        rows = pgx.records.rows(ids.actor)
        assert len(rows) == 1 and helpers.record_state(rows[0]) == "in_progress", rows
        assert rows[0]["lease_owner"].rsplit(":", 1)[1].isdigit(), rows
        link.drop_replies(False)
        assert helpers.poll(lambda: pgx.records.rows(ids.actor) == [], 20), \
            pgx.records.rows(ids.actor)
        assert "store removed 1 claim whose answer was lost" in p.stderr_text()
        first = helpers.poll(lambda: (lambda r: r if r.status == 201 else None)(
            p.post("/api/courses", key=key, actor=ids.actor, body=course())), 10, 0.2)
        assert first, "no owner after the store came back"
        assert_owner(first)
        assert_replay_of(p.post("/api/courses", key=key, actor=ids.actor, body=course()), first)
        assert upstream.count(key=key) == 1
    finally:
        link.close()
