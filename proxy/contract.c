/*
 * The published idempotency contract (DESIGN section 10), from struct conf
 * alone.
 *
 * Each route's facts are worked out once (contract_build: one sentence per
 * fact and the rows of its status table), then rendered as Markdown or as
 * an OpenAPI 3.1 document; the two formats cannot tell a client different
 * things. Sentences are CommonMark, which OpenAPI descriptions take too.
 * Nothing here reads a conninfo, a file path or a secret: an actor is told
 * by its kind of source and the header a client sends.
 */
#include "proxy/contract.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "conf/conf.h"
#include "proxy/actor.h"
#include "proxy/http.h"
#include "proxy/idemkey.h"
#include "proxy/json.h"
#include "proxy/keysource.h"
#include "proxy/marker.h"
#include "proxy/problem.h"
#include "proxy/respond.h"

#define CONTRACT_TITLE		 "idemproxy idempotency contract"
#define CONTRACT_OPENAPI_VERSION "3.1.0"
#define CONTRACT_NAME_MAX	 64  /* a Stripe error type or code, a rest parameter */
#define CONTRACT_ID_MAX		 160 /* an operationId: operation, method and a number */
#define CONTRACT_DUR_MAX	 32
#define CONTRACT_STATUS_MIN	 100
#define CONTRACT_STATUS_MAX	 599
#define CONTRACT_STATUS_TEXT	 8 /* "503" or "4xx" and a NUL */
/* A key's longest spelling: the sf-string form with every character escaped. */
#define CONTRACT_KEY_WIRE_MAX (2 + 2 * IDEMKEY_MAX)
/* What idemkey.c accepts: bare visible ASCII without '"', or "..." with \" and \\. */
#define CONTRACT_KEY_PATTERN "^(?:[!#-~]{1,255}|\"(?:[!#-\\[\\]-~]|\\\\[\"\\\\]){1,255}\")$"
_Static_assert(IDEMKEY_MAX == 255, "CONTRACT_KEY_PATTERN spells IDEMKEY_MAX");

/* Security scheme names (components.securitySchemes) of credential actors. */
#define CONTRACT_SCHEME_JWT  "bearerJWT"
#define CONTRACT_SCHEME_AUTH "authorizationHeader"

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
	FACT_COUNT
};

static const char *const contract_fact_labels[FACT_COUNT] = {
    [FACT_KEY] = "Key",
    [FACT_KEY_SYNTAX] = "Key syntax",
    [FACT_REQUIRED] = "Key required",
    [FACT_ACTOR] = "Actor",
    [FACT_FINGERPRINT] = "Fingerprint",
    [FACT_RETENTION] = "Retention",
    [FACT_IN_PROGRESS] = "Duplicate in flight",
    [FACT_UNKNOWN] = "Unknown outcome",
    [FACT_UPSTREAM] = "API statuses",
    [FACT_ERRORS] = "Errors",
};

/* The problems an intercepted request may get, in the order of DESIGN 5.1. */
static const enum problem_kind contract_kinds[] = {
    PROBLEM_KEY_MISSING,
    PROBLEM_KEY_INVALID,
    PROBLEM_ACTOR_MISSING,
    PROBLEM_ACTOR_INVALID,
    PROBLEM_TOO_LARGE,
    PROBLEM_CONFLICT,
    PROBLEM_IN_PROGRESS,
    PROBLEM_OUTCOME_UNKNOWN,
    PROBLEM_STORE_UNAVAILABLE,
    PROBLEM_KEY_UNAVAILABLE,
    PROBLEM_UPSTREAM_UNAVAILABLE,
    PROBLEM_UPSTREAM_ERROR,
    PROBLEM_UPSTREAM_TIMEOUT,
};
#define CONTRACT_NKINDS ((int)(sizeof(contract_kinds) / sizeof(contract_kinds[0])))

static const char *const contract_transform_names[] = {
    [FPT_NONE] = NULL, [FPT_TRIM] = "trim",	[FPT_LOWER] = "lower",
    [FPT_INT] = "int", [FPT_NUMBER] = "number", [FPT_STRING] = "string",
};
static const char *const contract_transform_prose[] = {
    [FPT_NONE] = NULL,		 [FPT_TRIM] = "trimmed",       [FPT_LOWER] = "lower-cased",
    [FPT_INT] = "as an integer", [FPT_NUMBER] = "as a number", [FPT_STRING] = "as a string",
};

/* One row of a route's status table. */
struct contract_row {
	enum problem_kind kind;
	int status;
	char *when; /* CommonMark */
};

struct contract_route {
	const struct route *r;
	int stripe;		/* errors stripe */
	char *fact[FACT_COUNT]; /* CommonMark sentences */
	char *facts_list;	/* the facts as a CommonMark list (OpenAPI descriptions) */
	struct contract_row rows[CONTRACT_NKINDS];
	int nrows; /* sorted by status */
	int live;  /* it intercepts some method and path */
};

/* One method and path a route intercepts. */
struct contract_op {
	const struct contract_route *cr;
	const struct route_match *m;
	char *label;   /* "`METHOD /path`" as configured, a final "*" kept (CommonMark) */
	char *oa_path; /* OpenAPI templating: "/files/{rest}" */
	char rest[CONTRACT_NAME_MAX]; /* the parameter a final "*" becomes */
	char id[CONTRACT_ID_MAX];     /* operationId, unique in the document */
};

struct contract {
	const struct conf *conf;
	struct contract_route *routes; /* conf's, in order */
	struct contract_op *ops;
	int nops;
	int any_problem, any_stripe, any_jwt, any_auth;
	char *intro; /* what every route shares, CommonMark */
	/* Stripe's error type and code of each kind, as problem.c renders them. */
	char stripe_type[PROBLEM_KIND_COUNT][CONTRACT_NAME_MAX];
	char stripe_code[PROBLEM_KIND_COUNT][CONTRACT_NAME_MAX];
};

/* ---- text ---- */

/* A text being written into memory (open_memstream). */
struct contract_text {
	FILE *f;
	char *s;
	size_t n;
};

static FILE *contract_text_begin(struct contract_text *t)
{
	t->s = NULL;
	t->n = 0;
	t->f = open_memstream(&t->s, &t->n);
	return t->f;
}

/* The text written (malloc'd, the caller frees it; its length in *len when
 * len is not NULL), or NULL when it could not be written whole. */
static char *contract_text_end(struct contract_text *t, size_t *len)
{
	int failed;

	if (!t->f)
		return NULL;
	failed = ferror(t->f);
	if (fclose(t->f) != 0 || failed) {
		free(t->s);
		return NULL;
	}
	if (len)
		*len = t->n;
	return t->s;
}

/* s as a CommonMark code span: the fence is longer than any run of backticks in it. */
static void contract_code(FILE *f, const char *s)
{
	size_t run = 0, longest = 0, n = strlen(s);

	for (size_t i = 0; i < n; i++) {
		run = s[i] == '`' ? run + 1 : 0;
		if (run > longest)
			longest = run;
	}
	for (size_t i = 0; i <= longest; i++)
		fputc('`', f);
	if (n && (s[0] == '`' || s[n - 1] == '`'))
		fputc(' ', f);
	fputs(s, f);
	if (n && (s[0] == '`' || s[n - 1] == '`'))
		fputc(' ', f);
	for (size_t i = 0; i <= longest; i++)
		fputc('`', f);
}

/* names as code spans separated by ", ". */
static void contract_code_list(FILE *f, char *const *names, int n)
{
	for (int i = 0; i < n; i++) {
		if (i)
			fputs(", ", f);
		contract_code(f, names[i]);
	}
}

/* A duration the way the configuration writes it: 24h, 90m, 250ms. */
static void contract_duration(char *out, size_t n, int64_t ms)
{
	static const struct {
		int64_t ms;
		const char *unit;
	} units[] = {{86400000, "d"}, {3600000, "h"}, {60000, "m"}, {1000, "s"}};

	for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
		/* Days from two on: a day reads better as 24h, the default. */
		if (ms >= units[i].ms * (i == 0 ? 2 : 1) && ms % units[i].ms == 0) {
			snprintf(out, n, "%lld%s", (long long)(ms / units[i].ms), units[i].unit);
			return;
		}
	}
	snprintf(out, n, "%lldms", (long long)ms);
}

/*
 * The next item of s from status *st on: a whole class ("4xx") or one
 * status ("503"), into out (CONTRACT_STATUS_TEXT bytes). 0, or -1 past
 * the last one.
 */
static int contract_status_next(const struct status_set *s, int *st, char *out)
{
	int full;

	for (; *st <= CONTRACT_STATUS_MAX; (*st)++) {
		if (!status_set_has(s, *st))
			continue;
		full = *st % 100 == 0;
		for (int i = *st; full && i < *st + 100; i++)
			full = status_set_has(s, i);
		if (full) {
			snprintf(out, CONTRACT_STATUS_TEXT, "%dxx", *st / 100);
			*st += 100;
		} else {
			snprintf(out, CONTRACT_STATUS_TEXT, "%d", *st);
			(*st)++;
		}
		return 0;
	}
	return -1;
}

static void contract_status_list(FILE *f, const struct status_set *s)
{
	char item[CONTRACT_STATUS_TEXT];
	int st = CONTRACT_STATUS_MIN, n = 0;

	while (contract_status_next(s, &st, item) == 0) {
		fputs(n++ ? ", " : "", f);
		contract_code(f, item);
	}
	if (!n)
		fputs("none", f);
}

/* ---- facts ---- */

/* The header a client names its actor with; NULL for anonymous. */
static const char *contract_actor_header(const struct route *r)
{
	switch (r->actor) {
	case ACTOR_HEADER:
		return r->actor_header;
	case ACTOR_JWT:
		return r->actor_header ? r->actor_header : "Authorization";
	case ACTOR_AUTHORIZATION:
		return "Authorization";
	default:
		return NULL;
	}
}

static const char *contract_actor_source(const struct route *r)
{
	switch (r->actor) {
	case ACTOR_HEADER:
		return "header";
	case ACTOR_JWT:
		return "jwt";
	case ACTOR_AUTHORIZATION:
		return "authorization";
	default:
		return "anonymous";
	}
}

/* Where r's key comes from: "header", "query" or "json", and its name or path. */
static const char *contract_key_in(const struct conf *conf, const struct route *r,
				   const char **name)
{
	*name = keysource_name(conf, r);
	return keysource_wording(r)->in;
}

static void fact_key(FILE *f, const struct conf *conf, const struct route *r)
{
	const struct keysource_wording *w = keysource_wording(r);

	fputs(w->before, f);
	contract_code(f, keysource_name(conf, r));
	fputs(w->after, f);
}

static void fact_key_syntax(FILE *f, const struct conf *conf, const struct route *r)
{
	fprintf(f,
		"1 to %d visible ASCII characters (`!` to `~`), bare (`abc`) or as an RFC 8941 "
		"string (`\"abc\"`, whose only escapes are `\\\"` and `\\\\`); both spellings "
		"are the same key and the quotes do not count toward the length. A bare key "
		"cannot contain `\"`; an empty value, or two keys, is invalid",
		IDEMKEY_MAX);
	if (r->key_from == KEY_FROM_JSON)
		fputs("; an integer counts as its decimal text", f);
}

static void fact_required(FILE *f, const struct conf *conf, const struct route *r)
{
	if (r->key == KEY_OPTIONAL)
		fputs("no: a request without a key is forwarded as it is, without idempotency "
		      "(a retry of it may run again)",
		      f);
	else
		fputs("yes: a request without a key gets 400 `idempotency-key-missing`", f);
}

static void fact_actor(FILE *f, const struct conf *conf, const struct route *r)
{
	switch (r->actor) {
	case ACTOR_HEADER:
		fputs("the ", f);
		contract_code(f, r->actor_header);
		fprintf(f,
			" header, as the client sends it (1 to %d bytes of UTF-8 without "
			"control characters)",
			ACTOR_MAX);
		break;
	case ACTOR_JWT:
		fputs("a bearer token (JWT)", f);
		if (r->jwt_issuer) {
			fputs(" from issuer ", f);
			contract_code(f, r->jwt_issuer);
		}
		if (r->jwt_audience) {
			fputs(" for audience ", f);
			contract_code(f, r->jwt_audience);
		}
		fputs(r->jwt_require_exp ? ", carrying `exp`, claim " : ", claim ", f);
		contract_code(f, r->jwt_claim ? r->jwt_claim : "sub");
		fputs(r->actor_header ? ", as the whole value of the " : ", in the ", f);
		contract_code(f, contract_actor_header(r));
		fputs(r->actor_header ? " header" : " header (`Bearer TOKEN`)", f);
		fputs("; a claim that is an integer and one that is a string of the same digits "
		      "are two actors",
		      f);
		break;
	case ACTOR_AUTHORIZATION:
		fputs("the `Authorization` header's value (hashed: the credential itself is "
		      "never stored), its scheme in any case: `Bearer K` and `bearer  K` are one "
		      "actor, `Bearer K` and `Bearer k` two",
		      f);
		break;
	default:
		fputs("anonymous: every client shares one scope, so a key is shared by all "
		      "callers of this operation",
		      f);
	}
	if (r->actor != ACTOR_ANONYMOUS)
		fputs(". A key belongs to its actor: the same key from another actor is another "
		      "request",
		      f);
}

/* The JSON part of a fingerprint: the whole body or its selected fields. */
static void contract_fp_json(FILE *f, const struct route *r)
{
	if (!r->nfields) {
		fputs(", and the whole JSON body in canonical form (key order, blanks, escapes "
		      "and the spelling of numbers do not count)",
		      f);
	} else {
		fputs(", and the JSON body's field", f);
		fputs(r->nfields > 1 ? "s " : " ", f);
		for (int i = 0; i < r->nfields; i++) {
			fputs(i ? ", " : "", f);
			contract_code(f, r->fields[i].path);
			if (contract_transform_prose[r->fields[i].transform])
				fprintf(f, " (%s)",
					contract_transform_prose[r->fields[i].transform]);
		}
	}
	fputs(". A body that is not JSON counts by its raw bytes", f);
}

static void fact_fingerprint(FILE *f, const struct conf *conf, const struct route *r)
{
	fputs("the method, the path, the query (its parameters sorted)", f);
	if (r->nfp_headers) {
		fputs(r->nfp_headers > 1 ? ", the headers " : ", the header ", f);
		contract_code_list(f, r->fp_headers, r->nfp_headers);
	}
	if (r->fingerprint == FP_BODY)
		fputs(", and the body's raw bytes", f);
	else if (r->fingerprint == FP_NONE)
		fputs("; the body does not count", f);
	else
		contract_fp_json(f, r);
	fputs(". A retry must repeat them: the same key with a different request is refused", f);
}

static void fact_retention(FILE *f, const struct conf *conf, const struct route *r)
{
	char d[CONTRACT_DUR_MAX];

	contract_duration(d, sizeof(d), r->retention_ms);
	fprintf(f,
		"%s from completion: until then a retry gets the stored response again; "
		"after it the key may run again",
		d);
}

static void fact_in_progress(FILE *f, const struct conf *conf, const struct route *r)
{
	char d[CONTRACT_DUR_MAX];

	if (r->in_progress == IN_PROGRESS_WAIT) {
		contract_duration(d, sizeof(d), r->in_progress_wait_ms);
		fprintf(f,
			"held up to %s for the first request to finish, then its response "
			"(a replay); 409 `operation-in-progress` if it still runs, or at once "
			"when too many duplicates wait already",
			d);
	} else {
		fputs("409 `operation-in-progress` at once", f);
	}
	fputs(", with `Retry-After` and `Retry-After-Ms` estimating when the first request "
	      "will be done",
	      f);
}

static void fact_unknown(FILE *f, const struct conf *conf, const struct route *r)
{
	if (r->recovery == RECOVERY_FORWARD)
		fputs("a retry runs again: it is forwarded once more, with the same key, so the "
		      "API must tolerate a second attempt of a request whose first may have "
		      "taken effect",
		      f);
	else
		fputs("409 `outcome-unknown`: the first attempt may or may not have taken "
		      "effect, and the key keeps this answer until an operator resolves it",
		      f);
	fputs(" (the outcome is unknown when the API failed or timed out after the request "
	      "was sent, or the proxy handling it vanished)",
	      f);
}

static void fact_upstream(FILE *f, const struct conf *conf, const struct route *r)
{
	fputs("the API's ", f);
	contract_status_list(f, &r->release_on);
	fputs(" release the key (nothing is stored: fix the request and retry with the same "
	      "key); ",
	      f);
	contract_status_list(f, &r->unknown_on);
	fputs(" make the outcome unknown; every other status is stored and replayed, `5xx` "
	      "included",
	      f);
}

static void fact_errors(FILE *f, const struct conf *conf, const struct route *r)
{
	if (r->errors == ERRORS_STRIPE) {
		fputs("Stripe's shape: ", f);
		contract_code(f, PROBLEM_STRIPE_MEDIA_TYPE);
		fputs(", `{\"error\":{\"type\",\"code\",\"message\"}}` with `code` the error's "
		      "name below, and `Stripe-Should-Retry` besides `X-Should-Retry`",
		      f);
		return;
	}
	fputs("RFC 9457 ", f);
	contract_code(f, PROBLEM_MEDIA_TYPE);
	fputs(" with `type`, `title`, `status` and `detail`; `type` is ", f);
	contract_code(f, conf->problem_base ? conf->problem_base : "");
	fputs(" followed by the error's name below", f);
}

static void (*const contract_fact_writers[FACT_COUNT])(FILE *, const struct conf *,
						       const struct route *) = {
    [FACT_KEY] = fact_key,
    [FACT_KEY_SYNTAX] = fact_key_syntax,
    [FACT_REQUIRED] = fact_required,
    [FACT_ACTOR] = fact_actor,
    [FACT_FINGERPRINT] = fact_fingerprint,
    [FACT_RETENTION] = fact_retention,
    [FACT_IN_PROGRESS] = fact_in_progress,
    [FACT_UNKNOWN] = fact_unknown,
    [FACT_UPSTREAM] = fact_upstream,
    [FACT_ERRORS] = fact_errors,
};

/* 1 when conf can answer kind at all: key-unavailable only with body_encryption. */
static int contract_kind_configured(const struct conf *conf, enum problem_kind kind)
{
	return kind != PROBLEM_KEY_UNAVAILABLE || conf->body_encryption.path != NULL;
}

/* 1 when a request of route r can get kind at all. */
static int contract_row_applies(const struct conf *conf, const struct route *r,
				enum problem_kind kind)
{
	if (!contract_kind_configured(conf, kind))
		return 0;
	switch (kind) {
	case PROBLEM_KEY_MISSING:
		return r->key != KEY_OPTIONAL;
	case PROBLEM_ACTOR_MISSING:
	case PROBLEM_ACTOR_INVALID:
		return r->actor != ACTOR_ANONYMOUS;
	case PROBLEM_OUTCOME_UNKNOWN:
		return r->recovery != RECOVERY_FORWARD;
	default:
		return 1;
	}
}

/* What a missing or invalid actor is on r. */
static void contract_actor_fault(FILE *f, const struct route *r, int invalid)
{
	if (!invalid) {
		fputs(r->actor == ACTOR_JWT && !r->actor_header ? "no bearer token in the " : "no ",
		      f);
		contract_code(f, contract_actor_header(r));
		fputs(" header", f);
	} else if (r->actor == ACTOR_JWT) {
		fputs("the token does not verify (signature, algorithm, expiry, issuer, audience "
		      "or claim), is malformed or is given twice",
		      f);
		if (r->jwt_require_exp)
			fputs(", or has no `exp`", f);
	} else {
		contract_code(f, contract_actor_header(r));
		if (r->actor == ACTOR_HEADER)
			fprintf(f,
				" is empty, given twice, over %d bytes, not UTF-8 or holds "
				"control characters",
				ACTOR_MAX);
		else
			fputs(" is empty, has no credential after its scheme, or is given twice",
			      f);
	}
}

/* When a request of r gets kind. */
static void contract_when(FILE *f, const struct conf *conf, const struct route *r,
			  enum problem_kind kind)
{
	char d[CONTRACT_DUR_MAX];

	switch (kind) {
	case PROBLEM_KEY_MISSING:
		fputs("no key in ", f);
		fact_key(f, conf, r);
		break;
	case PROBLEM_KEY_INVALID:
		fputs("the key does not follow the key syntax, or is given twice", f);
		break;
	case PROBLEM_ACTOR_MISSING:
	case PROBLEM_ACTOR_INVALID:
		contract_actor_fault(f, r, kind == PROBLEM_ACTOR_INVALID);
		break;
	case PROBLEM_TOO_LARGE:
		fprintf(f, "the body is larger than %zu bytes", conf->max_request_body);
		break;
	case PROBLEM_CONFLICT:
		fputs("the key was used before with a different request (another fingerprint)", f);
		break;
	case PROBLEM_IN_PROGRESS:
		fputs(r->in_progress == IN_PROGRESS_WAIT
			  ? "a request with this key still runs after the wait"
			  : "a request with this key still runs",
		      f);
		break;
	case PROBLEM_OUTCOME_UNKNOWN:
		fputs("the first attempt's outcome is unknown", f);
		break;
	case PROBLEM_STORE_UNAVAILABLE:
		fputs("the idempotency store cannot be reached: nothing was sent to the API", f);
		if (conf->store_unavailable == STORE_FAIL_OPEN)
			fputs(" (only when a claim's answer was lost; otherwise the request is "
			      "forwarded without idempotency)",
			      f);
		break;
	case PROBLEM_KEY_UNAVAILABLE:
		fputs("the first request's stored response is sealed with a key this instance "
		      "does not have yet (a key rotation reaching every instance): nothing was "
		      "sent to the API",
		      f);
		break;
	case PROBLEM_UPSTREAM_UNAVAILABLE:
		fputs("the API could not be reached: nothing was sent, and the key is free again",
		      f);
		break;
	case PROBLEM_UPSTREAM_ERROR:
		fputs("the API failed after the request was sent: the outcome is unknown", f);
		break;
	case PROBLEM_UPSTREAM_TIMEOUT:
		contract_duration(d, sizeof(d), conf->upstream_timeout_ms);
		fprintf(f,
			"the API did not answer within %s of the request: the outcome is "
			"unknown",
			d);
		break;
	default:
		break;
	}
}

/* cr's rows: those r can get, stable-sorted by status. Returns 0 or -1. */
static int contract_rows(struct contract_route *cr, const struct conf *conf)
{
	struct contract_text t;
	struct contract_row row;
	int i, j;

	for (i = 0; i < CONTRACT_NKINDS; i++) {
		if (!contract_row_applies(conf, cr->r, contract_kinds[i]))
			continue;
		if (!contract_text_begin(&t))
			return -1;
		contract_when(t.f, conf, cr->r, contract_kinds[i]);
		row.kind = contract_kinds[i];
		row.status = respond_problem_status(conf, cr->r, row.kind);
		row.when = contract_text_end(&t, NULL);
		if (!row.when)
			return -1;
		for (j = cr->nrows; j > 0 && cr->rows[j - 1].status > row.status; j--)
			cr->rows[j] = cr->rows[j - 1];
		cr->rows[j] = row;
		cr->nrows++;
	}
	return 0;
}

/* cr's sentences, and them as one list for OpenAPI. Returns 0 or -1. */
static int contract_facts(struct contract_route *cr, const struct conf *conf)
{
	struct contract_text t;

	for (int i = 0; i < FACT_COUNT; i++) {
		if (!contract_text_begin(&t))
			return -1;
		contract_fact_writers[i](t.f, conf, cr->r);
		cr->fact[i] = contract_text_end(&t, NULL);
		if (!cr->fact[i])
			return -1;
	}
	if (!contract_text_begin(&t))
		return -1;
	for (int i = 0; i < FACT_COUNT; i++)
		fprintf(t.f, "- **%s**: %s.\n", contract_fact_labels[i], cr->fact[i]);
	cr->facts_list = contract_text_end(&t, NULL);
	return cr->facts_list ? 0 : -1;
}

/* Stripe's type and code of every kind (problem.c's table). Returns 0. */
static int contract_stripe_names(struct contract *c)
{
	for (int i = 0; i < CONTRACT_NKINDS; i++) {
		snprintf(c->stripe_type[contract_kinds[i]], CONTRACT_NAME_MAX, "%s",
			 problem_stripe_type(contract_kinds[i]));
		problem_stripe_code(contract_kinds[i], c->stripe_code[contract_kinds[i]],
				    CONTRACT_NAME_MAX);
	}
	return 0;
}

/* ---- paths and operations ---- */

/* The name a final "*" of m takes in OpenAPI: "rest", unless m has a {rest}. */
static void contract_rest_name(const struct route_match *m, char *out, size_t n)
{
	size_t len = (size_t)snprintf(out, n, "rest");

	for (int i = 0; i < m->nsegs && len + 1 < n; i++) {
		if (m->segs[i].kind == SEG_PARAM && m->segs[i].len == len &&
		    memcmp(m->segs[i].text, out, len) == 0) {
			out[len++] = '_';
			out[len] = '\0';
			i = -1; /* check the new name against every segment */
		}
	}
}

/* m's path template, a final "*" written as {rest} (rest NULL: as "*"). */
static void contract_path(FILE *f, const struct route_match *m, const char *rest)
{
	if (m->nsegs == 0)
		fputc('/', f);
	for (int i = 0; i < m->nsegs; i++) {
		const struct path_seg *s = &m->segs[i];

		if (s->kind == SEG_LITERAL)
			fprintf(f, "/%.*s", (int)s->len, s->text);
		else if (s->kind == SEG_PARAM)
			fprintf(f, "/{%.*s}", (int)s->len, s->text);
		else if (rest)
			fprintf(f, "/{%s}", rest);
		else
			fputs("/*", f);
	}
}

/* m's OpenAPI path, or (rest NULL) its method and path as a code span. */
static char *contract_op_text(const struct route_match *m, const char *rest)
{
	struct contract_text t;
	char *plain;

	if (!contract_text_begin(&t))
		return NULL;
	if (rest) {
		contract_path(t.f, m, rest);
		return contract_text_end(&t, NULL);
	}
	fprintf(t.f, "%s ", m->method);
	contract_path(t.f, m, NULL);
	plain = contract_text_end(&t, NULL);
	if (!plain || !contract_text_begin(&t)) {
		free(plain);
		return NULL;
	}
	contract_code(t.f, plain);
	free(plain);
	return contract_text_end(&t, NULL);
}

/* op's operationId: OPERATION_method, numbered when another op has it. */
static void contract_op_id(const struct contract *c, struct contract_op *op)
{
	char base[CONTRACT_ID_MAX - 12]; /* room for "_N" */
	size_t n = (size_t)snprintf(base, sizeof(base), "%s_", op->cr->r->operation);

	for (const char *s = op->m->method; *s && n + 1 < sizeof(base); s++)
		base[n++] = (char)(*s >= 'A' && *s <= 'Z' ? *s - 'A' + 'a' : *s);
	base[n] = '\0';
	snprintf(op->id, sizeof(op->id), "%s", base);
	for (int k = 2, i = 0; i < c->nops; i++) {
		if (strcmp(c->ops[i].id, op->id) == 0) {
			snprintf(op->id, sizeof(op->id), "%s_%d", base, k++);
			i = -1;
		}
	}
}

/* Add the intercepted method and path m of cr. Returns 0 or -1. */
static int contract_add_op(struct contract *c, const struct contract_route *cr,
			   const struct route_match *m)
{
	struct contract_op *op = &c->ops[c->nops];

	memset(op, 0, sizeof(*op));
	op->cr = cr;
	op->m = m;
	contract_rest_name(m, op->rest, sizeof(op->rest));
	op->label = contract_op_text(m, NULL);
	op->oa_path = contract_op_text(m, op->rest);
	if (!op->label || !op->oa_path) {
		free(op->label);
		free(op->oa_path);
		return -1;
	}
	contract_op_id(c, op);
	c->nops++;
	return 0;
}

/* ---- the contract ---- */

/* The kinds a client may retry as they are, for the X-Should-Retry line. */
static void contract_retry_kinds(FILE *f, const struct conf *conf)
{
	int n = 0;

	for (int i = 0; i < CONTRACT_NKINDS; i++) {
		if (!problem_should_retry(contract_kinds[i]) ||
		    !contract_kind_configured(conf, contract_kinds[i]))
			continue;
		fputs(n++ ? ", " : "", f);
		contract_code(f, problem_name(contract_kinds[i]));
	}
}

/* What every route shares: how to use keys and what answers carry. 0 or -1. */
static int contract_intro(FILE *f, const struct contract *c)
{
	const struct conf *conf = c->conf;
	char *link;

	fprintf(f,
		"Generated by idemproxy %s from its configuration. Each route below takes "
		"an idempotency key, so that a request retried after a timeout or a dropped "
		"connection takes effect at most once.\n\n",
		IDEMPROXY_VERSION);
	fputs("## How to use keys\n\n"
	      "Make one key per intent (a random UUID, say) when the user decides to act: one "
	      "payment, one order. Keep it, and send it with every retry of that request, "
	      "unchanged: a retry of a completed request gets the first response again instead "
	      "of running twice, and a retry while the first still runs is told to wait. A new "
	      "intent takes a new key; a key reused with a different request is refused. A key "
	      "belongs to its actor and to the route's operation.\n\n",
	      f);
	fputs("## What every answer carries\n\n"
	      "- A replay is the stored response (status, headers such as `Location`, body) "
	      "with `Idempotent-Replayed: true`.\n"
	      "- `Idempotency-Key-Expires` (an HTTP date) on the responses of completed "
	      "records, the first one and every replay: after it the key may run again.\n",
	      f);
	fprintf(f,
		"- `Idempotency-Body-Omitted: true` on a replay whose body (over %zu bytes) "
		"was not stored: the status and headers are the first response's, the body is "
		"empty.\n",
		conf->max_stored_body);
	fputs("- `X-Should-Retry` on every error: `true` when the same request may succeed "
	      "later (",
	      f);
	contract_retry_kinds(f, conf);
	fputs("), `false` otherwise.\n", f);
	if (conf->contract_url) {
		if (asprintf(&link, "%s: " RESPOND_LINK_FORMAT,
			     respond_problem_header(RESPOND_PH_LINK)->name, conf->contract_url) < 0)
			return -1;
		fputs("- ", f);
		contract_code(f, link);
		fputs(" on every error: this contract.\n", f);
		free(link);
	}
	if (conf->store_unavailable == STORE_FAIL_OPEN)
		fputs(
		    "- While the idempotency store is unreachable, requests are forwarded "
		    "without idempotency and their responses carry `Idempotency-Enforced: false`: "
		    "such a request may run more than once.\n",
		    f);
	return 0;
}

static void contract_free(struct contract *c)
{
	for (int i = 0; c->routes && i < c->conf->nroutes; i++) {
		for (int j = 0; j < FACT_COUNT; j++)
			free(c->routes[i].fact[j]);
		free(c->routes[i].facts_list);
		for (int j = 0; j < c->routes[i].nrows; j++)
			free(c->routes[i].rows[j].when);
	}
	for (int i = 0; i < c->nops; i++) {
		free(c->ops[i].label);
		free(c->ops[i].oa_path);
	}
	free(c->routes);
	free(c->ops);
	free(c->intro);
}

/* Note which dialects and credential schemes the contract needs. */
static void contract_note_route(struct contract *c, struct contract_route *cr)
{
	cr->live = 1;
	cr->stripe = cr->r->errors == ERRORS_STRIPE;
	c->any_stripe |= cr->stripe;
	c->any_problem |= !cr->stripe;
	c->any_jwt |= cr->r->actor == ACTOR_JWT && !cr->r->actor_header;
	c->any_auth |= cr->r->actor == ACTOR_AUTHORIZATION;
}

/* Every fact of conf, worked out once. Returns 0, or -1 (free c anyway). */
static int contract_build(struct contract *c, const struct conf *conf)
{
	struct contract_text t;
	int nmatches = 0, before;

	memset(c, 0, sizeof(*c));
	c->conf = conf;
	for (int i = 0; i < conf->nroutes; i++)
		nmatches += conf->routes[i].nmatches;
	c->routes = calloc((size_t)conf->nroutes + 1, sizeof(*c->routes));
	c->ops = calloc((size_t)nmatches + 1, sizeof(*c->ops));
	if (!c->routes || !c->ops || contract_stripe_names(c) < 0)
		return -1;
	for (int i = 0; i < conf->nroutes; i++) {
		struct contract_route *cr = &c->routes[i];
		const struct route *r = &conf->routes[i];

		cr->r = r;
		if (contract_facts(cr, conf) < 0 || contract_rows(cr, conf) < 0)
			return -1;
		before = c->nops;
		for (int j = 0; j < r->nmatches; j++) {
			/* Safe methods pass through untouched: nothing to promise. */
			if (http_method_is_safe(r->matches[j].method))
				continue;
			if (contract_add_op(c, cr, &r->matches[j]) < 0)
				return -1;
		}
		if (c->nops > before)
			contract_note_route(c, cr);
	}
	if (!contract_text_begin(&t))
		return -1;
	if (contract_intro(t.f, c) < 0) {
		free(contract_text_end(&t, NULL));
		return -1;
	}
	c->intro = contract_text_end(&t, NULL);
	return c->intro ? 0 : -1;
}

/* The name a client sees for kind on cr: the problem's, or Stripe's code and type. */
static void contract_error_name(FILE *f, const struct contract *c, const struct contract_route *cr,
				enum problem_kind kind)
{
	if (!cr->stripe) {
		contract_code(f, problem_name(kind));
		return;
	}
	contract_code(f, c->stripe_code[kind]);
	fputs(" (", f);
	contract_code(f, c->stripe_type[kind]);
	fputc(')', f);
}

/* The advice that comes with kind on cr (respond.c's headers), Link aside:
 * the intro tells it once for every error. */
static void contract_error_headers(FILE *f, const struct contract *c,
				   const struct contract_route *cr, enum problem_kind kind)
{
	const struct respond_ph_def *d;
	int n = 0;

	for (int h = 0; h < RESPOND_PH_COUNT; h++) {
		d = respond_problem_header(h);
		if (!d->advice || d->on == RESPOND_ON_CONTRACT_URL ||
		    !respond_problem_carries(c->conf, cr->stripe, kind, h))
			continue;
		fputs(n++ ? ", " : "", f);
		if (d->value == RESPOND_VALUE_BOOL)
			fprintf(f, "`%s: %s`", d->name,
				problem_should_retry(kind) ? "true" : "false");
		else
			contract_code(f, d->name);
	}
}

/* ---- Markdown ---- */

/* s in a table cell: a "|" would end the cell. */
static void md_cell(FILE *f, const char *s)
{
	for (; *s; s++) {
		if (*s == '|')
			fputs("\\|", f);
		else
			fputc(*s == '\n' ? ' ' : *s, f);
	}
}

/* "| label | text |", text escaped for its cell. */
static void md_fact_row(FILE *f, const char *label, const char *text)
{
	fprintf(f, "| %s | ", label);
	md_cell(f, text);
	fputs(" |\n", f);
}

/* cr's methods and paths, each a code span. */
static void md_paths(FILE *f, const struct contract *c, const struct contract_route *cr)
{
	const struct route_match *m;
	int rest = 0, n = 0;

	fputs("| Methods and paths | ", f);
	for (int i = 0; i < c->nops; i++) {
		if (c->ops[i].cr != cr)
			continue;
		m = c->ops[i].m;
		fputs(n++ ? ", " : "", f);
		md_cell(f, c->ops[i].label);
		rest |= m->nsegs && m->segs[m->nsegs - 1].kind == SEG_REST;
	}
	if (rest)
		fputs(" (a final `*` matches zero or more segments)", f);
	fputs(" |\n", f);
}

/* The status table: the API's own answer first, then every problem. */
static void md_statuses(FILE *f, const struct contract *c, const struct contract_route *cr)
{
	fputs("\n| Status | Error | When | Headers |\n|---|---|---|---|\n"
	      "| the API's | | a new key, or a retry after the first completed (a replay) | "
	      "`Idempotent-Replayed: true` on replays, `Idempotency-Key-Expires` |\n",
	      f);
	for (int i = 0; i < cr->nrows; i++) {
		const struct contract_row *row = &cr->rows[i];

		fprintf(f, "| %d | ", row->status);
		contract_error_name(f, c, cr, row->kind);
		fputs(" | ", f);
		md_cell(f, row->when);
		fputs(" | ", f);
		contract_error_headers(f, c, cr, row->kind);
		fputs(" |\n", f);
	}
}

static void md_route(FILE *f, const struct contract *c, const struct contract_route *cr)
{
	fputs("\n## ", f);
	contract_code(f, cr->r->operation);
	fputs("\n\n| | |\n|---|---|\n", f);
	md_paths(f, c, cr);
	for (int i = 0; i < FACT_COUNT; i++)
		md_fact_row(f, contract_fact_labels[i], cr->fact[i]);
	md_statuses(f, c, cr);
}

static void md_doc(FILE *f, const struct contract *c)
{
	int any = 0;

	fprintf(f, "# Idempotency contract\n\n%s", c->intro);
	for (int i = 0; i < c->conf->nroutes; i++) {
		for (int j = 0; j < c->nops; j++) {
			if (c->ops[j].cr == &c->routes[i]) {
				md_route(f, c, &c->routes[i]);
				any = 1;
				break;
			}
		}
	}
	if (!any)
		fputs("\nNo route intercepts anything: every request is relayed as it is.\n", f);
}

/* ---- OpenAPI ---- */

/* The document being written and the contract it tells. */
struct oa {
	struct json_writer w;
	const struct contract *c;
};

/* {"$ref": "#/components/KIND/NAME"}, with a description when it is not NULL. */
static void oa_ref(struct oa *o, const char *kind, const char *name, const char *description)
{
	char ref[CONTRACT_ID_MAX];

	snprintf(ref, sizeof(ref), "#/components/%s/%s", kind, name);
	json_map_open(&o->w);
	json_key_str(&o->w, "$ref", ref);
	if (description)
		json_key_str(&o->w, "description", description);
	json_map_close(&o->w);
}

/* {"type": "string", "const": value} or {"type": type} */
static void oa_schema(struct oa *o, const char *type, const char *value)
{
	json_key_map(&o->w, "schema");
	json_key_str(&o->w, "type", type);
	if (value)
		json_key_str(&o->w, "const", value);
	json_map_close(&o->w);
}

/* A key's schema: idemkey.c's rules; from a JSON body an integer too. */
static void oa_key_schema(struct oa *o, int json)
{
	json_map_open(&o->w);
	json_str(&o->w, "type");
	if (json) {
		json_array_open(&o->w);
		json_str(&o->w, "string");
		json_str(&o->w, "integer");
		json_array_close(&o->w);
	} else {
		json_str(&o->w, "string");
	}
	json_key_int(&o->w, "minLength", 1);
	json_key_int(&o->w, "maxLength", CONTRACT_KEY_WIRE_MAX);
	json_key_str(&o->w, "pattern", CONTRACT_KEY_PATTERN);
	json_map_close(&o->w);
}

/* The key as a header or query parameter. */
static void oa_key_param(struct oa *o, const struct contract_route *cr, const char *in,
			 const char *name)
{
	json_map_open(&o->w);
	json_key_str(&o->w, "name", name);
	json_key_str(&o->w, "in", in);
	json_key_bool(&o->w, "required", cr->r->key != KEY_OPTIONAL);
	json_key_str(&o->w, "description", cr->fact[FACT_KEY_SYNTAX]);
	json_str(&o->w, "schema");
	oa_key_schema(o, 0);
	json_map_close(&o->w);
}

/* The actor's header, when the actor is one a parameter can say (not Authorization). */
static void oa_actor_param(struct oa *o, const struct contract_route *cr)
{
	json_map_open(&o->w);
	json_key_str(&o->w, "name", cr->r->actor_header);
	json_key_str(&o->w, "in", "header");
	json_key_bool(&o->w, "required", 1);
	json_key_str(&o->w, "description", cr->fact[FACT_ACTOR]);
	json_key_map(&o->w, "schema");
	json_key_str(&o->w, "type", "string");
	json_key_int(&o->w, "minLength", 1);
	if (cr->r->actor == ACTOR_HEADER)
		json_key_int(&o->w, "maxLength", ACTOR_MAX);
	json_map_close(&o->w);
	json_map_close(&o->w);
}

static void oa_parameters(struct oa *o, const struct contract_route *cr)
{
	const char *name, *in = contract_key_in(o->c->conf, cr->r, &name);
	int key_param = strcmp(in, "json") != 0;

	json_str(&o->w, "parameters");
	json_array_open(&o->w);
	if (key_param)
		oa_key_param(o, cr, in, name);
	/* A header named twice (key and actor) is one parameter. */
	if ((cr->r->actor == ACTOR_HEADER || (cr->r->actor == ACTOR_JWT && cr->r->actor_header)) &&
	    !(key_param && strcmp(in, "header") == 0 && strcasecmp(name, cr->r->actor_header) == 0))
		oa_actor_param(o, cr);
	json_array_close(&o->w);
}

/* The JSON body holding the key at its dot path, as nested object schemas. */
static void oa_json_key_body(struct oa *o, const struct contract_route *cr, const char *path)
{
	int required = cr->r->key != KEY_OPTIONAL, depth = 0;
	const char *seg = path, *dot;

	json_key_map(&o->w, "requestBody");
	json_key_str(&o->w, "description", cr->fact[FACT_KEY]);
	json_key_bool(&o->w, "required", required);
	json_key_map(&o->w, "content");
	json_key_map(&o->w, "application/json");
	json_str(&o->w, "schema");
	for (;; seg = dot + 1, depth++) {
		dot = strchr(seg, '.');
		json_map_open(&o->w);
		json_key_str(&o->w, "type", "object");
		if (required) {
			json_str(&o->w, "required");
			json_array_open(&o->w);
			json_strn(&o->w, seg, dot ? (size_t)(dot - seg) : strlen(seg));
			json_array_close(&o->w);
		}
		json_key_map(&o->w, "properties");
		json_strn(&o->w, seg, dot ? (size_t)(dot - seg) : strlen(seg));
		if (!dot)
			break;
	}
	oa_key_schema(o, 1);
	for (depth++; depth > 0; depth--) {
		json_map_close(&o->w); /* properties */
		json_map_close(&o->w); /* the object */
	}
	json_map_close(&o->w); /* application/json */
	json_map_close(&o->w); /* content */
	json_map_close(&o->w); /* requestBody */
}

/* A set of statuses as ["4xx", "503"]. */
static void oa_status_set(struct oa *o, const char *key, const struct status_set *s)
{
	char item[CONTRACT_STATUS_TEXT];
	int st = CONTRACT_STATUS_MIN;

	json_str(&o->w, key);
	json_array_open(&o->w);
	while (contract_status_next(s, &st, item) == 0)
		json_str(&o->w, item);
	json_array_close(&o->w);
}

/* x-idempotency's key and actor: where each comes from. */
static void oa_x_key_actor(struct oa *o, const struct route *r)
{
	const char *name, *in = contract_key_in(o->c->conf, r, &name);

	json_key_map(&o->w, "key");
	json_key_str(&o->w, "in", in);
	json_key_str(&o->w, strcmp(in, "json") == 0 ? "path" : "name", name);
	json_key_bool(&o->w, "required", r->key != KEY_OPTIONAL);
	json_key_int(&o->w, "max_length", IDEMKEY_MAX);
	json_map_close(&o->w);
	json_key_map(&o->w, "actor");
	json_key_str(&o->w, "source", contract_actor_source(r));
	if (contract_actor_header(r))
		json_key_str(&o->w, "header", contract_actor_header(r));
	if (r->actor == ACTOR_JWT) {
		if (r->jwt_issuer)
			json_key_str(&o->w, "issuer", r->jwt_issuer);
		if (r->jwt_audience)
			json_key_str(&o->w, "audience", r->jwt_audience);
		json_key_str(&o->w, "claim", r->jwt_claim ? r->jwt_claim : "sub");
		json_key_bool(&o->w, "require_exp", r->jwt_require_exp);
	}
	json_map_close(&o->w);
}

static void oa_x_fingerprint(struct oa *o, const struct route *r)
{
	json_key_map(&o->w, "fingerprint");
	json_key_str(&o->w, "mode",
		     r->fingerprint == FP_BODY	 ? "body"
		     : r->fingerprint == FP_NONE ? "none"
						 : "json");
	if (r->nfields) {
		json_str(&o->w, "fields");
		json_array_open(&o->w);
		for (int i = 0; i < r->nfields; i++) {
			json_map_open(&o->w);
			json_key_str(&o->w, "path", r->fields[i].path);
			if (contract_transform_names[r->fields[i].transform])
				json_key_str(&o->w, "transform",
					     contract_transform_names[r->fields[i].transform]);
			json_map_close(&o->w);
		}
		json_array_close(&o->w);
	}
	json_str(&o->w, "headers");
	json_array_open(&o->w);
	for (int i = 0; i < r->nfp_headers; i++)
		json_str(&o->w, r->fp_headers[i]);
	json_array_close(&o->w);
	json_map_close(&o->w);
}

/* The x-idempotency extension: the route's facts as data. */
static void oa_x_idempotency(struct oa *o, const struct route *r)
{
	json_key_map(&o->w, "x-idempotency");
	json_key_str(&o->w, "operation", r->operation);
	oa_x_key_actor(o, r);
	oa_x_fingerprint(o, r);
	json_key_int(&o->w, "retention_seconds", r->retention_ms / 1000);
	json_key_map(&o->w, "in_progress");
	json_key_str(&o->w, "mode", r->in_progress == IN_PROGRESS_WAIT ? "wait" : "reject");
	if (r->in_progress == IN_PROGRESS_WAIT)
		json_key_int(&o->w, "wait_ms", r->in_progress_wait_ms);
	json_map_close(&o->w);
	json_key_str(&o->w, "recovery", r->recovery == RECOVERY_FORWARD ? "forward" : "hold");
	oa_status_set(o, "release_on", &r->release_on);
	oa_status_set(o, "unknown_on", &r->unknown_on);
	json_key_str(&o->w, "errors", r->errors == ERRORS_STRIPE ? "stripe" : "problem");
	json_key_str(&o->w, "store_unavailable",
		     o->c->conf->store_unavailable == STORE_FAIL_OPEN ? "fail-open"
								      : "fail-closed");
	json_map_close(&o->w);
}

/* The name of the components.responses entry for status in cr's dialect. */
static void oa_response_name(char *out, size_t n, int stripe, int status)
{
	snprintf(out, n, "%s%d", stripe ? "Stripe" : "Problem", status);
}

/* "- NAME: when" for each of cr's rows with status. */
static char *oa_status_description(const struct contract *c, const struct contract_route *cr,
				   int status)
{
	struct contract_text t;

	if (!contract_text_begin(&t))
		return NULL;
	for (int i = 0; i < cr->nrows; i++) {
		if (cr->rows[i].status != status)
			continue;
		fputs("- ", t.f);
		contract_error_name(t.f, c, cr, cr->rows[i].kind);
		fprintf(t.f, ": %s.\n", cr->rows[i].when);
	}
	return contract_text_end(&t, NULL);
}

static void oa_responses(struct oa *o, const struct contract_route *cr)
{
	char code[CONTRACT_STATUS_TEXT], name[CONTRACT_NAME_MAX], *text;

	json_key_map(&o->w, "responses");
	json_str(&o->w, "default");
	oa_ref(o, "responses", "Response", NULL);
	for (int i = 0; i < cr->nrows; i++) {
		if (i && cr->rows[i - 1].status == cr->rows[i].status)
			continue;
		snprintf(code, sizeof(code), "%d", cr->rows[i].status);
		oa_response_name(name, sizeof(name), cr->stripe, cr->rows[i].status);
		text = oa_status_description(o->c, cr, cr->rows[i].status);
		if (!text)
			json_writer_fail(&o->w);
		json_str(&o->w, code);
		oa_ref(o, "responses", name, text ? text : "");
		free(text);
	}
	json_map_close(&o->w);
}

static void oa_operation(struct oa *o, const struct contract_op *op)
{
	const struct contract_route *cr = op->cr;
	const char *name, *in = contract_key_in(o->c->conf, cr->r, &name);

	json_map_open(&o->w);
	json_key_str(&o->w, "operationId", op->id);
	json_key_str(&o->w, "summary", cr->r->operation);
	json_key_str(&o->w, "description", cr->facts_list);
	oa_parameters(o, cr);
	if (strcmp(in, "json") == 0)
		oa_json_key_body(o, cr, name);
	if (cr->r->actor == ACTOR_AUTHORIZATION ||
	    (cr->r->actor == ACTOR_JWT && !cr->r->actor_header)) {
		json_str(&o->w, "security");
		json_array_open(&o->w);
		json_map_open(&o->w);
		json_str(&o->w,
			 cr->r->actor == ACTOR_JWT ? CONTRACT_SCHEME_JWT : CONTRACT_SCHEME_AUTH);
		json_array_open(&o->w);
		json_array_close(&o->w);
		json_map_close(&o->w);
		json_array_close(&o->w);
	}
	oa_x_idempotency(o, cr->r);
	oa_responses(o, cr);
	json_map_close(&o->w);
}

/* 1 for a method an OpenAPI 3.1 path item has a field for (the unsafe ones). */
static int oa_method_fixed(const char *method)
{
	return !strcmp(method, "POST") || !strcmp(method, "PUT") || !strcmp(method, "PATCH") ||
	       !strcmp(method, "DELETE");
}

/* 1 when an op before k has k's path and method: the first match wins. */
static int oa_op_shadowed(const struct contract *c, int k)
{
	for (int i = 0; i < k; i++)
		if (!strcmp(c->ops[i].oa_path, c->ops[k].oa_path) &&
		    !strcmp(c->ops[i].m->method, c->ops[k].m->method))
			return 1;
	return 0;
}

/* 1 when ops[k] goes in the path item of ops[first], among the methods with a
 * field of their own (fixed) or the others. */
static int oa_op_listed(const struct contract *c, int first, int k, int fixed)
{
	return !strcmp(c->ops[k].oa_path, c->ops[first].oa_path) &&
	       oa_method_fixed(c->ops[k].m->method) == fixed && !oa_op_shadowed(c, k);
}

/* The operations of ops[first]'s path item, keyed by their method. */
static void oa_path_operations(struct oa *o, int first, int fixed)
{
	const struct contract *c = o->c;
	char method[CONTRACT_NAME_MAX];

	for (int k = first; k < c->nops; k++) {
		if (!oa_op_listed(c, first, k, fixed))
			continue;
		snprintf(method, sizeof(method), "%s", c->ops[k].m->method);
		for (char *s = method; fixed && *s; s++)
			*s = (char)(*s - 'A' + 'a');
		json_str(&o->w, method);
		oa_operation(o, &c->ops[k]);
	}
}

/* The path's parameters: each {name}, and a final "*" as {rest}. */
static void oa_path_params(struct oa *o, const struct contract_op *op)
{
	json_str(&o->w, "parameters");
	json_array_open(&o->w);
	for (int i = 0; i < op->m->nsegs; i++) {
		const struct path_seg *s = &op->m->segs[i];

		if (s->kind == SEG_LITERAL)
			continue;
		json_map_open(&o->w);
		json_str(&o->w, "name");
		if (s->kind == SEG_PARAM)
			json_strn(&o->w, s->text, s->len);
		else
			json_str(&o->w, op->rest);
		json_key_str(&o->w, "in", "path");
		json_key_bool(&o->w, "required", 1);
		json_key_str(&o->w, "description",
			     s->kind == SEG_PARAM ? "one path segment"
						  : "the rest of the path: it matches zero or more "
						    "segments, \"/\" included");
		oa_schema(o, "string", NULL);
		json_map_close(&o->w);
	}
	json_array_close(&o->w);
}

static void oa_paths(struct oa *o)
{
	const struct contract *c = o->c;
	int seen, other;

	json_key_map(&o->w, "paths");
	for (int k = 0; k < c->nops; k++) {
		seen = other = 0;
		for (int i = 0; i < k && !seen; i++)
			seen = !strcmp(c->ops[i].oa_path, c->ops[k].oa_path);
		if (seen)
			continue;
		json_key_map(&o->w, c->ops[k].oa_path);
		if (strchr(c->ops[k].oa_path, '{'))
			oa_path_params(o, &c->ops[k]);
		oa_path_operations(o, k, 1);
		for (int i = k; i < c->nops && !other; i++)
			other = oa_op_listed(c, k, i, 0);
		/* OpenAPI 3.1 has no field for other methods (3.2 calls them
		 * additionalOperations). */
		if (other) {
			json_key_map(&o->w, "x-additionalOperations");
			oa_path_operations(o, k, 0);
			json_map_close(&o->w);
		}
		json_map_close(&o->w);
	}
	json_map_close(&o->w);
}

/* The schema type of a header's value; "boolean" is the text true or false. */
static const char *const oa_value_types[] = {
    [RESPOND_VALUE_TEXT] = "string",
    [RESPOND_VALUE_BOOL] = "boolean",
    [RESPOND_VALUE_INTEGER] = "integer",
};

/* What the problem headers (respond.c's advice) mean, for components.headers. */
static const char *const oa_problem_header_descriptions[RESPOND_PH_COUNT] = {
    [RESPOND_PH_SHOULD_RETRY] = "`true` when the same request may succeed later, `false` "
				"otherwise",
    [RESPOND_PH_STRIPE_SHOULD_RETRY] = "as `X-Should-Retry`, for Stripe's SDKs",
    [RESPOND_PH_RETRY_AFTER] = "seconds to wait before retrying; for `operation-in-progress` an "
			       "estimate of when the first request will be done",
    [RESPOND_PH_RETRY_AFTER_MS] = "`Retry-After` in milliseconds",
    [RESPOND_PH_WWW_AUTHENTICATE] = "`Bearer`, or `Bearer error=\"invalid_token\"` for an actor "
				    "that is not valid",
    [RESPOND_PH_LINK] = "where this contract is published",
};

/* The headers of the API's own response: idemproxy's markers. */
static const struct oa_marker {
	const char *name;
	const char *value; /* the one value it takes, or NULL */
	int fail_open;	   /* only with store_unavailable fail-open */
	const char *description;
} oa_markers[] = {
    {MARKER_REPLAYED, "true", 0,
     "the response is the stored one of the first request with this key"},
    {MARKER_KEY_EXPIRES, NULL, 0, "an HTTP date: after it the key may run again"},
    {MARKER_BODY_OMITTED, "true", 0,
     "a replay whose body was too large to store: status and headers only"},
    {MARKER_ENFORCED, "false", 1,
     "the store was unreachable: the request was forwarded without idempotency"},
};

/* components.headers' entry name: {description, schema}; value: the one it takes, or NULL. */
static void oa_header(struct oa *o, const char *name, const char *type, const char *value,
		      const char *description)
{
	json_key_map(&o->w, name);
	json_key_str(&o->w, "description", description);
	json_key_map(&o->w, "schema");
	json_key_str(&o->w, "type", strcmp(type, "boolean") == 0 ? "string" : type);
	if (strcmp(type, "boolean") == 0) {
		json_str(&o->w, "enum");
		json_array_open(&o->w);
		json_str(&o->w, "true");
		json_str(&o->w, "false");
		json_array_close(&o->w);
	} else if (strcmp(type, "integer") == 0) {
		json_key_int(&o->w, "minimum", 1);
	}
	if (value)
		json_key_str(&o->w, "const", value);
	json_map_close(&o->w);
	json_map_close(&o->w);
}

/* 1 when some answer of the document may carry the problem header h. */
static int oa_problem_header_described(const struct contract *c, enum respond_problem_header h)
{
	switch (respond_problem_header(h)->on) {
	case RESPOND_ON_STRIPE:
		return c->any_stripe;
	case RESPOND_ON_CONTRACT_URL:
		return c->conf->contract_url != NULL;
	default:
		return 1;
	}
}

/* components.headers: every header the responses name. */
static void oa_component_headers(struct oa *o)
{
	const struct respond_ph_def *d;
	char *link = NULL;

	json_key_map(&o->w, "headers");
	for (int h = 0; h < RESPOND_PH_COUNT; h++) {
		d = respond_problem_header(h);
		if (!d->advice || !oa_problem_header_described(o->c, h))
			continue;
		if (h == RESPOND_PH_LINK &&
		    asprintf(&link, RESPOND_LINK_FORMAT, o->c->conf->contract_url) < 0) {
			link = NULL;
			json_writer_fail(&o->w);
		}
		oa_header(o, d->name, oa_value_types[d->value], h == RESPOND_PH_LINK ? link : NULL,
			  oa_problem_header_descriptions[h]);
	}
	free(link);
	for (size_t i = 0; i < sizeof(oa_markers) / sizeof(oa_markers[0]); i++)
		if (!oa_markers[i].fail_open || o->c->conf->store_unavailable == STORE_FAIL_OPEN)
			oa_header(o, oa_markers[i].name, "string", oa_markers[i].value,
				  oa_markers[i].description);
	json_map_close(&o->w);
}

/* "NAME": {"$ref": "#/components/headers/NAME"} */
static void oa_header_ref(struct oa *o, const char *name)
{
	json_str(&o->w, name);
	oa_ref(o, "headers", name, NULL);
}

_Static_assert(PROBLEM_KIND_COUNT <= 32, "kinds are a bit mask");
#define OA_KIND(k) (1u << (k))

/* The kinds the document's routes of one dialect answer with status. */
static unsigned oa_status_kinds(const struct contract *c, int stripe, int status)
{
	unsigned kinds = 0;

	for (int i = 0; i < c->conf->nroutes; i++) {
		const struct contract_route *cr = &c->routes[i];

		for (int j = 0; cr->live && cr->stripe == stripe && j < cr->nrows; j++)
			if (cr->rows[j].status == status)
				kinds |= OA_KIND(cr->rows[j].kind);
	}
	return kinds;
}

/* The advice headers that come with one of kinds, in one dialect. */
static void oa_problem_header_refs(struct oa *o, int stripe, unsigned kinds)
{
	const struct respond_ph_def *d;
	int carried;

	json_key_map(&o->w, "headers");
	for (int h = 0; h < RESPOND_PH_COUNT; h++) {
		d = respond_problem_header(h);
		carried = 0;
		for (int k = 0; d->advice && k < PROBLEM_KIND_COUNT && !carried; k++)
			carried = (kinds & OA_KIND(k)) &&
				  respond_problem_carries(o->c->conf, stripe, k, h);
		if (carried)
			oa_header_ref(o, d->name);
	}
	json_map_close(&o->w);
}

/* components.responses' entry of one dialect and status: kinds say what it may be. */
static void oa_component_response(struct oa *o, int stripe, int status, unsigned kinds)
{
	char name[CONTRACT_NAME_MAX], text[CONTRACT_ID_MAX * 4];
	size_t n = (size_t)snprintf(text, sizeof(text), "Answered %d:", status);
	int named = 0;

	for (int k = 0; k < PROBLEM_KIND_COUNT; k++) {
		if (!(kinds & OA_KIND(k)))
			continue;
		if (n < sizeof(text))
			n += (size_t)snprintf(text + n, sizeof(text) - n, "%s `%s`",
					      named++ ? "," : "",
					      stripe ? o->c->stripe_code[k] : problem_name(k));
	}
	oa_response_name(name, sizeof(name), stripe, status);
	json_key_map(&o->w, name);
	json_key_str(&o->w, "description", text);
	oa_problem_header_refs(o, stripe, kinds);
	json_key_map(&o->w, "content");
	json_key_map(&o->w, stripe ? PROBLEM_STRIPE_MEDIA_TYPE : PROBLEM_MEDIA_TYPE);
	json_str(&o->w, "schema");
	oa_ref(o, "schemas", stripe ? "StripeError" : "Problem", NULL);
	json_map_close(&o->w);
	json_map_close(&o->w);
	json_map_close(&o->w);
}

/* components.responses: the API's own response, then every problem status. */
static void oa_component_responses(struct oa *o)
{
	unsigned kinds;

	json_key_map(&o->w, "responses");
	json_key_map(&o->w, "Response");
	json_key_str(&o->w, "description",
		     "The API's own response. A retry of a completed request gets "
		     "it again, from the record, with `Idempotent-Replayed: true`.");
	json_key_map(&o->w, "headers");
	oa_header_ref(o, MARKER_REPLAYED);
	oa_header_ref(o, MARKER_KEY_EXPIRES);
	oa_header_ref(o, MARKER_BODY_OMITTED);
	if (o->c->conf->store_unavailable == STORE_FAIL_OPEN)
		oa_header_ref(o, MARKER_ENFORCED);
	json_map_close(&o->w);
	json_map_close(&o->w);
	for (int stripe = 0; stripe <= 1; stripe++) {
		for (int st = CONTRACT_STATUS_MIN; st <= CONTRACT_STATUS_MAX; st++) {
			kinds = oa_status_kinds(o->c, stripe, st);
			if (kinds)
				oa_component_response(o, stripe, st, kinds);
		}
	}
	json_map_close(&o->w);
}

/* {"type": "string"} as the property key of an object schema. */
static void oa_string_property(struct oa *o, const char *key, const char *description)
{
	json_key_map(&o->w, key);
	json_key_str(&o->w, "type", "string");
	if (description)
		json_key_str(&o->w, "description", description);
	json_map_close(&o->w);
}

static void oa_required(struct oa *o, const char *const *names)
{
	json_str(&o->w, "required");
	json_array_open(&o->w);
	for (; *names; names++)
		json_str(&o->w, *names);
	json_array_close(&o->w);
}

static void oa_problem_schema(struct oa *o)
{
	static const char *const required[] = {"type", "title", "status", NULL};

	json_key_map(&o->w, "Problem");
	json_key_str(&o->w, "description", "RFC 9457 problem details");
	json_key_str(&o->w, "type", "object");
	oa_required(o, required);
	json_key_map(&o->w, "properties");
	json_key_map(&o->w, "type");
	json_key_str(&o->w, "type", "string");
	json_key_str(&o->w, "format", "uri-reference");
	json_key_str(&o->w, "description", "problem_base followed by the error's name");
	json_map_close(&o->w);
	oa_string_property(o, "title", NULL);
	json_key_map(&o->w, "status");
	json_key_str(&o->w, "type", "integer");
	json_map_close(&o->w);
	oa_string_property(o, "detail", NULL);
	json_map_close(&o->w);
	json_map_close(&o->w);
}

static void oa_stripe_schema(struct oa *o)
{
	static const char *const outer[] = {"error", NULL}, *const inner[] = {"type", "code",
									      "message", NULL};
	const struct contract *c = o->c;

	json_key_map(&o->w, "StripeError");
	json_key_str(&o->w, "description", "An error in Stripe's shape (`errors stripe`)");
	json_key_str(&o->w, "type", "object");
	oa_required(o, outer);
	json_key_map(&o->w, "properties");
	json_key_map(&o->w, "error");
	json_key_str(&o->w, "type", "object");
	oa_required(o, inner);
	json_key_map(&o->w, "properties");
	json_key_map(&o->w, "type");
	json_key_str(&o->w, "type", "string");
	json_str(&o->w, "enum");
	json_array_open(&o->w);
	for (int i = 0; i < CONTRACT_NKINDS; i++) {
		int seen = 0;

		for (int j = 0; j < i && !seen; j++)
			seen = !strcmp(c->stripe_type[contract_kinds[j]],
				       c->stripe_type[contract_kinds[i]]);
		if (!seen)
			json_str(&o->w, c->stripe_type[contract_kinds[i]]);
	}
	json_array_close(&o->w);
	json_map_close(&o->w);
	oa_string_property(o, "code", "the error's name in snake_case");
	oa_string_property(o, "message", NULL);
	json_map_close(&o->w);
	json_map_close(&o->w);
	json_map_close(&o->w);
	json_map_close(&o->w);
}

/* The credentials a jwt or authorization actor comes from. */
static void oa_security_schemes(struct oa *o)
{
	json_key_map(&o->w, "securitySchemes");
	if (o->c->any_jwt) {
		json_key_map(&o->w, CONTRACT_SCHEME_JWT);
		json_key_str(&o->w, "type", "http");
		json_key_str(&o->w, "scheme", "bearer");
		json_key_str(&o->w, "bearerFormat", "JWT");
		json_key_str(&o->w, "description",
			     "the token's claim is the actor a key belongs to");
		json_map_close(&o->w);
	}
	if (o->c->any_auth) {
		json_key_map(&o->w, CONTRACT_SCHEME_AUTH);
		json_key_str(&o->w, "type", "apiKey");
		json_key_str(&o->w, "in", "header");
		json_key_str(&o->w, "name", "Authorization");
		json_key_str(&o->w, "description",
			     "a hash of the whole value is the actor a key belongs to");
		json_map_close(&o->w);
	}
	json_map_close(&o->w);
}

static void oa_components(struct oa *o)
{
	json_key_map(&o->w, "components");
	json_key_map(&o->w, "schemas");
	if (o->c->any_problem)
		oa_problem_schema(o);
	if (o->c->any_stripe)
		oa_stripe_schema(o);
	json_map_close(&o->w);
	oa_component_responses(o);
	oa_component_headers(o);
	if (o->c->any_jwt || o->c->any_auth)
		oa_security_schemes(o);
	json_map_close(&o->w);
}

static void oa_doc(struct oa *o)
{
	json_map_open(&o->w);
	json_key_str(&o->w, "openapi", CONTRACT_OPENAPI_VERSION);
	json_key_map(&o->w, "info");
	json_key_str(&o->w, "title", CONTRACT_TITLE);
	json_key_str(&o->w, "version", IDEMPROXY_VERSION);
	json_key_str(&o->w, "description", o->c->intro);
	json_map_close(&o->w);
	oa_paths(o);
	oa_components(o);
	json_map_close(&o->w);
}

/* The OpenAPI document of c, ending with a newline; NULL when it could not be made. */
static char *oa_render(const struct contract *c, size_t *len)
{
	struct oa o = {.c = c};

	json_writer_init(&o.w, JSON_PRETTY | JSON_NEWLINE);
	oa_doc(&o);
	return json_writer_finish(&o.w, len);
}

static char *md_render(const struct contract *c, size_t *len)
{
	struct contract_text t;

	if (!contract_text_begin(&t))
		return NULL;
	md_doc(t.f, c);
	return contract_text_end(&t, len);
}

char *contract_render(const struct conf *conf, enum contract_format fmt, size_t *len)
{
	struct contract c;
	char *out = NULL;

	if (contract_build(&c, conf) == 0)
		out = fmt == CONTRACT_OPENAPI ? oa_render(&c, len) : md_render(&c, len);
	contract_free(&c);
	return out;
}

int contract_format_parse(const char *name, enum contract_format *fmt)
{
	if (strcmp(name, "markdown") == 0)
		*fmt = CONTRACT_MARKDOWN;
	else if (strcmp(name, "openapi") == 0)
		*fmt = CONTRACT_OPENAPI;
	else
		return -1;
	return 0;
}

const char *contract_media_type(enum contract_format fmt)
{
	return fmt == CONTRACT_OPENAPI ? "application/json" : "text/markdown; charset=utf-8";
}
