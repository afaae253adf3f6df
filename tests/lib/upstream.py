"""The test upstream's client side: an Upstream is a running test
upstream process (tests/lib/upstream_server.py unless another module is
named) and its request log, read as LogEntry objects. Whoever starts one
stops it."""
import base64
import subprocess
import time

from tests.lib import http1, procs


class LogEntry:
    def __init__(self, d):
        self.n = d["n"]
        self.method = d["method"]
        self.path = d["path"]
        self.headers = http1.Headers(d["headers"])
        self.body = base64.b64decode(d["body_b64"])
        self.t = d["t"]
        self.peer = d.get("peer")  # the connection's client port
        self.target = d.get("target")  # the request-target exactly as received
        self.version = d.get("version")  # the HTTP version it came in ("1.1", "2")
        self.sent = d.get("sent")  # streamed response bytes written so far

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
                                     cwd=procs.ROOT)
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
        procs.terminate(self.proc)
        self.proc.stdout.close()

    def reset(self):
        r = http1.request(self.port, "POST", "/__reset", body=b"", tls=self.tls)
        assert r.status == 204

    def step(self, sid, i):
        """Let the sse-step stream sid send its event i."""
        r = http1.request(self.port, "POST", "/__step/%s/%d" % (sid, i), body=b"", tls=self.tls)
        assert r.status == 204

    def release(self, hold):
        """Let the requests held with X-Test-Hold: hold answer."""
        self.step(hold, 1)

    def log(self):
        r = http1.request(self.port, "GET", "/__log", tls=self.tls)
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
