"""An h2c upstream for the HTTP/2 tests: Debian's hypercorn serving an
ASGI app, cleartext HTTP/2 with prior knowledge (and HTTP/1.1 on the same
port, which its control requests use).

    /usr/bin/python3 -m tests.lib.h2c_upstream [PORT [CERT KEY]]

Prints the port it listens on (127.0.0.1) as the first line on stdout.
With CERT and KEY it serves TLS instead, offering h2 and http/1.1 by ALPN.
It speaks the test upstream's language (tests/lib/upstream_server.py) for
what the h2 tests need, so tests.lib.upstream.Upstream drives it: every
request is recorded (method, path with query, headers, body, and
"version", the HTTP version it came in) and counted; GET /__log and POST
/__reset are served apart. X-Test-Status, X-Test-Delay, X-Test-Body and
X-Test-Header work as there; X-Test-Action: echo answers with the
request's body, big:N with N bytes of the pattern. The default body is
{"n", "method", "path", "body_sha"}."""
import asyncio
import base64
import hashlib
import json
import socket
import sys
import time

from hypercorn.asyncio import serve
from hypercorn.config import Config

from tests.lib.upstream_server import HEADER_SPLIT, pattern


class Log:
    def __init__(self):
        self.entries = []
        self.counter = 0


LOG = Log()


async def read_body(receive):
    body = bytearray()
    while True:
        msg = await receive()
        if msg["type"] == "http.disconnect":
            break
        body += msg.get("body", b"")
        if not msg.get("more_body"):
            break
    return bytes(body)


async def respond(send, status, headers, body):
    await send({"type": "http.response.start", "status": status,
                "headers": [(k.encode("latin-1"), v.encode("latin-1")) for k, v in headers]})
    await send({"type": "http.response.body", "body": body})


async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        while True:
            msg = await receive()
            if msg["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif msg["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    if scope["type"] != "http":
        return
    body = await read_body(receive)
    method, path = scope["method"], scope["path"]
    if scope.get("query_string"):
        path += "?" + scope["query_string"].decode("latin-1")
    if path == "/__log" and method == "GET":
        await respond(send, 200, [("content-type", "application/json")],
                      json.dumps(LOG.entries).encode())
        return
    if path == "/__reset" and method == "POST":
        LOG.entries = []
        await respond(send, 204, [], b"")
        return
    headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in scope["headers"]]
    LOG.counter += 1
    n = LOG.counter
    LOG.entries.append({"n": n, "method": method, "path": path, "headers": headers,
                        "body_b64": base64.b64encode(body).decode(), "t": time.time(),
                        "version": scope.get("http_version"),
                        "peer": (scope.get("client") or [None, None])[1], "target": path})
    h = {}
    for k, v in headers:
        h.setdefault(k.lower(), []).append(v)

    def first(name, default=None):
        return h.get(name, [default])[0]

    delay = float(first("x-test-delay", "0") or "0")
    if delay > 0:
        await asyncio.sleep(delay)
    action = first("x-test-action", "")
    status = int(first("x-test-status", 201 if method == "POST" else 200))
    ctype = "application/json"
    if action == "echo":
        payload = body
        ctype = first("content-type", "application/octet-stream")
    elif action.startswith("big:"):
        payload = pattern(int(action[4:]))
        ctype = "application/octet-stream"
    elif "x-test-body" in h:
        payload = first("x-test-body").encode("latin-1")
        ctype = "text/plain"
    else:
        payload = json.dumps({"n": n, "method": method, "path": path,
                              "body_sha": hashlib.sha256(body).hexdigest()}).encode()
    extra = []
    for value in h.get("x-test-header", []):
        for item in HEADER_SPLIT.split(value):
            name, sep, v = item.partition(":")
            if sep:
                extra.append((name.strip().lower(), v.strip()))
    out = [] if any(k == "content-type" for k, _ in extra) else [("content-type", ctype)]
    out += extra + [("content-length", str(len(payload)))]
    await respond(send, status, out, payload)


def main():
    port = int(sys.argv[1]) if len(sys.argv) > 1 else 0
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    sock.listen(128)
    sock.set_inheritable(True)
    config = Config()
    config.bind = ["fd://%d" % sock.fileno()]
    config.keep_alive_timeout = 120
    config.accesslog = None
    config.errorlog = None
    config.h2_max_concurrent_streams = 256
    if len(sys.argv) > 3:
        config.certfile, config.keyfile = sys.argv[2], sys.argv[3]
        config.alpn_protocols = ["h2", "http/1.1"]
    sys.stdout.write("%d\n" % sock.getsockname()[1])
    sys.stdout.flush()
    try:
        asyncio.run(serve(app, config))
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
