"""Serialization failures (40001) and deadlocks (40P01) on idemproxy's own
statements, provoked on the real PostgreSQL by a concurrent transaction:
PostgreSQL rolled the statement back, so idemproxy sends it again after a
backoff, counts it in idemproxy_store_retries_total{sqlstate}, and the
client gets the owner's answer (never a 503), with exactly one upstream
effect."""
import threading
import time

from tests.lib import helpers
from tests.lib.admin import admin_proxy, metrics, poll_metrics
from tests.lib.cluster import lock_waiters
from tests.lib.helpers import Background, course, assert_owner, assert_replay_of

OPERATION = "course.create"           # the route of /api/courses (BASE_ROUTES, tests/lib/proxy.py)
WAIT_LIMIT = 20.0
POLL_STEP = 0.02
# idemproxy's statements wait for their store_timeout; its deadlock check
# runs after DEADLOCK_CHECK of waiting, by when the test's transaction
# (which checks only after TEST_DEADLOCK_CHECK) has closed the cycle.
STORE_TIMEOUT = "15s"
DEADLOCK_CHECK = "3s"
TEST_DEADLOCK_CHECK = "120s"
# Every answer comes from the store, one worker so one store connection.
SETTINGS = {"replay_cache": "0", "workers": "1", "store_timeout": STORE_TIMEOUT, "lease": "30s"}


def start(proxy, pg, options):
    """idemproxy whose store sessions run with the server options given."""
    database = "%s options='%s'" % (pg.conninfo, options)
    return admin_proxy(proxy, SETTINGS, database=database, wait_store=True)


def retries(p, sqlstate):
    return metrics(p).get("idemproxy_store_retries_total", sqlstate=sqlstate)


def open_tx(pg):
    import psycopg2
    conn = psycopg2.connect(pg.conninfo, connect_timeout=5)
    with conn.cursor() as cur:
        cur.execute("SET deadlock_timeout = '%s'" % TEST_DEADLOCK_CHECK)
        cur.execute("SET lock_timeout = '%ds'" % int(WAIT_LIMIT))
    return conn


def insert_expired(cur, actor, key):
    """The scope's record, completed and past its retention: the claim
    that finds it takes it over."""
    cur.execute("""INSERT INTO idempotency_records (actor, operation, idem_key, fingerprint,
                        state, response_status, response_headers, response_body,
                        completed_at, expires_at)
                   VALUES (%s, %s, %s, %s, 'completed', 200, ''::bytea, 'old'::bytea,
                        now() - interval '1 hour', now() - interval '1 minute')""",
                ("h:" + actor, OPERATION, key, b"\0" * 32))


def wait_waiting(pg):
    """idemproxy's statement waits on a lock: the test's transaction holds it."""
    end = time.monotonic() + WAIT_LIMIT
    while not lock_waiters(pg, "idemproxy"):
        assert time.monotonic() < end, "idemproxy's claim never waited on the test's insert"
        time.sleep(POLL_STEP)


def check_executed_once(p, upstream, actor, key, r):
    assert_owner(r)
    assert upstream.count(key=key) == 1
    again = p.post("/api/courses", key=key, actor=actor, body=course())
    assert_replay_of(again, r)
    assert upstream.count(key=key) == 1


def provoke(p, pg, ids, key, then):
    """The test's transaction inserts the scope's record (uncommitted); a
    keyed POST's claim then waits on it; then(tx) ends the transaction.
    Returns the POST's answer."""
    tx = open_tx(pg)
    try:
        with tx.cursor() as cur:
            insert_expired(cur, ids.actor, key)
        req = Background(lambda: p.post("/api/courses", key=key, actor=ids.actor,
                                        body=course()))
        wait_waiting(pg)
        then(tx)
        r = req.join()
    finally:
        tx.close()
    assert isinstance(r, helpers.Response), r
    return r


def check_retried(p, sqlstate):
    """The retry was counted (the gauges follow a worker timer)."""
    m = poll_metrics(p, lambda x: x.get("idemproxy_store_retries_total", 0,
                                        sqlstate=sqlstate) >= 1)
    assert m is not None, "no %s retry counted:\n%s" % (sqlstate, metrics(p).text)


def test_serialization_failure_is_sent_again(proxy, upstream, pg, ids):
    """A SERIALIZABLE claim whose insert meets a row that a concurrent
    transaction committed after the claim's snapshot fails with 40001;
    sent again it sees that row (expired: it takes it over) and executes."""
    p = start(proxy, pg, "-c default_transaction_isolation=serializable")
    assert retries(p, "40001") == 0
    key = ids.key()
    r = provoke(p, pg, ids, key, lambda tx: tx.commit())
    check_executed_once(p, upstream, ids.actor, key, r)
    check_retried(p, "40001")
    assert "could not serialize access" in pg.log_tail(), "PostgreSQL reported no 40001"


def test_deadlock_is_sent_again(proxy, upstream, pg, ids):
    """The claim's insert waits on the test's uncommitted insert of the
    same scope while holding its table lock; the test's transaction then
    asks for a SHARE lock on the table, which waits on the claim: a cycle.
    PostgreSQL aborts the claim's statement (40P01); idemproxy sends it
    again, it waits until the test's transaction rolls back, and executes."""
    p = start(proxy, pg, "-c deadlock_timeout=%s" % DEADLOCK_CHECK)
    assert retries(p, "40P01") == 0
    key = ids.key()

    def close_the_cycle(tx):
        locked = threading.Event()

        def share_lock():
            with tx.cursor() as cur:
                cur.execute("LOCK TABLE idempotency_records IN SHARE MODE")
            locked.set()
        t = threading.Thread(target=share_lock)
        t.start()
        t.join(WAIT_LIMIT)
        assert locked.is_set(), "the test's lock never came: was idemproxy the deadlock's victim?"
        tx.rollback()

    r = provoke(p, pg, ids, key, close_the_cycle)
    check_executed_once(p, upstream, ids.actor, key, r)
    check_retried(p, "40P01")
    assert "deadlock detected" in pg.log_tail(), "PostgreSQL reported no deadlock"
