"""One idemproxy process under test (Proxy) and the configuration it runs
with: the base settings and routes every test starts from, rendered to the
text of a configuration file (render_conf), checked (check_config), shown as
in force (show_config) and
rewritten (rewrite), the migration of a cluster (migrate), and waiting
for a line in a Proxy's log (wait_for_log). A Proxy owns its configuration file and its stderr file in the
work directory it is given; whoever makes one stops it."""
import json
import os
import signal
import subprocess

import pytest  # (a failed start is reported with pytest.fail)

from tests.lib import expect, http1, procs

START_TIMEOUT = 10.0
STOP_TIMEOUT = 10.0
STDERR_TAIL = 60

BASE_ROUTES = """
route course.create {
    match        POST /api/courses
    fingerprint  json title:trim topic lessons:int
}
route order.pay {
    match        POST /api/orders/{id}/payments
    fingerprint  json
}
route thing.optional {
    match        POST /api/optional
    key          optional
}
route anon.op {
    match        POST /api/anon
    actor        anonymous
}
route raw.op {
    match        POST /api/raw
    fingerprint  body
}
route release.op {
    match        POST /api/rel
    release_on   4xx 503
    unknown_on   502 504
}
"""


def render_conf(settings, routes):
    """Configuration text: top-level settings (name -> value; None leaves
    the directive out), then routes."""
    lines = []
    for name, value in settings.items():
        if value is None:
            continue
        lines.append("%s %s" % (name, value))
    return "\n".join(lines) + "\n" + routes


def base_settings(upstream_port, conninfo):
    return {
        "listen": "127.0.0.1:%d" % procs.free_port(),
        "upstream": "http://127.0.0.1:%d" % upstream_port,
        "database": '"%s"' % conninfo,
        "workers": "2",
        "problem_base": expect.PROBLEM_BASE,
        "upstream_timeout": "2s",
        "lease": "10s",
        "store_timeout": "1s",
        "client_timeout": "5s",
        "shutdown_timeout": "3s",
        "actor": "header X-Actor-Id",
    }


class Proxy:
    """One idemproxy process and its configuration file."""

    def __init__(self, workdir, text, name="idemproxy"):
        self.bin = procs.idemproxy_bin()
        self.conf = os.path.join(workdir, name + ".conf")
        self.stderr_path = os.path.join(workdir, name + ".stderr")
        with open(self.conf, "w") as f:
            f.write(text)
        self.port = None
        for line in text.splitlines():
            parts = line.split()
            if parts and parts[0] == "listen":
                self.port = int(parts[1].rsplit(":", 1)[1])
        self.proc = None
        self.returncode = None
        self.starts = 0
        # Store connections start() waits for (0: none): a keyed request
        # that arrives earlier waits for its worker's, up to store_timeout.
        self.stores = 0
        self.env = None   # added to the environment the process starts with
        self.prefix = []  # a command the binary runs under (prlimit ...)

    def stores_connected(self):
        """"store connected" lines logged since the last start."""
        text = self.stderr_text()
        since = text.rsplit("---- start %d ----" % self.starts, 1)[-1]
        return since.count('"msg":"store connected"')

    def start(self, wait=True):
        self.starts += 1
        err = open(self.stderr_path, "ab")
        err.write(b"---- start %d ----\n" % self.starts)
        err.flush()
        env = dict(os.environ, **self.env) if self.env else None
        self.proc = subprocess.Popen(self.prefix + [self.bin, "-c", self.conf],
                                     stdin=subprocess.DEVNULL,
                                     stdout=err, stderr=err, cwd=os.path.dirname(self.conf),
                                     env=env)
        err.close()
        self.returncode = None
        if wait and not procs.wait_port(self.port, self.proc, START_TIMEOUT):
            pytest.fail("idemproxy did not accept connections on port %d:\n%s"
                        % (self.port, self.stderr_tail()))
        if wait and self.stores and not procs.poll(
                lambda: self.stores_connected() >= self.stores, START_TIMEOUT, 0.02):
            pytest.fail("idemproxy did not connect %d stores:\n%s"
                        % (self.stores, self.stderr_tail()))
        return self

    def running(self):
        return self.proc is not None and self.proc.poll() is None

    def signal(self, sig):
        self.proc.send_signal(sig)

    def stop(self, timeout=STOP_TIMEOUT):
        """SIGTERM and wait; returns the exit code (None if it had to be killed)."""
        if not self.running():
            self.returncode = self.proc.returncode if self.proc else None
            return self.returncode
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.returncode = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)
            self.returncode = None
        return self.returncode

    def kill(self):
        if self.running():
            self.proc.kill()
            self.proc.wait(5)
        self.returncode = self.proc.returncode

    def stderr_text(self):
        try:
            with open(self.stderr_path, "rb") as f:
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def log_lines(self):
        """The JSON log lines written so far (the start markers left out)."""
        return [json.loads(l) for l in self.stderr_text().splitlines()
                if l.startswith("{")]

    def stderr_tail(self, n=STDERR_TAIL):
        return "\n".join(self.stderr_text().splitlines()[-n:])

    # Requests to this proxy.
    def request(self, method, path, headers=(), body=None, chunked=None, timeout=http1.IO_TIMEOUT):
        return http1.request(self.port, method, path, headers, body, chunked, timeout)

    def post(self, path, key=None, actor=None, body=None, headers=(), **kw):
        h = []
        if key is not None:
            h.append(("Idempotency-Key", key))
        if actor is not None:
            h.append(("X-Actor-Id", actor))
        if body is not None:
            h.append(("Content-Type", "application/json"))
        h += list(headers.items()) if isinstance(headers, dict) else list(headers)
        return self.request("POST", path, h, body if body is not None else b"", **kw)

    def client(self):
        return http1.Client(self.port)


def check_config(binary, path, text):
    """Write text to the file path and run `idemproxy -t` on it."""
    with open(path, "w") as f:
        f.write(text)
    return subprocess.run([binary, "-t", "-c", str(path)], capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=30)


def show_config(binary, path):
    """`idemproxy -T` on the file path: the effective configuration's text;
    fails when the command does not succeed."""
    r = subprocess.run([binary, "-T", "-c", str(path)], capture_output=True, text=True,
                       stdin=subprocess.DEVNULL, timeout=30)
    assert r.returncode == 0, r.stderr
    return r.stdout


def migrate(binary, conninfo, conf):
    """Apply the migrations to the database conninfo names: the base
    configuration on it written to the file conf, then `binary migrate -c
    conf`; fails with the command's output when it does not succeed."""
    with open(conf, "w") as f:
        f.write(render_conf(base_settings(procs.free_port(), conninfo), BASE_ROUTES))
    r = subprocess.run([binary, "migrate", "-c", conf], stdin=subprocess.DEVNULL,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, "migrate failed:\n%s%s" % (r.stdout, r.stderr)
    assert not procs.sanitizer_report(binary, r.stderr), r.stderr


def rewrite(p, edit):
    """Rewrite p's configuration file with edit(text) -> text."""
    with open(p.conf) as f:
        text = f.read()
    with open(p.conf, "w") as f:
        f.write(edit(text))


def wait_for_log(p, needle):
    """Wait until needle is in p's stderr; fails when it is not within
    procs.POLL_LIMIT."""
    assert procs.poll(lambda: needle in p.stderr_text()), \
        "no %r in the log: %s" % (needle, p.stderr_tail())
