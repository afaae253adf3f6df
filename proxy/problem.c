/*
 * RFC 9457 problem details. Every answer idemproxy makes up itself comes
 * from the one table below, so a kind's name, title and status cannot drift
 * apart between call sites.
 */
#include "proxy/problem.h"

#include <stdio.h>
#include <stdlib.h>

#include "http/grpc.h"
#include "proxy/json.h"

#define PROBLEM_NAME_MAX 64

/* Stripe's error types (errors stripe): what kind of failure a kind is. */
#define STRIPE_IDEMPOTENCY "idempotency_error"
#define STRIPE_INVALID	   "invalid_request_error"
#define STRIPE_API	   "api_error"
#define STRIPE_RATE_LIMIT  "rate_limit_error" /* the SDKs' RateLimitError */

struct problem_def {
	const char *name;
	const char *title;
	int status;
	int retry;	    /* X-Should-Retry: the same request may succeed later */
	const char *stripe; /* the Stripe error type */
	int grpc;	    /* the gRPC status a call is answered with (grpc.h) */
};

static const struct problem_def problem_table[] = {
    [PROBLEM_BAD_REQUEST] = {"bad-request", "Request is malformed or ambiguous", 400, 0, STRIPE_INVALID, GRPC_INVALID_ARGUMENT},
    [PROBLEM_KEY_MISSING] = {"idempotency-key-missing", "Idempotency-Key header is missing", 400, 0, STRIPE_INVALID, GRPC_INVALID_ARGUMENT},
    [PROBLEM_KEY_INVALID] = {"idempotency-key-invalid", "Idempotency-Key header is invalid", 400, 0, STRIPE_INVALID, GRPC_INVALID_ARGUMENT},
    [PROBLEM_ACTOR_MISSING] = {"actor-missing", "Request does not identify its actor", 401, 0, STRIPE_INVALID, GRPC_UNAUTHENTICATED},
    [PROBLEM_ACTOR_INVALID] = {"actor-invalid", "Request's actor is not valid", 401, 0, STRIPE_INVALID, GRPC_UNAUTHENTICATED},
    [PROBLEM_TOO_LARGE] = {"request-too-large", "Request body is too large", 413, 0, STRIPE_INVALID, GRPC_RESOURCE_EXHAUSTED},
    [PROBLEM_CONFLICT] = {"idempotency-conflict",
			  "Idempotency-Key was already used with a different request", 422, 0, STRIPE_IDEMPOTENCY, GRPC_FAILED_PRECONDITION},
    [PROBLEM_IN_PROGRESS] = {"operation-in-progress",
			     "A request with this Idempotency-Key is still in progress", 409, 1, STRIPE_IDEMPOTENCY, GRPC_ABORTED},
    [PROBLEM_OUTCOME_UNKNOWN] = {"outcome-unknown", "Outcome of the original request is unknown",
				 409, 0, STRIPE_IDEMPOTENCY, GRPC_FAILED_PRECONDITION},
    [PROBLEM_STORE_UNAVAILABLE] = {"store-unavailable", "Idempotency store is unavailable", 503, 1, STRIPE_API, GRPC_UNAVAILABLE},
    [PROBLEM_UPSTREAM_UNAVAILABLE] = {"upstream-unavailable", "Upstream is unavailable", 502, 1, STRIPE_API, GRPC_UNAVAILABLE},
    [PROBLEM_UPSTREAM_ERROR] = {"upstream-error", "Upstream failed after the request was sent",
				502, 0, STRIPE_API, GRPC_UNKNOWN},
    [PROBLEM_UPSTREAM_TIMEOUT] = {"upstream-timeout", "Upstream did not respond in time", 504, 0, STRIPE_API, GRPC_DEADLINE_EXCEEDED},
    [PROBLEM_REQUEST_TIMEOUT] = {"request-timeout", "Request was not received in time", 408, 0, STRIPE_INVALID, GRPC_DEADLINE_EXCEEDED},
    [PROBLEM_HEADERS_TOO_LARGE] = {"headers-too-large", "Request headers are too large", 431, 0, STRIPE_INVALID, GRPC_RESOURCE_EXHAUSTED},
    [PROBLEM_URI_TOO_LONG] = {"uri-too-long", "Request target is too long", 414, 0, STRIPE_INVALID, GRPC_RESOURCE_EXHAUSTED},
    [PROBLEM_SHUTTING_DOWN] = {"shutting-down", "idemproxy is shutting down", 503, 0, STRIPE_API, GRPC_UNAVAILABLE},
    [PROBLEM_KEY_UNAVAILABLE] = {"key-unavailable",
				 "Stored outcome is sealed with a key this instance does not have yet",
				 503, 1, STRIPE_API, GRPC_UNAVAILABLE},
    [PROBLEM_GRPC_STREAMING] = {"grpc-streaming-refused",
				"gRPC call sends more than one request message", 501, 0, STRIPE_INVALID,
				GRPC_UNIMPLEMENTED},
    [PROBLEM_TOO_MANY_REQUESTS] = {"too-many-requests",
				   "Too many requests with an Idempotency-Key are in progress", 429,
				   1, STRIPE_RATE_LIMIT, GRPC_RESOURCE_EXHAUSTED},
    /* Retryable: nothing ran, and the actor's quota frees as its records expire
     * (Retry-After says when the oldest one does). */
    [PROBLEM_ACTOR_QUOTA] = {"actor-quota-exceeded",
			     "Actor holds as many idempotency records as its quota allows", 429, 1,
			     STRIPE_RATE_LIMIT, GRPC_RESOURCE_EXHAUSTED},
    /* Not retryable: the key stays refused until its tombstone's window ends. */
    [PROBLEM_KEY_EXPIRED] = {"idempotency-key-expired",
			     "Idempotency-Key was used and its stored outcome has expired", 422, 0,
			     STRIPE_IDEMPOTENCY, GRPC_FAILED_PRECONDITION},
};

_Static_assert(sizeof(problem_table) / sizeof(problem_table[0]) == PROBLEM_KIND_COUNT,
	       "problem_table must have one entry per problem_kind");

/* kind must be a valid problem_kind (below PROBLEM_KIND_COUNT). */
const char *problem_name(enum problem_kind kind)
{
	return problem_table[kind].name;
}

const char *problem_title(enum problem_kind kind)
{
	return problem_table[kind].title;
}

int problem_default_status(enum problem_kind kind)
{
	return problem_table[kind].status;
}

int problem_grpc_code(enum problem_kind kind)
{
	return problem_table[kind].grpc;
}

int problem_should_retry(enum problem_kind kind)
{
	return problem_table[kind].retry;
}

const char *problem_stripe_type(enum problem_kind kind)
{
	return problem_table[kind].stripe;
}

void problem_stripe_code(enum problem_kind kind, char *out, size_t n)
{
	const char *name = problem_table[kind].name;
	size_t i;

	/* Stripe's codes are snake_case: idempotency_key_in_use, say. */
	for (i = 0; name[i] && i + 1 < n; i++)
		out[i] = name[i] == '-' ? '_' : name[i];
	if (n)
		out[i] = '\0';
}

char *problem_render_stripe(enum problem_kind kind, const char *detail, size_t *len)
{
	const struct problem_def *def = &problem_table[kind];
	char code[PROBLEM_NAME_MAX], *message = NULL, *body;
	struct json_writer w;

	json_writer_init(&w, 0);
	problem_stripe_code(kind, code, sizeof(code));
	if (asprintf(&message, "%s%s%s", def->title, detail ? ": " : "", detail ? detail : "") <
	    0) {
		message = NULL;
		json_writer_fail(&w);
	}
	json_map_open(&w);
	json_key_map(&w, "error");
	json_key_str(&w, "type", def->stripe);
	json_key_str(&w, "code", code);
	json_key_str(&w, "message", message);
	json_map_close(&w);
	json_map_close(&w);
	body = json_writer_finish(&w, len);
	free(message);
	return body;
}

/*
 * See problem.h. A NULL base counts as "" (type is then the bare name).
 * base and detail must be UTF-8: the writer validates strings, and
 * invalid ones make this return NULL rather than emit invalid JSON.
 */
char *problem_render(enum problem_kind kind, int status, const char *base, const char *detail,
		     size_t *len)
{
	const struct problem_def *def = &problem_table[kind];
	char *type = NULL, *body;
	struct json_writer w;

	json_writer_init(&w, 0);
	if (asprintf(&type, "%s%s", base ? base : "", def->name) < 0) {
		type = NULL;
		json_writer_fail(&w);
	}
	json_map_open(&w);
	json_key_str(&w, "type", type);
	json_key_str(&w, "title", def->title);
	json_key_int(&w, "status", status > 0 ? status : def->status);
	if (detail)
		json_key_str(&w, "detail", detail);
	json_map_close(&w);
	body = json_writer_finish(&w, len);
	free(type);
	return body;
}
