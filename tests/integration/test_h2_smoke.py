"""HTTP/2 on the listener, end to end with curl: prior-knowledge h2c on a
plain listener and h2 by ALPN on a TLS one; a keyed POST's owner and its
replay (executed once), and a pass-through GET. The full HTTP/2 suite is
test_h2.py."""
import re
import signal
import socket
import subprocess

import pytest

from tests.lib import jwtkit, procs
from tests.lib.expect import course
from tests.lib.proxy import rewrite, wait_for_log

CURL_TIMEOUT = 30


def curl(args, url):
    """curl's answer to url: (HTTP version, status, headers dict, body)."""
    out = subprocess.run(
        ["curl", "-sS", "--max-time", str(CURL_TIMEOUT), "-D", "-", "-o", "/dev/stdout"]
        + args + [url],
        capture_output=True, timeout=CURL_TIMEOUT + 10, check=True).stdout
    head, _, body = out.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    version, status = lines[0].split()[0], int(lines[0].split()[1])
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return version, status, headers, body


def keyed(key, actor):
    return ["-X", "POST", "-H", "Idempotency-Key: " + key, "-H", "X-Actor-Id: " + actor,
            "-H", "Content-Type: application/json", "--data-binary", course()]


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    d = str(tmp_path_factory.mktemp("pki"))
    ca = jwtkit.Pki(d)
    return {"ca": ca.ca, "pair": ca.issue("server")}


def check_owner_replay_get(base, how, upstream, ids):
    key = ids.key()
    v1, s1, h1, b1 = curl(how + keyed(key, ids.actor), base + "/api/courses")
    assert (v1, s1) == ("HTTP/2", 201), (v1, s1, h1, b1)
    assert "idempotent-replayed" not in h1
    v2, s2, h2, b2 = curl(how + keyed(key, ids.actor), base + "/api/courses")
    assert (v2, s2) == ("HTTP/2", 201), (v2, s2, h2, b2)
    assert h2.get("idempotent-replayed", "").lower() == "true", h2
    assert b2 == b1
    assert upstream.count(key=key) == 1
    v3, s3, _, b3 = curl(how, base + "/api/things/7")
    assert (v3, s3) == ("HTTP/2", 200), (v3, s3, b3)
    assert upstream.count(path="/api/things/7") == 1


def test_h2c_prior_knowledge(proxy, upstream, ids):
    p = proxy()
    check_owner_replay_get("http://127.0.0.1:%d" % p.port, ["--http2-prior-knowledge"],
                           upstream, ids)
    # The upstream saw HTTP/1.1 with the Host from :authority.
    e = upstream.requests(path="/api/things/7")[0]
    assert e.headers.get("Host") == "127.0.0.1:%d" % p.port


def test_h2_over_tls_alpn(proxy, upstream, pki, ids):
    crt, key = pki["pair"]
    p = proxy({"tls_certificate": crt, "tls_certificate_key": key})
    check_owner_replay_get("https://127.0.0.1:%d" % p.port, ["--http2", "--cacert", pki["ca"]],
                           upstream, ids)


def test_http2_off_stays_http11(proxy, upstream, pki):
    crt, key = pki["pair"]
    p = proxy({"tls_certificate": crt, "tls_certificate_key": key, "http2": "off"})
    v, s, _, _ = curl(["--http2", "--cacert", pki["ca"]],
                      "https://127.0.0.1:%d/api/things/1" % p.port)
    assert (v, s) == ("HTTP/1.1", 200)


def test_h2c_many_streams_one_connection(proxy, upstream, ids, tmp_path):
    """Twenty concurrent streams of one keyed POST on one connection (nghttp
    multiplexes them): executed once, every other stream a replay or in
    progress."""
    p = proxy()
    key = ids.key()
    body = tmp_path / "body.json"
    body.write_text(course())
    url = "http://127.0.0.1:%d/api/courses" % p.port
    out = subprocess.run(
        ["nghttp", "-v", "-d", str(body), "-H", "idempotency-key: " + key,
         "-H", "x-actor-id: " + ids.actor, "-H", "content-type: application/json",
         "-t", str(CURL_TIMEOUT), "-m", "20", url],
        capture_output=True, timeout=CURL_TIMEOUT + 10, check=True).stdout.decode()
    statuses = re.findall(r"\) :status: (\d+)", out)
    assert len(statuses) == 20 and set(statuses) <= {"201", "409"}, statuses
    assert "201" in statuses
    assert upstream.count(key=key) == 1


def h2_exchange(port, headers):
    """One stream on a new connection, the preface, SETTINGS and HEADERS in a
    single write (python3-h2): (status, headers, body), or ("reset", code)."""
    import h2.config
    import h2.connection
    import h2.events

    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, validate_outbound_headers=False))
    conn.initiate_connection()
    conn.send_headers(1, headers, end_stream=True)
    sock = socket.create_connection(("127.0.0.1", port), timeout=CURL_TIMEOUT)
    try:
        sock.sendall(conn.data_to_send())
        status, got, body = None, {}, b""
        while True:
            data = sock.recv(65536)
            assert data, "closed before the stream ended"
            for ev in conn.receive_data(data):
                if isinstance(ev, h2.events.ResponseReceived):
                    got = {k.decode(): v.decode() for k, v in ev.headers}
                    status = int(got[":status"])
                elif isinstance(ev, h2.events.DataReceived):
                    body += ev.data
                    conn.acknowledge_received_data(ev.flow_controlled_length, 1)
                elif isinstance(ev, h2.events.StreamEnded):
                    return status, got, body
                elif isinstance(ev, h2.events.StreamReset):
                    return "reset", ev.error_code
            sock.sendall(conn.data_to_send())
    finally:
        sock.close()


def test_h2c_first_write_holds_everything(proxy, upstream):
    """A client whose first write holds the preface and its first request is
    answered at once (nothing waits for more bytes); CONNECT is refused with
    the HTTP/1.1 problem, never forwarded."""
    p = proxy()
    auth = "127.0.0.1:%d" % p.port
    status, _, _ = h2_exchange(p.port, [(":method", "GET"), (":scheme", "http"),
                                        (":authority", auth), (":path", "/api/things/3")])
    assert status == 200
    assert upstream.count(path="/api/things/3") == 1
    status, headers, body = h2_exchange(p.port, [(":method", "CONNECT"),
                                                 (":authority", "example.com:443")])
    assert status == 400, (status, headers, body)
    assert b"CONNECT" in body
    assert upstream.count() == 1


def test_streams_take_max_connections_slots(proxy, upstream):
    """With max_connections 3, one connection carries two streams at once
    (it takes a slot itself); the others are refused, never forwarded."""
    p = proxy({"max_connections": "3", "workers": "1", "upstream_timeout": "8s"})
    out = subprocess.run(
        ["nghttp", "-v", "-m", "5", "-H", "x-test-delay: 2", "-t", str(CURL_TIMEOUT),
         "http://127.0.0.1:%d/api/things/5" % p.port],
        capture_output=True, timeout=CURL_TIMEOUT + 10).stdout.decode()
    assert out.count("error_code=REFUSED_STREAM") == 3, out
    assert len(re.findall(r"\) :status: 200", out)) == 2, out
    assert upstream.count(path="/api/things/5") == 2


def test_reload_http2_off_for_new_connections(proxy, upstream, pki):
    """http2 off by reload: new connections speak HTTP/1.1 only (ALPN picks
    http/1.1, a preface is refused as HTTP/1.1); http2 on again brings h2 back."""
    crt, key = pki["pair"]
    p = proxy({"tls_certificate": crt, "tls_certificate_key": key})
    url = "https://127.0.0.1:%d/api/things/1" % p.port
    tls = ["--http2", "--cacert", pki["ca"]]
    assert curl(tls, url)[:2] == ("HTTP/2", 200)
    rewrite(p, lambda t: t + "\nhttp2 off\n")
    p.signal(signal.SIGHUP)
    wait_for_log(p, "configuration reloaded")
    for _ in range(4):
        assert curl(tls, url)[:2] == ("HTTP/1.1", 200)
    rewrite(p, lambda t: t.replace("\nhttp2 off\n", "\n"))
    p.signal(signal.SIGHUP)
    assert procs.poll(lambda: p.stderr_text().count("configuration reloaded") == 2)
    for _ in range(4):
        assert curl(tls, url)[:2] == ("HTTP/2", 200)


def test_preface_refused_with_http2_off(proxy, upstream):
    p = proxy({"http2": "off"})
    r = subprocess.run(["curl", "-sS", "--http2-prior-knowledge", "--max-time", "10",
                        "-o", "/dev/null", "-w", "%{http_code}",
                        "http://127.0.0.1:%d/api/things/1" % p.port],
                       capture_output=True, timeout=30)
    assert r.returncode != 0
    assert upstream.count() == 0


def test_h2c_expect_continue(proxy, upstream, ids):
    """A keyed POST that expects 100-continue gets a 100 HEADERS frame, then
    sends its body: executed once."""
    import h2.config
    import h2.connection
    import h2.events

    p = proxy()
    key = ids.key()
    body = course().encode()
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    conn.initiate_connection()
    conn.send_headers(1, [(":method", "POST"), (":scheme", "http"),
                          (":authority", "127.0.0.1:%d" % p.port), (":path", "/api/courses"),
                          ("idempotency-key", key), ("x-actor-id", ids.actor),
                          ("content-type", "application/json"),
                          ("content-length", str(len(body))), ("expect", "100-continue")])
    sock = socket.create_connection(("127.0.0.1", p.port), timeout=CURL_TIMEOUT)
    interim, final, ended = [], None, False
    try:
        sock.sendall(conn.data_to_send())
        while not ended:
            data = sock.recv(65536)
            assert data, "closed before the stream ended"
            for ev in conn.receive_data(data):
                if isinstance(ev, h2.events.InformationalResponseReceived):
                    interim.append(dict(ev.headers)[b":status"])
                    assert final is None
                    conn.send_data(1, body, end_stream=True)
                elif isinstance(ev, h2.events.ResponseReceived):
                    final = dict(ev.headers)[b":status"]
                elif isinstance(ev, h2.events.StreamEnded):
                    ended = True
            sock.sendall(conn.data_to_send())
    finally:
        sock.close()
    assert interim == [b"100"] and final == b"201", (interim, final)
    assert upstream.count(key=key) == 1


def test_shutdown_sends_goaway_and_lets_streams_finish(proxy, upstream):
    """SIGTERM during an event stream over h2 (nghttp): GOAWAY, the stream
    runs to its end, then the process exits."""
    p = proxy({"workers": "1"})
    nghttp = subprocess.Popen(
        ["nghttp", "-v", "-H", "x-test-action: sse:4:0.3", "-t", str(CURL_TIMEOUT),
         "http://127.0.0.1:%d/api/things/1" % p.port],
        stdout=subprocess.PIPE, text=True)
    out = []
    try:
        for line in nghttp.stdout:
            out.append(line)
            if "recv DATA frame" in line:
                break
        p.signal(signal.SIGTERM)
        out += nghttp.stdout.readlines()
        assert nghttp.wait(timeout=CURL_TIMEOUT) == 0
    finally:
        if nghttp.poll() is None:
            nghttp.kill()
    text = "".join(out)
    assert "recv GOAWAY frame" in text, text
    assert text.count("data: ") == 4, text
    assert p.proc.wait(timeout=CURL_TIMEOUT) == 0


class RawH2:
    """A client in hand-built frames (hyperframe, hpack), for what
    python3-h2 will not send: streams beyond the server's limit, HPACK
    bombs."""

    def __init__(self, port):
        import hpack

        self.sock = socket.create_connection(("127.0.0.1", port), timeout=CURL_TIMEOUT)
        self.enc = hpack.Encoder()
        self.dec = hpack.Decoder()
        self.buf = b""
        self.sock.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + self.frame("settings", 0))

    def frame(self, kind, sid, data=b"", flags=()):
        from hyperframe import frame as hf

        f = {"settings": hf.SettingsFrame, "headers": hf.HeadersFrame}[kind](sid)
        if kind == "headers":
            f.data = data
        for flag in flags:
            f.flags.add(flag)
        return f.serialize()

    def headers(self, sid, fields):
        block = self.enc.encode(fields)
        self.sock.sendall(self.frame("headers", sid, block, ("END_HEADERS", "END_STREAM")))

    def next_frame(self):
        """The next frame (hyperframe), its HEADERS decoded into .fields; None once closed."""
        from hyperframe import frame as hf

        while True:
            if len(self.buf) >= 9:
                f, length = hf.Frame.parse_frame_header(memoryview(self.buf[:9]))
                if len(self.buf) >= 9 + length:
                    f.parse_body(memoryview(self.buf[9:9 + length]))
                    self.buf = self.buf[9 + length:]
                    if isinstance(f, hf.HeadersFrame):
                        f.fields = dict(self.dec.decode(f.data))
                    if isinstance(f, hf.SettingsFrame) and "ACK" not in f.flags:
                        self.sock.sendall(self.frame("settings", 0, flags=("ACK",)))
                    return f
            data = self.sock.recv(65536)
            if not data:
                return None
            self.buf += data

    def close(self):
        self.sock.close()


def request_fields(port, path, extra=()):
    return [(":method", "GET"), (":scheme", "http"), (":authority", "127.0.0.1:%d" % port),
            (":path", path)] + list(extra)


def test_stream_beyond_max_concurrent_streams_refused_alone(proxy, upstream, ids):
    """With http2_max_concurrent_streams 3 acknowledged, a fourth stream
    opened while three are held is refused with REFUSED_STREAM and never
    forwarded; the three go on and are answered on the same connection."""
    from hyperframe import frame as hf

    p = proxy({"http2_max_concurrent_streams": "3", "upstream_timeout": "8s"})
    raw = RawH2(p.port)
    try:
        f = raw.next_frame()
        assert isinstance(f, hf.SettingsFrame) and f.settings.get(f.MAX_CONCURRENT_STREAMS) == 3, f
        held = [1, 3, 5]
        for sid in held:
            raw.headers(sid, request_fields(p.port, "/api/held/%d" % sid,
                                            [("x-actor-id", ids.actor), ("x-test-delay", "2")]))
        assert len(upstream.wait_for(3, actor=ids.actor)) == 3
        raw.headers(7, request_fields(p.port, "/api/held/7", [("x-actor-id", ids.actor)]))
        statuses, resets, ended = {}, {}, set()
        while not set(held) <= ended:
            f = raw.next_frame()
            assert f is not None and not isinstance(f, hf.GoAwayFrame), (f, statuses, resets)
            if isinstance(f, hf.HeadersFrame):
                statuses[f.stream_id] = f.fields.get(":status")
            if isinstance(f, hf.RstStreamFrame):
                resets[f.stream_id] = f.error_code
            if isinstance(f, (hf.HeadersFrame, hf.DataFrame)) and "END_STREAM" in f.flags:
                ended.add(f.stream_id)
    finally:
        raw.close()
    assert resets == {7: 7}, resets  # REFUSED_STREAM
    assert all(statuses[s] == "200" for s in held), statuses
    assert upstream.count(path="/api/held/7") == 0
    assert upstream.count(actor=ids.actor) == 3


def test_hpack_bomb_ends_the_connection(proxy, upstream):
    """Header lists that decode far over the limit from a few bytes each
    (references to one 4000-byte dynamic-table entry) reset their streams;
    the eleventh ends the connection with GOAWAY ENHANCE_YOUR_CALM.
    Nothing is forwarded."""
    from hyperframe import frame as hf

    p = proxy()
    bomb = [("x-bomb", "b" * 4000)] * 40  # 160 KB decoded, 4 KB then 40 bytes sent
    raw = RawH2(p.port)
    resets, goaway = set(), None
    try:
        for i in range(30):  # each bomb once the one before was answered
            sid = 2 * i + 1
            raw.headers(sid, request_fields(p.port, "/api/things/bomb", bomb))
            while sid not in resets and goaway is None:
                f = raw.next_frame()
                assert f is not None, ("closed without GOAWAY", resets)
                if isinstance(f, hf.RstStreamFrame):
                    resets.add(f.stream_id)
                if isinstance(f, hf.GoAwayFrame):
                    goaway = f
            if goaway is not None:
                break
    finally:
        raw.close()
    assert goaway is not None and goaway.error_code == 11, (goaway, resets)  # ENHANCE_YOUR_CALM
    assert goaway.last_stream_id <= 21 and len(resets) <= 11, (goaway.last_stream_id, resets)
    assert upstream.count(path="/api/things/bomb") == 0
