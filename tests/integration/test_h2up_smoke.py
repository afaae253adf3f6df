"""HTTP/2 toward the upstream, the smoke test: idemproxy with `upstream
h2c://` in front of a real h2c server (hypercorn serving tests/lib/h2_app.py,
prior knowledge on a plain socket), an HTTP/1.1 client. The owner gets the
upstream's 201 with its body and headers, a retry is its replay, pass-through
requests (a GET, a HEAD, a streamed chunked upload, a large download) go as
streams; the app counts every POST it ran and says which HTTP version each
request came in. With `https://` the same server over TLS speaks HTTP/2
only when `upstream_http2 on` offered h2 by ALPN."""
import hashlib
import json
import os
import ssl
import subprocess

import pytest

from tests.lib import helpers, jwtkit

START_TIMEOUT = 15.0


class H2App:
    """hypercorn serving tests/lib/h2_app.py on a free port."""

    def __init__(self, port=None, tls=None):
        self.port = port or helpers.free_port()
        self.tls = tls
        argv = ["/usr/bin/python3", "-m", "hypercorn", "--bind", "127.0.0.1:%d" % self.port]
        if tls:
            argv += ["--certfile", tls[0], "--keyfile", tls[1]]
        self.proc = subprocess.Popen(
            argv + ["tests.lib.h2_app:app"],
            cwd=helpers.ROOT, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL)
        if not helpers.wait_port(self.port, self.proc, START_TIMEOUT):
            helpers.terminate(self.proc)
            raise RuntimeError("hypercorn did not listen on %d" % self.port)

    def state(self):
        """{"count": POSTs run, "versions": the HTTP version of each request}."""
        r = helpers.request(self.port, "GET", "/__count", tls=self.client_tls())
        assert r.status == 200, r
        return r.json()

    def client_tls(self):
        if not self.tls:
            return None
        ctx = ssl.create_default_context(cafile=self.tls[2])
        ctx.set_alpn_protocols(["http/1.1"])
        return ctx

    def stop(self):
        helpers.terminate(self.proc)


@pytest.fixture
def h2app():
    app = H2App()
    yield app
    app.stop()


@pytest.fixture
def h2proxy(proxy, h2app):
    return proxy(settings={"upstream": "h2c://127.0.0.1:%d" % h2app.port})


def post(p, key, actor, body):
    return p.post("/api/courses", key=key, actor=actor, body=body)


def test_owner_and_replay_over_h2c(h2proxy, h2app, ids):
    """The owner's request runs once, over HTTP/2; its 201, body and headers
    reach the client; the retry is a replay, the upstream untouched."""
    body = json.dumps(helpers.course()).encode()
    before = h2app.state()["count"]
    r = post(h2proxy, ids.key(), ids.actor, body)
    assert r.status == 201, r
    got = r.json()
    assert got["http_version"] == "2"
    assert got["length"] == len(body)
    assert r.headers.get("x-order-id") == "order-%d" % got["id"]
    assert r.headers.get("Content-Type") == "application/json"
    assert h2app.state()["count"] == before + 1


def test_replay_runs_nothing(h2proxy, h2app, ids):
    """The retry with the same key is the stored 201, byte for byte."""
    body = json.dumps(helpers.course()).encode()
    key = ids.key()
    first = post(h2proxy, key, ids.actor, body)
    assert first.status == 201, first
    count = h2app.state()["count"]
    second = post(h2proxy, key, ids.actor, body)
    assert second.status == 201, second
    assert second.headers.get("Idempotent-Replayed") == "true"
    assert second.body == first.body
    assert h2app.state()["count"] == count


def test_pass_through_requests_are_streams(h2proxy, h2app):
    """A GET, a HEAD, a chunked upload and a 4 MiB download through the h2c
    upstream; every request reached it over HTTP/2."""
    r = h2proxy.request("GET", "/hello", [("X-Probe", "1")])
    assert r.status == 200, r
    assert r.body == b"hello over 2\n"
    seen = json.loads(r.headers.get("x-seen"))
    assert seen["x-probe"] == "1"
    assert seen["via"] == "1.1 idemproxy"
    assert "connection" not in seen and "transfer-encoding" not in seen

    r = h2proxy.request("HEAD", "/hello")
    assert r.status == 200, r
    assert r.body == b""

    chunks = [os.urandom(100 * 1024) for _ in range(20)]
    r = h2proxy.request("PUT", "/upload", [("Content-Type", "application/octet-stream")],
                        chunked=chunks)
    assert r.status == 200, r
    assert r.json() == {"length": 20 * 100 * 1024,
                        "sha256": hashlib.sha256(b"".join(chunks)).hexdigest()}

    r = h2proxy.request("GET", "/big")
    assert r.status == 200, r
    assert r.body == b"x" * (4 * 1024 * 1024)

    assert set(h2app.state()["versions"]) == {"2"}


def test_upstream_gone_is_nothing_sent(h2proxy, h2app, ids):
    """With the h2c upstream down an owner gets 502 upstream-unavailable
    (nothing was sent, the claim released): the same key runs once it is
    back."""
    body = json.dumps(helpers.course()).encode()
    key = ids.key()
    h2app.stop()
    r = post(h2proxy, key, ids.actor, body)
    helpers.problem(r, "upstream-unavailable", 502)
    back = H2App(h2app.port)
    try:
        r = post(h2proxy, key, ids.actor, body)
        assert r.status == 201, r
        assert back.state()["count"] == 1
    finally:
        back.stop()


def test_silent_upstream_is_an_unknown_outcome(proxy, h2app, pg, ids):
    """The stream ran the effect and never answered: upstream_timeout ends
    it (RST_STREAM CANCEL), the owner gets 504 upstream-timeout, the record
    is unknown and a retry is held, not run again."""
    p = proxy(settings={"upstream": "h2c://127.0.0.1:%d" % h2app.port,
                        "upstream_timeout": "1s", "lease": "5s"})
    key = ids.key()
    body = json.dumps(helpers.course()).encode()
    before = h2app.state()["count"]
    r = p.post("/api/courses", key=key, actor=ids.actor, body=body,
               headers=[("X-Test-Action", "silent")])
    helpers.problem(r, "upstream-timeout", 504)
    assert helpers.record_state(pg.records.one(ids.actor)) == "unknown"
    again = post(p, key, ids.actor, body)
    helpers.problem(again, "outcome-unknown", 409)
    assert h2app.state()["count"] == before + 1


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    ca = jwtkit.Pki(str(tmp_path_factory.mktemp("pki")))
    crt, key = ca.issue("server")
    return crt, key, ca.ca


@pytest.mark.parametrize("http2,version", [("on", "2"), ("off", "1.1")])
def test_https_upstream_speaks_what_alpn_picked(proxy, pki, ids, http2, version):
    """An https upstream that speaks both: with upstream_http2 on ALPN
    picks h2 and the owner, its replay and a pass-through GET went over
    HTTP/2; off, over HTTP/1.1 as before."""
    app = H2App(tls=pki)
    try:
        p = proxy(settings={"upstream": "https://127.0.0.1:%d" % app.port,
                            "upstream_ca": pki[2], "upstream_http2": http2})
        body = json.dumps(helpers.course()).encode()
        key = ids.key()
        first = post(p, key, ids.actor, body)
        assert first.status == 201, first
        assert first.json()["http_version"] == version
        second = post(p, key, ids.actor, body)
        assert second.status == 201 and second.body == first.body, second
        assert second.headers.get("Idempotent-Replayed") == "true"
        r = p.request("GET", "/hello")
        assert r.status == 200 and r.body == ("hello over %s\n" % version).encode(), r
        state = app.state()
        assert state["count"] == 1
        assert state["versions"][:2] == [version, version]
    finally:
        app.stop()
