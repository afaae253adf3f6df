"""Encryption at rest (DESIGN section 9): with body_encryption, stored
bodies and headers are AES-256-GCM sealed under the first key of the file;
every key opens; records from before stay readable; a record no key opens
is answered outcome-unknown, never replayed and never run again."""
import base64
import os
import signal

import helpers
from helpers import assert_owner, assert_replay_of, course, problem
from test_admin import admin, admin_proxy
from test_reload import rewrite, wait_for_log

MARKER = "personal-data-8c1f2e"


def keyline(kid):
    return "%s %s\n" % (kid, base64.b64encode(os.urandom(32)).decode())


def sealed_proxy(proxy, tmp_path, lines, settings=None):
    f = tmp_path / "body.keys"
    f.write_text("# keys: the first seals, all open\n" + "".join(lines))
    s = {"body_encryption": str(f), "replay_cache": "0"}  # every replay reads the store
    s.update(settings or {})
    p = admin_proxy(proxy, s)
    p.keyfile = f
    return p


def owner_with_marker(p, ids, key):
    """An owner whose stored response carries MARKER in its body and a header."""
    h = [("X-Test-Body", '{"name":"%s"}' % MARKER), ("X-Test-Header", "ETag: \"%s\"" % MARKER)]
    r = p.post("/api/courses", key=key, actor=ids.actor, body=course(), headers=h)
    assert_owner(r)
    assert MARKER.encode() in r.body
    return r, h


def row_text(pg, key):
    rows = pg.query("SELECT t::text AS t, encode(response_body, 'escape') AS b,"
                    " encode(response_headers, 'escape') AS h, response_sealed"
                    " FROM idempotency_records t WHERE idem_key = %s", (key,))
    assert len(rows) == 1
    return rows[0]


def test_marker_never_stored_and_replay_works(proxy, upstream, pg, ids, tmp_path):
    k1 = keyline("k1")
    p = sealed_proxy(proxy, tmp_path, [k1])
    key = ids.key()
    owner, h = owner_with_marker(p, ids, key)
    row = row_text(pg, key)
    for column in ("t", "b", "h"):
        assert MARKER not in row[column], (column, row[column][:200])
        assert MARKER.encode().hex() not in row[column], column
    assert row["response_sealed"] == "k1"
    # The records API shows the key id, never the sealed headers and body.
    r = admin(p, "GET", "/records/scope", {"actor": "h:" + ids.actor,
                                           "operation": "course.create", "key": key})
    rec = r.json()["record"]
    assert rec["sealed"] == "k1" and rec["headers"] is None and rec["body"] is None, rec
    assert rec["state"] == "completed" and rec["status"] == 201, rec
    again = p.post("/api/courses", key=key, actor=ids.actor, body=course(), headers=h)
    assert_replay_of(again, owner)
    assert ('"%s"' % MARKER) == again.headers.get("ETag")
    assert upstream.count(key=key) == 1
    assert MARKER not in p.stderr_text()


def test_rotation_and_a_removed_key(proxy, upstream, pg, ids, tmp_path):
    k1, k2 = keyline("k1"), keyline("k2")
    p = sealed_proxy(proxy, tmp_path, [k1])
    a = ids.key()
    owner_a, h = owner_with_marker(p, ids, a)
    # A new first key seals from now on; k1 still opens.
    p.keyfile.write_text(k2 + k1)
    p.signal(signal.SIGHUP)
    wait_for_log(p, "configuration reloaded")
    b = ids.key()
    owner_b, _ = owner_with_marker(p, ids, b)
    assert row_text(pg, a)["response_sealed"] == "k1"
    assert row_text(pg, b)["response_sealed"] == "k2"
    assert_replay_of(p.post("/api/courses", key=a, actor=ids.actor, body=course(), headers=h),
                     owner_a)
    # k1 removed: its records are outcome-unknown, not replayed, not run again.
    p.keyfile.write_text(k2)
    p.signal(signal.SIGHUP)
    helpers.poll(lambda: p.stderr_text().count("configuration reloaded") >= 2)
    problem(p.post("/api/courses", key=a, actor=ids.actor, body=course(), headers=h),
            "outcome-unknown", 409)
    assert 'sealed with key \\"k1\\" cannot be read' in p.stderr_text(), p.stderr_tail()
    assert_replay_of(p.post("/api/courses", key=b, actor=ids.actor, body=course(), headers=h),
                     owner_b)
    assert upstream.count(key=a) == 1 and upstream.count(key=b) == 1


def test_plaintext_records_from_before_are_read(proxy, upstream, pg, ids, tmp_path):
    p = proxy({"replay_cache": "0"})
    key = ids.key()
    owner, h = owner_with_marker(p, ids, key)
    assert row_text(pg, key)["response_sealed"] is None
    f = tmp_path / "body.keys"
    f.write_text(keyline("k1"))
    rewrite(p, lambda t: t + "\nbody_encryption %s\n" % f)
    p.signal(signal.SIGHUP)
    wait_for_log(p, "configuration reloaded")
    assert_replay_of(p.post("/api/courses", key=key, actor=ids.actor, body=course(), headers=h),
                     owner)
    assert upstream.count(key=key) == 1


def test_a_record_moved_to_another_scope_does_not_open(proxy, upstream, pg, ids, tmp_path):
    p = sealed_proxy(proxy, tmp_path, [keyline("k1")])
    a, b = ids.key(), ids.key()
    owner_a, h = owner_with_marker(p, ids, a)
    owner_b, _ = owner_with_marker(p, ids, b)
    # Someone with write access to the table swaps b's sealed body for a's.
    pg.query("UPDATE idempotency_records SET response_body = (SELECT response_body FROM"
             " idempotency_records WHERE idem_key = %s) WHERE idem_key = %s RETURNING 1", (a, b))
    problem(p.post("/api/courses", key=b, actor=ids.actor, body=course(), headers=h),
            "outcome-unknown", 409)
    assert "authentication tag" in p.stderr_text()
    assert upstream.count(key=b) == 1


def test_check_reports_a_bad_key_file(binary, tmp_path):
    keys = tmp_path / "k"
    keys.write_text(keyline("k1") + "k2 c2hvcnQ=\n")
    conf = tmp_path / "c.conf"
    r = helpers.check_config(binary, conf, "upstream http://127.0.0.1:1\nactor header X\n"
                             "body_encryption k\nroute r {\n    match POST /r\n}\n")
    assert r.returncode == 1, r
    assert r.stderr.startswith('%s:3: body encryption keys "%s": line 2: ' % (conf, keys)), \
        r.stderr
    assert "c2hvcnQ" not in r.stderr
