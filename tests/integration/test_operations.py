"""Operating idemproxy (docs/operations.md): readiness and its reasons,
`migrate status`, HTTP-layer refusals in the log and the metrics, the
Prometheus text as a strict parser reads it (every series there from the
start), the admin listener's methods, the service manager's notify
protocol, and the command line's messages. Every idempotency test counts
upstream effects exactly."""
import os
import re
import signal
import socket
import subprocess
import time
import uuid

import psycopg2
import pytest

from tests.lib import helpers
from tests.lib.admin import (ALL_OUTCOMES, DASHBOARD_METRICS, admin, admin_proxy, metrics,
                             poll_metrics)
from tests.lib.helpers import SlowOwner, assert_owner, course, problem, sql

OWNER_DELAY = 1.5
OPERATION = "course.create"
REFUSAL_STATUSES = ("400", "408", "413", "414", "431", "503")
HEAD_LIMIT = 32768          # HTTP_MAX_HEAD: start line and headers
MAX_HEADERS = 100           # HTTP_MAX_HEADERS
NOTIFY_WAIT = 10.0          # seconds to wait for one notify datagram
WORKERS = 2                 # the base configuration's `workers`
SCRAPES_NOT_READY = 3       # scrapes that must all say not ready
MIGRATIONS = sorted(f[:-4] for f in os.listdir(
    os.path.join(os.path.dirname(__file__), "..", "..", "sql")) if f.endswith(".sql"))


# ---- a database of the test's own in the session cluster ----

def conninfo_of(pg, dbname):
    return re.sub(r"dbname=\S+", "dbname=" + dbname, pg.conninfo)


@pytest.fixture
def fresh_db(pg):
    """An empty database (no schema) in the session cluster; its conninfo."""
    name = "ops_" + uuid.uuid4().hex[:12]
    admin_conn = psycopg2.connect(pg.conninfo)
    admin_conn.autocommit = True
    with admin_conn.cursor() as cur:
        cur.execute("CREATE DATABASE " + name)
    try:
        yield conninfo_of(pg, name)
    finally:
        with admin_conn.cursor() as cur:
            cur.execute("DROP DATABASE IF EXISTS %s WITH (FORCE)" % name)
        admin_conn.close()


def write_conf(tmp_path, conninfo, extra=""):
    path = tmp_path / ("ops-%s.conf" % uuid.uuid4().hex[:8])
    path.write_text("listen 127.0.0.1:%d\nupstream http://127.0.0.1:%d\ndatabase \"%s\"\n%s"
                    % (helpers.free_port(), helpers.free_port(), conninfo, extra))
    return str(path)


def run(binary, *args):
    return subprocess.run([binary] + list(args), stdin=subprocess.DEVNULL, capture_output=True,
                          text=True, timeout=60)


def readyz(p):
    return admin(p, "GET", "/readyz")


def readyz_says(p, reason):
    """/readyz, once its answer names reason (the workers' store gauges
    follow a timer, so the first answers may still say unreachable)."""
    r = helpers.poll(lambda: (lambda r: r if reason.encode() in r.body else None)(readyz(p)))
    assert r, readyz(p)
    return r


def not_ready(resp, reason):
    assert resp.status == 503, resp
    text = resp.body.decode()
    assert text.startswith("not ready: ") and text.endswith("\n"), text
    assert text.count("\n") == 1, text
    assert reason in text, text


# ---- readiness ----

def test_migrate_status_and_readyz_on_a_database_never_migrated(binary, proxy, fresh_db,
                                                                 tmp_path, upstream, ids):
    """No schema: /readyz 503 with its reason and a log hint to run migrate;
    `migrate status` lists every migration pending and exits 1; after
    `migrate`, status exits 0 and the instance becomes ready."""
    conf = write_conf(tmp_path, fresh_db)
    r = run(binary, "migrate", "status", "-c", conf)
    assert r.returncode == 1, r
    assert [l.split()[1] for l in r.stdout.splitlines() if l.startswith("pending")] \
        == MIGRATIONS, r.stdout
    assert "run \"idemproxy migrate\"" in r.stdout, r.stdout

    p = admin_proxy(proxy, database=fresh_db, wait_store=True)
    not_ready(readyz_says(p, "the schema is missing"), "the schema is missing")
    # A keyed request meanwhile: 503, and the log says what to do.
    problem(p.post("/api/courses", key=ids.key(), actor=ids.actor, body=course()),
            "store-unavailable", 503)
    assert upstream.count(actor=ids.actor) == 0
    assert helpers.poll(lambda: any(l.get("msg", "").startswith("store statement failed (the "
                                    "schema is missing") for l in p.log_lines()))
    assert helpers.poll(lambda: any("idemproxy migrate" in l.get("msg", "")
                                    and l["level"] == "warn" for l in p.log_lines()))

    r = run(binary, "migrate", "-c", conf)
    assert r.returncode == 0, r
    r = run(binary, "migrate", "status", "-c", conf)
    assert r.returncode == 0, r
    assert [l.split()[1] for l in r.stdout.splitlines() if l.startswith("applied")] \
        == MIGRATIONS, r.stdout
    assert "up to date" in r.stdout
    assert helpers.poll(lambda: readyz(p).status == 200)

    # The index migration ran outside a transaction (CONCURRENTLY): valid indexes.
    rows = sql(fresh_db, "SELECT c.relname, i.indisvalid FROM pg_index i JOIN pg_class c"
               " ON c.oid = i.indexrelid WHERE c.relname IN"
               " ('idempotency_records_lease_idx', 'idempotency_records_unknown_idx')")
    assert sorted(rows) == [("idempotency_records_lease_idx", True),
                            ("idempotency_records_unknown_idx", True)], rows


def test_readyz_names_pending_migrations(binary, proxy, fresh_db, tmp_path, upstream, ids):
    """A database one migration behind this binary: not ready, the reason
    and `migrate status` name that migration; keyed requests are not
    served by a half-migrated schema as if all were well."""
    conf = write_conf(tmp_path, fresh_db)
    assert run(binary, "migrate", "-c", conf).returncode == 0
    last = MIGRATIONS[-1]
    sql(fresh_db, "DELETE FROM idemproxy_migrations WHERE name = %s", (last,))
    r = run(binary, "migrate", "status", "-c", conf)
    assert r.returncode == 1, r
    assert "pending  %s" % last in r.stdout and "1 pending" in r.stdout, r.stdout

    p = admin_proxy(proxy, database=fresh_db, wait_store=True)
    not_ready(readyz_says(p, "pending"), "1 migration pending (%s)" % last)
    # Recorded again (as migrate would after applying it): ready.
    sql(fresh_db, "INSERT INTO idemproxy_migrations (version, name) VALUES (%s, %s)",
        (int(last[:3]), last))
    assert helpers.poll(lambda: readyz(p).status == 200)
    assert run(binary, "migrate", "status", "-c", conf).returncode == 0


def ready_gauge(p):
    """idemproxy_ready in one scrape of p (no /readyz asked)."""
    return metrics(p).get("idemproxy_ready")


def test_ready_gauge_follows_readiness(binary, proxy, fresh_db, tmp_path, upstream):
    """idemproxy_ready without any /readyz probe: the scrapes' own checks
    keep it 0 while the schema is missing and make it 1 once it is migrated;
    it is 0 with a store that cannot be reached."""
    conf = write_conf(tmp_path, fresh_db)
    p = admin_proxy(proxy, database=fresh_db, wait_store=True)
    assert poll_metrics(p, lambda m: m.get("idemproxy_store_connections") == WORKERS)
    # A scrape's check has found the schema missing: its hint is in the log.
    assert helpers.poll(lambda: ready_gauge(p) == 0 and any(
        "the schema is missing" in l.get("msg", "") and "idemproxy migrate" in l["msg"]
        for l in p.log_lines()))
    for _ in range(SCRAPES_NOT_READY):
        assert ready_gauge(p) == 0
    assert run(binary, "migrate", "-c", conf).returncode == 0
    assert poll_metrics(p, lambda m: m.get("idemproxy_ready") == 1), metrics(p).text
    assert readyz(p).status == 200

    down = admin_proxy(proxy, database="host=127.0.0.1 port=%d connect_timeout=1"
                       % helpers.free_port())
    for _ in range(SCRAPES_NOT_READY):
        assert ready_gauge(down) == 0
    not_ready(readyz(down), "the store is unreachable")


def test_migrate_status_reports_an_unreachable_database(binary, tmp_path):
    conf = write_conf(tmp_path, "host=127.0.0.1 port=%d connect_timeout=1" % helpers.free_port())
    r = run(binary, "migrate", "status", "-c", conf)
    assert r.returncode == 1, r
    assert r.stderr.startswith("migrate: cannot connect to the database"), r.stderr


def test_readyz_fails_while_draining(proxy, upstream, ids):
    """From SIGTERM on the instance is not ready, while the owner in flight
    still finishes and is recorded; liveness stays 200 meanwhile."""
    p = admin_proxy(proxy, {"shutdown_timeout": "10s", "upstream_timeout": "5s"})
    assert helpers.poll(lambda: readyz(p).status == 200)
    key = ids.key()
    with SlowOwner(p, upstream, "/api/courses", key, ids.actor, 2.0) as owner:
        time.sleep(0.3)
        p.signal(signal.SIGTERM)
        assert helpers.poll(lambda: readyz(p).status == 503, 3.0)
        not_ready(readyz(p), "draining")
        assert admin(p, "GET", "/healthz").status == 200
    assert_owner(owner.response)
    assert p.proc.wait(10) == 0
    assert upstream.count(actor=ids.actor) == 1


def test_readyz_reason_for_a_store_that_cannot_be_reached(proxy):
    down = admin_proxy(proxy, database="host=127.0.0.1 port=%d connect_timeout=1"
                       % helpers.free_port())
    not_ready(readyz(down), "the store is unreachable")


# ---- refusals at the HTTP layer ----

def refused_lines(p):
    return [l for l in p.log_lines() if l.get("msg") == "request"
            and l.get("outcome") == "rejected" and "route" not in l]


def test_http_layer_refusals_are_logged_and_counted(proxy, upstream):
    """400 (CL+TE smuggling), 408, 413, 414 and 431 made by idemproxy itself
    each get an access line and a count; nothing reaches the upstream."""
    p = admin_proxy(proxy, {"client_timeout": "500ms", "max_request_body": "1k"})
    m0 = metrics(p)
    for s in REFUSAL_STATUSES:
        assert m0.get("idemproxy_http_refusals_total", status=s) == 0, m0.text
    assert m0.get("idemproxy_requests_total", route="", outcome="rejected") == 0

    sent = {
        "400": b"POST /api/courses HTTP/1.1\r\nHost: t\r\nContent-Length: 4\r\n"
               b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        # Refused from its head: the body is never sent.
        "413": b"POST /api/courses HTTP/1.1\r\nHost: t\r\nIdempotency-Key: k\r\n"
               b"X-Actor-Id: a\r\nContent-Type: application/json\r\n"
               b"Content-Length: 4096\r\n\r\n",
        "414": b"GET /" + b"a" * HEAD_LIMIT + b" HTTP/1.1\r\nHost: t\r\n\r\n",
        "431": b"GET / HTTP/1.1\r\nHost: t\r\n" +
               b"".join(b"X-H%d: v\r\n" % i for i in range(MAX_HEADERS + 1)) + b"\r\n",
        "408": b"GET / HTTP/1.1\r\nHost: t\r\n",     # never finished
    }
    for status, data in sent.items():
        resp, closed = helpers.raw_exchange(p.port, data)
        assert resp.status == int(status) and closed, (status, resp)
    assert upstream.count() == 0

    def counted(m):
        return all(m.get("idemproxy_http_refusals_total", status=s) == 1 for s in sent) and \
            m.get("idemproxy_requests_total", route="", outcome="rejected") == len(sent)
    m = poll_metrics(p, counted)
    assert m, metrics(p).text
    assert m.get("idemproxy_request_duration_seconds_count", route="",
                 outcome="rejected") == len(sent)

    assert helpers.poll(lambda: len(refused_lines(p)) == len(sent))
    lines = refused_lines(p)
    assert sorted(str(l["status"]) for l in lines) == sorted(sent), lines
    for l in lines:
        assert l["request_id"] and l["seq"] > 0 and 0 <= l["duration_us"] < 60_000_000, l
        assert l["upstream_us"] == 0 and l["store_us"] == 0, l
    # The head of the 413 was read: its line names the request.
    big = [l for l in lines if l["status"] == 413][0]
    assert big["method"] == "POST" and big["path"] == "/api/courses", big
    timed_out = [l for l in lines if l["status"] == 408][0]
    assert timed_out["duration_us"] >= 400_000, timed_out


def test_uri_too_long_is_414_problem(proxy, upstream):
    p = proxy()
    r = p.request("GET", "/" + "a" * HEAD_LIMIT)
    problem(r, "uri-too-long", 414)
    assert upstream.count() == 0


# ---- metrics ----

class Family:
    def __init__(self, name, kind, help_text):
        self.name, self.kind, self.help, self.samples = name, kind, help_text, []


SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{([^}]*)\})? (-?[0-9.e+-]+|\+Inf|NaN)$')
LABEL = re.compile(r'^([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"$')


def parse_strictly(text):
    """The Prometheus text format as a strict reader takes it: HELP then
    TYPE once per family, before its samples; samples only of the family
    just declared; counters named *_total; histograms as _bucket (with le,
    cumulative, ending at +Inf), _sum and _count; no series twice."""
    families, cur, seen = {}, None, set()
    lines = text.splitlines()
    assert text.endswith("\n")
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("# HELP "):
            _, _, name, help_text = line.split(" ", 3)
            assert name not in families, "family %s declared twice" % name
            assert help_text.strip(), name
            nxt = lines[i + 1]
            assert nxt.startswith("# TYPE %s " % name), (line, nxt)
            kind = nxt.split(" ")[3]
            assert kind in ("counter", "gauge", "histogram"), nxt
            if kind == "counter":
                assert name.endswith("_total"), name
            cur = families[name] = Family(name, kind, help_text)
            i += 2
            continue
        assert not line.startswith("#"), line
        m = SAMPLE.match(line)
        assert m, "not a sample: %r" % line
        name, labels_text, value = m.groups()
        labels = {}
        if labels_text:
            for part in labels_text.split(","):
                lm = LABEL.match(part)
                assert lm, line
                labels[lm.group(1)] = lm.group(2)
        assert cur is not None, line
        if cur.kind == "histogram":
            suffix = name[len(cur.name):]
            assert name.startswith(cur.name) and suffix in ("_bucket", "_sum", "_count"), line
            assert ("le" in labels) == (suffix == "_bucket"), line
        else:
            assert name == cur.name, "sample %s under family %s" % (name, cur.name)
        key = (name, tuple(sorted(labels.items())))
        assert key not in seen, "series twice: %s" % line
        seen.add(key)
        cur.samples.append((name, labels, float(value)))
        i += 1
    for f in families.values():
        assert f.samples, "family %s has no sample" % f.name
        if f.kind == "histogram":
            check_buckets(f)
    return families


def check_buckets(f):
    series = {}
    for name, labels, v in f.samples:
        rest = tuple(sorted((k, x) for k, x in labels.items() if k != "le"))
        series.setdefault(rest, {"buckets": []})
        if name.endswith("_bucket"):
            series[rest]["buckets"].append((labels["le"], v))
        else:
            series[rest][name[len(f.name):]] = v
    for rest, s in series.items():
        bounds = [b for b, _ in s["buckets"]]
        assert bounds[-1] == "+Inf", (f.name, rest)
        counts = [c for _, c in s["buckets"]]
        assert counts == sorted(counts), (f.name, rest, counts)
        assert s["_count"] == counts[-1] and s["_sum"] >= 0, (f.name, rest)


def test_every_series_is_there_from_the_start(binary, proxy):
    """A fresh instance, before any request: every family docs/operations.md
    ("Metrics and dashboard") names, with all its known series at 0, the build info at 1, and every metric
    the Grafana dashboard queries."""
    p = admin_proxy(proxy)
    r = admin(p, "GET", "/metrics")
    assert r.status == 200
    fams = parse_strictly(r.body.decode())
    version = run(binary, "--version").stdout.split()[1]
    assert fams["idemproxy_build_info"].samples == [
        ("idemproxy_build_info", {"version": version}, 1.0)]

    req = {(l["route"], l["outcome"]) for _, l, _ in fams["idemproxy_requests_total"].samples}
    for o in ALL_OUTCOMES:
        assert (OPERATION, o) in req, (o, req)
    assert ("", "pass") in req and ("", "rejected") in req
    assert all(v == 0 for _, _, v in fams["idemproxy_requests_total"].samples)
    dur = {(l["route"], l["outcome"]) for n, l, _ in
           fams["idemproxy_request_duration_seconds"].samples if n.endswith("_count")}
    assert dur == req
    assert {l["status"] for _, l, _ in fams["idemproxy_http_refusals_total"].samples} \
        == set(REFUSAL_STATUSES)
    assert {l["state"] for _, l, _ in fams["idemproxy_records_needing_operator"].samples} \
        == {"in_progress_expired", "unknown"}
    assert {l["source"] for _, l, _ in fams["idemproxy_replays_total"].samples} \
        == {"store", "cache"}
    assert sorted((l["reason"], v) for _, l, v in fams["idemproxy_refusals_total"].samples) \
        == [("actor_max_owners", 0), ("actor_max_records", 0), ("actor_max_stored_bytes", 0),
            ("expired_key", 0), ("max_owners", 0)]
    assert fams["idemproxy_owners_active"].samples == [("idemproxy_owners_active", {}, 0)]
    for name in ("idemproxy_claims_total", "idemproxy_conflicts_total",
                 "idemproxy_replay_cache_hits_total", "idemproxy_replay_cache_misses_total",
                 "idemproxy_replay_cache_entries", "idemproxy_replay_cache_bytes",
                 "idemproxy_store_seconds", "idemproxy_upstream_seconds",
                 "idemproxy_client_connections", "idemproxy_upstream_connections",
                 "idemproxy_store_connections", "idemproxy_ready",
                 "process_cpu_seconds_total", "process_resident_memory_bytes",
                 "process_virtual_memory_bytes", "process_start_time_seconds",
                 "process_open_fds", "process_max_fds"):
        assert name in fams, name
    assert fams["idemproxy_client_connections_limit"].samples[0][2] == 8000
    assert fams["idemproxy_replay_cache_bytes_limit"].samples[0][2] > 0
    assert fams["idemproxy_relay_budget_bytes"].samples == [("idemproxy_relay_budget_bytes", {}, 0)]
    assert fams["idemproxy_relay_budget_bytes_limit"].samples[0][2] == 256 << 20
    assert sorted((l["limit"], v) for _, l, v in
                  fams["idemproxy_relay_budget_pauses_total"].samples) \
        == [("peer", 0), ("process", 0)]
    missing = set(DASHBOARD_METRICS) - set(fams)
    assert not missing, "the dashboard queries metrics /metrics lacks: %s" % missing


def test_metrics_follow_claims_replays_and_the_cache(proxy, upstream, ids):
    """One owner, a replay from the store, replays from the cache and a
    conflict: each counter moves by exactly what happened."""
    # One worker: its cache has the owner's record, so every retry is
    # answered from it (with two, a retry may land on the other's).
    p = admin_proxy(proxy, {"workers": "1"})
    key = ids.key()
    assert_owner(p.post("/api/courses", key=key, actor=ids.actor, body=course()))
    for _ in range(3):
        assert p.post("/api/courses", key=key, actor=ids.actor, body=course()).status == 201
    problem(p.post("/api/courses", key=key, actor=ids.actor, body=course(title="x")),
            "idempotency-conflict", 422)
    assert upstream.count(actor=ids.actor) == 1

    def moved(m):
        return m.get("idemproxy_replays_total", source="cache") == 3 and \
            m.get("idemproxy_replays_total", source="store") == 0 and \
            m.get("idemproxy_conflicts_total") == 1 and \
            m.get("idemproxy_replay_cache_hits_total") == 4 and \
            m.get("idemproxy_replay_cache_entries") == 1 and \
            m.get("idemproxy_replay_cache_bytes") > 0
    m = poll_metrics(p, moved)
    assert m, metrics(p).text
    # Only the owner's claim reached the store.
    assert m.get("idemproxy_claims_total") == 1
    assert m.get("idemproxy_request_duration_seconds_count", route=OPERATION,
                 outcome="owner") == 1


def test_records_needing_an_operator_gauge(proxy, upstream, ids):
    """An unknown record shows in the gauge the sweeper refreshes."""
    p = admin_proxy(proxy, {"sweep_interval": "100ms"})
    r = p.post("/api/courses", key=ids.key(), actor=ids.actor, body=course(),
               headers=[("X-Test-Action", "reset")])
    problem(r, "upstream-error", 502)
    assert upstream.count(actor=ids.actor) == 1
    m = poll_metrics(p, lambda m: m.get("idemproxy_records_needing_operator",
                                        state="unknown") >= 1)
    assert m, metrics(p).text


# ---- the admin listener's methods ----

def test_admin_head_and_method_not_allowed(proxy):
    p = admin_proxy(proxy)
    assert helpers.poll(lambda: readyz(p).status == 200)
    for path in ("/healthz", "/readyz", "/metrics"):
        got = admin(p, "GET", path)
        head = admin(p, "HEAD", path)
        assert head.status == got.status == 200, (path, head)
        assert head.body == b"", (path, head)
        assert head.headers.get("Content-Type") == got.headers.get("Content-Type"), path
        for method in ("POST", "DELETE", "PUT", "PATCH", "OPTIONS"):
            r = admin(p, method, path, body=b"")
            assert r.status == 405, (method, path, r)
            assert r.headers.get("Allow") == "GET, HEAD", r
            assert r.json()["error"], r
    for path in ("/records/release", "/records/resolve"):
        for method in ("GET", "HEAD", "DELETE"):
            r = admin(p, method, path, body=b"" if method == "DELETE" else None)
            assert r.status == 405 and r.headers.get("Allow") == "POST", (method, path, r)
    assert admin(p, "DELETE", "/nothing", body=b"").status == 404


# ---- the notify protocol ----

def notify_socket(tmp_path, abstract):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    if abstract:
        name = "idemproxy-test-" + uuid.uuid4().hex
        s.bind("\0" + name)
        env = "@" + name
    else:
        env = str(tmp_path / ("notify-%s.sock" % uuid.uuid4().hex[:8]))
        s.bind(env)
    s.settimeout(NOTIFY_WAIT)
    return s, env


def messages(sock, n):
    got = []
    for _ in range(n):
        got.append(dict(l.split("=", 1) for l in sock.recv(4096).decode().split("\n")))
    return got


@pytest.mark.parametrize("abstract", [False, True], ids=["path", "abstract"])
def test_notify_ready_reloading_stopping(proxy, tmp_path, abstract):
    """READY=1 once listening; RELOADING=1 (with MONOTONIC_USEC) then READY=1
    around SIGHUP; STOPPING=1 on SIGTERM; nothing else."""
    sock, env = notify_socket(tmp_path, abstract)
    try:
        p = proxy(start=False)
        p.env = {"NOTIFY_SOCKET": env}
        p.start()
        assert messages(sock, 1) == [{"READY": "1"}]
        assert helpers.port_open(p.port)
        before = time.clock_gettime(time.CLOCK_MONOTONIC) * 1e6
        p.signal(signal.SIGHUP)
        reloading, ready = messages(sock, 2)
        assert reloading["RELOADING"] == "1", reloading
        assert abs(int(reloading["MONOTONIC_USEC"]) - before) < 10e6, reloading
        assert ready == {"READY": "1"}
        assert helpers.poll(lambda: "configuration reloaded" in p.stderr_text())
        p.signal(signal.SIGTERM)
        assert messages(sock, 1) == [{"STOPPING": "1"}]
        assert p.proc.wait(10) == 0
        sock.settimeout(0.2)
        with pytest.raises(socket.timeout):
            sock.recv(4096)
    finally:
        sock.close()


# ---- the command line ----

def test_check_warns_about_a_file_without_routes(binary, tmp_path):
    conf = write_conf(tmp_path, "host=/nonexistent")
    r = run(binary, "-t", "-c", conf)
    assert r.returncode == 0, r
    assert "configuration ok" in r.stdout
    assert r.stderr == "%s: warning: no route: every request is relayed as it is and " \
                       "nothing is intercepted\n" % conf, r.stderr


def test_unknown_options_are_named(binary):
    r = run(binary, "--bogus")
    assert r.returncode == 2 and r.stderr.startswith("idemproxy: unknown option --bogus\n"), r
    r = run(binary, "-x")
    assert r.returncode == 2 and r.stderr.startswith("idemproxy: unknown option -x\n"), r
    r = run(binary, "-c")
    assert r.returncode == 2 and "-c needs a file name" in r.stderr, r
    assert "usage:" in run(binary, "--bogus").stderr


def test_records_show_hints_at_the_stored_actor(binary, proxy, pg, upstream, ids):
    p = proxy()
    key = ids.key()
    assert_owner(p.post("/api/courses", key=key, actor=ids.actor, body=course()))
    r = run(binary, "records", "-c", p.conf, "show", ids.actor, OPERATION, key)
    assert r.returncode == 1, r
    assert '"h:%s"' % ids.actor in r.stderr, r.stderr
    r = run(binary, "records", "-c", p.conf, "show", "h:" + ids.actor, OPERATION, key)
    assert r.returncode == 0, r
    assert upstream.count(actor=ids.actor) == 1


def soft_nofile(pid):
    with open("/proc/%d/limits" % pid) as f:
        for line in f:
            if line.startswith("Max open files"):
                return int(line.split()[3])
    return None


def test_default_connections_fit_a_hard_limit_of_20000(proxy):
    """max_connections and workers at their defaults' need (2 x 8000 + 72
    per worker + 32) under a hard limit of 20000: the soft limit is raised
    to the hard limit and nothing is said about descriptors."""
    p = proxy(start=False)
    p.prefix = ["prlimit", "--nofile=1024:20000", "--"]
    p.start()
    assert soft_nofile(p.proc.pid) == 20000
    assert "descriptor limit" not in p.stderr_text()


def test_connections_that_cannot_fit_the_hard_limit_are_warned_of(proxy):
    p = proxy({"max_connections": "100000"}, start=False)
    p.prefix = ["prlimit", "--nofile=1024:20000", "--"]
    p.start()
    assert soft_nofile(p.proc.pid) == 20000
    assert ("the descriptor limit (20000) is below the %d that max_connections 100000 with "
            "2 workers may need" % (200000 + 2 * 72 + 32)) in p.stderr_text()


def test_the_example_configuration_leaves_connections_and_workers_at_their_defaults():
    """What the test above starts with is what the example starts with."""
    text = open(os.path.join(helpers.ROOT, "idemproxy.conf.example")).read()
    assert not re.search(r"^\s*(max_connections|workers)\s", text, re.M)
