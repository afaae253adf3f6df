"""Helpers for the idemproxy integration tests: a small HTTP/1.1 client on
raw sockets, problem+json checks, the upstream's request log, the record
table, and process/port utilities. Every wait here is bounded."""
import base64
import hashlib
import json
import os
import socket
import subprocess
import threading
import time

PROBLEM_BASE = "https://idemproxy.dev/problems/"
PROBLEM_CTYPE = "application/problem+json"
IO_TIMEOUT = 15.0
MAX_HEAD = 64 * 1024


class Headers:
    """Response headers: ordered (name, value) pairs, looked up case-insensitively."""

    def __init__(self, pairs):
        self.pairs = list(pairs)

    def get(self, name, default=None):
        name = name.lower()
        for k, v in self.pairs:
            if k.lower() == name:
                return v
        return default

    def get_all(self, name):
        name = name.lower()
        return [v for k, v in self.pairs if k.lower() == name]

    def __contains__(self, name):
        return self.get(name) is not None

    def __repr__(self):
        return "Headers(%r)" % self.pairs


class Response:
    def __init__(self, status, reason, headers, body, closed):
        self.status = status
        self.reason = reason
        self.headers = headers
        self.body = body
        self.closed = closed    # the server closed the connection after it

    def json(self):
        return json.loads(self.body.decode("utf-8"))

    def __repr__(self):
        return "Response(%d, %r, %r)" % (self.status, self.headers, self.body[:300])


class ConnectionClosed(Exception):
    pass


def _encode(v):
    return v if isinstance(v, bytes) else str(v).encode("latin-1")


def build_request(method, path, headers=(), body=None, chunked=None, host="test"):
    """Bytes of one request. headers: dict or (name, value) pairs, sent as
    given (duplicates kept). Content-Length is added for a body unless a
    framing header was given; chunked: a list of chunks to send instead."""
    pairs = list(headers.items()) if isinstance(headers, dict) else list(headers)
    names = {k.lower() for k, _ in pairs}
    out = [b"%s %s HTTP/1.1\r\n" % (_encode(method), _encode(path))]
    if "host" not in names:
        out.append(b"Host: %s\r\n" % _encode(host))
    payload = b""
    if chunked is not None:
        if "transfer-encoding" not in names:
            pairs.append(("Transfer-Encoding", "chunked"))
        payload = b"".join(b"%x\r\n%s\r\n" % (len(c), c) for c in chunked) + b"0\r\n\r\n"
    elif body is not None:
        payload = body if isinstance(body, bytes) else body.encode("utf-8")
        if "content-length" not in names and "transfer-encoding" not in names:
            pairs.append(("Content-Length", str(len(payload))))
    for k, v in pairs:
        out.append(_encode(k) + b": " + _encode(v) + b"\r\n")
    out.append(b"\r\n")
    return b"".join(out) + payload


class Client:
    """One client connection (keep-alive) to 127.0.0.1:port."""

    def __init__(self, port, timeout=IO_TIMEOUT, tls=None, source=None):
        """tls: an ssl.SSLContext to speak TLS with (server name "localhost");
        source: the local address to connect from (any of 127/8), else the
        kernel's choice."""
        self.port = port
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout,
                                             source_address=(source, 0) if source else None)
        if tls is not None:
            self.sock = tls.wrap_socket(self.sock, server_hostname="localhost")
        self.buf = b""
        self.closed = False

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass
        self.closed = True

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def send(self, data):
        self.sock.sendall(data)

    def _fill(self):
        try:
            data = self.sock.recv(65536)
        except ConnectionResetError:
            data = b""
        if not data:
            self.closed = True
            raise ConnectionClosed("connection closed by the server")
        self.buf += data

    def _read_line(self):
        while b"\r\n" not in self.buf:
            if len(self.buf) > MAX_HEAD:
                raise ValueError("line too long")
            self._fill()
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def _read_n(self, n):
        while len(self.buf) < n:
            self._fill()
        data, self.buf = self.buf[:n], self.buf[n:]
        return data

    def _read_to_close(self):
        while True:
            try:
                self._fill()
            except ConnectionClosed:
                data, self.buf = self.buf, b""
                return data

    def read_response(self, method="GET"):
        """Read one response; 1xx interim responses are skipped."""
        while True:
            while b"\r\n\r\n" not in self.buf:
                if len(self.buf) > MAX_HEAD:
                    raise ValueError("response head too large")
                self._fill()
            head, self.buf = self.buf.split(b"\r\n\r\n", 1)
            lines = head.decode("latin-1").split("\r\n")
            parts = lines[0].split(" ", 2)
            if len(parts) < 2 or not parts[0].startswith("HTTP/1."):
                raise ValueError("bad status line %r" % lines[0])
            status = int(parts[1])
            reason = parts[2] if len(parts) > 2 else ""
            pairs = []
            for line in lines[1:]:
                k, _, v = line.partition(":")
                pairs.append((k.strip(), v.strip()))
            headers = Headers(pairs)
            if 100 <= status < 200:
                continue
            break
        conn_tokens = ",".join(headers.get_all("Connection")).lower()
        if method == "HEAD" or status in (204, 304):
            body = b""
        elif "chunked" in (headers.get("Transfer-Encoding") or "").lower():
            body = bytearray()
            while True:
                size = int(self._read_line().split(b";")[0].strip(), 16)
                if size == 0:
                    while self._read_line() != b"":
                        pass
                    break
                body += self._read_n(size)
                self._read_line()
            body = bytes(body)
        elif headers.get("Content-Length") is not None:
            body = self._read_n(int(headers.get("Content-Length")))
        else:
            body = self._read_to_close()
        closed = self.closed or "close" in conn_tokens
        return Response(status, reason, headers, body, closed)

    def request(self, method, path, headers=(), body=None, chunked=None):
        self.send(build_request(method, path, headers, body, chunked))
        return self.read_response(method)

    def wait_closed(self, timeout=3.0):
        """True when the server closes the connection within timeout."""
        if self.closed:
            return True
        self.sock.settimeout(timeout)
        try:
            while True:
                data = self.sock.recv(65536)
                if not data:
                    return True
        except ConnectionResetError:
            return True
        except socket.timeout:
            return False
        finally:
            self.sock.settimeout(IO_TIMEOUT)


def request(port, method, path, headers=(), body=None, chunked=None, timeout=IO_TIMEOUT,
            tls=None):
    """One request on a fresh connection (TLS with the ssl.SSLContext tls)."""
    with Client(port, timeout, tls) as c:
        return c.request(method, path, headers, body, chunked)


def check_config(binary, path, text):
    """Write text to the file path and run `idemproxy -t` on it."""
    with open(path, "w") as f:
        f.write(text)
    return subprocess.run([binary, "-t", "-c", str(path)], capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=30)


def raw_exchange(port, data, timeout=5.0):
    """Send raw bytes, read one response; returns (Response, closed) where
    closed says whether the server then closed the connection."""
    with Client(port, timeout) as c:
        c.send(data)
        r = c.read_response()
        return r, c.wait_closed(timeout)


def problem(resp, name, status=None):
    """Assert resp is the problem NAME (full type URI) and return its JSON."""
    ctype = (resp.headers.get("Content-Type") or "").split(";")[0].strip().lower()
    assert ctype == PROBLEM_CTYPE, "expected %s, got %r: %r" % (PROBLEM_CTYPE, ctype, resp)
    doc = resp.json()
    assert doc.get("type") == PROBLEM_BASE + name, "problem %r, wanted %s" % (doc, name)
    if status is not None:
        assert resp.status == status, resp
    assert doc.get("status") == resp.status, doc
    assert isinstance(doc.get("title"), str) and doc["title"], doc
    return doc


class SlowOwner:
    """An owner POST running on a thread while the upstream holds it for
    `delay` seconds (X-Test-Delay). Entering waits until the upstream has
    the request; leaving joins the thread. .response is the owner's
    Response, or the exception its client raised (e.g. when the proxy was
    killed)."""

    def __init__(self, proxy, upstream, path, key, actor, delay, body=None, headers=()):
        self.proxy, self.upstream, self.actor, self.key = proxy, upstream, actor, key
        self.response = None
        self._args = (path, key, actor, body if body is not None else course(),
                      [("X-Test-Delay", str(delay))] + list(headers))
        self._thread = threading.Thread(target=self._run)

    def _run(self):
        path, key, actor, body, headers = self._args
        try:
            self.response = self.proxy.post(path, key=key, actor=actor, body=body,
                                            headers=headers)
        except Exception as e:  # reported through .response
            self.response = e

    def __enter__(self):
        self._thread.start()
        # This key's request, not just this actor's: the actor may have
        # sent others before.
        got = self.upstream.wait_for(1, actor=self.actor, key=self.key)
        assert len(got) == 1, "the upstream never got the slow owner's request"
        return self

    def __exit__(self, *exc):
        self._thread.join(IO_TIMEOUT)


class Background:
    """One call on a thread: .result is its return value or exception,
    .at the monotonic time it ended."""

    def __init__(self, fn):
        self.result = None
        self.at = None
        self._fn = fn
        self._thread = threading.Thread(target=self._run)
        self._thread.start()

    def _run(self):
        try:
            self.result = self._fn()
        except Exception as e:  # reported through .result
            self.result = e
        self.at = time.monotonic()

    def join(self):
        self._thread.join(IO_TIMEOUT)
        assert not self._thread.is_alive(), "request still running"
        return self.result


def assert_owner(resp, status=201):
    """The owner's response: the upstream's, not marked as a replay."""
    assert resp.status == status, resp
    assert resp.headers.get("Idempotent-Replayed") is None, resp


def assert_replay_of(resp, owner):
    """resp replays owner: same status and body, marked as a replay."""
    assert resp.status == owner.status, resp
    assert (resp.headers.get("Idempotent-Replayed") or "").lower() == "true", resp
    assert resp.body == owner.body, (resp.body, owner.body)


RACE_THREADS = 20


def race(proxies, key, actor, delay="0.5"):
    """RACE_THREADS simultaneous identical requests spread over proxies."""
    results = [None] * RACE_THREADS
    barrier = threading.Barrier(RACE_THREADS)

    def one(i):
        p = proxies[i % len(proxies)]
        try:
            barrier.wait(10)
            results[i] = p.post("/api/courses", key=key, actor=actor, body=course(),
                                headers=[("X-Test-Delay", delay)])
        except Exception as e:  # reported by the assertions below
            results[i] = e

    threads = [threading.Thread(target=one, args=(i,)) for i in range(RACE_THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    return results


def check_race(results):
    for r in results:
        assert isinstance(r, Response), r
    owners = [r for r in results
              if r.status == 201 and r.headers.get("Idempotent-Replayed") is None]
    assert len(owners) == 1, results
    owner = owners[0]
    for r in results:
        if r is owner:
            continue
        if r.status == 409:
            problem(r, "operation-in-progress", 409)
            assert r.headers.get("Retry-After") is not None
        else:
            assert_replay_of(r, owner)
    return owner


# ---- the test upstream ----

class LogEntry:
    def __init__(self, d):
        self.n = d["n"]
        self.method = d["method"]
        self.path = d["path"]
        self.headers = Headers(d["headers"])
        self.body = base64.b64decode(d["body_b64"])
        self.t = d["t"]
        self.peer = d.get("peer")  # the connection's client port
        self.target = d.get("target")  # the request-target exactly as received

    def __repr__(self):
        return "LogEntry(%d %s %s)" % (self.n, self.method, self.path)


UPSTREAM_SERVER = "tests.lib.upstream_server"


class Upstream:
    """A running test upstream: the program tests/lib/upstream_server.py,
    or another module with its command line (tests/sdk/upstream.py)."""

    def __init__(self, port=0, tls=None, module=UPSTREAM_SERVER):
        """tls: (certificate file, key file[, client CA, client certificate,
        client key]) to serve https (to clients the CA signed); its control
        requests (/__log, /__reset) then go over TLS too, unverified, with
        the client certificate when there is one. The module runs as
        `/usr/bin/python3 -m MODULE` from the repository root."""
        args = ["/usr/bin/python3", "-m", module, str(port)] + list(tls or ())[:3]
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL,
                                     cwd=ROOT)
        line = self.proc.stdout.readline()
        if not line:
            self.proc.wait(5)
            raise RuntimeError("upstream did not start")
        self.port = int(line)
        self.tls = None
        if tls:
            import ssl
            self.tls = ssl.create_default_context()
            self.tls.check_hostname = False
            self.tls.verify_mode = ssl.CERT_NONE
            if len(tls) == 5:
                self.tls.load_cert_chain(tls[3], tls[4])
        self.url = "%s://127.0.0.1:%d" % ("https" if tls else "http", self.port)

    def stop(self):
        terminate(self.proc)
        self.proc.stdout.close()

    def reset(self):
        r = request(self.port, "POST", "/__reset", body=b"", tls=self.tls)
        assert r.status == 204

    def log(self):
        r = request(self.port, "GET", "/__log", tls=self.tls)
        assert r.status == 200
        return [LogEntry(d) for d in r.json()]

    def requests(self, actor=None, key=None, path=None, method=None, header=None):
        """Recorded requests matching every given filter: actor (X-Actor-Id),
        key (Idempotency-Key exactly as sent), path prefix, method, and
        header=(name, value)."""
        out = []
        for e in self.log():
            if actor is not None and e.headers.get("X-Actor-Id") != actor:
                continue
            if key is not None and e.headers.get("Idempotency-Key") != key:
                continue
            if path is not None and not e.path.startswith(path):
                continue
            if method is not None and e.method != method:
                continue
            if header is not None and e.headers.get(header[0]) != header[1]:
                continue
            out.append(e)
        return out

    def count(self, **kw):
        return len(self.requests(**kw))

    def wait_for(self, n, timeout=10.0, **kw):
        """Wait until at least n matching requests arrived; returns them."""
        end = time.monotonic() + timeout
        while True:
            got = self.requests(**kw)
            if len(got) >= n or time.monotonic() > end:
                return got
            time.sleep(0.05)


# ---- the record table ----

class Records:
    """Access to idemproxy's record table, whatever its exact column names
    and value encodings: the table is the one with `state` and
    `lease_expires_at` columns, and rows are found by any text column that
    contains a value (a test's unique actor or key; the store may prefix
    it, e.g. with the actor's source)."""

    def __init__(self, conninfo):
        self.conninfo = conninfo
        self._table = None

    def connect(self):
        import psycopg2
        conn = psycopg2.connect(self.conninfo, connect_timeout=5)
        conn.autocommit = True
        return conn

    def query(self, sql, args=()):
        conn = self.connect()
        try:
            with conn.cursor() as cur:
                cur.execute(sql, args)
                if cur.description is None:
                    return []
                names = [d[0] for d in cur.description]
                return [dict(zip(names, row)) for row in cur.fetchall()]
        finally:
            conn.close()

    def table(self):
        if self._table is None:
            rows = self.query("""
                SELECT c.table_schema, c.table_name
                  FROM information_schema.columns c
                 WHERE c.column_name IN ('state', 'lease_expires_at')
                   AND c.table_schema NOT IN ('pg_catalog', 'information_schema')
                 GROUP BY 1, 2 HAVING count(*) = 2""")
            assert len(rows) == 1, "cannot tell the record table: %r" % rows
            cols = self.query("""
                SELECT column_name, data_type FROM information_schema.columns
                 WHERE table_schema = %s AND table_name = %s""",
                              (rows[0]["table_schema"], rows[0]["table_name"]))
            text = [c["column_name"] for c in cols
                    if c["data_type"] in ("text", "character varying", "USER-DEFINED")]
            ident = '"%s"."%s"' % (rows[0]["table_schema"], rows[0]["table_name"])
            self._table = (ident, text)
        return self._table

    def _match(self):
        """SQL condition: some text column contains %(v)s."""
        _, text = self.table()
        return " OR ".join('strpos("%s"::text, %%(v)s) > 0' % c for c in text)

    def rows(self, value):
        """Rows with a text column containing value (e.g. the actor)."""
        ident, _ = self.table()
        cond = self._match()
        return self.query("SELECT * FROM %s WHERE %s" % (ident, cond), {"v": value})

    def one(self, value):
        rows = self.rows(value)
        assert len(rows) == 1, "expected one record for %r, got %r" % (value, rows)
        return rows[0]

    def expire_lease(self, value):
        """Move the lease of value's in_progress record into the past."""
        ident, _ = self.table()
        cond = self._match()
        conn = self.connect()
        try:
            with conn.cursor() as cur:
                cur.execute("UPDATE %s SET lease_expires_at = now() - interval '1 minute' "
                            "WHERE state::text = 'in_progress' AND (%s)" % (ident, cond),
                            {"v": value})
                return cur.rowcount
        finally:
            conn.close()


def sql(conninfo, text, args=()):
    """Run one statement (autocommit) on its own connection; its rows, []
    when it returns none."""
    import psycopg2
    conn = psycopg2.connect(conninfo)
    conn.autocommit = True
    try:
        with conn.cursor() as cur:
            cur.execute(text, args)
            return cur.fetchall() if cur.description else []
    finally:
        conn.close()


def record_state(row):
    return str(row["state"])


def record_status(row):
    for name in ("response_status", "status", "status_code"):
        if name in row and row[name] is not None:
            return int(row[name])
    return None


def record_text(row):
    """Every column of the row as one string, for 'never stored' checks."""
    parts = []
    for v in row.values():
        if isinstance(v, memoryview):
            v = v.tobytes()
        if isinstance(v, bytes):
            v = v.decode("utf-8", "replace")
        parts.append(str(v))
    return "\n".join(parts)


# ---- processes and ports ----

POLL_LIMIT = 10.0


def poll(fn, limit=POLL_LIMIT, step=0.1):
    """fn() until it returns something true, at most limit seconds; its
    last value."""
    end = time.monotonic() + limit
    while True:
        v = fn()
        if v or time.monotonic() > end:
            return v
        time.sleep(step)


def terminate(proc, timeout=5):
    """SIGTERM proc and wait; SIGKILL it if it does not exit in time."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout)

def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def port_open(port):
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
        return True
    except OSError:
        return False


def wait_port(port, proc=None, timeout=10.0):
    """Wait until 127.0.0.1:port accepts; False if proc exits or time runs out."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc is not None and proc.poll() is not None:
            return False
        if port_open(port):
            return True
        time.sleep(0.05)
    return False


SANITIZER_MARKERS = ("AddressSanitizer", "LeakSanitizer", "runtime error:")


def sanitizer_report(binary, text):
    """True when binary is the sanitizer build and text holds a report."""
    return os.path.basename(binary).endswith("-asan") and \
        any(m in text for m in SANITIZER_MARKERS)


def non_json_lines(text):
    """The lines of an idemproxy's stderr that are not JSON objects (the
    fixture's own "---- start N ----" markers aside)."""
    bad = []
    for line in text.splitlines():
        if line.startswith("---- start ") or not line:
            continue
        try:
            if isinstance(json.loads(line), dict):
                continue
        except ValueError:
            pass
        bad.append(line)
    return bad


def sha(data):
    return hashlib.sha256(data).hexdigest()


def course(title="Intro to SQL", topic="sql", lessons=3):
    return json.dumps({"title": title, "topic": topic, "lessons": lessons})


ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def env_bin():
    return os.environ.get("IDEMPROXY_BIN", "./idemproxy")


def idemproxy_bin():
    """The binary under test: IDEMPROXY_BIN (default ./idemproxy), relative
    to the repository root."""
    path = env_bin()
    if not os.path.isabs(path):
        path = os.path.join(ROOT, path)
    return path
