/*
 * Record operations for operators: list the records that need one, show a
 * scope's record, release or resolve a stuck one.
 *
 * Two front ends share this module: the `idemproxy records` command
 * (records_cli.c: blocking libpq, outside any event loop) and the admin HTTP
 * API (the proxy's asynchronous store). Each operation is one statement, one
 * round trip with text results, and records_render turns that result into
 * the JSON document both front ends answer with. A resolve is preceded by
 * one more, RECORDS_SQL_GENERATION: what it stores is sealed for the
 * record's new generation, so that must be known first.
 */
#ifndef IDEMPROXY_RECORDS_H
#define IDEMPROXY_RECORDS_H

#include <stddef.h>
#include <stdint.h>

#include "proxy/record.h"
#include "proxy/store.h"

struct conf;
struct evkeyvalq;
struct pg_result; /* libpq's PGresult */
struct seal_keys;

#define RECORDS_LIST_DEFAULT 100
#define RECORDS_LIST_MAX     1000
#define RECORDS_STATUS_MIN   200 /* a replay must be a final response */
#define RECORDS_STATUS_MAX   599
#define RECORDS_PARAMS_MAX   9
#define RECORDS_NUM_MAX	     32

/* What a rendered document is, as an HTTP status (see records_render). */
#define RECORDS_HTTP_OK	       200
#define RECORDS_HTTP_NOT_FOUND 404
#define RECORDS_HTTP_CONFLICT  409

enum records_cmd {
	RECORDS_LIST,
	RECORDS_SHOW,
	RECORDS_RELEASE,
	RECORDS_RESOLVE,
};

/* What a command works on; the fields a command does not use are ignored. */
struct records_args {
	const char *actor, *operation, *key; /* SHOW, RELEASE, RESOLVE: the stored scope */
	int limit;			     /* LIST: at most this many; 0 = RECORDS_LIST_DEFAULT */
	int expired;			     /* LIST: tombstones (expired_keys refuse), not stuck records */
	int status;			     /* RESOLVE: RECORDS_STATUS_MIN..RECORDS_STATUS_MAX */
	const char *content_type;	     /* RESOLVE: stored Content-Type, or NULL for none */
	const unsigned char *body;	     /* RESOLVE: stored body (may be empty or NULL) */
	size_t body_len;
	int64_t retention_ms; /* RESOLVE: expires this long after now, > 0 */
};

/* A statement with its parameters: query, for store_query() or
 * PQexecParams (with resultFormat 0: records_render reads text results),
 * points into the arrays below. */
struct records_stmt {
	struct store_stmt query;
	const char *values[RECORDS_PARAMS_MAX];
	int lengths[RECORDS_PARAMS_MAX];
	int formats[RECORDS_PARAMS_MAX];
	Oid types[RECORDS_PARAMS_MAX];
	char nums[RECORDS_PARAMS_MAX][RECORDS_NUM_MAX]; /* text numbers values point into */
	char *headers;		     /* owned; "Content-Type: x\r\n" or "" for RESOLVE, else NULL */
	struct record_sealed sealed; /* owned: RESOLVE's headers and body, sealed */
};

/*
 * Fill st with the statement for cmd over a. The strings and the body of a
 * are referenced, not copied: they must outlive the statement's use. Returns
 * 0 (clear st with records_stmt_clear), or -1 with a message in err and st
 * left cleared, when a is not valid for cmd. A RESOLVE statement is run
 * only once records_stmt_resolve completed it.
 */
int records_stmt_build(enum records_cmd cmd, const struct records_args *a, struct records_stmt *st,
		       char *err, size_t errlen) __attribute__((warn_unused_result));

/*
 * The statement a front end runs before a resolve: a new generation (one
 * row, one column), never one a scope had. If the resolve then finds the
 * record not stuck, the number is simply never used.
 */
#define RECORDS_SQL_GENERATION "SELECT " STORE_SQL_NEW_GENERATION

/* RECORDS_SQL_GENERATION's text result res into *generation: 0, or -1 when res is not that. */
int records_generation(const struct pg_result *res, int64_t *generation)
    __attribute__((warn_unused_result));

/*
 * Complete st, built for RESOLVE over the same a, with the record's new
 * generation: with keys (body_encryption's; NULL when off) the stored
 * headers and body are sealed as an owner's are (record_seal: for a's
 * scope, its status and that generation), so a resolved record is never a
 * plaintext row while encryption is on. 0, or -1 with a message in err.
 */
int records_stmt_resolve(struct records_stmt *st, const struct records_args *a,
			 const struct seal_keys *keys, int64_t generation, char *err, size_t errlen)
    __attribute__((warn_unused_result));

/*
 * The admin API's query string for cmd (URL-encoded name=value pairs:
 * limit for LIST; actor, operation and key for the others; status and
 * retention for RESOLVE) into a, whose strings then point into q, which
 * the caller clears (evhttp_clear_headers) whatever this returns. A name
 * the command does not take, or one given twice, is refused like a bad
 * value: -1 with a message in err. What the values must be for the
 * statement is records_stmt_build's to check.
 */
int records_parse_query(enum records_cmd cmd, const char *query, struct evkeyvalq *q,
			struct records_args *a, char *err, size_t errlen)
    __attribute__((warn_unused_result));

/* Free what st owns; st may then be built again. */
void records_stmt_clear(struct records_stmt *st);

/*
 * The result of cmd's statement (PGRES_TUPLES_OK, text format) as a JSON
 * document, malloc'ed and NUL-terminated, its length in *len. *http_status
 * says what it is: 200 done, 404 no such record, 409 the record is not stuck
 * (release or resolve refused because it is completed or its lease is live).
 * Returns NULL when out of memory or when res is not shaped like the
 * statement's result.
 */
char *records_render(enum records_cmd cmd, const struct pg_result *res, int *http_status,
		     size_t *len);

/*
 * 1 when cmd (release or resolve) over a changed the record, by its
 * result res: token is then the scope's, for the notification
 * (STORE_SQL_NOTIFY) that the front end sends next, which wakes the
 * scope's waiters. 0 otherwise.
 */
int records_changed(enum records_cmd cmd, const struct records_args *a, const struct pg_result *res,
		    char token[SCOPE_TOKEN_SIZE]);

/* The retention of conf's route named operation (or, for operation_from's
 * "ROUTE:NAME", ROUTE's), or 0 when it has none:
 * what a resolve defaults to, from the command line and the admin API. */
int64_t records_retention(const struct conf *conf, const char *operation);

#endif
