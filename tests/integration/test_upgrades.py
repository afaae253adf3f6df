"""Protocol upgrades: only a protocol `tunnel_upgrades` names (websocket by
default) ever becomes a tunnel, and only once the upstream's 101 switched to
exactly that protocol (for WebSocket: the Sec-WebSocket-Accept its key calls
for). Everything else a request asks to switch to goes upstream as a plain
request without its Upgrade (h2c and HTTP2-Settings never leave idemproxy),
and every answer to an upgrade request that is not a relayed 101 closes the
connection, so bytes a client sent after its upgrade request never become a
request. Each test counts the upstream's effects: the requests an upstream
that takes anything for an upgrade would run after its 101 (`switch:MODE`)."""
import json
import shutil
import socket
import subprocess
import time

import pytest
import websocket

from tests.lib import helpers
from tests.lib.spellings import App

# RFC 6455's sample key and the accept it calls for.
WS_KEY = "dGhlIHNhbXBsZSBub25jZQ=="
H2_SETTINGS = "AAMAAABkAARAAAAAAAIAAAAA"
H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
READ_LIMIT_S = 10.0


def head_bytes(method, target, headers):
    return ("%s %s HTTP/1.1\r\nHost: t\r\n" % (method, target) +
            "".join("%s: %s\r\n" % kv for kv in headers) + "\r\n").encode("latin-1")


def smuggled(actor):
    """A keyless POST to the protected route, as a client would send it
    through a tunnel it expected to open."""
    body = json.dumps(helpers.course()).encode()
    return head_bytes("POST", "/api/courses",
                      [("X-Actor-Id", actor), ("Content-Type", "application/json"),
                       ("Content-Length", str(len(body)))]) + body


def exchange(port, data):
    """Send data on one connection; everything the proxy sends until it
    closes (bounded)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=READ_LIMIT_S)
    out = b""
    deadline = time.monotonic() + READ_LIMIT_S
    try:
        s.sendall(data)
        while time.monotonic() < deadline:
            try:
                chunk = s.recv(65536)
            except (ConnectionResetError, socket.timeout):
                break
            if not chunk:
                return out, True
            out += chunk
    finally:
        s.close()
    return out, False


def status_of(data):
    return int(data.split(b" ", 2)[1]) if data.startswith(b"HTTP/1.1 ") else None


def protected_runs(upstream, actor):
    return [e for e in upstream.requests(actor=actor) if e.path == "/api/courses"]


@pytest.mark.parametrize("action", [None, "switch:asked"])
def test_h2c_upgrade_is_never_honoured(proxy, upstream, ids, action):
    """The audit's tunnel: OPTIONS * asking for h2c, then a keyless POST. The
    upgrade is not forwarded (nor HTTP2-Settings), the answer closes the
    connection, and nothing the client sent after it reaches the upstream."""
    p = proxy()
    headers = [("X-Actor-Id", ids.actor), ("Connection", "Upgrade, HTTP2-Settings"),
               ("Upgrade", "h2c"), ("HTTP2-Settings", H2_SETTINGS)]
    if action:
        headers.append(("X-Test-Action", action))
    out, closed = exchange(p.port, head_bytes("OPTIONS", "*", headers) + H2_PREFACE +
                           smuggled(ids.actor))
    assert closed, out
    assert status_of(out) == (200 if action is None else 502), out
    assert b"\r\nconnection: close\r\n" in out.lower()
    sent = upstream.requests(actor=ids.actor)
    assert [(e.method, e.target) for e in sent] == [("OPTIONS", "*")]
    for name in ("Upgrade", "HTTP2-Settings"):
        assert sent[0].headers.get(name) is None, sent[0].headers
    assert protected_runs(upstream, ids.actor) == []


def test_http2_settings_is_never_forwarded(proxy, upstream, ids):
    """HTTP2-Settings is hop-by-hop even when Connection does not list it."""
    p = proxy()
    r = p.request("GET", "/plain", [("X-Actor-Id", ids.actor), ("HTTP2-Settings", H2_SETTINGS)])
    assert r.status == 200
    [sent] = upstream.requests(actor=ids.actor)
    assert sent.headers.get("HTTP2-Settings") is None


@pytest.mark.parametrize("mode", ["no-accept", "bad-accept", "other"])
def test_a_101_that_did_not_switch_to_websocket_is_refused(proxy, upstream, ids, mode):
    """An upstream that answers 101 to anything and goes on parsing HTTP: its
    101 lacks the Sec-WebSocket-Accept the key calls for (or names another
    protocol), so no tunnel opens: 502, the connection closed, and the POST
    the client sent behind the handshake never runs."""
    p = proxy()
    out, closed = exchange(p.port, head_bytes("GET", "/chat", [
        ("X-Actor-Id", ids.actor), ("Connection", "Upgrade"), ("Upgrade", "websocket"),
        ("Sec-WebSocket-Key", WS_KEY), ("Sec-WebSocket-Version", "13"),
        ("X-Test-Action", "switch:" + mode)]) + smuggled(ids.actor))
    assert closed and status_of(out) == 502, out
    body = out.split(b"\r\n\r\n", 1)[1]
    assert json.loads(body)["type"].endswith("upstream-error")
    assert [e.path for e in upstream.requests(actor=ids.actor)] == ["/chat"]
    assert "refused" in p.stderr_text()


def test_a_matching_101_opens_the_tunnel(proxy, upstream, ids):
    """The control: the same upstream with the right Sec-WebSocket-Accept is
    a WebSocket server as far as anyone can tell, and the tunnel opens."""
    p = proxy()
    out, closed = exchange(p.port, head_bytes("GET", "/chat", [
        ("X-Actor-Id", ids.actor), ("Connection", "Upgrade"), ("Upgrade", "websocket"),
        ("Sec-WebSocket-Key", WS_KEY), ("Sec-WebSocket-Version", "13"),
        ("X-Test-Action", "switch:asked")]))
    assert status_of(out) == 101, out
    assert b"Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=" in out


@pytest.mark.parametrize("variant", ["no-key", "bad-key", "post", "two-protocols", "unlisted"])
def test_unhonoured_upgrade_goes_up_plain_and_closes(proxy, upstream, ids, variant):
    """A WebSocket upgrade without a valid Sec-WebSocket-Key, not a GET,
    offering a list of protocols, or naming a protocol tunnel_upgrades does
    not list: forwarded without its Upgrade, answered, then closed."""
    p = proxy()
    method, headers = "GET", [("X-Actor-Id", ids.actor), ("Connection", "Upgrade"),
                              ("Upgrade", "websocket"), ("Sec-WebSocket-Key", WS_KEY),
                              ("X-Test-Action", "switch:asked")]
    if variant == "no-key":
        headers = [h for h in headers if h[0] != "Sec-WebSocket-Key"]
    elif variant == "bad-key":
        headers[3] = ("Sec-WebSocket-Key", "c2hvcnQ=")
    elif variant == "post":
        method = "POST"
        headers.append(("Content-Length", "0"))
    elif variant == "two-protocols":
        headers[2] = ("Upgrade", "websocket, x-raw")
    else:
        headers[2] = ("Upgrade", "x-raw")
    out, closed = exchange(p.port, head_bytes(method, "/unlisted", headers) +
                           head_bytes("GET", "/behind", [("X-Actor-Id", ids.actor)]))
    # The upstream saw no upgrade, so its 101 answered nothing: malformed.
    assert closed and status_of(out) == 502, out
    [sent] = upstream.requests(actor=ids.actor)
    assert sent.path == "/unlisted" and sent.headers.get("Upgrade") is None


def test_tunnel_upgrades_names_what_may_tunnel(proxy, upstream, ids, tmp_path):
    """tunnel_upgrades adds a protocol; h2c can never be one."""
    binary = helpers.env_bin()
    for bad in ("h2c", "H2C/1", "we bsocket\"", "a//b"):
        r = helpers.check_config(binary, str(tmp_path / "bad.conf"),
                                 'upstream http://127.0.0.1:1\ntunnel_upgrades websocket %s\n'
                                 'route r {\n  match POST /x\n  actor anonymous\n}\n' % bad)
        assert r.returncode == 1 and ":2: " in r.stderr, (bad, r.stderr)
    p = proxy({"tunnel_upgrades": "websocket x-raw"})
    out, closed = exchange(p.port, head_bytes("GET", "/raw", [
        ("X-Actor-Id", ids.actor), ("Connection", "Upgrade"), ("Upgrade", "X-Raw/2"),
        ("X-Test-Action", "switch:asked")]) +
        head_bytes("GET", "/through-the-tunnel", [("X-Actor-Id", ids.actor),
                                                  ("Connection", "close")]))
    assert status_of(out) == 101 and b"\r\nUpgrade: X-Raw/2\r\n" in out, out
    # The upstream read the rest as HTTP and answered through the tunnel.
    assert b"/through-the-tunnel" in out
    assert [e.path for e in upstream.requests(actor=ids.actor)] == ["/raw", "/through-the-tunnel"]


@pytest.mark.parametrize("action", ["reset", "silent"])
def test_own_answer_to_an_upgrade_request_closes(proxy, upstream, ids, action):
    """idemproxy's own 502/504 to an upgrade request closes the connection:
    the bytes pipelined behind it are never parsed as the next request."""
    p = proxy({"upstream_timeout": "1s"})
    out, closed = exchange(p.port, head_bytes("GET", "/chat", [
        ("X-Actor-Id", ids.actor), ("Connection", "Upgrade"), ("Upgrade", "websocket"),
        ("Sec-WebSocket-Key", WS_KEY), ("X-Test-Action", action)]) +
        head_bytes("GET", "/behind", [("X-Actor-Id", ids.actor)]))
    assert closed and status_of(out) == (502 if action == "reset" else 504), out
    assert out.count(b"HTTP/1.1 ") == 1
    # A GET reset before its answer is sent once more; /behind never is.
    paths = [e.path for e in upstream.requests(actor=ids.actor)]
    assert set(paths) == {"/chat"} and 1 <= len(paths) <= 2, paths


def tunnel_line(p, path):
    lines = [l for l in p.log_lines() if l.get("msg") == "request" and l.get("path") == path]
    return lines[0] if len(lines) == 1 else None


@pytest.mark.parametrize("closer", ["client", "upstream"])
def test_tunnel_log_line(proxy, upstream, ids, closer):
    """A tunnel's access line: status 101, its protocol, and durations
    bounded by the test's own wall time."""
    p = proxy({"tunnel_timeout": "10s"})
    hdr = ["X-Actor-Id: %s" % ids.actor, "X-Test-Action: ws-echo"]
    path = "/ws-" + closer
    started = time.monotonic()
    ws = websocket.create_connection("ws://127.0.0.1:%d%s" % (p.port, path), header=hdr,
                                     timeout=10)
    ws.send("hello")
    assert ws.recv() == "hello"
    if closer == "upstream":
        ws.send("close-now")
        ws.recv_data(control_frame=True)
    ws.sock.close() if closer == "client" else ws.close()
    assert helpers.poll(lambda: tunnel_line(p, path) is not None, 5)
    wall_us = (time.monotonic() - started) * 1e6
    line = tunnel_line(p, path)
    assert line["status"] == 101 and line["upgrade"] == "websocket", line
    for field in ("duration_us", "upstream_us"):
        assert 0 < line[field] <= wall_us, (field, line, wall_us)
    assert upstream.count(actor=ids.actor) == 1


@pytest.mark.skipif(not shutil.which("nghttp"), reason="nghttp2-client is not installed")
def test_nghttp_upgrade_in_front_of_hypercorn(proxy, ids, tmp_path):
    """The audit's reproduction with the real tools: `nghttp -u` upgrades an
    HTTP/1.1 connection to h2c (OPTIONS *) and sends a keyless POST to a
    `key required` route over it, to hypercorn, which speaks h2c. The POST
    must never run."""
    app = App("asgi")
    try:
        body = tmp_path / "body.json"
        body.write_text(json.dumps(helpers.course()))
        # The upstream itself runs the protected handler over the upgrade.
        direct = subprocess.run(["nghttp", "-u", "-d", str(body), "-H", "x-actor-id: a",
                                 "http://127.0.0.1:%d/api/courses" % app.port],
                                capture_output=True, text=True, timeout=30)
        assert direct.returncode == 0 and app.count() == 1, direct
        p = proxy(upstream_port=app.port)
        r = subprocess.run(["nghttp", "-u", "-d", str(body), "-H", "x-actor-id: %s" % ids.actor,
                            "http://127.0.0.1:%d/api/courses" % p.port],
                           capture_output=True, text=True, timeout=30)
        assert app.count() == 1, (r.stdout, r.stderr)
        # The upgrade request was answered and logged as what it was.
        assert helpers.poll(lambda: tunnel_line(p, "*") is not None, 5), p.stderr_tail()
        line = tunnel_line(p, "*")
        assert line["status"] != 0 and "upgrade" not in line, line
    finally:
        app.stop()
