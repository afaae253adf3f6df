/*
 * A statement as the store sends it, and what every writer of statements
 * on idemproxy's table shares: the SQL of a new generation, the channel
 * and the statement that notifies it, the type OIDs and formats of
 * parameters. The store's own statements build on these, and so do the
 * ones its callers run through store_query (the sweeper's, the
 * operator's in records.c), which reach them through store.h.
 */
#ifndef IDEMPROXY_STORE_STMT_H
#define IDEMPROXY_STORE_STMT_H

#include <postgres_ext.h>

/* The channel owners' writes notify (see STORE_NOTIFY) and stores LISTEN on. */
#define STORE_CHANNEL "idemproxy_records"
/* SQL for a new lease generation: never one a scope had before. */
#define STORE_SQL_NEW_GENERATION "nextval('idempotency_records_generation_seq')"
/*
 * SQL that notifies STORE_CHANNEL once per scope token in $1, a text[]
 * (store_tokens_array): a statement of its own that reads no table, so a
 * distributed engine runs it where the listeners are.
 */
#define STORE_SQL_NOTIFY "SELECT pg_notify('" STORE_CHANNEL "', t) FROM unnest($1::text[]) t"

/* Type OIDs from pg_type, for the parameters statements send. */
#define STORE_OID_BOOL	16
#define STORE_OID_BYTEA 17
#define STORE_OID_INT8	20
#define STORE_OID_INT4	23
#define STORE_OID_TEXT	25
#define STORE_OID_TEXT_ARRAY 1009

/* Parameter and result formats. */
#define STORE_FORMAT_TEXT   0
#define STORE_FORMAT_BINARY 1

/* A statement and its parameters; the pointers are borrowed. */
struct store_stmt {
	const char *sql;
	int nparams;
	const Oid *types; /* NULL: the server infers them */
	const char *const *values;
	const int *lengths;
	const int *formats;
};

#endif
