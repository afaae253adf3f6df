"""`idemproxy records`: an operator lists stuck records, releases one so a
retry runs again, or resolves one so retries replay the given response;
live and completed records are refused."""
import json
import subprocess

from tests.lib import helpers
from tests.lib.helpers import SlowOwner, course
from tests.lib.proxy import BASE_ROUTES, base_settings, render_conf
from tests.lib.records import CLI_TIMEOUT, make_unknown, records

OWNER_DELAY = 1.5       # seconds the upstream holds a SlowOwner (< upstream_timeout)
USAGE = 2


def document(r):
    """The JSON document the command printed: one line, newline-terminated."""
    assert r.stdout.endswith(b"\n") and r.stdout.count(b"\n") == 1, r
    return json.loads(r.stdout)


def refused(r, status, state):
    """r is a refusal (exit 1, stderr message) of a record in state."""
    assert r.returncode == 1, r
    assert r.stderr.startswith(b"records: "), r.stderr
    doc = document(r)
    if status == 404:
        assert doc == {"error": "no such record"}, doc
    else:
        assert doc["error"] == "record is not stuck", doc
        assert doc["record"]["state"] == state, doc
    return doc


def stored_actor(actor):
    return "h:" + actor


def listed(binary, conf, actor):
    """The records `records list` shows for actor."""
    r = records(binary, conf, "list", "--limit", "1000")
    assert r.returncode == 0, r
    doc = document(r)
    assert doc["count"] == len(doc["records"]), doc
    return [rec for rec in doc["records"] if rec["actor"] == stored_actor(actor)]


def test_release_lets_the_retry_run_again(binary, proxy, upstream, ids):
    p = proxy()
    key = ids.key()
    make_unknown(p, ids, key)
    assert upstream.count(actor=ids.actor) == 1

    mine = listed(binary, p.conf, ids.actor)
    assert [(rec["key"], rec["state"], rec["operation"]) for rec in mine] == \
        [(key, "unknown", "course.create")], mine

    r = records(binary, p.conf, "release", stored_actor(ids.actor), "course.create", key)
    assert r.returncode == 0, r
    doc = document(r)
    assert doc["released"]["state"] == "unknown" and doc["released"]["key"] == key, doc
    assert listed(binary, p.conf, ids.actor) == []

    again = p.post("/api/courses", key=key, actor=ids.actor, body=course())
    helpers.assert_owner(again)
    assert upstream.count(actor=ids.actor) == 2
    helpers.assert_replay_of(p.post("/api/courses", key=key, actor=ids.actor, body=course()),
                             again)
    assert upstream.count(actor=ids.actor) == 2


def test_resolve_is_replayed(binary, proxy, pg, upstream, ids, tmp_path):
    p = proxy()
    key = ids.key()
    make_unknown(p, ids, key)
    before = pg.records.one(ids.actor)
    body = b'{"id": 42, "note": "resolved by hand \xc3\xa9"}'
    path = tmp_path / "body.json"
    path.write_bytes(body)

    r = records(binary, p.conf, "resolve", stored_actor(ids.actor), "course.create", key,
                "201", "--body-file", str(path), "--content-type", "application/json")
    assert r.returncode == 0, r
    rec = document(r)["resolved"]
    assert rec["state"] == "completed" and rec["status"] == 201, rec
    assert rec["generation"] > before["generation"] and rec["lease_owner"] is None, rec
    assert rec["body"] == body.decode() and rec["body_encoding"] == "utf-8", rec
    assert rec["headers"] == "Content-Type: application/json\r\n", rec

    for _ in range(2):
        again = p.post("/api/courses", key=key, actor=ids.actor, body=course())
        assert again.status == 201, again
        assert again.headers.get("Idempotent-Replayed", "").lower() == "true", again
        assert again.headers.get("Content-Type") == "application/json", again
        assert again.body == body, again
    assert upstream.count(actor=ids.actor) == 1
    refused(records(binary, p.conf, "release", stored_actor(ids.actor), "course.create", key),
            409, "completed")


def test_resolve_binary_body_from_stdin(binary, proxy, upstream, ids):
    p = proxy()
    key = ids.key()
    make_unknown(p, ids, key)
    body = b"\xff\x00binary"

    r = records(binary, p.conf, "resolve", stored_actor(ids.actor), "course.create", key,
                "200", "--body-file", "-", "--retention", "1h", stdin=body)
    assert r.returncode == 0, r
    rec = document(r)["resolved"]
    assert rec["body_encoding"] == "base64" and rec["body"] == "/wBiaW5hcnk=", rec
    assert rec["headers"] == "", rec

    again = p.post("/api/courses", key=key, actor=ids.actor, body=course())
    assert again.status == 200 and again.body == body, again
    assert again.headers.get("Idempotent-Replayed", "").lower() == "true", again
    assert again.headers.get("Content-Type") is None, again
    assert upstream.count(actor=ids.actor) == 1


def test_expired_lease_is_listed(binary, pg, proxy, upstream, ids):
    p = proxy()
    key = ids.key()
    with SlowOwner(p, upstream, "/api/courses", key, ids.actor, OWNER_DELAY):
        assert pg.records.expire_lease(ids.actor) == 1
        mine = listed(binary, p.conf, ids.actor)
        assert len(mine) == 1, mine
        assert mine[0]["state"] == "in_progress" and mine[0]["lease_expired"] is True, mine
        assert mine[0]["lease_owner"], mine
        r = records(binary, p.conf, "show", stored_actor(ids.actor), "course.create", key)
        assert r.returncode == 0, r
        assert document(r)["record"]["lease_expired"] is True


def test_live_and_completed_records_are_refused(binary, proxy, upstream, ids):
    p = proxy()
    key = ids.key()
    scope = [stored_actor(ids.actor), "course.create", key]
    with SlowOwner(p, upstream, "/api/courses", key, ids.actor, OWNER_DELAY) as owner:
        assert listed(binary, p.conf, ids.actor) == []
        doc = refused(records(binary, p.conf, "release", *scope), 409, "in_progress")
        assert doc["record"]["lease_expired"] is False, doc
        refused(records(binary, p.conf, "resolve", *scope, "201"), 409, "in_progress")
    helpers.assert_owner(owner.response)
    refused(records(binary, p.conf, "release", *scope), 409, "completed")
    refused(records(binary, p.conf, "resolve", *scope, "201"), 409, "completed")
    helpers.assert_replay_of(p.post("/api/courses", key=key, actor=ids.actor, body=course()),
                             owner.response)
    assert upstream.count(actor=ids.actor) == 1


def test_missing_scope(binary, pg, ids):
    scope = [stored_actor(ids.actor), "course.create", ids.key()]
    for cmd in (["show"], ["release"]):
        refused(records(binary, pg.migrate_conf, *cmd, *scope), 404, None)
    refused(records(binary, pg.migrate_conf, "resolve", *scope, "201"), 404, None)


USAGE_ERRORS = {
    "no_command": [],
    "unknown_command": ["frobnicate"],
    "show_too_few": ["show", "h:a", "course.create"],
    "release_too_many": ["release", "h:a", "course.create", "k", "extra"],
    "resolve_no_status": ["resolve", "h:a", "course.create", "k"],
    "resolve_bad_status": ["resolve", "h:a", "course.create", "k", "99"],
    "resolve_status_not_number": ["resolve", "h:a", "course.create", "k", "20x"],
    "resolve_bad_retention": ["resolve", "h:a", "course.create", "k", "201",
                              "--retention", "5 parsecs"],
    "resolve_header_injection": ["resolve", "h:a", "course.create", "k", "201",
                                 "--content-type", "text/plain\r\nSet-Cookie: a=b"],
    "resolve_no_route_no_retention": ["resolve", "h:a", "no.such.route", "k", "201"],
    "list_limit_zero": ["list", "--limit", "0"],
    "list_limit_too_big": ["list", "--limit", "1001"],
    "option_for_another_command": ["show", "h:a", "course.create", "k", "--limit", "5"],
    "unknown_option": ["list", "--frobnicate"],
}


def test_usage_errors(binary, tmp_path):
    conf = tmp_path / "records.conf"
    conf.write_text(render_conf(
        base_settings(helpers.free_port(), "host=/nonexistent dbname=x"),
        BASE_ROUTES))
    for name, args in sorted(USAGE_ERRORS.items()):
        r = records(binary, str(conf), *args)
        assert r.returncode == USAGE, (name, r)
        assert r.stdout == b"", (name, r)
        assert b"usage: idemproxy records" in r.stderr, (name, r)


def test_help_and_errors(binary, tmp_path):
    r = subprocess.run([binary, "records", "--help"], capture_output=True, timeout=CLI_TIMEOUT)
    assert r.returncode == 0 and b"stored form" in r.stdout, r
    r = records(binary, str(tmp_path / "missing.conf"), "list")
    assert r.returncode == 1 and b"missing.conf" in r.stderr and r.stdout == b"", r
    conf = tmp_path / "nodb.conf"
    conf.write_text(render_conf(
        base_settings(helpers.free_port(), "host=/nonexistent dbname=x"),
        BASE_ROUTES))
    r = records(binary, str(conf), "list")
    assert r.returncode == 1 and r.stderr.startswith(b"records: cannot connect"), r
    assert r.stdout == b"", r
