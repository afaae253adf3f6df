/*
 * Schema migrations compiled into the binary: scripts/embed-sql.sh turns
 * every sql/NNN_name.sql into one entry, in ascending version order.
 */
#ifndef IDEMPROXY_MIGRATIONS_H
#define IDEMPROXY_MIGRATIONS_H

struct migration {
	int version;	  /* NNN from the file name */
	const char *name; /* file name without .sql, e.g. "001_records" */
	const char *sql;  /* the file's text; no transaction control inside */
};

extern const struct migration migrations[];
extern const int migration_count;

#endif
