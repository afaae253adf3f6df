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

struct client_conn;
struct conf;
struct route;
struct http_msg;

/* The respond_flags for answering the request msg: HEAD, keep-alive or close. */
int respond_flags(const struct http_msg *msg);

/*
 * A problem response of kind: problem+json under conf's problem_base, or
 * Stripe's shape when route r says `errors stripe` (r NULL: no route). A
 * conflict answers mismatch_status (400 under stripe). Every problem says
 * X-Should-Retry, and Link to contract_url when set; those that may be
 * retried say Retry-After and Retry-After-Ms: retry_ms, or 1 s when it is
 * 0. detail may be NULL.
 */
int respond_problem(struct client_conn *c, const struct conf *conf, const struct route *r,
		    enum problem_kind kind, const char *detail, int64_t retry_ms, int flags);

/* 1 when respond_problem's answer of kind says Retry-After and Retry-After-Ms. */
int respond_problem_retry_after(enum problem_kind kind);

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
 * connection wrote it (the record may still need the bytes).
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
