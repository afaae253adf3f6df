#!/usr/bin/python3
"""The upstream the integration tests put behind idemproxy.

    upstream.py [PORT]      (0 or nothing: any free port)

Prints the port it listens on (127.0.0.1) as the first line on stdout.
Every request is recorded in memory (method, path with query, headers,
body) and counted, whatever happens to it next; GET /__log returns the
records as JSON and POST /__reset forgets them (the counter keeps going, so
response bodies stay unique across tests). Both are served directly and
never recorded.

Each request chooses its own response with headers:
  X-Test-Status: N          status (default 201 for POST, 200 otherwise)
  X-Test-Delay: SECONDS     sleep this long before answering
  X-Test-Body: TEXT         response body instead of the default JSON
  X-Test-Header: Name: v    add a response header (repeatable)
  X-Test-Action: reset      read the request, then close with RST
                 truncate   Content-Length 100 with 10 bytes, then close
                 silent     read the request, answer nothing (30 s at most)
                 big:N      a body of N bytes
                 chunked    answer with Transfer-Encoding: chunked
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
BIG_PATTERN = b"0123456789abcdef"
NO_BODY_STATUSES = (204, 304)
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


LOG = Log()


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

    def dispatch(self):
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

        n = LOG.add({
            "method": self.command,
            "path": self.path,
            "version": self.request_version,
            "headers": [[k, v] for k, v in self.headers.items()],
            "body_b64": base64.b64encode(body).decode(),
            "t": time.time(),
        })
        h = self.headers
        delay = float(h.get("X-Test-Delay", "0") or "0")
        if delay > 0:
            time.sleep(delay)
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

        default = 201 if self.command == "POST" else 200
        status = int(h.get("X-Test-Status", default))
        ctype = "application/json"
        if action.startswith("big:"):
            size = int(action[4:])
            payload = (BIG_PATTERN * (size // len(BIG_PATTERN) + 1))[:size]
            ctype = "application/octet-stream"
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
        elif action == "chunked":
            headers.append(("Transfer-Encoding", "chunked"))
            payload = self.chunk(payload)
        else:
            headers.append(("Content-Length", str(len(payload))))
        if self.close_connection:
            headers.append(("Connection", "close"))
        self.send_raw(status, headers, payload, head_only=self.command == "HEAD")
        if action.startswith("close-after:"):
            # A keep-alive response, then the server drops the idle
            # connection, as servers with a short keep-alive timeout do.
            self.wfile.flush()
            time.sleep(float(action[len("close-after:"):]))
            self.close_connection = True

    @staticmethod
    def chunk(payload):
        """payload as three chunks and the last-chunk."""
        out = bytearray()
        step = max(1, len(payload) // 3)
        for i in range(0, len(payload), step):
            piece = payload[i:i + step]
            out += b"%x\r\n" % len(piece) + piece + b"\r\n"
        out += b"0\r\n\r\n"
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


def main():
    port = int(sys.argv[1]) if len(sys.argv) > 1 else 0
    srv = Server(("127.0.0.1", port), Handler)
    sys.stdout.write("%d\n" % srv.server_address[1])
    sys.stdout.flush()
    try:
        srv.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
