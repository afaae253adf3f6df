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
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <libpq-fe.h>

#include "proxy/migrate.h"
#include "proxy/migrations.h"

#define MIGRATE_MSG_MAX 1024
#define MIGRATE_NUM_MAX 32

static const char migrate_sql_migrate_lock[] = "SELECT pg_advisory_xact_lock(7594869612733442169)";

static const char migrate_sql_migrations_table[] = "CREATE TABLE IF NOT EXISTS idemproxy_migrations ("
						 " version integer PRIMARY KEY, name text NOT NULL,"
						 " applied_at timestamptz NOT NULL DEFAULT now())";


static const char migrate_sql_invalid_indexes[] =
	"SELECT c.relname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid"
	" WHERE NOT i.indisvalid AND i.indrelid IN (SELECT oid FROM pg_class"
	" WHERE relname LIKE 'idempotency\\_%' OR relname LIKE 'idemproxy\\_%')";

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
			used += (size_t)snprintf(names + used, len - used, "%s%s", pending ? ", " : "",
						 migrations[i].name);
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
	if (rc < 0 || migrate_exec(conn, migrate_sql_invalid_indexes, 0, NULL, what, err, errlen,
				   &res) < 0)
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
	    migrate_exec(conn, migrate_sql_migrate_lock, 0, NULL, what, err, errlen, NULL) <
		0 ||
	    migrate_exec(conn, "SELECT 1 FROM idemproxy_migrations WHERE version = $1", 1,
			       values, what, err, errlen, &res) < 0)
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

/* A connection for the migrator, or NULL with a message in err. */
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

int migrate_status(const char *conninfo, char *err, size_t errlen)
{
	PGconn *conn = migrate_connect(conninfo, err, errlen);
	PGresult *applied = NULL;
	int pending = 0, found, rc = -1;

	if (!conn || migrate_applied(conn, &applied, err, errlen) < 0)
		goto out;
	for (int i = 0; i < migration_count; i++) {
		found = migrate_row_of(applied, migrations[i].version);
		if (found >= 0)
			printf("applied  %s  %s\n", migrations[i].name, PQgetvalue(applied, found, 2));
		else
			printf("pending  %s\n", migrations[i].name);
		pending += found < 0;
	}
	for (int r = 0; applied && r < PQntuples(applied); r++)
		if (!migrate_known(atoi(PQgetvalue(applied, r, 0))))
			printf("unknown  %s  %s (applied by a newer idemproxy)\n",
			       PQgetvalue(applied, r, 1), PQgetvalue(applied, r, 2));
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

int migrate_apply(const char *conninfo, char *err, size_t errlen)
{
	PGconn *conn = migrate_connect(conninfo, err, errlen);
	const char *what = "cannot create idemproxy_migrations";
	int applied, any = 0, rc = -1;

	if (!conn)
		goto out;
	/* Under the lock too: concurrent CREATE TABLE IF NOT EXISTS can collide. */
	if (migrate_exec(conn, "BEGIN", 0, NULL, what, err, errlen, NULL) < 0 ||
	    migrate_exec(conn, migrate_sql_migrate_lock, 0, NULL, what, err, errlen, NULL) <
		0 ||
	    migrate_exec(conn, migrate_sql_migrations_table, 0, NULL, what, err, errlen, NULL) <
		0 ||
	    migrate_exec(conn, "COMMIT", 0, NULL, what, err, errlen, NULL) < 0)
		goto out;
	for (int i = 0; i < migration_count; i++) {
		if (migrate_one(conn, &migrations[i], &applied, err, errlen) < 0)
			goto out;
		if (applied)
			printf("applied %s\n", migrations[i].name);
		any |= applied;
	}
	if (!any)
		printf("database is up to date\n");
	rc = 0;
out:
	fflush(stdout);
	PQfinish(conn);
	return rc;
}
