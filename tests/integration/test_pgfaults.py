"""PostgreSQL faults: backends killed during a claim or a finish, a restart
while the owner waits upstream, statements blocked by a lock, a read-only
server, failover to a promoted standby through multi-host conninfo,
pgbouncer in transaction pooling mode, and the removal of claims whose
answer was lost (one that never committed, one whose commit waits for a
synchronous standby that is not there)."""
import os
import shutil
import subprocess
import tempfile
import time

import pytest

from tests.lib import helpers
from tests.lib.admin import admin
from tests.lib.cluster import Cluster, PGBIN, PG_USER, lock_waiters, run_as_pg
from tests.lib.helpers import Background, problem, course, assert_owner, assert_replay_of

POLL_LIMIT = 10.0
POLL_STEP = 0.05
LOCK_TIMEOUT = "5s"
WORKERS = 2
PGBOUNCER = "/usr/sbin/pgbouncer"
PGBOUNCER_POOL = 2
PGBOUNCER_WORKERS = 4           # more store connections than server connections

# Replays must come from the store, not from a worker's memory.
NO_CACHE = {"replay_cache": "0", "upstream_timeout": "4s"}


class TableLock:
    """LOCK TABLE idempotency_records IN ACCESS EXCLUSIVE MODE, held in an
    open transaction of its own connection until release()."""

    def __init__(self, cluster):
        import psycopg2
        self.conn = psycopg2.connect(cluster.conninfo, connect_timeout=5)
        with self.conn.cursor() as cur:
            cur.execute("SET lock_timeout = '%s'" % LOCK_TIMEOUT)
            cur.execute("LOCK TABLE idempotency_records IN ACCESS EXCLUSIVE MODE")

    def release(self):
        if self.conn is not None:
            self.conn.rollback()
            self.conn.close()
            self.conn = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release()


def lock_waiter_ages(cluster, app):
    """app's backends waiting on a lock, with how long (s) their statement
    has run."""
    return cluster.query("""SELECT pid, query,
                                   extract(epoch FROM clock_timestamp() - query_start)::float8 AS age
                              FROM pg_stat_activity
                             WHERE wait_event_type = 'Lock' AND pid <> pg_backend_pid()
                               AND datname = current_database() AND application_name = %s""", (app,))


def wait_lock_waiters(cluster, timeout):
    """The lock waiters, as soon as there is one; [] when none came in time."""
    end = time.monotonic() + timeout
    while True:
        rows = lock_waiters(cluster)
        if rows or time.monotonic() > end:
            return rows
        time.sleep(POLL_STEP)


def client_backends(cluster):
    """Pids of the client backends on cluster's database, other than the
    querying one: idemproxy's store connections."""
    rows = cluster.query("""SELECT pid FROM pg_stat_activity
                             WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()
                               AND datname = current_database()""")
    return [r["pid"] for r in rows]


def wait_backends(cluster, n):
    """Wait until idemproxy holds at least n store connections."""
    end = time.monotonic() + POLL_LIMIT
    while len(client_backends(cluster)) < n:
        assert time.monotonic() < end, "idemproxy did not connect %d store sessions" % n
        time.sleep(POLL_STEP)


def terminate(cluster, pids):
    for pid in pids:
        cluster.query("SELECT pg_terminate_backend(%s)", (pid,))


def wait_state(records, actor, state):
    end = time.monotonic() + POLL_LIMIT
    while True:
        rows = records.rows(actor)
        if len(rows) == 1 and helpers.record_state(rows[0]) == state:
            return rows[0]
        assert time.monotonic() < end, "record never became %s: %r" % (state, rows)
        time.sleep(0.1)


def when_available(send):
    """send() until its answer is something other than store-unavailable
    (a worker may still be in its reconnect backoff), within POLL_LIMIT;
    returns that answer."""
    end = time.monotonic() + POLL_LIMIT
    while True:
        r = send()
        if r.status != 503:
            return r
        problem(r, "store-unavailable", 503)
        assert time.monotonic() < end, "the store did not come back within %ss" % POLL_LIMIT
        time.sleep(0.2)


def post_until_owner(p, actor, key=None):
    """POST until it is executed, within POLL_LIMIT; a fresh key per attempt
    unless key is given. Returns (key, the owner's response)."""
    keys = []

    def send():
        keys.append(key or "key-%d-%s" % (time.monotonic_ns(), actor))
        return p.post("/api/courses", key=keys[-1], actor=actor, body=course())

    r = when_available(send)
    assert_owner(r)
    return keys[-1], r


def replay(p, key, actor):
    """The answer to a retry of key, once the store answers."""
    return when_available(lambda: p.post("/api/courses", key=key, actor=actor, body=course()))


def test_backend_killed_during_claim(proxy, upstream, pg, ids):
    p = proxy(dict(NO_CACHE, store_timeout="3s", workers=str(WORKERS)))
    wait_backends(pg, WORKERS)
    key = ids.key()
    with TableLock(pg) as lock:
        req = Background(lambda: p.post("/api/courses", key=key, actor=ids.actor, body=course()))
        waiters = wait_lock_waiters(pg, 2.0)
        assert waiters, "the claim never waited on the table lock"
        terminate(pg, [w["pid"] for w in waiters])
        r = req.join()
        assert isinstance(r, helpers.Response), r
        problem(r, "store-unavailable", 503)
        assert r.headers.get("Retry-After") is not None
        assert upstream.count(key=key) == 0
        lock.release()
    assert pg.records.rows(ids.actor) == []
    _, owner = post_until_owner(p, ids.actor, key)
    assert upstream.count(key=key) == 1
    assert_replay_of(replay(p, key, ids.actor), owner)
    assert upstream.count(key=key) == 1


def test_backend_killed_during_finish(proxy, upstream, pg, ids):
    """The finish fails: the owner still gets its response at once, and the
    finish is retried from memory after the reconnect."""
    p = proxy(dict(NO_CACHE, store_timeout="3s", workers=str(WORKERS)))
    wait_backends(pg, WORKERS)
    key = ids.key()
    with helpers.SlowOwner(p, upstream, "/api/courses", key, ids.actor, 1.5) as owner:
        with TableLock(pg) as lock:
            waiters = wait_lock_waiters(pg, 5.0)
            assert waiters, "the finish never waited on the table lock"
            terminate(pg, [w["pid"] for w in waiters])
            lock.release()
    assert isinstance(owner.response, helpers.Response), owner.response
    assert_owner(owner.response, 201)
    assert owner.response.json()["path"] == "/api/courses"
    row = wait_state(pg.records, ids.actor, "completed")
    assert helpers.record_status(row) == 201
    assert_replay_of(replay(p, key, ids.actor), owner.response)
    assert upstream.count(key=key) == 1


def test_postgres_restarted_while_upstream(private_pg, proxy, upstream, ids):
    pgx = private_pg()
    p = proxy(NO_CACHE, database=pgx.conninfo)
    key = ids.key()
    with helpers.SlowOwner(p, upstream, "/api/courses", key, ids.actor, 2) as owner:
        pgx.stop()
        time.sleep(1)
        pgx.start()
    assert isinstance(owner.response, helpers.Response), owner.response
    assert_owner(owner.response, 201)
    wait_state(pgx.records, ids.actor, "completed")
    assert_replay_of(replay(p, key, ids.actor), owner.response)
    assert upstream.count(key=key) == 1


def test_statement_blocked_by_lock(proxy, upstream, pg, ids):
    store_timeout = 1.0
    p = proxy(dict(NO_CACHE, store_timeout="1s", workers=str(WORKERS)))
    wait_backends(pg, WORKERS)
    key = ids.key()
    with TableLock(pg) as lock:
        t0 = time.monotonic()
        req = Background(lambda: p.post("/api/courses", key=key, actor=ids.actor, body=course()))
        waiters = wait_lock_waiters(pg, store_timeout)
        r = req.join()
        assert isinstance(r, helpers.Response), r
        assert req.at - t0 < store_timeout + 2, "no answer within store_timeout + 2 s"
        problem(r, "store-unavailable", 503)
        assert upstream.count(key=key) == 0
        assert waiters, "the claim never waited on the table lock"
        assert [w["application_name"] for w in waiters] == ["idemproxy"], \
            "idemproxy's sessions must set application_name 'idemproxy': %r" % waiters
        # The claim times out, and the release of its possibly-claimed slot
        # that follows on a new connection waits on the same lock: each of
        # idemproxy's statements must give up after store_timeout
        # (statement_timeout), so none is ever seen waiting much longer, and
        # all are gone once both have had their store_timeout.
        oldest, left = 0.0, None
        end = t0 + 2 * store_timeout + 3
        while time.monotonic() < end:
            left = lock_waiter_ages(pg, "idemproxy")
            oldest = max([oldest] + [w["age"] for w in left])
            if not left and time.monotonic() > t0 + store_timeout + 1:
                break
            time.sleep(POLL_STEP)
        assert oldest < store_timeout + 1, \
            "an idemproxy statement waited %.1f s, past store_timeout (statement_timeout?)" % oldest
        assert left == [], \
            "idemproxy's statements still wait after store_timeout (statement_timeout?): %r" % left
        lock.release()
    _, owner = post_until_owner(p, ids.actor, key)
    assert upstream.count(key=key) == 1
    assert_replay_of(replay(p, key, ids.actor), owner)
    assert upstream.count(key=key) == 1


def set_read_only(cluster, on):
    """Make every new transaction on cluster read-only (on) or not again,
    through ALTER SYSTEM and a configuration reload."""
    conn = cluster.records.connect()
    try:
        with conn.cursor() as cur:
            if on:
                cur.execute("ALTER SYSTEM SET default_transaction_read_only = on")
            else:
                cur.execute("ALTER SYSTEM RESET default_transaction_read_only")
            cur.execute("SELECT pg_reload_conf()")
    finally:
        conn.close()


def readyz(p):
    return admin(p, "GET", "/readyz").status


def test_read_only_server(private_pg, proxy, upstream, ids):
    """A read-only server: keyed requests 503, /readyz 503; writable again:
    both recover without a restart."""
    pgx = private_pg()
    admin_port = helpers.free_port()
    p = proxy(dict(NO_CACHE, workers=str(WORKERS), admin="127.0.0.1:%d" % admin_port),
              database=pgx.conninfo)
    p.admin = admin_port
    assert helpers.wait_port(admin_port, p.proc)
    warm = p.post("/api/courses", key=ids.key(), actor=ids.actor, body=course())
    assert_owner(warm)
    assert helpers.poll(lambda: readyz(p) == 200)
    set_read_only(pgx, True)
    terminate(pgx, client_backends(pgx))
    assert helpers.poll(lambda: readyz(p) == 503)
    # ... and says why, once the workers are connected again.
    assert helpers.poll(lambda: admin(p, "GET", "/readyz").body
                        == b"not ready: the store is read-only (a standby?)\n")
    keys = [ids.key() for _ in range(4)]
    for key in keys:
        r = p.post("/api/courses", key=key, actor=ids.actor, body=course())
        problem(r, "store-unavailable", 503)
        assert r.headers.get("Retry-After") is not None
        time.sleep(0.3)
    assert "read-only" in p.stderr_text(), "no read-only error logged:\n" + p.stderr_tail()
    g = p.request("GET", "/api/courses", [("X-Actor-Id", ids.actor)])
    assert g.status == 200, g
    assert g.json()["method"] == "GET"
    assert upstream.count(actor=ids.actor, method="POST") == 1
    for key in keys:
        assert upstream.count(key=key) == 0
    set_read_only(pgx, False)
    key, owner = post_until_owner(p, ids.actor)
    assert_replay_of(replay(p, key, ids.actor), owner)
    assert upstream.count(key=key) == 1
    assert upstream.count(actor=ids.actor, method="POST") == 2
    assert helpers.poll(lambda: readyz(p) == 200)


class TcpCluster(Cluster):
    """A Cluster that also listens on 127.0.0.1:port (multi-host conninfo)."""

    listen_addresses = "127.0.0.1"


class Standby(TcpCluster):
    """A streaming standby of primary (pg_basebackup -R), started."""

    def __init__(self, primary):
        self.layout()
        r = run_as_pg([PGBIN + "/pg_basebackup", "-h", primary.dir, "-p", str(primary.port),
                       "-U", PG_USER, "-D", self.data, "-R", "-X", "stream",
                       "--checkpoint=fast", "--no-sync"])
        assert r.returncode == 0, r.stdout + r.stderr
        self.start()

    def promote(self):
        r = run_as_pg([PGBIN + "/pg_ctl", "-D", self.data, "-w", "-t", "30", "promote"])
        assert r.returncode == 0, r.stdout + r.stderr + self.log_tail()


def wait_replayed(primary, standby):
    """Wait until standby has replayed everything primary has written."""
    lsn = primary.query("SELECT pg_current_wal_lsn()::text AS lsn")[0]["lsn"]
    end = time.monotonic() + POLL_LIMIT
    while not standby.query("SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn AS ok",
                            (lsn,))[0]["ok"]:
        assert time.monotonic() < end, "the standby did not replay %s" % lsn
        time.sleep(POLL_STEP)


def test_failover_multi_host(private_pg, proxy, upstream, ids):
    primary = private_pg(TcpCluster)
    standby = private_pg(lambda: Standby(primary), migrated=False)
    conninfo = ("host=127.0.0.1,127.0.0.1 port=%d,%d dbname=idemproxy user=%s "
                "target_session_attrs=read-write connect_timeout=2"
                % (primary.port, standby.port, PG_USER))
    p = proxy(NO_CACHE, database=conninfo)
    first_key = ids.key()
    first = p.post("/api/courses", key=first_key, actor=ids.actor, body=course())
    assert_owner(first)
    assert_replay_of(p.post("/api/courses", key=first_key, actor=ids.actor, body=course()), first)
    wait_state(primary.records, ids.actor, "completed")
    wait_replayed(primary, standby)
    primary.stop()
    standby.promote()
    key, owner = post_until_owner(p, ids.actor)
    assert_replay_of(replay(p, key, ids.actor), owner)
    assert_replay_of(replay(p, first_key, ids.actor), first)
    assert upstream.count(key=first_key) == 1
    assert upstream.count(key=key) == 1
    assert upstream.count(actor=ids.actor, method="POST") == 2


class Pgbouncer:
    """pgbouncer (transaction pooling, trust) in front of cluster, running as
    the cluster's owner on a free 127.0.0.1 port."""

    def __init__(self, cluster):
        assert os.access(PGBOUNCER, os.X_OK), \
            "%s missing: scripts/deps.sh installs the Debian package pgbouncer" % PGBOUNCER
        self.dir = tempfile.mkdtemp(prefix="ipgb", dir="/tmp")
        self.port = helpers.free_port()
        self.log = os.path.join(self.dir, "pgbouncer.log")
        users = os.path.join(self.dir, "userlist.txt")
        ini = os.path.join(self.dir, "pgbouncer.ini")
        with open(users, "w") as f:
            f.write('"%s" ""\n' % PG_USER)
        with open(ini, "w") as f:
            f.write("[databases]\n"
                    "idemproxy = host=%s port=%d dbname=idemproxy user=%s\n"
                    "[pgbouncer]\n"
                    "listen_addr = 127.0.0.1\n"
                    "listen_port = %d\n"
                    "unix_socket_dir =\n"
                    "auth_type = trust\n"
                    "auth_file = %s\n"
                    "pool_mode = transaction\n"
                    "max_client_conn = 100\n"
                    "default_pool_size = %d\n"
                    "ignore_startup_parameters = extra_float_digits\n"
                    "logfile = %s\n"
                    % (cluster.dir, cluster.port, PG_USER, self.port, users,
                       PGBOUNCER_POOL, self.log))
        for path in (self.dir, users, ini):
            shutil.chown(path, PG_USER, PG_USER)
        self.proc = subprocess.Popen([PGBOUNCER, ini], cwd=self.dir, user=PG_USER,
                                     group=PG_USER, extra_groups=[],
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        if not helpers.wait_port(self.port, self.proc, POLL_LIMIT):
            log = self.log_text()
            self.stop()
            pytest.fail("pgbouncer did not start:\n" + log)
        self.conninfo = "host=127.0.0.1 port=%d dbname=idemproxy user=%s" % (self.port, PG_USER)

    def log_text(self):
        try:
            with open(self.log) as f:
                return f.read()[-6000:]
        except OSError:
            return ""

    def stop(self):
        helpers.terminate(self.proc)
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture
def pgbouncer(pg):
    """pgbouncer in front of the session cluster; its log is printed at
    teardown, so a failing test's report shows it."""
    bouncer = Pgbouncer(pg)
    yield bouncer
    print("pgbouncer log:\n" + bouncer.log_text())
    bouncer.stop()


def test_through_pgbouncer_transaction_mode(pgbouncer, proxy, upstream, ids):
    p = proxy(dict(NO_CACHE, workers=str(PGBOUNCER_WORKERS)), database=pgbouncer.conninfo,
              wait_store=True)
    key = ids.key()
    first = p.post("/api/courses", key=key, actor=ids.actor, body=course())
    assert_owner(first)
    assert_replay_of(p.post("/api/courses", key=key, actor=ids.actor, body=course()), first)
    r = p.post("/api/courses", key=key, actor=ids.actor, body=course(title="Other"))
    problem(r, "idempotency-conflict", 422)
    assert upstream.count(key=key) == 1
    raced = ids.key()
    results = helpers.race([p], raced, ids.actor)
    owner = helpers.check_race(results)
    assert upstream.count(key=raced) == 1
    assert_replay_of(p.post("/api/courses", key=raced, actor=ids.actor, body=course()), owner)
    assert upstream.count(actor=ids.actor) == 2


# prepared_statements: named statements on a direct connection, unnamed
# through a pooler in transaction mode (where a named statement prepared in
# one transaction is gone in the next), as the server's own log shows.
DIRECT = "store connection is direct: named prepared statements"
POOLED = "store connection goes through a connection pooler"


def log_statements(cluster):
    """Have cluster log every statement it executes (to its log file)."""
    cluster.query("ALTER SYSTEM SET log_statement = 'all'")
    cluster.query("SELECT pg_reload_conf()")


def executed(cluster):
    """The names of the extended-protocol statements cluster executed, by
    count: {'idemproxy_0_1': 3, '<unnamed>': 5, ...} (its log)."""
    names = {}
    with open(os.path.join(cluster.dir, "log")) as f:
        for line in f:
            at = line.find("LOG:  execute ")
            if at >= 0:
                name = line[at + len("LOG:  execute "):].split(":", 1)[0]
                names[name] = names.get(name, 0) + 1
    return names


def named_run(p, ids, upstream):
    """An owner, its replay, a conflict and a race through p, with the exact
    upstream effects."""
    key = ids.key()
    first = p.post("/api/courses", key=key, actor=ids.actor, body=course())
    assert_owner(first)
    assert_replay_of(p.post("/api/courses", key=key, actor=ids.actor, body=course()), first)
    problem(p.post("/api/courses", key=key, actor=ids.actor, body=course(title="Other")),
            "idempotency-conflict", 422)
    raced = ids.key()
    owner = helpers.check_race(helpers.race([p], raced, ids.actor))
    assert_replay_of(p.post("/api/courses", key=raced, actor=ids.actor, body=course()), owner)
    assert upstream.count(key=key) == 1
    assert upstream.count(key=raced) == 1


@pytest.mark.parametrize("mode", ["auto", "on", None])
def test_direct_connection_uses_named_statements(private_pg, proxy, upstream, ids, mode):
    pgx = private_pg()
    log_statements(pgx)
    settings = dict(NO_CACHE, workers="1")
    if mode:
        settings["prepared_statements"] = mode
    p = proxy(settings, database=pgx.conninfo, wait_store=True)
    named_run(p, ids, upstream)
    names = executed(pgx)
    ours = {n: c for n, c in names.items() if n.startswith("idemproxy_")}
    # the timeout, the claim's insert and the finish by name, at least
    assert ours.get("idemproxy_timeout", 0) >= 3, names
    assert any(n.startswith("idemproxy_0_") for n in ours), names   # claim insert
    assert any(n.startswith("idemproxy_2_") for n in ours), names   # finish
    assert (DIRECT in p.stderr_text()) == (mode != "on"), p.stderr_text()


def test_batches_of_several_rows_plan_each_execution(private_pg, proxy, upstream, ids):
    """Owners finishing together share a batch; a batch of more than one row
    is preceded by the setting that plans it for this execution
    (idemproxy_timeout_rows), a one-row batch by the plain timeout: a
    generic plan made while the table was small would scan the whole table."""
    pgx = private_pg()
    log_statements(pgx)
    p = proxy(dict(NO_CACHE, workers="1"), database=pgx.conninfo, wait_store=True)
    n, hold = 24, "batch-" + ids.key()
    keys = [ids.key() for _ in range(n)]
    owners = [Background(lambda k=k: p.post("/api/courses", key=k, actor=ids.actor, body=course(),
                                            headers=[("X-Test-Hold", hold)]))
              for k in keys]
    assert len(upstream.wait_for(n, actor=ids.actor)) == n
    upstream.release(hold)
    for b in owners:
        assert_owner(b.join())
    for k in keys:
        assert upstream.count(key=k) == 1
    names = executed(pgx)
    multi = sum(c for name, c in names.items()
                if name.startswith("idemproxy_") and name.count("_") == 2
                and not name.startswith("idemproxy_timeout") and int(name.rsplit("_", 1)[1]) > 1)
    single = sum(c for name, c in names.items()
                 if name.startswith("idemproxy_") and name.count("_") == 2
                 and not name.startswith("idemproxy_timeout") and name.endswith("_1"))
    # the 24 finishes, released at once, cannot all have gone alone
    assert multi >= 1, names
    assert names.get("idemproxy_timeout_rows", 0) == multi, names
    assert names.get("idemproxy_timeout", 0) >= single, names


def test_prepared_statements_off_sends_unnamed(private_pg, proxy, upstream, ids):
    pgx = private_pg()
    log_statements(pgx)
    p = proxy(dict(NO_CACHE, workers="1", prepared_statements="off"), database=pgx.conninfo,
              wait_store=True)
    named_run(p, ids, upstream)
    names = executed(pgx)
    assert not [n for n in names if n.startswith("idemproxy_")], names
    assert names.get("<unnamed>", 0) >= 6, names
    assert DIRECT not in p.stderr_text() and POOLED not in p.stderr_text()


@pytest.mark.parametrize("mode", ["auto", "off"])
def test_pgbouncer_transaction_mode_gets_unnamed_statements(private_pg, proxy, upstream, ids,
                                                            mode):
    pgx = private_pg()
    log_statements(pgx)
    bouncer = Pgbouncer(pgx)
    try:
        p = proxy(dict(NO_CACHE, workers=str(PGBOUNCER_WORKERS), prepared_statements=mode),
                  database=bouncer.conninfo, wait_store=True)
        named_run(p, ids, upstream)
        # several statements per worker, spread over the pool's servers
        for _ in range(5):
            named_run(p, ids, upstream)
        names = executed(pgx)
        assert not [n for n in names if n.startswith("idemproxy_")], names
        assert names.get("<unnamed>", 0) >= 36, names
        stderr = p.stderr_text()
        assert "store statement failed" not in stderr, stderr
        if mode == "auto":
            assert stderr.count(POOLED) == PGBOUNCER_WORKERS, stderr
        else:
            assert POOLED not in stderr, stderr
    finally:
        print("pgbouncer log:\n" + bouncer.log_text())
        bouncer.stop()


# ---- a claim whose answer is lost: its removal ----
#
# The removal runs once the claim's statement has run out of time; these
# tests find its statements in the server's log (every statement, with its
# parameters, the key among them).

def log_size(cluster):
    return os.path.getsize(os.path.join(cluster.dir, "log"))


def logged_since(cluster, offset, text):
    """1 when cluster's log names text after byte offset."""
    with open(os.path.join(cluster.dir, "log"), "rb") as f:
        f.seek(offset)
        return text.encode() in f.read()


FORWARD_ROUTE = """
route pay.forward {
    match        POST /api/forward
    recovery     forward
}
"""


def test_lost_claim_that_never_committed_leaves_nothing(private_pg, proxy, upstream, ids):
    """The claim's backend is killed while its insert waits on a lock: its
    answer is lost, and it never committed. Its removal finds the slot
    free, removes nothing (and says so by saying nothing), leaves no row
    behind, and a retry is executed once."""
    pgx = private_pg()
    log_statements(pgx)
    p = proxy(dict(NO_CACHE, workers="1", store_timeout="1s"), database=pgx.conninfo,
              wait_store=True)
    key = ids.key()
    with TableLock(pgx):
        req = Background(lambda: p.post("/api/courses", key=key, actor=ids.actor, body=course()))
        waiters = wait_lock_waiters(pgx, 2.0)
        assert waiters, "the claim never waited on the table lock"
        terminate(pgx, [w["pid"] for w in waiters])
        r = req.join()
    assert isinstance(r, helpers.Response), r
    problem(r, "store-unavailable", 503)
    after = log_size(pgx)
    assert helpers.poll(lambda: logged_since(pgx, after, key), POLL_LIMIT, POLL_STEP), \
        "no statement of the lost claim's removal:\n" + p.stderr_tail()
    assert pgx.records.rows(ids.actor) == []
    first = helpers.poll(lambda: (lambda r: r if r.status != 503 else None)(
        p.post("/api/courses", key=key, actor=ids.actor, body=course())), POLL_LIMIT, 0.2)
    assert first, "only 503s: %r" % pgx.records.rows(ids.actor)
    assert_owner(first)
    assert_replay_of(p.post("/api/courses", key=key, actor=ids.actor, body=course()), first)
    assert upstream.count(key=key) == 1
    rows = pgx.records.rows(ids.actor)
    assert len(rows) == 1 and rows[0]["generation"] > 0, rows
    assert "whose answer was lost" not in p.stderr_text(), p.stderr_tail()


def test_lost_takeover_of_a_record_deleted_since_leaves_nothing(private_pg, proxy, upstream,
                                                                ids):
    """A `recovery forward` takeover waits on the record's row lock and its
    backend is killed there (answer lost, nothing committed); the record is
    then deleted. The removal finds the slot free and leaves nothing in it
    (no record of its own, no unknown one), so a retry is a new request."""
    import psycopg2
    pgx = private_pg()
    log_statements(pgx)
    p = proxy(dict(NO_CACHE, workers="1", store_timeout="1s"), routes=FORWARD_ROUTE,
              database=pgx.conninfo, wait_store=True)
    key = ids.key()
    problem(p.post("/api/forward", key=key, actor=ids.actor, body=course(),
                   headers=[("X-Test-Action", "reset")]), "upstream-error", 502)
    row = pgx.records.one(ids.actor)
    assert helpers.record_state(row) == "unknown"
    locker = psycopg2.connect(pgx.conninfo, connect_timeout=5)
    try:
        with locker.cursor() as cur:
            cur.execute("SET lock_timeout = '%s'" % LOCK_TIMEOUT)
            cur.execute("SELECT 1 FROM idempotency_records WHERE actor = %s AND idem_key = %s"
                        " FOR UPDATE", (row["actor"], key))
            req = Background(lambda: p.post("/api/forward", key=key, actor=ids.actor,
                                            body=course()))
            waiters = wait_lock_waiters(pgx, 2.0)
            assert waiters, "the takeover never waited on the row lock"
            terminate(pgx, [w["pid"] for w in waiters])
            r = req.join()
            assert isinstance(r, helpers.Response), r
            problem(r, "store-unavailable", 503)
            cur.execute("DELETE FROM idempotency_records WHERE actor = %s AND idem_key = %s",
                        (row["actor"], key))
        locker.commit()
    finally:
        locker.close()
    assert upstream.count(key=key) == 1
    after = log_size(pgx)
    assert helpers.poll(lambda: logged_since(pgx, after, key), POLL_LIMIT, POLL_STEP), \
        "no statement of the lost claim's removal:\n" + p.stderr_tail()
    again = helpers.poll(lambda: (lambda r: r if r.status != 503 else None)(
        p.post("/api/forward", key=key, actor=ids.actor, body=course())), POLL_LIMIT, 0.2)
    assert again, "only 503s: %r" % pgx.records.rows(ids.actor)
    assert_owner(again)
    assert upstream.count(key=key) == 2
    rows = pgx.records.rows(ids.actor)
    assert len(rows) == 1 and helpers.record_state(rows[0]) == "completed", rows
    assert "whose answer was lost" not in p.stderr_text(), p.stderr_tail()


# ---- a synchronous standby that is not there ----
#
# With synchronous_standby_names set, a commit waits for the standby, and
# statement_timeout does not bound that wait (the server lifts it before
# committing). Until the commit ends, its rows are invisible to every other
# session. A claim waiting there loses its answer at store_timeout (503);
# its removal must wait for the commit's fate, or the claim lands later and
# the key stays in_progress, then unknown, for good.

GHOST = "ghost_standby"


def standby_required(cluster, name):
    """Have commits on cluster wait for the synchronous standby name
    ('' lifts it, which lets every waiting commit go)."""
    cluster.query("ALTER SYSTEM SET synchronous_standby_names = %s", (name,))
    cluster.query("SELECT pg_reload_conf()")


def syncrep_waiters(cluster):
    """Pids of the backends whose commit waits for a synchronous standby."""
    rows = cluster.query("""SELECT pid FROM pg_stat_activity
                             WHERE wait_event = 'SyncRep' AND datname = current_database()""")
    return [r["pid"] for r in rows]


def commits_wait(cluster):
    """1 when a commit on cluster now waits for the standby: a write of our
    own is seen waiting, then cancelled (it has committed locally)."""
    conn = cluster.records.connect()
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT pg_backend_pid()")
            pid = cur.fetchone()[0]
        write = Background(lambda: conn.cursor().execute("INSERT INTO standby_probe VALUES (1)"))
        waited = helpers.poll(lambda: pid in syncrep_waiters(cluster), 1.0, POLL_STEP)
        if waited:
            cluster.query("SELECT pg_cancel_backend(%s)", (pid,))
        write.join()
        return waited
    finally:
        conn.close()


@pytest.mark.parametrize("claim_backend", ["waits", "terminated"])
def test_lost_claim_waits_for_a_missing_synchronous_standby(private_pg, proxy, upstream, ids,
                                                            claim_backend):
    """The claim's commit waits for a standby that is not there: 503, never
    forwarded, the claim invisible. Its removal does not give up on it:
    once the standby requirement is lifted (or, terminated, the claim's
    backend committed locally and the removal's own delete waits in turn),
    a retry with the key is executed exactly once."""
    pgx = private_pg()
    pgx.query("CREATE TABLE standby_probe (n int)")
    log_statements(pgx)
    standby_required(pgx, GHOST)
    try:
        assert helpers.poll(lambda: commits_wait(pgx), POLL_LIMIT), \
            "commits never waited for the standby"
        p = proxy(dict(NO_CACHE, workers="1", store_timeout="1s"), database=pgx.conninfo,
                  wait_store=True)
        key = ids.key()
        r = p.post("/api/courses", key=key, actor=ids.actor, body=course())
        problem(r, "store-unavailable", 503)
        assert upstream.count(key=key) == 0
        assert pgx.records.rows(ids.actor) == []   # its commit has not ended
        # The removal has looked at the slot (the server logs every
        # statement with its parameters, the key among them).
        after = log_size(pgx)
        assert helpers.poll(lambda: logged_since(pgx, after, key), POLL_LIMIT, POLL_STEP), \
            "no statement of the lost claim's removal:\n" + p.stderr_tail()
        # ... and found the claim's transaction still running (unasserted:
        # an idemproxy that does not wait lifts the standby after the bound,
        # and fails below with the key taken).
        helpers.poll(lambda: "store waits to remove 1 claim" in p.stderr_text(), POLL_LIMIT,
                     POLL_STEP)
        # A retry meanwhile waits on the claim's row, and gets 503 too.
        problem(p.post("/api/courses", key=key, actor=ids.actor, body=course()),
                "store-unavailable", 503)
        if claim_backend == "terminated":
            waiting = syncrep_waiters(pgx)
            assert len(waiting) == 1, waiting
            terminate(pgx, waiting)
            # "The transaction has already committed locally"
            row = wait_state(pgx.records, ids.actor, "in_progress")
            assert row["lease_owner"], row
            # Let the removal find it: its delete's commit then waits for
            # the standby too (unasserted: an idemproxy that never looks
            # again fails below, with the key taken).
            helpers.poll(lambda: syncrep_waiters(pgx), POLL_LIMIT, POLL_STEP)
        else:
            # Two of the removal's attempts have run (each by name, the
            # probe first) before the lift, however slow this machine is.
            def attempts():
                names = executed(pgx)
                return (names.get("idemproxy_forget_timeout", 0) >= 2 and
                        sum(c for n, c in names.items() if n.endswith("_1_first")) >= 2)
            assert helpers.poll(attempts, POLL_LIMIT, POLL_STEP), executed(pgx)
        assert upstream.count(key=key) == 0
        standby_required(pgx, "")

        run_once_then_replay(p, pgx, "/api/courses", key, ids.actor)
        assert upstream.count(key=key) == 1
        if claim_backend == "waits":
            assert "store removed 1 claim whose answer was lost" in p.stderr_text(), \
                p.stderr_tail()
            # Each attempt ran the removal's statements by name, prepared once
            # per session (the probe goes first: idemproxy_<kind>_<rows>_first).
            names = executed(pgx)
            assert names.get("idemproxy_forget_timeout", 0) >= 2, names
            assert sum(c for n, c in names.items() if n.endswith("_1_first")) >= 2, names
        # (terminated, the removal's delete waited for the standby in turn:
        # its answer was lost at store_timeout, and the attempt after the
        # lift found the slot free)
    finally:
        standby_required(pgx, "")


def run_once_then_replay(p, pgx, path, key, actor):
    """Retries of key until one is executed (201), then a replay of it: the
    key was not left taken."""
    def executed():
        r = p.post(path, key=key, actor=actor, body=course())
        return r if r.status == 201 else None

    first = helpers.poll(executed, POLL_LIMIT, 0.2)
    assert first, "the key stayed taken: %r\n%s" % (pgx.records.rows(actor), p.stderr_tail())
    assert_owner(first)
    assert_replay_of(p.post(path, key=key, actor=actor, body=course()), first)


def test_lost_takeover_waits_for_a_missing_synchronous_standby(private_pg, proxy, upstream,
                                                               ids):
    """`recovery forward` takes over an unknown record, and that commit
    waits for a standby that is not there: 503, never forwarded. Its
    removal waits too, then marks the record unknown again, so once the
    standby requirement is lifted a retry takes it over at once (one more
    upstream effect, as recovery forward does) instead of meeting the lost
    takeover's in_progress lease."""
    pgx = private_pg()
    pgx.query("CREATE TABLE standby_probe (n int)")
    log_statements(pgx)
    p = proxy(dict(NO_CACHE, workers="1", store_timeout="1s", lease="30s"),
              routes=FORWARD_ROUTE, database=pgx.conninfo, wait_store=True)
    key = ids.key()
    problem(p.post("/api/forward", key=key, actor=ids.actor, body=course(),
                   headers=[("X-Test-Action", "reset")]), "upstream-error", 502)
    assert helpers.record_state(pgx.records.one(ids.actor)) == "unknown"
    standby_required(pgx, GHOST)
    try:
        assert helpers.poll(lambda: commits_wait(pgx), POLL_LIMIT), \
            "commits never waited for the standby"
        r = p.post("/api/forward", key=key, actor=ids.actor, body=course())
        problem(r, "store-unavailable", 503)
        assert upstream.count(key=key) == 1
        assert helpers.record_state(pgx.records.one(ids.actor)) == "unknown"
        after = log_size(pgx)
        assert helpers.poll(lambda: logged_since(pgx, after, key), POLL_LIMIT, POLL_STEP), \
            "no statement of the lost claim's removal:\n" + p.stderr_tail()
        helpers.poll(lambda: "store waits to remove 1 claim" in p.stderr_text(), POLL_LIMIT,
                     POLL_STEP)
        standby_required(pgx, "")

        run_once_then_replay(p, pgx, "/api/forward", key, ids.actor)
        assert upstream.count(key=key) == 2
        assert "store removed 1 claim whose answer was lost" in p.stderr_text(), \
            p.stderr_tail()
    finally:
        standby_required(pgx, "")
