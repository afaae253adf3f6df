/*
 * The upstream client: a keep-alive connection pool to the API behind the
 * proxy, one per worker, and one exchange at a time per connection. An
 * exchange sends a request (its body all at once, or streamed piece by
 * piece) and reports the response as it arrives: interim responses, the
 * final head, decoded body bytes, the end. The caller (relay.c) decides
 * what reaches the client and when.
 */
#ifndef IDEMPROXY_UPSTREAM_H
#define IDEMPROXY_UPSTREAM_H

#include <stddef.h>
#include <stdint.h>

#include "proxy/upstream_events.h"

struct bufferevent;
struct event_base;
struct evdns_base;
/* Idle keep-alive connections one pool keeps at most. */
#define UPSTREAM_MAX_IDLE 64

struct upstream_pool;
struct upstream_req;
typedef struct ssl_ctx_st SSL_CTX;

/* What the pool's connections speak. */
enum upstream_proto {
	UPSTREAM_HTTP1, /* HTTP/1.1, one exchange at a time per connection */
	UPSTREAM_H2C,   /* h2c://: HTTP/2 with prior knowledge, exchanges as streams (h2up.h) */
	UPSTREAM_ALPN,  /* https:// offering h2 and http/1.1: each connection speaks the
			 * one the upstream picked (upstream_http2 on) */
};

/*
 * Connections to host:port; with tls (its own reference taken) they speak
 * TLS and verify the upstream's certificate names tls_name. proto says what
 * they speak; the exchange API below is the same for each.
 */
struct upstream_pool *upstream_pool_new(struct event_base *base, struct evdns_base *dns,
					const char *host, int port, SSL_CTX *tls,
					const char *tls_name, enum upstream_proto proto);
void upstream_pool_free(struct upstream_pool *pool);

/* Idle connections in the pool (HTTP/2 ones: with no stream on them). */
int upstream_pool_idle(const struct upstream_pool *pool);

/*
 * Start an exchange: send req (the serialised head and whatever body is
 * ready; drained from req). ev and arg receive what happens. Returns NULL
 * only when out of memory before anything was sent.
 */
struct upstream_req *upstream_start(struct upstream_pool *pool, struct evbuffer *req,
				    const struct upstream_params *params,
				    const struct upstream_events *ev, void *arg);

/* More of a UPSTREAM_STREAMED request (drained from data), and its end. */
void upstream_send(struct upstream_req *ur, struct evbuffer *data);
void upstream_send_end(struct upstream_req *ur);

/* Request bytes queued and not yet written to the upstream. */
size_t upstream_pending(const struct upstream_req *ur);

/* Stop (1) or go on (0) reading the response: the caller's receiver is behind. */
void upstream_read_pause(struct upstream_req *ur, int pause);

/*
 * Read at most max bytes of the response's body at a time from now on (0:
 * the usual IO_BODY_CHUNK; a TLS connection's usual is the bufferevent's
 * IO_SINGLE_MAX): the caller's receiver has room for little.
 */
void upstream_read_max(struct upstream_req *ur, size_t max);

/* 1 when ur is a stream of an HTTP/2 connection. */
int upstream_http2(const struct upstream_req *ur);

/* 1 while not a byte of ur's request has been written to the upstream. */
int upstream_unsent(const struct upstream_req *ur);

/* Forget the exchange: no callback follows. Its connection is closed. NULL is accepted. */
void upstream_cancel(struct upstream_req *ur);

#endif
