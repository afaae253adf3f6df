/*
 * The facts of the published contract, worked out once from a struct conf:
 * for every route, what it promises a client (where the key comes from,
 * the actor, the fingerprint, retention, duplicates, unknown outcomes, the
 * error dialect) as data and as one CommonMark sentence each, and the rows
 * of its status table; for the document, what every route shares and the
 * methods and paths it intercepts.
 *
 * The renderers (contract_md.c, contract_openapi.c) read these facts (and
 * the tables of problem.h and respond.h), never the configuration, so the
 * two formats cannot tell a client different things. Nothing here holds a conninfo, a file path or a
 * secret: an actor is told by its kind of source and the header a client
 * sends. A struct contract owns what contract_build made (the sentences,
 * the rows' texts, the ops' names); every other string points into the
 * conf it was built from, which must outlive it.
 */
#ifndef IDEMPROXY_CONTRACT_FACTS_H
#define IDEMPROXY_CONTRACT_FACTS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "proxy/problem.h"

struct conf;
struct status_set;

#define CONTRACT_NAME_MAX    64	 /* a Stripe error type or code, a rest parameter */
#define CONTRACT_ID_MAX	     160 /* an operationId: operation, method and a number */
#define CONTRACT_STATUS_MIN  100
#define CONTRACT_STATUS_MAX  599
#define CONTRACT_STATUS_TEXT 8	/* "503" or "4xx" and a NUL */
#define CONTRACT_NKINDS	     16 /* the problems an intercepted request may get */

/* A route's facts, in the order both formats show them. */
enum contract_fact {
	FACT_KEY,
	FACT_KEY_SYNTAX,
	FACT_REQUIRED,
	FACT_ACTOR,
	FACT_FINGERPRINT,
	FACT_RETENTION,
	FACT_IN_PROGRESS,
	FACT_UNKNOWN,
	FACT_UPSTREAM,
	FACT_ERRORS,
	FACT_GRPC, /* "" for a route with no gRPC method path: not shown */
	FACT_LIMITS,	  /* max_owners, actor_max_owners; "" when none: not shown */
	FACT_FORWARD_KEY, /* forward_key; "" when off: not shown */
	FACT_OPERATION, /* "" for a route without operation_from: not shown */
	FACT_COUNT
};

/* The fact's label ("Key syntax"). */
const char *contract_fact_label(enum contract_fact fact);

/* One row of a route's status table. */
struct contract_row {
	enum problem_kind kind;
	int status;
	char *when;	  /* CommonMark */
	unsigned headers; /* bit h: the answer carries respond_problem_header h */
};

/* Where the key comes from. */
struct contract_key {
	const char *in;	  /* "header", "query" or "json" */
	const char *name; /* the header or parameter name, or the JSON dot path */
	int required;
};

/* The credential an actor is taken from, when it is one. */
enum contract_credential {
	CONTRACT_NO_CREDENTIAL,
	CONTRACT_BEARER_JWT,	/* a JWT as Authorization: Bearer */
	CONTRACT_AUTHORIZATION, /* the Authorization header's whole value */
};

struct contract_actor {
	const char *source; /* "header", "jwt", "authorization" or "anonymous" */
	const char *header; /* the header a client names it in; NULL: anonymous */
	const char *param;  /* header when a request parameter of its own (not a
			       credential, not the key's header too); else NULL */
	size_t max_len;	    /* the longest value param takes; 0: not said */
	enum contract_credential credential;
	int jwt;
	const char *issuer;   /* jwt: NULL when any */
	const char *audience; /* jwt: NULL when not checked */
	const char *claim;    /* jwt */
	int require_exp;      /* jwt */
};

/* A field of the fingerprint: its dot path and transform ("trim"; NULL: none). */
struct contract_field {
	const char *path;
	const char *transform;
};

struct contract_fingerprint {
	const char *mode; /* "json", "body" or "none" */
	struct contract_field *fields;
	int nfields;
	char *const *headers;
	int nheaders;
};

struct contract_route {
	const char *operation;
	int live;   /* it intercepts some method and path */
	int stripe; /* errors stripe */
	struct contract_key key;
	struct contract_actor actor;
	struct contract_fingerprint fp;
	int64_t retention_ms;
	const char *in_progress; /* "wait" or "reject" */
	int64_t wait_ms;	 /* "wait": how long */
	const char *recovery;	 /* "forward" or "hold" */
	/* release_on and unknown_on, read with contract_status_next */
	const struct status_set *release_on, *unknown_on;
	const char *errors;	/* "stripe" or "problem" */
	char *fact[FACT_COUNT]; /* CommonMark sentences */
	struct contract_row rows[CONTRACT_NKINDS];
	int nrows; /* sorted by status */
};

/* A parameter of an op's path: a {name} segment, or the final "*". */
struct contract_param {
	const char *name;
	size_t len;
	int rest;
};

/* One method and path a route intercepts. */
struct contract_op {
	const struct contract_route *cr;
	const char *method; /* upper case, as configured */
	char *label;	    /* "`METHOD /path`" as configured, a final "*" kept (CommonMark) */
	char *oa_path;	    /* path templating: "/files/{rest}" */
	int rest;	    /* the path ends with "*" */
	char rest_name[CONTRACT_NAME_MAX]; /* the parameter a final "*" becomes */
	char id[CONTRACT_ID_MAX];	   /* operationId, unique in the document */
	struct contract_param *params;
	int nparams;
};

struct contract {
	struct contract_route *routes; /* the configuration's, in order */
	int nroutes;
	struct contract_op *ops;
	int nops;
	int any_problem, any_stripe, any_jwt, any_auth; /* over the live routes */
	const char *store_unavailable;			/* "fail-open" or "fail-closed" */
	int fail_open;
	char *link;  /* Link's value on every error; NULL without contract_url */
	const char *server; /* contract_server: the API's base URL; NULL when not said */
	char *intro; /* what every route shares, CommonMark */
	/* Stripe's error type and code of each kind, as problem.c renders them. */
	char stripe_type[PROBLEM_KIND_COUNT][CONTRACT_NAME_MAX];
	char stripe_code[PROBLEM_KIND_COUNT][CONTRACT_NAME_MAX];
	const char *stripe_types[CONTRACT_NKINDS]; /* the distinct types a client may meet */
	int nstripe_types;
};

/*
 * Every fact of conf into c. Returns 0, or -1 when out of memory; free c
 * with contract_free either way.
 */
int contract_build(struct contract *c, const struct conf *conf) __attribute__((warn_unused_result));
void contract_free(struct contract *c);

/*
 * The next item of s from status *st on: a whole class ("4xx") or one
 * status ("503"), into out (CONTRACT_STATUS_TEXT bytes). 0, or -1 past
 * the last one. *st starts at CONTRACT_STATUS_MIN.
 */
int contract_status_next(const struct status_set *s, int *st, char *out);

/* ---- CommonMark, for the sentences and the renderers ---- */

/* A text being written into memory (open_memstream). */
struct contract_text {
	FILE *f;
	char *s;
	size_t n;
};

/* Start t: its stream, or NULL when out of memory (contract_text_end then returns NULL). */
FILE *contract_text_begin(struct contract_text *t);

/* The text written (malloc'd, the caller frees it; its length in *len when
 * len is not NULL), or NULL when it could not be written whole. */
char *contract_text_end(struct contract_text *t, size_t *len);

/* s as a CommonMark code span: the fence is longer than any run of backticks in it. */
void contract_code(FILE *f, const char *s);

/* The name a client sees for kind on cr: the problem's, or Stripe's code and type. */
void contract_error_name(FILE *f, const struct contract *c, const struct contract_route *cr,
			 enum problem_kind kind);

#endif
