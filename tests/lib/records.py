"""idemproxy's records from a test: the record table read and written
with SQL (Records, sql, record_state, record_status, record_text), the
command `idemproxy records` (records) and a record left unknown
(make_unknown)."""
import subprocess

from tests.lib import procs
from tests.lib.expect import course, problem

CLI_TIMEOUT = 30


# ---- the record table ----

class Records:
    """Access to idemproxy's record table, whatever its exact column names
    and value encodings: the table is the one with `state` and
    `lease_expires_at` columns, and rows are found by any text column that
    contains a value (a test's unique actor or key; the store may prefix
    it, e.g. with the actor's source)."""

    def __init__(self, conninfo):
        self.conninfo = conninfo
        self._table = None

    def connect(self):
        import psycopg2
        conn = psycopg2.connect(self.conninfo, connect_timeout=5)
        conn.autocommit = True
        return conn

    def query(self, sql, args=()):
        conn = self.connect()
        try:
            with conn.cursor() as cur:
                cur.execute(sql, args)
                if cur.description is None:
                    return []
                names = [d[0] for d in cur.description]
                return [dict(zip(names, row)) for row in cur.fetchall()]
        finally:
            conn.close()

    def table(self):
        if self._table is None:
            rows = self.query("""
                SELECT c.table_schema, c.table_name
                  FROM information_schema.columns c
                 WHERE c.column_name IN ('state', 'lease_expires_at')
                   AND c.table_schema NOT IN ('pg_catalog', 'information_schema')
                 GROUP BY 1, 2 HAVING count(*) = 2""")
            assert len(rows) == 1, "cannot tell the record table: %r" % rows
            cols = self.query("""
                SELECT column_name, data_type FROM information_schema.columns
                 WHERE table_schema = %s AND table_name = %s""",
                              (rows[0]["table_schema"], rows[0]["table_name"]))
            text = [c["column_name"] for c in cols
                    if c["data_type"] in ("text", "character varying", "USER-DEFINED")]
            ident = '"%s"."%s"' % (rows[0]["table_schema"], rows[0]["table_name"])
            self._table = (ident, text)
        return self._table

    def _match(self):
        """SQL condition: some text column contains %(v)s."""
        _, text = self.table()
        return " OR ".join('strpos("%s"::text, %%(v)s) > 0' % c for c in text)

    def rows(self, value):
        """Rows with a text column containing value (e.g. the actor)."""
        ident, _ = self.table()
        cond = self._match()
        return self.query("SELECT * FROM %s WHERE %s" % (ident, cond), {"v": value})

    def one(self, value):
        rows = self.rows(value)
        assert len(rows) == 1, "expected one record for %r, got %r" % (value, rows)
        return rows[0]

    def expire_lease(self, value):
        """Move the lease of value's in_progress record into the past."""
        ident, _ = self.table()
        cond = self._match()
        conn = self.connect()
        try:
            with conn.cursor() as cur:
                cur.execute("UPDATE %s SET lease_expires_at = now() - interval '1 minute' "
                            "WHERE state::text = 'in_progress' AND (%s)" % (ident, cond),
                            {"v": value})
                return cur.rowcount
        finally:
            conn.close()


def sql(conninfo, text, args=()):
    """Run one statement (autocommit) on its own connection; its rows, []
    when it returns none."""
    import psycopg2
    conn = psycopg2.connect(conninfo)
    conn.autocommit = True
    try:
        with conn.cursor() as cur:
            cur.execute(text, args)
            return cur.fetchall() if cur.description else []
    finally:
        conn.close()


def record_state(row):
    return str(row["state"])


def record_status(row):
    for name in ("response_status", "status", "status_code"):
        if name in row and row[name] is not None:
            return int(row[name])
    return None


def record_text(row):
    """Every column of the row as one string, for 'never stored' checks."""
    parts = []
    for v in row.values():
        if isinstance(v, memoryview):
            v = v.tobytes()
        if isinstance(v, bytes):
            v = v.decode("utf-8", "replace")
        parts.append(str(v))
    return "\n".join(parts)


# ---- the records command ----

def records(binary, conf, *args, stdin=b""):
    """Run `idemproxy records -c conf ARGS`; stdout and stderr as bytes."""
    r = subprocess.run([binary, "records", "-c", conf] + list(args), input=stdin,
                       capture_output=True, timeout=CLI_TIMEOUT)
    assert not procs.sanitizer_report(binary, r.stderr.decode("utf-8", "replace")), r.stderr
    return r


def make_unknown(p, ids, key):
    """An owner whose upstream resets the connection: a 502 and an unknown
    record; a retry is held with outcome-unknown."""
    r = p.post("/api/courses", key=key, actor=ids.actor, body=course(),
               headers=[("X-Test-Action", "reset")])
    problem(r, "upstream-error", 502)
    problem(p.post("/api/courses", key=key, actor=ids.actor, body=course()),
            "outcome-unknown", 409)
