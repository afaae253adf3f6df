"""HTTP/2 clients for the h2 tests: a connection driven by python3-h2
(Client: streams with their own headers, flow control in the test's
hands), raw frames for the attacks (frame, Raw), the real command-line
clients (curl, nghttp), and the CPU time of a process (cpu_seconds).
Every read has a timeout; a response that never comes fails the test
instead of hanging it."""
import hashlib
import json
import os
import socket
import ssl
import struct
import subprocess
import tempfile
import time

import h2.config
import h2.connection
import h2.events
import h2.settings

from tests.lib import http1, streams

IO_TIMEOUT = 30.0
READ = 256 << 10
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

# Frame types and flags (RFC 9113 6).
DATA, HEADERS, PRIORITY, RST_STREAM, SETTINGS, PUSH_PROMISE, PING, GOAWAY, WINDOW_UPDATE, \
    CONTINUATION = range(10)
END_STREAM, ACK, END_HEADERS = 0x1, 0x1, 0x4
NO_ERROR, PROTOCOL_ERROR, INTERNAL_ERROR, FLOW_CONTROL_ERROR, SETTINGS_TIMEOUT, STREAM_CLOSED, \
    FRAME_SIZE_ERROR, REFUSED_STREAM, CANCEL, COMPRESSION_ERROR, CONNECT_ERROR, \
    ENHANCE_YOUR_CALM = range(12)
MAX_CONCURRENT_STREAMS = h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS
INITIAL_WINDOW_SIZE = h2.settings.SettingCodes.INITIAL_WINDOW_SIZE


def cpu_seconds(proc):
    """utime + stime of process proc (all its threads), /proc/PID/stat
    fields 14 and 15, in seconds."""
    with open("/proc/%d/stat" % proc.pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# ---- python3-h2 ----

class Stream:
    """One stream's response as it arrived: status, headers and trailers
    (http1.Headers: (name, value) str pairs in order, looked up
    case-insensitively), the body (kept, or only its length and digest
    when keep is False), the RST_STREAM code if it was reset. It reads
    like an http1.Response, so the suite's checks (problem, assert_owner,
    assert_replay_of) take it."""

    def __init__(self, sid, keep=True):
        self.id = sid
        self.status = None
        self.headers = http1.Headers([])
        self.interim = []
        self.trailers = http1.Headers([])
        self.body = bytearray() if keep else None
        self.length = 0
        self.sha = hashlib.sha256()
        self.ended = False
        self.reset = None
        self.chunks = []          # the DATA payloads, in order (with keep)

    @property
    def done(self):
        return self.ended or self.reset is not None

    @property
    def digest(self):
        return self.sha.hexdigest()

    def json(self):
        return json.loads(bytes(self.body))

    def __repr__(self):
        return "Stream(%d, status=%r, len=%d, ended=%r, reset=%r, headers=%r)" % (
            self.id, self.status, self.length, self.ended, self.reset, self.headers.pairs[:12])


def _s(v):
    return v.decode("latin-1") if isinstance(v, bytes) else v


class Client:
    """One HTTP/2 connection to 127.0.0.1:port: cleartext with prior
    knowledge, or TLS with ALPN h2 when tls (an ssl.SSLContext) is given.
    settings: SETTINGS sent after the preface ({code: value}). With
    auto_ack (default) received DATA is acknowledged at once, so windows
    reopen; without it the test opens them (ack)."""

    def __init__(self, port, tls=None, settings=None, validate=True, auto_ack=True,
                 timeout=IO_TIMEOUT, rcvbuf=None, server_hostname="localhost"):
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if rcvbuf:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        sock.settimeout(timeout)
        sock.connect(("127.0.0.1", port))
        self.alpn = None
        if tls is not None:
            tls.set_alpn_protocols(["h2", "http/1.1"])
            sock = tls.wrap_socket(sock, server_hostname=server_hostname)
            self.alpn = sock.selected_alpn_protocol()
        self.sock = sock
        self.scheme = "https" if tls is not None else "http"
        self.timeout = timeout
        cfg = h2.config.H2Configuration(client_side=True, header_encoding=None,
                                        validate_inbound_headers=validate,
                                        normalize_inbound_headers=validate)
        self.conn = h2.connection.H2Connection(config=cfg)
        self.conn.initiate_connection()
        if settings:
            self.conn.update_settings(settings)
        self.auto_ack = auto_ack
        self.streams = {}
        self.goaway = None           # (error code, last stream id) of a GOAWAY received
        self.closed = False          # the server closed the connection
        self.remote_settings_seen = False
        self.frames_in = 0
        self.flush()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass

    def flush(self):
        data = self.conn.data_to_send()
        if data and not self.closed:
            try:
                self.sock.sendall(data)
            except (BrokenPipeError, ConnectionResetError):
                self.closed = True

    def request(self, method, path, headers=(), body=None, end=True, authority="localhost",
                keep=True):
        """Open a stream: pseudo-headers, then headers ((name, value) pairs,
        names lower-case), then the body if any (bytes; with end False the
        stream stays open for send_data). Its stream id."""
        sid = self.conn.get_next_available_stream_id()
        hdrs = [(":method", method), (":scheme", self.scheme), (":authority", authority),
                (":path", path)] + [(k.lower(), v) for k, v in headers]
        self.streams[sid] = Stream(sid, keep)
        self.conn.send_headers(sid, hdrs, end_stream=end and body is None)
        self.flush()
        if body is not None:
            self.send_data(sid, body, end)
        return sid

    def send_data(self, sid, data, end=True):
        """Send data on stream sid as the windows allow (reading meanwhile);
        end closes the stream's sending side after it."""
        data = memoryview(bytes(data))
        if not len(data):
            if end:
                self.conn.end_stream(sid)
                self.flush()
            return
        while len(data):
            window = min(self.conn.local_flow_control_window(sid),
                         self.conn.max_outbound_frame_size)
            if window <= 0:
                self.pump()
                if self.streams[sid].done:
                    return
                continue
            piece, data = data[:window], data[window:]
            self.conn.send_data(sid, bytes(piece), end_stream=end and not len(data))
            self.flush()

    def ack(self, sid, n):
        """Open stream sid's and the connection's windows by n bytes."""
        self.conn.increment_flow_control_window(n)
        if sid in self.conn.streams and not self.conn.streams[sid].closed:
            self.conn.increment_flow_control_window(n, stream_id=sid)
        self.flush()

    def pump(self, timeout=None):
        """Read once and handle what came; False when the connection is
        closed (or timeout seconds passed with nothing)."""
        if self.closed:
            return False
        self.sock.settimeout(timeout if timeout is not None else self.timeout)
        try:
            data = self.sock.recv(READ)
        except socket.timeout:
            if timeout is not None:
                return False
            raise
        except (ConnectionResetError, BrokenPipeError, ssl.SSLError):
            data = b""
        finally:
            self.sock.settimeout(self.timeout)
        if not data:
            self.closed = True
            return False
        for ev in self.conn.receive_data(data):
            self.frames_in += 1
            self.handle(ev)
        self.flush()
        return True

    def handle(self, ev):
        st = self.streams.get(getattr(ev, "stream_id", None) or 0)
        if isinstance(ev, h2.events.ResponseReceived):
            st.headers = http1.Headers([(_s(k), _s(v)) for k, v in ev.headers
                                        if not k.startswith(b":")])
            st.status = int(dict(ev.headers)[b":status"])
        elif isinstance(ev, h2.events.InformationalResponseReceived):
            st.interim.append(int(dict(ev.headers)[b":status"]))
        elif isinstance(ev, h2.events.TrailersReceived):
            st.trailers = http1.Headers([(_s(k), _s(v)) for k, v in ev.headers])
        elif isinstance(ev, h2.events.DataReceived):
            st.length += len(ev.data)
            st.sha.update(ev.data)
            if st.body is not None:
                st.body += ev.data
                st.chunks.append(ev.data)
            if self.auto_ack and ev.flow_controlled_length:
                self.conn.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
        elif isinstance(ev, h2.events.StreamEnded):
            st.ended = True
        elif isinstance(ev, h2.events.StreamReset):
            if st is not None:
                st.reset = ev.error_code
        elif isinstance(ev, h2.events.ConnectionTerminated):
            self.goaway = (ev.error_code, ev.last_stream_id)
        elif isinstance(ev, h2.events.RemoteSettingsChanged):
            self.remote_settings_seen = True

    def wait(self, pred, what, timeout=IO_TIMEOUT):
        """Pump until pred() holds; AssertionError naming what otherwise."""
        end = time.monotonic() + timeout
        while not pred():
            if self.closed or self.goaway is not None and not pred():
                if pred():
                    break
                if self.closed:
                    raise AssertionError("connection closed waiting for %s (goaway %r)"
                                         % (what, self.goaway))
            left = end - time.monotonic()
            if left <= 0:
                raise AssertionError("no %s within %ss" % (what, timeout))
            self.pump(min(left, 1.0))
        return True

    def response(self, sid, timeout=IO_TIMEOUT):
        st = self.streams[sid]
        self.wait(lambda: st.done, "end of stream %d" % sid, timeout)
        return st

    def settings(self):
        """The server's SETTINGS, once they have come."""
        self.wait(lambda: self.remote_settings_seen, "server SETTINGS")
        return self.conn.remote_settings

    def ignore_stream_limit(self, n=1 << 20):
        """Behave as a client that disregards the server's
        SETTINGS_MAX_CONCURRENT_STREAMS: h2 no longer stops this client at
        the server's limit."""
        self.conn.remote_settings[MAX_CONCURRENT_STREAMS] = n
        self.conn.remote_settings.acknowledge()


def tls_context(ca):
    return ssl.create_default_context(cafile=ca)


def alpn_of(port, ca, offer=("h2", "http/1.1")):
    """The protocol a TLS listener picks by ALPN from offer (None: none)."""
    ctx = tls_context(ca)
    ctx.set_alpn_protocols(list(offer))
    with socket.create_connection(("127.0.0.1", port), timeout=IO_TIMEOUT) as s:
        with ctx.wrap_socket(s, server_hostname="localhost") as t:
            return t.selected_alpn_protocol()


# ---- raw frames ----

def frame(ftype, flags, sid, payload=b""):
    """One frame's bytes (RFC 9113 4.1)."""
    n = len(payload)
    return struct.pack("!BHBBI", n >> 16, n & 0xFFFF, ftype, flags, sid & 0x7FFFFFFF) + payload


def settings_frame(pairs=(), ack=False):
    return frame(SETTINGS, ACK if ack else 0, 0,
                 b"".join(struct.pack("!HI", k, v) for k, v in pairs))


def hpack_literal(name, value):
    """A header as a literal without indexing, new name, no Huffman
    (RFC 7541 6.2.2)."""
    return b"\x00" + hpack_string(name) + hpack_string(value)


def hpack_integer(value, prefix_bits, first=0):
    limit = (1 << prefix_bits) - 1
    if value < limit:
        return bytes([first | value])
    out = bytearray([first | limit])
    value -= limit
    while value >= 128:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def hpack_string(s):
    b = s.encode("latin-1") if isinstance(s, str) else s
    return hpack_integer(len(b), 7) + b


def hpack_request(method, path, authority="localhost", headers=()):
    """A request header block in literals only: any decoder reads it the
    same, whatever came before on the connection."""
    block = b"".join(hpack_literal(k, v) for k, v in
                     [(":method", method), (":scheme", "http"), (":path", path),
                      (":authority", authority)] + list(headers))
    return block


class Raw(streams.Conn):
    """A connection that speaks in hand-built frames: the preface and
    SETTINGS are sent, then whatever the test writes; frames() parses what
    came back. rcvbuf: the socket's receive buffer, set before it connects
    (a client that reads little keeps little in flight)."""

    def __init__(self, port, rcvbuf=None, timeout=IO_TIMEOUT, settings=()):
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if rcvbuf:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        sock.settimeout(timeout)
        sock.connect(("127.0.0.1", port))
        self.port, self.sock, self.buf, self.closed = port, sock, b"", False
        self.sent = 0
        self.send(PREFACE + settings_frame(settings))

    def send(self, data):
        """Send data; False when the server has closed the connection."""
        try:
            self.sock.sendall(data)
        except (BrokenPipeError, ConnectionResetError):
            self.closed = True
            return False
        self.sent += len(data)
        return True

    def read(self, timeout=IO_TIMEOUT):
        """Read once; False at EOF, a reset, or timeout seconds of silence."""
        if self.closed:
            return False
        self.sock.settimeout(timeout)
        try:
            return self.fill()
        except socket.timeout:
            return False

    def frames(self):
        """The complete frames received so far, consumed: (type, flags,
        stream id, payload)."""
        out = []
        while len(self.buf) >= 9:
            hi, lo, ftype, flags, sid = struct.unpack("!BHBBI", self.buf[:9])
            n = (hi << 16) | lo
            if len(self.buf) < 9 + n:
                break
            out.append((ftype, flags, sid & 0x7FFFFFFF, self.buf[9:9 + n]))
            self.buf = self.buf[9 + n:]
        return out

    def drain(self, timeout=IO_TIMEOUT, until=None):
        """Read and parse until the server closes, until(frame) is true
        for a frame, or timeout seconds of silence: the frames seen."""
        seen = []
        while True:
            got = self.frames()
            seen += got
            if until is not None and any(until(f) for f in got):
                return seen
            if not self.read(timeout):
                seen += self.frames()
                return seen


def goaway_of(frames):
    """(error code, last stream id) of the first GOAWAY among frames, or None."""
    for ftype, _, _, payload in frames:
        if ftype == GOAWAY:
            last, code = struct.unpack("!II", payload[:8])
            return code, last & 0x7FFFFFFF
    return None


# ---- the real clients ----

class CurlResult:
    """What curl got: the final response's status, headers (http1.Headers,
    lower-case names in order), body and the HTTP version it spoke ("2",
    "1.1"); it reads like an http1.Response."""

    def __init__(self, code, version, head, body, stderr):
        self.status = code
        self.http_version = version
        self.body = body
        self.stderr = stderr
        pairs = []
        blocks = [b for b in head.replace("\r\n", "\n").split("\n\n") if b.strip()]
        for line in (blocks[-1].split("\n")[1:] if blocks else []):
            k, sep, v = line.partition(":")
            if sep:
                pairs.append((k.strip().lower(), v.strip()))
        self.headers = http1.Headers(pairs)

    def json(self):
        return json.loads(self.body)

    def __repr__(self):
        return "CurlResult(%r, HTTP/%s, %r, %r, %r)" % (self.status, self.http_version,
                                                         self.headers, self.body[:300],
                                                         self.stderr[-300:])


def curl(url, mode="--http2-prior-knowledge", method=None, headers=(), data=None, cacert=None,
         timeout=IO_TIMEOUT, extra=()):
    """Run Debian's curl once (mode: --http2-prior-knowledge, --http2,
    --http1.1); headers as (name, value) pairs; data bytes as the body."""
    with tempfile.TemporaryDirectory() as d:
        head, body, sent = (os.path.join(d, n) for n in ("head", "body", "sent"))
        cmd = ["curl", "-sS", "--max-time", str(int(timeout)), mode, "-o", body, "-D", head,
               "-w", "%{http_version} %{http_code}"]
        if cacert:
            cmd += ["--cacert", cacert]
        if method:
            cmd += ["-X", method]
        for k, v in headers:
            cmd += ["-H", "%s: %s" % (k, v)]
        if data is not None:
            with open(sent, "wb") as f:
                f.write(data)
            cmd += ["--data-binary", "@" + sent]
        cmd += list(extra) + [url]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout + 10,
                           stdin=subprocess.DEVNULL)
        version, _, code = r.stdout.strip().rpartition(" ")
        text = open(head, encoding="latin-1").read() if os.path.exists(head) else ""
        data_in = open(body, "rb").read() if os.path.exists(body) else b""
        return CurlResult(int(code) if code.isdigit() else None, version, text, data_in,
                          r.stderr)


class NghttpResult:
    """One nghttp run: its exit status, the responses (status, headers as
    (name, value) pairs) from its HAR file in request order, and stdout
    (the bodies, one after the other)."""

    def __init__(self, rc, har, stdout, stderr):
        self.rc = rc
        self.stdout = stdout
        self.stderr = stderr
        self.responses = []
        for e in (har or {}).get("log", {}).get("entries", []):
            r = e["response"]
            self.responses.append((r["status"], [(h["name"].lower(), h["value"])
                                                 for h in r["headers"]]))

    def __repr__(self):
        return "NghttpResult(rc=%r, %r, %r, %r)" % (self.rc, self.responses, self.stdout[:300],
                                                   self.stderr[-300:])


def nghttp(url, headers=(), data=None, multiply=1, timeout=IO_TIMEOUT, extra=()):
    """Run nghttp (nghttp2-client) once: the request multiply times as
    concurrent streams of one connection."""
    with tempfile.TemporaryDirectory() as d:
        har, sent = os.path.join(d, "har.json"), os.path.join(d, "sent")
        cmd = ["nghttp", "--har=" + har, "-t", str(int(timeout)), "-m", str(multiply)]
        for k, v in headers:
            cmd += ["-H", "%s: %s" % (k, v)]
        if data is not None:
            with open(sent, "wb") as f:
                f.write(data)
            cmd += ["-d", sent]
        cmd += list(extra) + [url]
        r = subprocess.run(cmd, capture_output=True, timeout=timeout + 10,
                           stdin=subprocess.DEVNULL)
        doc = None
        if os.path.exists(har) and os.path.getsize(har):
            with open(har) as f:
                doc = json.load(f)
        return NghttpResult(r.returncode, doc, r.stdout, r.stderr.decode("utf-8", "replace"))

