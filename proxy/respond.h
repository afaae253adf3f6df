/*
 * The responses idemproxy writes on a client connection besides replays:
 * problems (RFC 9457, from problem.c's table) and an upstream's response
 * relayed. Each takes a connection that may be NULL (the client went away:
 * nothing is written) and returns the status it answered with, for the log.
 */
#ifndef IDEMPROXY_RESPOND_H
#define IDEMPROXY_RESPOND_H

#include <stdint.h>

#include "proxy/problem.h"
#include "proxy/upstream.h"

struct evbuffer;

struct client_conn;
struct conf;
struct route;
struct http_msg;

/* The respond_flags for answering the request msg: HEAD, keep-alive or close. */
int respond_flags(const struct http_msg *msg);

/*
 * A problem response of kind: problem+json under conf's problem_base, or
 * Stripe's shape when route r says `errors stripe` (r NULL: no route). A
 * conflict answers mismatch_status (400 under stripe). Its headers are the
 * rows of respond_problem_header that respond_problem_carries; those that
 * say when to retry say retry_ms, or 1 s when it is 0. detail may be NULL.
 */
int respond_problem(struct client_conn *c, const struct conf *conf, const struct route *r,
		    enum problem_kind kind, const char *detail, int64_t retry_ms, int flags);

/*
 * The headers of a problem response, one row each, in the order
 * respond_problem writes them. The contract enumerates the same rows, so
 * what it tells a client and what the client gets cannot disagree.
 */
enum respond_problem_header {
	RESPOND_PH_CONTENT_TYPE,	/* PROBLEM_MEDIA_TYPE or PROBLEM_STRIPE_MEDIA_TYPE */
	RESPOND_PH_CACHE_CONTROL,	/* no-store */
	RESPOND_PH_SHOULD_RETRY,	/* X-Should-Retry: problem_should_retry */
	RESPOND_PH_STRIPE_SHOULD_RETRY, /* the same for Stripe's SDKs */
	RESPOND_PH_RETRY_AFTER,		/* seconds, rounded up */
	RESPOND_PH_RETRY_AFTER_MS,
	RESPOND_PH_WWW_AUTHENTICATE, /* Bearer; error="invalid_token": an actor not valid */
	RESPOND_PH_LINK,	     /* RESPOND_LINK_FORMAT */
	RESPOND_PH_COUNT
};

/* When a problem response carries a header. */
enum respond_ph_on {
	RESPOND_ON_EVERY,	 /* every problem */
	RESPOND_ON_STRIPE,	 /* a route's, under `errors stripe` */
	RESPOND_ON_RETRY_AFTER,	 /* a kind that may succeed later, the upstream reached */
	RESPOND_ON_ACTOR,	 /* actor-missing and actor-invalid (a 401) */
	RESPOND_ON_CONTRACT_URL, /* contract_url is set */
};

/* What a header's value is. */
enum respond_ph_value {
	RESPOND_VALUE_TEXT,
	RESPOND_VALUE_BOOL,    /* true or false: problem_should_retry */
	RESPOND_VALUE_INTEGER, /* a whole number, at least 1 */
};

struct respond_ph_def {
	const char *name;
	enum respond_ph_on on;
	enum respond_ph_value value;
	int advice; /* it says what to do next; 0: it says how to read the body */
};

/* The row of h (below RESPOND_PH_COUNT). */
const struct respond_ph_def *respond_problem_header(enum respond_problem_header h);

/* 1 when respond_problem's answer of kind under conf carries h; stripe: in
 * Stripe's shape (a route's `errors stripe`). */
int respond_problem_carries(const struct conf *conf, int stripe, enum problem_kind kind,
			    enum respond_problem_header h);

/* The value of Link (RESPOND_PH_LINK), of a contract_url. */
#define RESPOND_LINK_FORMAT "<%s>; rel=\"describedby\""

/* The status respond_problem answers kind with. */
int respond_problem_status(const struct conf *conf, const struct route *r, enum problem_kind kind);

/* The problem that says what became of a request the upstream did not answer (res != UPSTREAM_OK). */
/* The status respond_upstream_failure answers res with. */
int respond_upstream_status(enum upstream_result res);
int respond_upstream_failure(struct client_conn *c, const struct conf *conf,
			     const struct route *r, enum upstream_result res, int flags);
/*
 * The upstream's response resp, minus hop-by-hop headers and with our own
 * framing; unenforced adds Idempotency-Enforced: false, key_expires_ms > 0
 * Idempotency-Key-Expires (the owner's record was written and lives that
 * long). The body goes by reference: resp must stay unchanged until the
 * connection wrote it (the record may still need the bytes). A response
 * with trailer fields (resp->trailers) goes chunked instead: the body one
 * chunk, then the last-chunk with the fields (moved out).
 */
int respond_relay(struct client_conn *c, const struct http_msg *resp, int flags, int unenforced,
		  int64_t key_expires_ms);

/* An interim (1xx) response m, written at once, before the final one. */
void respond_interim(struct client_conn *c, const struct http_msg *m);

/* How the body of a streamed response reaches the client. */
enum respond_framing {
	RESPOND_BODILESS, /* none (HEAD, 1xx, 204, 304): the upstream's Content-Length stays */
	RESPOND_LENGTH,	  /* Content-Length: the upstream's */
	RESPOND_CHUNKED,  /* chunked, each piece a chunk as it comes */
	RESPOND_TO_CLOSE, /* up to the close of the connection (HTTP/1.0 clients) */
	RESPOND_SWITCH,	  /* 101: Connection: upgrade and Upgrade kept, then a tunnel */
};

/*
 * A chunked body's end: the last-chunk, with the trailer fields of
 * trailers ("name: value\r\n" lines, moved out; NULL: none).
 */
void respond_last_chunk(struct evbuffer *out, struct evbuffer *trailers);
/* The same with the n bytes of trailer lines at lines. */
void respond_last_chunk_lines(struct evbuffer *out, const char *lines, size_t n);

/*
 * A whole body of len bytes that trailers follow: the head's framing
 * (chunked, conn_respond_frame with flags) and the size line of the body's
 * one chunk; the caller adds the body, its CRLF when len > 0, then the
 * last chunk.
 */
void respond_whole_chunked(struct client_conn *c, struct evbuffer *out, size_t len, int flags);

/*
 * The framing a response resp to a request with respond flags takes when
 * its body is streamed: the upstream's, where the client understands it.
 */
enum respond_framing respond_framing(const struct http_msg *resp, int flags, int client_minor);

/*
 * The head of resp with the given framing, for a body that follows piece
 * by piece (conn_stream_*). Returns the status.
 */
int respond_relay_head(struct client_conn *c, const struct http_msg *resp, int flags,
		       int unenforced, enum respond_framing framing);

#endif
