"""`idemproxy migrate --hash-partitions N`: the record table becomes one
partitioned by hash on the scope (actor, operation, idem_key), every row
kept byte for byte, with the same columns, defaults, constraints, indexes,
storage parameters and grants; a second run with the same N says so, with
another N refuses; `migrate status` says how it is partitioned. Then the
real idemproxy runs against the partitioned table: claims, replays,
conflicts, in-progress duplicates, takeovers, the sweeper, and the
operator's `records` commands, counting the upstream's effects exactly."""
import json
import os
import re
import subprocess
import uuid

import psycopg2
import pytest

from tests.lib import helpers
from tests.lib.helpers import SlowOwner, assert_owner, assert_replay_of, course, problem, sql

PARTITIONS = 8
OTHER_PARTITIONS = 4
OWNER_DELAY = 1.5           # seconds the upstream holds a SlowOwner (< upstream_timeout)
SWEEP_INTERVAL = "200ms"
STALE_DELAY = 6             # seconds the upstream holds the owner the sweeper marks
OPERATION = "course.create"
FILLER_ROWS = 4000          # generate_series rows besides the hand-made ones
SEALED_KEY_ID = "k2026"
INDEXES = ["idempotency_records_expires_idx", "idempotency_records_lease_idx",
           "idempotency_records_pkey", "idempotency_records_tombstone_idx",
           "idempotency_records_unknown_idx"]
SHORT_ROUTE = """
route short.keep {
    match        POST /api/short
    retention    1s
}
"""
# Every column, in the order the comparisons read them.
COLUMNS = ("actor, operation, idem_key, fingerprint, state, lease_owner, lease_expires_at,"
           " generation, response_status, response_headers, response_body, body_omitted,"
           " created_at, completed_at, expires_at, response_sealed")
CREATE_INDEX_003 = ("CREATE INDEX CONCURRENTLY IF NOT EXISTS idempotency_records_lease_idx"
                    " ON idempotency_records (lease_expires_at) WHERE state = 'in_progress'")


# ---- a database of the test's own in the session cluster ----

@pytest.fixture
def part_db(pg):
    """An empty database in the session cluster; its conninfo."""
    name = "part_" + uuid.uuid4().hex[:12]
    sql(pg.conninfo, "CREATE DATABASE " + name)
    try:
        yield re.sub(r"dbname=\S+", "dbname=" + name, pg.conninfo)
    finally:
        sql(pg.conninfo, "DROP DATABASE IF EXISTS %s WITH (FORCE)" % name)


def write_conf(tmp_path, conninfo):
    path = tmp_path / ("part-%s.conf" % uuid.uuid4().hex[:8])
    path.write_text("listen 127.0.0.1:%d\nupstream http://127.0.0.1:%d\ndatabase \"%s\"\n"
                    % (helpers.free_port(), helpers.free_port(), conninfo))
    return str(path)


def run(binary, *args):
    r = subprocess.run([binary] + list(args), stdin=subprocess.DEVNULL, capture_output=True,
                       text=True, timeout=120)
    assert not helpers.sanitizer_report(binary, r.stderr), r.stderr
    return r


def partition(binary, conf, n):
    return run(binary, "migrate", "--hash-partitions", str(n), "-c", conf)


def snapshot(conninfo):
    """Every row, every column, in scope order; bytea as bytes."""
    rows = sql(conninfo, "SELECT %s FROM idempotency_records ORDER BY actor, operation, idem_key"
               % COLUMNS)
    return [tuple(v.tobytes() if isinstance(v, memoryview) else v for v in row) for row in rows]


def schema(conninfo):
    """What must be the same on a plain and a partitioned table: columns
    with types, defaults and nullability, constraints, indexes."""
    columns = sql(conninfo, "SELECT column_name, data_type, column_default, is_nullable"
                  " FROM information_schema.columns WHERE table_name = 'idempotency_records'"
                  " ORDER BY ordinal_position")
    constraints = sql(conninfo, "SELECT conname, contype, pg_get_constraintdef(oid)"
                      " FROM pg_constraint WHERE conrelid = 'idempotency_records'::regclass"
                      " ORDER BY conname")
    # A partitioned table's index is defined ON ONLY it (its partitions' are attached).
    indexes = sql(conninfo, "SELECT indexname, replace(indexdef, ' ON ONLY ', ' ON ')"
                  " FROM pg_indexes WHERE tablename = 'idempotency_records' ORDER BY indexname")
    return columns, constraints, indexes


def partitions_of(conninfo):
    return [r[0] for r in sql(conninfo, "SELECT c.relname FROM pg_inherits i"
                                        " JOIN pg_class c ON c.oid = i.inhrelid"
                                        " WHERE i.inhparent = 'idempotency_records'::regclass"
                                        " ORDER BY c.relname")]


def state_of(conninfo, actor, key):
    rows = sql(conninfo, "SELECT state, generation, tableoid::regclass::text"
                         " FROM idempotency_records WHERE actor = %s AND idem_key = %s",
               (actor, key))
    assert len(rows) <= 1, rows
    return rows[0] if rows else None


def populate(conninfo):
    """Rows in every state, with bytes a text column could not hold: header
    values with obs-text and CR LF, bodies with NUL and 0xFF, sealed blobs,
    an omitted body, NULL where a state leaves a column empty."""
    conn = psycopg2.connect(conninfo)
    conn.autocommit = True
    blob = bytes(range(256))
    try:
        with conn.cursor() as cur:
            for i in range(64):
                actor = "h:part-%d" % (i % 5)
                headers = b"Content-Type: application/json\r\nX-Obs: \x80\xfe\xff " + \
                    str(i).encode() + b"\r\n"
                body = blob[i:] + b"\x00" * i + blob[:i]
                fp = bytes([i]) * 32
                kind = i % 4
                if kind == 0:    # completed, replayable for a day
                    cur.execute(
                        "INSERT INTO idempotency_records (actor, operation, idem_key, fingerprint,"
                        " state, response_status, response_headers, response_body, created_at,"
                        " completed_at, expires_at) VALUES (%s, %s, %s, %s, 'completed', 201, %s,"
                        " %s, now() - interval '1 minute', now(), now() + interval '1 day')",
                        (actor, OPERATION, "done-%d" % i, fp, headers, body))
                elif kind == 1:  # completed, sealed, body omitted
                    cur.execute(
                        "INSERT INTO idempotency_records (actor, operation, idem_key, fingerprint,"
                        " state, response_status, response_headers, response_body, body_omitted,"
                        " response_sealed, completed_at, expires_at) VALUES (%s, %s, %s, %s,"
                        " 'completed', 200, %s, %s, true, %s, now(), now() + interval '1 hour')",
                        (actor, "order.pay", "sealed-%d" % i, fp, b"\x01" + body, b"\x02" + body,
                         SEALED_KEY_ID))
                elif kind == 2:  # in progress, lease live
                    cur.execute(
                        "INSERT INTO idempotency_records (actor, operation, idem_key, fingerprint,"
                        " state, lease_owner, lease_expires_at) VALUES (%s, %s, %s, %s,"
                        " 'in_progress', 'host:1:0', now() + interval '1 hour')",
                        (actor, OPERATION, "running-%d" % i, fp))
                else:            # unknown outcome
                    cur.execute(
                        "INSERT INTO idempotency_records (actor, operation, idem_key, fingerprint,"
                        " state, lease_owner) VALUES (%s, %s, %s, %s, 'unknown', NULL)",
                        (actor, "raw.op", "lost-%d\u00e9" % i, fp))
            cur.execute(
                "INSERT INTO idempotency_records (actor, operation, idem_key, fingerprint, state,"
                " response_status, response_headers, response_body, completed_at, expires_at)"
                " SELECT 'h:filler-' || (i %% 97), 'order.pay', md5(i::text), sha256(int4send(i)),"
                " 'completed', 201, convert_to('Location: /o/' || i || E'\\r\\n', 'UTF8'),"
                " convert_to(repeat('x', i %% 300), 'UTF8'), now(), now() + interval '1 day'"
                " FROM generate_series(1, %s) i", (FILLER_ROWS,))
    finally:
        conn.close()


# ---- the conversion ----

def test_conversion_keeps_every_row_and_the_schema(binary, pg, part_db, tmp_path):
    """A populated table converts in one go: every row byte for byte, each
    in one of N partitions (none left in the parent), the same columns,
    defaults, constraints and index names and definitions as a plain table,
    storage parameters on every partition, the grants on the parent; the
    generation default still draws from the sequence."""
    conf = write_conf(tmp_path, part_db)
    r = run(binary, "migrate", "-c", conf)
    assert r.returncode == 0, r
    populate(part_db)
    role = "part_reader_" + uuid.uuid4().hex[:8]
    sql(part_db, "CREATE ROLE " + role)
    try:
        sql(part_db, "GRANT SELECT, INSERT ON idempotency_records TO " + role)
        sql(part_db, "ALTER TABLE idempotency_records SET (autovacuum_vacuum_scale_factor = 0.02,"
                     " autovacuum_vacuum_insert_scale_factor = 0.05)")
        before, plain = snapshot(part_db), schema(part_db)
        assert len(before) == 64 + FILLER_ROWS
        assert {row[4] for row in before} == {"completed", "in_progress", "unknown"}
        top = sql(part_db, "SELECT max(generation) FROM idempotency_records")[0][0]

        r = partition(binary, conf, PARTITIONS)
        assert r.returncode == 0, r
        assert ("partitioned idempotency_records by hash (actor, operation, idem_key) into %d "
                "partitions: %d rows copied in " % (PARTITIONS, len(before))) in r.stdout, r.stdout
        assert "under an ACCESS EXCLUSIVE lock" in r.stdout and "analyzed" in r.stdout, r.stdout

        assert sql(part_db, "SELECT relkind FROM pg_class WHERE oid ="
                            " 'idempotency_records'::regclass") == [("p",)]
        assert sql(part_db, "SELECT pg_get_partkeydef('idempotency_records'::regclass)") == \
            [("HASH (actor, operation, idem_key)",)]
        assert snapshot(part_db) == before
        assert schema(part_db) == plain
        assert [name for name, _ in schema(part_db)[2]] == INDEXES
        assert partitions_of(part_db) == sorted("idempotency_records_p%d" % i
                                                for i in range(PARTITIONS))
        # Every row sits in a partition, spread over all of them.
        spread = dict(sql(part_db, "SELECT tableoid::regclass::text, count(*)"
                                   " FROM idempotency_records GROUP BY 1"))
        assert sorted(spread) == partitions_of(part_db), spread
        assert sum(spread.values()) == len(before)
        assert sql(part_db, "SELECT count(*) FROM ONLY idempotency_records") == [(0,)]
        # Each partition has its share of every index, and the storage parameters.
        for name in partitions_of(part_db):
            assert len(sql(part_db, "SELECT 1 FROM pg_indexes WHERE tablename = %s",
                           (name,))) == len(INDEXES), name
            opts = sql(part_db, "SELECT reloptions FROM pg_class WHERE relname = %s", (name,))
            assert sorted(opts[0][0]) == ["autovacuum_vacuum_insert_scale_factor=0.05",
                                          "autovacuum_vacuum_scale_factor=0.02"], opts
        grants = sql(part_db, "SELECT privilege_type FROM information_schema.role_table_grants"
                              " WHERE table_name = 'idempotency_records' AND grantee = %s"
                              " ORDER BY 1", (role,))
        assert grants == [("INSERT",), ("SELECT",)], grants
        # The default still takes generations from the sequence, above every earlier one.
        new = sql(part_db, "INSERT INTO idempotency_records (actor, operation, idem_key,"
                           " fingerprint, state) VALUES ('h:new', 'x', 'y', '\\x00', 'in_progress')"
                           " RETURNING generation")[0][0]
        assert new > top
        # The state CHECK holds on the partitioned table.
        with pytest.raises(psycopg2.errors.CheckViolation):
            sql(part_db, "INSERT INTO idempotency_records (actor, operation, idem_key,"
                         " fingerprint, state) VALUES ('h:bad', 'x', 'y', '\\x00', 'gone')")
    finally:
        sql(part_db, "DROP OWNED BY " + role)
        sql(part_db, "DROP ROLE " + role)


def test_rerun_status_and_other_counts(binary, part_db, tmp_path):
    """The same N again: said, exit 0. Another N: refused, exit 1, nothing
    changed. `migrate status` prints the partitioning and keeps its exit
    code; plain `migrate` finds nothing to do, so the concurrent index
    build of 003 (which a partitioned table refuses) never runs again."""
    conf = write_conf(tmp_path, part_db)
    r = run(binary, "migrate", "status", "-c", conf)
    assert r.returncode == 1 and "partitioned" not in r.stdout, r
    r = partition(binary, conf, PARTITIONS)    # an empty database: migrations, then the table
    assert r.returncode == 0, r
    assert r.stdout.startswith("applied 001_records\n"), r.stdout
    assert "0 rows copied" in r.stdout, r.stdout

    r = partition(binary, conf, PARTITIONS)
    assert r.returncode == 0, r
    assert r.stdout == ("database is up to date\nidempotency_records is already partitioned by"
                        " hash into %d partitions\n" % PARTITIONS), r.stdout

    r = partition(binary, conf, OTHER_PARTITIONS)
    assert r.returncode == 1, r
    assert r.stderr == ("migrate: idempotency_records is already partitioned by hash into %d"
                        " partitions, not %d: repartitioning is not supported\n"
                        % (PARTITIONS, OTHER_PARTITIONS)), r.stderr
    assert len(partitions_of(part_db)) == PARTITIONS

    r = run(binary, "migrate", "status", "-c", conf)
    assert r.returncode == 0, r
    lines = r.stdout.splitlines()
    assert "partitioned hash %d" % PARTITIONS in lines, r.stdout
    assert lines[-1] == "database is up to date", r.stdout
    assert len([l for l in lines if l.startswith("applied ")]) == \
        len([f for f in os.listdir(os.path.join(os.path.dirname(__file__), "..", "..", "sql"))
             if f.endswith(".sql")])

    r = run(binary, "migrate", "-c", conf)
    assert r.returncode == 0 and r.stdout == "database is up to date\n", r
    with pytest.raises(psycopg2.Error, match="cannot create index on partitioned table"):
        sql(part_db, CREATE_INDEX_003)

    # Pending migrations still show, and status still exits 1.
    sql(part_db, "DELETE FROM idemproxy_migrations WHERE version = 5")
    r = run(binary, "migrate", "status", "-c", conf)
    assert r.returncode == 1 and "partitioned hash %d" % PARTITIONS in r.stdout, r
    assert "pending  005_sealed" in r.stdout, r.stdout
    sql(part_db, "INSERT INTO idemproxy_migrations (version, name) VALUES (5, '005_sealed')")


def test_usage_errors(binary, tmp_path):
    conf = write_conf(tmp_path, "host=/nonexistent")
    for bad in ("1", "1025", "0", "x", "8x", ""):
        r = run(binary, "migrate", "--hash-partitions", bad, "-c", conf)
        assert r.returncode == 2, (bad, r)
        assert "--hash-partitions needs a number from 2 to 1024" in r.stderr, r.stderr
    r = run(binary, "migrate", "status", "--hash-partitions", "4", "-c", conf)
    assert r.returncode == 2 and "for migrate only" in r.stderr, r
    r = run(binary, "--hash-partitions", "4", "-c", conf)
    assert r.returncode == 2 and "for migrate only" in r.stderr, r
    r = run(binary, "migrate", "-c", conf, "--hash-partitions")
    assert r.returncode == 2 and "--hash-partitions needs a number" in r.stderr, r
    r = run(binary, "migrate", "--hash-partitions", "4", "-c", conf)
    assert r.returncode == 1 and r.stderr.startswith("migrate: cannot connect"), r


# ---- idemproxy on a partitioned table ----

def test_idemproxy_on_a_partitioned_table(binary, proxy, part_db, tmp_path, upstream, ids):
    """Claim and replay, conflict, in-progress duplicate, takeover of an
    expired completed record, `records` list, resolve and release, all on
    the partitioned table; every record lands in a partition; the upstream
    saw exactly one request per execution."""
    r = partition(binary, write_conf(tmp_path, part_db), OTHER_PARTITIONS)
    assert r.returncode == 0, r
    p = proxy({"sweep_interval": "off", "replay_cache": "0"}, routes=SHORT_ROUTE,
              database=part_db, wait_store=True)
    actor, stored = ids.actor, "h:" + ids.actor
    parts = partitions_of(part_db)

    # Claim, replay, conflict.
    key = ids.key()
    owner = p.post("/api/courses", key=key, actor=actor, body=course())
    assert_owner(owner)
    assert_replay_of(p.post("/api/courses", key=key, actor=actor, body=course()), owner)
    problem(p.post("/api/courses", key=key, actor=actor, body=course(title="Other")),
            "idempotency-conflict", 422)
    state, _, where = state_of(part_db, stored, key)
    assert state == "completed" and where in parts
    assert upstream.count(actor=actor) == 1

    # A duplicate while the owner runs.
    slow_key = ids.key()
    with SlowOwner(p, upstream, "/api/courses", slow_key, actor, OWNER_DELAY) as slow:
        problem(p.post("/api/courses", key=slow_key, actor=actor, body=course()),
                "operation-in-progress", 409)
    assert_owner(slow.response)
    assert_replay_of(p.post("/api/courses", key=slow_key, actor=actor, body=course()),
                     slow.response)
    assert upstream.count(actor=actor) == 2

    # A completed record past its retention is taken over (no sweeper runs
    # here, so the claim's lookup finds the row and replaces it).
    gen = state_of(part_db, stored, key)[1]
    sql(part_db, "UPDATE idempotency_records SET expires_at = now() - interval '1 second'"
                 " WHERE actor = %s AND idem_key = %s", (stored, key))
    again = p.post("/api/courses", key=key, actor=actor, body=course())
    assert_owner(again)
    assert again.body != owner.body
    state, new_gen, _ = state_of(part_db, stored, key)
    assert state == "completed" and new_gen > gen
    assert upstream.count(actor=actor, key=key) == 2
    assert upstream.count(actor=actor) == 3

    # Unknown outcomes: listed, one resolved, one released and run again.
    lost = [ids.key(), ids.key()]
    for k in lost:
        problem(p.post("/api/courses", key=k, actor=actor, body=course(),
                       headers=[("X-Test-Action", "reset")]), "upstream-error", 502)
        problem(p.post("/api/courses", key=k, actor=actor, body=course()),
                "outcome-unknown", 409)
    assert upstream.count(actor=actor) == 5
    r = run(binary, "records", "-c", p.conf, "list", "--limit", "1000")
    assert r.returncode == 0, r
    listed = sorted(rec["key"] for rec in json.loads(r.stdout)["records"]
                    if rec["actor"] == stored)
    assert listed == sorted(lost), r.stdout

    body = b"resolved \xff\x00"
    r = subprocess.run([binary, "records", "-c", p.conf, "resolve", stored, OPERATION, lost[0],
                        "200", "--body-file", "-"], input=body, capture_output=True, timeout=30)
    assert r.returncode == 0, r
    replay = p.post("/api/courses", key=lost[0], actor=actor, body=course())
    assert replay.status == 200 and replay.body == body, replay
    assert replay.headers.get("Idempotent-Replayed", "").lower() == "true", replay

    r = run(binary, "records", "-c", p.conf, "release", stored, OPERATION, lost[1])
    assert r.returncode == 0, r
    assert state_of(part_db, stored, lost[1]) is None
    assert_owner(p.post("/api/courses", key=lost[1], actor=actor, body=course()))
    assert upstream.count(actor=actor) == 6
    assert upstream.count(actor=actor, key=lost[0]) == 1
    assert upstream.count(actor=actor, key=lost[1]) == 2

    # Every record this test made is in a partition, none in the parent.
    where = {row[0] for row in sql(part_db, "SELECT tableoid::regclass::text"
                                            " FROM idempotency_records WHERE actor = %s",
                                   (stored,))}
    assert where and where <= set(parts), where
    assert sql(part_db, "SELECT count(*) FROM ONLY idempotency_records") == [(0,)]


def test_sweeper_on_a_partitioned_table(binary, proxy, part_db, tmp_path, upstream, ids):
    """The sweeper deletes a completed record past retention, marks an
    in_progress record whose lease ran out unknown (whose owner's late
    outcome still lands), and leaves an unknown record alone."""
    r = partition(binary, write_conf(tmp_path, part_db), PARTITIONS)
    assert r.returncode == 0, r
    p = proxy({"sweep_interval": SWEEP_INTERVAL, "upstream_timeout": "%ds" % (STALE_DELAY + 2)},
              routes=SHORT_ROUTE,
              database=part_db, wait_store=True)
    actor, stored = ids.actor, "h:" + ids.actor
    done_key, unknown_key, stale_key = ids.key(), ids.key(), ids.key()
    assert_owner(p.post("/api/short", key=done_key, actor=actor, body=course()))
    problem(p.post("/api/short", key=unknown_key, actor=actor, body=course(),
                   headers=[("X-Test-Action", "reset")]), "upstream-error", 502)
    stale_actor = actor + "-stale"
    # The stale owner is held long enough for the sweeper's ticks to have
    # deleted and marked, even on a loaded machine, before it answers.
    with SlowOwner(p, upstream, "/api/short", stale_key, stale_actor, STALE_DELAY):
        assert len(sql(part_db, "UPDATE idempotency_records SET lease_expires_at = now() -"
                                " interval '1 minute' WHERE idem_key = %s AND state ="
                                " 'in_progress' RETURNING 1", (stale_key,))) == 1
        assert helpers.poll(lambda: state_of(part_db, stored, done_key) is None
                            and (state_of(part_db, "h:" + stale_actor, stale_key) or [""])[0]
                            == "unknown"), \
            sql(part_db, "SELECT actor, idem_key, state FROM idempotency_records")
        assert state_of(part_db, stored, unknown_key)[0] == "unknown"
    assert helpers.poll(lambda: state_of(part_db, "h:" + stale_actor, stale_key)[0]
                        == "completed")
    assert state_of(part_db, stored, unknown_key)[0] == "unknown"
    assert upstream.count(actor=actor) == 2
    assert upstream.count(actor=stale_actor) == 1


def test_running_idemproxy_survives_the_conversion(binary, proxy, part_db, tmp_path, upstream,
                                                   ids):
    """An instance that prepared its statements against the plain table
    keeps working once the table is replaced by the partitioned one
    (PostgreSQL re-plans them): its earlier record replays, new keys are
    claimed, a conflict is a conflict."""
    conf = write_conf(tmp_path, part_db)
    assert run(binary, "migrate", "-c", conf).returncode == 0
    p = proxy({"replay_cache": "0"}, database=part_db, wait_store=True)
    key = ids.key()
    owner = p.post("/api/courses", key=key, actor=ids.actor, body=course())
    assert_owner(owner)
    assert_replay_of(p.post("/api/courses", key=key, actor=ids.actor, body=course()), owner)

    r = partition(binary, conf, OTHER_PARTITIONS)
    assert r.returncode == 0 and "1 rows copied" in r.stdout, r

    assert_replay_of(p.post("/api/courses", key=key, actor=ids.actor, body=course()), owner)
    problem(p.post("/api/courses", key=key, actor=ids.actor, body=course(title="Other")),
            "idempotency-conflict", 422)
    key2 = ids.key()
    second = p.post("/api/courses", key=key2, actor=ids.actor, body=course())
    assert_owner(second)
    assert_replay_of(p.post("/api/courses", key=key2, actor=ids.actor, body=course()), second)
    assert state_of(part_db, "h:" + ids.actor, key2)[2] in partitions_of(part_db)
    assert upstream.count(actor=ids.actor) == 2
