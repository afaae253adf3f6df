/*
 * Downstream HTTP: accepts client connections, reads one request at a time
 * with the strict parser, hands each complete request to request.c and
 * writes the response it gets back. Pipelined requests wait in the input
 * buffer until the previous response is queued.
 *
 * client_timeout is one deadline per request: it starts when the connection
 * is accepted or the previous response was written, and it is not reset by
 * arriving bytes, so a slow client cannot hold a connection forever.
 */
#include <arpa/inet.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/listener.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "proxy/http.h"
#include "proxy/idemproxy.h"
#include "proxy/log.h"
#include "proxy/io.h"

#define LINGER_TIMEOUT_MS 2000
#define LISTEN_BACKLOG 1024
/* Input buffered per client beyond what the parser has taken. */
#define CLIENT_READ_HIGH_WATERMARK (256 * 1024)
#define CLIENT_READ_CHUNK (16 * 1024)

static const char continue_line[] = "HTTP/1.1 100 Continue\r\n\r\n";

static void conn_process(struct client_conn *c);

static void set_timer_ms(struct event *ev, int64_t ms)
{
	struct timeval tv = { ms / 1000, (ms % 1000) * 1000 };

	evtimer_add(ev, &tv);
}

static void conn_free(struct client_conn *c)
{
	if (c->req)
		request_conn_gone(c->req);
	LIST_REMOVE(c, link);
	c->w->nconns--;
	event_free(c->read_ev);
	event_free(c->timer);
	event_free(c->next_ev);
	bufferevent_free(c->bev);
	http_parser_free(c->parser);
	free(c);
}

/* Reading was paused while the input buffer was full: go on. */
static void conn_read_resume(struct client_conn *c)
{
	if (c->read_paused) {
		c->read_paused = 0;
		event_add(c->read_ev, NULL);
	}
}

/*
 * Close after an error answer without losing it: shut our write side once
 * the answer is out, then read and discard what the client still sends for
 * a moment, so its unread body does not turn our close into a reset that
 * destroys the answer (nginx's lingering close).
 */
static void conn_linger(struct client_conn *c)
{
	c->lingering = 1;
	shutdown(bufferevent_getfd(c->bev), SHUT_WR);
	evbuffer_drain(bufferevent_get_input(c->bev), evbuffer_get_length(bufferevent_get_input(c->bev)));
	conn_read_resume(c);
	set_timer_ms(c->timer, LINGER_TIMEOUT_MS);
}

/*
 * The client's socket is readable. One recv(2) per event (see io.c); the
 * input buffer is bounded: reading pauses at CLIENT_READ_HIGH_WATERMARK
 * until the request being served is answered.
 */
static void conn_read_event(evutil_socket_t fd, short what, void *arg)
{
	struct client_conn *c = arg;
	struct bufferevent *bev = c->bev;
	int n;

	if (evbuffer_get_length(bufferevent_get_input(bev)) >= CLIENT_READ_HIGH_WATERMARK) {
		c->read_paused = 1;
		event_del(c->read_ev);
		return;
	}
	n = io_read_now(bev, CLIENT_READ_CHUNK);
	if (n == -2)
		return;
	if (n <= 0) {
		conn_free(c);
		return;
	}
	if (c->lingering) {
		evbuffer_drain(bufferevent_get_input(bev), evbuffer_get_length(bufferevent_get_input(bev)));
		return;
	}
	/* Bytes that arrive while a request is served wait in the input
	 * buffer (bounded by the read watermark) for the next turn. */
	if (c->req || c->writing)
		return;
	conn_process(c);
}

/*
 * Write what the output buffer holds now, with no change to what epoll
 * watches: most responses leave in this one writev(2). What the socket does
 * not take is left to the bufferevent (EV_WRITE, which also applies the
 * write deadline and reports a dead peer).
 */
void conn_respond_send(struct client_conn *c)
{
	struct evbuffer *out = bufferevent_get_output(c->bev);

	if (io_write_now(c->bev) < 0 || evbuffer_get_length(out) > 0)
		bufferevent_enable(c->bev, EV_WRITE);
	else if (c->writing)
		event_active(c->next_ev, EV_WRITE, 0);
}

/* The response is out: read the next request, or close. */
static void conn_written(struct client_conn *c)
{
	if (!c->writing || c->lingering)
		return;
	c->writing = 0;
	conn_read_resume(c);
	if (c->close_after || c->w->draining) {
		conn_linger(c);
		return;
	}
	set_timer_ms(c->timer, c->w->conf->client_timeout_ms);
	conn_process(c);
}

/* The bufferevent finished a write that conn_respond_send could not complete. */
static void conn_write_cb(struct bufferevent *bev, void *arg)
{
	bufferevent_disable(bev, EV_WRITE);
	conn_written(arg);
}

/* conn_respond_send wrote everything: go on from the loop, not from inside the
 * response (a pipelined request would otherwise recurse). */
static void conn_next_cb(evutil_socket_t fd, short what, void *arg)
{
	conn_written(arg);
}

static void conn_event_cb(struct bufferevent *bev, short what, void *arg)
{
	conn_free(arg);
}

static void conn_timer_cb(evutil_socket_t fd, short what, void *arg)
{
	struct client_conn *c = arg;

	if (c->lingering || !http_parser_started(c->parser)) {
		conn_free(c);
		return;
	}
	respond_problem(c, c->w->conf, PROBLEM_REQUEST_TIMEOUT, 0,
			"the request was not received within client_timeout", RESPOND_CLOSE);
}

/* Parse what has arrived; start a request when one is complete. */
static void conn_process(struct client_conn *c)
{
	const struct conf *conf = c->w->conf;
	const struct http_msg *m;
	struct http_msg *msg;

	switch (http_parser_feed(c->parser, bufferevent_get_input(c->bev))) {
	case HTTP_MORE:
		m = http_parser_msg(c->parser);
		if (http_parser_head_complete(c->parser) && m->expect_continue && !c->continued) {
			bufferevent_write(c->bev, continue_line, sizeof(continue_line) - 1);
			conn_respond_send(c);
			c->continued = 1;
		}
		return;
	case HTTP_DONE:
		msg = http_parser_take(c->parser);
		c->continued = 0;
		evtimer_del(c->timer);
		request_start(c, msg);
		return;
	case HTTP_ERR_HEAD_TOO_LARGE:
		respond_problem(c, conf, PROBLEM_HEADERS_TOO_LARGE, 0,
				"the request head exceeds the size limit", RESPOND_CLOSE);
		return;
	case HTTP_ERR_BODY_TOO_LARGE:
		respond_problem(c, conf, PROBLEM_TOO_LARGE, 0,
				"the request body exceeds max_request_body", RESPOND_CLOSE);
		return;
	case HTTP_ERR_BAD:
	default:
		respond_problem(c, conf, PROBLEM_BAD_REQUEST, 0,
				"the request is malformed or its framing is ambiguous", RESPOND_CLOSE);
		return;
	}
}

struct evbuffer *conn_respond_start(struct client_conn *c)
{
	c->req = NULL;
	c->writing = 1;
	evtimer_del(c->timer);
	return bufferevent_get_output(c->bev);
}

void conn_respond_frame(struct client_conn *c, size_t body_len, int flags)
{
	struct evbuffer *out = bufferevent_get_output(c->bev);

	if ((flags & RESPOND_CLOSE) || c->w->draining)
		c->close_after = 1;
	if (!(flags & RESPOND_NO_LENGTH))
		evbuffer_add_printf(out, "Content-Length: %zu\r\n", body_len);
	if (c->close_after)
		evbuffer_add(out, "Connection: close\r\n", 19);
	else if (flags & RESPOND_KEEP_ALIVE)
		evbuffer_add(out, "Connection: keep-alive\r\n", 24);
	evbuffer_add(out, "\r\n", 2);
}

static void accept_cb(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa,
		      int socklen, void *arg)
{
	struct worker *w = arg;
	struct client_conn *c = calloc(1, sizeof(*c));
	struct timeval write_tv;
	int one = 1;

	if (!c) {
		evutil_closesocket(fd);
		return;
	}
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	c->w = w;
	c->bev = bufferevent_socket_new(w->base, fd, BEV_OPT_CLOSE_ON_FREE);
	c->parser = http_parser_new(HTTP_REQUEST, w->conf->max_request_body);
	c->timer = evtimer_new(w->base, conn_timer_cb, c);
	c->next_ev = event_new(w->base, -1, 0, conn_next_cb, c);
	c->read_ev = event_new(w->base, fd, EV_READ | EV_PERSIST, conn_read_event, c);
	if (!c->bev || !c->parser || !c->timer || !c->next_ev || !c->read_ev) {
		if (c->bev)
			bufferevent_free(c->bev);
		else
			evutil_closesocket(fd);
		if (c->timer)
			event_free(c->timer);
		if (c->next_ev)
			event_free(c->next_ev);
		if (c->read_ev)
			event_free(c->read_ev);
		http_parser_free(c->parser);
		free(c);
		return;
	}
	if (sa->sa_family == AF_INET)
		inet_ntop(AF_INET, &((struct sockaddr_in *)sa)->sin_addr, c->peer, sizeof(c->peer));
	else if (sa->sa_family == AF_INET6)
		inet_ntop(AF_INET6, &((struct sockaddr_in6 *)sa)->sin6_addr, c->peer, sizeof(c->peer));
	LIST_INSERT_HEAD(&w->conns, c, link);
	w->nconns++;
	/* A client that stops reading its response is dropped after
	 * client_timeout without progress, with whatever was queued for it. */
	write_tv.tv_sec = w->conf->client_timeout_ms / 1000;
	write_tv.tv_usec = (w->conf->client_timeout_ms % 1000) * 1000;
	bufferevent_set_timeouts(c->bev, NULL, &write_tv);
	/* Reads come through conn_read_event, writes through conn_respond_send;
	 * the bufferevent's EV_WRITE is used only when a write falls short. */
	bufferevent_setcb(c->bev, NULL, conn_write_cb, conn_event_cb, c);
	bufferevent_disable(c->bev, EV_READ | EV_WRITE);
	event_add(c->read_ev, NULL);
	set_timer_ms(c->timer, w->conf->client_timeout_ms);
}

int listener_start(struct worker *w)
{
	struct sockaddr_storage ss;
	int sslen = sizeof(ss);
	char addr[300];
	const struct conf *conf = w->conf;

	if (strchr(conf->listen.host, ':'))
		snprintf(addr, sizeof(addr), "[%s]:%d", conf->listen.host, conf->listen.port);
	else
		snprintf(addr, sizeof(addr), "%s:%d", conf->listen.host, conf->listen.port);
	if (evutil_parse_sockaddr_port(addr, (struct sockaddr *)&ss, &sslen) < 0) {
		log_error(NULL, "invalid listen address %s", addr);
		return -1;
	}
	w->listener = evconnlistener_new_bind(
		w->base, accept_cb, w,
		LEV_OPT_CLOSE_ON_FREE | LEV_OPT_REUSEABLE | LEV_OPT_REUSEABLE_PORT |
			LEV_OPT_CLOSE_ON_EXEC,
		LISTEN_BACKLOG, (struct sockaddr *)&ss, sslen);
	if (!w->listener) {
		log_error(NULL, "cannot listen on %s: %s", addr,
			  evutil_socket_error_to_string(EVUTIL_SOCKET_ERROR()));
		return -1;
	}
	return 0;
}

void listener_stop(struct worker *w)
{
	if (w->listener) {
		evconnlistener_free(w->listener);
		w->listener = NULL;
	}
}

/*
 * Close every idle connection (shutdown): no request being served, nothing
 * being written, no request half received, no lingering close under way.
 * The others end by themselves, or at the shutdown deadline.
 */
void conn_close_idle(struct worker *w)
{
	struct client_conn *c, *next;

	for (c = LIST_FIRST(&w->conns); c; c = next) {
		next = LIST_NEXT(c, link);
		if (!c->req && !c->writing && !c->lingering && !http_parser_started(c->parser) &&
		    evbuffer_get_length(bufferevent_get_input(c->bev)) == 0)
			conn_free(c);
	}
}

/* Free every connection, whatever it is doing (end of shutdown). */
void conn_free_all(struct worker *w)
{
	struct client_conn *c;

	while ((c = LIST_FIRST(&w->conns)))
		conn_free(c);
}
