"""`expired_keys refuse DURATION`: a key retried after its record's
retention gets 422 idempotency-key-expired naming when it completed, and
never reaches the upstream, while the sweeper keeps the record as a
tombstone (no headers, no body; `records show` says state "expired");
after the window the sweeper deletes it and the key runs again. The
default (`expired_keys run`) runs such a key again at once."""
import datetime
import json
import re
import time

from tests.lib.admin import admin, admin_proxy, metrics
from tests.lib.expect import assert_owner, course, problem
from tests.lib.records import records

SETTINGS = {"sweep_interval": "200ms", "workers": "1"}
ROUTES = """
route refuse.op {
    match        POST /api/refuse
    retention    1s
    expired_keys refuse 5s
}
route run.op {
    match        POST /api/run
    retention    1s
}
"""
WAIT = 30.0      # seconds any polled condition gets on a loaded machine
POLL = 0.1


def poll(what, cond):
    """cond()'s first true value, within WAIT seconds."""
    deadline = time.monotonic() + WAIT
    while True:
        v = cond()
        if v:
            return v
        assert time.monotonic() < deadline, "timed out waiting for " + what
        time.sleep(POLL)


def row(pg, key):
    rows = pg.query("SELECT state, completed_at, expires_at, response_status,"
                    " response_headers, response_body, tombstone_ms"
                    " FROM idempotency_records WHERE idem_key = %s", (key,))
    assert len(rows) <= 1, rows
    return rows[0] if rows else None


def rfc3339_ms(t):
    t = t.astimezone(datetime.timezone.utc)
    return t.strftime("%Y-%m-%dT%H:%M:%S.") + "%03dZ" % (t.microsecond // 1000)


def test_expired_key_is_refused_then_runs_again(binary, proxy, pg, upstream, ids):
    p = admin_proxy(proxy, SETTINGS, routes=ROUTES)
    key = ids.key()
    first = p.post("/api/refuse", key=key, actor=ids.actor, body=course())
    assert_owner(first)
    assert upstream.count(actor=ids.actor) == 1
    assert row(pg, key)["tombstone_ms"] == 5000

    # The sweeper makes it a tombstone once its retention has passed.
    tomb = poll("the tombstone", lambda: (row(pg, key) or {}).get("state") == "expired"
                and row(pg, key))
    assert tomb["response_headers"] is None and tomb["response_body"] is None, tomb
    assert tomb["response_status"] == 201 and tomb["completed_at"] is not None, tomb

    r = p.post("/api/refuse", key=key, actor=ids.actor, body=course())
    doc = problem(r, "idempotency-key-expired", 422)
    assert rfc3339_ms(tomb["completed_at"]) in doc["detail"], doc
    assert re.search(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", doc["detail"]), doc
    assert r.headers.get("X-Should-Retry") == "false", r
    # Another request under the same key is refused alike: the key was used.
    problem(p.post("/api/refuse", key=key, actor=ids.actor, body=course(title="other")),
            "idempotency-key-expired", 422)
    assert upstream.count(actor=ids.actor) == 1
    m = metrics(p)
    assert m.get("idemproxy_refusals_total", reason="expired_key") == 2, m.text
    assert m.get("idemproxy_sweeper_tombstoned_total") >= 1, m.text

    shown = records(binary, p.conf, "show", "h:" + ids.actor, "refuse.op", key)
    assert shown.returncode == 0, shown
    rec = json.loads(shown.stdout)["record"]
    assert rec["state"] == "expired" and rec["status"] == 201, rec
    assert rec["completed_at"] is not None, rec
    listed = records(binary, p.conf, "list", "--expired", "--limit", "1000")
    assert listed.returncode == 0, listed
    mine = [x for x in json.loads(listed.stdout)["records"] if x["key"] == key]
    assert [x["state"] for x in mine] == ["expired"], listed.stdout
    stuck = records(binary, p.conf, "list", "--limit", "1000")
    assert key not in stuck.stdout.decode(), stuck.stdout   # not an operator's to act on
    r = admin(p, "GET", "/records", {"state": "expired", "limit": "1000"})
    assert r.status == 200, r
    assert [x["state"] for x in r.json()["records"] if x["key"] == key] == ["expired"], r

    # After the window the sweeper deletes it, and the key runs again.
    poll("the tombstone's deletion", lambda: row(pg, key) is None)
    again = p.post("/api/refuse", key=key, actor=ids.actor, body=course())
    assert_owner(again)
    assert upstream.count(actor=ids.actor) == 2


def test_refused_before_the_sweeper_buries_it(proxy, pg, upstream, ids):
    """Between the expiry and the sweep the record is still completed in
    the table; the claim refuses the key all the same."""
    p = proxy({"sweep_interval": "off", "workers": "1"}, routes=ROUTES)
    key = ids.key()
    assert_owner(p.post("/api/refuse", key=key, actor=ids.actor, body=course()))
    poll("the retention's end", lambda: pg.query(
        "SELECT 1 FROM idempotency_records WHERE idem_key = %s AND expires_at < now()"
        " - interval '100 milliseconds'", (key,)))
    problem(p.post("/api/refuse", key=key, actor=ids.actor, body=course()),
            "idempotency-key-expired", 422)
    assert row(pg, key)["state"] == "completed"
    assert upstream.count(actor=ids.actor) == 1


def test_default_runs_an_expired_key_again(proxy, pg, upstream, ids):
    p = proxy(SETTINGS, routes=ROUTES)
    key = ids.key()
    first = p.post("/api/run", key=key, actor=ids.actor, body=course())
    assert_owner(first)
    assert row(pg, key)["tombstone_ms"] is None
    poll("the record's deletion", lambda: row(pg, key) is None)
    again = p.post("/api/run", key=key, actor=ids.actor, body=course())
    assert_owner(again)
    assert upstream.count(actor=ids.actor) == 2
