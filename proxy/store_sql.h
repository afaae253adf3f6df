/*
 * The store's statements: what PostgreSQL is asked, and how its answers
 * read.
 *
 * An operation of the store is a row of one statement, a batch of up to
 * STORE_BATCH_MAX operations of one kind: the kind's head, one VALUES row
 * per operation (its ordinal and what it asked, struct store_ask), the
 * kind's tail; some kinds send a statement before it or after it, around
 * the same rows, in the same transaction (enum store_part). One table in
 * store_sql.c holds, per kind, the text of its statements, the types and
 * formats of its row's parameters and whether its rows go in scope order.
 * The answers come in binary format; the decoders here turn their rows
 * into ordinals, generations and records, and refuse a row that is not
 * what the statement returns. Nothing here touches a connection or an
 * operation's life: the store decides what goes out, and what an answer
 * means for it.
 */
#ifndef IDEMPROXY_STORE_SQL_H
#define IDEMPROXY_STORE_SQL_H

#include <stddef.h>
#include <stdint.h>

#include "proxy/record.h"
#include "proxy/scope.h"
#include "proxy/store_stmt.h"

struct pg_result; /* libpq's PGresult */

/* Operations in one statement: the rows of its VALUES. */
#define STORE_BATCH_MAX 128

#define STORE_TOKEN_MAX 160 /* a claim's lease token: owner_id:nonce:N */
#define STORE_NUM_MAX	32  /* a number written as text */
#define STORE_OP_NUMS	4   /* numbers a row sends as text */

/* Parameters per VALUES row at most, and per statement. */
#define STORE_ROW_PARAMS_MAX 11
#define STORE_PARAMS_MAX     (1 + STORE_ROW_PARAMS_MAX * STORE_BATCH_MAX)

/*
 * The statement text: the fixed head and tail, and one VALUES row per
 * operation, written from its kind's row template: at most 3 + 7
 * characters per parameter with the separators, plus the template's fixed
 * text, well under STORE_SQL_ROW_MAX.
 */
#define STORE_SQL_FIXED_MAX 4096
#define STORE_SQL_ROW_MAX   192
#define STORE_SQL_MAX	    (STORE_SQL_FIXED_MAX + STORE_BATCH_MAX * STORE_SQL_ROW_MAX)

/* The timeout settings sent before each batch, written out. */
#define STORE_SQL_TIMEOUT_MAX 256

enum store_op_kind {
	STORE_OP_CLAIM,	 /* a claim's insert */
	STORE_OP_LOOKUP, /* a claim whose slot was taken: read the record */
	STORE_OP_FINISH,
	STORE_OP_UNKNOWN,
	STORE_OP_RELEASE,
	STORE_OP_FORGET,   /* the store's own: remove a lost claim (store_claim) */
	STORE_OP_TAKEOVER, /* a claim whose slot may be taken over: take it */
	STORE_OP_QUERY,	   /* a caller's own statement, alone, text results: none here */
};

/* The statements of a batch, by the order they are named in (not sent in). */
enum store_part {
	STORE_PART_MAIN,  /* the kind's own statement */
	STORE_PART_SIDE,  /* its companion, sent after it */
	STORE_PART_FIRST, /* the one sent before it */
	STORE_PARTS,
};

/*
 * Named statements: the timeout setting (STORE_ID_TIMEOUT; with a plan per
 * execution for a batch of several rows, STORE_ID_TIMEOUT_ROWS), the lost-claim
 * removal's (STORE_ID_FORGET_TIMEOUT), the notification (STORE_ID_NOTIFY)
 * and, per batch kind, row count up to STORE_NAMED_ROWS (larger batches,
 * rare and already spread over many rows, stay unnamed) and part, so a
 * connection holds at most STORE_NAMED_IDS of them. 64: with 16, a third
 * of the batches at 64 client connections on two workers were larger, and
 * unnamed they spent as long in parse and bind as in their execution.
 */
#define STORE_NAMED_ROWS	64
#define STORE_ID_TIMEOUT	0
#define STORE_ID_NOTIFY		1
#define STORE_ID_FORGET_TIMEOUT 2
#define STORE_ID_TIMEOUT_ROWS	3
#define STORE_ID_BATCHES	4
#define STORE_NAMED_FORMS	(STORE_PARTS * STORE_OP_QUERY * STORE_NAMED_ROWS)
#define STORE_NAMED_IDS		(STORE_ID_BATCHES + 2 * STORE_NAMED_FORMS) /* and Citus's */
#define STORE_NAME_MAX		40

/*
 * What an operation asks of the table: the values of its statement's row.
 * What the pointers point to is the caller's until the callback; a
 * forget's scope points into the forget's own copy.
 */
struct store_ask {
	struct scope sc;
	char token[STORE_TOKEN_MAX]; /* claim, lookup, takeover, forget: the claim's lease_owner */
	const unsigned char *fp;     /* claim, lookup, takeover: the request's fingerprint */
	int64_t lease_ms;	     /* claim, lookup, takeover: the lease it asks for */
	int recover;		     /* lookup, takeover: STORE_RECOVER */
	const char *request_id;	     /* claim, lookup, takeover: the claimant's ids, NULL: none */
	const char *trace_id;
	int recovered;		     /* forget: the lost claim took over an abandoned record */
	int64_t generation;	     /* finish, unknown, release: the generation claimed */
	int status;		     /* finish: the response the record keeps */
	const char *headers;
	size_t headers_len;
	const unsigned char *body; /* NULL with omitted */
	size_t body_len;
	int omitted;
	const char *sealed;   /* the sealing key's id, NULL: plaintext */
	int64_t retention_ms; /* how long the record is kept */
	int64_t tombstone_ms; /* then its tombstone (expired_keys refuse), 0: none */
};

/* 1 when kind's batch sends a statement for part (STORE_PART_MAIN: every kind but a query). */
int store_sql_has_part(enum store_op_kind kind, enum store_part part);

/* 1 when kind's rows must go in scope order (scope_cmp), so that two
 * stores writing overlapping scopes wait for each other in one order. */
int store_sql_scope_order(enum store_op_kind kind);

/* The named statement for part of a batch of rows of kind (citus: in
 * Citus's form), or -1 for none. */
int store_sql_id(enum store_op_kind kind, enum store_part part, int rows, int citus);

/* The name of statement id (< STORE_NAMED_IDS) into name. */
void store_sql_name(int id, char name[STORE_NAME_MAX]);

/*
 * Write part's statement for rows rows of kind into sql (STORE_SQL_MAX
 * long). With citus, a statement that joins the table to its VALUES rows
 * also says which keys it touches (r.idem_key IN the rows' keys), which
 * lets Citus, the table distributed by idem_key, send it to those keys'
 * shards only (one shard: a router statement) instead of every shard.
 */
void store_sql_write(char *sql, enum store_op_kind kind, enum store_part part, int rows,
		     int citus);

/*
 * The parameters of ask's row in a batch of kind: values, lengths, types
 * and formats from index 0; its numbers are written into nums, which must
 * live until the statement is sent. Returns how many it wrote.
 */
int store_sql_row(enum store_op_kind kind, const struct store_ask *ask,
		  char nums[STORE_OP_NUMS][STORE_NUM_MAX], const char **values, int *lengths,
		  Oid *types, int *formats);

/*
 * Append token (a scope token: hex digits, nothing to quote; "" is
 * skipped) to the text[] literal in buf whose text is len long, without
 * its closing brace. Returns the new length.
 */
size_t store_sql_tokens_add(char *buf, size_t len, const char *token);

/* stmt becomes the notification of the tokens in *param, a text[] literal. */
void store_sql_notify(struct store_stmt *stmt, const char *const *param);

/* The LISTEN on STORE_CHANNEL, the pooler probe (prepared_statements auto)
 * and the Citus probe (its one boolean). */
extern const struct store_stmt store_sql_listen;
extern const struct store_stmt store_sql_probe;
extern const struct store_stmt store_sql_citus;

/*
 * The settings sent before each batch (STORE_SQL_TIMEOUT_MAX long each):
 * timeout_ms as statement_timeout; for a batch of more than one row
 * (rows) also a plan made for each execution, and for a lost-claim
 * removal lock_ms as lock_timeout too.
 */
void store_sql_timeouts(char *batch, char *rows, char *forget, int64_t timeout_ms,
			int64_t lock_ms);

/* The batch ordinal in column 0 of row, or -1 when it is not one of nbatch. */
int store_sql_ord(const struct pg_result *res, int row, int nbatch);

/* 1 when res has the columns of a claim's insert. */
int store_sql_insert_columns(const struct pg_result *res);

/* 1 when insert result row names scope sc. */
int store_sql_insert_scope(const struct pg_result *res, int row, const struct scope *sc);

/* The generation insert result row inserted, into *generation: 0, or -1 for none. */
int store_sql_insert_generation(const struct pg_result *res, int row, int64_t *generation);

/*
 * Read lookup result row into rec (pointing into res): 0, or 1 when the
 * slot may be taken over (rec untouched), or -1 when the row is not what
 * the statement produces.
 */
int store_sql_lookup_record(const struct pg_result *res, int row, struct record *rec);

/* The ordinal takeover result row took over among nbatch, with its new
 * generation into *generation, or -1 when the row is not one. */
int store_sql_takeover_ord(const struct pg_result *res, int row, int nbatch, int64_t *generation);

/* The records a lost-claim removal's delete removed (res: its rows): the
 * probe's own rows, of generation 0, do not count. */
int store_sql_forget_removed(const struct pg_result *res);

/* 1 when res failed on a table or column that is not there: migrations are missing. */
int store_sql_error_schema(const struct pg_result *res);

/* 1 when sqlstate (NULL: none, the link failed) means the connection is no use:
 * the server is read-only (a standby after failover), going away, or the link failed. */
int store_sql_error_fatal(const char *sqlstate);

/* 1 when sqlstate says a statement gave up waiting: lock_timeout, statement_timeout. */
int store_sql_error_timeout(const char *sqlstate);

#endif
