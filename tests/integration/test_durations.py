"""Every access line's durations are durations, never clock readings, on
every path a request can take: an owner (its upstream answering,
resetting, breaking off, or cut off at the shutdown deadline), a replay, a
duplicate (answered in progress, or waiting for its owner), a
pass-through, one the client leaves mid-response, one whose upstream
breaks off, a tunnel, and the answers idemproxy makes itself. Each line
is bounded by the test's own wall time for its request (from before the
request to the line's arrival in the log): 0 <= every *_us <= that, and
the waits within the request's whole duration. And log_level: warn drops
the access lines, a reload back to info brings them back."""
import signal
import socket
import time
import uuid

import pytest
import websocket

from tests.lib import helpers, streams
from tests.lib.helpers import assert_owner
from tests.lib.proxy import rewrite, wait_for_log
from tests.lib.streams import act, passthrough

DURATIONS = ("duration_us", "upstream_us", "store_us")
LINE_WAIT_S = 10      # access lines are flushed every 100 ms
ABANDONED = 512 * streams.MIB  # more than a client that leaves ever reads
BROKEN = 64 * 1024
WS_TIMEOUT_S = 10


def unique(prefix):
    return "%s-%s" % (prefix, uuid.uuid4().hex)


def access_lines(p, pick):
    return [l for l in p.log_lines() if l.get("msg") == "request" and pick(l)]


def on_path(path, **fields):
    """Picks the access lines of path whose fields have these values."""
    return lambda l: l.get("path") == path and all(l.get(k) == v for k, v in fields.items())


def timed(p, send, pick):
    """send(), then wait for the one access line pick() chooses: (line,
    wall_us), wall_us from before send to the line's arrival."""
    started = time.monotonic()
    send()
    assert helpers.poll(lambda: len(access_lines(p, pick)) == 1, LINE_WAIT_S), p.stderr_tail()
    wall_us = (time.monotonic() - started) * 1e6
    return access_lines(p, pick)[0], wall_us


def assert_durations(line, wall_us):
    """Each *_us field a duration within the request's wall time, the waits
    within the whole."""
    for field in DURATIONS:
        assert isinstance(line.get(field), int), (field, line)
        assert 0 <= line[field] <= wall_us, (field, line, wall_us)
    assert line["upstream_us"] <= line["duration_us"], line
    assert line["store_us"] <= line["duration_us"], line


def order_path():
    return "/api/orders/%s/payments" % uuid.uuid4().hex


def test_owner_replay_and_duplicate(proxy, upstream, ids):
    p = proxy()
    path, key = order_path(), ids.key()
    pay = lambda: assert_owner(p.post(path, key=key, actor=ids.actor, body='{"amount": 1}'))

    line, wall = timed(p, pay, on_path(path, outcome="owner"))
    assert_durations(line, wall)
    assert line["upstream_us"] > 0 and line["store_us"] > 0, line

    first = {}
    replay = lambda: first.setdefault(
        "r", p.post(path, key=key, actor=ids.actor, body='{"amount": 1}'))
    line, wall = timed(p, replay, on_path(path, outcome="replay"))
    assert_durations(line, wall)
    assert first["r"].status == 201 and line["upstream_us"] == 0, line

    # A duplicate while its owner runs: in progress.
    slow, key = order_path(), ids.key()
    with helpers.SlowOwner(p, upstream, slow, key, ids.actor, 1.5, body='{"amount": 2}'):
        dup = lambda: p.post(slow, key=key, actor=ids.actor, body='{"amount": 2}')
        line, wall = timed(p, dup, on_path(slow, outcome="in_progress"))
    assert_durations(line, wall)
    assert line["status"] == 409 and line["upstream_us"] == 0, line
    assert upstream.count(actor=ids.actor) == 2


@pytest.mark.parametrize("action", ["reset", "break:%d" % BROKEN])
def test_owner_whose_upstream_fails(proxy, upstream, ids, action):
    """The upstream resets, or breaks off a response that was streaming
    (over max_stored_body, its head already sent): the outcome is unknown."""
    p = proxy({"max_stored_body": "1k"})
    path = order_path()

    def send():
        try:
            p.post(path, key=ids.key(), actor=ids.actor, body='{"amount": 1}',
                   headers=[act(action)])
        except helpers.ConnectionClosed:  # the response broke off
            assert action != "reset"

    line, wall = timed(p, send, on_path(path))
    assert_durations(line, wall)
    assert line["outcome"] == "unknown", line
    assert line["status"] == (502 if action == "reset" else 201), line  # 201: its head went out
    assert line["upstream_us"] > 0 and line["store_us"] > 0, line
    assert upstream.count(actor=ids.actor) == 1


WAIT_ROUTE = """
route wait.op {
    match        POST /api/wait/{id}
    fingerprint  json
    in_progress  wait 5s
}
"""


def test_duplicate_that_waits_for_its_owner(proxy, upstream, ids):
    """in_progress wait: the duplicate claims again when its owner is done,
    and replays; its store time is both claims."""
    p = proxy(routes=WAIT_ROUTE)
    path, key = "/api/wait/%s" % uuid.uuid4().hex, ids.key()
    with helpers.SlowOwner(p, upstream, path, key, ids.actor, 1.0, body='{"a": 1}'):
        dup = lambda: p.post(path, key=key, actor=ids.actor, body='{"a": 1}')
        line, wall = timed(p, dup, on_path(path, outcome="replay"))
    assert_durations(line, wall)
    assert line["status"] == 201 and line["upstream_us"] == 0 and line["store_us"] > 0, line
    assert upstream.count(actor=ids.actor) == 1


def test_owner_cut_off_at_the_shutdown_deadline(proxy, upstream, ids):
    """SIGTERM with an owner at the upstream past shutdown_timeout: it is
    cut off (503 shutting-down, outcome unknown), its line bounded by the
    time from its start to the process's exit."""
    p = proxy({"upstream_timeout": "5s", "lease": "30s", "shutdown_timeout": "1s"})
    path = order_path()
    started = time.monotonic()
    with helpers.SlowOwner(p, upstream, path, ids.key(), ids.actor, 3.0, body='{"a": 1}'):
        p.signal(signal.SIGTERM)
        assert p.proc.wait(10) == 0, p.stderr_tail()
    wall_us = (time.monotonic() - started) * 1e6
    lines = access_lines(p, on_path(path))
    assert len(lines) == 1, p.stderr_tail()
    assert_durations(lines[0], wall_us)
    assert lines[0]["status"] == 503 and lines[0]["outcome"] == "unknown", lines[0]
    assert lines[0]["upstream_us"] > 0 and lines[0]["store_us"] > 0, lines[0]
    assert upstream.count(actor=ids.actor) == 1


def test_pass_through(proxy, upstream, ids):
    p = proxy()
    path = "/" + unique("pass")
    line, wall = timed(p, lambda: p.request("GET", path, passthrough(ids.actor)),
                       on_path(path))
    assert_durations(line, wall)
    assert line["status"] == 200 and line["outcome"] == "pass", line
    assert line["upstream_us"] > 0 and line["store_us"] == 0, line
    assert upstream.count(actor=ids.actor) == 1


def test_pass_through_the_client_leaves(proxy, upstream, ids):
    """The client closes mid-response: the exchange ends with it."""
    p = proxy()
    path = "/" + unique("left")

    def leave():
        c = streams.Conn(p.port)
        c.send_request("GET", path, passthrough(ids.actor) + [act("stream:%d" % ABANDONED)])
        status, _ = c.head()
        assert status == 200
        c.close()

    line, wall = timed(p, leave, on_path(path))
    assert_durations(line, wall)
    assert line["status"] == 200 and line["upstream_us"] > 0, line
    assert upstream.count(actor=ids.actor) == 1


def test_pass_through_the_upstream_breaks_off(proxy, upstream, ids):
    p = proxy()
    path = "/" + unique("broken")
    got = {}

    def fetch():
        got["r"] = streams.exchange(p.port, "GET", path,
                                    passthrough(ids.actor) + [act("break:%d" % BROKEN)])

    line, wall = timed(p, fetch, on_path(path))
    assert got["r"].status == 200 and not got["r"].complete, got["r"]
    assert_durations(line, wall)
    assert line["upstream_us"] > 0, line
    assert upstream.count(actor=ids.actor) == 1


def test_tunnel(proxy, upstream, ids):
    p = proxy({"tunnel_timeout": "10s"})
    path = "/" + unique("ws")

    def talk():
        ws = websocket.create_connection(
            "ws://127.0.0.1:%d%s" % (p.port, path), timeout=WS_TIMEOUT_S,
            header=["X-Actor-Id: %s" % ids.actor, "X-Test-Action: ws-echo"])
        ws.send("hello")
        assert ws.recv() == "hello"
        ws.sock.close()

    line, wall = timed(p, talk, on_path(path))
    assert_durations(line, wall)
    assert line["status"] == 101 and line["upgrade"] == "websocket", line
    assert line["upstream_us"] > 0, line
    assert upstream.count(actor=ids.actor) == 1


def raw(p, data):
    return lambda: helpers.raw_exchange(p.port, data)


def test_refusals(proxy, upstream, ids):
    """What idemproxy answers itself, before anything is claimed or sent."""
    p = proxy({"max_request_body": "1k", "client_timeout": "1s"})
    actor = ("X-Actor-Id", ids.actor)
    missing, invalid, large = order_path(), order_path(), order_path()
    cases = [
        # No key, then a key that is not one (a route that requires one).
        (lambda: p.post(missing, actor=ids.actor, body='{"a": 1}'),
         on_path(missing, status=400)),
        (lambda: p.post(invalid, key="k" * 300, actor=ids.actor, body='{"a": 1}'),
         on_path(invalid, status=400)),
        # A body over max_request_body.
        (lambda: p.request("POST", large, [actor, ("Idempotency-Key", ids.key())],
                           b"x" * 4096),
         on_path(large, status=413)),
        # A head over the limit, a request line over it, a method that is not one.
        (raw(p, b"GET /h HTTP/1.1\r\nHost: t\r\nX-Big: %s\r\n\r\n" % (b"h" * 40000)),
         lambda l: l.get("status") == 431),
        (raw(p, b"GET /%s HTTP/1.1\r\nHost: t\r\n\r\n" % (b"u" * 40000)),
         lambda l: l.get("status") == 414),
        (raw(p, b"G(T / HTTP/1.1\r\nHost: t\r\n\r\n"),
         lambda l: l.get("status") == 400 and l.get("path") == "-"),
    ]
    for send, pick in cases:
        line, wall = timed(p, send, pick)
        assert_durations(line, wall)
        assert line["outcome"] == "rejected" and line["upstream_us"] == 0, line
        assert line["store_us"] == 0, line

    # A head that stalls: 408 after client_timeout, timed from its first byte.
    def stall():
        with socket.create_connection(("127.0.0.1", p.port), timeout=5) as s:
            s.sendall(b"GET /stalled HTTP/1.1\r\nHost: t\r\n")
            assert b" 408 " in s.recv(4096)

    line, wall = timed(p, stall, lambda l: l.get("status") == 408)
    assert_durations(line, wall)
    assert upstream.count(actor=ids.actor) == 0


def test_store_unavailable(proxy, upstream, ids):
    """Fail-closed with no store: 503 after the wait for its connection."""
    down = "host=127.0.0.1 port=%d dbname=none connect_timeout=1" % helpers.free_port()
    p = proxy({"store_timeout": "1s"}, database=down)
    path = order_path()
    send = lambda: p.post(path, key=ids.key(), actor=ids.actor, body='{"a": 1}')
    line, wall = timed(p, send, on_path(path))
    assert_durations(line, wall)
    assert line["status"] == 503 and line["upstream_us"] == 0, line
    assert upstream.count(actor=ids.actor) == 0


def test_log_level_warn_hides_access_lines_until_reload(proxy, upstream, ids):
    """log_level warn at start drops access lines (and the info lines a
    start writes); a reload to info brings them back. Pass-through only:
    no store connection needs to be waited for (its line is info)."""
    p = proxy({"log_level": "warn"}, wait_store=False)
    hidden, shown = "/" + unique("hidden"), "/" + unique("shown")
    assert p.request("GET", hidden, passthrough(ids.actor)).status == 200
    rewrite(p, lambda t: t.replace("log_level warn", "log_level info"))
    p.signal(signal.SIGHUP)
    wait_for_log(p, "configuration reloaded")
    line, wall = timed(p, lambda: p.request("GET", shown, passthrough(ids.actor)),
                       on_path(shown))
    assert_durations(line, wall)
    assert line["level"] == "info", line
    # The request before the reload was served and never logged; nothing at
    # info came before the reload's own line.
    assert upstream.count(actor=ids.actor) == 2
    assert access_lines(p, on_path(hidden)) == []
    lines = p.log_lines()
    first_info = next(i for i, l in enumerate(lines) if l["level"] == "info")
    assert lines[first_info]["msg"].startswith("configuration reloaded"), lines[:first_info + 1]


def test_log_level_is_one_of_four(tmp_path):
    binary = helpers.env_bin()
    text = ("upstream http://127.0.0.1:1\nlog_level %s\n"
            "route r {\n  match POST /x\n  actor anonymous\n}\n")
    for level in ("debug", "info", "warn", "error"):
        r = helpers.check_config(binary, str(tmp_path / "ok.conf"), text % level)
        assert r.returncode == 0, (level, r.stderr)
    for level in ("trace", "warning", "warn error", "0"):
        r = helpers.check_config(binary, str(tmp_path / "bad.conf"), text % level)
        assert r.returncode == 1 and ":2: " in r.stderr and "log_level" in r.stderr, \
            (level, r.stderr)
