"""The upstream the integration tests, the chaos run and the HA stage put
behind idemproxy (started by Upstream, tests/lib/upstream.py).

    /usr/bin/python3 -m tests.lib.upstream_server [PORT [CERT KEY [CLIENT_CA]]]
                            (PORT 0 or nothing: any free port; CERT KEY:
                            https; CLIENT_CA: clients need a certificate it signed)

Prints the port it listens on (127.0.0.1) as the first line on stdout.
Every request is recorded in memory (method, path with query, headers,
body) and counted, whatever happens to it next; GET /__log returns the
records as JSON and POST /__reset forgets them (the counter keeps going, so
response bodies stay unique across tests). Both are served directly and
never recorded.

Each request chooses its own response with headers:
  X-Test-Status: N          status (default 201 for POST, 200 otherwise)
  X-Test-Delay: SECONDS     sleep this long before answering
  X-Test-Hold: ID           answer only once POST /__step/ID/1 came (60 s
                            at most): a request held as long as a test says
  X-Test-Body: TEXT         response body instead of the default JSON
  X-Test-Header: Name: v    add a response header (repeatable)
  X-Test-Action: reset      read the request, then close with RST
                 truncate   Content-Length 100 with 10 bytes, then close
                 silent     read the request, answer nothing (30 s at most)
                 big:N      a body of N bytes
                 jsonrpc    a JSON-RPC 2.0 answer to the body's call: its id,
                            and a result naming the effect's n and method
                 chunked    answer with Transfer-Encoding: chunked
                 trailers   the same, with the trailer fields
                            "X-Trailer-A: one" and "X-Trailer-B: two"
  Streaming (bodies made of BIG_PATTERN, written as they are made):
                 stream:N           N bytes with Content-Length (the log
                                    entry's "sent" says how many are
                                    written so far)
                 stream-chunked:N   N bytes in chunks of STREAM_BLOCK
                 stream-close:N     N bytes, no length: the close ends them
                 sse:COUNT:SECS     text/event-stream, chunked: COUNT events
                                    "data: I T" (T: time.time() when sent),
                                    SECS apart, each flushed
                 sse-step:COUNT:ID  the same, but event I+1 only once
                                    POST /__step/ID/I+1 came (each event
                                    waits for its client to ask for it)
                 break:N            Content-Length 2N, N bytes, then close
                 break-chunked:N    N bytes chunked, then close (no last chunk)
                 break-close:N      N bytes, no length, then RST
                 early-hints        103 Early Hints (Link), then the answer
                 extra              the answer, then bytes beyond it
                 chunk-overflow     a chunk size of 20 hex digits
                 upgrade-unasked    101 to a request that asked for nothing
                 sink               read the body as it comes, keep only its
                                    length and SHA-256 (logged as body_len,
                                    body_sha; answered as "len", "body_sha")
                 answer-early       answer 413 without reading the body, close
                 stray:SECS         after the answer (one without a body: HEAD,
                                    204, 304), SECS later, a whole extra
                                    response on the same connection
                 ws-echo            WebSocket handshake, then echo every
                                    message; "close-now" makes it close first
                 switch:MODE        a 101 to whatever the request asked, then
                                    HTTP again on the same connection (a
                                    server that takes anything for an
                                    upgrade): MODE "asked" names the
                                    request's Upgrade with the right
                                    Sec-WebSocket-Accept, "no-accept" and
                                    "bad-accept" leave it out or get it
                                    wrong, "other" names h2c instead
The default body is {"n", "method", "path", "body_sha"}: n is the global
request counter, so every real execution answers differently.
"""
import base64
import hashlib
import json
import re
import select
import socket
import struct
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

SILENT_MAX = 30.0
MAX_BODY = 64 << 20
STREAM_BLOCK = 64 << 10
WS_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
BIG_PATTERN = b"0123456789abcdef"
NO_BODY_STATUSES = (204, 304)
TRAILERS = b"X-Trailer-A: one\r\nX-Trailer-B: two\r\n"
STRAY_RESPONSE = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nstray"
# Separate "A: 1, B: 2" (a proxy may join repeated X-Test-Header fields)
# without splitting values such as HTTP dates at their commas.
HEADER_SPLIT = re.compile(r",\s*(?=[A-Za-z0-9-]+:)")


class Log:
    """Every request received, in order, shared by the handler threads."""

    def __init__(self):
        self.lock = threading.Lock()
        self.entries = []
        self.counter = 0

    def add(self, entry):
        with self.lock:
            self.counter += 1
            entry["n"] = self.counter
            self.entries.append(entry)
            return self.counter

    def dump(self):
        with self.lock:
            return json.dumps(self.entries).encode()

    def reset(self):
        with self.lock:
            self.entries = []

    def progress(self, n, sent):
        """Entry n has written sent bytes of its streamed body."""
        with self.lock:
            for e in reversed(self.entries):
                if e["n"] == n:
                    e["sent"] = sent
                    return


class Steps:
    """The sse-step streams' permissions: (id, event) pairs allowed."""

    def __init__(self):
        self.cond = threading.Condition()
        self.allowed = set()

    def allow(self, sid, i):
        with self.cond:
            self.allowed.add((sid, i))
            self.cond.notify_all()

    def wait(self, sid, i, limit):
        with self.cond:
            return self.cond.wait_for(lambda: (sid, i) in self.allowed, limit)


LOG = Log()
STEPS = Steps()
STEP_MAX = 60.0


def read_chunked(rfile):
    """Decode a chunked body (trailers dropped)."""
    out = bytearray()
    while True:
        line = rfile.readline(1024)
        if not line:
            raise ValueError("eof in chunk size")
        size = int(line.split(b";", 1)[0].strip(), 16)
        if size == 0:
            while rfile.readline(8192) not in (b"\r\n", b"\n", b""):
                pass
            return bytes(out)
        out += rfile.read(size)
        rfile.readline(8)
        if len(out) > MAX_BODY:
            raise ValueError("body too large")


def pattern(n):
    """The first n bytes of BIG_PATTERN repeated."""
    return (BIG_PATTERN * (n // len(BIG_PATTERN) + 1))[:n]


def blocks(n, size=STREAM_BLOCK):
    """n bytes of pattern, size at a time (size a multiple of the pattern)."""
    block = pattern(size)
    while n > 0:
        piece = block if n >= size else block[:n]
        n -= len(piece)
        yield piece


class Sink:
    """Length and SHA-256 of a body read as it comes."""

    def __init__(self):
        self.len = 0
        self.sha = hashlib.sha256()

    def add(self, data):
        self.len += len(data)
        self.sha.update(data)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "test-upstream/1"

    def log_message(self, fmt, *args):
        pass

    def __getattr__(self, name):
        # do_GET, do_POST, do_WHATEVER: every method goes to dispatch.
        if name.startswith("do_"):
            return self.dispatch
        raise AttributeError(name)

    def read_body(self):
        te = self.headers.get("Transfer-Encoding", "")
        if "chunked" in te.lower():
            return read_chunked(self.rfile)
        n = int(self.headers.get("Content-Length", "0") or "0")
        if n < 0 or n > MAX_BODY:
            raise ValueError("bad Content-Length")
        return self.rfile.read(n)

    def send_raw(self, status, headers, body, head_only=False):
        out = ["HTTP/1.1 %d %s\r\n" % (status, self.responses.get(status, ("X",))[0])]
        for k, v in headers:
            out.append("%s: %s\r\n" % (k, v))
        out.append("\r\n")
        data = "".join(out).encode("latin-1")
        if not head_only:
            data += body
        self.wfile.write(data)

    def sink_body(self):
        """Read the body without keeping it: its length and digest."""
        sink = Sink()
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            while True:
                line = self.rfile.readline(1024)
                if not line:
                    raise ValueError("eof in chunk size")
                size = int(line.split(b";", 1)[0].strip(), 16)
                if size == 0:
                    while self.rfile.readline(8192) not in (b"\r\n", b"\n", b""):
                        pass
                    return sink
                while size:
                    data = self.rfile.read(min(size, 1 << 20))
                    if not data:
                        raise ValueError("eof in chunk")
                    sink.add(data)
                    size -= len(data)
                self.rfile.readline(8)
        n = int(self.headers.get("Content-Length", "0") or "0")
        while n:
            data = self.rfile.read(min(n, 1 << 20))
            if not data:
                raise ValueError("eof in body")
            sink.add(data)
            n -= len(data)
        return sink

    def dispatch(self):
        if self.headers.get("X-Test-Action", "") == "answer-early":
            LOG.add({"method": self.command, "path": self.path,
                     "version": self.request_version,
                     "headers": [[k, v] for k, v in self.headers.items()],
                     "body_b64": "", "t": time.time()})
            self.close_connection = True
            self.send_raw(413, [("Content-Length", "0"), ("Connection", "close")], b"")
            self.wfile.flush()
            time.sleep(0.5)
            return
        if self.headers.get("X-Test-Action", "") == "sink":
            try:
                sink = self.sink_body()
            except ValueError:
                self.close_connection = True
                return
            n = LOG.add({"method": self.command, "path": self.path,
                         "version": self.request_version,
                         "headers": [[k, v] for k, v in self.headers.items()],
                         "body_b64": "", "body_len": sink.len,
                         "body_sha": sink.sha.hexdigest(), "t": time.time()})
            data = json.dumps({"n": n, "len": sink.len, "body_sha": sink.sha.hexdigest()}).encode()
            self.send_raw(201 if self.command == "POST" else 200,
                          [("Content-Type", "application/json"),
                           ("Content-Length", str(len(data)))], data)
            return
        try:
            body = self.read_body()
        except ValueError:
            self.close_connection = True
            self.send_raw(400, [("Content-Length", "0"), ("Connection", "close")], b"")
            return
        if self.path == "/__log" and self.command == "GET":
            data = LOG.dump()
            self.send_raw(200, [("Content-Type", "application/json"),
                                ("Content-Length", str(len(data)))], data)
            return
        if self.path == "/__reset" and self.command == "POST":
            LOG.reset()
            self.send_raw(204, [], b"")
            return
        if self.path.startswith("/__step/") and self.command == "POST":
            _, _, sid, i = self.path.split("/", 3)
            STEPS.allow(sid, int(i))
            self.send_raw(204, [], b"")
            return

        n = LOG.add({
            "method": self.command,
            "path": self.path,
            "version": self.request_version,
            "headers": [[k, v] for k, v in self.headers.items()],
            "body_b64": base64.b64encode(body).decode(),
            "t": time.time(),
            "peer": self.client_address[1],
            # The request-target as it came (http.server rewrites a leading "//").
            "target": self.requestline.split(" ")[1] if " " in self.requestline else "",
        })
        h = self.headers
        delay = float(h.get("X-Test-Delay", "0") or "0")
        if delay > 0:
            time.sleep(delay)
        if h.get("X-Test-Hold"):
            STEPS.wait(h["X-Test-Hold"], 1, STEP_MAX)
        action = h.get("X-Test-Action", "")

        if action == "reset":
            self.close_connection = True
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                       struct.pack("ii", 1, 0))
            self.connection.close()
            return
        if action == "truncate":
            self.close_connection = True
            self.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                             b"Content-Length: 100\r\n\r\n0123456789")
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        if action == "silent":
            self.close_connection = True
            self.wait_for_close(SILENT_MAX)
            return
        self.n = n
        if self.streaming(action):
            return

        default = 201 if self.command == "POST" else 200
        status = int(h.get("X-Test-Status", default))
        ctype = "application/json"
        if action.startswith("big:"):
            size = int(action[4:])
            payload = (BIG_PATTERN * (size // len(BIG_PATTERN) + 1))[:size]
            ctype = "application/octet-stream"
        elif action == "jsonrpc":
            # A JSON-RPC answer: the call's own id, the effect's number.
            try:
                call = json.loads(body)
            except ValueError:
                call = {}
            payload = json.dumps({"jsonrpc": "2.0", "id": call.get("id"),
                                  "result": {"n": n, "method": call.get("method")}}).encode()
        elif "X-Test-Body" in h:
            payload = h["X-Test-Body"].encode("utf-8", "surrogateescape")
            ctype = "text/plain"
        else:
            payload = json.dumps({
                "n": n,
                "method": self.command,
                "path": self.path,
                "body_sha": hashlib.sha256(body).hexdigest(),
            }).encode()

        extra = []
        for value in h.get_all("X-Test-Header") or []:
            for item in HEADER_SPLIT.split(value):
                name, sep, v = item.partition(":")
                if sep:
                    extra.append((name.strip(), v.strip()))
        headers = []
        if not any(k.lower() == "content-type" for k, _ in extra):
            headers.append(("Content-Type", ctype))
        headers += extra
        if status in NO_BODY_STATUSES or status < 200:
            payload = b""
        elif action in ("chunked", "trailers"):
            headers.append(("Transfer-Encoding", "chunked"))
            if action == "trailers":
                headers.append(("Trailer", "X-Trailer-A, X-Trailer-B"))
            payload = self.chunk(payload, TRAILERS if action == "trailers" else b"")
        else:
            headers.append(("Content-Length", str(len(payload))))
        if self.close_connection:
            headers.append(("Connection", "close"))
        self.send_raw(status, headers, payload, head_only=self.command == "HEAD")
        if action.startswith("stray:"):
            # Bytes after a response that has none (HEAD, 204, 304), at
            # once or SECS later: read as the next response by whoever
            # reuses the connection.
            secs = float(action[len("stray:"):])
            if secs > 0:
                self.wfile.flush()
                time.sleep(secs)
            self.wfile.write(STRAY_RESPONSE)
        if action.startswith("close-after:"):
            # A keep-alive response, then the server drops the idle
            # connection, as servers with a short keep-alive timeout do.
            self.wfile.flush()
            time.sleep(float(action[len("close-after:"):]))
            self.close_connection = True

    def hang_up(self):
        """Close the connection (FIN, after everything written)."""
        self.close_connection = True
        self.connection.shutdown(socket.SHUT_RDWR)

    def rst(self):
        """Close the connection with a reset."""
        self.close_connection = True
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.connection.close()

    def streaming(self, action):
        """The streaming actions (see the module's text); False for the others."""
        kind, _, arg = action.partition(":")
        w = self.wfile
        octet = ("Content-Type", "application/octet-stream")
        if kind in ("stream", "break"):
            n = int(arg)
            self.send_raw(200 if self.command != "POST" else 201,
                          [octet, ("Content-Length", str(n if kind == "stream" else 2 * n))], b"")
            sent = 0
            for piece in blocks(n):
                w.write(piece)
                sent += len(piece)
                LOG.progress(self.n, sent)
            if kind == "break":
                self.hang_up()
        elif kind in ("stream-chunked", "break-chunked"):
            self.send_raw(200 if self.command != "POST" else 201,
                          [octet, ("Transfer-Encoding", "chunked")], b"")
            for piece in blocks(int(arg)):
                w.write(b"%x\r\n%s\r\n" % (len(piece), piece))
            if kind == "break-chunked":
                self.hang_up()
                return True
            w.write(b"0\r\n\r\n")
        elif kind in ("stream-close", "break-close"):
            self.close_connection = True
            self.send_raw(200 if self.command != "POST" else 201, [octet, ("Connection", "close")],
                          b"")
            for piece in blocks(int(arg)):
                w.write(piece)
            if kind == "break-close":
                self.rst()
        elif kind == "sse":
            count, _, secs = arg.partition(":")
            self.send_raw(200, [("Content-Type", "text/event-stream"),
                                ("Cache-Control", "no-cache"),
                                ("Transfer-Encoding", "chunked")], b"")
            for i in range(int(count)):
                if i:
                    time.sleep(float(secs))
                event = b"data: %d %.6f\n\n" % (i, time.time())
                w.write(b"%x\r\n%s\r\n" % (len(event), event))
                w.flush()
            w.write(b"0\r\n\r\n")
        elif kind == "sse-step":
            count, _, sid = arg.partition(":")
            self.send_raw(200, [("Content-Type", "text/event-stream"),
                                ("Cache-Control", "no-cache"),
                                ("Transfer-Encoding", "chunked")], b"")
            for i in range(int(count)):
                if i and not STEPS.wait(sid, i, STEP_MAX):
                    self.hang_up()
                    return True
                event = b"data: %d %.6f\n\n" % (i, time.time())
                w.write(b"%x\r\n%s\r\n" % (len(event), event))
                w.flush()
            w.write(b"0\r\n\r\n")
        elif kind == "early-hints":
            w.write(b"HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload; as=style\r\n\r\n")
            w.flush()
            time.sleep(0.2)
            data = b'{"hinted":true}'
            self.send_raw(200, [("Content-Type", "application/json"),
                                ("Content-Length", str(len(data)))], data)
        elif kind == "extra":
            self.close_connection = True
            w.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 5\r\n\r\n"
                    b"helloHTTP/1.1 200 OK\r\nContent-Length: 8\r\n\r\nsmuggled")
        elif kind == "chunk-overflow":
            self.close_connection = True
            w.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                    b"ffffffffffffffffffff\r\nxx")
        elif kind == "upgrade-unasked":
            self.close_connection = True
            w.write(b"HTTP/1.1 101 Switching Protocols\r\nConnection: upgrade\r\n"
                    b"Upgrade: websocket\r\n\r\nraw bytes")
        elif kind == "ws-echo":
            self.websocket_echo()
        elif kind == "switch":
            self.switch(arg)
        else:
            return False
        return True

    def switch(self, mode):
        """A 101 to anything (see the module's text), then the next request."""
        key = self.headers.get("Sec-WebSocket-Key", "")
        accept = base64.b64encode(hashlib.sha1((key + WS_GUID).encode()).digest()).decode()
        headers = [("Connection", "upgrade"),
                   ("Upgrade", "h2c" if mode == "other"
                    else self.headers.get("Upgrade") or "websocket")]
        if mode in ("asked", "other"):
            headers.append(("Sec-WebSocket-Accept", accept))
        elif mode == "bad-accept":
            headers.append(("Sec-WebSocket-Accept", base64.b64encode(b"x" * 20).decode()))
        self.send_raw(101, headers, b"")
        self.close_connection = False

    def websocket_echo(self):
        """RFC 6455 handshake, then echo each message until a close."""
        key = self.headers.get("Sec-WebSocket-Key", "")
        if "websocket" not in self.headers.get("Upgrade", "").lower() or not key:
            self.close_connection = True
            self.send_raw(400, [("Content-Length", "0"), ("Connection", "close")], b"")
            return
        accept = base64.b64encode(hashlib.sha1((key + WS_GUID).encode()).digest()).decode()
        self.close_connection = True
        self.send_raw(101, [("Upgrade", "websocket"), ("Connection", "Upgrade"),
                            ("Sec-WebSocket-Accept", accept)], b"")
        self.wfile.flush()
        while True:
            frame = self.ws_read()
            if frame is None:
                return
            opcode, payload = frame
            if opcode == 8:  # close: answer it, then close the connection
                self.ws_send(8, payload)
                self.connection.shutdown(socket.SHUT_RDWR)
                return
            if opcode == 9:  # ping
                self.ws_send(10, payload)
                continue
            if payload == b"close-now":
                self.ws_send(8, struct.pack("!H", 1000))
                self.connection.shutdown(socket.SHUT_RDWR)
                return
            self.ws_send(opcode, payload)

    def ws_read(self):
        """One client frame (masked) as (opcode, payload), or None at EOF."""
        head = self.rfile.read(2)
        if len(head) < 2:
            return None
        opcode, n = head[0] & 0x0F, head[1] & 0x7F
        if n == 126:
            n = struct.unpack("!H", self.rfile.read(2))[0]
        elif n == 127:
            n = struct.unpack("!Q", self.rfile.read(8))[0]
        mask = self.rfile.read(4) if head[1] & 0x80 else b"\0\0\0\0"
        data = self.rfile.read(n)
        return opcode, bytes(b ^ mask[i % 4] for i, b in enumerate(data))

    def ws_send(self, opcode, payload):
        """One unmasked server frame."""
        n = len(payload)
        if n < 126:
            head = struct.pack("!BB", 0x80 | opcode, n)
        elif n < 65536:
            head = struct.pack("!BBH", 0x80 | opcode, 126, n)
        else:
            head = struct.pack("!BBQ", 0x80 | opcode, 127, n)
        self.wfile.write(head + payload)
        self.wfile.flush()

    @staticmethod
    def chunk(payload, trailers=b""):
        """payload as three chunks and the last-chunk (with trailers: the
        trailer section's field lines, each ending in CRLF)."""
        out = bytearray()
        step = max(1, len(payload) // 3)
        for i in range(0, len(payload), step):
            piece = payload[i:i + step]
            out += b"%x\r\n" % len(piece) + piece + b"\r\n"
        out += b"0\r\n" + trailers + b"\r\n"
        return bytes(out)

    def wait_for_close(self, limit):
        """Sleep until the peer closes the connection or limit seconds pass."""
        end = time.monotonic() + limit
        sock = self.connection
        while True:
            left = end - time.monotonic()
            if left <= 0:
                return
            r, _, _ = select.select([sock], [], [], min(left, 0.5))
            if r:
                try:
                    if not sock.recv(65536):
                        return
                except OSError:
                    return


class Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def handle_error(self, request, client_address):
        pass


def main(handler=None):
    """Serve with handler (this file's Handler by default: tests/sdk/upstream.py
    brings its own) on the port argv names, printed on the first line."""
    port = int(sys.argv[1]) if len(sys.argv) > 1 else 0
    srv = Server(("127.0.0.1", port), handler or Handler)
    if len(sys.argv) > 3:  # CERT KEY [CLIENT_CA]: serve https [to clients CLIENT_CA signed]
        import ssl
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(sys.argv[2], sys.argv[3])
        if len(sys.argv) > 4:
            ctx.load_verify_locations(sys.argv[4])
            ctx.verify_mode = ssl.CERT_REQUIRED
        srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
    sys.stdout.write("%d\n" % srv.server_address[1])
    sys.stdout.flush()
    try:
        srv.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
