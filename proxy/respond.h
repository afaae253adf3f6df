/*
 * The responses idemproxy writes on a client connection besides replays:
 * problems (RFC 9457, from problem.c's table) and an upstream's response
 * relayed. Each takes a connection that may be NULL (the client went away:
 * nothing is written) and returns the status it answered with, for the log.
 */
#ifndef IDEMPROXY_RESPOND_H
#define IDEMPROXY_RESPOND_H

#include "proxy/problem.h"
#include "proxy/upstream.h"

struct client_conn;
struct conf;
struct http_msg;

/* The respond_flags for answering the request msg: HEAD, keep-alive or close. */
int respond_flags(const struct http_msg *msg);

/*
 * A problem+json response of kind: conf's problem_base and, for a
 * conflict, its mismatch_status; detail may be NULL.
 */
int respond_problem(struct client_conn *c, const struct conf *conf, enum problem_kind kind,
		    const char *detail, int flags);

/* The problem that says what became of a request the upstream did not answer (res != UPSTREAM_OK). */
int respond_upstream_failure(struct client_conn *c, const struct conf *conf,
			     enum upstream_result res, int flags);

/*
 * The upstream's response resp, minus hop-by-hop headers and with our own
 * framing; unenforced adds Idempotency-Enforced: false. The body goes by
 * reference: resp must stay unchanged until the connection wrote it
 * (the record may still need the bytes).
 */
int respond_relay(struct client_conn *c, const struct http_msg *resp, int flags, int unenforced);

#endif
