/*
 * HTTP/2 on the listener: an nghttp2 server session per connection, each
 * stream an HTTP/1.1 request on a virtual client connection (see h2.h and
 * docs/architecture.md "HTTP/2").
 *
 * Nothing is sent from inside nghttp2's callbacks: whatever wants the
 * session to send schedules send_ev, and h2_flush runs from the loop. The
 * carrier's output is filled only while below H2_OUTPUT_MARK; a stream's
 * response body is taken from its pair only while its buffer is below
 * stream_buffer, and its request body's window is opened again only as
 * the listener takes what was written into the pair.
 */
#include "proxy/h2.h"

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <nghttp2/nghttp2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>

#include "proxy/clock.h"
#include "proxy/http.h"
#include "proxy/log.h"

/* The carrier's output is filled up to this; it is written down to half before more. */
#define H2_OUTPUT_MARK (64 * 1024)
/* Frames that cost us work and carry nothing (empty DATA, invalid frames,
 * PRIORITY, RST_STREAM) allowed per window before GOAWAY ENHANCE_YOUR_CALM. */
#define H2_FLOOD_MAX	   1000
#define H2_FLOOD_WINDOW_US 1000000
/* nghttp2's flood limits, set explicitly so the docs can name them. */
#define H2_MAX_SETTINGS	     32
#define H2_MAX_OUTBOUND_ACK  1000
#define H2_MAX_CONTINUATIONS 8
#define H2_RESET_BURST	     1000
#define H2_RESET_RATE	     33
#define H2_DEFLATE_TABLE     4096
/* Header lists too large to keep (reset unread) allowed in a connection's
 * life; the next ends it with GOAWAY ENHANCE_YOUR_CALM (an HPACK bomb
 * costs its decoding each time). */
#define H2_MAX_OVERSIZED 10
/* Fields of one header list, pseudo-headers and cookie crumbs included. */
#define H2_MAX_FIELDS (2 * HTTP_MAX_HEADERS)
/* A connection ended for misbehaving is logged at most this often, all workers together. */
#define H2_WARN_INTERVAL_US 1000000
/* Streams beyond max_streams that nghttp2 tracks at once, until their
 * RST_STREAM is out: its own limit is max_streams and these. */
#define H2_REFUSED_AT_ONCE 128
/* A frame's header (RFC 9113 4.1). */
#define H2_FRAME_HEAD 9
/* The largest flow-control window (RFC 9113 6.9.1). */
#define H2_WINDOW_MAX ((1u << 31) - 1)

/* A field of a header list as received, name and value in one block. */
struct h2_owned {
	char *name, *value;
	size_t namelen, valuelen;
};

struct h2_stream {
	LIST_ENTRY(h2_stream) link;
	struct h2_session *s;
	int32_t id;
	struct h2_owned *fields; /* the request's header list, until its head is written */
	size_t nfields;
	size_t field_bytes;
	struct bufferevent *bev;    /* our end of the pair, NULL until the head is complete */
	void *conn;		    /* the listener's handle, NULL before and after */
	int conn_gone;		    /* the listener is done with the pair */
	int chunked;		    /* the request body is written chunked */
	int body_ended;		    /* END_STREAM from the client */
	size_t unconsumed;	    /* DATA bytes not yet given back to the windows */
	struct http_parser *parser; /* the response, as the listener wrote it */
	struct http_msg *head;
	struct evbuffer *body; /* its de-chunked body, waiting for the window */
	int responded;	       /* HEADERS submitted */
	int resp_done;	       /* the whole response is parsed */
	int resp_failed;       /* it cannot be completed: RST_STREAM */
	int reset_sent;
	int deferred; /* the data provider waits for body bytes */
};

struct h2_session {
	struct event_base *base;
	struct bufferevent *bev;
	nghttp2_session *ng;
	struct h2_settings set;
	const struct h2_ops *ops;
	void *arg;
	struct event *send_ev; /* h2_flush from the loop */
	struct event *idle_timer;
	LIST_HEAD(, h2_stream) streams;
	int nstreams;
	int draining;
	int advertised;		/* our SETTINGS went out (h2_add_frame) */
	int failed;		/* the connection broke: done at once */
	size_t conn_unconsumed; /* of closed streams: the connection window's only */
	int64_t flood_start_us;
	int flood_count;
	int oversized; /* header lists reset unread */
};

static const char h2_preface[] = H2_PREFACE;
static struct log_limit h2_warnings;

int h2_preface_prefix(const char *buf, size_t len)
{
	return len <= H2_PREFACE_LEN && memcmp(buf, h2_preface, len) == 0;
}

/* ---- the request mapping ---- */

static int h2_is_tchar(unsigned char ch)
{
	return (ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
	       (ch && strchr("!#$%&'*+-.^_`|~", ch));
}

static int h2_is_token(const uint8_t *s, size_t len, int lower)
{
	if (!len)
		return 0;
	for (size_t i = 0; i < len; i++)
		if (!h2_is_tchar(s[i]) || (lower && s[i] >= 'A' && s[i] <= 'Z'))
			return 0;
	return 1;
}

/* A value HTTP/1.1 carries as it is: no CR, LF, NUL or other controls but
 * HTAB, and no blank at either end (the parser would trim it). */
static int h2_value_ok(const uint8_t *v, size_t len)
{
	if (len && (v[0] == ' ' || v[0] == '\t' || v[len - 1] == ' ' || v[len - 1] == '\t'))
		return 0;
	for (size_t i = 0; i < len; i++)
		if ((v[i] < 0x20 && v[i] != '\t') || v[i] == 0x7f)
			return 0;
	return 1;
}

/* A request target or authority: visible ASCII only. */
static int h2_visible(const uint8_t *v, size_t len)
{
	for (size_t i = 0; i < len; i++)
		if (v[i] <= 0x20 || v[i] >= 0x7f)
			return 0;
	return 1;
}

static int h2_name_is(const struct h2_field *f, const char *name)
{
	size_t len = strlen(name);

	return f->namelen == len && memcmp(f->name, name, len) == 0;
}

/* f's value is value, case-insensitively (icase) or exactly. */
static int h2_value_is(const struct h2_field *f, const char *value, int icase)
{
	size_t len = strlen(value);

	if (f->valuelen != len)
		return 0;
	return icase ? strncasecmp((const char *)f->value, value, len) == 0
		     : memcmp(f->value, value, len) == 0;
}

/* The pseudo-headers of f[0..n): each at most once, all before the fields. */
static enum h2_refusal h2_pseudo(const struct h2_field *f, size_t n, const struct h2_field **method,
				 const struct h2_field **path, const struct h2_field **authority,
				 size_t *first_field)
{
	size_t i;

	*method = *path = *authority = NULL;
	for (i = 0; i < n && f[i].namelen && f[i].name[0] == ':'; i++) {
		const struct h2_field **slot = NULL;

		if (h2_name_is(&f[i], ":method"))
			slot = method;
		else if (h2_name_is(&f[i], ":path"))
			slot = path;
		else if (h2_name_is(&f[i], ":authority"))
			slot = authority;
		else if (!h2_name_is(&f[i], ":scheme"))
			return H2_BAD_PSEUDO;
		if (slot && *slot)
			return H2_BAD_PSEUDO;
		if (slot)
			*slot = &f[i];
	}
	*first_field = i;
	for (; i < n; i++)
		if (f[i].namelen && f[i].name[0] == ':')
			return H2_BAD_PSEUDO;
	return *method ? H2_OK : H2_BAD_PSEUDO;
}

/* The regular fields of f[first..n): acceptable to HTTP/1.1 and no connection-specific one. */
static enum h2_refusal h2_fields_ok(const struct h2_field *f, size_t n, size_t first)
{
	for (size_t i = first; i < n; i++) {
		if (!h2_is_token(f[i].name, f[i].namelen, 1) ||
		    !h2_value_ok(f[i].value, f[i].valuelen))
			return H2_BAD_FIELD;
		if (h2_name_is(&f[i], "connection") || h2_name_is(&f[i], "keep-alive") ||
		    h2_name_is(&f[i], "proxy-connection") ||
		    h2_name_is(&f[i], "transfer-encoding") || h2_name_is(&f[i], "upgrade") ||
		    (h2_name_is(&f[i], "te") && !h2_value_is(&f[i], "trailers", 1)))
			return H2_CONN_SPECIFIC;
	}
	return H2_OK;
}

enum h2_refusal h2_request_head(const struct h2_field *f, size_t n, int body_follows,
				struct evbuffer *out, int *chunked)
{
	const struct h2_field *method, *path, *authority;
	size_t first, i;
	int has_length = 0, cookies = 0;
	enum h2_refusal rc = h2_pseudo(f, n, &method, &path, &authority, &first);

	*chunked = 0;
	if (rc != H2_OK)
		return rc;
	if (!h2_is_token(method->value, method->valuelen, 0))
		return H2_BAD_METHOD;
	if (h2_value_is(method, "CONNECT", 0))
		return H2_CONNECT;
	if (!path || !path->valuelen || !h2_visible(path->value, path->valuelen))
		return H2_BAD_PATH;
	if (path->value[0] != '/' &&
	    !(path->valuelen == 1 && path->value[0] == '*' && h2_value_is(method, "OPTIONS", 0)))
		return H2_BAD_PATH;
	if (authority && !h2_visible(authority->value, authority->valuelen))
		return H2_BAD_FIELD;
	rc = h2_fields_ok(f, n, first);
	if (rc != H2_OK)
		return rc;

	evbuffer_add(out, method->value, method->valuelen);
	evbuffer_add(out, " ", 1);
	evbuffer_add(out, path->value, path->valuelen);
	http_add_lit(out, " HTTP/1.1\r\n");
	if (authority) {
		http_add_lit(out, "host: ");
		evbuffer_add(out, authority->value, authority->valuelen);
		http_add_lit(out, "\r\n");
	}
	for (i = first; i < n; i++) {
		if (h2_name_is(&f[i], "cookie")) {
			cookies++;
			continue;
		}
		if (authority && h2_name_is(&f[i], "host"))
			continue; /* :authority wins (RFC 9113 8.3.1) */
		if (h2_name_is(&f[i], "content-length"))
			has_length = 1;
		evbuffer_add(out, f[i].name, f[i].namelen);
		http_add_lit(out, ": ");
		evbuffer_add(out, f[i].value, f[i].valuelen);
		http_add_lit(out, "\r\n");
	}
	if (cookies) {
		int sep = 0;

		http_add_lit(out, "cookie: ");
		for (i = first; i < n; i++) {
			if (!h2_name_is(&f[i], "cookie"))
				continue;
			if (sep)
				http_add_lit(out, "; ");
			evbuffer_add(out, f[i].value, f[i].valuelen);
			sep = 1;
		}
		http_add_lit(out, "\r\n");
	}
	if (body_follows && !has_length) {
		http_add_lit(out, "transfer-encoding: chunked\r\n");
		*chunked = 1;
	}
	http_add_lit(out, "\r\n");
	return H2_OK;
}

/* ---- the session ---- */

static void h2_schedule(struct h2_session *s)
{
	event_active(s->send_ev, EV_WRITE, 0);
}

/* The session ends for why (the client broke the protocol or flooded it): a warning. */
static void h2_warn(const struct h2_session *s, const char *why)
{
	int skipped;

	if (!log_limit_pass(&h2_warnings, clock_now_us(), H2_WARN_INTERVAL_US, &skipped))
		return;
	log_warn(NULL,
		 "HTTP/2 connection from %s ended with GOAWAY: %s (%d more since the last message)",
		 s->set.peer, why, skipped);
}

/* A frame that does no work for the client: too many in a window end the session. */
static int h2_flood(struct h2_session *s)
{
	int64_t now = clock_now_us();

	if (now - s->flood_start_us > H2_FLOOD_WINDOW_US) {
		s->flood_start_us = now;
		s->flood_count = 0;
	}
	if (++s->flood_count <= H2_FLOOD_MAX)
		return 0;
	if (s->flood_count == H2_FLOOD_MAX + 1)
		h2_warn(s, "too many frames that carry nothing");
	nghttp2_session_terminate_session(s->ng, NGHTTP2_ENHANCE_YOUR_CALM);
	return 1;
}

/* A header list too large to keep: a few end the session. */
static void h2_oversized(struct h2_session *s)
{
	if (++s->oversized <= H2_MAX_OVERSIZED)
		return;
	if (s->oversized == H2_MAX_OVERSIZED + 1)
		h2_warn(s, "too many header lists too large");
	nghttp2_session_terminate_session(s->ng, NGHTTP2_ENHANCE_YOUR_CALM);
}

static void h2_fields_free(struct h2_stream *st)
{
	for (size_t i = 0; i < st->nfields; i++)
		free(st->fields[i].name);
	free(st->fields);
	st->fields = NULL;
	st->nfields = 0;
}

static void h2_stream_free(struct h2_stream *st)
{
	struct h2_session *s = st->s;

	LIST_REMOVE(st, link);
	s->nstreams--;
	s->conn_unconsumed += st->unconsumed;
	if (st->conn) {
		void *h = st->conn;

		st->conn = NULL;
		s->ops->stream_close(s->arg, h);
	}
	h2_fields_free(st);
	if (st->bev)
		bufferevent_free(st->bev);
	http_parser_free(st->parser);
	http_msg_free(st->head);
	if (st->body)
		evbuffer_free(st->body);
	free(st);
}

static void h2_stream_reset(struct h2_stream *st, uint32_t code)
{
	if (st->reset_sent)
		return;
	st->reset_sent = 1;
	nghttp2_submit_rst_stream(st->s->ng, NGHTTP2_FLAG_NONE, st->id, code);
	h2_schedule(st->s);
}

/*
 * The header list of response head m: :status, then its fields but the
 * hop-by-hop ones, names lower-cased in place (they point into m). NULL
 * when out of memory; *n is its length.
 */
static nghttp2_nv *h2_response_nv(struct http_msg *m, char *status, size_t status_size, size_t *n)
{
	nghttp2_nv *nva = calloc((size_t)m->nheaders + 1, sizeof(*nva));

	*n = 0;
	if (!nva)
		return NULL;
	snprintf(status, status_size, "%03d", m->status % 1000);
	nva[(*n)++] = (nghttp2_nv){(uint8_t *)":status", (uint8_t *)status, 7, strlen(status),
				   NGHTTP2_NV_FLAG_NONE};
	for (int i = 0; i < m->nheaders; i++) {
		struct http_header *h = &m->headers[i];

		if (http_header_is_hop(m, h))
			continue;
		http_lower(h->name, h->name_len);
		nva[(*n)++] = (nghttp2_nv){(uint8_t *)h->name, (uint8_t *)h->value, h->name_len,
					   h->value_len, NGHTTP2_NV_FLAG_NONE};
	}
	return nva;
}

/* An interim response (103 Early Hints) goes out as a 1xx HEADERS frame. */
static void h2_stream_interim(struct h2_stream *st, struct http_msg *m)
{
	char status[8];
	size_t n;
	nghttp2_nv *nva = h2_response_nv(m, status, sizeof(status), &n);

	if (nva)
		nghttp2_submit_headers(st->s->ng, NGHTTP2_FLAG_NONE, st->id, NULL, nva, n, NULL);
	free(nva);
	http_msg_free(m);
	h2_schedule(st->s);
}

/*
 * The listener's "100 Continue" to a request that expects it (the HTTP/1.1
 * parser skips a 100): out as a 1xx HEADERS frame, so the client sends its
 * body. 1 when it was the next thing in the pair.
 */
static int h2_stream_continue(struct h2_stream *st)
{
	static const char line[] = "HTTP/1.1 100 Continue\r\n\r\n";
	static const nghttp2_nv nv[] = {
	    {(uint8_t *)":status", (uint8_t *)"100", 7, 3, NGHTTP2_NV_FLAG_NONE}};
	struct evbuffer *in = bufferevent_get_input(st->bev);
	const unsigned char *at;

	if (http_parser_started(st->parser) || evbuffer_get_length(in) < sizeof(line) - 1)
		return 0;
	at = evbuffer_pullup(in, sizeof(line) - 1);
	if (!at || memcmp(at, line, sizeof(line) - 1) != 0)
		return 0;
	evbuffer_drain(in, sizeof(line) - 1);
	nghttp2_submit_headers(st->s->ng, NGHTTP2_FLAG_NONE, st->id, NULL, nv, 1, NULL);
	h2_schedule(st->s);
	return 1;
}

/* Whether the stream takes more of the response from the pair now. */
static int h2_stream_wants(const struct h2_stream *st)
{
	return !st->resp_done && !st->resp_failed &&
	       (!st->head || evbuffer_get_length(st->body) < st->s->set.stream_buffer);
}

/*
 * Our end of the pair reads only while the stream wants more: a full
 * input left enabled has libevent run its read callback again at once
 * (bufferevent_inbuf_wm_check), a spin for as long as the client's window
 * stays shut. Disabled, the listener's bytes stay on its side (its
 * conn_pending() grows, the relay waits) until the data provider took
 * from the body and h2_stream_pull enables it again.
 */
static void h2_stream_reading(struct h2_stream *st)
{
	int on = h2_stream_wants(st);

	if (on == !!(bufferevent_get_enabled(st->bev) & EV_READ))
		return;
	if (on)
		bufferevent_enable(st->bev, EV_READ);
	else
		bufferevent_disable(st->bev, EV_READ);
}

/*
 * Parse what the listener wrote into the pair, as long as the body waiting
 * for the window is below stream_buffer. No nghttp2 call once the head is
 * in (the data provider calls it too); before, an interim response is
 * submitted as it comes.
 */
static void h2_stream_pull_some(struct h2_stream *st)
{
	struct evbuffer *in = bufferevent_get_input(st->bev);
	enum http_status rc;
	size_t before;

	while (h2_stream_wants(st)) {
		if (!st->head && h2_stream_continue(st))
			continue;
		before = evbuffer_get_length(in);
		if (!before) {
			if (!st->conn_gone)
				return;
			rc = http_parser_eof(st->parser);
			if (rc == HTTP_MORE)
				rc = HTTP_ERR_BAD; /* closed before a response */
		} else {
			rc = http_parser_feed(st->parser, in);
		}
		if (st->head && http_parser_body(st->parser))
			evbuffer_add_buffer(st->body, http_parser_body(st->parser));
		switch (rc) {
		case HTTP_HEAD:
			st->head = http_parser_take_head(st->parser);
			if (!st->head)
				st->resp_failed = 1;
			else
				evbuffer_add_buffer(st->body, http_parser_body(st->parser));
			break;
		case HTTP_DONE:
			if (!st->head) {
				st->head = http_parser_take(st->parser);
				if (!st->head) {
					st->resp_failed = 1;
					break;
				}
				if (st->head->status < 200) {
					h2_stream_interim(st, st->head);
					st->head = NULL;
					break;
				}
				if (st->head->body)
					evbuffer_add_buffer(st->body, st->head->body);
			}
			st->resp_done = 1;
			break;
		case HTTP_MORE:
			if (evbuffer_get_length(in) == before) {
				if (!st->conn_gone)
					return;
				/* unparsed bytes and no more coming: an EOF next */
				evbuffer_drain(in, evbuffer_get_length(in));
			}
			break;
		default:
			st->resp_failed = 1;
			break;
		}
	}
}

static void h2_stream_pull(struct h2_stream *st)
{
	h2_stream_pull_some(st);
	if (!st->conn_gone)
		h2_stream_reading(st);
}

/*
 * The response's chunked trailers, if it had any, submitted as a trailing
 * HEADERS frame (from the data provider: allowed there). 1 when submitted.
 */
static int h2_stream_trailers(struct h2_stream *st)
{
	struct evbuffer *t = http_parser_trailers(st->parser);
	const char *lines, *at, *end;
	struct http_line line;
	size_t n = 0, count = 0;
	nghttp2_nv *nva;
	int rc;

	if (!t || !(lines = (const char *)evbuffer_pullup(t, -1)))
		return 0;
	end = lines + evbuffer_get_length(t);
	for (at = lines; http_line_next(&at, end, &line);)
		count++;
	nva = calloc(count ? count : 1, sizeof(*nva));
	if (!nva)
		return 0;
	for (at = lines; n < count && http_line_next(&at, end, &line);) {
		if (!line.name_len || !line.value)
			continue;
		/* The pulled-up buffer is the parser's own: its names are lower-cased in place. */
		http_lower((char *)line.name, line.name_len);
		nva[n++] = (nghttp2_nv){(uint8_t *)line.name, (uint8_t *)line.value, line.name_len,
					line.value_len, NGHTTP2_NV_FLAG_NONE};
	}
	rc = n && nghttp2_submit_trailer(st->s->ng, st->id, nva, n) == 0;
	free(nva);
	return rc;
}

static ssize_t h2_body_read(nghttp2_session *ng, int32_t id, uint8_t *buf, size_t len,
			    uint32_t *flags, nghttp2_data_source *src, void *ud)
{
	struct h2_stream *st = src->ptr;
	int n;

	h2_stream_pull(st);
	n = evbuffer_remove(st->body, buf, len);
	if (n < 0 || st->resp_failed)
		return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
	if (n > 0 && !st->conn_gone)
		h2_stream_reading(st); /* room in the body again */
	if (st->resp_done && evbuffer_get_length(st->body) == 0) {
		*flags |= NGHTTP2_DATA_FLAG_EOF;
		if (h2_stream_trailers(st))
			*flags |= NGHTTP2_DATA_FLAG_NO_END_STREAM;
		return n;
	}
	if (n == 0) {
		st->deferred = 1;
		return NGHTTP2_ERR_DEFERRED;
	}
	return n;
}

/* Submit the response head once it is parsed, and wake the data provider. */
static void h2_stream_respond(struct h2_stream *st)
{
	struct h2_session *s = st->s;
	nghttp2_data_provider dp = {.source.ptr = st, .read_callback = h2_body_read};
	nghttp2_nv *nva;
	char status[8];
	size_t n;

	if (st->reset_sent)
		return;
	if (st->resp_failed) {
		h2_stream_reset(st, NGHTTP2_INTERNAL_ERROR);
		return;
	}
	if (st->responded) {
		if (st->deferred && (evbuffer_get_length(st->body) || st->resp_done)) {
			st->deferred = 0;
			nghttp2_session_resume_data(s->ng, st->id);
			h2_schedule(s);
		}
		return;
	}
	if (!st->head)
		return;
	nva = h2_response_nv(st->head, status, sizeof(status), &n);
	if (!nva) {
		h2_stream_reset(st, NGHTTP2_INTERNAL_ERROR);
		return;
	}
	st->responded = 1;
	if (nghttp2_submit_response(s->ng, st->id, nva, n,
				    st->resp_done && !evbuffer_get_length(st->body) &&
					    !http_parser_trailers(st->parser)
					? NULL
					: &dp))
		h2_stream_reset(st, NGHTTP2_INTERNAL_ERROR);
	free(nva);
	h2_schedule(s);
}

/* The listener wrote more of the response into the pair. */
static void h2_stream_read_cb(struct bufferevent *bev, void *arg)
{
	struct h2_stream *st = arg;

	h2_stream_pull(st);
	h2_stream_respond(st);
}

/* Our end's output (the request) went over to the listener: give the window back. */
static void h2_stream_output_cb(struct evbuffer *buf, const struct evbuffer_cb_info *info,
				void *arg)
{
	struct h2_stream *st = arg;

	if (info->n_deleted && st->unconsumed &&
	    evbuffer_get_length(buf) <= st->s->set.stream_buffer / 2)
		h2_schedule(st->s);
}

void h2_stream_conn_gone(struct h2_stream *st, int reset)
{
	st->conn = NULL;
	st->conn_gone = 1;
	if (reset)
		st->resp_failed = 1;
	h2_stream_pull(st);
	h2_stream_respond(st);
	/* What the client still sends is not wanted: its window opens at once. */
	if (st->bev)
		evbuffer_drain(bufferevent_get_output(st->bev),
			       evbuffer_get_length(bufferevent_get_output(st->bev)));
	h2_schedule(st->s);
}

static void h2_stream_body_end(struct h2_stream *st)
{
	if (st->body_ended)
		return;
	st->body_ended = 1;
	if (st->chunked && !st->conn_gone)
		bufferevent_write(st->bev, "0\r\n\r\n", 5);
}

/* The request's header list is complete: its HTTP/1.1 head goes to the listener. */
static int h2_stream_begin(struct h2_stream *st, int end_stream)
{
	struct h2_session *s = st->s;
	struct h2_field *f = calloc(st->nfields + 1, sizeof(*f));
	struct evbuffer *head = evbuffer_new();
	struct bufferevent *pair[2] = {NULL, NULL};
	enum h2_refusal rc = H2_BAD_FIELD;
	int is_head = 0;

	if (!f || !head)
		goto refused;
	for (size_t i = 0; i < st->nfields; i++) {
		f[i] = (struct h2_field){(uint8_t *)st->fields[i].name, st->fields[i].namelen,
					 (uint8_t *)st->fields[i].value, st->fields[i].valuelen};
		if (h2_name_is(&f[i], ":method") && h2_value_is(&f[i], "HEAD", 0))
			is_head = 1;
	}
	rc = h2_request_head(f, st->nfields, !end_stream, head, &st->chunked);
	/* CONNECT is refused by the listener, answered, logged and counted
	 * as over HTTP/1.1 (it opens no tunnel, whatever the target). */
	if (rc == H2_CONNECT)
		http_add_lit(head, "CONNECT * HTTP/1.1\r\n\r\n");
	else if (rc != H2_OK)
		goto refused;
	st->parser = http_parser_new(HTTP_RESPONSE, 0);
	st->body = evbuffer_new();
	if (!st->parser || !st->body ||
	    bufferevent_pair_new(s->base, BEV_OPT_DEFER_CALLBACKS, pair))
		goto refused;
	http_parser_set_options(st->parser, HTTP_OPT_HEAD | HTTP_OPT_INTERIM | HTTP_OPT_TRAILERS);
	http_parser_expect_no_body(st->parser, is_head);
	st->bev = pair[0];
	bufferevent_setcb(st->bev, h2_stream_read_cb, NULL, NULL, st);
	bufferevent_setwatermark(st->bev, EV_READ, 0, s->set.stream_buffer);
	st->conn = s->ops->stream_open(s->arg, st, pair[1]);
	if (!st->conn) {
		st->conn_gone = 1;
		rc = H2_OK;
		goto refused;
	}
	evbuffer_add_cb(bufferevent_get_output(st->bev), h2_stream_output_cb, st);
	bufferevent_enable(st->bev, EV_READ | EV_WRITE);
	bufferevent_write_buffer(st->bev, head);
	h2_fields_free(st);
	st->field_bytes = 0; /* trailers are a list of their own */
	if (end_stream)
		h2_stream_body_end(st);
	free(f);
	evbuffer_free(head);
	return 0;
refused:
	free(f);
	if (head)
		evbuffer_free(head);
	h2_stream_reset(st, rc == H2_OK || rc == H2_CONNECT ? NGHTTP2_REFUSED_STREAM
							    : NGHTTP2_PROTOCOL_ERROR);
	return 0;
}

static int h2_on_begin_headers(nghttp2_session *ng, const nghttp2_frame *frame, void *ud)
{
	struct h2_session *s = ud;
	struct h2_stream *st;

	if (frame->hd.type != NGHTTP2_HEADERS || frame->headers.cat != NGHTTP2_HCAT_REQUEST)
		return 0;
	if (s->nstreams >= (int)s->set.max_streams) {
		/* Beyond what the client was told: refused alone, untracked
		 * (nghttp2 decodes the block and closes the stream once the
		 * RST_STREAM is out), and counted: a flood of them ends the
		 * connection. Not TEMPORAL_CALLBACK_FAILURE: nghttp2 would
		 * reset it a second time, with INTERNAL_ERROR. */
		nghttp2_submit_rst_stream(ng, NGHTTP2_FLAG_NONE, frame->hd.stream_id,
					  NGHTTP2_REFUSED_STREAM);
		h2_flood(s);
		h2_schedule(s);
		return 0;
	}
	st = calloc(1, sizeof(*st));
	if (!st)
		return NGHTTP2_ERR_CALLBACK_FAILURE;
	st->s = s;
	st->id = frame->hd.stream_id;
	LIST_INSERT_HEAD(&s->streams, st, link);
	s->nstreams++;
	evtimer_del(s->idle_timer);
	nghttp2_session_set_stream_user_data(ng, st->id, st);
	return 0;
}

static int h2_on_header(nghttp2_session *ng, const nghttp2_frame *frame, const uint8_t *name,
			size_t namelen, const uint8_t *value, size_t valuelen, uint8_t flags,
			void *ud)
{
	struct h2_session *s = ud;
	struct h2_stream *st = nghttp2_session_get_stream_user_data(ng, frame->hd.stream_id);
	struct h2_owned *grown, *o;

	if (!st)
		return 0;
	/* RFC 9113 6.5.2's accounting. Up to twice the announced size the
	 * HTTP/1.1 head's own limits answer (431, as over HTTP/1.1); beyond
	 * it the list is not kept. */
	st->field_bytes += namelen + valuelen + 32;
	if (st->field_bytes > 2 * (size_t)s->set.max_header_list || st->nfields >= H2_MAX_FIELDS) {
		h2_oversized(s); /* nghttp2 resets the stream, skips the rest of the list */
		return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
	}
	if (st->bev || frame->headers.cat != NGHTTP2_HCAT_REQUEST)
		return 0; /* trailers of a request body: counted, not forwarded */
	grown = realloc(st->fields, (st->nfields + 1) * sizeof(*grown));
	if (!grown)
		return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
	st->fields = grown;
	o = &st->fields[st->nfields];
	o->name = malloc(namelen + valuelen + 2);
	if (!o->name)
		return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
	memcpy(o->name, name, namelen);
	o->name[namelen] = '\0';
	o->value = o->name + namelen + 1;
	memcpy(o->value, value, valuelen);
	o->value[valuelen] = '\0';
	o->namelen = namelen;
	o->valuelen = valuelen;
	st->nfields++;
	return 0;
}

static int h2_on_frame_recv(nghttp2_session *ng, const nghttp2_frame *frame, void *ud)
{
	struct h2_session *s = ud;
	struct h2_stream *st = nghttp2_session_get_stream_user_data(ng, frame->hd.stream_id);
	int end = (frame->hd.flags & NGHTTP2_FLAG_END_STREAM) != 0;

	switch (frame->hd.type) {
	case NGHTTP2_DATA:
		if (frame->hd.length == 0 && !end && h2_flood(s))
			return 0;
		break;
	case NGHTTP2_HEADERS:
		if (st && frame->headers.cat == NGHTTP2_HCAT_REQUEST && !st->bev && !st->reset_sent)
			return h2_stream_begin(st, end);
		if (frame->headers.cat != NGHTTP2_HCAT_REQUEST && frame->hd.length == 0 && !end)
			h2_flood(s);
		break;
	case NGHTTP2_PRIORITY:
	case NGHTTP2_RST_STREAM:
		h2_flood(s);
		return 0;
	default:
		return 0;
	}
	if (st && st->bev && end)
		h2_stream_body_end(st);
	return 0;
}

static int h2_on_invalid_frame(nghttp2_session *ng, const nghttp2_frame *frame, int err, void *ud)
{
	h2_flood(ud);
	return 0;
}

static int h2_on_data(nghttp2_session *ng, uint8_t flags, int32_t id, const uint8_t *data,
		      size_t len, void *ud)
{
	struct h2_session *s = ud;
	struct h2_stream *st = nghttp2_session_get_stream_user_data(ng, id);
	char line[24];

	if (!st) {
		s->conn_unconsumed += len; /* a refused stream's */
		return 0;
	}
	st->unconsumed += len;
	if (!st->bev || st->conn_gone || !len) {
		h2_schedule(st->s);
		return 0;
	}
	if (st->chunked) {
		snprintf(line, sizeof(line), "%zx\r\n", len);
		bufferevent_write(st->bev, line, strlen(line));
	}
	bufferevent_write(st->bev, data, len);
	if (st->chunked)
		bufferevent_write(st->bev, "\r\n", 2);
	return 0;
}

static int h2_on_stream_close(nghttp2_session *ng, int32_t id, uint32_t code, void *ud)
{
	struct h2_session *s = ud;
	struct h2_stream *st = nghttp2_session_get_stream_user_data(ng, id);

	if (!st)
		return 0;
	nghttp2_session_set_stream_user_data(ng, id, NULL);
	h2_stream_free(st);
	h2_schedule(s);
	return 0;
}

/* Give the windows back for what the listener took (and what closed streams left). */
static void h2_consume(struct h2_session *s)
{
	struct h2_stream *st;

	LIST_FOREACH(st, &s->streams, link)
	{
		if (!st->unconsumed)
			continue;
		if (st->bev && !st->conn_gone &&
		    evbuffer_get_length(bufferevent_get_output(st->bev)) > s->set.stream_buffer / 2)
			continue;
		nghttp2_session_consume(s->ng, st->id, st->unconsumed);
		st->unconsumed = 0;
	}
	if (s->conn_unconsumed) {
		nghttp2_session_consume_connection(s->ng, s->conn_unconsumed);
		s->conn_unconsumed = 0;
	}
}

/* Whether the session is over: nothing to read or write, and its output out. */
static int h2_over(struct h2_session *s)
{
	return s->failed ||
	       (!nghttp2_session_want_read(s->ng) && !nghttp2_session_want_write(s->ng) &&
		evbuffer_get_length(bufferevent_get_output(s->bev)) == 0);
}

/*
 * Frame data of n bytes to the carrier's output. Our SETTINGS tells the
 * client max_streams, while nghttp2 was given H2_REFUSED_AT_ONCE more:
 * it makes a stream beyond the acknowledged value a connection error
 * (every stream before it lost), and has no option to enforce less than
 * it announces, so the stream beyond max_streams reaches
 * h2_on_begin_headers and is refused there alone. The value is set in
 * the frame nghttp2 packed; nothing else of it changes.
 */
static int h2_add_frame(struct h2_session *s, struct evbuffer *out, const uint8_t *data, size_t n)
{
	uint8_t f[H2_FRAME_HEAD + 6 * 8];
	size_t i;

	if (s->advertised || n < H2_FRAME_HEAD || n > sizeof(f) || data[3] != NGHTTP2_SETTINGS ||
	    (data[4] & NGHTTP2_FLAG_ACK))
		return evbuffer_add(out, data, n);
	s->advertised = 1;
	memcpy(f, data, n);
	for (i = H2_FRAME_HEAD; i + 6 <= n; i += 6) {
		if (((f[i] << 8) | f[i + 1]) != NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS)
			continue;
		f[i + 2] = (uint8_t)(s->set.max_streams >> 24);
		f[i + 3] = (uint8_t)(s->set.max_streams >> 16);
		f[i + 4] = (uint8_t)(s->set.max_streams >> 8);
		f[i + 5] = (uint8_t)s->set.max_streams;
	}
	return evbuffer_add(out, f, n);
}

/*
 * Send what the session has, while the carrier's output is below the mark;
 * reading waits while it is above. Calls session_done (s is then gone)
 * when the session is over; returns 1 then.
 */
static int h2_flush(struct h2_session *s)
{
	struct evbuffer *out = bufferevent_get_output(s->bev);
	const uint8_t *data;
	ssize_t n;

	if (!s->failed)
		h2_consume(s);
	while (!s->failed && evbuffer_get_length(out) < H2_OUTPUT_MARK) {
		n = nghttp2_session_mem_send(s->ng, &data);
		if (n < 0)
			s->failed = 1;
		if (n <= 0)
			break;
		if (h2_add_frame(s, out, data, (size_t)n) < 0)
			s->failed = 1;
	}
	if (h2_over(s)) {
		s->ops->session_done(s->arg);
		return 1;
	}
	if (evbuffer_get_length(out) >= H2_OUTPUT_MARK)
		bufferevent_disable(s->bev, EV_READ);
	else
		bufferevent_enable(s->bev, EV_READ);
	if (!s->nstreams && !s->draining) {
		struct timeval tv = clock_tv(s->set.idle_ms);

		if (!evtimer_pending(s->idle_timer, NULL))
			evtimer_add(s->idle_timer, &tv);
	}
	return 0;
}

/* The client sent bytes: all of them to nghttp2, which answers what it must. */
static void h2_read_cb(struct bufferevent *bev, void *arg)
{
	struct h2_session *s = arg;
	struct evbuffer *in = bufferevent_get_input(bev);
	size_t len;
	ssize_t n;

	while ((len = evbuffer_get_length(in)) > 0 && !s->failed) {
		struct evbuffer_iovec v;

		if (evbuffer_peek(in, -1, NULL, &v, 1) < 1)
			break;
		n = nghttp2_session_mem_recv(s->ng, v.iov_base, v.iov_len);
		if (n < 0) {
			/* A GOAWAY (nghttp2's own, ENHANCE_YOUR_CALM for its
			 * floods, else PROTOCOL_ERROR), then the end. */
			h2_warn(s, nghttp2_strerror((int)n));
			nghttp2_session_terminate_session(s->ng, NGHTTP2_PROTOCOL_ERROR);
			evbuffer_drain(in, len);
			break;
		}
		evbuffer_drain(in, (size_t)n);
	}
	h2_flush(s);
}

/* From the loop: what the client sent before the session began (the
 * carrier's input), then whatever the session has to send. */
static void h2_send_cb(evutil_socket_t fd, short what, void *arg)
{
	struct h2_session *s = arg;

	if (evbuffer_get_length(bufferevent_get_input(s->bev)))
		h2_read_cb(s->bev, s);
	else
		h2_flush(s);
}

static void h2_write_cb(struct bufferevent *bev, void *arg)
{
	h2_flush(arg);
}

static void h2_event_cb(struct bufferevent *bev, short what, void *arg)
{
	struct h2_session *s = arg;

	if (what & BEV_EVENT_CONNECTED)
		return;
	s->failed = 1;
	s->ops->session_done(s->arg);
}

/* No stream for idle_ms: GOAWAY, then the session ends. */
static void h2_idle_cb(evutil_socket_t fd, short what, void *arg)
{
	struct h2_session *s = arg;

	if (s->nstreams)
		return;
	nghttp2_session_terminate_session(s->ng, NGHTTP2_NO_ERROR);
	h2_flush(s);
}

static nghttp2_session_callbacks *h2_callbacks(void)
{
	nghttp2_session_callbacks *cbs;

	if (nghttp2_session_callbacks_new(&cbs))
		return NULL;
	nghttp2_session_callbacks_set_on_begin_headers_callback(cbs, h2_on_begin_headers);
	nghttp2_session_callbacks_set_on_header_callback(cbs, h2_on_header);
	nghttp2_session_callbacks_set_on_frame_recv_callback(cbs, h2_on_frame_recv);
	nghttp2_session_callbacks_set_on_invalid_frame_recv_callback(cbs, h2_on_invalid_frame);
	nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs, h2_on_data);
	nghttp2_session_callbacks_set_on_stream_close_callback(cbs, h2_on_stream_close);
	return cbs;
}

static nghttp2_option *h2_options(void)
{
	nghttp2_option *opt;

	if (nghttp2_option_new(&opt))
		return NULL;
	nghttp2_option_set_no_auto_window_update(opt, 1);
	nghttp2_option_set_max_settings(opt, H2_MAX_SETTINGS);
	nghttp2_option_set_max_outbound_ack(opt, H2_MAX_OUTBOUND_ACK);
	nghttp2_option_set_max_send_header_block_length(opt, HTTP_MAX_HEAD * 2);
	nghttp2_option_set_max_deflate_dynamic_table_size(opt, H2_DEFLATE_TABLE);
	nghttp2_option_set_stream_reset_rate_limit(opt, H2_RESET_BURST, H2_RESET_RATE);
	nghttp2_option_set_max_continuations(opt, H2_MAX_CONTINUATIONS);
	return opt;
}

struct h2_session *h2_session_new(struct event_base *base, struct bufferevent *bev,
				  const struct h2_settings *set, const struct h2_ops *ops,
				  void *arg)
{
	struct h2_session *s = calloc(1, sizeof(*s));
	nghttp2_session_callbacks *cbs = h2_callbacks();
	nghttp2_option *opt = h2_options();
	uint32_t window =
	    set->stream_buffer > H2_WINDOW_MAX ? H2_WINDOW_MAX : (uint32_t)set->stream_buffer;
	uint32_t streams = set->max_streams > UINT32_MAX - H2_REFUSED_AT_ONCE
			       ? UINT32_MAX
			       : set->max_streams + H2_REFUSED_AT_ONCE;
	nghttp2_settings_entry iv[] = {
	    {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, streams}, /* max_streams on the wire */
	    {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, window},
	    {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, set->max_header_list},
	};

	if (!s || !cbs || !opt || nghttp2_session_server_new2(&s->ng, cbs, s, opt))
		goto fail;
	s->base = base;
	s->bev = bev;
	s->set = *set;
	s->ops = ops;
	s->arg = arg;
	LIST_INIT(&s->streams);
	s->send_ev = event_new(base, -1, 0, h2_send_cb, s);
	s->idle_timer = evtimer_new(base, h2_idle_cb, s);
	if (!s->send_ev || !s->idle_timer ||
	    nghttp2_submit_settings(s->ng, NGHTTP2_FLAG_NONE, iv, sizeof(iv) / sizeof(iv[0])) ||
	    nghttp2_session_set_local_window_size(s->ng, NGHTTP2_FLAG_NONE, 0, window))
		goto fail;
	nghttp2_session_callbacks_del(cbs);
	nghttp2_option_del(opt);
	bufferevent_setcb(bev, h2_read_cb, h2_write_cb, h2_event_cb, s);
	bufferevent_setwatermark(bev, EV_WRITE, H2_OUTPUT_MARK / 2, 0);
	bufferevent_enable(bev, EV_READ | EV_WRITE);
	h2_schedule(s);
	return s;
fail:
	nghttp2_session_callbacks_del(cbs);
	nghttp2_option_del(opt);
	if (s) {
		nghttp2_session_del(s->ng);
		if (s->send_ev)
			event_free(s->send_ev);
		if (s->idle_timer)
			event_free(s->idle_timer);
		free(s);
	}
	return NULL;
}

void h2_session_drain(struct h2_session *s)
{
	if (s->draining)
		return;
	s->draining = 1;
	evtimer_del(s->idle_timer);
	nghttp2_submit_goaway(s->ng, NGHTTP2_FLAG_NONE,
			      nghttp2_session_get_last_proc_stream_id(s->ng), NGHTTP2_NO_ERROR,
			      NULL, 0);
	h2_schedule(s);
}

void h2_session_free(struct h2_session *s)
{
	struct h2_stream *st;

	if (!s)
		return;
	while ((st = LIST_FIRST(&s->streams))) {
		nghttp2_session_set_stream_user_data(s->ng, st->id, NULL);
		h2_stream_free(st);
	}
	nghttp2_session_del(s->ng);
	event_free(s->send_ev);
	event_free(s->idle_timer);
	free(s);
}
