/*
 * What an exchange with the upstream is asked to do and what it reports,
 * whichever protocol carries it: an HTTP/1.1 connection (upstream.c) or
 * an HTTP/2 stream (h2up.c). The caller (relay.c) sees no difference.
 */
#ifndef IDEMPROXY_UPSTREAM_EVENTS_H
#define IDEMPROXY_UPSTREAM_EVENTS_H

#include <stddef.h>
#include <stdint.h>

struct bufferevent;
struct evbuffer;
struct http_msg;

enum upstream_result {
	UPSTREAM_OK,	   /* a complete response */
	UPSTREAM_NOT_SENT, /* no byte of the request reached the upstream */
	UPSTREAM_ERROR,	   /* sent, then reset, truncated or malformed */
	UPSTREAM_TIMEOUT,  /* sent, no complete response in time */
	UPSTREAM_CUT_OFF,  /* sent, then cut off at the shutdown deadline */
};

enum upstream_flags {
	UPSTREAM_HEAD_REQUEST = 1,  /* HEAD: the response has no body */
	UPSTREAM_RETRY_SAFE = 2,    /* safe to repeat: a failure before any response
				     * byte is tried once more on a fresh connection */
	UPSTREAM_UPGRADE = 4,	    /* the request asks to upgrade: a 101 answers it */
	UPSTREAM_STREAMED = 8,	    /* more request body follows (upstream_send, then
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
	/* May be NULL. The response's trailer fields arrived after its body
	 * (an HTTP/2 HEADERS frame after DATA), as "name: value\r\n" lines,
	 * which is what a chunked HTTP/1.1 body's trailer section holds: the
	 * callee takes them all. Reported before done(UPSTREAM_OK). A response
	 * without a body (a trailers-only gRPC answer) has its fields in its
	 * head instead. An HTTP/1.1 exchange reports a chunked body's trailer
	 * section (a Content-Length body has none). */
	void (*trailers)(void *arg, struct evbuffer *fields);
};

struct upstream_params {
	unsigned flags;	    /* enum upstream_flags */
	int64_t timeout_ms; /* upstream_timeout: connect, send, response */
	size_t drain_mark;  /* see drained() */
};

#endif
