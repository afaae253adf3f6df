/*
 * HTTP/2 toward the upstream: nghttp2 client sessions, one per connection,
 * each carrying up to H2UP_MAX_STREAMS streams (fewer when the upstream's
 * SETTINGS_MAX_CONCURRENT_STREAMS says so). A new exchange takes a stream
 * on the first connection with room; when every one is full another is
 * opened, up to the pool's limit, after which exchanges wait in the pool's
 * queue for a stream to close. nghttp2 does all framing, HPACK and flow
 * control; this file only moves bytes and maps messages.
 *
 * Every report to the caller is made from the stream's own event (kick),
 * never from inside an nghttp2 callback nor from the call that caused it:
 * nghttp2's callbacks only gather what arrived into the stream.
 *
 * Memory: a stream's response body is given back to nghttp2 (consumed, so
 * the window opens again) only once its caller took it, so what waits per
 * stream is bounded by H2UP_STREAM_WINDOW and a paused caller stops its
 * stream, not the connection (the connection's window is given back at
 * once). Request bytes wait in the stream until the stream's send window
 * takes them; the caller sees them as pending and stops reading its client.
 *
 * Lifetime: nghttp2 holds a pointer to a submitted stream until it closes
 * the stream. A stream its caller is finished with (done reported,
 * cancelled) while nghttp2 still has it open is reset (RST_STREAM CANCEL)
 * and stays on its connection, silent, until nghttp2 closes it or the
 * connection goes.
 */
#include "proxy/h2up.h"

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <nghttp2/nghttp2.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>

#include "proxy/clock.h"
#include "proxy/evalloc.h"
#include "proxy/evfree.h"
#include "proxy/http.h"
#include "proxy/log.h"

#define H2UP_OUT_HIGH		  (64 * 1024) /* bytes queued to the socket before nghttp2 waits */
#define H2UP_PRE_SETTINGS_STREAMS 100	      /* nghttp2's own cap until the upstream's SETTINGS */
#define H2UP_MAX_INTERIM	  4	      /* 1xx heads kept at once; more are dropped */

TAILQ_HEAD(h2up_streams, h2up_stream);

struct h2up_conn {
	TAILQ_ENTRY(h2up_conn) link;
	struct h2up_pool *hp;
	struct bufferevent *bev;
	nghttp2_session *sess;
	struct h2up_streams streams; /* every stream nghttp2 may still point to */
	int nstreams;
	struct event *idle_timer;
	struct event *flush_ev; /* a deferred flush (after a submit from outside) */
	uint64_t queued;	/* bytes given to the socket's output so far */
	int32_t goaway_last;	/* the last stream id of a GOAWAY received */
	int goaway;		/* no new stream goes on it */
	int settings_seen;	/* the upstream's SETTINGS arrived */
	int connected;
};

struct h2up_stream {
	TAILQ_ENTRY(h2up_stream) link; /* the pool's queue or its connection's list */
	struct h2up_pool *hp;
	struct h2up_conn *conn; /* NULL while queued and once nghttp2 is done with it */
	int waiting;		/* in the pool's queue */
	int32_t id;		/* 0 until submitted */
	struct upstream_params params;
	const struct upstream_events *ev;
	void *arg;

	/* the request */
	struct http_parser *parser; /* the HTTP/1.1 bytes the caller hands */
	struct evbuffer *raw;	    /* those not parsed yet */
	struct http_msg *req;	    /* its head */
	struct evbuffer *req_body;  /* decoded body bytes not yet sent (the parser's) */
	int has_body;		    /* a body follows the head */
	int body_done;		    /* the body is whole */
	int body_taken;		    /* some of it went to nghttp2 */
	int keep_body;		    /* not streamed: kept whole until the end, for a retry */
	size_t body_off;	    /* with keep_body: the bytes of it sent */
	int sent_all;		    /* not streamed, or upstream_send_end */
	int over;		    /* pending above drain_mark: drained() is due when it falls */
	int drained_due;
	int headers_out;     /* its HEADERS frame went to the output */
	uint64_t first_byte; /* conn->queued when it did */

	/* the response */
	struct evbuffer *lines; /* the fields of the HEADERS being received */
	int status;		/* that HEADERS' :status */
	struct http_msg *interim[H2UP_MAX_INTERIM];
	int ninterim;
	struct http_msg *head; /* the final head, until reported */
	int head_seen, head_told;
	struct evbuffer *body;	   /* DATA not yet reported */
	struct evbuffer *piece;	   /* what one body() call gets */
	struct evbuffer *trailers; /* trailer fields, NULL: none */
	int ended;		   /* END_STREAM arrived */
	int broken;		   /* a head HTTP/1.1 cannot carry */
	int closed;		   /* over before its end: result says how */
	enum upstream_result result;
	int unsent; /* when it closed: not a byte had reached the upstream */
	int retried;
	int paused;
	size_t read_max;
	int64_t progress_us;

	int gone; /* the caller is finished with it */
	int dispatching, cancelled;
	struct event *timer, *kick;
};

struct h2up_pool {
	struct event_base *base;
	h2up_connect_fn connect;
	void *connect_arg;
	const char *scheme;
	char *name; /* host:port, for the log */
	int max_conns;
	int64_t idle_ms;
	TAILQ_HEAD(, h2up_conn) conns;
	int nconns;
	struct h2up_streams waiting;
};

static void h2up_stream_kick(struct h2up_stream *s);
static void h2up_conn_schedule(struct h2up_conn *c);
static void h2up_conn_free(struct h2up_conn *c);
static void h2up_pool_dispatch(struct h2up_pool *hp);

/* ---- the mapping ---- */

static int h2up_tchar(unsigned char ch)
{
	return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
	       (ch && strchr("!#$%&'*+-.^_`|~", ch));
}

static void h2up_field_set(struct h2up_field *f, const char *name, const char *value,
			   size_t value_len)
{
	f->name = name;
	f->name_len = strlen(name);
	f->value = value;
	f->value_len = value_len;
}

int h2up_request_fields(struct http_msg *m, const char *scheme, struct h2up_field *out)
{
	const char *host = http_msg_known(m, HTTP_N_HOST), *path = m->target, *p;
	int n = 0;

	if (!host)
		return -1;
	if (path[0] != '/' && strcmp(path, "*") != 0) {
		/* absolute-form: its path and query go, its authority is Host's */
		p = strstr(path, "://");
		p = p ? p + 3 + strcspn(p + 3, "/?") : NULL;
		if (!p || *p == '?')
			return -1;
		path = *p ? p : "/";
	}
	h2up_field_set(&out[n++], ":method", m->method, strlen(m->method));
	h2up_field_set(&out[n++], ":scheme", scheme, strlen(scheme));
	h2up_field_set(&out[n++], ":authority", host, strlen(host));
	h2up_field_set(&out[n++], ":path", path, strlen(path));
	/* TE goes on only as "trailers" (in the slot of the TE field it came in). */
	if (http_msg_takes_trailers(m))
		h2up_field_set(&out[n++], "te", "trailers", 8);
	for (int i = 0; i < m->nheaders; i++) {
		struct http_header *h = &m->headers[i];

		if (h->known == HTTP_N_HOST || h->known == HTTP_N_TE || http_header_is_hop(m, h))
			continue;
		http_lower(h->name, h->name_len);
		out[n].name = h->name;
		out[n].name_len = h->name_len;
		out[n].value = h->value;
		out[n++].value_len = h->value_len;
	}
	return n;
}

int h2up_field_add(struct evbuffer *lines, const uint8_t *name, size_t name_len,
		   const uint8_t *value, size_t value_len)
{
	if (name_len == 0 || evbuffer_get_length(lines) + name_len + value_len + 4 > HTTP_MAX_HEAD)
		return -1;
	for (size_t i = 0; i < name_len; i++) {
		if (!h2up_tchar(name[i]))
			return -1;
	}
	for (size_t i = 0; i < value_len; i++) {
		if (value[i] == '\r' || value[i] == '\n' || value[i] == '\0')
			return -1;
	}
	if (evbuffer_add(lines, name, name_len) < 0 || http_add_lit(lines, ": ") < 0 ||
	    evbuffer_add(lines, value, value_len) < 0 || http_add_lit(lines, "\r\n") < 0)
		return -1;
	return 0;
}

struct http_msg *h2up_response_msg(int status, struct evbuffer *lines, int no_body)
{
	struct evbuffer *in = evbuffer_new();
	struct http_parser *p = http_parser_new(HTTP_RESPONSE, 0);
	struct http_msg *m = NULL;

	if (!in || !p || status < 100 || status > 999)
		goto out;
	http_parser_set_options(p, HTTP_OPT_HEAD | HTTP_OPT_INTERIM);
	http_parser_expect_no_body(p, no_body);
	http_add_status_line(in, status, NULL);
	evbuffer_add_buffer(in, lines);
	http_add_lit(in, "\r\n");
	switch (http_parser_feed(p, in)) {
	case HTTP_HEAD:
		m = http_parser_take_head(p);
		break;
	case HTTP_DONE:
		m = http_parser_take(p);
		break;
	default:
		break;
	}
out:
	evbuffer_drain(lines, evbuffer_get_length(lines));
	http_parser_free(p);
	evfree_evbuffer(&in);
	return m;
}

/* ---- streams ---- */

static void h2up_stream_free(struct h2up_stream *s)
{
	evfree_event(&s->timer);
	evfree_event(&s->kick);
	http_parser_free(s->parser);
	http_msg_free(s->req);
	for (int i = 0; i < s->ninterim; i++)
		http_msg_free(s->interim[i]);
	http_msg_free(s->head);
	evfree_evbuffer(&s->raw);
	evfree_evbuffer(&s->lines);
	evfree_evbuffer(&s->body);
	evfree_evbuffer(&s->piece);
	evfree_evbuffer(&s->trailers);
	evalloc_free(s);
}

/* Bytes written to the socket so far on c. */
static uint64_t h2up_conn_written(struct h2up_conn *c)
{
	return c->queued - evbuffer_get_length(bufferevent_get_output(c->bev));
}

int h2up_unsent(const struct h2up_stream *s)
{
	if (s->conn)
		return !s->headers_out || h2up_conn_written(s->conn) <= s->first_byte;
	return s->waiting || !s->id || s->unsent;
}

size_t h2up_pending(const struct h2up_stream *s)
{
	return evbuffer_get_length(s->raw) +
	       (s->req_body ? evbuffer_get_length(s->req_body) - s->body_off : 0);
}

/* nghttp2 is done with s (closed it, or its connection went): take it off c. */
static void h2up_stream_unlink(struct h2up_stream *s)
{
	struct h2up_conn *c = s->conn;

	s->unsent = h2up_unsent(s);
	TAILQ_REMOVE(&c->streams, s, link);
	c->nstreams--;
	s->conn = NULL;
	if (c->nstreams == 0 && c->idle_timer) {
		struct timeval tv = clock_tv(c->hp->idle_ms);

		event_add(c->idle_timer, &tv);
	}
}

/*
 * The caller is finished with s: it is freed, or reset and left to
 * nghttp2 until it closes it. Nothing is reported any more.
 */
static void h2up_stream_release(struct h2up_stream *s)
{
	s->gone = 1;
	if (s->timer)
		event_del(s->timer);
	if (s->kick)
		event_del(s->kick);
	if (s->waiting) {
		TAILQ_REMOVE(&s->hp->waiting, s, link);
		s->waiting = 0;
	}
	if (!s->conn) {
		h2up_stream_free(s);
		return;
	}
	if (s->id > 0)
		nghttp2_submit_rst_stream(s->conn->sess, NGHTTP2_FLAG_NONE, s->id, NGHTTP2_CANCEL);
	h2up_conn_schedule(s->conn);
}

/* Run one callback of s; 1 when s was cancelled inside it (and is gone). */
#define H2UP_CALL(s, call)                                                                         \
	((s)->dispatching++, (call),                                                               \
	 --(s)->dispatching == 0 && (s)->cancelled ? (h2up_stream_release(s), 1) : 0)

/* The exchange is over with res: s is released, then done() told. */
static void h2up_stream_finish(struct h2up_stream *s, enum upstream_result res)
{
	const struct upstream_events *ev = s->ev;
	void *arg = s->arg;

	h2up_stream_release(s);
	ev->done(arg, res);
}

/* Report what s gathered, in order; from s's kick (the event loop) only. */
static void h2up_stream_deliver(struct h2up_stream *s)
{
	struct http_msg *m;
	size_t n;
	int told = 0;

	if (s->drained_due) {
		s->drained_due = 0;
		if (s->ev->drained && H2UP_CALL(s, s->ev->drained(s->arg)))
			return;
	}
	while (s->ninterim > 0) {
		m = s->interim[0];
		memmove(s->interim, s->interim + 1, --s->ninterim * sizeof(s->interim[0]));
		told = s->ev->interim ? H2UP_CALL(s, s->ev->interim(s->arg, m)) : 0;
		http_msg_free(m);
		if (told)
			return;
	}
	if (s->head) {
		m = s->head;
		s->head = NULL;
		s->head_told = 1;
		if (H2UP_CALL(s, s->ev->head(s->arg, m)))
			return;
		told = 1;
	}
	while (evbuffer_get_length(s->body) > 0 && !s->paused) {
		n = evbuffer_get_length(s->body);
		if (s->read_max && n > s->read_max)
			n = s->read_max;
		evbuffer_remove_buffer(s->body, s->piece, n);
		if (s->conn && s->id > 0) {
			nghttp2_session_consume_stream(s->conn->sess, s->id, n);
			h2up_conn_schedule(s->conn);
		}
		if (H2UP_CALL(s, s->ev->body(s->arg, s->piece)))
			return;
		told = 1;
	}
	if (evbuffer_get_length(s->body) > 0)
		return;
	if (s->ended && s->head_told && !s->broken) {
		if (s->trailers && s->ev->trailers &&
		    H2UP_CALL(s, s->ev->trailers(s->arg, s->trailers)))
			return;
		h2up_stream_finish(s, UPSTREAM_OK);
		return;
	}
	if (s->closed) {
		h2up_stream_finish(s, s->result);
		return;
	}
	if (told && s->ev->caught_up)
		H2UP_CALL(s, s->ev->caught_up(s->arg));
}

static void h2up_kick_cb(evutil_socket_t fd, short what, void *arg)
{
	h2up_stream_deliver(arg);
}

static void h2up_stream_kick(struct h2up_stream *s)
{
	if (!s->gone)
		event_active(s->kick, EV_TIMEOUT, 0);
}

/* s closed before its response was whole: res, unless one more try is safe. */
static void h2up_stream_closed(struct h2up_stream *s, enum upstream_result res, int refused)
{
	if (res == UPSTREAM_NOT_SENT && !s->retried && (s->keep_body || !s->body_taken) &&
	    !s->head_seen && (refused || !s->headers_out)) {
		/* The upstream never processed it (RFC 9113 8.7): on another stream. */
		s->retried = 1;
		s->body_off = 0;
		s->body_taken = 0;
		s->id = 0;
		s->headers_out = 0;
		s->waiting = 1;
		TAILQ_INSERT_HEAD(&s->hp->waiting, s, link);
		return;
	}
	s->closed = 1;
	s->result = res;
	h2up_stream_kick(s);
}

/* ---- nghttp2's callbacks: they gather, never report ---- */

static struct h2up_stream *h2up_stream_of(nghttp2_session *sess, int32_t id)
{
	struct h2up_stream *s = nghttp2_session_get_stream_user_data(sess, id);

	return s && !s->gone ? s : NULL;
}

static ssize_t h2up_send_cb(nghttp2_session *sess, const uint8_t *data, size_t len, int flags,
			    void *user)
{
	struct h2up_conn *c = user;
	struct evbuffer *out = bufferevent_get_output(c->bev);

	if (evbuffer_get_length(out) >= H2UP_OUT_HIGH)
		return NGHTTP2_ERR_WOULDBLOCK;
	if (evbuffer_add(out, data, len) < 0)
		return NGHTTP2_ERR_CALLBACK_FAILURE;
	c->queued += len;
	return (ssize_t)len;
}

static int h2up_before_send_cb(nghttp2_session *sess, const nghttp2_frame *frame, void *user)
{
	struct h2up_conn *c = user;
	struct h2up_stream *s;

	if (frame->hd.type != NGHTTP2_HEADERS)
		return 0;
	s = nghttp2_session_get_stream_user_data(sess, frame->hd.stream_id);
	if (s && !s->headers_out) {
		s->headers_out = 1;
		s->first_byte = c->queued;
	}
	return 0;
}

static int h2up_begin_headers_cb(nghttp2_session *sess, const nghttp2_frame *frame, void *user)
{
	struct h2up_stream *s = h2up_stream_of(sess, frame->hd.stream_id);

	if (s) {
		s->status = 0;
		evbuffer_drain(s->lines, evbuffer_get_length(s->lines));
	}
	return 0;
}

static int h2up_header_cb(nghttp2_session *sess, const nghttp2_frame *frame, const uint8_t *name,
			  size_t namelen, const uint8_t *value, size_t valuelen, uint8_t flags,
			  void *user)
{
	struct h2up_stream *s = h2up_stream_of(sess, frame->hd.stream_id);
	struct evbuffer *to;

	if (!s)
		return 0;
	if (namelen == 7 && memcmp(name, ":status", 7) == 0) {
		/* nghttp2 checked it: three digits */
		s->status = valuelen == 3
				? (value[0] - '0') * 100 + (value[1] - '0') * 10 + (value[2] - '0')
				: 0;
		return 0;
	}
	if (s->head_seen) {
		if (!s->trailers && !(s->trailers = evbuffer_new()))
			return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
		to = s->trailers;
	} else {
		to = s->lines;
	}
	if (h2up_field_add(to, name, namelen, value, valuelen) < 0) {
		log_warn(NULL, "upstream sent an HTTP/2 field HTTP/1.1 cannot carry; stream reset");
		return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
	}
	return 0;
}

/* A HEADERS frame of s is whole: an interim head, the final one, or trailers. */
static void h2up_headers_recv(struct h2up_stream *s)
{
	struct http_msg *m;
	int no_body;

	if (s->head_seen)
		return; /* trailers: gathered already */
	if (s->status >= 100 && s->status < 200) {
		if (s->status == 100 || s->ninterim == H2UP_MAX_INTERIM) {
			evbuffer_drain(s->lines, evbuffer_get_length(s->lines));
			return;
		}
		m = h2up_response_msg(s->status, s->lines, 1);
		if (m)
			s->interim[s->ninterim++] = m;
		return;
	}
	no_body = (s->params.flags & UPSTREAM_HEAD_REQUEST) || s->status == 204 || s->status == 304;
	s->head_seen = 1;
	s->head = h2up_response_msg(s->status, s->lines, no_body);
	if (!s->head) {
		log_warn(NULL, "upstream sent an HTTP/2 response head HTTP/1.1 cannot carry; "
			       "stream reset");
		s->broken = 1;
		nghttp2_submit_rst_stream(s->conn->sess, NGHTTP2_FLAG_NONE, s->id,
					  NGHTTP2_PROTOCOL_ERROR);
	}
}

static int h2up_frame_recv_cb(nghttp2_session *sess, const nghttp2_frame *frame, void *user)
{
	struct h2up_conn *c = user;
	struct h2up_stream *s;

	switch (frame->hd.type) {
	case NGHTTP2_SETTINGS:
		if (!(frame->hd.flags & NGHTTP2_FLAG_ACK))
			c->settings_seen = 1;
		return 0;
	case NGHTTP2_GOAWAY:
		c->goaway = 1;
		c->goaway_last = frame->goaway.last_stream_id;
		return 0;
	case NGHTTP2_HEADERS:
	case NGHTTP2_DATA:
		break;
	default:
		return 0;
	}
	s = h2up_stream_of(sess, frame->hd.stream_id);
	if (!s)
		return 0;
	s->progress_us = clock_now_us();
	if (frame->hd.type == NGHTTP2_HEADERS)
		h2up_headers_recv(s);
	if (frame->hd.flags & NGHTTP2_FLAG_END_STREAM)
		s->ended = 1;
	h2up_stream_kick(s);
	return 0;
}

static int h2up_data_cb(nghttp2_session *sess, uint8_t flags, int32_t id, const uint8_t *data,
			size_t len, void *user)
{
	struct h2up_stream *s = h2up_stream_of(sess, id);

	/* The connection's window opens at once: a slow stream holds its own only. */
	nghttp2_session_consume_connection(sess, len);
	if (!s)
		return 0;
	if (!s->head_told && !s->head)
		return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE; /* DATA before a head */
	if (evbuffer_add(s->body, data, len) < 0)
		return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
	s->progress_us = clock_now_us();
	h2up_stream_kick(s);
	return 0;
}

static int h2up_stream_close_cb(nghttp2_session *sess, int32_t id, uint32_t error_code, void *user)
{
	struct h2up_conn *c = user;
	struct h2up_stream *s = nghttp2_session_get_stream_user_data(sess, id);
	int refused;

	if (!s)
		return 0;
	refused = error_code == NGHTTP2_REFUSED_STREAM || (c->goaway && id > c->goaway_last);
	h2up_stream_unlink(s);
	if (s->gone) {
		h2up_stream_free(s);
		return 0;
	}
	if (s->ended && s->head_seen && !s->broken)
		return 0; /* whole: the kick reports it */
	if (!s->broken && !refused && error_code != NGHTTP2_NO_ERROR)
		log_warn(NULL, "upstream reset an HTTP/2 stream (%s)",
			 nghttp2_http2_strerror(error_code));
	h2up_stream_closed(s, refused || s->unsent ? UPSTREAM_NOT_SENT : UPSTREAM_ERROR, refused);
	return 0;
}

/*
 * A request's HEADERS that nghttp2 dropped unsent (its stream reset while
 * queued, or the session going): nghttp2 opened no stream for it, so no
 * close follows; the stream is over here, never sent.
 */
static int h2up_not_sent_cb(nghttp2_session *sess, const nghttp2_frame *frame, int error,
			    void *user)
{
	struct h2up_conn *c = user;
	struct h2up_stream *s;

	if (frame->hd.type != NGHTTP2_HEADERS ||
	    nghttp2_session_find_stream(sess, frame->hd.stream_id))
		return 0;
	TAILQ_FOREACH(s, &c->streams, link)
	{
		if (s->id == frame->hd.stream_id)
			break;
	}
	if (!s)
		return 0;
	h2up_stream_unlink(s);
	if (s->gone)
		h2up_stream_free(s);
	else
		h2up_stream_closed(s, UPSTREAM_NOT_SENT, 1);
	return 0;
}

/* The request body for DATA frames: what the caller handed so far. */
static ssize_t h2up_read_body_cb(nghttp2_session *sess, int32_t id, uint8_t *buf, size_t len,
				 uint32_t *flags, nghttp2_data_source *src, void *user)
{
	struct h2up_stream *s = src->ptr;
	struct evbuffer_ptr at;
	ssize_t n;

	if (s->gone)
		return NGHTTP2_ERR_DEFERRED;
	if (!s->keep_body) {
		n = evbuffer_remove(s->req_body, buf, len);
	} else if (evbuffer_ptr_set(s->req_body, &at, s->body_off, EVBUFFER_PTR_SET) < 0) {
		n = 0;
	} else {
		n = evbuffer_copyout_from(s->req_body, &at, buf, len);
		if (n > 0)
			s->body_off += (size_t)n;
	}
	if (n < 0)
		return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
	if (n > 0) {
		s->body_taken = 1;
		s->progress_us = clock_now_us();
	}
	if (s->over && h2up_pending(s) <= s->params.drain_mark) {
		s->over = 0;
		s->drained_due = 1;
		h2up_stream_kick(s);
	}
	if (s->body_done && evbuffer_get_length(s->req_body) == s->body_off)
		*flags |= NGHTTP2_DATA_FLAG_EOF;
	else if (n == 0)
		return NGHTTP2_ERR_DEFERRED;
	return n;
}

/* ---- connections ---- */

#define H2UP_WARN_INTERVAL_US 1000000 /* a failing upstream: one line a second */

static struct log_limit h2up_conn_warnings;

/* A connection of hp failed (why): said at most once an interval. */
static void h2up_conn_warn(const struct h2up_pool *hp, const char *why)
{
	int skipped;

	if (log_limit_pass(&h2up_conn_warnings, clock_now_us(), H2UP_WARN_INTERVAL_US, &skipped))
		log_warn(NULL,
			 "upstream %s: HTTP/2 connection %s (%d more failures since the last "
			 "message)",
			 hp->name, why, skipped);
}

/* Streams c may carry at once. */
static int h2up_conn_room(struct h2up_conn *c)
{
	uint32_t max = c->settings_seen ? nghttp2_session_get_remote_settings(
					      c->sess, NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS)
					: H2UP_PRE_SETTINGS_STREAMS;

	if (max > H2UP_MAX_STREAMS)
		max = H2UP_MAX_STREAMS;
	return !c->goaway && (uint32_t)c->nstreams < max;
}

/*
 * Hand nghttp2's frames to the socket as far as its output allows, then
 * close c if its session is over. Returns -1 when c was freed.
 */
static int h2up_conn_flush(struct h2up_conn *c)
{
	int rv = nghttp2_session_send(c->sess);

	if (rv != 0) {
		h2up_conn_warn(c->hp, nghttp2_strerror(rv));
		h2up_conn_free(c);
		return -1;
	}
	if ((!nghttp2_session_want_read(c->sess) && !nghttp2_session_want_write(c->sess) &&
	     evbuffer_get_length(bufferevent_get_output(c->bev)) == 0) ||
	    (c->goaway && c->nstreams == 0)) {
		h2up_conn_free(c);
		return -1;
	}
	return 0;
}

static void h2up_flush_cb(evutil_socket_t fd, short what, void *arg)
{
	struct h2up_conn *c = arg;
	struct h2up_pool *hp = c->hp;

	h2up_conn_flush(c);
	h2up_pool_dispatch(hp);
}

/* Flush c from the loop, soon: the caller may be inside one of its streams. */
static void h2up_conn_schedule(struct h2up_conn *c)
{
	event_active(c->flush_ev, EV_TIMEOUT, 0);
}

/*
 * c goes: streams nghttp2 still had are over (UPSTREAM_NOT_SENT when not a
 * byte of theirs was written, else UPSTREAM_ERROR), unless whole already;
 * those never sent may be back in the pool's queue, for the caller's
 * h2up_pool_dispatch().
 */
static void h2up_conn_free(struct h2up_conn *c)
{
	struct h2up_pool *hp = c->hp;
	struct h2up_stream *s;

	TAILQ_REMOVE(&hp->conns, c, link);
	hp->nconns--;
	while ((s = TAILQ_FIRST(&c->streams))) {
		h2up_stream_unlink(s);
		if (s->gone)
			h2up_stream_free(s);
		else if (!(s->ended && s->head_seen && !s->broken))
			h2up_stream_closed(s, s->unsent ? UPSTREAM_NOT_SENT : UPSTREAM_ERROR, 0);
	}
	evfree_event(&c->idle_timer);
	evfree_event(&c->flush_ev);
	nghttp2_session_del(c->sess);
	evfree_bufferevent(&c->bev);
	free(c);
}

static void h2up_conn_read_cb(struct bufferevent *bev, void *arg)
{
	struct h2up_conn *c = arg;
	struct h2up_pool *hp = c->hp;
	struct evbuffer *in = bufferevent_get_input(bev);
	struct evbuffer_iovec v;

	while (evbuffer_peek(in, -1, NULL, &v, 1) > 0) {
		ssize_t n = nghttp2_session_mem_recv(c->sess, v.iov_base, v.iov_len);

		if (n < 0) {
			h2up_conn_warn(hp, nghttp2_strerror((int)n));
			h2up_conn_free(c);
			h2up_pool_dispatch(hp);
			return;
		}
		evbuffer_drain(in, (size_t)n);
	}
	h2up_conn_flush(c);
	h2up_pool_dispatch(hp);
}

/* The output drained: nghttp2 may write more. */
static void h2up_conn_write_cb(struct bufferevent *bev, void *arg)
{
	struct h2up_conn *c = arg;

	if (nghttp2_session_want_write(c->sess))
		h2up_flush_cb(-1, 0, c);
}

static void h2up_conn_event_cb(struct bufferevent *bev, short what, void *arg)
{
	struct h2up_conn *c = arg;
	struct h2up_pool *hp = c->hp;

	if (what & BEV_EVENT_CONNECTED) {
		c->connected = 1;
		h2up_flush_cb(-1, 0, c);
		return;
	}
	if (what & BEV_EVENT_ERROR)
		h2up_conn_warn(hp, c->connected ? "failed" : "could not be made");
	h2up_conn_free(c);
	h2up_pool_dispatch(hp);
}

static void h2up_idle_cb(evutil_socket_t fd, short what, void *arg)
{
	struct h2up_conn *c = arg;

	if (c->nstreams == 0) {
		struct h2up_pool *hp = c->hp;

		h2up_conn_free(c);
		h2up_pool_dispatch(hp);
	}
}

/* A session on bev, connected already, or on a new connection when bev is NULL. */
static struct h2up_conn *h2up_conn_new(struct h2up_pool *hp, struct bufferevent *bev)
{
	static const nghttp2_settings_entry settings[] = {
	    {NGHTTP2_SETTINGS_ENABLE_PUSH, 0},
	    {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, H2UP_STREAM_WINDOW},
	    {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, HTTP_MAX_HEAD},
	};
	struct h2up_conn *c = calloc(1, sizeof(*c));
	nghttp2_session_callbacks *cbs = NULL;
	nghttp2_option *opt = NULL;

	if (!c) {
		evfree_bufferevent(&bev);
		return NULL;
	}
	c->hp = hp;
	TAILQ_INIT(&c->streams);
	TAILQ_INSERT_TAIL(&hp->conns, c, link);
	hp->nconns++;
	c->idle_timer = evtimer_new(hp->base, h2up_idle_cb, c);
	c->flush_ev = event_new(hp->base, -1, 0, h2up_flush_cb, c);
	if (!c->idle_timer || !c->flush_ev || nghttp2_session_callbacks_new(&cbs) != 0 ||
	    nghttp2_option_new(&opt) != 0)
		goto fail;
	nghttp2_session_callbacks_set_send_callback(cbs, h2up_send_cb);
	nghttp2_session_callbacks_set_before_frame_send_callback(cbs, h2up_before_send_cb);
	nghttp2_session_callbacks_set_on_begin_headers_callback(cbs, h2up_begin_headers_cb);
	nghttp2_session_callbacks_set_on_header_callback(cbs, h2up_header_cb);
	nghttp2_session_callbacks_set_on_frame_recv_callback(cbs, h2up_frame_recv_cb);
	nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs, h2up_data_cb);
	nghttp2_session_callbacks_set_on_stream_close_callback(cbs, h2up_stream_close_cb);
	nghttp2_session_callbacks_set_on_frame_not_send_callback(cbs, h2up_not_sent_cb);
	/* Windows open as the callers take the bytes (nghttp2_session_consume_*). */
	nghttp2_option_set_no_auto_window_update(opt, 1);
	if (nghttp2_session_client_new2(&c->sess, cbs, c, opt) != 0)
		goto fail;
	/* The connection's window is given back as bytes arrive (what waits is
	 * bounded per stream): room for every stream's window, so one stream's
	 * bytes never wait for another's WINDOW_UPDATE. */
	if (nghttp2_session_set_local_window_size(c->sess, NGHTTP2_FLAG_NONE, 0,
						  H2UP_MAX_STREAMS * H2UP_STREAM_WINDOW) != 0)
		goto fail;
	/* The preface and SETTINGS go at once: prior knowledge, no Upgrade. */
	if (nghttp2_submit_settings(c->sess, NGHTTP2_FLAG_NONE, settings,
				    sizeof(settings) / sizeof(settings[0])) != 0)
		goto fail;
	c->connected = bev != NULL;
	c->bev = bev ? bev : hp->connect(hp->connect_arg);
	bev = NULL;
	if (!c->bev)
		goto fail;
	bufferevent_setcb(c->bev, h2up_conn_read_cb, h2up_conn_write_cb, h2up_conn_event_cb, c);
	bufferevent_enable(c->bev, EV_READ | EV_WRITE);
	{
		struct timeval tv = clock_tv(hp->idle_ms);

		event_add(c->idle_timer, &tv); /* until a stream comes */
	}
	h2up_conn_schedule(c);
	nghttp2_session_callbacks_del(cbs);
	nghttp2_option_del(opt);
	return c;
fail:
	nghttp2_session_callbacks_del(cbs);
	nghttp2_option_del(opt);
	TAILQ_REMOVE(&hp->conns, c, link);
	hp->nconns--;
	evfree_event(&c->idle_timer);
	evfree_event(&c->flush_ev);
	nghttp2_session_del(c->sess);
	evfree_bufferevent(&c->bev);
	evfree_bufferevent(&bev);
	free(c);
	return NULL;
}

/* Submit s's request on c. Returns -1 when nghttp2 refused it. */
static int h2up_stream_submit(struct h2up_stream *s, struct h2up_conn *c)
{
	struct h2up_field f[H2UP_MAX_FIELDS];
	nghttp2_nv nv[H2UP_MAX_FIELDS];
	nghttp2_data_provider prd = {.source.ptr = s, .read_callback = h2up_read_body_cb};
	int n = h2up_request_fields(s->req, s->hp->scheme, f);
	int32_t id;

	for (int i = 0; i < n; i++) {
		nv[i].name = (uint8_t *)f[i].name;
		nv[i].namelen = f[i].name_len;
		nv[i].value = (uint8_t *)f[i].value;
		nv[i].valuelen = f[i].value_len;
		nv[i].flags = NGHTTP2_NV_FLAG_NONE;
	}
	if (n < 0)
		return -1;
	id = nghttp2_submit_request(c->sess, NULL, nv, (size_t)n, s->has_body ? &prd : NULL, s);
	if (id < 0)
		return -1;
	s->id = id;
	s->conn = c;
	TAILQ_INSERT_TAIL(&c->streams, s, link);
	c->nstreams++;
	event_del(c->idle_timer);
	h2up_conn_schedule(c);
	return 0;
}

/* Give queued streams a connection with room, opening more up to the limit. */
static void h2up_pool_dispatch(struct h2up_pool *hp)
{
	struct h2up_stream *s;
	struct h2up_conn *c;

	while ((s = TAILQ_FIRST(&hp->waiting))) {
		TAILQ_FOREACH(c, &hp->conns, link)
		{
			if (h2up_conn_room(c))
				break;
		}
		if (!c && hp->nconns < hp->max_conns)
			c = h2up_conn_new(hp, NULL);
		if (!c && hp->nconns > 0)
			return; /* a stream closing makes room */
		TAILQ_REMOVE(&hp->waiting, s, link);
		s->waiting = 0;
		if (!c || h2up_stream_submit(s, c) < 0) {
			s->closed = 1;
			s->result = UPSTREAM_NOT_SENT;
			h2up_stream_kick(s);
		}
	}
}

/* ---- the pool and the exchange API ---- */

struct h2up_pool *h2up_pool_new(struct event_base *base, const char *name, h2up_connect_fn connect,
				void *arg, int tls, int max_conns, int64_t idle_ms)
{
	struct h2up_pool *hp = calloc(1, sizeof(*hp));

	if (!hp)
		return NULL;
	hp->name = strdup(name);
	if (!hp->name) {
		free(hp);
		return NULL;
	}
	hp->base = base;
	hp->connect = connect;
	hp->connect_arg = arg;
	hp->scheme = tls ? "https" : "http";
	hp->max_conns = max_conns;
	hp->idle_ms = idle_ms;
	TAILQ_INIT(&hp->conns);
	TAILQ_INIT(&hp->waiting);
	return hp;
}

void h2up_pool_free(struct h2up_pool *hp)
{
	struct h2up_stream *s;

	if (!hp)
		return;
	while (!TAILQ_EMPTY(&hp->conns))
		h2up_conn_free(TAILQ_FIRST(&hp->conns));
	/* The exchanges ended before their pool: what is left is nobody's. */
	while ((s = TAILQ_FIRST(&hp->waiting))) {
		TAILQ_REMOVE(&hp->waiting, s, link);
		h2up_stream_free(s);
	}
	free(hp->name);
	free(hp);
}

int h2up_pool_conns(const struct h2up_pool *hp)
{
	return hp->nconns;
}

int h2up_pool_idle(const struct h2up_pool *hp)
{
	const struct h2up_conn *c;
	int n = 0;

	TAILQ_FOREACH(c, &hp->conns, link)
	n += c->nstreams == 0;
	return n;
}

int h2up_pool_room(const struct h2up_pool *hp)
{
	struct h2up_conn *c;

	TAILQ_FOREACH(c, &hp->conns, link)
	{
		if (h2up_conn_room(c))
			return 1;
	}
	return 0;
}

struct h2up_stream *h2up_adopt(struct h2up_pool *hp, struct bufferevent *bev, struct evbuffer *req,
			       const struct upstream_params *params,
			       const struct upstream_events *ev, void *arg)
{
	if (!h2up_conn_new(hp, bev))
		return NULL;
	return h2up_start(hp, req, params, ev, arg);
}

/* Parse what the caller handed; -1 when it is no request h2up can send. */
static int h2up_stream_parse(struct h2up_stream *s)
{
	for (;;) {
		enum http_status st;

		if (s->body_done)
			return 0;
		st = http_parser_feed(s->parser, s->raw);
		switch (st) {
		case HTTP_MORE:
			return s->req ? 0 : -1;
		case HTTP_HEAD:
			if (s->req)
				return -1;
			s->req = http_parser_take_head(s->parser);
			s->req_body = http_parser_body(s->parser);
			s->has_body = 1;
			if (!s->req)
				return -1;
			continue;
		case HTTP_DONE:
			if (!s->req) {
				s->req = http_parser_take(s->parser);
				if (!s->req)
					return -1;
			}
			s->body_done = 1;
			return 0;
		default:
			return -1;
		}
	}
}

/*
 * The exchange's deadline: an idle timeout that is not over is re-armed
 * (a streamed request whose every byte was taken waits for its client, not
 * for the upstream); else it ends, NOT_SENT while not a byte went.
 */
static void h2up_timer_cb(evutil_socket_t fd, short what, void *arg)
{
	struct h2up_stream *s = arg;
	int64_t left = s->params.timeout_ms * 1000 - (clock_now_us() - s->progress_us);

	if (s->params.flags & UPSTREAM_IDLE_TIMEOUT) {
		if (!s->sent_all && h2up_pending(s) == 0)
			left = s->params.timeout_ms * 1000;
		if (left > 0) {
			struct timeval tv = clock_tv_us(left);

			evtimer_add(s->timer, &tv);
			return;
		}
	}
	h2up_stream_finish(s, h2up_unsent(s) ? UPSTREAM_NOT_SENT : UPSTREAM_TIMEOUT);
}

struct h2up_stream *h2up_start(struct h2up_pool *hp, struct evbuffer *req,
			       const struct upstream_params *params,
			       const struct upstream_events *ev, void *arg)
{
	struct h2up_stream *s = evalloc_calloc(sizeof(*s));
	struct timeval tv = clock_tv(params->timeout_ms);

	if (!s)
		return NULL;
	s->hp = hp;
	s->params = *params;
	s->ev = ev;
	s->arg = arg;
	s->sent_all = !(params->flags & UPSTREAM_STREAMED);
	s->keep_body = s->sent_all;
	s->progress_us = clock_now_us();
	s->parser = http_parser_new(HTTP_REQUEST, 0);
	s->raw = evbuffer_new();
	s->lines = evbuffer_new();
	s->body = evbuffer_new();
	s->piece = evbuffer_new();
	s->timer = evtimer_new(hp->base, h2up_timer_cb, s);
	s->kick = event_new(hp->base, -1, 0, h2up_kick_cb, s);
	if (!s->parser || !s->raw || !s->lines || !s->body || !s->piece || !s->timer || !s->kick) {
		h2up_stream_free(s);
		return NULL;
	}
	http_parser_set_options(s->parser, HTTP_OPT_HEAD);
	evbuffer_add_buffer(s->raw, req);
	evtimer_add(s->timer, &tv);
	if (h2up_stream_parse(s) < 0) {
		log_warn(NULL, "request cannot go to the HTTP/2 upstream");
		s->closed = 1;
		s->result = UPSTREAM_NOT_SENT;
		h2up_stream_kick(s);
		return s;
	}
	s->waiting = 1;
	TAILQ_INSERT_TAIL(&hp->waiting, s, link);
	h2up_pool_dispatch(hp);
	return s;
}

void h2up_send(struct h2up_stream *s, struct evbuffer *data)
{
	if (s->closed || s->body_done) {
		evbuffer_drain(data, evbuffer_get_length(data));
		return;
	}
	evbuffer_add_buffer(s->raw, data);
	s->progress_us = clock_now_us();
	if (h2up_stream_parse(s) < 0) {
		/* Framing the client's own parser accepted: cannot happen. */
		s->body_done = 1;
		evbuffer_drain(s->raw, evbuffer_get_length(s->raw));
	}
	if (h2up_pending(s) > s->params.drain_mark)
		s->over = 1;
	if (s->conn && s->id > 0) {
		nghttp2_session_resume_data(s->conn->sess, s->id);
		h2up_conn_schedule(s->conn);
	}
}

void h2up_send_end(struct h2up_stream *s)
{
	s->sent_all = 1;
	s->body_done = 1;
	s->progress_us = clock_now_us();
	if (s->conn && s->id > 0) {
		nghttp2_session_resume_data(s->conn->sess, s->id);
		h2up_conn_schedule(s->conn);
	}
}

void h2up_read_pause(struct h2up_stream *s, int pause)
{
	if (s->paused == pause)
		return;
	s->paused = pause;
	if (!pause && evbuffer_get_length(s->body) > 0)
		h2up_stream_kick(s);
}

void h2up_read_max(struct h2up_stream *s, size_t max)
{
	s->read_max = max;
}

void h2up_cancel(struct h2up_stream *s)
{
	if (!s)
		return;
	if (s->dispatching) {
		s->cancelled = 1;
		return;
	}
	h2up_stream_release(s);
}
