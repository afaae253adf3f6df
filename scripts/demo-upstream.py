#!/usr/bin/python3
"""A small JSON API to put idemproxy in front of: courses.

    scripts/demo-upstream.py PORT

POST /api/courses {"title", "topic", "lessons"} creates c001, c002, ...
and answers 201 with Location; invalid input gets a 400 problem. GET
/api/courses lists the courses, GET /api/courses/ID shows one. HTTP/1.1
with keep-alive, every response with Content-Length, one log line per
request on stderr. Standard library only; state lives in memory.
"""
import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MAX_BODY = 1 << 20
MAX_TITLE = 200


class Courses:
    """The course list, shared by the handler threads."""

    def __init__(self):
        self.lock = threading.Lock()
        self.items = []

    def add(self, title, topic, lessons):
        with self.lock:
            course = {
                "id": "c%03d" % (len(self.items) + 1),
                "title": title,
                "topic": topic,
                "lessons": lessons,
            }
            self.items.append(course)
            return course

    def all(self):
        with self.lock:
            return list(self.items)

    def get(self, cid):
        with self.lock:
            for c in self.items:
                if c["id"] == cid:
                    return c
        return None


COURSES = Courses()


def validate(body):
    """Return (title, topic, lessons) or raise ValueError with the reason."""
    try:
        doc = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise ValueError("the body is not valid JSON")
    if not isinstance(doc, dict):
        raise ValueError("the body must be a JSON object")
    title, topic, lessons = doc.get("title"), doc.get("topic"), doc.get("lessons")
    if not isinstance(title, str) or not title.strip() or len(title) > MAX_TITLE:
        raise ValueError("title must be a non-empty string of at most %d characters" % MAX_TITLE)
    if not isinstance(topic, str) or not topic.strip():
        raise ValueError("topic must be a non-empty string")
    if isinstance(lessons, bool) or not isinstance(lessons, int) or lessons < 1:
        raise ValueError("lessons must be a positive integer")
    return title.strip(), topic.strip(), lessons


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "demo-upstream/1"

    def log_message(self, fmt, *args):
        sys.stderr.write("demo-upstream: %s\n" % (fmt % args))

    def log_request(self, code="-", size="-"):
        key = self.headers.get("Idempotency-Key") if self.headers else None
        self.log_message("%s %s -> %s%s", self.command, self.path, code,
                         " (Idempotency-Key: %s)" % key if key else "")

    def send_json(self, status, doc, ctype="application/json", headers=()):
        data = json.dumps(doc, indent=None).encode() + b"\n"
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        for name, value in headers:
            self.send_header(name, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def problem(self, status, title, detail):
        self.send_json(status, {"type": "about:blank", "title": title,
                                "status": status, "detail": detail},
                       ctype="application/problem+json")

    def read_body(self):
        """The request body by Content-Length, or None after answering 4xx."""
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            self.close_connection = True
            self.problem(411, "Length Required", "send the body with Content-Length")
            return None
        try:
            n = int(self.headers.get("Content-Length", "0"))
        except ValueError:
            n = -1
        if n < 0 or n > MAX_BODY:
            self.close_connection = True
            self.problem(400, "Bad Request", "bad or too large Content-Length")
            return None
        return self.rfile.read(n)

    def do_GET(self):
        path = self.path.split("?", 1)[0].rstrip("/")
        if path == "/api/courses":
            self.send_json(200, {"courses": COURSES.all()})
            return
        if path.startswith("/api/courses/"):
            course = COURSES.get(path[len("/api/courses/"):])
            if course is not None:
                self.send_json(200, course)
                return
        self.problem(404, "Not Found", "no such resource: %s" % path)

    do_HEAD = do_GET

    def do_POST(self):
        body = self.read_body()
        if body is None:
            return
        path = self.path.split("?", 1)[0].rstrip("/")
        if path != "/api/courses":
            self.problem(404, "Not Found", "no such resource: %s" % path)
            return
        try:
            title, topic, lessons = validate(body)
        except ValueError as e:
            self.problem(400, "Invalid course", str(e))
            return
        course = COURSES.add(title, topic, lessons)
        self.send_json(201, course, headers=[("Location", "/api/courses/" + course["id"])])


def main():
    if len(sys.argv) != 2 or not sys.argv[1].isdigit():
        sys.stderr.write("usage: demo-upstream.py PORT\n")
        return 2
    port = int(sys.argv[1])
    ThreadingHTTPServer.allow_reuse_address = True
    ThreadingHTTPServer.daemon_threads = True
    try:
        srv = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    except OSError as e:
        sys.stderr.write("demo-upstream: cannot listen on 127.0.0.1:%d: %s\n" % (port, e))
        return 1
    sys.stderr.write("demo-upstream: listening on http://127.0.0.1:%d\n" % port)
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        srv.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
