"""Two Python upstreams for test_spellings.py, each behind a real server
(started from the repository root by tests/lib/spellings.py):

    python3 -m tests.lib.spelling_apps wsgi PORT              wsgiref (Flask, Django)
    python3 -m hypercorn --bind 127.0.0.1:PORT tests.lib.spelling_apps:asgi
                                                              (Starlette, FastAPI)

Both route as the frameworks on them do: by the path the server hands the
application, percent-decoded (WSGI PATH_INFO, ASGI scope["path"]), with
repeated and trailing slashes ignored (werkzeug's merge_slashes and
strict_slashes, Starlette's redirect_slashes reach the handler through a
redirect). The protected handler is POST /api/courses: every execution is
counted and answered 201 {"n": COUNT}. GET /__count answers {"count": N};
any other GET answers 200 {"path": ..., "target": ...}, what the
application saw and the request-target as it came; anything else 404.
"""
import json
import re
import sys
import threading
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

PROTECTED = "/api/courses"


class Counter:
    def __init__(self):
        self.lock = threading.Lock()
        self.n = 0

    def add(self):
        with self.lock:
            self.n += 1
            return self.n


COUNT = Counter()


def route(path):
    """The route a decoded path reaches."""
    return re.sub("/+", "/", path).rstrip("/") or "/"


def answer(method, path, target):
    """(status, JSON body) for a request the application sees as path."""
    if method == "GET" and path == "/__count":
        return 200, {"count": COUNT.n}
    if method == "POST" and route(path) == PROTECTED:
        return 201, {"n": COUNT.add()}
    if method == "GET":
        return 200, {"path": path, "target": target}
    return 404, {"path": path}


class Handler(WSGIRequestHandler):
    """wsgiref's handler, with the request-target in REQUEST_URI and quiet."""

    def get_environ(self):
        env = super().get_environ()
        env["REQUEST_URI"] = self.path
        return env

    def log_message(self, *args):
        pass


def wsgi(environ, start_response):
    size = int(environ.get("CONTENT_LENGTH") or 0)
    environ["wsgi.input"].read(size)
    status, doc = answer(environ["REQUEST_METHOD"], environ["PATH_INFO"],
                         environ["REQUEST_URI"])
    body = json.dumps(doc).encode()
    start_response("%d X" % status, [("Content-Type", "application/json"),
                                     ("Content-Length", str(len(body)))])
    return [body]


async def asgi(scope, receive, send):
    if scope["type"] != "http":
        return
    more = True
    while more:
        more = (await receive()).get("more_body", False)
    status, doc = answer(scope["method"], scope["path"], scope["raw_path"].decode("latin-1"))
    body = json.dumps(doc).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


def main():
    if len(sys.argv) != 3 or sys.argv[1] != "wsgi":
        sys.stderr.write("usage: python3 -m tests.lib.spelling_apps wsgi PORT\n")
        return 2
    srv = make_server("127.0.0.1", int(sys.argv[2]), wsgi, WSGIServer, Handler)
    srv.serve_forever(poll_interval=0.2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
