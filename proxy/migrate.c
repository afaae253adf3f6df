/*
 * Schema migrations for the `migrate` command. This is the only module that
 * uses blocking libpq: it runs before any event loop exists and never in
 * the proxy. Each compiled-in sql/NNN_*.sql not yet recorded in
 * idemproxy_migrations is applied in its own transaction, under a
 * transaction-scoped advisory lock so concurrent migrators take turns (and
 * nothing is left locked on a pgbouncer server connection).
 *
 * A file whose first line is MIGRATION_NO_TRANSACTION builds indexes with
 * CREATE INDEX CONCURRENTLY, which cannot run in a transaction: its
 * statements run one by one, each idempotent (IF NOT EXISTS), so that
 * concurrent migrators or a rerun after a crash do no harm; an index an
 * interrupted build left invalid is reported, not recorded as done.
 *
 * `migrate --hash-partitions N` then turns idempotency_records into a table
 * partitioned by hash on the whole scope (actor, operation, idem_key), the
 * primary key, so that every statement, which names whole scopes, touches
 * one partition per scope. The conversion is one transaction under an
 * ACCESS EXCLUSIVE lock: a new partitioned table like the old one (columns,
 * defaults, CHECK constraints), N partitions with the old table's storage
 * parameters, the rows copied, the old table dropped, then its primary key,
 * indexes (their definitions and names as the catalog has them), grants and
 * owner given to the new one. A later migration that builds an index on a
 * partitioned table cannot use CREATE INDEX CONCURRENTLY on it: it builds
 * one per partition concurrently and attaches them to an index created ON
 * ONLY the parent.
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <libpq-fe.h>

#include "proxy/clock.h"
#include "proxy/migrate.h"
#include "proxy/migrations.h"

#define MIGRATE_MSG_MAX	   1024
#define MIGRATE_NUM_MAX	   32
#define MIGRATE_KEYDEF_MAX 256

static const char migrate_sql_migrate_lock[] = "SELECT pg_advisory_xact_lock(7594869612733442169)";

static const char migrate_sql_migrations_table[] =
    "CREATE TABLE IF NOT EXISTS idemproxy_migrations ("
    " version integer PRIMARY KEY, name text NOT NULL,"
    " applied_at timestamptz NOT NULL DEFAULT now())";

static const char migrate_sql_invalid_indexes[] =
    "SELECT c.relname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid"
    " WHERE NOT i.indisvalid AND i.indrelid IN (SELECT oid FROM pg_class"
    " WHERE relname LIKE 'idempotency\\_%' OR relname LIKE 'idemproxy\\_%')";

/*
 * How idempotency_records is partitioned, read from the catalog only (no
 * row when the table does not exist): whether it is a partitioned table,
 * its partition key as pg_get_partkeydef prints it, its number of
 * partitions, and the smallest and largest hash modulus among them.
 */
static const char migrate_sql_partitioning[] =
    "SELECT c.relkind = 'p', coalesce(pg_get_partkeydef(c.oid), ''), count(p.oid),"
    " coalesce(min(b.modulus), 0), coalesce(max(b.modulus), 0)"
    " FROM pg_class c LEFT JOIN pg_inherits i ON i.inhparent = c.oid"
    " LEFT JOIN pg_class p ON p.oid = i.inhrelid"
    " LEFT JOIN LATERAL (SELECT (regexp_match(pg_get_expr(p.relpartbound, p.oid),"
    "  'modulus ([0-9]+)'))[1]::int AS modulus) b ON true"
    " WHERE c.oid = to_regclass('idempotency_records') GROUP BY c.oid, c.relkind";

/* Citus on this server: its version, no row without it. */
static const char migrate_sql_citus[] =
    "SELECT extversion FROM pg_extension WHERE extname = 'citus'";

/* How Citus distributes idempotency_records (only asked with Citus there):
 * its distribution column and shard count, no row when it is a local table. */
static const char migrate_sql_distribution[] =
    "SELECT column_to_column_name(p.logicalrelid, p.partkey),"
    " (SELECT count(*) FROM pg_dist_shard s WHERE s.logicalrelid = p.logicalrelid),"
    " (SELECT count(DISTINCT groupid) FROM pg_dist_node WHERE noderole = 'primary'"
    "  AND shouldhaveshards AND isactive)"
    " FROM pg_dist_partition p WHERE p.logicalrelid = to_regclass('idempotency_records')"
    " AND p.partmethod = 'h'";

/* The records' distribution column: in every statement's scope, so each
 * names the shard of each scope it touches. */
#define MIGRATE_DIST_COLUMN "idem_key"

static const char migrate_sql_distribute[] =
    "SELECT create_distributed_table('idempotency_records', '" MIGRATE_DIST_COLUMN "')";

/* The partition key --hash-partitions makes, as pg_get_partkeydef prints it. */
#define MIGRATE_HASH_KEYDEF "HASH (actor, operation, idem_key)"

static const char migrate_sql_lock_records[] =
    "LOCK TABLE idempotency_records IN ACCESS EXCLUSIVE MODE";

/* What dropping the old table would lose without a word: its triggers, row
 * security policies and publication memberships (NULL: none). */
static const char migrate_sql_not_carried[] =
    "SELECT string_agg(what, ', ') FROM ("
    " SELECT 'trigger ' || tgname AS what FROM pg_trigger"
    "  WHERE tgrelid = 'idempotency_records'::regclass AND NOT tgisinternal"
    " UNION ALL SELECT 'policy ' || polname FROM pg_policy"
    "  WHERE polrelid = 'idempotency_records'::regclass"
    " UNION ALL SELECT 'publication ' || p.pubname FROM pg_publication_rel r"
    "  JOIN pg_publication p ON p.oid = r.prpubid"
    "  WHERE r.prrelid = 'idempotency_records'::regclass) x";

/*
 * The conversion's statements, in order, written from the catalog before
 * any of them runs ($1: the number of partitions). The index definitions
 * name the table as idempotency_records, which is the new table by the
 * time they run. Grants come before the owner: ALTER OWNER makes the new
 * owner their grantor. Step 3 is the copy, whose row count is reported.
 */
#define MIGRATE_STEP_COPY 3

static const char migrate_sql_conversion[] =
    "WITH t AS (SELECT c.oid, n.nspname AS s, c.reloptions, c.relacl, c.relowner,"
    "  pg_get_userbyid(c.relowner) AS owner FROM pg_class c"
    "  JOIN pg_namespace n ON n.oid = c.relnamespace"
    "  WHERE c.oid = 'idempotency_records'::regclass),"
    " parts AS (SELECT i, 'idempotency_records_p' || i AS name FROM generate_series(0, $1 - 1) i)"
    " SELECT step, sql FROM ("
    " SELECT 1 AS step, 0::bigint AS i, format('CREATE TABLE %I.idempotency_records_hashed"
    "  (LIKE %I.idempotency_records INCLUDING ALL EXCLUDING INDEXES)"
    "  PARTITION BY " MIGRATE_HASH_KEYDEF "', s, s) AS sql FROM t"
    " UNION ALL SELECT 2, i, format('CREATE TABLE %I.%I PARTITION OF %I.idempotency_records_hashed"
    "  FOR VALUES WITH (MODULUS %s, REMAINDER %s)%s', s, name, s, $1, i,"
    "  coalesce((SELECT ' WITH (' || string_agg(split_part(o, '=', 1) || ' = '"
    "   || quote_literal(substr(o, strpos(o, '=') + 1)), ', ') || ')'"
    "   FROM unnest(reloptions) o), '')) FROM t, parts"
    " UNION ALL SELECT 3, 0, format('INSERT INTO %I.idempotency_records_hashed"
    "  SELECT * FROM %I.idempotency_records', s, s) FROM t"
    " UNION ALL SELECT 4, 0, format('DROP TABLE %I.idempotency_records', s) FROM t"
    " UNION ALL SELECT 5, 0, format('ALTER TABLE %I.idempotency_records_hashed"
    "  RENAME TO idempotency_records', s) FROM t"
    " UNION ALL SELECT 6, row_number() OVER (ORDER BY k.contype, k.conname),"
    "  format('ALTER TABLE %I.idempotency_records ADD CONSTRAINT %I %s', s, k.conname,"
    "  pg_get_constraintdef(k.oid)) FROM t JOIN pg_constraint k ON k.conrelid = t.oid"
    "  AND k.contype IN ('p', 'u', 'x')"
    " UNION ALL SELECT 7, row_number() OVER (ORDER BY x.indexrelid::regclass::text),"
    "  pg_get_indexdef(x.indexrelid) FROM t JOIN pg_index x ON x.indrelid = t.oid"
    "  WHERE NOT EXISTS (SELECT 1 FROM pg_constraint k WHERE k.conindid = x.indexrelid"
    "  AND k.conrelid = t.oid)"
    " UNION ALL SELECT 8, row_number() OVER (),"
    "  format('GRANT %s ON %I.idempotency_records TO %s%s', a.privilege_type, s,"
    "  CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE quote_ident(pg_get_userbyid(a.grantee)) END,"
    "  CASE WHEN a.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END)"
    "  FROM t, aclexplode(t.relacl) a WHERE a.grantee <> t.relowner"
    " UNION ALL SELECT 9, i, format('ALTER TABLE %I.%I OWNER TO %I', s, name, owner)"
    "  FROM t, parts WHERE owner <> current_user"
    " UNION ALL SELECT 10, 0, format('ALTER TABLE %I.idempotency_records OWNER TO %I', s, owner)"
    "  FROM t WHERE owner <> current_user"
    ") x ORDER BY step, i";

static void migrate_quiet(void *arg, const char *message)
{
}

/* The row of applied (NULL: none) that records version, or -1. */
static int migrate_row_of(const PGresult *applied, int version)
{
	for (int r = 0; applied && r < PQntuples(applied); r++)
		if (atoi(PQgetvalue(applied, r, 0)) == version)
			return r;
	return -1;
}

/* 1 when version is compiled in. */
static int migrate_known(int version)
{
	for (int i = 0; i < migration_count; i++)
		if (migrations[i].version == version)
			return 1;
	return 0;
}

int migrate_pending(const PGresult *applied, char *names, size_t len)
{
	int pending = 0;
	size_t used = 0;

	if (len)
		names[0] = '\0';
	for (int i = 0; i < migration_count; i++) {
		if (migrate_row_of(applied, migrations[i].version) >= 0)
			continue;
		if (used < len)
			used += (size_t)snprintf(names + used, len - used, "%s%s",
						 pending ? ", " : "", migrations[i].name);
		pending++;
	}
	return pending;
}

/*
 * Run sql: with nparams == 0 over the simple protocol (a migration file may
 * hold several statements), else with text parameters. On success returns
 * 0 and, when out is given, the result in *out (the caller clears it). On
 * failure writes "what: libpq message" into err and returns -1.
 */
static int migrate_exec(PGconn *conn, const char *sql, int nparams, const char *const *values,
			const char *what, char *err, size_t errlen, PGresult **out)
{
	PGresult *res;
	ExecStatusType status;

	if (nparams == 0)
		res = PQexec(conn, sql);
	else
		res = PQexecParams(conn, sql, nparams, NULL, values, NULL, NULL, 0);
	status = PQresultStatus(res);
	if (status != PGRES_COMMAND_OK && status != PGRES_TUPLES_OK) {
		snprintf(err, errlen, "%s: %s", what, PQerrorMessage(conn));
		err[strcspn(err, "\n")] = '\0';
		PQclear(res);
		return -1;
	}
	if (out)
		*out = res;
	else
		PQclear(res);
	return 0;
}

/* The applied versions, or NULL when there is no idemproxy_migrations. */
static int migrate_applied(PGconn *conn, PGresult **out, char *err, size_t errlen)
{
	const char *what = "cannot read idemproxy_migrations";
	PGresult *res = NULL;
	int exists;

	*out = NULL;
	if (migrate_exec(conn, MIGRATE_SQL_SCHEMA, 0, NULL, what, err, errlen, &res) < 0)
		return -1;
	exists = strcmp(PQgetvalue(res, 0, 1), "t") == 0;
	PQclear(res);
	if (!exists)
		return 0;
	return migrate_exec(conn, MIGRATE_SQL_APPLIED, 0, NULL, what, err, errlen, out);
}

/* 1 when sql holds nothing but blanks and -- comments. */
static int migrate_blank(const char *sql)
{
	while (*sql) {
		if (isspace((unsigned char)*sql))
			sql++;
		else if (sql[0] == '-' && sql[1] == '-')
			sql += strcspn(sql, "\n");
		else
			return 0;
	}
	return 1;
}

/*
 * The statements of a MIGRATION_NO_TRANSACTION file one at a time (a
 * statement ends with a ";" that ends its line), then a check that no
 * index was left invalid. Returns 0, or -1 with a message in err.
 */
static int migrate_each_statement(PGconn *conn, const struct migration *m, const char *what,
				  char *err, size_t errlen)
{
	const char *p = m->sql, *end;
	PGresult *res = NULL;
	char *stmt;
	int rc = 0;

	while (rc == 0 && *p) {
		for (end = p; *end; end++) {
			const char *q = end;

			if (*end != ';')
				continue;
			while (*++q == ' ' || *q == '\t')
				;
			if (*q == '\n' || *q == '\0')
				break;
		}
		if (*end)
			end++;
		stmt = strndup(p, (size_t)(end - p));
		if (!stmt) {
			snprintf(err, errlen, "%s: out of memory", what);
			return -1;
		}
		if (!migrate_blank(stmt))
			rc = migrate_exec(conn, stmt, 0, NULL, what, err, errlen, NULL);
		free(stmt);
		p = end;
	}
	if (rc < 0 ||
	    migrate_exec(conn, migrate_sql_invalid_indexes, 0, NULL, what, err, errlen, &res) < 0)
		return -1;
	if (PQntuples(res) > 0) {
		snprintf(err, errlen,
			 "%s: index %s is invalid (its build was interrupted, or another migrate "
			 "is building it): once no migrate runs, DROP INDEX CONCURRENTLY %s; and "
			 "run migrate again",
			 what, PQgetvalue(res, 0, 0), PQgetvalue(res, 0, 0));
		rc = -1;
	}
	PQclear(res);
	return rc;
}

/* 1 when m's SQL may not run in a transaction. */
static int migrate_no_transaction(const struct migration *m)
{
	return strncmp(m->sql, MIGRATION_NO_TRANSACTION, strlen(MIGRATION_NO_TRANSACTION)) == 0;
}

/*
 * Apply migration m unless it is recorded, in one transaction with its
 * bookkeeping row. The transaction-scoped advisory lock serialises
 * concurrent migrators and, unlike a session lock, cannot outlive the
 * transaction on a pooled server connection (pgbouncer). Sets *applied to
 * 1 when m was applied. Returns 0, or -1 with a message naming m in err.
 */
static int migrate_one(PGconn *conn, const struct migration *m, int *applied, char *err,
		       size_t errlen)
{
	char what[MIGRATE_MSG_MAX], version[MIGRATE_NUM_MAX];
	const char *values[2] = {version, m->name};
	PGresult *res = NULL;
	int rc = -1;

	*applied = 0;
	snprintf(what, sizeof(what), "migration %s failed", m->name);
	snprintf(version, sizeof(version), "%d", m->version);
	if (migrate_exec(conn, "BEGIN", 0, NULL, what, err, errlen, NULL) < 0 ||
	    migrate_exec(conn, migrate_sql_migrate_lock, 0, NULL, what, err, errlen, NULL) < 0 ||
	    migrate_exec(conn, "SELECT 1 FROM idemproxy_migrations WHERE version = $1", 1, values,
			 what, err, errlen, &res) < 0)
		goto out;
	if (PQntuples(res) == 0 && migrate_no_transaction(m)) {
		/* Checked under the lock, built outside any transaction, then
		 * recorded by whichever migrator gets there first. */
		if (migrate_exec(conn, "COMMIT", 0, NULL, what, err, errlen, NULL) < 0 ||
		    migrate_each_statement(conn, m, what, err, errlen) < 0 ||
		    migrate_exec(conn,
				 "INSERT INTO idemproxy_migrations (version, name)"
				 " VALUES ($1, $2) ON CONFLICT (version) DO NOTHING",
				 2, values, what, err, errlen, NULL) < 0)
			goto out;
		*applied = 1;
		rc = 0;
		goto out;
	}
	if (PQntuples(res) == 0) {
		if (migrate_exec(conn, m->sql, 0, NULL, what, err, errlen, NULL) < 0 ||
		    migrate_exec(conn,
				 "INSERT INTO idemproxy_migrations (version, name)"
				 " VALUES ($1, $2)",
				 2, values, what, err, errlen, NULL) < 0)
			goto out;
		*applied = 1;
	}
	if (migrate_exec(conn, "COMMIT", 0, NULL, what, err, errlen, NULL) < 0)
		goto out;
	rc = 0;
out:
	PQclear(res);
	return rc;
}

/* A connection for the migrator, or NULL with a message in err. The
 * command runs no event loop, so libpq's own (blocking) host name lookup
 * is fine here, unlike in the store (store_dns.c). */
static PGconn *migrate_connect(const char *conninfo, char *err, size_t errlen)
{
	PGconn *conn = PQconnectdb(conninfo ? conninfo : "");

	if (PQstatus(conn) != CONNECTION_OK) {
		snprintf(err, errlen, "cannot connect to the database: %s", PQerrorMessage(conn));
		err[strcspn(err, "\n")] = '\0';
		PQfinish(conn);
		return NULL;
	}
	PQsetNoticeProcessor(conn, migrate_quiet, NULL);
	return conn;
}

/* How idempotency_records is partitioned (migrate_sql_partitioning). */
struct migrate_partitioning {
	int exists;
	int partitioned;
	int by_scope; /* by hash on the scope, every partition of modulus partitions */
	int uneven;   /* by hash on the scope, but with partitions of other moduli */
	int partitions;
	char keydef[MIGRATE_KEYDEF_MAX];
};

/* Read *p from the catalog. Returns 0, or -1 with a message in err. */
static int migrate_partitioning(PGconn *conn, struct migrate_partitioning *p, const char *what,
				char *err, size_t errlen)
{
	PGresult *res = NULL;

	memset(p, 0, sizeof(*p));
	if (migrate_exec(conn, migrate_sql_partitioning, 0, NULL, what, err, errlen, &res) < 0)
		return -1;
	if (PQntuples(res) == 1) {
		p->exists = 1;
		p->partitioned = strcmp(PQgetvalue(res, 0, 0), "t") == 0;
		snprintf(p->keydef, sizeof(p->keydef), "%s", PQgetvalue(res, 0, 1));
		p->partitions = atoi(PQgetvalue(res, 0, 2));
		p->by_scope = p->partitioned && strcmp(p->keydef, MIGRATE_HASH_KEYDEF) == 0;
		p->uneven = p->by_scope && (atoi(PQgetvalue(res, 0, 3)) != p->partitions ||
					    atoi(PQgetvalue(res, 0, 4)) != p->partitions);
		p->by_scope = p->by_scope && !p->uneven;
	}
	PQclear(res);
	return 0;
}

/* The status line of a partitioned table; nothing for a plain one. */
static void migrate_print_partitioning(const struct migrate_partitioning *p)
{
	if (p->by_scope)
		printf("partitioned hash %d\n", p->partitions);
	else if (p->partitioned)
		printf("partitioned other: %s, %d partitions%s (not made by --hash-partitions)\n",
		       p->keydef, p->partitions, p->uneven ? " of different moduli" : "");
}

/* Citus's view of idempotency_records, read from its catalog. */
struct migrate_citus {
	char version[MIGRATE_NUM_MAX]; /* "": no Citus on this server */
	char column[MIGRATE_KEYDEF_MAX]; /* "": not distributed */
	int shards, groups;
};

/* Read *c. Returns 0, or -1 with a message in err. */
static int migrate_citus(PGconn *conn, struct migrate_citus *c, const char *what, char *err,
			 size_t errlen)
{
	PGresult *res = NULL;

	memset(c, 0, sizeof(*c));
	if (migrate_exec(conn, migrate_sql_citus, 0, NULL, what, err, errlen, &res) < 0)
		return -1;
	if (PQntuples(res) == 1)
		snprintf(c->version, sizeof(c->version), "%s", PQgetvalue(res, 0, 0));
	PQclear(res);
	if (!c->version[0])
		return 0;
	if (migrate_exec(conn, migrate_sql_distribution, 0, NULL, what, err, errlen, &res) < 0)
		return -1;
	if (PQntuples(res) == 1) {
		snprintf(c->column, sizeof(c->column), "%s", PQgetvalue(res, 0, 0));
		c->shards = atoi(PQgetvalue(res, 0, 1));
		c->groups = atoi(PQgetvalue(res, 0, 2));
	}
	PQclear(res);
	return 0;
}

/* The status line of the table on Citus; nothing without Citus. */
static void migrate_print_citus(const struct migrate_citus *c)
{
	if (c->column[0])
		printf("distributed by %s: %d shards on %d nodes (Citus %s)\n", c->column, c->shards,
		       c->groups, c->version);
	else if (c->version[0])
		printf("not distributed: Citus %s is installed; \"idemproxy migrate --distribute\" "
		       "distributes idempotency_records\n",
		       c->version);
}

int migrate_status(const char *conninfo, char *err, size_t errlen)
{
	struct migrate_citus citus;
	PGconn *conn = migrate_connect(conninfo, err, errlen);
	struct migrate_partitioning parts;
	PGresult *applied = NULL;
	int pending = 0, found, rc = -1;

	if (!conn || migrate_applied(conn, &applied, err, errlen) < 0 ||
	    migrate_partitioning(conn, &parts, "cannot read idempotency_records", err, errlen) < 0 ||
	    migrate_citus(conn, &citus, "cannot read Citus's catalog", err, errlen) < 0)
		goto out;
	for (int i = 0; i < migration_count; i++) {
		found = migrate_row_of(applied, migrations[i].version);
		if (found >= 0)
			printf("applied  %s  %s\n", migrations[i].name,
			       PQgetvalue(applied, found, 2));
		else
			printf("pending  %s\n", migrations[i].name);
		pending += found < 0;
	}
	for (int r = 0; applied && r < PQntuples(applied); r++)
		if (!migrate_known(atoi(PQgetvalue(applied, r, 0))))
			printf("unknown  %s  %s (applied by a newer idemproxy)\n",
			       PQgetvalue(applied, r, 1), PQgetvalue(applied, r, 2));
	migrate_print_partitioning(&parts);
	migrate_print_citus(&citus);
	if (pending)
		printf("%d pending: run \"idemproxy migrate\" to apply %s\n", pending,
		       pending == 1 ? "it" : "them");
	else
		printf("database is up to date\n");
	rc = pending ? 1 : 0;
out:
	fflush(stdout);
	PQclear(applied);
	PQfinish(conn);
	return rc;
}

/* Apply the pending migrations on conn (migrate_apply). */
static int migrate_apply_on(PGconn *conn, char *err, size_t errlen)
{
	const char *what = "cannot create idemproxy_migrations";
	int applied, any = 0;

	/* Under the lock too: concurrent CREATE TABLE IF NOT EXISTS can collide. */
	if (migrate_exec(conn, "BEGIN", 0, NULL, what, err, errlen, NULL) < 0 ||
	    migrate_exec(conn, migrate_sql_migrate_lock, 0, NULL, what, err, errlen, NULL) < 0 ||
	    migrate_exec(conn, migrate_sql_migrations_table, 0, NULL, what, err, errlen, NULL) <
		0 ||
	    migrate_exec(conn, "COMMIT", 0, NULL, what, err, errlen, NULL) < 0)
		return -1;
	for (int i = 0; i < migration_count; i++) {
		if (migrate_one(conn, &migrations[i], &applied, err, errlen) < 0)
			return -1;
		if (applied)
			printf("applied %s\n", migrations[i].name);
		any |= applied;
	}
	if (!any)
		printf("database is up to date\n");
	return 0;
}

int migrate_apply(const char *conninfo, char *err, size_t errlen)
{
	PGconn *conn = migrate_connect(conninfo, err, errlen);
	int rc = conn ? migrate_apply_on(conn, err, errlen) : -1;

	fflush(stdout);
	PQfinish(conn);
	return rc;
}

/*
 * The conversion itself, in the open transaction that holds the migrate
 * lock and the table's ACCESS EXCLUSIVE lock: every statement of
 * migrate_sql_conversion in order. Sets *rows to the rows copied. Returns
 * 0, or -1 with a message in err.
 */
static int migrate_convert(PGconn *conn, int partitions, const char *what, long long *rows,
			   char *err, size_t errlen)
{
	char count[MIGRATE_NUM_MAX];
	const char *values[1] = {count};
	PGresult *steps = NULL, *res = NULL;
	int rc = -1;

	snprintf(count, sizeof(count), "%d", partitions);
	if (migrate_exec(conn, migrate_sql_conversion, 1, values, what, err, errlen, &steps) < 0)
		goto out;
	for (int r = 0; r < PQntuples(steps); r++) {
		const char *step = PQgetvalue(steps, r, 1);

		if (migrate_exec(conn, step, 0, NULL, what, err, errlen, &res) < 0)
			goto out;
		if (atoi(PQgetvalue(steps, r, 0)) == MIGRATE_STEP_COPY)
			*rows = strtoll(PQcmdTuples(res), NULL, 10);
		PQclear(res);
		res = NULL;
	}
	rc = 0;
out:
	PQclear(res);
	PQclear(steps);
	return rc;
}

/*
 * With the migrate lock held in an open transaction: nothing to do (the
 * table is already partitioned by hash into partitions: 1), a refusal (it
 * is partitioned otherwise: -1 with a message in err), or the conversion
 * (0 once it ran, the transaction still open, *locked_at the moment the
 * table's lock was granted).
 */
static int migrate_partition_locked(PGconn *conn, int partitions, const char *what, long long *rows,
				    int64_t *locked_at, char *err, size_t errlen)
{
	struct migrate_partitioning p;
	PGresult *res = NULL;
	int rc = -1;

	if (migrate_partitioning(conn, &p, what, err, errlen) < 0)
		return -1;
	if (!p.exists) {
		snprintf(err, errlen, "%s: idempotency_records does not exist", what);
		return -1;
	}
	if (p.by_scope && p.partitions == partitions)
		return 1;
	if (p.by_scope) {
		snprintf(err, errlen,
			 "idempotency_records is already partitioned by hash into %d partitions, "
			 "not %d: repartitioning is not supported",
			 p.partitions, partitions);
		return -1;
	}
	if (p.partitioned && p.uneven) {
		snprintf(err, errlen,
			 "idempotency_records is partitioned by hash into partitions of different "
			 "moduli: not supported");
		return -1;
	}
	if (p.partitioned) {
		snprintf(err, errlen,
			 "idempotency_records is partitioned by %s, not by " MIGRATE_HASH_KEYDEF
			 ": not supported",
			 p.keydef);
		return -1;
	}
	if (migrate_exec(conn, migrate_sql_lock_records, 0, NULL, what, err, errlen, NULL) < 0)
		goto out;
	*locked_at = clock_now_us();
	if (migrate_exec(conn, migrate_sql_not_carried, 0, NULL, what, err, errlen, &res) < 0)
		goto out;
	if (!PQgetisnull(res, 0, 0)) {
		snprintf(err, errlen,
			 "%s: idempotency_records has what a new table would not carry over (%s): "
			 "remove it first, and add it to the new table afterwards",
			 what, PQgetvalue(res, 0, 0));
		goto out;
	}
	rc = migrate_convert(conn, partitions, what, rows, err, errlen);
out:
	PQclear(res);
	return rc;
}

int migrate_hash_partition(const char *conninfo, int partitions, char *err, size_t errlen)
{
	const char *what = "cannot partition idempotency_records";
	PGconn *conn = migrate_connect(conninfo, err, errlen);
	long long rows = 0;
	int64_t locked_at = 0;
	int rc = -1, state;

	if (!conn || migrate_apply_on(conn, err, errlen) < 0)
		goto out;
	if (migrate_exec(conn, "BEGIN", 0, NULL, what, err, errlen, NULL) < 0 ||
	    migrate_exec(conn, migrate_sql_migrate_lock, 0, NULL, what, err, errlen, NULL) < 0)
		goto out;
	state = migrate_partition_locked(conn, partitions, what, &rows, &locked_at, err, errlen);
	if (state < 0 || migrate_exec(conn, "COMMIT", 0, NULL, what, err, errlen, NULL) < 0)
		goto out;
	if (state == 1) {
		printf("idempotency_records is already partitioned by hash into %d partitions\n",
		       partitions);
		rc = 0;
		goto out;
	}
	printf("partitioned idempotency_records by hash (actor, operation, idem_key) into %d "
	       "partitions: %lld rows copied in %.1f s under an ACCESS EXCLUSIVE lock\n",
	       partitions, rows, (double)(clock_now_us() - locked_at) / 1e6);
	fflush(stdout);
	/* After the commit, outside the lock: the partitions' planner statistics. */
	if (rows > 0 && migrate_exec(conn, "ANALYZE idempotency_records", 0, NULL,
				     "partitioned, but ANALYZE idempotency_records failed", err,
				     errlen, NULL) < 0)
		goto out;
	if (rows > 0)
		printf("analyzed idempotency_records\n");
	rc = 0;
out:
	fflush(stdout);
	PQfinish(conn);
	return rc;
}

int migrate_distribute(const char *conninfo, char *err, size_t errlen)
{
	const char *what = "cannot distribute idempotency_records";
	PGconn *conn = migrate_connect(conninfo, err, errlen);
	struct migrate_citus c;
	int rc = -1;

	if (!conn || migrate_apply_on(conn, err, errlen) < 0)
		goto out;
	/* Under the migrate lock: two migrators do not both distribute. */
	if (migrate_exec(conn, "BEGIN", 0, NULL, what, err, errlen, NULL) < 0 ||
	    migrate_exec(conn, migrate_sql_migrate_lock, 0, NULL, what, err, errlen, NULL) < 0 ||
	    migrate_citus(conn, &c, what, err, errlen) < 0)
		goto out;
	if (!c.version[0]) {
		snprintf(err, errlen,
			 "%s: this server has no Citus (the extension is not created in this "
			 "database; on a Citus coordinator run CREATE EXTENSION citus first)",
			 what);
		goto out;
	}
	if (c.column[0] && strcmp(c.column, MIGRATE_DIST_COLUMN) != 0) {
		snprintf(err, errlen, "%s: it is distributed by %s, not by " MIGRATE_DIST_COLUMN
			 ": redistributing is not supported", what, c.column);
		goto out;
	}
	if (!c.column[0] &&
	    (migrate_exec(conn, migrate_sql_distribute, 0, NULL, what, err, errlen, NULL) < 0 ||
	     migrate_citus(conn, &c, what, err, errlen) < 0))
		goto out;
	if (migrate_exec(conn, "COMMIT", 0, NULL, what, err, errlen, NULL) < 0)
		goto out;
	migrate_print_citus(&c);
	rc = 0;
out:
	fflush(stdout);
	PQfinish(conn);
	return rc;
}
