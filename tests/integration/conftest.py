"""Fixtures for the idemproxy black-box tests.

IDEMPROXY_BIN names the binary under test (default ./idemproxy, relative to
the repository root). The session gets one private PostgreSQL cluster
(`pg`) and one test upstream process (`upstream`); each test builds the
proxies it needs with the `proxy` factory. The harness behind them
(cluster, proxy process, upstream, HTTP client) is tests/lib.

IDEMPROXY_TEST_DATABASE=CONNINFO makes `pg` that database instead (e.g. a
Citus coordinator, `make citus`): migrated, never started, stopped or
dropped; run only the tests that do not restart `pg` against it."""
import os
import uuid

import pytest

from tests.lib import procs
from tests.lib.cluster import Cluster, ExternalDatabase
from tests.lib.proxy import BASE_ROUTES, Proxy, base_settings, render_conf
from tests.lib.upstream import Upstream


@pytest.fixture(scope="session")
def binary():
    path = procs.idemproxy_bin()
    assert os.access(path, os.X_OK), "%s is not built (set IDEMPROXY_BIN)" % path
    return path


@pytest.fixture(scope="session")
def pg(binary, tmp_path_factory):
    """The session's PostgreSQL cluster, migrated once (the database
    IDEMPROXY_TEST_DATABASE names when it is set)."""
    external = os.environ.get("IDEMPROXY_TEST_DATABASE")
    cluster = ExternalDatabase(external) if external else Cluster()
    try:
        cluster.migrate(binary, tmp_path_factory.mktemp("migrate"))
        yield cluster
    finally:
        cluster.destroy()


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
            cluster.migrate(binary, tmp_path)
        return cluster

    yield new
    for cluster in reversed(made):
        cluster.destroy()


@pytest.fixture(scope="session")
def upstream_server():
    up = Upstream()
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
        up = Upstream(port, tls)
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
        if procs.sanitizer_report(p.bin, p.stderr_text()):
            problems.append("sanitizer report in %s:\n%s" % (p.stderr_path, p.stderr_tail(200)))
        else:
            bad = procs.non_json_lines(p.stderr_text())
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
