"""The admin listener: liveness and readiness, the Prometheus metrics, the
records API over HTTP (the CLI's twin is test_records.py) and the sweeper
under its advisory lock. Every idempotency test counts upstream effects
exactly."""
import os
import time
import urllib.parse

from tests.lib import helpers
from tests.lib.admin import (ALL_OUTCOMES, OPERATION, admin, admin_proxy, metrics, poll_metrics,
                             scope)
from tests.lib.helpers import SlowOwner, assert_owner, assert_replay_of, course, problem
from tests.lib.records import make_unknown

OWNER_DELAY = 1.5       # seconds the upstream holds a SlowOwner (< upstream_timeout)
WORKERS = 2             # the base configuration's `workers`
SWEEP_INTERVAL = "100ms"
SWEEP_LOCK_KEY = 7594869612733442170    # the sweeper's advisory lock (sweeper.c)
SWEEPS_WHILE_LOCKED = 3
LIST_LIMIT = 1000
JSON_CTYPE = "application/json"
# The latency buckets' upper bounds in seconds, +Inf aside: up to 60 s, past
# upstream_timeout's 30 s default.
BUCKET_BOUNDS = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10,
                 30, 60]
START_SLACK = 2.0       # seconds: process_start_time_seconds has the kernel's boot time, whole seconds
FD_SLACK = 2            # descriptors a scrape opens itself: its connection, /proc/self/fd


def admin_json(resp, status):
    """resp is JSON with status; returns the document."""
    assert resp.status == status, resp
    ctype = (resp.headers.get("Content-Type") or "").split(";")[0].strip().lower()
    assert ctype == JSON_CTYPE, resp
    return resp.json()


# ---- Prometheus text ----

def check_histogram(m, name, at_least):
    """name is a histogram of at least at_least observations whose
    cumulative buckets never decrease and end with +Inf == _count."""
    assert m.types.get(name) == "histogram", m.types
    buckets = m.all(name + "_bucket")
    assert len(buckets) >= 2, m.text
    bounds = [lab["le"] for lab, _ in buckets]
    assert bounds[-1] == "+Inf", bounds
    finite = [float(b) for b in bounds[:-1]]
    assert finite == sorted(finite) and len(set(finite)) == len(finite), bounds
    assert finite == BUCKET_BOUNDS, bounds
    counts = [v for _, v in buckets]
    assert all(a <= b for a, b in zip(counts, counts[1:])), (name, counts)
    count = m.get(name + "_count")
    assert count is not None and counts[-1] == count, (name, counts, count)
    assert count >= at_least, (name, count, at_least)
    assert m.get(name + "_sum") is not None and m.get(name + "_sum") >= 0, m.text


# ---- records ----

def not_stuck(resp, state):
    doc = admin_json(resp, 409)
    assert doc["error"] == "record is not stuck", doc
    assert doc["record"]["state"] == state, doc
    return doc


def no_such_record(resp):
    assert admin_json(resp, 404) == {"error": "no such record"}


def bad_request(resp):
    doc = admin_json(resp, 400)
    assert isinstance(doc.get("error"), str) and doc["error"], doc
    return doc


# ---- tests ----

def test_healthz_and_unknown_endpoints(proxy):
    p = admin_proxy(proxy)
    r = admin(p, "GET", "/healthz")
    assert r.status == 200 and r.body.strip() == b"ok", r
    assert (r.headers.get("Content-Type") or "").startswith("text/plain"), r

    doc = admin_json(admin(p, "GET", "/no/such/thing"), 404)
    assert isinstance(doc.get("error"), str) and doc["error"], doc
    admin_json(admin(p, "GET", "/healthz/extra"), 404)

    # Wrong methods never act: not a 200, and no release by GET.
    for method, path in (("DELETE", "/healthz"), ("POST", "/metrics"), ("PUT", "/readyz"),
                         ("POST", "/healthz"), ("GET", "/records/release"),
                         ("GET", "/records/resolve")):
        r = admin(p, method, path, body=b"" if method != "GET" else None)
        assert r.status != 200 and r.status >= 400, (method, path, r)
    # The listener still serves after them.
    assert admin(p, "GET", "/healthz").status == 200


def test_readyz_follows_the_store(proxy):
    """Ready once every worker's store connection is up (a moment after
    start) and the server takes writes; never while it cannot be reached."""
    p = admin_proxy(proxy)
    assert helpers.poll(lambda: admin(p, "GET", "/readyz").status == 200)

    down = admin_proxy(proxy, database="host=127.0.0.1 port=%d connect_timeout=1"
                       % helpers.free_port())
    for _ in range(3):
        r = admin(down, "GET", "/readyz")
        assert r.status == 503, r
        r = admin(down, "GET", "/healthz")
        assert r.status == 200 and r.body.strip() == b"ok", r
    assert metrics(down).get("idemproxy_store_connections") == 0
    # The healthy instance is unaffected.
    assert admin(p, "GET", "/readyz").status == 200


def test_metrics_count_outcomes(proxy, upstream, ids):
    p = admin_proxy(proxy, {"sweep_interval": SWEEP_INTERVAL})
    key = ids.key()
    with SlowOwner(p, upstream, "/api/courses", key, ids.actor, OWNER_DELAY) as owner:
        problem(p.post("/api/courses", key=key, actor=ids.actor, body=course()),
                "operation-in-progress", 409)
    assert_owner(owner.response)
    assert_replay_of(p.post("/api/courses", key=key, actor=ids.actor, body=course()),
                     owner.response)
    problem(p.post("/api/courses", key=key, actor=ids.actor, body=course(title="Other")),
            "idempotency-conflict", 422)
    problem(p.post("/api/courses", actor=ids.actor, body=course()),
            "idempotency-key-missing", 400)
    r = p.request("GET", "/api/courses?page=1", [("X-Actor-Id", ids.actor)])
    assert r.status == 200, r
    assert upstream.count(actor=ids.actor, method="POST") == 1
    assert upstream.count(actor=ids.actor, method="GET") == 1

    want = {"owner": 1, "replay": 1, "conflict": 1, "in_progress": 1, "rejected": 1}

    def counted(m):
        got = {lab["outcome"]: v for lab, v in m.all("idemproxy_requests_total")
               if lab.get("route") == OPERATION}
        # Every outcome has its series; those that did not happen are at 0.
        assert set(got) == set(ALL_OUTCOMES), got
        return {o: v for o, v in got.items() if v} == want and m.get("idemproxy_requests_total", 0, route="",
                                     outcome="pass") >= 1
    m = poll_metrics(p, counted)
    assert m, metrics(p).text
    assert m.types.get("idemproxy_requests_total") == "counter", m.types

    # Store: the owner's claim and finish, the duplicate's claim. Upstream:
    # the owner and the pass-through GET.
    check_histogram(m, "idemproxy_store_seconds", 3)
    check_histogram(m, "idemproxy_upstream_seconds", 2)

    m = poll_metrics(p, lambda x: x.get("idemproxy_store_connections") == WORKERS)
    assert m, metrics(p).text
    assert m.types.get("idemproxy_store_connections") == "gauge", m.types

    runs = metrics(p).get("idemproxy_sweeper_runs_total")
    assert runs is not None, m.text
    assert helpers.poll(lambda: metrics(p).get("idemproxy_sweeper_runs_total") >= runs + 3), \
        metrics(p).text
    assert upstream.count(actor=ids.actor) == 2


def proc_limits_soft_nofile(pid):
    with open("/proc/%d/limits" % pid) as f:
        for line in f:
            if line.startswith("Max open files"):
                soft = line.split()[3]
                return float("inf") if soft == "unlimited" else int(soft)
    raise AssertionError("no Max open files in /proc/%d/limits" % pid)


def proc_rss_bytes(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS in /proc/%d/status" % pid)


def test_process_metrics(proxy, upstream, ids):
    """The process collector's families, against what the test reads of the
    same process in procfs: descriptors, their limit, memory, start time,
    CPU time that only grows."""
    before = time.time()
    p = admin_proxy(proxy)
    started = time.time()
    pid = p.proc.pid
    assert_owner(p.post("/api/courses", key=ids.key(), actor=ids.actor, body=course()))
    fds_before = len(os.listdir("/proc/%d/fd" % pid))
    m = metrics(p)
    fds_after = len(os.listdir("/proc/%d/fd" % pid))
    for name, kind in (("process_cpu_seconds_total", "counter"),
                       ("process_resident_memory_bytes", "gauge"),
                       ("process_virtual_memory_bytes", "gauge"),
                       ("process_start_time_seconds", "gauge"),
                       ("process_open_fds", "gauge"), ("process_max_fds", "gauge")):
        assert m.types.get(name) == kind, (name, m.types.get(name))
        assert len(m.all(name)) == 1 and m.all(name)[0][0] == {}, m.all(name)
    fds = m.get("process_open_fds")
    assert min(fds_before, fds_after) <= fds <= max(fds_before, fds_after) + FD_SLACK, \
        (fds, fds_before, fds_after)
    assert m.get("process_max_fds") == proc_limits_soft_nofile(pid)
    rss = m.get("process_resident_memory_bytes")
    assert 0 < rss / proc_rss_bytes(pid) < 2 and proc_rss_bytes(pid) / rss < 2, rss
    assert m.get("process_virtual_memory_bytes") >= rss
    assert before - START_SLACK <= m.get("process_start_time_seconds") <= started + START_SLACK
    cpu = m.get("process_cpu_seconds_total")
    assert 0 <= cpu <= (time.time() - before) * os.cpu_count() + 0.01, cpu
    assert_owner(p.post("/api/courses", key=ids.key(), actor=ids.actor, body=course()))
    assert metrics(p).get("process_cpu_seconds_total") >= cpu
    assert upstream.count(actor=ids.actor) == 2


def test_records_release_over_http(proxy, upstream, ids):
    p = admin_proxy(proxy)
    # A key that needs URL-encoding in the query.
    key = ids.key() + "+&=%/?#"
    make_unknown(p, ids, key)
    assert upstream.count(actor=ids.actor) == 1

    doc = admin_json(admin(p, "GET", "/records", {"limit": LIST_LIMIT}), 200)
    assert doc["count"] == len(doc["records"]), doc
    mine = [rec for rec in doc["records"] if rec["actor"] == "h:" + ids.actor]
    assert [(rec["key"], rec["state"], rec["operation"]) for rec in mine] == \
        [(key, "unknown", OPERATION)], mine

    rec = admin_json(admin(p, "GET", "/records/scope", scope(ids.actor, key)), 200)["record"]
    assert rec["state"] == "unknown" and rec["key"] == key, rec
    assert rec["actor"] == "h:" + ids.actor and rec["operation"] == OPERATION, rec
    problem(p.post("/api/courses", key=key, actor=ids.actor, body=course()),
            "outcome-unknown", 409)
    assert upstream.count(actor=ids.actor) == 1

    doc = admin_json(admin(p, "POST", "/records/release", scope(ids.actor, key), body=b""), 200)
    assert doc["released"]["key"] == key and doc["released"]["state"] == "unknown", doc
    no_such_record(admin(p, "GET", "/records/scope", scope(ids.actor, key)))
    doc = admin_json(admin(p, "GET", "/records", {"limit": LIST_LIMIT}), 200)
    assert [rec for rec in doc["records"] if rec["actor"] == "h:" + ids.actor] == [], doc

    again = p.post("/api/courses", key=key, actor=ids.actor, body=course())
    assert_owner(again)
    assert upstream.count(actor=ids.actor) == 2
    assert_replay_of(p.post("/api/courses", key=key, actor=ids.actor, body=course()), again)
    assert upstream.count(actor=ids.actor) == 2
    not_stuck(admin(p, "POST", "/records/release", scope(ids.actor, key), body=b""),
              "completed")


def test_records_resolve_over_http(proxy, upstream, ids):
    p = admin_proxy(proxy)
    key = ids.key()
    make_unknown(p, ids, key)
    body = b'{"id":"manual"}'

    r = admin(p, "POST", "/records/resolve", scope(ids.actor, key, status=201), body=body,
              headers=[("Content-Type", JSON_CTYPE)])
    rec = admin_json(r, 200)["resolved"]
    assert rec["state"] == "completed" and rec["status"] == 201, rec
    assert rec["body"] == body.decode() and rec["body_encoding"] == "utf-8", rec
    assert rec["headers"] == "Content-Type: application/json\r\n", rec
    assert rec["lease_owner"] is None, rec

    for _ in range(2):
        again = p.post("/api/courses", key=key, actor=ids.actor, body=course())
        assert again.status == 201, again
        assert (again.headers.get("Idempotent-Replayed") or "").lower() == "true", again
        assert again.headers.get("Content-Type") == JSON_CTYPE, again
        assert again.body == body, again
    assert upstream.count(actor=ids.actor) == 1

    rec = admin_json(admin(p, "GET", "/records/scope", scope(ids.actor, key)), 200)["record"]
    assert rec["state"] == "completed" and rec["status"] == 201, rec
    not_stuck(admin(p, "POST", "/records/release", scope(ids.actor, key), body=b""),
              "completed")
    not_stuck(admin(p, "POST", "/records/resolve", scope(ids.actor, key, status=200),
                    body=b"other"), "completed")
    again = p.post("/api/courses", key=key, actor=ids.actor, body=course())
    assert again.status == 201 and again.body == body, again
    assert upstream.count(actor=ids.actor) == 1


def test_records_live_and_completed_are_refused(proxy, upstream, ids):
    p = admin_proxy(proxy)
    key = ids.key()
    with SlowOwner(p, upstream, "/api/courses", key, ids.actor, OWNER_DELAY) as owner:
        doc = not_stuck(admin(p, "POST", "/records/release", scope(ids.actor, key), body=b""),
                        "in_progress")
        assert doc["record"]["lease_expired"] is False, doc
        not_stuck(admin(p, "POST", "/records/resolve", scope(ids.actor, key, status=201),
                        body=b"{}", headers=[("Content-Type", JSON_CTYPE)]), "in_progress")
    assert_owner(owner.response)
    not_stuck(admin(p, "POST", "/records/release", scope(ids.actor, key), body=b""),
              "completed")
    not_stuck(admin(p, "POST", "/records/resolve", scope(ids.actor, key, status=201),
                    body=b"{}"), "completed")
    assert_replay_of(p.post("/api/courses", key=key, actor=ids.actor, body=course()),
                     owner.response)
    assert upstream.count(actor=ids.actor) == 1


def test_records_missing_scope_and_bad_requests(proxy, upstream, ids):
    p = admin_proxy(proxy)
    missing = scope(ids.actor, ids.key())
    no_such_record(admin(p, "GET", "/records/scope", missing))
    no_such_record(admin(p, "POST", "/records/release", missing, body=b""))
    no_such_record(admin(p, "POST", "/records/resolve", dict(missing, status=201), body=b""))

    # Bad calls against a stuck record leave it as it is.
    key = ids.key()
    make_unknown(p, ids, key)
    here = scope(ids.actor, key)
    for status in ("abc", "700", "201x", "", "-201"):
        r = admin(p, "POST", "/records/resolve", dict(here, status=status), body=b"{}")
        assert r.status == 400, (status, r)
        bad_request(r)
    bad_request(admin(p, "POST", "/records/resolve", here, body=b"{}"))
    bad_request(admin(p, "POST", "/records/resolve", dict(here, status=201, retention="soon"),
                      body=b"{}"))
    no_actor = {"operation": OPERATION, "key": key}
    bad_request(admin(p, "GET", "/records/scope", no_actor))
    bad_request(admin(p, "POST", "/records/release", no_actor, body=b""))
    bad_request(admin(p, "POST", "/records/resolve", dict(no_actor, status=201), body=b""))
    bad_request(admin(p, "POST", "/records/release", {"actor": "h:" + ids.actor, "key": key},
                      body=b""))
    for limit in ("0", "-1", "x", "1001"):
        bad_request(admin(p, "GET", "/records", {"limit": limit}))
    # A parameter the call does not take, or one given twice, is a mistake
    # (a typo would otherwise act on another scope or on none).
    for bad in ("/records/release?actor=a&actor=b&operation=o&key=k",
                "/records/release?" + urllib.parse.urlencode(dict(here, actr="x")),
                "/records/release?" + urllib.parse.urlencode(dict(here, limit="3")),
                "/records?limit=5&key=k", "/records?limit=5&limit=6"):
        method = "GET" if bad.startswith("/records?") else "POST"
        r = admin(p, method, bad, body=b"" if method == "POST" else None)
        assert r.status == 400, (bad, r)
        bad_request(r)

    rec = admin_json(admin(p, "GET", "/records/scope", here), 200)["record"]
    assert rec["state"] == "unknown", rec
    problem(p.post("/api/courses", key=key, actor=ids.actor, body=course()),
            "outcome-unknown", 409)
    assert upstream.count(actor=ids.actor) == 1


def test_records_out_of_range_numbers_are_rejected(proxy, upstream, ids):
    """Numbers that do not fit an int are refused, not wrapped: status
    4294967497 must not become 201, limit 4294967297 must not become 1."""
    p = admin_proxy(proxy)
    key = ids.key()
    make_unknown(p, ids, key)
    here = scope(ids.actor, key)
    for status in ("4294967497", "18446744073709551817", "99999999999999999999999"):
        r = admin(p, "POST", "/records/resolve", dict(here, status=status), body=b"{}")
        assert r.status == 400, (status, r)
        bad_request(r)
    for limit in ("4294967297", "99999999999999999999999"):
        r = admin(p, "GET", "/records", {"limit": limit})
        assert r.status == 400, (limit, r)
        bad_request(r)
    assert admin_json(admin(p, "GET", "/records/scope", here), 200)["record"]["state"] == \
        "unknown"
    problem(p.post("/api/courses", key=key, actor=ids.actor, body=course()),
            "outcome-unknown", 409)
    assert upstream.count(actor=ids.actor) == 1


def test_records_resolve_refuses_interim_status(proxy, upstream, ids):
    """A replay must be a final response: a 1xx stored as the outcome is
    replayed as an interim response with nothing after it, and the retry
    hangs. resolve refuses 1xx like the other out-of-range statuses."""
    p = admin_proxy(proxy)
    key = ids.key()
    make_unknown(p, ids, key)
    here = scope(ids.actor, key)
    for status in ("100", "101", "199"):
        r = admin(p, "POST", "/records/resolve", dict(here, status=status), body=b"{}")
        assert r.status == 400, (status, r)
        bad_request(r)
    assert admin_json(admin(p, "GET", "/records/scope", here), 200)["record"]["state"] == \
        "unknown"
    assert upstream.count(actor=ids.actor) == 1


def test_sweeper_waits_for_the_advisory_lock(proxy, upstream, pg, ids):
    """While another session holds the sweeper's lock, sweeps are skipped
    and an expired completed record stays; once it is free, it is deleted."""
    holder = pg.records.connect()
    try:
        with holder.cursor() as cur:
            cur.execute("SELECT pg_advisory_lock(%s)", (SWEEP_LOCK_KEY,))
        p = admin_proxy(proxy, {"sweep_interval": SWEEP_INTERVAL})
        key = ids.key()
        assert_owner(p.post("/api/courses", key=key, actor=ids.actor, body=course()))
        assert upstream.count(actor=ids.actor) == 1
        expired = pg.query("UPDATE idempotency_records SET expires_at = now() - interval '1 s'"
                           " WHERE idem_key = %s RETURNING state::text", (key,))
        assert expired == [{"state": "completed"}], expired

        m = poll_metrics(p, lambda x: x.get("idemproxy_sweeper_skipped_total", 0)
                         >= SWEEPS_WHILE_LOCKED)
        assert m, metrics(p).text
        assert m.get("idemproxy_sweeper_runs_total") == 0, m.text
        assert m.get("idemproxy_sweeper_deleted_total") == 0, m.text
        rows = pg.records.rows(key)
        assert len(rows) == 1 and helpers.record_state(rows[0]) == "completed", rows

        with holder.cursor() as cur:
            cur.execute("SELECT pg_advisory_unlock(%s)", (SWEEP_LOCK_KEY,))
            assert cur.fetchone()[0] is True
        assert helpers.poll(lambda: pg.records.rows(key) == []), pg.records.rows(key)
        m = poll_metrics(p, lambda x: x.get("idemproxy_sweeper_deleted_total", 0) >= 1
                         and x.get("idemproxy_sweeper_runs_total", 0) >= 1)
        assert m, metrics(p).text
        assert upstream.count(actor=ids.actor) == 1
    finally:
        holder.close()



def test_records_refuse_browser_origin(proxy, upstream, pg, ids):
    """A cross-site form post from a web page carries Origin: refused (403),
    the record untouched; the same call from a tool works."""
    p = admin_proxy(proxy)
    key = ids.key()
    make_unknown(p, ids, key)
    r = admin(p, "POST", "/records/release", scope(ids.actor, key),
              headers=[("Origin", "https://evil.example")])
    assert admin_json(r, 403)["error"]
    assert helpers.record_state(pg.records.one(ids.actor)) == "unknown"
    admin_json(admin(p, "POST", "/records/release", scope(ids.actor, key)), 200)
    assert pg.records.rows(ids.actor) == []
    assert upstream.count(actor=ids.actor) == 1
