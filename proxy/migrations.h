/*
 * Schema migrations compiled into the binary: scripts/embed-sql.sh turns
 * every sql/NNN_name.sql into one entry, in ascending version order.
 */
#ifndef IDEMPROXY_MIGRATIONS_H
#define IDEMPROXY_MIGRATIONS_H

/* The first line of a file whose statements run outside a transaction. */
#define MIGRATION_NO_TRANSACTION "-- idemproxy: no transaction"

struct migration {
	int version;	  /* NNN from the file name */
	const char *name; /* file name without .sql, e.g. "001_records" */
	const char *sql;  /* the file's text; no transaction control inside; with
			     MIGRATION_NO_TRANSACTION each statement ends its line
			     with ";" and may run again (IF NOT EXISTS) */
};

extern const struct migration migrations[];
extern const int migration_count;

#endif
