/*
 * Unit tests of proxy/h2up.c's mapping: an HTTP/1.1 request head to HTTP/2
 * fields (pseudo-headers first, hop-by-hop dropped, TE kept as trailers
 * only), and HTTP/2 response fields to the http_msg the HTTP/1.1 parser
 * would have made; then exchanges with an in-process nghttp2 server over a
 * bufferevent pair: a whole response with trailers, a refused stream
 * (never processed: UPSTREAM_NOT_SENT, tried once more), a stream reset
 * after its head (UPSTREAM_ERROR), a paused reader whose window closes.
 */
#include "proxy/h2up.h"

#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <nghttp2/nghttp2.h>

#include "proxy/http.h"
#include "tests/unit/unit.h"

/* The request head in text, parsed as the listener parses it. */
static struct http_msg *request(const char *text)
{
	struct http_parser *p = http_parser_new(HTTP_REQUEST, 0);
	struct evbuffer *in = evbuffer_new();
	struct http_msg *m = NULL;

	evbuffer_add(in, text, strlen(text));
	if (http_parser_feed(p, in) == HTTP_DONE)
		m = http_parser_take(p);
	evbuffer_free(in);
	http_parser_free(p);
	return m;
}

/* The value of field name among f[0..n), as a NUL-terminated copy in buf. */
static const char *field(const struct h2up_field *f, int n, const char *name, char *buf,
			 size_t size)
{
	for (int i = 0; i < n; i++) {
		if (f[i].name_len == strlen(name) && memcmp(f[i].name, name, f[i].name_len) == 0 &&
		    f[i].value_len < size) {
			memcpy(buf, f[i].value, f[i].value_len);
			buf[f[i].value_len] = '\0';
			return buf;
		}
	}
	return NULL;
}

static void test_request_fields(void)
{
	struct h2up_field f[H2UP_MAX_FIELDS];
	char buf[256];
	struct http_msg *m = request("POST /api/orders?x=1 HTTP/1.1\r\n"
				     "Host: api.example:8443\r\n"
				     "Content-Type: application/json\r\n"
				     "Connection: keep-alive, X-Hop\r\n"
				     "X-Hop: 1\r\n"
				     "Keep-Alive: timeout=5\r\n"
				     "TE: trailers, deflate\r\n"
				     "Upgrade: h2c\r\n"
				     "HTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n"
				     "Idempotency-Key: k-1\r\n"
				     "Content-Length: 0\r\n"
				     "\r\n");
	int n;

	CHECK(m != NULL);
	if (!m)
		return;
	n = h2up_request_fields(m, "http", f);
	CHECK(n == 8);
	/* the pseudo-headers first, in order */
	CHECK(n > 4 && f[0].name_len == 7 && memcmp(f[0].name, ":method", 7) == 0);
	CHECK(f[3].name_len == 5 && memcmp(f[3].name, ":path", 5) == 0);
	CHECK_STR(field(f, n, ":method", buf, sizeof(buf)), "POST");
	CHECK_STR(field(f, n, ":scheme", buf, sizeof(buf)), "http");
	CHECK_STR(field(f, n, ":authority", buf, sizeof(buf)), "api.example:8443");
	CHECK_STR(field(f, n, ":path", buf, sizeof(buf)), "/api/orders?x=1");
	/* names lower-cased, values as they were */
	CHECK_STR(field(f, n, "content-type", buf, sizeof(buf)), "application/json");
	CHECK_STR(field(f, n, "idempotency-key", buf, sizeof(buf)), "k-1");
	CHECK_STR(field(f, n, "content-length", buf, sizeof(buf)), "0");
	CHECK_STR(field(f, n, "te", buf, sizeof(buf)), "trailers");
	/* Host is :authority; hop-by-hop fields stay behind */
	CHECK(!field(f, n, "host", buf, sizeof(buf)));
	CHECK(!field(f, n, "connection", buf, sizeof(buf)));
	CHECK(!field(f, n, "x-hop", buf, sizeof(buf)));
	CHECK(!field(f, n, "keep-alive", buf, sizeof(buf)));
	CHECK(!field(f, n, "upgrade", buf, sizeof(buf)));
	CHECK(!field(f, n, "http2-settings", buf, sizeof(buf)));
	for (int i = 0; i < n; i++) {
		for (size_t j = 0; j < f[i].name_len; j++)
			CHECK(!(f[i].name[j] >= 'A' && f[i].name[j] <= 'Z'));
	}
	http_msg_free(m);
}

/* The :path the request in text maps to, copied into buf; NULL if none. */
static const char *path_of(const char *text, char *buf, size_t size)
{
	struct h2up_field f[H2UP_MAX_FIELDS];
	struct http_msg *m = request(text);
	const char *path = NULL;
	int n;

	if (!m)
		return NULL;
	n = h2up_request_fields(m, "http", f);
	path = field(f, n, ":path", buf, size);
	http_msg_free(m);
	return path;
}

static void test_request_te_and_targets(void)
{
	struct h2up_field f[H2UP_MAX_FIELDS];
	char buf[256];
	struct http_msg *m;
	int n;

	/* TE without trailers goes nowhere; a chunked body's framing neither */
	m = request("PUT /u HTTP/1.1\r\nHost: h\r\nTE: gzip\r\nTransfer-Encoding: chunked\r\n"
		    "\r\n0\r\n\r\n");
	CHECK(m != NULL);
	if (m) {
		n = h2up_request_fields(m, "https", f);
		CHECK(n == 4);
		CHECK_STR(field(f, n, ":scheme", buf, sizeof(buf)), "https");
		CHECK(!field(f, n, "te", buf, sizeof(buf)));
		CHECK(!field(f, n, "transfer-encoding", buf, sizeof(buf)));
		http_msg_free(m);
	}
	/* an absolute-form target: its path and query; OPTIONS * */
	CHECK_STR(path_of("GET http://api.example/a/b?c HTTP/1.1\r\nHost: api.example\r\n\r\n", buf,
			  sizeof(buf)),
		  "/a/b?c");
	CHECK_STR(path_of("GET http://api.example HTTP/1.1\r\nHost: api.example\r\n\r\n", buf,
			  sizeof(buf)),
		  "/");
	CHECK_STR(path_of("OPTIONS * HTTP/1.1\r\nHost: h\r\n\r\n", buf, sizeof(buf)), "*");
	/* without Host there is no :authority to send */
	m = request("GET / HTTP/1.0\r\n\r\n");
	CHECK(m != NULL);
	if (m) {
		CHECK(h2up_request_fields(m, "http", f) == -1);
		http_msg_free(m);
	}
}

static int add(struct evbuffer *lines, const char *name, const char *value)
{
	return h2up_field_add(lines, (const uint8_t *)name, strlen(name), (const uint8_t *)value,
			      strlen(value));
}

static void test_response_fields(void)
{
	struct evbuffer *lines = evbuffer_new();
	struct http_msg *m;
	char big[HTTP_MAX_HEAD];

	/* a head with a length: framed by it */
	CHECK(add(lines, "content-type", "application/json") == 0);
	CHECK(add(lines, "x-order-id", "order-1") == 0);
	CHECK(add(lines, "content-length", "12") == 0);
	CHECK(add(lines, "set-cookie", "a=1") == 0);
	CHECK(add(lines, "set-cookie", "b=2") == 0);
	m = h2up_response_msg(201, lines, 0);
	CHECK(m != NULL);
	CHECK(evbuffer_get_length(lines) == 0);
	if (m) {
		CHECK(m->status == 201);
		CHECK(m->content_length == 12);
		CHECK(!m->chunked);
		CHECK_STR(http_msg_header(m, "X-Order-Id"), "order-1");
		CHECK(http_msg_header_count(m, "set-cookie") == 2);
		http_msg_free(m);
	}
	/* no length: the body runs to the stream's end */
	CHECK(add(lines, "content-type", "text/plain") == 0);
	m = h2up_response_msg(200, lines, 0);
	CHECK(m != NULL);
	if (m) {
		CHECK(m->status == 200);
		CHECK(m->content_length == -1);
		http_msg_free(m);
	}
	/* HEAD, 204, 304: no body whatever the head says */
	CHECK(add(lines, "content-length", "99") == 0);
	m = h2up_response_msg(200, lines, 1);
	CHECK(m != NULL);
	if (m) {
		CHECK(m->status == 200);
		CHECK(evbuffer_get_length(m->body) == 0);
		http_msg_free(m);
	}
	m = h2up_response_msg(204, lines, 1);
	CHECK(m != NULL && m->status == 204);
	http_msg_free(m);
	/* an interim head */
	CHECK(add(lines, "link", "</a.css>; rel=preload") == 0);
	m = h2up_response_msg(103, lines, 1);
	CHECK(m != NULL && m->status == 103);
	http_msg_free(m);
	/* what HTTP/1.1 cannot carry is refused, nothing appended */
	CHECK(add(lines, ":status", "200") == -1);
	CHECK(add(lines, "", "x") == -1);
	CHECK(add(lines, "x-bad name", "x") == -1);
	CHECK(add(lines, "x-bad", "a\r\nX-Injected: 1") == -1);
	CHECK(add(lines, "x-bad", "a\nb") == -1);
	CHECK(h2up_field_add(lines, (const uint8_t *)"x-nul", 5, (const uint8_t *)"a\0b", 3) == -1);
	CHECK(evbuffer_get_length(lines) == 0);
	memset(big, 'a', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	CHECK(add(lines, "x-big", big) == -1);
	/* a head the parser refuses: two different lengths, a 101 */
	CHECK(add(lines, "content-length", "1") == 0);
	CHECK(add(lines, "content-length", "2") == 0);
	CHECK(h2up_response_msg(200, lines, 0) == NULL);
	CHECK(evbuffer_get_length(lines) == 0);
	CHECK(h2up_response_msg(101, lines, 0) == NULL);
	CHECK(h2up_response_msg(1000, lines, 0) == NULL);
	evbuffer_free(lines);
}

/* ---- exchanges with an in-process server ---- */

enum srv_mode {
	SRV_TRAILERS, /* 200, "hello", then trailers */
	SRV_REFUSE,   /* RST_STREAM REFUSED_STREAM */
	SRV_RESET,    /* a head and 5 bytes, then RST_STREAM INTERNAL_ERROR */
	SRV_BIG,      /* 200 and SRV_BIG_LEN bytes */
};

#define SRV_BIG_LEN (4 * H2UP_STREAM_WINDOW)

struct srv {
	struct event_base *base;
	struct bufferevent *bev;
	nghttp2_session *sess;
	enum srv_mode mode;
	int requests;	  /* requests whose end arrived */
	size_t body_seen; /* request body bytes */
	size_t big_left;
	uint32_t max_streams; /* SETTINGS_MAX_CONCURRENT_STREAMS; 0: not sent */
};

struct client {
	int status, done, interim;
	enum upstream_result res;
	size_t body;
	char trailers[256];
	struct h2up_stream *s;
	int pause_at_head;
};

static struct srv srv;

static ssize_t srv_send(nghttp2_session *sess, const uint8_t *data, size_t len, int flags,
			void *user)
{
	evbuffer_add(bufferevent_get_output(srv.bev), data, len);
	return (ssize_t)len;
}

static ssize_t srv_read(nghttp2_session *sess, int32_t id, uint8_t *buf, size_t len,
			uint32_t *flags, nghttp2_data_source *src, void *user)
{
	static const nghttp2_nv trailers[] = {
	    {(uint8_t *)"grpc-status", (uint8_t *)"0", 11, 1, 0},
	    {(uint8_t *)"grpc-message", (uint8_t *)"fine", 12, 4, 0},
	};

	if (srv.mode == SRV_RESET) {
		/* some body, then a failure: nghttp2 resets the stream */
		if (srv.big_left == 0)
			return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
		memset(buf, 'y', srv.big_left);
		srv.big_left = 0;
		return 5;
	}
	if (srv.mode == SRV_BIG) {
		size_t n = len < srv.big_left ? len : srv.big_left;

		memset(buf, 'x', n);
		srv.big_left -= n;
		if (srv.big_left == 0)
			*flags |= NGHTTP2_DATA_FLAG_EOF;
		return (ssize_t)n;
	}
	memcpy(buf, "hello", 5);
	*flags |= NGHTTP2_DATA_FLAG_EOF | NGHTTP2_DATA_FLAG_NO_END_STREAM;
	nghttp2_submit_trailer(sess, id, trailers, 2);
	return 5;
}

static void srv_answer(nghttp2_session *sess, int32_t id)
{
	nghttp2_nv head[] = {{(uint8_t *)":status", (uint8_t *)"200", 7, 3, 0}};
	nghttp2_data_provider prd = {.read_callback = srv_read};

	srv.requests++;
	switch (srv.mode) {
	case SRV_REFUSE:
		nghttp2_submit_rst_stream(sess, NGHTTP2_FLAG_NONE, id, NGHTTP2_REFUSED_STREAM);
		break;
	case SRV_RESET:
		srv.big_left = 5;
		nghttp2_submit_response(sess, id, head, 1, &prd);
		break;
	case SRV_BIG:
		srv.big_left = SRV_BIG_LEN;
		/* fall through */
	case SRV_TRAILERS:
		nghttp2_submit_response(sess, id, head, 1, &prd);
		break;
	}
}

static int srv_frame(nghttp2_session *sess, const nghttp2_frame *frame, void *user)
{
	if ((frame->hd.type == NGHTTP2_HEADERS || frame->hd.type == NGHTTP2_DATA) &&
	    (frame->hd.flags & NGHTTP2_FLAG_END_STREAM))
		srv_answer(sess, frame->hd.stream_id);
	return 0;
}

static int srv_data(nghttp2_session *sess, uint8_t flags, int32_t id, const uint8_t *data,
		    size_t len, void *user)
{
	srv.body_seen += len;
	return 0;
}

static void srv_read_cb(struct bufferevent *bev, void *arg)
{
	struct evbuffer *in = bufferevent_get_input(bev);
	size_t n = evbuffer_get_length(in);

	nghttp2_session_mem_recv(srv.sess, evbuffer_pullup(in, -1), n);
	evbuffer_drain(in, n);
	nghttp2_session_send(srv.sess);
}

/* h2up's connect: one end of a pair, the server on the other. */
static struct bufferevent *srv_connect(void *arg)
{
	struct bufferevent *pair[2];
	nghttp2_session_callbacks *cbs;

	if (bufferevent_pair_new(srv.base, 0, pair) < 0)
		return NULL;
	if (srv.sess)
		nghttp2_session_del(srv.sess);
	if (srv.bev)
		bufferevent_free(srv.bev);
	srv.bev = pair[1];
	nghttp2_session_callbacks_new(&cbs);
	nghttp2_session_callbacks_set_send_callback(cbs, srv_send);
	nghttp2_session_callbacks_set_on_frame_recv_callback(cbs, srv_frame);
	nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs, srv_data);
	nghttp2_session_server_new(&srv.sess, cbs, NULL);
	nghttp2_session_callbacks_del(cbs);
	{
		nghttp2_settings_entry max = {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS,
					      srv.max_streams};

		nghttp2_submit_settings(srv.sess, NGHTTP2_FLAG_NONE, &max, srv.max_streams ? 1 : 0);
	}
	bufferevent_setcb(srv.bev, srv_read_cb, NULL, NULL, NULL);
	bufferevent_enable(srv.bev, EV_READ | EV_WRITE);
	return pair[0];
}

static void cl_head(void *arg, struct http_msg *m)
{
	struct client *c = arg;

	c->status = m->status;
	http_msg_free(m);
	if (c->pause_at_head)
		h2up_read_pause(c->s, 1);
}

static void cl_body(void *arg, struct evbuffer *data)
{
	struct client *c = arg;

	c->body += evbuffer_get_length(data);
	evbuffer_drain(data, evbuffer_get_length(data));
}

static void cl_done(void *arg, enum upstream_result res)
{
	struct client *c = arg;

	c->done = 1;
	c->res = res;
	event_base_loopbreak(srv.base);
}

static void cl_trailers(void *arg, struct evbuffer *fields)
{
	struct client *c = arg;
	size_t n = evbuffer_get_length(fields);

	if (n < sizeof(c->trailers))
		evbuffer_remove(fields, c->trailers, n);
	evbuffer_drain(fields, evbuffer_get_length(fields));
}

static const struct upstream_events cl_events = {
    .head = cl_head, .body = cl_body, .done = cl_done, .trailers = cl_trailers};

/*
 * Run the loop until c is done or, when nothing waits on a socket (the
 * pair's callbacks are the loop's own), until nothing moves any more.
 */
static void run(struct client *c)
{
	for (int i = 0; i < 10000 && !c->done; i++)
		event_base_loop(srv.base, EVLOOP_NONBLOCK);
}

/* One exchange of req against the server in mode, run as far as it goes. */
static void exchange(struct h2up_pool *hp, enum srv_mode mode, const char *req, struct client *c)
{
	struct upstream_params params = {0, 60000, 1024};
	struct evbuffer *b = evbuffer_new();

	srv.mode = mode;
	evbuffer_add(b, req, strlen(req));
	c->s = h2up_start(hp, b, &params, &cl_events, c);
	CHECK(c->s != NULL);
	CHECK(evbuffer_get_length(b) == 0);
	run(c);
	evbuffer_free(b);
}

static void test_exchanges(void)
{
	static const char post[] = "POST /api/orders HTTP/1.1\r\nHost: api\r\n"
				   "Content-Length: 7\r\n\r\n{\"a\":1}";
	static const char get[] = "GET /big HTTP/1.1\r\nHost: api\r\n\r\n";
	struct h2up_pool *hp;
	struct client c;

	srv.base = event_base_new();
	hp = h2up_pool_new(srv.base, "test:1", srv_connect, NULL, 0, 4, 60000);

	memset(&c, 0, sizeof(c));
	exchange(hp, SRV_TRAILERS, post, &c);
	CHECK(c.done && c.res == UPSTREAM_OK);
	CHECK(c.status == 200);
	CHECK(c.body == 5);
	CHECK(srv.body_seen == 7);
	CHECK_STR(c.trailers, "grpc-status: 0\r\ngrpc-message: fine\r\n");
	CHECK(h2up_pool_conns(hp) == 1);

	/* refused: never processed, tried once more on a new stream, then told */
	memset(&c, 0, sizeof(c));
	srv.requests = 0;
	exchange(hp, SRV_REFUSE, post, &c);
	CHECK(c.done && c.res == UPSTREAM_NOT_SENT);
	CHECK(c.status == 0);
	CHECK(srv.requests == 2);

	/* reset after the head: a broken response, not a request never sent */
	memset(&c, 0, sizeof(c));
	exchange(hp, SRV_RESET, post, &c);
	CHECK(c.done && c.res == UPSTREAM_ERROR);
	CHECK(c.status == 200);

	/* a paused reader holds one window of the body, then all of it comes */
	memset(&c, 0, sizeof(c));
	c.pause_at_head = 1;
	exchange(hp, SRV_BIG, get, &c);
	CHECK(!c.done);
	CHECK(c.status == 200 && c.body == 0);
	CHECK(srv.big_left > 0 && SRV_BIG_LEN - srv.big_left <= H2UP_STREAM_WINDOW);
	CHECK(h2up_pending(c.s) == 0 && !h2up_unsent(c.s));
	h2up_read_pause(c.s, 0);
	run(&c);
	CHECK(c.done && c.res == UPSTREAM_OK);
	CHECK(c.body == SRV_BIG_LEN);

	/* cancelled mid-body: nothing more is told, the connection stays */
	memset(&c, 0, sizeof(c));
	c.pause_at_head = 1;
	exchange(hp, SRV_BIG, get, &c);
	CHECK(!c.done && c.status == 200);
	h2up_cancel(c.s);
	run(&c);
	CHECK(!c.done);
	CHECK(h2up_pool_conns(hp) == 1);

	h2up_pool_free(hp);
	nghttp2_session_del(srv.sess);
	bufferevent_free(srv.bev);
	srv.sess = NULL;
	srv.bev = NULL;
	event_base_free(srv.base);
}

/*
 * One connection allowed, one stream at a time on it (the upstream's
 * SETTINGS): three exchanges wait their turn in the pool's queue and all
 * complete on that one connection; one cancelled while queued is never
 * sent nor told.
 */
static void test_queue(void)
{
	static const char post[] = "POST /q HTTP/1.1\r\nHost: api\r\nContent-Length: 2\r\n\r\n{}";
	struct upstream_params params = {0, 60000, 1024};
	struct client c[4];
	struct h2up_pool *hp;
	int all;

	memset(&srv, 0, sizeof(srv));
	memset(c, 0, sizeof(c));
	srv.base = event_base_new();
	srv.max_streams = 1;
	srv.mode = SRV_TRAILERS;
	hp = h2up_pool_new(srv.base, "test:1", srv_connect, NULL, 0, 1, 60000);
	/* the first exchange learns the upstream's SETTINGS */
	exchange(hp, SRV_TRAILERS, post, &c[0]);
	CHECK(c[0].done && c[0].res == UPSTREAM_OK);
	srv.requests = 0;
	for (int i = 1; i < 4; i++) {
		struct evbuffer *b = evbuffer_new();

		evbuffer_add(b, post, strlen(post));
		c[i].s = h2up_start(hp, b, &params, &cl_events, &c[i]);
		evbuffer_free(b);
	}
	CHECK(!h2up_pool_room(hp));
	h2up_cancel(c[3].s); /* queued behind the others */
	for (int i = 0; i < 10000; i++) {
		all = c[1].done && c[2].done;
		if (all)
			break;
		event_base_loop(srv.base, EVLOOP_NONBLOCK);
	}
	CHECK(c[1].done && c[1].res == UPSTREAM_OK && c[1].body == 5);
	CHECK(c[2].done && c[2].res == UPSTREAM_OK && c[2].body == 5);
	CHECK(!c[3].done);
	CHECK(srv.requests == 2);
	CHECK(h2up_pool_conns(hp) == 1);
	h2up_pool_free(hp);
	nghttp2_session_del(srv.sess);
	bufferevent_free(srv.bev);
	event_base_free(srv.base);
}

int main(void)
{
	test_request_fields();
	test_request_te_and_targets();
	test_response_fields();
	test_exchanges();
	test_queue();
	UNIT_DONE("test_h2up");
}
