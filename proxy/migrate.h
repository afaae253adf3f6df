/* Schema migrations: the `migrate` command (blocking; never in the loop). */
#ifndef IDEMPROXY_MIGRATE_H
#define IDEMPROXY_MIGRATE_H

#include <stddef.h>

struct pg_result;

/*
 * Readiness asks what migrate would: is the server read-only, does
 * idemproxy_migrations exist (no error when it does not); then which
 * versions it records (version, name, applied_at).
 */
#define MIGRATE_SQL_SCHEMA                                        \
	"SELECT current_setting('transaction_read_only'),"        \
	" to_regclass('idemproxy_migrations') IS NOT NULL"
#define MIGRATE_SQL_APPLIED \
	"SELECT version, name, applied_at FROM idemproxy_migrations ORDER BY version"

/*
 * The compiled-in migrations missing from applied (a MIGRATE_SQL_APPLIED
 * result): their number, and their names, comma-separated, in names.
 */
int migrate_pending(const struct pg_result *applied, char *names, size_t len);

/*
 * Applies every compiled-in sql/NNN_*.sql not yet recorded, each in its own
 * transaction, and prints one line per applied file to stdout. Returns 0 or -1
 * with a message in err.
 */
int migrate_apply(const char *conninfo, char *err, size_t errlen);

/*
 * `migrate status`: prints each migration as applied (with its time),
 * pending, or unknown (recorded by a newer binary). Returns 0 when none is
 * pending, 1 when some are, -1 with a message in err when the database
 * cannot be read.
 */
int migrate_status(const char *conninfo, char *err, size_t errlen);

#endif
