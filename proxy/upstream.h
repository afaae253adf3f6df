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

struct bufferevent;
struct event_base;
struct evdns_base;
struct evbuffer;
struct http_msg;
/* Idle keep-alive connections one pool keeps at most. */
#define UPSTREAM_MAX_IDLE 64

struct upstream_pool;
struct upstream_req;
typedef struct ssl_ctx_st SSL_CTX;

enum upstream_result {
	UPSTREAM_OK,        /* a complete response */
	UPSTREAM_NOT_SENT,  /* no byte of the request reached the upstream */
	UPSTREAM_ERROR,     /* sent, then reset, truncated or malformed */
	UPSTREAM_TIMEOUT,   /* sent, no complete response in time */
	UPSTREAM_CUT_OFF,   /* sent, then cut off at the shutdown deadline */
};

enum upstream_flags {
	UPSTREAM_HEAD_REQUEST = 1,  /* HEAD: the response has no body */
	UPSTREAM_RETRY_SAFE = 2,    /* safe to repeat: a failure before any response
				     * byte is tried once more on a fresh connection */
	UPSTREAM_UPGRADE = 4,       /* the request asks to upgrade: a 101 answers it */
	UPSTREAM_STREAMED = 8,      /* more request body follows (upstream_send, then
				     * upstream_send_end) */
	UPSTREAM_IDLE_TIMEOUT = 16, /* timeout_ms bounds the silence between bytes,
				     * not the whole exchange */
};

/*
 * What an exchange reports, each from the event loop and never from inside
 * the call that caused it. A callback may call upstream_cancel() on the
 * exchange it reports.
 */
struct upstream_events {
	/* An interim 1xx response (102, 103 ...); m stays the exchange's. */
	void (*interim)(void *arg, const struct http_msg *m);
	/* The final response head; the callee owns resp (its body stays empty). */
	void (*head)(void *arg, struct http_msg *resp);
	/* Decoded body bytes arrived in data: the callee takes them all. */
	void (*body)(void *arg, struct evbuffer *data);
	/* The exchange is over: UPSTREAM_OK once the response is complete. */
	void (*done)(void *arg, enum upstream_result res);
	/* A 101 (UPSTREAM_UPGRADE) was reported by head(): the exchange is
	 * over and the callee owns the connection, as it stands after the 101. */
	void (*upgraded)(void *arg, struct bufferevent *bev);
	/* The request bytes waiting to be written fell to drain_mark. */
	void (*drained)(void *arg);
	/* Everything that arrived so far has been reported (the callee may
	 * write out what it gathered, in one go); more follows. */
	void (*caught_up)(void *arg);
};

struct upstream_params {
	unsigned flags;        /* enum upstream_flags */
	int64_t timeout_ms;    /* upstream_timeout: connect, send, response */
	size_t drain_mark;     /* see drained() */
};

/*
 * Connections to host:port; with tls (its own reference taken) they speak
 * TLS and verify the upstream's certificate names tls_name.
 */
struct upstream_pool *upstream_pool_new(struct event_base *base, struct evdns_base *dns,
					const char *host, int port, SSL_CTX *tls,
					const char *tls_name);
void upstream_pool_free(struct upstream_pool *pool);

/* Idle connections in the pool. */
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

/* 1 while not a byte of ur's request has been written to the upstream. */
int upstream_unsent(const struct upstream_req *ur);

/* Forget the exchange: no callback follows. Its connection is closed. NULL is accepted. */
void upstream_cancel(struct upstream_req *ur);

#endif
