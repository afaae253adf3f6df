/*
 * The upstream client: a keep-alive connection pool to the API behind the
 * proxy, one per worker, and one-shot request forwarding with a deadline.
 */
#ifndef IDEMPROXY_UPSTREAM_H
#define IDEMPROXY_UPSTREAM_H

#include <stdint.h>

struct event_base;
struct evdns_base;
struct evbuffer;
struct http_msg;
struct upstream_pool;
struct upstream_req;

enum upstream_result {
	UPSTREAM_OK,        /* a complete response */
	UPSTREAM_NOT_SENT,  /* no byte of the request reached the upstream */
	UPSTREAM_ERROR,     /* sent, then reset, truncated or malformed */
	UPSTREAM_TIMEOUT,   /* sent, no complete response in time */
};

/* resp is the complete response (the callee owns it) for UPSTREAM_OK, else NULL. */
typedef void (*upstream_cb)(void *arg, enum upstream_result res, struct http_msg *resp);

struct upstream_pool *upstream_pool_new(struct event_base *base, struct evdns_base *dns,
					const char *host, int port);
void upstream_pool_free(struct upstream_pool *pool);

/*
 * Send the serialised request (head and body; drained from req) and call cb
 * once with the outcome, from the event loop. no_body: the request was HEAD.
 * retry_safe: a failure before any response byte may be retried once on a
 * fresh connection (only for requests that are safe to repeat). The deadline
 * covers connect, send and the whole response.
 */
struct upstream_req *upstream_forward(struct upstream_pool *pool, struct evbuffer *req,
				      int no_body, int retry_safe, int64_t timeout_ms,
				      upstream_cb cb, void *arg);

/* 1 while not a byte of ur's request has been written to the upstream. */
int upstream_unsent(const struct upstream_req *ur);

/* Idle connections in the pool. */
int upstream_pool_idle(const struct upstream_pool *pool);

/* Forget the request: cb will not be called. Its connection is closed. */
void upstream_cancel(struct upstream_req *ur);

#endif
