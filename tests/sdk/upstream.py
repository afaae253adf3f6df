"""A stand-in for Stripe's and Orb's APIs behind idemproxy, for the SDK
tests (tests/integration/test_sdk.py).

    /usr/bin/python3 -m tests.sdk.upstream [PORT]
                            (0 or nothing: any free port on 127.0.0.1)

Prints its port as the first line on stdout. An SDK cannot send the suite
upstream's X-Test-* control headers, so what a request gets is chosen by
its own parameters, which the SDKs send as they send any others:
`metadata[delay_ms]=N` in a form body (stripe-node) or
{"metadata": {"delay_ms": "N"}} in a JSON body (Orb) holds the answer N
milliseconds; `metadata[action]=reset` / {"metadata": {"action": "reset"}}
reads the request, then closes the connection with RST (an outcome
nobody can know); `metadata[action]=fail500` answers 500 with a Stripe-
shaped error body {"error": {"type": "api_error", ...}} and no retry
advice (a failure idemproxy stores and replays).

Every other request is answered 200 with a JSON object shaped like the
APIs' own: {"id": "cus_N", "object": "customer", "n": N, ...} with N the
global request counter, so that every real execution answers differently.

Every request but the control ones below is recorded (method, path,
headers, body) before it is answered:
  GET  /__log             the records, as JSON
  GET  /__count?key=K     {"posts": number of POSTs whose Idempotency-Key is K}
  POST /__reset           forget the records (the counter goes on)
"""
import json
import socket
import struct
import sys
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler

from tests.lib import upstream_server

MAX_BODY = 1 << 20
MAX_DELAY_MS = 20000


class Log(upstream_server.Log):
    """The suite upstream's request log, answered as a list, and counted by key."""

    def dump(self):
        with self.lock:
            return list(self.entries)

    def posts(self, key):
        with self.lock:
            return sum(1 for e in self.entries
                       if e["method"] == "POST" and e["idempotency_key"] == key)


LOG = Log()


def params(ctype, body):
    """The request's parameters as a flat dict: form fields as sent
    (`metadata[delay_ms]`), JSON objects flattened the same way."""
    ctype = ctype.split(";")[0].strip().lower()
    text = body.decode("utf-8", "replace")
    if ctype == "application/x-www-form-urlencoded":
        return {k: v[-1] for k, v in urllib.parse.parse_qs(text, keep_blank_values=True).items()}
    if ctype == "application/json":
        try:
            doc = json.loads(text)
        except ValueError:
            return {}
        flat = {}

        def walk(prefix, v):
            if isinstance(v, dict):
                for k, x in v.items():
                    walk("%s[%s]" % (prefix, k) if prefix else k, x)
            else:
                flat[prefix] = v if isinstance(v, str) else json.dumps(v)
        walk("", doc)
        return flat
    return {}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "sdk-upstream/1"

    def log_message(self, fmt, *args):
        pass

    def send_json(self, status, doc):
        data = json.dumps(doc).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Request-Id", "req_%d" % LOG.counter)
        self.end_headers()
        self.wfile.write(data)

    def read_body(self):
        n = int(self.headers.get("Content-Length", "0") or "0")
        if n < 0 or n > MAX_BODY:
            raise ValueError("bad Content-Length")
        return self.rfile.read(n)

    def control(self, body):
        """Serve /__log, /__count and /__reset; False for other paths."""
        url = urllib.parse.urlsplit(self.path)
        if url.path == "/__log" and self.command == "GET":
            self.send_json(200, LOG.dump())
        elif url.path == "/__count" and self.command == "GET":
            key = urllib.parse.parse_qs(url.query).get("key", [""])[0]
            self.send_json(200, {"posts": LOG.posts(key)})
        elif url.path == "/__reset" and self.command == "POST":
            LOG.reset()
            self.send_json(200, {})
        else:
            return False
        return True

    def dispatch(self):
        try:
            body = self.read_body()
        except ValueError:
            self.close_connection = True
            self.send_json(400, {"error": {"type": "invalid_request_error"}})
            return
        if self.control(body):
            return
        p = params(self.headers.get("Content-Type", ""), body)
        n = LOG.add({
            "method": self.command,
            "path": self.path,
            "headers": [[k, v] for k, v in self.headers.items()],
            "idempotency_key": self.headers.get("Idempotency-Key"),
            "body": body.decode("utf-8", "replace"),
            "params": p,
            "t": time.time(),
        })
        delay = min(int(p.get("metadata[delay_ms]", "0") or "0"), MAX_DELAY_MS)
        if delay > 0:
            time.sleep(delay / 1000.0)
        if p.get("metadata[action]") == "reset":
            self.close_connection = True
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                       struct.pack("ii", 1, 0))
            self.connection.close()
            return
        if p.get("metadata[action]") == "fail500":
            self.send_json(500, {"error": {"type": "api_error", "message": "upstream failed",
                                           "n": n}})
            return
        if self.command == "GET":
            self.send_json(200, {"object": "list", "data": [], "n": n})
            return
        doc = {"id": "cus_%d" % n, "object": "customer", "n": n,
               "name": p.get("name"), "email": p.get("email"),
               "metadata": {k[len("metadata["):-1]: v for k, v in p.items()
                            if k.startswith("metadata[") and k.endswith("]")}}
        self.send_json(200, doc)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = dispatch


if __name__ == "__main__":
    sys.exit(upstream_server.main(Handler))
