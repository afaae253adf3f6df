/* RFC 9457 problem+json responses, from one table of problem kinds. */
#ifndef IDEMPROXY_PROBLEM_H
#define IDEMPROXY_PROBLEM_H

#include <stddef.h>

enum problem_kind {
	PROBLEM_BAD_REQUEST,           /* 400 bad-request */
	PROBLEM_KEY_MISSING,           /* 400 idempotency-key-missing */
	PROBLEM_KEY_INVALID,           /* 400 idempotency-key-invalid */
	PROBLEM_ACTOR_MISSING,         /* 401 actor-missing */
	PROBLEM_ACTOR_INVALID,         /* 401 actor-invalid */
	PROBLEM_TOO_LARGE,             /* 413 request-too-large */
	PROBLEM_CONFLICT,              /* mismatch_status idempotency-conflict */
	PROBLEM_IN_PROGRESS,           /* 409 operation-in-progress */
	PROBLEM_OUTCOME_UNKNOWN,       /* 409 outcome-unknown */
	PROBLEM_STORE_UNAVAILABLE,     /* 503 store-unavailable */
	PROBLEM_UPSTREAM_UNAVAILABLE,  /* 502 upstream-unavailable */
	PROBLEM_UPSTREAM_ERROR,        /* 502 upstream-error */
	PROBLEM_UPSTREAM_TIMEOUT,      /* 504 upstream-timeout */
	PROBLEM_REQUEST_TIMEOUT,       /* 408 request-timeout */
	PROBLEM_HEADERS_TOO_LARGE,     /* 431 headers-too-large */
	PROBLEM_URI_TOO_LONG,          /* 414 uri-too-long */
	PROBLEM_SHUTTING_DOWN,         /* 503 shutting-down */
	PROBLEM_KEY_UNAVAILABLE,      /* 503 key-unavailable */
	PROBLEM_GRPC_STREAMING,       /* 501 grpc-streaming-refused (gRPC UNIMPLEMENTED) */
	PROBLEM_TOO_MANY_REQUESTS,    /* 429 too-many-requests: max_owners, actor_max_owners */
	PROBLEM_ACTOR_QUOTA,          /* 429 actor-quota-exceeded */
	PROBLEM_KEY_EXPIRED,          /* 422 idempotency-key-expired */
	PROBLEM_KIND_COUNT
};

/* The media types of problem_render's and problem_render_stripe's bodies. */
#define PROBLEM_MEDIA_TYPE	  "application/problem+json"
#define PROBLEM_STRIPE_MEDIA_TYPE "application/json"

/* The kind's name ("idempotency-conflict"), title and default status. */
const char *problem_name(enum problem_kind kind);
const char *problem_title(enum problem_kind kind);
int problem_default_status(enum problem_kind kind);

/* 1 when the same request may succeed later (X-Should-Retry: true). */
int problem_should_retry(enum problem_kind kind);
/* The gRPC status code (grpc.h) a gRPC call gets for kind. */
int problem_grpc_code(enum problem_kind kind);

/* Under `errors stripe`: the kind's Stripe error type, and its code (the
 * name in snake_case) into out (n bytes, NUL-terminated). */
const char *problem_stripe_type(enum problem_kind kind);
void problem_stripe_code(enum problem_kind kind, char *out, size_t n);

/*
 * The body under `errors stripe`: {"error": {"type", "code", "message"}},
 * type idempotency_error, invalid_request_error or api_error, code the
 * kind's name in snake_case, message its title and detail. As
 * problem_render.
 */
char *problem_render_stripe(enum problem_kind kind, const char *detail, size_t *len)
	__attribute__((warn_unused_result));

/*
 * Render the problem+json body: {"type": base + name, "title", "status",
 * "detail"} (detail omitted when NULL). status overrides the default when
 * > 0 (mismatch_status). Returns a malloc'd NUL-terminated string the caller
 * frees and its length in *len, or NULL when out of memory.
 */
char *problem_render(enum problem_kind kind, int status, const char *base,
		     const char *detail, size_t *len) __attribute__((warn_unused_result));

#endif
