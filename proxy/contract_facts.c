/*
 * The contract's facts (contract_facts.h), from struct conf alone: each
 * route's sentences, its data and its status table, each worked out once.
 * Sentences are CommonMark, which OpenAPI descriptions take too.
 */
#include "proxy/contract_facts.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "conf/conf.h"
#include "proxy/actor.h"
#include "proxy/http.h"
#include "http/grpc.h"
#include "proxy/idemkey.h"
#include "proxy/keysource.h"
#include "proxy/opname.h"
#include "proxy/respond.h"

#define CONTRACT_DUR_MAX 32

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
    [FACT_GRPC] = "gRPC methods",
    [FACT_LIMITS] = "Requests in flight",
    [FACT_FORWARD_KEY] = "Key sent to the API",
    [FACT_OPERATION] = "Operation",
};

/* The problems an intercepted request may get: the key's, the actor's, the
 * body's, the record's, then the store's and the upstream's. */
static const enum problem_kind contract_kinds[] = {
    PROBLEM_KEY_MISSING,
    PROBLEM_KEY_INVALID,
    PROBLEM_ACTOR_MISSING,
    PROBLEM_ACTOR_INVALID,
    PROBLEM_ACTOR_QUOTA,
    PROBLEM_TOO_LARGE,
    PROBLEM_TOO_MANY_REQUESTS,
    PROBLEM_CONFLICT,
    PROBLEM_KEY_EXPIRED,
    PROBLEM_IN_PROGRESS,
    PROBLEM_OUTCOME_UNKNOWN,
    PROBLEM_STORE_UNAVAILABLE,
    PROBLEM_KEY_UNAVAILABLE,
    PROBLEM_UPSTREAM_UNAVAILABLE,
    PROBLEM_UPSTREAM_ERROR,
    PROBLEM_UPSTREAM_TIMEOUT,
};
_Static_assert(sizeof(contract_kinds) / sizeof(contract_kinds[0]) == CONTRACT_NKINDS,
	       "CONTRACT_NKINDS counts contract_kinds");
_Static_assert(RESPOND_PH_COUNT <= 32, "a row's headers are a bit mask");

static const char *const contract_transform_names[] = {
    [FPT_NONE] = NULL, [FPT_TRIM] = "trim",	[FPT_LOWER] = "lower",
    [FPT_INT] = "int", [FPT_NUMBER] = "number", [FPT_STRING] = "string",
};
static const char *const contract_transform_prose[] = {
    [FPT_NONE] = NULL,		 [FPT_TRIM] = "trimmed",       [FPT_LOWER] = "lower-cased",
    [FPT_INT] = "as an integer", [FPT_NUMBER] = "as a number", [FPT_STRING] = "as a string",
};

const char *contract_fact_label(enum contract_fact fact)
{
	return contract_fact_labels[fact];
}

/* ---- text ---- */

FILE *contract_text_begin(struct contract_text *t)
{
	t->s = NULL;
	t->n = 0;
	t->f = open_memstream(&t->s, &t->n);
	return t->f;
}

char *contract_text_end(struct contract_text *t, size_t *len)
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

void contract_code(FILE *f, const char *s)
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

int contract_status_next(const struct status_set *s, int *st, char *out)
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
		"%s from completion: until then a retry gets the stored response again; ", d);
	if (r->expired_keys == EXPIRED_KEYS_REFUSE) {
		contract_duration(d, sizeof(d), r->expired_keys_ms);
		fprintf(f,
			"for %s after it a retry is refused with 422 "
			"`idempotency-key-expired`; after that the key may run again",
			d);
		return;
	}
	fputs("after it the key may run again", f);
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

/* 1 when m matches gRPC method paths: POST /package.Service/Method (or {param}, or *). */
static int contract_grpc_match(const struct route_match *m)
{
	return strcmp(m->method, "POST") == 0 && m->nsegs == 2 &&
	       m->segs[0].kind == SEG_LITERAL && memchr(m->segs[0].text, '.', m->segs[0].len);
}

/* The codes of a gRPC code set, each a code span; "none" when empty. */
static void contract_grpc_codes(FILE *f, const struct status_set *s)
{
	int n = 0;

	for (int code = 0; code < GRPC_CODES; code++) {
		if (status_set_has(s, code)) {
			fputs(n++ ? ", " : "", f);
			contract_code(f, grpc_code_name(code));
		}
	}
	if (!n)
		fputs("none", f);
}

static void fact_grpc(FILE *f, const struct conf *conf, const struct route *r)
{
	int n = 0;

	for (int i = 0; i < r->nmatches; i++) {
		const struct route_match *m = &r->matches[i];

		if (!contract_grpc_match(m))
			continue;
		/* The method's name: package.Service/Method */
		fprintf(f, "%s`%.*s/%s%.*s%s`", n++ ? ", " : "", (int)m->segs[0].len,
			m->segs[0].text, m->segs[1].kind == SEG_PARAM ? "{" : "",
			m->segs[1].kind == SEG_REST ? 1 : (int)m->segs[1].len,
			m->segs[1].kind == SEG_REST ? "*" : m->segs[1].text,
			m->segs[1].kind == SEG_PARAM ? "}" : "");
	}
	if (!n)
		return;
	fputs(": a call (Content-Type `application/grpc`) is a request like any other here, "
	      "its headers the call's metadata (lower case)",
	      f);
	if (r->grpc_streaming == GRPC_STREAMING_PASS) {
		fputs("; every call passes through unenforced (`grpc streaming pass`)", f);
		return;
	}
	fputs(". It sends one request message: a call with more (client-streaming, "
	      "bidirectional) is refused with `UNIMPLEMENTED` before anything reaches the API. "
	      "Its answer, every message and the trailers (`grpc-status`, `grpc-message`, "
	      "`grpc-status-details-bin`), is stored and replayed as it came, except that "
	      "the API's `grpc-status` ",
	      f);
	contract_grpc_codes(f, &r->grpc_release_on);
	fputs(" release the key and ", f);
	contract_grpc_codes(f, &r->grpc_unknown_on);
	fputs(" make the outcome unknown. The errors below reach a call as gRPC statuses in "
	      "trailers-only form: a missing or invalid key `INVALID_ARGUMENT`, an actor's "
	      "fault `UNAUTHENTICATED`, a conflict or an unknown outcome "
	      "`FAILED_PRECONDITION`, a request in progress `ABORTED` with "
	      "`grpc-retry-pushback-ms`, an unavailable store or API `UNAVAILABLE`, a timeout "
	      "`DEADLINE_EXCEEDED`, a request too large or one too many in flight "
	      "`RESOURCE_EXHAUSTED`; `grpc-message` names the error",
	      f);
}

/* 1 when a request of r may be refused for the owners in flight. */
static int contract_limited(const struct conf *conf, const struct route *r)
{
	return conf->max_owners > 0 || r->actor_max_owners > 0;
}

static void fact_limits(FILE *f, const struct conf *conf, const struct route *r)
{
	if (!contract_limited(conf, r))
		return;
	fputs("at most ", f);
	if (r->actor_max_owners > 0)
		fprintf(f, "%d requests with a new key of one actor%s", r->actor_max_owners,
			conf->max_owners > 0 ? ", and " : "");
	if (conf->max_owners > 0)
		fprintf(f, "%d%s of all actors together", conf->max_owners,
			r->actor_max_owners > 0 ? "" : " requests with a new key");
	fputs(" run at once on each proxy instance; one more gets 429 `too-many-requests` with "
	      "`Retry-After` before anything is recorded or sent to the API, so retrying it later "
	      "with the same key is safe. Retries of a key already used (replays, conflicts, "
	      "duplicates in flight) are never refused for it",
	      f);
}

static void fact_forward_key(FILE *f, const struct conf *conf, const struct route *r)
{
	if (r->forward_key != FORWARD_KEY_SCOPED && r->forward_key != FORWARD_KEY_RAW)
		return;
	fputs("the API receives ", f);
	contract_code(f, r->forward_key_header);
	if (r->forward_key == FORWARD_KEY_RAW)
		fputs(" holding the client's key as sent", f);
	else
		fputs(" holding a key derived from the actor, the operation and the client's key "
		      "(64 hex digits): the same for every attempt at one key, including one "
		      "forwarded again after an unknown outcome, and different for another actor "
		      "or operation",
		      f);
	fputs("; a client's own header of that name never reaches it", f);
}

/* How operation_from names a request's scope; nothing without it. */
static void fact_operation(FILE *f, const struct conf *conf, const struct route *r)
{
	if (r->operation_from == OPFROM_GRAPHQL) {
		fputs("a GraphQL request (JSON `{\"query\", \"operationName\"}`, or the document "
		      "with Content-Type `application/graphql`): only a mutation is recorded; its "
		      "scope's operation is ",
		      f);
		contract_code(f, r->operation);
		fputs(" followed by `:` and the mutation's name (an anonymous mutation: its first "
		      "field's), so two mutations sent with one key are two requests; queries and "
		      "subscriptions pass through unrecorded, whatever their key. A document that "
		      "cannot be read, has several operations and no `operationName` naming one, "
		      "or a batch holding a mutation gets 400 `bad-request`",
		      f);
		return;
	}
	if (r->operation_from != OPFROM_JSON && r->operation_from != OPFROM_JSONRPC)
		return;
	fputs("the scope's operation is ", f);
	contract_code(f, r->operation);
	fputs(" followed by `:` and the string at ", f);
	contract_code(f, r->operation_path);
	fprintf(f,
		" in the JSON body (1 to %d bytes, no control characters), so two operations "
		"sent with one key are two requests; a body without it gets 400 `bad-request`",
		OPNAME_VALUE_MAX);
	if (r->operation_from == OPFROM_JSONRPC)
		fputs(". A JSON-RPC call's top-level `id` names the call, not the request: it is "
		      "not part of the fingerprint, and a replay carries the retry's own `id`",
		      f);
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
    [FACT_GRPC] = fact_grpc,
    [FACT_LIMITS] = fact_limits,
    [FACT_FORWARD_KEY] = fact_forward_key,
    [FACT_OPERATION] = fact_operation,
};

/* 1 when conf can answer kind at all: key-unavailable only with body_encryption,
 * actor-quota-exceeded only with a quota. */
static int contract_kind_configured(const struct conf *conf, enum problem_kind kind)
{
	if (kind == PROBLEM_ACTOR_QUOTA)
		return conf->actor_max_records > 0 || conf->actor_max_stored_bytes > 0;
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
	case PROBLEM_TOO_MANY_REQUESTS:
		return contract_limited(conf, r);
	case PROBLEM_KEY_EXPIRED:
		return r->expired_keys == EXPIRED_KEYS_REFUSE;
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
	case PROBLEM_TOO_MANY_REQUESTS:
		fputs("a new key while too many requests run on this instance (", f);
		if (r->actor_max_owners > 0)
			fprintf(f, "%d of this actor%s", r->actor_max_owners,
				conf->max_owners > 0 ? ", or " : "");
		if (conf->max_owners > 0)
			fprintf(f, "%d of all actors", conf->max_owners);
		fputs("): nothing was recorded or sent to the API", f);
		break;
	case PROBLEM_ACTOR_QUOTA:
		fputs("a new key of an actor that holds ", f);
		if (conf->actor_max_records)
			fprintf(f, "%lld records", (long long)conf->actor_max_records);
		if (conf->actor_max_records && conf->actor_max_stored_bytes)
			fputs(" or ", f);
		if (conf->actor_max_stored_bytes)
			fprintf(f, "%zu bytes of stored responses", conf->actor_max_stored_bytes);
		contract_duration(d, sizeof(d), conf->quota_refresh_ms);
		fprintf(f,
			" or more, counted over every instance up to %s late: nothing was sent "
			"to the API; retries of its existing keys are answered as ever",
			d);
		break;
	case PROBLEM_KEY_EXPIRED:
		contract_duration(d, sizeof(d), r->expired_keys_ms);
		fprintf(f,
			"the key completed and its stored response expired less than %s ago: "
			"the detail says when it completed, nothing was sent to the API",
			d);
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

/* The advice headers an answer of kind carries on r (respond.c's table), as a mask. */
static unsigned contract_row_headers(const struct conf *conf, const struct route *r,
				     enum problem_kind kind)
{
	unsigned headers = 0;

	for (int h = 0; h < RESPOND_PH_COUNT; h++)
		if (respond_problem_carries(conf, r->errors == ERRORS_STRIPE, kind, h))
			headers |= 1u << h;
	return headers;
}

/* cr's rows: those r can get, stable-sorted by status. Returns 0 or -1. */
static int contract_rows(struct contract_route *cr, const struct conf *conf, const struct route *r)
{
	struct contract_text t;
	struct contract_row row;
	int i, j;

	for (i = 0; i < CONTRACT_NKINDS; i++) {
		if (!contract_row_applies(conf, r, contract_kinds[i]))
			continue;
		if (!contract_text_begin(&t))
			return -1;
		contract_when(t.f, conf, r, contract_kinds[i]);
		row.kind = contract_kinds[i];
		row.status = respond_problem_status(conf, r, row.kind);
		row.headers = contract_row_headers(conf, r, row.kind);
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

/* cr's sentences. Returns 0 or -1. */
static int contract_sentences(struct contract_route *cr, const struct conf *conf,
			      const struct route *r)
{
	struct contract_text t;

	for (int i = 0; i < FACT_COUNT; i++) {
		if (!contract_text_begin(&t))
			return -1;
		contract_fact_writers[i](t.f, conf, r);
		cr->fact[i] = contract_text_end(&t, NULL);
		if (!cr->fact[i])
			return -1;
	}
	return 0;
}

/* The actor of r as data. */
static void contract_actor_data(struct contract_actor *a, const struct route *r,
				const struct contract_key *key)
{
	a->source = contract_actor_source(r);
	a->header = contract_actor_header(r);
	a->jwt = r->actor == ACTOR_JWT;
	if (r->actor == ACTOR_AUTHORIZATION)
		a->credential = CONTRACT_AUTHORIZATION;
	else if (a->jwt && !r->actor_header)
		a->credential = CONTRACT_BEARER_JWT;
	/* A header named twice (key and actor) is one parameter. */
	if ((r->actor == ACTOR_HEADER || (a->jwt && r->actor_header)) &&
	    !(strcmp(key->in, "header") == 0 && strcasecmp(key->name, r->actor_header) == 0))
		a->param = r->actor_header;
	a->max_len = r->actor == ACTOR_HEADER ? ACTOR_MAX : 0;
	if (a->jwt) {
		a->issuer = r->jwt_issuer;
		a->audience = r->jwt_audience;
		a->claim = r->jwt_claim ? r->jwt_claim : "sub";
		a->require_exp = r->jwt_require_exp;
	}
}

/* The fingerprint of r as data. Returns 0 or -1. */
static int contract_fp_data(struct contract_fingerprint *fp, const struct route *r)
{
	fp->mode = r->fingerprint == FP_BODY ? "body" : r->fingerprint == FP_NONE ? "none" : "json";
	fp->headers = r->fp_headers;
	fp->nheaders = r->nfp_headers;
	if (!r->nfields)
		return 0;
	fp->fields = calloc((size_t)r->nfields, sizeof(*fp->fields));
	if (!fp->fields)
		return -1;
	for (int i = 0; i < r->nfields; i++) {
		fp->fields[i].path = r->fields[i].path;
		fp->fields[i].transform = contract_transform_names[r->fields[i].transform];
	}
	fp->nfields = r->nfields;
	return 0;
}

/* What r promises, as data. Returns 0 or -1. */
static int contract_route_data(struct contract_route *cr, const struct conf *conf,
			       const struct route *r)
{
	cr->operation = r->operation;
	cr->stripe = r->errors == ERRORS_STRIPE;
	cr->errors = cr->stripe ? "stripe" : "problem";
	cr->key.in = keysource_wording(r)->in;
	cr->key.name = keysource_name(conf, r);
	cr->key.required = r->key != KEY_OPTIONAL;
	contract_actor_data(&cr->actor, r, &cr->key);
	cr->retention_ms = r->retention_ms;
	cr->in_progress = r->in_progress == IN_PROGRESS_WAIT ? "wait" : "reject";
	cr->wait_ms = r->in_progress == IN_PROGRESS_WAIT ? r->in_progress_wait_ms : 0;
	cr->recovery = r->recovery == RECOVERY_FORWARD ? "forward" : "hold";
	cr->release_on = &r->release_on;
	cr->unknown_on = &r->unknown_on;
	return contract_fp_data(&cr->fp, r);
}

/* Stripe's type and code of every kind (problem.c's table), and the distinct types. */
static void contract_stripe_names(struct contract *c)
{
	const char *type;
	int seen;

	for (int i = 0; i < CONTRACT_NKINDS; i++) {
		type = problem_stripe_type(contract_kinds[i]);
		snprintf(c->stripe_type[contract_kinds[i]], CONTRACT_NAME_MAX, "%s", type);
		problem_stripe_code(contract_kinds[i], c->stripe_code[contract_kinds[i]],
				    CONTRACT_NAME_MAX);
		seen = 0;
		for (int j = 0; j < c->nstripe_types && !seen; j++)
			seen = !strcmp(c->stripe_types[j], type);
		if (!seen)
			c->stripe_types[c->nstripe_types++] = type;
	}
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
	size_t n = (size_t)snprintf(base, sizeof(base), "%s_", op->cr->operation);

	for (const char *s = op->method; *s && n + 1 < sizeof(base); s++)
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

/* op's path parameters: each {name}, and a final "*" as op->rest_name. Returns 0 or -1. */
static int contract_op_params(struct contract_op *op, const struct route_match *m)
{
	op->params = calloc((size_t)m->nsegs + 1, sizeof(*op->params));
	if (!op->params)
		return -1;
	for (int i = 0; i < m->nsegs; i++) {
		struct contract_param *p = &op->params[op->nparams];

		if (m->segs[i].kind == SEG_LITERAL)
			continue;
		p->rest = m->segs[i].kind == SEG_REST;
		p->name = p->rest ? op->rest_name : m->segs[i].text;
		p->len = p->rest ? strlen(op->rest_name) : m->segs[i].len;
		op->rest |= p->rest;
		op->nparams++;
	}
	return 0;
}

/* Add the intercepted method and path m of cr (c->ops has room). Returns 0
 * or -1; what it made is freed by contract_free either way. */
static int contract_add_op(struct contract *c, const struct contract_route *cr,
			   const struct route_match *m)
{
	struct contract_op *op = &c->ops[c->nops];

	op->cr = cr;
	op->method = m->method;
	contract_op_id(c, op);
	c->nops++;
	contract_rest_name(m, op->rest_name, sizeof(op->rest_name));
	op->label = contract_op_text(m, NULL);
	op->oa_path = contract_op_text(m, op->rest_name);
	if (!op->label || !op->oa_path || contract_op_params(op, m) < 0)
		return -1;
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

/* 1 when a route of conf answers in Stripe's shape (`errors stripe`). */
static int contract_any_stripe(const struct conf *conf)
{
	for (int i = 0; i < conf->nroutes; i++)
		if (conf->routes[i].errors == ERRORS_STRIPE)
			return 1;
	return 0;
}

/* What every route shares: how to use keys and what answers carry. 0 or -1. */
static int contract_intro(FILE *f, const struct contract *c, const struct conf *conf)
{
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
	      "records, the first one and every replay: after it the key may run again.\n"
	      "- `X-Request-Id` on every response, replays and errors included: the "
	      "request's own when it sent one of 1 to 128 visible ASCII characters, "
	      "otherwise one made for it. Send your own to find a request in the logs; a "
	      "replay carries the retry's, not the first request's.\n",
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
	fputs("- `X-Should-Retry: false` on a replay of a stored 5xx", f);
	if (contract_any_stripe(conf))
		fputs(" (and `Stripe-Should-Retry: false` on a route with Stripe's errors)", f);
	fputs(", in place of any the stored response had: the stored outcome never changes, "
	      "so a retry gets the same answer.\n",
	      f);
	if (c->link) {
		if (asprintf(&link, "%s: %s", respond_problem_header(RESPOND_PH_LINK)->name,
			     c->link) < 0)
			return -1;
		fputs("- ", f);
		contract_code(f, link);
		fputs(" on every error: this contract.\n", f);
		free(link);
	}
	if (c->fail_open)
		fputs(
		    "- While the idempotency store is unreachable, requests are forwarded "
		    "without idempotency and their responses carry `Idempotency-Enforced: false`: "
		    "such a request may run more than once.\n",
		    f);
	return 0;
}

void contract_free(struct contract *c)
{
	for (int i = 0; c->routes && i < c->nroutes; i++) {
		for (int j = 0; j < FACT_COUNT; j++)
			free(c->routes[i].fact[j]);
		for (int j = 0; j < c->routes[i].nrows; j++)
			free(c->routes[i].rows[j].when);
		free(c->routes[i].fp.fields);
	}
	for (int i = 0; i < c->nops; i++) {
		free(c->ops[i].label);
		free(c->ops[i].oa_path);
		free(c->ops[i].params);
	}
	free(c->routes);
	free(c->ops);
	free(c->link);
	free(c->intro);
	memset(c, 0, sizeof(*c));
}

/* Note which dialects and credential schemes the contract needs. */
static void contract_note_route(struct contract *c, struct contract_route *cr)
{
	cr->live = 1;
	c->any_stripe |= cr->stripe;
	c->any_problem |= !cr->stripe;
	c->any_jwt |= cr->actor.credential == CONTRACT_BEARER_JWT;
	c->any_auth |= cr->actor.credential == CONTRACT_AUTHORIZATION;
}

/* Route r's facts into cr and the methods and paths it intercepts into c. 0 or -1. */
static int contract_route(struct contract *c, struct contract_route *cr, const struct conf *conf,
			  const struct route *r)
{
	int before = c->nops;

	if (contract_route_data(cr, conf, r) < 0 || contract_sentences(cr, conf, r) < 0 ||
	    contract_rows(cr, conf, r) < 0)
		return -1;
	for (int j = 0; j < r->nmatches; j++) {
		/* Safe methods pass through untouched: nothing to promise. */
		if (http_method_is_safe(r->matches[j].method))
			continue;
		if (contract_add_op(c, cr, &r->matches[j]) < 0)
			return -1;
	}
	if (c->nops > before)
		contract_note_route(c, cr);
	return 0;
}

int contract_build(struct contract *c, const struct conf *conf)
{
	struct contract_text t;
	int nmatches = 0;

	memset(c, 0, sizeof(*c));
	for (int i = 0; i < conf->nroutes; i++)
		nmatches += conf->routes[i].nmatches;
	c->routes = calloc((size_t)conf->nroutes + 1, sizeof(*c->routes));
	c->ops = calloc((size_t)nmatches + 1, sizeof(*c->ops));
	if (!c->routes || !c->ops)
		return -1;
	c->fail_open = conf->store_unavailable == STORE_FAIL_OPEN;
	c->store_unavailable = c->fail_open ? "fail-open" : "fail-closed";
	c->server = conf->contract_server;
	if (conf->contract_url && asprintf(&c->link, RESPOND_LINK_FORMAT, conf->contract_url) < 0) {
		c->link = NULL;
		return -1;
	}
	contract_stripe_names(c);
	for (int i = 0; i < conf->nroutes; i++) {
		c->nroutes++;
		if (contract_route(c, &c->routes[i], conf, &conf->routes[i]) < 0)
			return -1;
	}
	if (!contract_text_begin(&t))
		return -1;
	if (contract_intro(t.f, c, conf) < 0) {
		free(contract_text_end(&t, NULL));
		return -1;
	}
	c->intro = contract_text_end(&t, NULL);
	return c->intro ? 0 : -1;
}

void contract_error_name(FILE *f, const struct contract *c, const struct contract_route *cr,
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
