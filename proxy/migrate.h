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

/* The partition counts `migrate --hash-partitions N` accepts. */
#define MIGRATE_PARTITIONS_MIN 2
#define MIGRATE_PARTITIONS_MAX 1024

/*
 * `migrate --hash-partitions N`: migrate_apply, then, unless it already is,
 * turns idempotency_records into a table partitioned by hash on (actor,
 * operation, idem_key) with partitions partitions, in one transaction that
 * holds an ACCESS EXCLUSIVE lock on it while the rows are copied. Prints
 * what it did, or that the table already was partitioned so. Returns 0, or
 * -1 with a message in err (among them: partitioned with another count, as
 * repartitioning is not supported).
 */
int migrate_hash_partition(const char *conninfo, int partitions, char *err, size_t errlen);

/*
 * `migrate --distribute`: migrate_apply, then, on a Citus coordinator,
 * distributes idempotency_records by hash of idem_key (Citus's
 * create_distributed_table, which moves its rows to the shards) unless it
 * already is, and prints how it is distributed. Returns 0, or -1 with a
 * message in err: no Citus in the database, or distributed by another
 * column.
 */
int migrate_distribute(const char *conninfo, char *err, size_t errlen);

/*
 * `migrate status`: prints each migration as applied (with its time),
 * pending, or unknown (recorded by a newer binary), then "partitioned hash N"
 * when idempotency_records is partitioned so, and with Citus whether it is
 * distributed ("distributed by idem_key: N shards on M nodes"). Returns 0 when none is
 * pending, 1 when some are, -1 with a message in err when the database
 * cannot be read.
 */
int migrate_status(const char *conninfo, char *err, size_t errlen);

#endif
