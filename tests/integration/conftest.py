"""Fixtures for the idemproxy black-box tests.

IDEMPROXY_BIN names the binary under test (default ./idemproxy, relative to
the repository root). The session gets one private PostgreSQL cluster
(`pg`) and one test upstream process (`upstream`); each test builds the
proxies it needs with the `proxy` factory."""
import json
import os
import shutil
import signal
import subprocess
import tempfile
import uuid

import pytest

import helpers

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HERE = os.path.dirname(os.path.abspath(__file__))
PGBIN = "/usr/lib/postgresql/15/bin"
PG_USER = "postgres"
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


def idemproxy_bin():
    path = helpers.env_bin()
    if not os.path.isabs(path):
        path = os.path.join(ROOT, path)
    return path


def run_as_pg(args, **kw):
    return subprocess.run(["runuser", "-u", PG_USER, "--"] + args, cwd="/",
                          stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          timeout=60, **kw)


class Cluster:
    """A throwaway PostgreSQL cluster with a unix socket in a short temp dir."""

    listen_addresses = "''"  # no TCP unless a subclass says so

    def __init__(self):
        self.layout()
        r = run_as_pg([PGBIN + "/initdb", "-D", self.data, "-A", "trust", "-U", PG_USER,
                       "-E", "UTF8", "--locale=C.UTF-8", "--no-sync"])
        assert r.returncode == 0, r.stdout + r.stderr
        self.start()
        r = run_as_pg([PGBIN + "/createdb", "-h", self.dir, "-p", str(self.port),
                       "-U", PG_USER, "idemproxy"])
        assert r.returncode == 0, r.stderr

    def layout(self):
        """The cluster's directory (owned by postgres), port and conninfo."""
        self.dir = tempfile.mkdtemp(prefix="ipg", dir="/tmp")
        shutil.chown(self.dir, PG_USER, PG_USER)
        os.chmod(self.dir, 0o700)
        self.data = os.path.join(self.dir, "data")
        self.port = helpers.free_port()
        self.conninfo = "host=%s port=%d dbname=idemproxy user=%s" % (
            self.dir, self.port, PG_USER)
        self.records = helpers.Records(self.conninfo)

    def start(self):
        r = run_as_pg([PGBIN + "/pg_ctl", "-D", self.data, "-l",
                       os.path.join(self.dir, "log"), "-w", "-t", "30", "-o",
                       "-c listen_addresses=%s -k %s -p %d"
                       % (self.listen_addresses, self.dir, self.port),
                       "start"], start_new_session=True)
        assert r.returncode == 0, r.stdout + r.stderr + self.log_tail()

    def stop(self):
        r = run_as_pg([PGBIN + "/pg_ctl", "-D", self.data, "-m", "fast", "-w", "-t", "30",
                       "stop"])
        assert r.returncode == 0, r.stdout + r.stderr

    def running(self):
        r = run_as_pg([PGBIN + "/pg_ctl", "-D", self.data, "status"])
        return r.returncode == 0

    def log_tail(self):
        try:
            with open(os.path.join(self.dir, "log")) as f:
                return f.read()[-4000:]
        except OSError:
            return ""

    def query(self, sql, args=()):
        return self.records.query(sql, args)

    def destroy(self):
        if self.running():
            self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


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
        "listen": "127.0.0.1:%d" % helpers.free_port(),
        "upstream": "http://127.0.0.1:%d" % upstream_port,
        "database": '"%s"' % conninfo,
        "workers": "2",
        "problem_base": helpers.PROBLEM_BASE,
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
        self.bin = idemproxy_bin()
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
        # Store connections start() waits for (0: none): a request that
        # arrives before its worker's store connected gets 503, by design.
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
        if wait and not helpers.wait_port(self.port, self.proc, START_TIMEOUT):
            pytest.fail("idemproxy did not accept connections on port %d:\n%s"
                        % (self.port, self.stderr_tail()))
        if wait and self.stores and not helpers.poll(
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
    def request(self, method, path, headers=(), body=None, chunked=None, timeout=helpers.IO_TIMEOUT):
        return helpers.request(self.port, method, path, headers, body, chunked, timeout)

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
        return helpers.Client(self.port)


@pytest.fixture(scope="session")
def binary():
    path = idemproxy_bin()
    assert os.access(path, os.X_OK), "%s is not built (set IDEMPROXY_BIN)" % path
    return path


@pytest.fixture(scope="session")
def pg(binary, tmp_path_factory):
    """The session's PostgreSQL cluster, migrated once."""
    cluster = Cluster()
    try:
        conf = tmp_path_factory.mktemp("migrate") / "migrate.conf"
        conf.write_text(render_conf(base_settings(helpers.free_port(), cluster.conninfo),
                                    BASE_ROUTES))
        cluster.migrate_conf = str(conf)
        r = subprocess.run([binary, "migrate", "-c", str(conf)], stdin=subprocess.DEVNULL,
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, "migrate failed:\n%s%s" % (r.stdout, r.stderr)
        assert not helpers.sanitizer_report(binary, r.stderr), r.stderr
        yield cluster
    finally:
        cluster.destroy()


def migrate(binary, cluster, workdir):
    """Apply the migrations to cluster with `binary migrate -c FILE`, FILE
    written into workdir (kept as cluster.migrate_conf); fails with the
    command's output when it does not succeed."""
    conf = os.path.join(str(workdir), "migrate-%d.conf" % cluster.port)
    with open(conf, "w") as f:
        f.write(render_conf(base_settings(helpers.free_port(), cluster.conninfo), BASE_ROUTES))
    cluster.migrate_conf = conf
    r = subprocess.run([binary, "migrate", "-c", conf], stdin=subprocess.DEVNULL,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, "migrate failed:\n%s%s" % (r.stdout, r.stderr)
    assert not helpers.sanitizer_report(binary, r.stderr), r.stderr


@pytest.fixture
def private_pg(binary, tmp_path):
    """Factory for tests that stop, restart or reconfigure PostgreSQL:
    private_pg(make=Cluster, migrated=True) -> make(), a started cluster of
    the test's own (migrated unless migrated=False); every one is destroyed
    after the test, the latest first."""
    made = []

    def new(make=Cluster, migrated=True):
        cluster = make()
        made.append(cluster)
        if migrated:
            migrate(binary, cluster, tmp_path)
        return cluster

    yield new
    for cluster in reversed(made):
        cluster.destroy()


@pytest.fixture(scope="session")
def upstream_server():
    up = helpers.Upstream(os.path.join(HERE, "upstream.py"))
    yield up
    up.stop()


@pytest.fixture
def upstream(upstream_server):
    """The session's upstream with an empty request log."""
    upstream_server.reset()
    return upstream_server


@pytest.fixture
def start_upstream():
    """Factory for extra upstream processes (e.g. on a chosen port)."""
    started = []

    def start(port=0, tls=None):
        up = helpers.Upstream(os.path.join(HERE, "upstream.py"), port, tls)
        started.append(up)
        return up

    yield start
    for up in started:
        up.stop()


@pytest.fixture
def ids():
    """A unique actor and a key maker for this test."""
    class Ids:
        actor = "actor-" + uuid.uuid4().hex

        @staticmethod
        def key():
            return "key-" + uuid.uuid4().hex
    return Ids()


@pytest.fixture
def proxy(request, pg, upstream, tmp_path):
    """Factory: proxy(settings=None, routes="", start=True, upstream_port=None,
    database=None, wait_store=None) -> a started Proxy. settings override the
    base configuration (None removes a directive); routes are added before
    the base routes. Starting waits for every store connection (each
    worker's and the main thread's) when wait_store says so, by default when
    the database is the suite's own cluster."""
    made = []
    request.node._idem_proxies = made

    def make(settings=None, routes="", start=True, upstream_port=None, database=None,
             wait_store=None):
        s = base_settings(upstream_port or upstream.port, database or pg.conninfo)
        s.update(settings or {})
        p = Proxy(str(tmp_path), render_conf(s, routes + BASE_ROUTES), "idemproxy%d" % len(made))
        if wait_store if wait_store is not None else database is None:
            workers = s.get("workers") or "auto"
            p.stores = (int(workers) if workers.isdigit() else os.cpu_count() or 1) + 1
        made.append(p)
        if start:
            p.start()
        return p

    yield make
    problems = []
    for p in made:
        if p.proc is None:
            continue
        was_running = p.running()
        code = p.stop()
        if was_running and code != 0:
            problems.append("idemproxy (%s) exited with %r after SIGTERM" % (p.conf, code))
        if helpers.sanitizer_report(p.bin, p.stderr_text()):
            problems.append("sanitizer report in %s:\n%s" % (p.stderr_path, p.stderr_tail(200)))
        else:
            bad = helpers.non_json_lines(p.stderr_text())
            if bad:
                problems.append("log lines that are not JSON in %s:\n%s"
                                % (p.stderr_path, "\n".join(bad[:5])))
    if problems:
        pytest.fail("\n".join(problems))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    if rep.failed:
        for p in getattr(item, "_idem_proxies", []):
            rep.sections.append(("idemproxy stderr (%s)" % os.path.basename(p.stderr_path),
                                 p.stderr_tail()))
