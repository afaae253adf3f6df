/*
 * Upstream client: one exchange at a time per connection, the response
 * read with the strict parser as it arrives and reported piece by piece.
 * Idle connections are kept per worker (LIFO, so the warmest is reused
 * first) and closed when the upstream closes them or after
 * UPSTREAM_IDLE_TIMEOUT_S.
 *
 * What the upstream saw decides the result: a failure before any byte of
 * the request left our buffer is UPSTREAM_NOT_SENT (safe to release the
 * claim); after that it is UPSTREAM_ERROR or UPSTREAM_TIMEOUT, and the
 * request is never sent again unless the caller marked it retry-safe.
 *
 * Memory: the response is read with one recv(2) per readable event and
 * every decoded byte goes straight to the caller, who stops the reads
 * (upstream_read_pause) while its receiver is behind; a streamed request's
 * body is queued only as the caller sends it.
 */
#include "proxy/upstream.h"

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <event2/dns.h>
#include <event2/event.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>
#include <sys/socket.h>

#include "proxy/clock.h"
#include "proxy/evalloc.h"
#include "proxy/evfree.h"
#include "proxy/h2up.h"
#include "proxy/http.h"
#include "proxy/io.h"
#include "proxy/log.h"
#include "proxy/tls.h"

/* Shorter than the usual upstream keep-alive timeouts (Node 5 s, nginx
 * 75 s), so the upstream rarely closes a connection just as we reuse it. */
#define UPSTREAM_IDLE_TIMEOUT_S 4
#define UPSTREAM_LATE_READS 16 /* chunks a fired deadline still reads */
#define UPSTREAM_TLS_WARN_INTERVAL_US 1000000 /* a failing upstream: one line a second */

struct upstream_conn {
	TAILQ_ENTRY(upstream_conn) link;
	struct upstream_pool *pool;
	struct bufferevent *bev;
	struct event *read_ev;      /* reads once connected (io_read_now) */
	struct http_parser *parser;
	struct upstream_req *ur;    /* NULL while idle */
	int connected;
	int marked;                 /* a write watermark is set (a streamed body) */
};

struct upstream_req {
	struct upstream_pool *pool;
	struct upstream_conn *conn;
	struct evbuffer *data;      /* the request's first bytes; kept for a retry */
	size_t queued;              /* bytes of the request queued on conn so far */
	struct upstream_params params;
	const struct upstream_events *ev;
	void *arg;
	int retried;
	int reused;                 /* sent on a connection from the idle pool */
	int streamed;               /* upstream_send added bytes beyond data */
	int sent_all;               /* the request is whole (not streamed, or ended) */
	int head_taken;             /* the final head was reported: a body follows */
	int keep_alive;             /* the final response lets the connection be reused */
	int bodiless;               /* the final response has no body (HEAD, 204, 304) */
	int paused;                 /* the caller stopped the reads */
	size_t read_max;            /* body bytes one read takes at most; 0: IO_BODY_CHUNK */
	int64_t progress_us;        /* the last byte moved either way */
	int dispatching;            /* inside a callback */
	int cancelled;              /* upstream_cancel() during a callback */
	struct event *timer;
	struct h2up_stream *h2;     /* an HTTP/2 exchange: everything is h2up's */
	struct evbuffer *trailers;  /* a whole response's trailer section, until reported */
};

struct upstream_pool {
	struct event_base *base;
	struct evdns_base *dns;
	char *host;
	int port;
	SSL_CTX *tls;		    /* NULL: plain http */
	char *tls_name;		    /* the name the certificate must have */
	TAILQ_HEAD(, upstream_conn) idle;
	int nidle;
	struct h2up_pool *h2;       /* h2c://, or ALPN's h2: the exchanges are streams */
	int alpn;                   /* TLS offers h2: a connection may turn HTTP/2 */
};

static void upstream_conn_read_cb(struct bufferevent *bev, void *arg);
static void upstream_conn_write_cb(struct bufferevent *bev, void *arg);
static void upstream_conn_event_cb(struct bufferevent *bev, short what, void *arg);
static const struct upstream_events upstream_h2_events;
static void upstream_idle_event_cb(struct bufferevent *bev, short what, void *arg);
static void upstream_idle_read_cb(struct bufferevent *bev, void *arg);

int upstream_pool_idle(const struct upstream_pool *pool)
{
	return pool->nidle + (pool->h2 ? h2up_pool_idle(pool->h2) : 0);
}

static struct bufferevent *upstream_bev_new(struct upstream_pool *pool, int offer_h2);

/* A new connection to the pool's upstream, connecting: h2up's way in. */
static struct bufferevent *upstream_connect(void *arg)
{
	struct upstream_pool *pool = arg;
	struct bufferevent *bev = upstream_bev_new(pool, 0);

	if (!bev)
		return NULL;
	io_tune(bev);
	if (bufferevent_socket_connect_hostname(bev, pool->dns, AF_UNSPEC, pool->host,
						pool->port) < 0) {
		bufferevent_free(bev);
		return NULL;
	}
	return bev;
}

struct upstream_pool *upstream_pool_new(struct event_base *base, struct evdns_base *dns,
					const char *host, int port, SSL_CTX *tls,
					const char *tls_name, enum upstream_proto proto)
{
	struct upstream_pool *pool = calloc(1, sizeof(*pool));
	char name[300];

	if (!pool)
		return NULL;
	pool->host = strdup(host);
	pool->tls_name = tls ? strdup(tls_name) : NULL;
	/* With ALPN, h2up opens no connection: only those the upstream
	 * switched to h2 on become its sessions (upstream_to_h2). */
	pool->alpn = proto == UPSTREAM_ALPN && tls;
	snprintf(name, sizeof(name), "%s:%d", host, port);
	if (proto == UPSTREAM_H2C || pool->alpn)
		pool->h2 = h2up_pool_new(base, name, upstream_connect, pool, tls != NULL,
					 pool->alpn ? 0 : UPSTREAM_MAX_IDLE,
					 UPSTREAM_IDLE_TIMEOUT_S * 1000);
	if (!pool->host || (tls && (!pool->tls_name || !SSL_CTX_up_ref(tls))) ||
	    ((proto == UPSTREAM_H2C || pool->alpn) && !pool->h2)) {
		h2up_pool_free(pool->h2);
		free(pool->host);
		free(pool->tls_name);
		free(pool);
		return NULL;
	}
	pool->tls = tls;
	pool->base = base;
	pool->dns = dns;
	pool->port = port;
	TAILQ_INIT(&pool->idle);
	return pool;
}

static void upstream_conn_free(struct upstream_conn *uc)
{
	if (!uc)
		return;
	evfree_event(&uc->read_ev);
	evfree_bufferevent(&uc->bev);
	http_parser_free(uc->parser);
	free(uc);
}

static void upstream_idle_remove(struct upstream_conn *uc)
{
	TAILQ_REMOVE(&uc->pool->idle, uc, link);
	uc->pool->nidle--;
}

void upstream_pool_free(struct upstream_pool *pool)
{
	struct upstream_conn *uc;

	if (!pool)
		return;
	while ((uc = TAILQ_FIRST(&pool->idle))) {
		upstream_idle_remove(uc);
		upstream_conn_free(uc);
	}
	h2up_pool_free(pool->h2);
	free(pool->host);
	free(pool->tls_name);
	SSL_CTX_free(pool->tls);
	free(pool);
}

/*
 * A connection's bufferevent: a socket one, or for https an OpenSSL one
 * whose handshake (certificate and name verified) runs once connected;
 * BEV_EVENT_CONNECTED comes after it. offer_h2: ALPN offers h2 before
 * http/1.1.
 */
static struct bufferevent *upstream_bev_new(struct upstream_pool *pool, int offer_h2)
{
	static const unsigned char alpn[] = "\x02h2\x08http/1.1";
	struct bufferevent *bev;
	SSL *ssl;

	if (!pool->tls)
		return bufferevent_socket_new(pool->base, -1, BEV_OPT_CLOSE_ON_FREE);
	ssl = tls_client_new(pool->tls, pool->tls_name);
	if (!ssl)
		return NULL;
	if (offer_h2 && SSL_set_alpn_protos(ssl, alpn, sizeof(alpn) - 1) != 0) {
		SSL_free(ssl);
		return NULL;
	}
	bev = bufferevent_openssl_socket_new(pool->base, -1, ssl, BUFFEREVENT_SSL_CONNECTING,
					     BEV_OPT_CLOSE_ON_FREE);
	if (!bev) {
		SSL_free(ssl);
		return NULL;
	}
	/* Many servers close without close_notify; the framing decides
	 * whether a response is whole. */
	bufferevent_openssl_set_allow_dirty_shutdown(bev, 1);
	return bev;
}

/*
 * A new connection for the exchange ur: with ALPN, h2 is offered but to an
 * upgrade (HTTP/2 has no 101; RFC 8441's extended CONNECT is not spoken).
 */
static struct upstream_conn *upstream_conn_new(struct upstream_pool *pool,
					       const struct upstream_req *ur)
{
	struct upstream_conn *uc = calloc(1, sizeof(*uc));

	if (!uc)
		return NULL;
	uc->pool = pool;
	uc->parser = http_parser_new(HTTP_RESPONSE, 0);
	uc->bev = upstream_bev_new(pool, pool->alpn && !(ur->params.flags & UPSTREAM_UPGRADE));
	if (!uc->parser || !uc->bev)
		goto fail;
	io_tune(uc->bev);
	http_parser_set_options(uc->parser, HTTP_OPT_HEAD | HTTP_OPT_INTERIM | HTTP_OPT_TRAILERS);
	if (bufferevent_socket_connect_hostname(uc->bev, pool->dns, AF_UNSPEC, pool->host,
						pool->port) < 0)
		goto fail;
	return uc;
fail:
	upstream_conn_free(uc);
	return NULL;
}

/* An idle connection: the only thing it may receive is EOF or an error. */
static void upstream_idle_read_cb(struct bufferevent *bev, void *arg)
{
	struct upstream_conn *uc = arg;

	upstream_idle_remove(uc);
	upstream_conn_free(uc);
}

static void upstream_idle_event_cb(struct bufferevent *bev, short what, void *arg)
{
	upstream_idle_read_cb(bev, arg);
}

/* 1 when the upstream has closed the idle connection (or sent junk on it). */
static int upstream_idle_is_dead(struct upstream_conn *uc)
{
	char b;
	ssize_t n = recv(bufferevent_getfd(uc->bev), &b, 1, MSG_PEEK | MSG_DONTWAIT);

	return n >= 0 || (errno != EAGAIN && errno != EWOULDBLOCK);
}

/*
 * The warmest idle connection, or NULL. For a request that must not be
 * sent twice, the connection is first checked to be still open: a close
 * the loop has not processed yet would otherwise turn it into an unknown
 * outcome. A request that may be repeated skips the check (one system
 * call) and is retried on a fresh connection instead.
 */
static struct upstream_conn *upstream_idle_take(struct upstream_pool *pool, int retry_safe)
{
	struct upstream_conn *uc;

	while ((uc = TAILQ_FIRST(&pool->idle))) {
		upstream_idle_remove(uc);
		if (retry_safe || !upstream_idle_is_dead(uc))
			return uc;
		upstream_conn_free(uc);
	}
	return NULL;
}

/*
 * What one read of uc may take, for a TLS connection, whose bufferevent
 * reads (and decrypts) by itself: its exchange's read_max, or the usual.
 */
static void upstream_conn_read_size(struct upstream_conn *uc)
{
	size_t max = uc->ur && uc->ur->read_max ? uc->ur->read_max : IO_SINGLE_MAX;

	if (uc->pool->tls)
		bufferevent_set_max_single_read(uc->bev, max);
}

static void upstream_conn_park(struct upstream_conn *uc)
{
	struct upstream_pool *pool = uc->pool;
	struct timeval tv = clock_tv(UPSTREAM_IDLE_TIMEOUT_S * 1000);

	uc->ur = NULL;
	if (pool->nidle >= UPSTREAM_MAX_IDLE) {
		upstream_conn_free(uc);
		return;
	}
	upstream_conn_read_size(uc);
	/* The next request is written directly (upstream_conn_attach). */
	bufferevent_disable(uc->bev, EV_WRITE);
	if (uc->marked) {
		uc->marked = 0;
		bufferevent_setwatermark(uc->bev, EV_WRITE, 0, 0);
	}
	if (uc->read_ev) {
		/* EOF, data or the idle timeout: upstream_conn_read_event closes it. */
		event_add(uc->read_ev, &tv);
	} else {
		bufferevent_setcb(uc->bev, upstream_idle_read_cb, NULL, upstream_idle_event_cb, uc);
		bufferevent_set_timeouts(uc->bev, &tv, NULL);
		bufferevent_enable(uc->bev, EV_READ);
	}
	TAILQ_INSERT_HEAD(&pool->idle, uc, link);
	pool->nidle++;
}

/* Stop or go on reading uc's socket, whichever way it is read. */
static void upstream_conn_reading(struct upstream_conn *uc, int on)
{
	if (uc->read_ev) {
		if (on)
			event_add(uc->read_ev, NULL);
		else
			event_del(uc->read_ev);
	} else if (on) {
		bufferevent_enable(uc->bev, EV_READ);
	} else {
		bufferevent_disable(uc->bev, EV_READ);
	}
}

/* Write what uc's output holds now; what the socket does not take waits for EV_WRITE. */
static int upstream_conn_flush(struct upstream_conn *uc, int connected)
{
	struct evbuffer *out = bufferevent_get_output(uc->bev);

	/* A failed write leaves the bytes queued: the bufferevent then reports
	 * the error, and upstream_unsent() sees nothing was sent. */
	if (connected && io_write_now(uc->bev) == 0 && evbuffer_get_length(out) == 0)
		return 0;
	return bufferevent_enable(uc->bev, EV_WRITE);
}

/*
 * Put ur on uc, queueing the bytes of out (ur's request so far), or a
 * reference to ur->data when out is NULL. On a connected (pooled)
 * connection they are written at once with one writev(2); a new connection
 * writes once it is connected.
 */
static int upstream_conn_attach(struct upstream_req *ur, struct upstream_conn *uc, int connected,
				struct evbuffer *out)
{
	struct evbuffer *q = bufferevent_get_output(uc->bev);

	ur->conn = uc;
	uc->ur = ur;
	upstream_conn_read_size(uc);
	http_parser_expect_no_body(uc->parser, (ur->params.flags & UPSTREAM_HEAD_REQUEST) != 0);
	http_parser_expect_upgrade(uc->parser, (ur->params.flags & UPSTREAM_UPGRADE) != 0);
	bufferevent_set_timeouts(uc->bev, NULL, NULL);
	bufferevent_setcb(uc->bev, upstream_conn_read_cb, upstream_conn_write_cb,
			  upstream_conn_event_cb, uc);
	if (uc->read_ev)
		event_remove_timer(uc->read_ev); /* the idle timeout */
	if (out ? evbuffer_add_buffer(q, out) < 0 : evbuffer_add_buffer_reference(q, ur->data) < 0)
		return -1;
	if (!uc->read_ev && !ur->paused)
		bufferevent_enable(uc->bev, EV_READ);
	return upstream_conn_flush(uc, connected);
}

int upstream_http2(const struct upstream_req *ur)
{
	return ur->h2 != NULL;
}

int upstream_unsent(const struct upstream_req *ur)
{
	if (ur->h2)
		return h2up_unsent(ur->h2);
	return !ur->conn ||
	       evbuffer_get_length(bufferevent_get_output(ur->conn->bev)) == ur->queued;
}

size_t upstream_pending(const struct upstream_req *ur)
{
	if (ur->h2)
		return h2up_pending(ur->h2);
	return ur->conn ? evbuffer_get_length(bufferevent_get_output(ur->conn->bev)) : ur->queued;
}

/* Bytes moved: an idle timeout counts the silence from now. */
static void upstream_touch(struct upstream_req *ur)
{
	if (ur->params.flags & UPSTREAM_IDLE_TIMEOUT)
		ur->progress_us = clock_now_us();
}

/*
 * An idle timeout's timer fired: 1 when it is not over yet (re-armed for
 * what is left of it), 0 when the upstream has been silent for all of it.
 * A streamed request whose every byte so far was taken waits for its
 * client, not for the upstream: that is no silence of the upstream's.
 */
static int upstream_idle_left(struct upstream_req *ur)
{
	int64_t left = ur->params.timeout_ms * 1000 - (clock_now_us() - ur->progress_us);
	struct timeval tv;

	if (!(ur->params.flags & UPSTREAM_IDLE_TIMEOUT))
		return 0;
	if (!ur->sent_all && ur->conn &&
	    evbuffer_get_length(bufferevent_get_output(ur->conn->bev)) == 0)
		left = ur->params.timeout_ms * 1000;
	if (left <= 0)
		return 0;
	tv = clock_tv_us(left);
	evtimer_add(ur->timer, &tv);
	return 1;
}

static void upstream_req_free(struct upstream_req *ur)
{
	evfree_event(&ur->timer);
	evfree_evbuffer(&ur->data);
	evfree_evbuffer(&ur->trailers);
	evalloc_free(ur);
}

/*
 * The exchange is over with res: the connection goes back to the pool when
 * the response was complete, said keep-alive, nothing follows it, and the
 * whole request was written (the upstream may answer before it read a
 * streamed body); else it is closed. A response that has no body whatever
 * its headers say (HEAD, 204, 304) also closes it: an upstream that sends
 * a body anyway, now or a moment later, would have it read as the next
 * request's response. Then ur is freed and done() told.
 */
static void upstream_req_complete(struct upstream_req *ur, enum upstream_result res)
{
	const struct upstream_events *ev = ur->ev;
	void *arg = ur->arg;
	struct upstream_conn *uc = ur->conn;

	if (uc) {
		if (res == UPSTREAM_OK && evbuffer_get_length(bufferevent_get_input(uc->bev)) > 0) {
			/* Never let them reach another exchange. */
			log_warn(NULL, "upstream sent more than the response it announced; "
				       "connection closed");
			upstream_conn_free(uc);
		} else if (res == UPSTREAM_OK && ur->keep_alive && ur->sent_all && !ur->bodiless &&
			   evbuffer_get_length(bufferevent_get_output(uc->bev)) == 0) {
			upstream_conn_park(uc);
		} else {
			upstream_conn_free(uc);
		}
		ur->conn = NULL;
	}
	upstream_req_free(ur);
	ev->done(arg, res);
}

/* 1 when the final response m to ur has no body, whatever its headers say. */
static int upstream_bodiless(const struct upstream_req *ur, const struct http_msg *m)
{
	return (ur->params.flags & UPSTREAM_HEAD_REQUEST) || m->status == 204 || m->status == 304;
}

/*
 * The connection failed. One more try on a fresh connection goes to a
 * request that is safe to repeat, whole in ur->data, and has seen no
 * response byte, and to any request that a reused pooled connection failed
 * before a byte of it was written (the upstream had closed it while idle).
 * Otherwise the result says whether the upstream may have seen the request.
 */
static void upstream_req_fail(struct upstream_req *ur, enum upstream_result sent_result)
{
	int unsent = upstream_unsent(ur);
	int answered = ur->conn && http_parser_started(ur->conn->parser);
	int safe = (ur->params.flags & UPSTREAM_RETRY_SAFE) && !ur->streamed;
	struct upstream_conn *old = ur->conn, *uc;
	struct evbuffer *moved = NULL;

	if (!ur->retried && !answered && (safe || (unsent && ur->reused))) {
		ur->retried = 1;
		ur->reused = 0;
		uc = upstream_conn_new(ur->pool, ur);
		/* Unsent bytes move whole (a streamed body's included); a safe
		 * request is queued again from ur->data. */
		if (uc && unsent && old) {
			moved = bufferevent_get_output(old->bev);
			evbuffer_unfreeze(moved, 1);
		}
		if (uc && upstream_conn_attach(ur, uc, 0, moved) == 0) {
			ur->queued = evbuffer_get_length(bufferevent_get_output(uc->bev));
			upstream_conn_free(old);
			return;
		}
		upstream_conn_free(uc);
		ur->conn = old;
		upstream_req_complete(ur, UPSTREAM_NOT_SENT);
		return;
	}
	upstream_req_complete(ur, unsent ? UPSTREAM_NOT_SENT : sent_result);
}

static int upstream_upgrade(struct upstream_req *ur, struct http_msg *m);

/* Run one callback of ur; 1 when ur was cancelled inside it (and is gone). */
#define UPSTREAM_CALL(ur, call)                                                              \
	((ur)->dispatching++, (call), --(ur)->dispatching == 0 && (ur)->cancelled                \
					      ? (upstream_cancel(ur), 1)                     \
					      : 0)

/*
 * The trailer section of the response just parsed, if it had one, reported
 * (trailers()): from the parser, or from ur->trailers where
 * upstream_whole_trailers kept it (freed with ur). Returns 1 when the
 * exchange is over.
 */
static int upstream_trailers(struct upstream_req *ur)
{
	struct evbuffer *t = ur->trailers ? ur->trailers : http_parser_trailers(ur->conn->parser);

	return t && evbuffer_get_length(t) > 0 && ur->ev->trailers &&
	       UPSTREAM_CALL(ur, ur->ev->trailers(ur->arg, t));
}

/*
 * A whole response (head, body and trailers) parsed in one go: its trailer
 * section, which the parser drops when the message is taken, is kept in
 * ur->trailers until the head was reported. Returns 1 when out of memory
 * (the exchange failed and is over).
 */
static int upstream_whole_trailers(struct upstream_req *ur)
{
	struct evbuffer *t = http_parser_trailers(ur->conn->parser);

	if (!t)
		return 0;
	if (!ur->trailers && !(ur->trailers = evbuffer_new())) {
		upstream_req_fail(ur, UPSTREAM_ERROR);
		return 1;
	}
	evbuffer_add_buffer(ur->trailers, t);
	return 0;
}

/*
 * Parse what has arrived and report it: interim responses, the final head,
 * body bytes, the end. Returns 1 when the exchange is over (ur is gone).
 */
static int upstream_deliver(struct upstream_req *ur)
{
	struct upstream_conn *uc = ur->conn;
	struct evbuffer *in = bufferevent_get_input(uc->bev), *body;
	struct http_msg *m;

	for (;;) {
		enum http_status st = http_parser_feed(uc->parser, in);

		body = http_parser_body(uc->parser);
		if ((st == HTTP_MORE || st == HTTP_DONE) && body && evbuffer_get_length(body) > 0 &&
		    UPSTREAM_CALL(ur, ur->ev->body(ur->arg, body)))
			return 1;
		switch (st) {
		case HTTP_MORE:
			if (ur->ev->caught_up && UPSTREAM_CALL(ur, ur->ev->caught_up(ur->arg)))
				return 1;
			return 0;
		case HTTP_HEAD:
			m = http_parser_take_head(uc->parser);
			if (!m)
				break;
			ur->head_taken = 1;
			ur->keep_alive = m->keep_alive;
			ur->bodiless = upstream_bodiless(ur, m);
			if (UPSTREAM_CALL(ur, ur->ev->head(ur->arg, m)))
				return 1;
			continue;
		case HTTP_DONE:
			if (ur->head_taken) {
				if (upstream_trailers(ur))
					return 1;
				http_parser_take(uc->parser);
				upstream_req_complete(ur, UPSTREAM_OK);
				return 1;
			}
			if (upstream_whole_trailers(ur))
				return 1;
			m = http_parser_take(uc->parser);
			if (!m)
				break;
			if (m->status < 200 && m->status != 101) {
				int gone = ur->ev->interim ? UPSTREAM_CALL(ur, ur->ev->interim(ur->arg, m))
							   : 0;
				http_msg_free(m);
				if (gone)
					return 1;
				continue;
			}
			ur->keep_alive = m->keep_alive;
			ur->bodiless = upstream_bodiless(ur, m);
			if (m->status == 101)
				return upstream_upgrade(ur, m);
			if (UPSTREAM_CALL(ur, ur->ev->head(ur->arg, m)) || upstream_trailers(ur))
				return 1;
			upstream_req_complete(ur, UPSTREAM_OK);
			return 1;
		default:
			break;
		}
		log_warn(NULL, "upstream sent a malformed response");
		upstream_req_fail(ur, UPSTREAM_ERROR);
		return 1;
	}
}

/*
 * A 101 answered an upgrade: report its head, then hand the connection
 * over as it stands (bytes after the 101 wait in its input). Returns 1.
 */
static int upstream_upgrade(struct upstream_req *ur, struct http_msg *m)
{
	const struct upstream_events *ev = ur->ev;
	void *arg = ur->arg;
	struct upstream_conn *uc = ur->conn;
	struct bufferevent *bev;

	if (UPSTREAM_CALL(ur, ev->head(arg, m)))
		return 1;
	bev = uc->bev;
	uc->bev = NULL;
	evfree_event(&uc->read_ev);
	bufferevent_setcb(bev, NULL, NULL, NULL, NULL);
	bufferevent_setwatermark(bev, EV_WRITE, 0, 0);
	bufferevent_disable(bev, EV_READ | EV_WRITE);
	ur->conn = NULL;
	upstream_conn_free(uc);
	upstream_req_free(ur);
	ev->upgraded(arg, bev);
	return 1;
}

/* How much one read takes: more once a body streams (unless the caller said less). */
static size_t upstream_chunk(const struct upstream_conn *uc)
{
	if (!uc->ur || !uc->ur->head_taken)
		return io_head_chunk(uc->bev);
	return uc->ur->read_max ? uc->ur->read_max : IO_BODY_CHUNK;
}

static void upstream_conn_read_cb(struct bufferevent *bev, void *arg)
{
	struct upstream_conn *uc = arg;

	upstream_touch(uc->ur);
	upstream_deliver(uc->ur);
}

/* The request's unwritten bytes fell to the drain mark. */
static void upstream_conn_write_cb(struct bufferevent *bev, void *arg)
{
	struct upstream_conn *uc = arg;
	struct upstream_req *ur = uc->ur;

	if (evbuffer_get_length(bufferevent_get_output(bev)) == 0)
		bufferevent_disable(bev, EV_WRITE);
	upstream_touch(ur);
	if (ur->ev->drained)
		UPSTREAM_CALL(ur, ur->ev->drained(ur->arg));
}

/*
 * Once connected, a connection is read with one recv(2) per readable event
 * (io.c) instead of the bufferevent's ioctl + readv. A busy connection
 * feeds the parser; an idle one is closed by anything it receives, by EOF,
 * or by its idle timeout.
 */
static void upstream_conn_read_event(evutil_socket_t fd, short what, void *arg)
{
	struct upstream_conn *uc = arg;
	int n = (what & EV_READ) ? io_read_now(uc->bev, upstream_chunk(uc)) : -1;

	if (n == -2)
		return;
	if (!uc->ur) {
		upstream_idle_remove(uc);
		upstream_conn_free(uc);
		return;
	}
	if (n > 0)
		upstream_conn_read_cb(uc->bev, uc);
	else
		upstream_conn_event_cb(uc->bev,
				       BEV_EVENT_READING | (n == 0 ? BEV_EVENT_EOF : BEV_EVENT_ERROR), uc);
}

static struct log_limit upstream_tls_warnings;

/*
 * The TLS handshake of uc failed with the OpenSSL error err (0: none): say
 * why when TLS knows, at most once an interval.
 */
static void upstream_tls_failed(struct upstream_conn *uc, unsigned long err)
{
	char buf[512];
	const char *why =
	    tls_handshake_error(bufferevent_openssl_get_ssl(uc->bev), err, buf, sizeof(buf));
	int skipped;

	if (why && log_limit_pass(&upstream_tls_warnings, clock_now_us(),
				  UPSTREAM_TLS_WARN_INTERVAL_US, &skipped))
		log_warn(NULL,
			 "upstream %s:%d: TLS handshake failed: %s (name verified: %s; "
			 "%d more failures since the last message)",
			 uc->pool->host, uc->pool->port, why, uc->pool->tls_name, skipped);
}

/* 1 when uc's TLS handshake picked h2 by ALPN. */
static int upstream_alpn_h2(struct upstream_conn *uc)
{
	const unsigned char *proto = NULL;
	unsigned int len = 0;

	SSL_get0_alpn_selected(bufferevent_openssl_get_ssl(uc->bev), &proto, &len);
	return len == 2 && memcmp(proto, "h2", 2) == 0;
}

/*
 * The upstream picked h2 for uc, just connected: not a byte of ur's
 * request was written (the handshake came first), so the bytes queued so
 * far go to a stream of a new HTTP/2 session on uc's connection, and ur
 * goes on as an HTTP/2 exchange.
 */
static void upstream_to_h2(struct upstream_conn *uc)
{
	struct upstream_req *ur = uc->ur;
	struct evbuffer *queued = evbuffer_new();
	struct bufferevent *bev = uc->bev;
	struct upstream_params params = ur->params;

	if (!queued || evbuffer_add_buffer(queued, bufferevent_get_output(bev)) < 0) {
		evfree_evbuffer(&queued);
		upstream_req_fail(ur, UPSTREAM_NOT_SENT);
		return;
	}
	if (ur->sent_all)
		params.flags &= ~UPSTREAM_STREAMED;
	bufferevent_setcb(bev, NULL, NULL, NULL, NULL);
	bufferevent_setwatermark(bev, EV_WRITE, 0, 0);
	uc->bev = NULL;
	upstream_conn_free(uc);
	ur->conn = NULL;
	evfree_event(&ur->timer);
	evfree_evbuffer(&ur->data);
	ur->h2 = h2up_adopt(ur->pool->h2, bev, queued, &params, &upstream_h2_events, ur);
	evbuffer_free(queued);
	if (!ur->h2)
		upstream_req_complete(ur, UPSTREAM_NOT_SENT);
}

static void upstream_conn_event_cb(struct bufferevent *bev, short what, void *arg)
{
	struct upstream_conn *uc = arg;
	struct upstream_req *ur = uc->ur;
	enum http_status st;
	unsigned long err;

	if (what & BEV_EVENT_CONNECTED) {
		uc->connected = 1;
		if (uc->pool->alpn && upstream_alpn_h2(uc)) {
			upstream_to_h2(uc);
			return;
		}
		if (uc->pool->tls)
			return; /* the bufferevent reads: it decrypts */
		uc->read_ev = event_new(uc->pool->base, bufferevent_getfd(bev), EV_READ | EV_PERSIST,
					upstream_conn_read_event, uc);
		/* Without it the bufferevent goes on reading: slower, not wrong. */
		if (uc->read_ev && (ur->paused || event_add(uc->read_ev, NULL) == 0))
			bufferevent_disable(bev, EV_READ);
		else
			evfree_event(&uc->read_ev);
		return;
	}
	if (what & BEV_EVENT_EOF) {
		/* Bytes that arrived with the EOF are parsed first; the EOF
		 * itself may end a close-delimited body. */
		if (upstream_deliver(ur))
			return;
		st = http_parser_eof(uc->parser);
		if (st == HTTP_DONE) {
			ur->keep_alive = 0;
			if (upstream_deliver(ur))
				return;
		}
	}
	err = uc->pool->tls ? bufferevent_get_openssl_error(bev) : 0;
	/* TLS 1.3 reports a refused client certificate after the handshake. */
	if (uc->pool->tls && (!uc->connected || tls_refused_us(err)))
		upstream_tls_failed(uc, err);
	/* An upstream that refused our client certificate never saw the request. */
	if (uc->pool->tls && !http_parser_started(uc->parser) && tls_refused_us(err)) {
		upstream_req_fail(ur, UPSTREAM_NOT_SENT);
		return;
	}
	upstream_req_fail(ur, UPSTREAM_ERROR);
}

static void upstream_req_timer_cb(evutil_socket_t fd, short what, void *arg)
{
	struct upstream_req *ur = arg;
	struct upstream_conn *uc = ur->conn;

	if (!uc) {
		upstream_req_complete(ur, UPSTREAM_NOT_SENT);
		return;
	}
	if (upstream_idle_left(ur))
		return;
	/* A loop that did not run for a while (the process was stopped or
	 * starved) may find the whole response waiting: what arrived before
	 * the deadline was noticed still counts, read in a bounded number of
	 * chunks. */
	for (int i = 0; i < UPSTREAM_LATE_READS && uc->read_ev && !ur->paused &&
			io_read_now(uc->bev, upstream_chunk(uc)) > 0;
	     i++)
		if (upstream_deliver(ur))
			return;
	upstream_req_complete(ur, upstream_unsent(ur) ? UPSTREAM_NOT_SENT : UPSTREAM_TIMEOUT);
}

/*
 * An HTTP/2 exchange's reports reach the caller through ur, which goes
 * with done(). A callback may cancel ur: nothing touches it after one.
 */
static void upstream_h2_interim(void *arg, const struct http_msg *m)
{
	struct upstream_req *ur = arg;

	if (ur->ev->interim)
		ur->ev->interim(ur->arg, m);
}

static void upstream_h2_head(void *arg, struct http_msg *resp)
{
	struct upstream_req *ur = arg;

	ur->ev->head(ur->arg, resp);
}

static void upstream_h2_body(void *arg, struct evbuffer *data)
{
	struct upstream_req *ur = arg;

	ur->ev->body(ur->arg, data);
}

static void upstream_h2_done(void *arg, enum upstream_result res)
{
	struct upstream_req *ur = arg;
	const struct upstream_events *ev = ur->ev;
	void *cb_arg = ur->arg;

	evalloc_free(ur);
	ev->done(cb_arg, res);
}

static void upstream_h2_drained(void *arg)
{
	struct upstream_req *ur = arg;

	if (ur->ev->drained)
		ur->ev->drained(ur->arg);
}

static void upstream_h2_caught_up(void *arg)
{
	struct upstream_req *ur = arg;

	if (ur->ev->caught_up)
		ur->ev->caught_up(ur->arg);
}

static void upstream_h2_trailers(void *arg, struct evbuffer *fields)
{
	struct upstream_req *ur = arg;

	if (ur->ev->trailers)
		ur->ev->trailers(ur->arg, fields);
	else
		evbuffer_drain(fields, evbuffer_get_length(fields));
}

static const struct upstream_events upstream_h2_events = {
	.interim = upstream_h2_interim,
	.head = upstream_h2_head,
	.body = upstream_h2_body,
	.done = upstream_h2_done,
	.drained = upstream_h2_drained,
	.caught_up = upstream_h2_caught_up,
	.trailers = upstream_h2_trailers,
};

struct upstream_req *upstream_start(struct upstream_pool *pool, struct evbuffer *req,
				    const struct upstream_params *params,
				    const struct upstream_events *ev, void *arg)
{
	struct upstream_req *ur = evalloc_calloc(sizeof(*ur));
	struct upstream_conn *uc;
	struct timeval tv = clock_tv(params->timeout_ms), now = clock_tv(0);

	if (!ur)
		return NULL;
	if (pool->h2 && (!pool->alpn || h2up_pool_room(pool->h2))) {
		ur->pool = pool;
		ur->ev = ev;
		ur->arg = arg;
		ur->h2 = h2up_start(pool->h2, req, params, &upstream_h2_events, ur);
		if (!ur->h2) {
			evalloc_free(ur);
			return NULL;
		}
		return ur;
	}
	ur->pool = pool;
	ur->params = *params;
	ur->ev = ev;
	ur->arg = arg;
	ur->sent_all = !(params->flags & UPSTREAM_STREAMED);
	ur->progress_us = clock_now_us();
	ur->data = evbuffer_new();
	ur->timer = evtimer_new(pool->base, upstream_req_timer_cb, ur);
	if (!ur->data || !ur->timer) {
		upstream_req_free(ur);
		return NULL;
	}
	evbuffer_add_buffer(ur->data, req);
	ur->queued = evbuffer_get_length(ur->data);

	uc = upstream_idle_take(pool, (params->flags & UPSTREAM_RETRY_SAFE) != 0);
	ur->reused = uc != NULL;
	if (!uc)
		uc = upstream_conn_new(pool, ur);
	if (!uc || upstream_conn_attach(ur, uc, ur->reused, NULL) < 0) {
		/* Reported from the loop, never from inside this call. */
		upstream_conn_free(uc);
		ur->conn = NULL;
		evtimer_add(ur->timer, &now);
		return ur;
	}
	evtimer_add(ur->timer, &tv);
	return ur;
}

void upstream_send(struct upstream_req *ur, struct evbuffer *data)
{
	size_t n = evbuffer_get_length(data);

	if (ur->h2) {
		h2up_send(ur->h2, data);
		return;
	}
	if (n == 0)
		return;
	if (!ur->conn) {
		evbuffer_drain(data, n);
		return;
	}
	/* A streamed body's sender waits for drained() when it is ahead. */
	if (!ur->conn->marked) {
		ur->conn->marked = 1;
		bufferevent_setwatermark(ur->conn->bev, EV_WRITE, ur->params.drain_mark, 0);
	}
	ur->streamed = 1;
	evbuffer_add_buffer(bufferevent_get_output(ur->conn->bev), data);
	ur->queued += n;
	upstream_touch(ur);
	upstream_conn_flush(ur->conn, ur->conn->connected);
}

void upstream_send_end(struct upstream_req *ur)
{
	if (ur->h2) {
		h2up_send_end(ur->h2);
		return;
	}
	ur->sent_all = 1;
	upstream_touch(ur);
}

void upstream_read_pause(struct upstream_req *ur, int pause)
{
	if (ur->h2) {
		h2up_read_pause(ur->h2, pause);
		return;
	}
	if (ur->paused == pause)
		return;
	ur->paused = pause;
	if (ur->conn)
		upstream_conn_reading(ur->conn, !pause);
}

void upstream_read_max(struct upstream_req *ur, size_t max)
{
	if (ur->h2) {
		h2up_read_max(ur->h2, max);
		return;
	}
	if (ur->read_max == max)
		return;
	ur->read_max = max;
	if (ur->conn)
		upstream_conn_read_size(ur->conn);
}

void upstream_cancel(struct upstream_req *ur)
{
	if (!ur)
		return;
	if (ur->h2) {
		h2up_cancel(ur->h2);
		evalloc_free(ur);
		return;
	}
	if (ur->dispatching) {
		ur->cancelled = 1;
		return;
	}
	upstream_conn_free(ur->conn);
	upstream_req_free(ur);
}
