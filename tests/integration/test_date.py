"""Date on every response idemproxy sends (RFC 9110 6.6.1): a relayed
response keeps the upstream's Date or gets one; a replay is dated when it
is sent, never with the stored response's time; idemproxy's own answers
and the admin listener's are dated. Exactly one Date each, an IMF-fixdate
close to the test's own clock."""
import email.utils
import time

import psycopg2

from tests.lib import http1
from tests.lib.admin import OPERATION, admin, admin_proxy
from tests.lib.helpers import assert_owner, assert_replay_of, course, problem
from tests.lib.proxy import BASE_ROUTES, base_settings, check_config, render_conf
from tests.lib.streams import act

OLD = "Sun, 06 Nov 1994 08:49:37 GMT"   # the upstream's own Date, when it sends one
CLOCK_SLACK = 30.0                      # seconds between idemproxy's clock and the test's
NO_CACHE = {"replay_cache": "0"}        # replays from the store


def dated_now(r):
    """r carries exactly one Date, an IMF-fixdate within CLOCK_SLACK of now."""
    dates = r.headers.get_all("Date")
    assert len(dates) == 1, (dates, r)
    assert dates[0].endswith(" GMT") and len(dates[0]) == 29, dates
    t = email.utils.parsedate_to_datetime(dates[0]).timestamp()
    assert abs(t - time.time()) < CLOCK_SLACK, (dates[0], time.time())
    return dates[0]


def upstream_date(value=OLD):
    return ("X-Test-Header", "Date: %s" % value)


def test_relayed_responses_keep_the_upstreams_date_or_get_one(proxy, upstream, ids):
    p = proxy()
    r = p.request("GET", "/things", [upstream_date()])
    assert r.status == 200 and r.headers.get_all("Date") == [OLD], r
    dated_now(p.request("GET", "/things"))
    # Streamed (chunked) and bodiless relays too.
    r = p.request("GET", "/stream", [act("stream-chunked:100000")])
    assert r.status == 200 and len(r.body) == 100000
    dated_now(r)
    dated_now(p.request("HEAD", "/things"))
    assert upstream.count(path="/things") == 3


def test_a_replay_is_dated_when_sent(proxy, upstream, ids):
    """The owner's response keeps the upstream's Date; its replay (from the
    store) carries the current one, never the stored time."""
    p = proxy(NO_CACHE)
    key = ids.key()
    first = p.post("/api/courses", key=key, actor=ids.actor, body=course(),
                   headers=[upstream_date()])
    assert_owner(first)
    assert first.headers.get_all("Date") == [OLD], first
    again = p.post("/api/courses", key=key, actor=ids.actor, body=course())
    assert_replay_of(again, first)
    assert dated_now(again) != OLD
    assert upstream.count(actor=ids.actor) == 1


def test_a_stored_date_is_dropped_from_the_replay(proxy, pg, upstream, ids):
    """A record that holds a Date line (stored when store_headers could
    name it) replays with the current Date only."""
    p = proxy(NO_CACHE)
    key = ids.key()
    first = p.post("/api/courses", key=key, actor=ids.actor, body=course())
    assert_owner(first)
    with psycopg2.connect(pg.conninfo) as conn, conn.cursor() as cur:
        cur.execute("UPDATE idempotency_records SET response_headers = "
                    "convert_to('Date: ' || %s || E'\\r\\n', 'UTF8') || response_headers || "
                    "convert_to('date: ' || %s || E'\\r\\n', 'UTF8') "
                    "WHERE actor = %s AND operation = %s AND idem_key = %s",
                    (OLD, OLD, "h:" + ids.actor, OPERATION, key))
        assert cur.rowcount == 1
    conn.close()
    again = p.post("/api/courses", key=key, actor=ids.actor, body=course())
    assert_replay_of(again, first)
    assert dated_now(again) != OLD
    assert again.headers.get("Content-Type") == first.headers.get("Content-Type")
    assert upstream.count(actor=ids.actor) == 1


def test_idemproxys_own_answers_are_dated(proxy, upstream, ids):
    p = proxy()
    key = ids.key()
    assert_owner(p.post("/api/courses", key=key, actor=ids.actor, body=course()))
    conflict = p.post("/api/courses", key=key, actor=ids.actor, body=course("other"))
    problem(conflict, "idempotency-conflict", 422)
    dated_now(conflict)
    no_actor = p.post("/api/courses", key=ids.key(), body=course())
    assert no_actor.status == 401, no_actor
    dated_now(no_actor)
    bad, _ = http1.raw_exchange(p.port, b"POST /api/courses HTTP/1.1\r\nHost: x\r\n"
                                        b"Content-Length: 1\r\nContent-Length: 2\r\n\r\nab")
    assert bad.status == 400, bad
    dated_now(bad)
    assert upstream.count(actor=ids.actor) == 1


def test_the_admin_listeners_answers_are_dated(proxy):
    p = admin_proxy(proxy)
    for path in ("/healthz", "/readyz", "/metrics", "/nowhere"):
        dated_now(admin(p, "GET", path))


def test_store_headers_cannot_name_date(binary, tmp_path):
    settings = base_settings(1, "host=/nonexistent dbname=x")
    route = "route d.op {\n    match POST /api/d\n    store_headers Date\n}\n"
    r = check_config(binary, tmp_path / "d.conf", render_conf(settings, route + BASE_ROUTES))
    assert r.returncode == 1, r
    assert 'header "Date" is never stored (a replay is dated when it is sent)' in r.stderr, r
