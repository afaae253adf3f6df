/*
 * Upstream client: forwards one serialised request at a time per connection
 * and reads the response with the strict parser. Idle connections are kept
 * per worker (LIFO, so the warmest is reused first) and closed when the
 * upstream closes them or after UPSTREAM_IDLE_TIMEOUT_S.
 *
 * What the upstream saw decides the result: a failure before any byte of
 * the request left our buffer is UPSTREAM_NOT_SENT (safe to release the
 * claim); after that it is UPSTREAM_ERROR or UPSTREAM_TIMEOUT, and the
 * request is never sent again unless the caller marked it retry_safe.
 */
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/dns.h>
#include <event2/event.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>
#include <sys/socket.h>

#include "proxy/clock.h"
#include "proxy/evfree.h"
#include "proxy/http.h"
#include "proxy/io.h"
#include "proxy/log.h"
#include "proxy/upstream.h"

#define UPSTREAM_MAX_IDLE 64
/* Shorter than the usual upstream keep-alive timeouts (Node 5 s, nginx
 * 75 s), so the upstream rarely closes a connection just as we reuse it. */
#define UPSTREAM_IDLE_TIMEOUT_S 4
/* Responses are read whole before they are relayed: a hard cap, so an
 * endless upstream body cannot take the worker's memory. */
#define UPSTREAM_MAX_RESPONSE_BODY (64 * 1024 * 1024)
#define UPSTREAM_READ_CHUNK (16 * 1024)
#define UPSTREAM_LATE_READS 16 /* chunks a fired deadline still reads */

struct upstream_conn {
	TAILQ_ENTRY(upstream_conn) link;
	struct upstream_pool *pool;
	struct bufferevent *bev;
	struct event *read_ev;      /* reads once connected (io_read_now) */
	struct http_parser *parser;
	struct upstream_req *ur;    /* NULL while idle */
};

struct upstream_req {
	struct upstream_pool *pool;
	struct upstream_conn *conn;
	struct evbuffer *data;      /* the request; kept for a retry */
	size_t len;
	int no_body;
	int retry_safe;
	int retried;
	int reused;                 /* sent on a connection from the idle pool */
	struct event *timer;
	upstream_cb cb;
	void *arg;
};

struct upstream_pool {
	struct event_base *base;
	struct evdns_base *dns;
	char *host;
	int port;
	TAILQ_HEAD(, upstream_conn) idle;
	int nidle;
};

static void upstream_conn_read_cb(struct bufferevent *bev, void *arg);
static void upstream_conn_event_cb(struct bufferevent *bev, short what, void *arg);
static void upstream_idle_event_cb(struct bufferevent *bev, short what, void *arg);
static void upstream_idle_read_cb(struct bufferevent *bev, void *arg);

int upstream_pool_idle(const struct upstream_pool *pool)
{
	return pool->nidle;
}

struct upstream_pool *upstream_pool_new(struct event_base *base, struct evdns_base *dns,
					const char *host, int port)
{
	struct upstream_pool *pool = calloc(1, sizeof(*pool));

	if (!pool)
		return NULL;
	pool->host = strdup(host);
	if (!pool->host) {
		free(pool);
		return NULL;
	}
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
	free(pool->host);
	free(pool);
}

static struct upstream_conn *upstream_conn_new(struct upstream_pool *pool)
{
	struct upstream_conn *uc = calloc(1, sizeof(*uc));

	if (!uc)
		return NULL;
	uc->pool = pool;
	uc->parser = http_parser_new(HTTP_RESPONSE, UPSTREAM_MAX_RESPONSE_BODY);
	uc->bev = bufferevent_socket_new(pool->base, -1, BEV_OPT_CLOSE_ON_FREE);
	if (!uc->parser || !uc->bev)
		goto fail;
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

static void upstream_conn_park(struct upstream_conn *uc)
{
	struct upstream_pool *pool = uc->pool;
	struct timeval tv = { UPSTREAM_IDLE_TIMEOUT_S, 0 };

	uc->ur = NULL;
	/* Unsent request bytes (the upstream answered early) poison it. */
	if (pool->nidle >= UPSTREAM_MAX_IDLE ||
	    evbuffer_get_length(bufferevent_get_output(uc->bev)) != 0) {
		upstream_conn_free(uc);
		return;
	}
	/* The next request is written directly (upstream_conn_attach). */
	bufferevent_disable(uc->bev, EV_WRITE);
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

/*
 * Put ur on uc. On a connected (pooled) connection the request is written
 * at once with one writev(2) and EV_WRITE is enabled only for what the
 * socket did not take; a new connection writes once it is connected.
 */
static int upstream_conn_attach(struct upstream_req *ur, struct upstream_conn *uc, int connected)
{
	struct evbuffer *out = bufferevent_get_output(uc->bev);
	short reads = uc->read_ev ? 0 : EV_READ;

	ur->conn = uc;
	uc->ur = ur;
	http_parser_expect_no_body(uc->parser, ur->no_body);
	bufferevent_set_timeouts(uc->bev, NULL, NULL);
	bufferevent_setcb(uc->bev, upstream_conn_read_cb, NULL, upstream_conn_event_cb, uc);
	if (uc->read_ev)
		event_remove_timer(uc->read_ev);  /* the idle timeout */
	if (evbuffer_add_buffer_reference(out, ur->data) < 0)
		return -1;
	if (connected) {
		/* A failed write leaves the bytes queued: the bufferevent then
		 * reports the error, and upstream_unsent() sees nothing was sent. */
		if (io_write_now(uc->bev) == 0 && evbuffer_get_length(out) == 0)
			return bufferevent_enable(uc->bev, reads);
	}
	return bufferevent_enable(uc->bev, reads | EV_WRITE);
}

/* Nothing of the request has left our buffer on this connection. */
int upstream_unsent(const struct upstream_req *ur)
{
	return !ur->conn || evbuffer_get_length(bufferevent_get_output(ur->conn->bev)) == ur->len;
}

static void upstream_req_complete(struct upstream_req *ur, enum upstream_result res,
			 struct http_msg *resp)
{
	upstream_cb cb = ur->cb;
	void *arg = ur->arg;

	if (ur->conn) {
		if (res == UPSTREAM_OK && resp->keep_alive &&
		    evbuffer_get_length(bufferevent_get_input(ur->conn->bev)) == 0)
			upstream_conn_park(ur->conn);
		else
			upstream_conn_free(ur->conn);
		ur->conn = NULL;
	}
	event_free(ur->timer);
	evbuffer_free(ur->data);
	free(ur);
	cb(arg, res, resp);
}

/*
 * The connection failed. One more try on a fresh connection goes to a
 * request that is safe to repeat and has seen no response byte, and to any
 * request that a reused pooled connection failed before a byte of it was
 * written (the upstream had closed it while idle). Otherwise the result
 * says whether the upstream may have seen the request.
 */
static void upstream_req_fail(struct upstream_req *ur, enum upstream_result sent_result)
{
	int unsent = upstream_unsent(ur);
	int answered = ur->conn && http_parser_started(ur->conn->parser);
	struct upstream_conn *uc;

	if (!ur->retried && !answered && (ur->retry_safe || (unsent && ur->reused))) {
		ur->retried = 1;
		upstream_conn_free(ur->conn);
		ur->conn = NULL;
		uc = upstream_conn_new(ur->pool);
		if (uc && upstream_conn_attach(ur, uc, 0) == 0)
			return;
		upstream_conn_free(uc);
		ur->conn = NULL;
		upstream_req_complete(ur, UPSTREAM_NOT_SENT, NULL);
		return;
	}
	upstream_req_complete(ur, unsent ? UPSTREAM_NOT_SENT : sent_result, NULL);
}

static void upstream_conn_read_cb(struct bufferevent *bev, void *arg)
{
	struct upstream_conn *uc = arg;
	struct upstream_req *ur = uc->ur;

	switch (http_parser_feed(uc->parser, bufferevent_get_input(bev))) {
	case HTTP_MORE:
		return;
	case HTTP_DONE:
		upstream_req_complete(ur, UPSTREAM_OK, http_parser_take(uc->parser));
		return;
	default:
		log_warn(NULL, "upstream sent a malformed response");
		upstream_req_fail(ur, UPSTREAM_ERROR);
		return;
	}
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
	int n = (what & EV_READ) ? io_read_now(uc->bev, UPSTREAM_READ_CHUNK) : -1;

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
		upstream_conn_event_cb(uc->bev, BEV_EVENT_READING | (n == 0 ? BEV_EVENT_EOF : BEV_EVENT_ERROR),
			      uc);
}

static void upstream_conn_event_cb(struct bufferevent *bev, short what, void *arg)
{
	struct upstream_conn *uc = arg;
	struct upstream_req *ur = uc->ur;

	if (what & BEV_EVENT_CONNECTED) {
		uc->read_ev = event_new(uc->pool->base, bufferevent_getfd(bev), EV_READ | EV_PERSIST,
					upstream_conn_read_event, uc);
		/* Without it the bufferevent goes on reading: slower, not wrong. */
		if (uc->read_ev && event_add(uc->read_ev, NULL) == 0) {
			bufferevent_disable(bev, EV_READ);
		} else {
			evfree_event(&uc->read_ev);
		}
		return;
	}
	if (what & BEV_EVENT_EOF) {
		/* Bytes that arrived with the EOF are parsed first. */
		enum http_status st = http_parser_feed(uc->parser, bufferevent_get_input(bev));
		if (st == HTTP_MORE)
			st = http_parser_eof(uc->parser);
		if (st == HTTP_DONE) {
			struct http_msg *resp = http_parser_take(uc->parser);
			resp->keep_alive = 0;
			upstream_req_complete(ur, UPSTREAM_OK, resp);
			return;
		}
	}
	upstream_req_fail(ur, UPSTREAM_ERROR);
}

static void upstream_req_timer_cb(evutil_socket_t fd, short what, void *arg)
{
	struct upstream_req *ur = arg;
	struct upstream_conn *uc = ur->conn;
	enum http_status st = HTTP_MORE;

	if (!uc) {
		upstream_req_complete(ur, UPSTREAM_NOT_SENT, NULL);
		return;
	}
	/* A loop that did not run for a while (the process was stopped or
	 * starved) may find the whole response waiting: what arrived before
	 * the deadline was noticed still counts, read in a bounded number of
	 * chunks. */
	for (int i = 0; i < UPSTREAM_LATE_READS && st == HTTP_MORE && uc->read_ev &&
			io_read_now(uc->bev, UPSTREAM_READ_CHUNK) > 0;
	     i++)
		st = http_parser_feed(uc->parser, bufferevent_get_input(uc->bev));
	if (st == HTTP_DONE) {
		upstream_req_complete(ur, UPSTREAM_OK, http_parser_take(uc->parser));
		return;
	}
	upstream_req_complete(ur, upstream_unsent(ur) ? UPSTREAM_NOT_SENT : UPSTREAM_TIMEOUT, NULL);
}

struct upstream_req *upstream_forward(struct upstream_pool *pool, struct evbuffer *req,
				      int no_body, int retry_safe, int64_t timeout_ms,
				      upstream_cb cb, void *arg)
{
	struct upstream_req *ur = calloc(1, sizeof(*ur));
	struct upstream_conn *uc;
	struct timeval tv = clock_tv(timeout_ms);
	struct timeval now = { 0, 0 };

	if (!ur)
		return NULL;
	ur->pool = pool;
	ur->no_body = no_body;
	ur->retry_safe = retry_safe;
	ur->cb = cb;
	ur->arg = arg;
	ur->data = evbuffer_new();
	ur->timer = evtimer_new(pool->base, upstream_req_timer_cb, ur);
	if (!ur->data || !ur->timer) {
		evfree_event(&ur->timer);
		evfree_evbuffer(&ur->data);
		free(ur);
		return NULL;
	}
	evbuffer_add_buffer(ur->data, req);
	ur->len = evbuffer_get_length(ur->data);

	uc = upstream_idle_take(pool, retry_safe);
	ur->reused = uc != NULL;
	if (!uc)
		uc = upstream_conn_new(pool);
	if (!uc || upstream_conn_attach(ur, uc, ur->reused) < 0) {
		/* Reported from the loop, never from inside this call. */
		upstream_conn_free(uc);
		ur->conn = NULL;
		evtimer_add(ur->timer, &now);
		return ur;
	}
	evtimer_add(ur->timer, &tv);
	return ur;
}

void upstream_cancel(struct upstream_req *ur)
{
	if (!ur)
		return;
	upstream_conn_free(ur->conn);
	event_free(ur->timer);
	evbuffer_free(ur->data);
	free(ur);
}
