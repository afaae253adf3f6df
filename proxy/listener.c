/*
 * Downstream HTTP: accepts client connections, reads one request at a time
 * with the strict parser, hands each request to request.c and goes on with
 * the next once the response is written (conn.c). An intercepted request
 * is handed over whole; one that streams through (request_streams) as soon
 * as its head is complete, its body then parsed as it arrives and reported
 * to the request piece by piece. Pipelined requests wait in the input
 * buffer until the previous response is queued.
 *
 * A connection that opens with the HTTP/2 preface (or picked h2 by ALPN)
 * is handed to an h2 session instead (h2.h), whose streams come back here
 * as virtual connections: one request each, on a bufferevent pair, served
 * exactly as an accepted connection's.
 *
 * client_timeout is one deadline per request head (and intercepted body):
 * it starts when the connection is accepted or the previous response was
 * written, and it is not reset by arriving bytes, so a slow client cannot
 * hold a connection forever. A streamed body may take as long as it needs,
 * but not a silence of client_timeout.
 */
#include "proxy/listener.h"

#include <arpa/inet.h>
#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <event2/event.h>
#include <netinet/in.h>
#include <openssl/ssl.h>
#include <netinet/tcp.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "conf/conf.h"
#include "proxy/clock.h"
#include "proxy/conf_gen.h"
#include "proxy/conn.h"
#include "proxy/evfree.h"
#include "proxy/h2.h"
#include "proxy/http.h"
#include "proxy/io.h"
#include "proxy/log.h"
#include "proxy/lookup.h"
#include "proxy/request.h"
#include "proxy/respond.h"
#include "proxy/secrets.h"

#define LINGER_TIMEOUT_MS 2000
#define LISTEN_BACKLOG 1024
/* Input buffered per client beyond what the parser has taken. */
#define CLIENT_READ_HIGH_WATERMARK (256 * 1024)
/* Connections accepted per readiness event, so that one busy listener
 * does not hold up the connections it has already. */
#define ACCEPTS_PER_EVENT 64
/* Out of descriptors (or memory): accepting pauses this long, then tries again. */
#define ACCEPT_PAUSE_MS 100
/* At max_connections: how often a worker looks whether another one's
 * connections closed (its own closing resumes it at once). */
#define ACCEPT_FULL_CHECK_MS 50
/* accept(2) failures are logged at most this often, all workers together. */
#define ACCEPT_WARN_INTERVAL_US 1000000

struct listener {
	struct event_base *base;
	evutil_socket_t fd;           /* the listening socket, -1 once stopped */
	struct event *accept_ev;      /* fd is readable: connections wait */
	struct event *pause_timer;    /* accepting paused: look again */
	int paused;                   /* accept_ev removed (limit or descriptors) */
	const struct conf_gens *gens; /* the configuration new requests get */
	struct request_ctx *reqs;
	struct budget_queue *budget;  /* the worker's relay budget: the outputs count in it */
	LIST_HEAD(, client_conn) conns;
	int nconns;
	int draining;                 /* shutdown: close after each response */
};

/* Client connections open in all workers: max_connections bounds them together. */
static _Atomic int listener_open;
/* accept(2) failures, logged at most once a second. */
static struct log_limit listener_accept_warnings;

static const char continue_line[] = "HTTP/1.1 100 Continue\r\n\r\n";

static void listener_process(struct client_conn *c);
static void listener_body(struct client_conn *c);
static void listener_input(struct client_conn *c);

static const struct conf *listener_conf(const struct client_conn *c)
{
	return conf_gens_conf(c->l->gens);
}

static void listener_timer_add(struct event *ev, int64_t ms)
{
	struct timeval tv = clock_tv(ms);

	evtimer_add(ev, &tv);
}

static void listener_resume(struct listener *l);

static void listener_conn_free(struct client_conn *c)
{
	/* A carrier's streams go first: their connections are in the list. */
	h2_session_free(c->h2);
	c->h2 = NULL;
	if (c->req)
		request_conn_gone(c->req);
	if (c->h2_stream) {
		struct h2_stream *st = c->h2_stream;

		c->h2_stream = NULL;
		h2_stream_conn_gone(st, c->aborted);
	}
	LIST_REMOVE(c, link);
	c->l->nconns--;
	atomic_fetch_sub(&listener_open, 1);
	listener_resume(c->l);
	conn_meter_stop(c);
	evfree_event(&c->read_ev);
	evfree_event(&c->timer);
	evfree_event(&c->next_ev);
	evfree_bufferevent(&c->bev);
	http_parser_free(c->parser);
	free(c);
}

/* Reading was paused while the input buffer was full: go on. */
static void listener_read_resume(struct client_conn *c)
{
	conn_input_full(c, 0);
}

/*
 * Close after an error answer without losing it: shut our write side once
 * the answer is out, then read and discard what the client still sends for
 * a moment, so its unread body does not turn our close into a reset that
 * destroys the answer (nginx's lingering close).
 */
static void listener_linger(struct client_conn *c)
{
	struct evbuffer *in = bufferevent_get_input(c->bev);

	if (c->h2_stream) {
		/* No socket: the response is whole in the stream's hands. */
		listener_conn_free(c);
		return;
	}
	c->lingering = 1;
	if (c->tls)
		SSL_shutdown(bufferevent_openssl_get_ssl(c->bev)); /* close_notify */
	shutdown(bufferevent_getfd(c->bev), SHUT_WR);
	evbuffer_drain(in, evbuffer_get_length(in));
	listener_read_resume(c);
	listener_timer_add(c->timer, LINGER_TIMEOUT_MS);
}

/*
 * The client's socket is readable. One recv(2) per event (see io.c); the
 * input buffer is bounded: reading pauses at CLIENT_READ_HIGH_WATERMARK
 * until the request being served is answered.
 */
static void listener_read_event(evutil_socket_t fd, short what, void *arg)
{
	struct client_conn *c = arg;
	struct evbuffer *in = bufferevent_get_input(c->bev);
	int n;

	if (evbuffer_get_length(in) >= CLIENT_READ_HIGH_WATERMARK) {
		conn_input_full(c, 1);
		return;
	}
	n = io_read_now(c->bev, c->input == CONN_INPUT_REQUEST ? io_head_chunk(c->bev) : IO_BODY_CHUNK);
	if (n == -2)
		return;
	if (n <= 0) {
		listener_conn_free(c);
		return;
	}
	listener_input(c);
}

/*
 * A bufferevent that reads itself (TLS decrypted more input, or a stream's
 * pair got more of its request) filled the input buffer. Its read
 * watermark keeps the buffer at CLIENT_READ_HIGH_WATERMARK: it stops
 * reading while the buffer is full and goes on by itself once the parser
 * took bytes, so no hold is needed here (one would outlast a body that
 * the parser drains, up to the response).
 */
static void listener_bev_read_cb(struct bufferevent *bev, void *arg)
{
	listener_input(arg);
}

/* New bytes in c's input buffer: to the request, its body or its tunnel. */
static void listener_input(struct client_conn *c)
{
	struct evbuffer *in = bufferevent_get_input(c->bev);

	if (c->lingering) {
		evbuffer_drain(in, evbuffer_get_length(in));
		return;
	}
	switch (c->input) {
	case CONN_INPUT_BODY:
		listener_body(c);
		return;
	case CONN_INPUT_TUNNEL:
		if (c->req)
			request_input(c->req, REQUEST_TUNNEL_MORE);
		return;
	case CONN_INPUT_REQUEST:
		break;
	}
	/* Bytes that arrive while a request is served wait in the input
	 * buffer (bounded by the read watermark) for the next turn. */
	if (c->req || c->writing)
		return;
	listener_process(c);
}

/*
 * The response is out: read the next request, or close. A streamed
 * response is not over: its output fell to the drain mark, so its request
 * may send more.
 */
static void listener_written(struct client_conn *c)
{
	if (!c->writing || c->lingering)
		return;
	if (c->streaming) {
		if (c->req)
			request_output_drained(c->req);
		return;
	}
	if (c->aborted) {
		listener_conn_free(c);
		return;
	}
	c->writing = 0;
	listener_read_resume(c);
	if (c->close_after || c->l->draining) {
		listener_linger(c);
		return;
	}
	listener_timer_add(c->timer, listener_conf(c)->client_timeout_ms);
	listener_process(c);
}

/* The bufferevent finished a write that conn_respond_send could not complete. */
static void listener_write_cb(struct bufferevent *bev, void *arg)
{
	bufferevent_disable(bev, EV_WRITE);
	listener_written(arg);
}

/* conn_respond_send wrote everything: go on from the loop, not from inside the
 * response (a pipelined request would otherwise recurse). */
static void listener_next_cb(evutil_socket_t fd, short what, void *arg)
{
	listener_written(arg);
}

static void listener_event_cb(struct bufferevent *bev, short what, void *arg)
{
	if (what & BEV_EVENT_CONNECTED)
		return; /* a TLS handshake is done: requests follow */
	listener_conn_free(arg);
}

/* The request on c cannot be read: answered, logged and counted (request.c). */
static void listener_refuse(struct client_conn *c, enum problem_kind kind, const char *detail)
{
	request_refuse(c->l->reqs, c, kind, detail);
}

static void listener_timer_cb(evutil_socket_t fd, short what, void *arg)
{
	struct client_conn *c = arg;

	if (c->input == CONN_INPUT_BODY && c->req) {
		request_input(c->req, REQUEST_BODY_TIMEOUT);
		return;
	}
	if (c->lingering || !http_parser_started(c->parser)) {
		listener_conn_free(c);
		return;
	}
	listener_refuse(c, PROBLEM_REQUEST_TIMEOUT,
			"the request was not received within client_timeout");
}

/* The client asked to be told it may send its body: say so, once. */
static void listener_continue(struct client_conn *c)
{
	if (c->expect_continue && !c->continued) {
		bufferevent_write(c->bev, continue_line, sizeof(continue_line) - 1);
		conn_stream_flush(c);
		c->continued = 1;
	}
}

/*
 * An unsafe method's target holding a backslash, %2F or %5C
 * (http_msg.slash_alias) is refused as soon as its head is in, matched by
 * a route or not: routes do not read those as "/", servers behind may (WSGI
 * and ASGI decode %2F, WHATWG URL parsers read a backslash as "/") and so
 * run a handler whose route the request did not match. Safe methods go on,
 * as enforcement never applies to them. Returns 1 when refused (answered,
 * logged and counted, nothing claimed or forwarded), else 0.
 */
static int listener_refuse_slash_alias(struct client_conn *c)
{
	const struct http_msg *head = http_parser_msg(c->parser);

	if (!head->slash_alias || http_method_is_safe(head->method))
		return 0;
	listener_refuse(c, PROBLEM_BAD_REQUEST,
			"an unsafe request's path may not hold a backslash, %2F or %5C, "
			"which servers may read as \"/\"");
	return 1;
}

/* A request is handed over: the next one's head gets a fresh start. */
static void listener_handed(struct client_conn *c)
{
	c->continued = 0;
	c->expect_continue = 0;
	evtimer_del(c->timer);
}

static struct client_conn *listener_conn_new(struct listener *l, struct bufferevent *bev,
					     evutil_socket_t fd, const struct sockaddr *sa);
static void listener_serve(struct listener *l, struct client_conn *c);
static int listener_reserve(int max);

/* A stream of c's session begins: a virtual connection on bev, in a slot of max_connections. */
static void *listener_h2_stream_open(void *arg, struct h2_stream *st, struct bufferevent *bev)
{
	struct client_conn *carrier = arg, *c;
	struct listener *l = carrier->l;

	if (!listener_reserve(listener_conf(carrier)->max_connections)) {
		bufferevent_free(bev);
		return NULL;
	}
	c = listener_conn_new(l, bev, -1, (const struct sockaddr *)&carrier->peer_addr);
	if (!c) {
		atomic_fetch_sub(&listener_open, 1);
		return NULL;
	}
	c->tls = carrier->tls;
	c->self_io = 1;
	c->h1 = 1;
	c->h2_stream = st;
	c->close_after = 1; /* one request per stream */
	bufferevent_setwatermark(bev, EV_READ, 0, CLIENT_READ_HIGH_WATERMARK);
	listener_serve(l, c);
	return c;
}

static void listener_h2_stream_close(void *arg, void *handle)
{
	struct client_conn *c = handle;

	c->h2_stream = NULL;
	listener_conn_free(c);
}

static void listener_h2_done(void *arg)
{
	listener_conn_free(arg);
}

static const struct h2_ops listener_h2_ops = {
    .stream_open = listener_h2_stream_open,
    .stream_close = listener_h2_stream_close,
    .session_done = listener_h2_done,
};

/* c speaks HTTP/2 from now on: its bufferevent is the session's. c may be gone after. */
static void listener_h2_start(struct client_conn *c)
{
	const struct conf *conf = listener_conf(c);
	struct h2_settings set = {
	    .max_streams = (uint32_t)conf->http2_max_concurrent_streams,
	    .max_header_list = HTTP_MAX_HEAD,
	    .idle_ms = conf->client_timeout_ms,
	    .stream_buffer = conf->relay_buffer,
	    .peer = c->peer,
	};

	evtimer_del(c->timer);
	event_del(c->read_ev);
	c->self_io = 1;
	c->h2 = h2_session_new(c->l->base, c->bev, &set, &listener_h2_ops, c);
	if (!c->h2)
		listener_conn_free(c);
}

/*
 * Before c's first request: HTTP/2 when TLS chose h2 by ALPN, or, on a
 * plain listener with http2 on, when the input begins with the client
 * preface (the HTTP/1.1 parser never sees it). Returns 1 when c became a
 * session (c may be gone) or the input so far may still be a preface, 0
 * for HTTP/1.1.
 */
static int listener_h2_detect(struct client_conn *c)
{
	struct evbuffer *in = bufferevent_get_input(c->bev);
	size_t len = evbuffer_get_length(in);
	const unsigned char *proto;
	unsigned proto_len = 0;

	if (c->h2_stream)
		return 0;
	if (c->tls) {
		SSL_get0_alpn_selected(bufferevent_openssl_get_ssl(c->bev), &proto, &proto_len);
		if (proto_len != 2 || memcmp(proto, "h2", 2) != 0)
			return 0;
	} else {
		if (!listener_conf(c)->http2)
			return 0;
		if (len > H2_PREFACE_LEN)
			len = H2_PREFACE_LEN;
		if (!h2_preface_prefix((const char *)evbuffer_pullup(in, (ev_ssize_t)len), len))
			return 0;
		if (len < H2_PREFACE_LEN)
			return 1;
	}
	listener_h2_start(c);
	return 1;
}

/*
 * Parse what has arrived; start a request when one is complete, or, for
 * one that streams, when its head is.
 */
static void listener_process(struct client_conn *c)
{
	const struct conf *conf = listener_conf(c);
	struct http_msg *msg;

	if (!c->h1 && listener_h2_detect(c))
		return;
	c->h1 = 1;
	if (!http_parser_started(c->parser))
		c->started_us = clock_now_us();
	for (;;) {
		switch (http_parser_feed(c->parser, bufferevent_get_input(c->bev))) {
		case HTTP_MORE:
			if (http_parser_head_complete(c->parser))
				listener_continue(c);
			return;
		case HTTP_HEAD:
			if (listener_refuse_slash_alias(c))
				return;
			c->expect_continue = http_parser_msg(c->parser)->expect_continue;
			if (request_streams(conf, http_parser_msg(c->parser))) {
				msg = http_parser_take_head(c->parser);
				if (!msg || http_parser_limit_body(c->parser, 0) < 0)
					break;
				c->input = CONN_INPUT_BODY;
				listener_handed(c);
				c->expect_continue = msg->expect_continue;
				request_start(c->l->reqs, c, msg, 1);
				listener_body(c);
				return;
			}
			if (http_parser_limit_body(c->parser, conf->max_request_body) < 0) {
				listener_refuse(c, PROBLEM_TOO_LARGE,
						"the request body exceeds max_request_body");
				return;
			}
			continue;
		case HTTP_DONE:
			if (listener_refuse_slash_alias(c))
				return;
			msg = http_parser_take(c->parser);
			listener_handed(c);
			request_start(c->l->reqs, c, msg, 0);
			return;
		case HTTP_ERR_HEAD_TOO_LARGE:
			listener_refuse(c, PROBLEM_HEADERS_TOO_LARGE,
					"the request head exceeds the size limit");
			return;
		case HTTP_ERR_TARGET_TOO_LONG:
			listener_refuse(c, PROBLEM_URI_TOO_LONG,
					"the request line exceeds the size limit");
			return;
		case HTTP_ERR_BODY_TOO_LARGE:
			listener_refuse(c, PROBLEM_TOO_LARGE,
					"the request body exceeds max_request_body");
			return;
		case HTTP_ERR_METHOD:
			listener_refuse(c, PROBLEM_BAD_REQUEST,
					"a method is upper-case letters, \"-\" and \"_\"");
			return;
		case HTTP_ERR_CONNECT:
			listener_refuse(c, PROBLEM_BAD_REQUEST,
					"CONNECT is not relayed: idemproxy opens no tunnels");
			return;
		case HTTP_ERR_TARGET:
			listener_refuse(c, PROBLEM_BAD_REQUEST,
					"the request path cannot be normalised (a malformed "
					"percent-encoding, %00 or \"..\" above the root)");
			return;
		case HTTP_ERR_BAD:
		default:
			break;
		}
		listener_refuse(c, PROBLEM_BAD_REQUEST,
				"the request is malformed or its framing is ambiguous");
		return;
	}
}

/*
 * A streamed body: parse what has arrived and tell the request, whose
 * relay takes the decoded bytes. Once its response is over, the rest of
 * the body is not wanted (the connection closes after it).
 */
static void listener_body(struct client_conn *c)
{
	struct evbuffer *in = bufferevent_get_input(c->bev);
	enum http_status st = http_parser_feed(c->parser, in);

	if (!c->req) {
		evbuffer_drain(in, evbuffer_get_length(in));
		return;
	}
	switch (st) {
	case HTTP_MORE:
		listener_continue(c);
		listener_timer_add(c->timer, listener_conf(c)->client_timeout_ms);
		request_input(c->req, REQUEST_BODY_MORE);
		return;
	case HTTP_DONE:
		c->input = CONN_INPUT_REQUEST;
		listener_handed(c);
		request_input(c->req, REQUEST_BODY_END);
		http_parser_take(c->parser);
		return;
	default:
		c->input = CONN_INPUT_REQUEST;
		request_input(c->req, REQUEST_BODY_BAD);
		return;
	}
}

/*
 * The bufferevent of a new connection on fd: a socket one, or with tls an
 * OpenSSL one that runs the handshake as it reads (nothing blocks).
 */
static struct bufferevent *listener_bev_new(struct listener *l, evutil_socket_t fd, SSL_CTX *tls)
{
	struct bufferevent *bev;
	SSL *ssl;

	if (!tls)
		return bufferevent_socket_new(l->base, fd, BEV_OPT_CLOSE_ON_FREE);
	ssl = SSL_new(tls);
	if (!ssl)
		return NULL;
	bev = bufferevent_openssl_socket_new(l->base, fd, ssl, BUFFEREVENT_SSL_ACCEPTING,
					     BEV_OPT_CLOSE_ON_FREE);
	if (!bev) {
		SSL_free(ssl);
		return NULL;
	}
	/* A client that closes without close_notify has still sent whole
	 * requests: its end is an EOF, not an error. */
	bufferevent_openssl_set_allow_dirty_shutdown(bev, 1);
	bufferevent_setwatermark(bev, EV_READ, 0, CLIENT_READ_HIGH_WATERMARK);
	return bev;
}

/*
 * A new connection on bev (taken over) from sa; fd is its socket, read by
 * read_ev, or -1 for a bufferevent that reads itself. NULL (bev freed)
 * when out of memory.
 */
static struct client_conn *listener_conn_new(struct listener *l, struct bufferevent *bev,
					     evutil_socket_t fd, const struct sockaddr *sa)
{
	struct client_conn *c = calloc(1, sizeof(*c));

	if (!c) {
		bufferevent_free(bev);
		return NULL;
	}
	c->l = l;
	c->bev = bev;
	/* Body limits are set per request (listener_process): only
	 * intercepted requests have one. */
	c->parser = http_parser_new(HTTP_REQUEST, 0);
	c->timer = evtimer_new(l->base, listener_timer_cb, c);
	c->next_ev = event_new(l->base, -1, 0, listener_next_cb, c);
	if (fd >= 0)
		c->read_ev = event_new(l->base, fd, EV_READ | EV_PERSIST, listener_read_event, c);
	if (c->parser)
		http_parser_set_options(c->parser, HTTP_OPT_HEAD);
	io_tune(c->bev);
	if (!c->parser || !c->timer || !c->next_ev || (fd >= 0 && !c->read_ev)) {
		evfree_bufferevent(&c->bev);
		evfree_event(&c->timer);
		evfree_event(&c->next_ev);
		evfree_event(&c->read_ev);
		http_parser_free(c->parser);
		free(c);
		return NULL;
	}
	if (sa->sa_family == AF_INET) {
		inet_ntop(AF_INET, &((const struct sockaddr_in *)sa)->sin_addr, c->peer,
			  sizeof(c->peer));
		memcpy(&c->peer_addr, sa, sizeof(struct sockaddr_in));
	} else if (sa->sa_family == AF_INET6) {
		inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)sa)->sin6_addr, c->peer,
			  sizeof(c->peer));
		memcpy(&c->peer_addr, sa, sizeof(struct sockaddr_in6));
	}
	return c;
}

/* c (its slot reserved) joins the listener's connections and is read from now on. */
static void listener_serve(struct listener *l, struct client_conn *c)
{
	const struct conf *conf = conf_gens_conf(l->gens);
	const struct sockaddr *sa = (const struct sockaddr *)&c->peer_addr;
	struct timeval write_tv;

	LIST_INSERT_HEAD(&l->conns, c, link);
	l->nconns++;
	/* A trusted proxy speaks for many clients: the process's budget only. */
	conn_meter_start(c, l->budget, lookup_trusted_proxy(conf, sa) ? NULL : sa);
	/* A client that stops reading its response is dropped after
	 * client_timeout without progress, with whatever was queued for it. */
	write_tv = clock_tv(conf->client_timeout_ms);
	bufferevent_set_timeouts(c->bev, NULL, &write_tv);
	/* Reads come through listener_read_event (or the bufferevent's own
	 * reading: TLS, a stream's pair), writes through conn_respond_send;
	 * the bufferevent's EV_WRITE is used only when a write falls short. */
	bufferevent_setcb(c->bev, c->self_io ? listener_bev_read_cb : NULL, listener_write_cb,
			  listener_event_cb, c);
	bufferevent_disable(c->bev, EV_READ | EV_WRITE);
	/* TLS: the bufferevent reads, handshake first. */
	if (c->self_io)
		bufferevent_enable(c->bev, EV_READ);
	else
		event_add(c->read_ev, NULL);
	listener_timer_add(c->timer, conf->client_timeout_ms);
}

/* A connection was accepted on fd from sa (its slot reserved): serve it. */
static void listener_accepted(struct listener *l, evutil_socket_t fd, const struct sockaddr *sa)
{
	SSL_CTX *tls = conf_gens_secrets(l->gens)->listen_tls;
	struct bufferevent *bev;
	struct client_conn *c;
	int one = 1;

	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	bev = listener_bev_new(l, fd, tls);
	if (!bev) {
		evutil_closesocket(fd);
		atomic_fetch_sub(&listener_open, 1);
		return;
	}
	c = listener_conn_new(l, bev, fd, sa);
	if (!c) {
		atomic_fetch_sub(&listener_open, 1);
		return;
	}
	c->tls = tls != NULL;
	c->self_io = c->tls;
	listener_serve(l, c);
}

/* Takes one of max_connections' slots; 0 when all are taken. */
static int listener_reserve(int max)
{
	int n = atomic_load(&listener_open);

	do {
		if (n >= max)
			return 0;
	} while (!atomic_compare_exchange_weak(&listener_open, &n, n + 1));
	return 1;
}

/* Stops accepting for ms: the kernel's backlog holds new connections meanwhile. */
static void listener_pause(struct listener *l, int64_t ms)
{
	struct timeval tv = clock_tv(ms);

	event_del(l->accept_ev);
	l->paused = 1;
	evtimer_add(l->pause_timer, &tv);
}

/* Accepts again after a pause, unless stopped. */
static void listener_resume(struct listener *l)
{
	if (!l->paused || l->fd < 0)
		return;
	l->paused = 0;
	evtimer_del(l->pause_timer);
	event_add(l->accept_ev, NULL);
	event_active(l->accept_ev, EV_READ, 0);
}

static void listener_pause_cb(evutil_socket_t fd, short what, void *arg)
{
	listener_resume(arg);
}

/*
 * accept(2) failed with err: a pause when descriptors (or memory) ran out,
 * so the loop does not spin on a backlog it cannot take; logged at most
 * once a second for all workers, with how many failures went unlogged.
 */
static void listener_accept_failed(struct listener *l, int err)
{
	int unwarned;

	listener_pause(l, ACCEPT_PAUSE_MS);
	if (!log_limit_pass(&listener_accept_warnings, clock_now_us(), ACCEPT_WARN_INTERVAL_US,
			    &unwarned))
		return;
	log_warn(NULL,
		 "cannot accept connections: %s (%d open); pausing accepts for %dms (%d more "
		 "failures since the last message)",
		 strerror(err), atomic_load(&listener_open), ACCEPT_PAUSE_MS, unwarned);
}

/*
 * Connections wait: accept them, each into a reserved slot of
 * max_connections; at the limit, stop accepting until one closes.
 */
static void listener_accept_event(evutil_socket_t fd, short what, void *arg)
{
	struct listener *l = arg;
	const struct conf *conf = conf_gens_conf(l->gens);
	struct sockaddr_storage ss;
	socklen_t len;
	evutil_socket_t cfd;

	for (int i = 0; i < ACCEPTS_PER_EVENT; i++) {
		if (!listener_reserve(conf->max_connections)) {
			listener_pause(l, ACCEPT_FULL_CHECK_MS);
			return;
		}
		len = sizeof(ss);
		cfd = accept4(l->fd, (struct sockaddr *)&ss, &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (cfd < 0) {
			int err = errno;

			atomic_fetch_sub(&listener_open, 1);
			if (err == EAGAIN || err == EWOULDBLOCK)
				return;
			if (err == EINTR || err == ECONNABORTED || err == EPROTO)
				continue;
			listener_accept_failed(l, err);
			return;
		}
		listener_accepted(l, cfd, (struct sockaddr *)&ss);
	}
}

/* A non-blocking listening socket on ss, shared by every worker (SO_REUSEPORT); -1 on failure. */
static evutil_socket_t listener_socket(const struct sockaddr *sa, socklen_t len)
{
	evutil_socket_t fd = socket(sa->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	int one = 1;

	if (fd < 0)
		return -1;
	if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
	    setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)) < 0 ||
	    bind(fd, sa, len) < 0 || listen(fd, LISTEN_BACKLOG) < 0) {
		int err = errno;

		close(fd);
		errno = err;
		return -1;
	}
	return fd;
}

struct listener *listener_new(struct event_base *base, const struct conf_gens *gens,
			      struct request_ctx *reqs, struct budget_queue *budget)
{
	const struct conf *conf = conf_gens_conf(gens);
	struct listener *l = calloc(1, sizeof(*l));
	struct sockaddr_storage ss;
	int sslen = sizeof(ss);
	char addr[300];

	if (!l)
		return NULL;
	l->base = base;
	l->gens = gens;
	l->reqs = reqs;
	l->budget = budget;
	l->fd = -1;
	LIST_INIT(&l->conns);
	if (strchr(conf->listen.host, ':'))
		snprintf(addr, sizeof(addr), "[%s]:%d", conf->listen.host, conf->listen.port);
	else
		snprintf(addr, sizeof(addr), "%s:%d", conf->listen.host, conf->listen.port);
	if (evutil_parse_sockaddr_port(addr, (struct sockaddr *)&ss, &sslen) < 0) {
		log_error(NULL, "invalid listen address %s", addr);
		goto fail;
	}
	l->fd = listener_socket((struct sockaddr *)&ss, (socklen_t)sslen);
	if (l->fd < 0) {
		log_error(NULL, "cannot listen on %s: %s", addr, strerror(errno));
		goto fail;
	}
	l->accept_ev = event_new(base, l->fd, EV_READ | EV_PERSIST, listener_accept_event, l);
	l->pause_timer = evtimer_new(base, listener_pause_cb, l);
	if (!l->accept_ev || !l->pause_timer || event_add(l->accept_ev, NULL) < 0) {
		log_error(NULL, "cannot listen on %s: out of memory", addr);
		goto fail;
	}
	return l;
fail:
	listener_stop(l);
	free(l);
	return NULL;
}

void listener_stop(struct listener *l)
{
	evfree_event(&l->accept_ev);
	evfree_event(&l->pause_timer);
	if (l->fd >= 0)
		close(l->fd);
	l->fd = -1;
}

/*
 * An idle connection is serving no request, writing nothing, has no
 * request half received and no lingering close under way: it is closed.
 * The others are told to close after their response, and end by
 * themselves or at the shutdown deadline.
 */
void listener_drain(struct listener *l)
{
	struct client_conn *c, *next;

	l->draining = 1;
	for (c = LIST_FIRST(&l->conns); c; c = next) {
		next = LIST_NEXT(c, link);
		/* A session sends GOAWAY and ends with its streams (never at
		 * once: next may be one of them); a stream serves its request. */
		if (c->h2)
			h2_session_drain(c->h2);
		else if (c->h2_stream)
			conn_close_after(c);
		else if (!c->req && !c->writing && !c->lingering &&
			 !http_parser_started(c->parser) &&
			 evbuffer_get_length(bufferevent_get_input(c->bev)) == 0)
			listener_conn_free(c);
		else
			conn_close_after(c);
	}
}

int listener_conns(const struct listener *l)
{
	return l->nconns;
}

void listener_free(struct listener *l)
{
	struct client_conn *c;

	if (!l)
		return;
	listener_stop(l);
	while ((c = LIST_FIRST(&l->conns)))
		listener_conn_free(c);
	free(l);
}
