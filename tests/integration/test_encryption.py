"""Encryption at rest: with body_encryption, stored bodies and headers are
AES-256-GCM sealed under the first key of the file, each blob bound to which
blob it is, the scope, the status and the generation; every key opens;
records from before stay readable, while a plaintext row newer than
encryption's start is refused; stored headers are checked before any
replay. A record no key opens is answered outcome-unknown, never replayed
and never run again, unless its key id is one this instance has not loaded
yet (a rotation reaching it): 503 key-unavailable, a retry. Tampering is
done the way a database writer would, with SQL."""
import base64
import os
import signal
import time

import pytest
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from tests.lib import helpers
from tests.lib.admin import admin, admin_proxy, scope
from tests.lib.helpers import assert_owner, assert_replay_of, course, problem
from tests.lib.proxy import rewrite, wait_for_log
from tests.lib.records import make_unknown, records

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


# ---- what a blob is bound to ----

def sealed_owner(p, ids, pg):
    """An owner's sealed record; the owner's response and its key."""
    key = ids.key()
    owner, h = owner_with_marker(p, ids, key)
    assert row_text(pg, key)["response_sealed"] == "k1"
    return owner, h, key


def tampered(pg, statement, key):
    """Run an UPDATE of key's row (statement has one %s: the key)."""
    pg.query(statement + " RETURNING 1", (key,))


def refused_replay(p, ids, key, h, why):
    """The retry is outcome-unknown, never a replay, and the log says why."""
    problem(p.post("/api/courses", key=key, actor=ids.actor, body=course(), headers=h),
            "outcome-unknown", 409)
    helpers.poll(lambda: why in p.stderr_text())
    assert why in p.stderr_text(), p.stderr_tail()


TAG_FAILED = "authentication tag does not match"


def test_header_and_body_blobs_swapped_do_not_open(proxy, upstream, pg, ids, tmp_path):
    p = sealed_proxy(proxy, tmp_path, [keyline("k1")])
    _, h, key = sealed_owner(p, ids, pg)
    tampered(pg, "UPDATE idempotency_records SET response_headers = response_body,"
                 " response_body = response_headers WHERE idem_key = %s", key)
    refused_replay(p, ids, key, h, TAG_FAILED)
    assert upstream.count(key=key) == 1


def test_header_blob_copied_to_another_scope_does_not_open(proxy, upstream, pg, ids, tmp_path):
    p = sealed_proxy(proxy, tmp_path, [keyline("k1")])
    _, h, a = sealed_owner(p, ids, pg)
    _, _, b = sealed_owner(p, ids, pg)
    pg.query("UPDATE idempotency_records SET response_headers = (SELECT response_headers"
             " FROM idempotency_records WHERE idem_key = %s) WHERE idem_key = %s RETURNING 1",
             (a, b))
    refused_replay(p, ids, b, h, TAG_FAILED)
    assert upstream.count(key=a) == 1 and upstream.count(key=b) == 1


@pytest.mark.parametrize("change", [
    "response_status = 200",
    "generation = generation + 1",
    "response_body = NULL, body_omitted = true",
])
def test_a_changed_row_does_not_open(proxy, upstream, pg, ids, tmp_path, change):
    p = sealed_proxy(proxy, tmp_path, [keyline("k1")])
    _, h, key = sealed_owner(p, ids, pg)
    tampered(pg, "UPDATE idempotency_records SET %s WHERE idem_key = %%s" % change, key)
    refused_replay(p, ids, key, h, TAG_FAILED)
    assert upstream.count(key=key) == 1


def test_the_body_column_must_match_body_omitted(proxy, upstream, pg, ids, tmp_path):
    p = sealed_proxy(proxy, tmp_path, [keyline("k1")])
    _, h, key = sealed_owner(p, ids, pg)
    tampered(pg, "UPDATE idempotency_records SET response_body = NULL WHERE idem_key = %s",
             key)
    refused_replay(p, ids, key, h, "body column does not match body_omitted")
    assert upstream.count(key=key) == 1


# ---- plaintext rows while encryption is on ----

FORGED_BODY = b'{"forged": true}'


def forge_plaintext(pg, like, key, completed="now()"):
    """A completed plaintext row for key, the fingerprint and scope of like's
    row (so a retry of like's request with key matches it)."""
    pg.query("INSERT INTO idempotency_records (actor, operation, idem_key, fingerprint,"
             " state, generation, response_status, response_headers, response_body,"
             " body_omitted, created_at, completed_at, expires_at)"
             " SELECT actor, operation, %s, fingerprint, 'completed',"
             " nextval('idempotency_records_generation_seq'), 201,"
             " 'Content-Type: application/json\r\n', %s, false, " + completed + ", "
             + completed + ", now() + interval '1 hour'"
             " FROM idempotency_records WHERE idem_key = %s RETURNING 1",
             (key, FORGED_BODY, like))


def test_plaintext_row_written_while_encryption_is_on_is_refused(proxy, upstream, pg, ids,
                                                                 tmp_path):
    p = sealed_proxy(proxy, tmp_path, [keyline("k1")])
    _, h, a = sealed_owner(p, ids, pg)
    b = ids.key()
    forge_plaintext(pg, a, b)
    r = p.post("/api/courses", key=b, actor=ids.actor, body=course(), headers=h)
    assert FORGED_BODY not in r.body, r
    refused_replay(p, ids, b, h, "plaintext but completed after body_encryption was turned on")
    assert upstream.count(key=b) == 0 and upstream.count(key=a) == 1


def test_plaintext_rows_refused_once_retention_has_passed(proxy, upstream, pg, ids, tmp_path):
    """completed_at is the writer's to choose: a row that claims to be from
    before encryption is believed only while one from before could still be
    live, for the route's retention after encryption was turned on."""
    retention = 1.0
    started = time.monotonic()
    p = sealed_proxy(proxy, tmp_path, [keyline("k1")], {"retention": "1s"})
    _, h, a = sealed_owner(p, ids, pg)
    b = ids.key()
    forge_plaintext(pg, a, b, completed="now() - interval '1 day'")
    # Not a race: the rule is about how long encryption has been on here.
    time.sleep(max(0.0, started + retention + 0.2 - time.monotonic()))
    refused_replay(p, ids, b, h, "on here for longer than the route's retention")
    assert upstream.count(key=b) == 0


# ---- blobs of earlier versions ----

def ips1_blob(key, kid, scope_aad, plain):
    """A blob as versions before IPS2 sealed it: the scope alone as associated data."""
    nonce = os.urandom(12)
    return (b"IPS1" + bytes([len(kid)]) + kid.encode() + nonce +
            AESGCM(key).encrypt(nonce, plain, scope_aad))


def test_ips1_blobs_still_open(proxy, upstream, pg, ids, tmp_path):
    raw = os.urandom(32)
    line = "k1 %s\n" % base64.b64encode(raw).decode()
    p = proxy({"replay_cache": "0"})
    key = ids.key()
    owner, h = owner_with_marker(p, ids, key)
    p.stop()
    # The row as an earlier version stored it under k1.
    row = pg.query("SELECT actor, operation, response_headers, response_body FROM"
                   " idempotency_records WHERE idem_key = %s", (key,))[0]
    aad = b"\0".join([row["actor"].encode(), row["operation"].encode(), key.encode()])
    headers = ips1_blob(raw, "k1", aad, bytes(row["response_headers"]))
    body = ips1_blob(raw, "k1", aad, bytes(row["response_body"]))
    pg.query("UPDATE idempotency_records SET response_headers = %s, response_body = %s,"
             " response_sealed = 'k1' WHERE idem_key = %s RETURNING 1",
             (headers, body, key))
    keys = tmp_path / "old.keys"
    keys.write_text(line)
    rewrite(p, lambda t: t + "\nbody_encryption %s\n" % keys)
    p.start()
    assert_replay_of(p.post("/api/courses", key=key, actor=ids.actor, body=course(), headers=h),
                     owner)
    assert upstream.count(key=key) == 1


def test_a_record_of_an_older_binary_still_replays(proxy, upstream, pg, ids, tmp_path):
    """IDEMPROXY_OLD_BIN names a binary of an earlier version (IPS1 blobs)."""
    old = os.environ.get("IDEMPROXY_OLD_BIN")
    if not old:
        pytest.skip("IDEMPROXY_OLD_BIN is not set")
    p = sealed_proxy(proxy, tmp_path, [keyline("k1")])
    p.stop()
    new = p.bin
    p.bin = old
    p.start()
    key = ids.key()
    owner, h = owner_with_marker(p, ids, key)
    p.stop()
    stored = pg.query("SELECT encode(substr(response_body, 1, 4), 'escape') AS magic"
                      " FROM idempotency_records WHERE idem_key = %s", (key,))
    assert stored[0]["magic"] == "IPS1", stored
    p.bin = new
    p.start()
    assert_replay_of(p.post("/api/courses", key=key, actor=ids.actor, body=course(), headers=h),
                     owner)
    assert upstream.count(key=key) == 1


# ---- key rotation across instances ----

def keyed(proxy, tmp_path, name, lines):
    """A started proxy whose body_encryption file is tmp_path/NAME.keys."""
    f = tmp_path / (name + ".keys")
    f.write_text("".join(lines))
    p = proxy({"body_encryption": str(f), "replay_cache": "0"})
    p.keyfile = f
    return p


def reload_keys(p, lines):
    """Rewrite p's key file and reload; wait for the reload."""
    n = p.stderr_text().count("configuration reloaded")
    p.keyfile.write_text("".join(lines))
    p.signal(signal.SIGHUP)
    assert helpers.poll(lambda: p.stderr_text().count("configuration reloaded") > n), \
        p.stderr_tail()


def not_yet(p, ids, key, h):
    """The retry on p is 503 key-unavailable, a retry SDKs make."""
    r = p.post("/api/courses", key=key, actor=ids.actor, body=course(), headers=h)
    problem(r, "key-unavailable", 503)
    assert r.headers.get("X-Should-Retry") == "true", r
    assert int(r.headers.get("Retry-After")) >= 1, r


def test_a_key_another_instance_has_first_is_a_retry(proxy, upstream, pg, ids, tmp_path):
    k1, k2, k3 = keyline("k1"), keyline("k2"), keyline("k3")
    b = keyed(proxy, tmp_path, "b", [k1])
    a = keyed(proxy, tmp_path, "a", [k2, k1])  # rolled out to A before B
    key = ids.key()
    owner, h = owner_with_marker(a, ids, key)
    assert row_text(pg, key)["response_sealed"] == "k2"
    not_yet(b, ids, key, h)
    log = b.stderr_text()
    assert 'sealed with key \\"k2\\" cannot be read yet' in log, b.stderr_tail()
    assert "newer than this instance's keys: a key rotation is in progress" in log
    assert "no longer has" not in log
    # A reload that removes no key leaves it a rotation in progress.
    reload_keys(b, [k1, k3])
    not_yet(b, ids, key, h)
    # B gets the key: the record replays there, and it never ran twice.
    reload_keys(b, [k1, k3, k2])
    assert_replay_of(b.post("/api/courses", key=key, actor=ids.actor, body=course(),
                            headers=h), owner)
    assert upstream.count(key=key) == 1


def test_a_key_unknown_to_an_instance_started_later_is_outcome_unknown(proxy, upstream, pg, ids,
                                                                     tmp_path):
    k1, k2 = keyline("k1"), keyline("k2")
    a = keyed(proxy, tmp_path, "a", [k2, k1])
    key = ids.key()
    _, h = owner_with_marker(a, ids, key)
    b = keyed(proxy, tmp_path, "b", [k1])  # loaded its keys after the record completed
    refused_replay(b, ids, key, h, "older than this instance's keys: the key was removed")
    assert "no longer has" not in b.stderr_text()
    assert upstream.count(key=key) == 1


def test_two_phase_rotation_across_instances(proxy, upstream, pg, ids, tmp_path):
    k1, k2 = keyline("k1"), keyline("k2")
    a = keyed(proxy, tmp_path, "a", [k1])
    b = keyed(proxy, tmp_path, "b", [k1])
    # Phase 1: the new key as a decrypt-only line everywhere.
    reload_keys(a, [k1, k2])
    reload_keys(b, [k1, k2])
    before = ids.key()
    owner_before, h = owner_with_marker(a, ids, before)
    assert row_text(pg, before)["response_sealed"] == "k1"
    # Phase 2: the new key first, instance by instance.
    reload_keys(a, [k2, k1])
    key = ids.key()
    owner, _ = owner_with_marker(a, ids, key)
    assert row_text(pg, key)["response_sealed"] == "k2"
    assert_replay_of(b.post("/api/courses", key=key, actor=ids.actor, body=course(),
                            headers=h), owner)
    reload_keys(b, [k2, k1])
    assert_replay_of(b.post("/api/courses", key=before, actor=ids.actor, body=course(),
                            headers=h), owner_before)
    assert upstream.count(key=key) == 1 and upstream.count(key=before) == 1
    assert "cannot be read" not in a.stderr_text() + b.stderr_text()


# ---- stored headers ----

@pytest.mark.parametrize("headers", [
    "Content-Type: application/json\r\nSet-Cookie: session=attacker\r\n",
    "Location: /x\r\nSet-Cookie: session=attacker\r\n",
    "Location: /x\nSet-Cookie: session=attacker\r\n",
    "Location: /x\rSet-Cookie: session=attacker\r\n",
    "Content-Type: text/html\r\n\r\n<script>alert(1)</script>",
    "Content-Length: 0\r\n",
    "Transfer-Encoding: chunked\r\n",
    "Content-Type: application/json",
    "Content Type: application/json\r\n",
])
def test_stored_headers_that_split_a_response_are_not_replayed(proxy, upstream, pg, ids,
                                                               headers):
    p = proxy({"replay_cache": "0"})
    key = ids.key()
    assert_owner(p.post("/api/courses", key=key, actor=ids.actor, body=course()))
    pg.query("UPDATE idempotency_records SET response_headers = %s WHERE idem_key = %s"
             " RETURNING 1", (headers, key))
    refused_replay(p, ids, key, (), "stored record is not replayed")
    assert upstream.count(key=key) == 1


def test_stored_headers_with_a_sealed_split_are_not_replayed(proxy, upstream, pg, ids,
                                                             tmp_path):
    """A sealed record is checked after it opens (a writer with the key)."""
    raw = os.urandom(32)
    p = sealed_proxy(proxy, tmp_path, ["k1 %s\n" % base64.b64encode(raw).decode()])
    _, h, key = sealed_owner(p, ids, pg)
    row = pg.query("SELECT actor, operation FROM idempotency_records WHERE idem_key = %s",
                   (key,))[0]
    aad = b"\0".join([row["actor"].encode(), row["operation"].encode(), key.encode()])
    blob = ips1_blob(raw, "k1", aad, b"Location: /x\nSet-Cookie: session=attacker\r\n")
    pg.query("UPDATE idempotency_records SET response_headers = %s WHERE idem_key = %s"
             " RETURNING 1", (blob, key))
    refused_replay(p, ids, key, h, "a header value holds CR, LF, NUL")
    assert upstream.count(key=key) == 1


def test_headers_a_route_stores_still_replay(proxy, upstream, ids):
    p = proxy({"replay_cache": "0"}, routes="""
route kept.headers {
    match          POST /api/kept
    store_headers  X-Request-Cost
}
""")
    key = ids.key()
    h = [("X-Test-Header", "X-Request-Cost: 7\tunits"), ("X-Test-Header", "ETag: \"\xe9\"")]
    owner = p.post("/api/kept", key=key, actor=ids.actor, body=course(), headers=h)
    assert_owner(owner)
    again = p.post("/api/kept", key=key, actor=ids.actor, body=course(), headers=h)
    assert_replay_of(again, owner)
    assert again.headers.get("X-Request-Cost") == "7\tunits", again
    assert upstream.count(key=key) == 1


# ---- an operator's resolve ----

def sealed_columns(pg, key):
    return pg.query("SELECT response_sealed,"
                    " position('Content-Type'::bytea in response_headers) AS h,"
                    " position('manual'::bytea in response_body) AS b"
                    " FROM idempotency_records WHERE idem_key = %s", (key,))[0]


def test_resolve_over_http_is_sealed(proxy, upstream, pg, ids, tmp_path):
    p = sealed_proxy(proxy, tmp_path, [keyline("k1")])
    key = ids.key()
    make_unknown(p, ids, key)
    body = b'{"id":"manual"}'
    r = admin(p, "POST", "/records/resolve", scope(ids.actor, key, status=201), body=body,
              headers=[("Content-Type", "application/json")])
    assert r.status == 200, r
    rec = r.json()["resolved"]
    assert rec["sealed"] == "k1" and rec["body"] is None and rec["headers"] is None, rec
    assert sealed_columns(pg, key) == {"response_sealed": "k1", "h": 0, "b": 0}
    again = p.post("/api/courses", key=key, actor=ids.actor, body=course())
    assert again.status == 201 and again.body == body, again
    assert again.headers.get("Idempotent-Replayed") == "true", again
    assert again.headers.get("Content-Type") == "application/json", again
    assert upstream.count(key=key) == 1


def test_resolve_from_the_command_line_is_sealed(binary, proxy, upstream, pg, ids, tmp_path):
    p = sealed_proxy(proxy, tmp_path, [keyline("k1")])
    key = ids.key()
    make_unknown(p, ids, key)
    body = b'{"id":"manual"}'
    r = records(binary, p.conf, "resolve", "h:" + ids.actor, "course.create", key, "201",
                "--body-file", "-", "--content-type", "application/json", stdin=body)
    assert r.returncode == 0, r
    assert sealed_columns(pg, key) == {"response_sealed": "k1", "h": 0, "b": 0}
    again = p.post("/api/courses", key=key, actor=ids.actor, body=course())
    assert again.status == 201 and again.body == body, again
    assert again.headers.get("Idempotent-Replayed") == "true", again
    assert upstream.count(key=key) == 1
