/*
 * Requests: the state machine that takes one complete request from its
 * client connection to its answer and its record (request.c). Only
 * request.c sees inside a request; the listener starts requests and tells
 * them when their client goes away, the worker wakes waiting duplicates and
 * settles what is left at shutdown.
 */
#ifndef IDEMPROXY_REQUEST_H
#define IDEMPROXY_REQUEST_H

#include <stdint.h>

#include "proxy/problem.h"

struct cache;
struct client_conn;
struct conf;
struct conf_gens;
struct event_base;
struct http_msg;
struct admit;
struct pace;
struct request;
struct request_ctx;
struct stats;
struct store;
struct upstream_pool;

/*
 * The requests of one worker and what they share: its loop, its
 * configuration generations, store, upstream pool, replay cache, the
 * owner durations and owners in flight every worker shares (pace.h,
 * admit.h) and counters (all borrowed:
 * they outlive the context). Request ids start at first_id. NULL when out
 * of memory.
 */
struct request_ctx *request_ctx_new(struct event_base *base, struct conf_gens *gens,
				    struct store *st, struct upstream_pool *pool,
				    struct cache *cache, struct pace *pace, struct admit *admit,
				    struct stats *stats, uint64_t first_id);

/* End of shutdown: drop every request left (records keep their leases). */
void request_ctx_free(struct request_ctx *ctx);

/*
 * 1 when the request whose head is head streams through (a safe method,
 * an unmatched path, or a route with `key optional` and no key): its body
 * is relayed as it arrives. Intercepted requests are read whole first.
 */
int request_streams(const struct conf *conf, const struct http_msg *head);

/*
 * Serve msg (taken over), a request read on c: whole, or, when streamed,
 * its head with the body to follow (request_input).
 */
/*
 * c's request cannot be read (malformed, too large, too slow): answer the
 * problem, close, and log and count it like any finished request (no
 * route, outcome rejected).
 */
void request_refuse(struct request_ctx *ctx, struct client_conn *c, enum problem_kind kind,
		    const char *detail);

void request_start(struct request_ctx *ctx, struct client_conn *c, struct http_msg *msg,
		   int streamed);

/* What the listener learned of the client's side of req. */
enum request_input {
	REQUEST_BODY_MORE,    /* more of the streamed body, in the connection's parser */
	REQUEST_BODY_END,     /* the streamed body is complete */
	REQUEST_BODY_BAD,     /* the streamed body is malformed: the connection closes */
	REQUEST_BODY_TIMEOUT, /* the client stopped sending it for client_timeout */
	REQUEST_TUNNEL_MORE,  /* bytes on an upgraded connection */
};

void request_input(struct request *req, enum request_input what);

/* req's streamed response, waiting in the client's output, fell to the drain mark. */
void request_output_drained(struct request *req);

/*
 * req's client went away: the request goes on without anyone to answer (an
 * owner still records its outcome); a waiting duplicate just ends.
 */
void request_conn_gone(struct request *req);

/*
 * The owner of the scope named by token (scope_token; NULL: of any scope,
 * some notifications may have been missed) wrote its outcome: duplicates
 * waiting for it claim again.
 */
void request_wake(struct request_ctx *ctx, const char *token);

/*
 * shutdown_timeout passed: nothing more goes upstream, an owner still at
 * the upstream is cut off and its record settled, a waiting duplicate is
 * answered in-progress.
 */
void request_deadline_all(struct request_ctx *ctx);

/* Requests in flight, those of them waiting for the upstream, and those
 * counted as owners in flight (admit.h). */
int request_count(const struct request_ctx *ctx);
int request_owners(const struct request_ctx *ctx);
int request_forwarding(const struct request_ctx *ctx);

#endif
