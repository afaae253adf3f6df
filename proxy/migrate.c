/*
 * Schema migrations for the `migrate` command. This is the only module that
 * uses blocking libpq: it runs before any event loop exists and never in
 * the proxy. Each compiled-in sql/NNN_*.sql not yet recorded in
 * idemproxy_migrations is applied in its own transaction, under a
 * transaction-scoped advisory lock so concurrent migrators take turns (and
 * nothing is left locked on a pgbouncer server connection).
 */
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


static void migrate_quiet(void *arg, const char *message)
{
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

int migrate_apply(const char *conninfo, char *err, size_t errlen)
{
	PGconn *conn = PQconnectdb(conninfo ? conninfo : "");
	const char *what = "cannot create idemproxy_migrations";
	int applied, any = 0, rc = -1;

	if (PQstatus(conn) != CONNECTION_OK) {
		snprintf(err, errlen, "cannot connect to the database: %s", PQerrorMessage(conn));
		err[strcspn(err, "\n")] = '\0';
		goto out;
	}
	PQsetNoticeProcessor(conn, migrate_quiet, NULL);
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
