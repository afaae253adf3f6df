/* Unit tests of proxy/http.c: framing, strictness, limits, both directions. */
#include "proxy/http.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>

#include "tests/unit/unit.h"

#define TEST_BODY_LIMIT 1000

/* The whole message in one feed; *out gets the message on HTTP_DONE. */
static enum http_status parse_whole(enum http_kind kind, size_t max_body, const char *data,
				    size_t len, struct http_msg **out)
{
	struct http_parser *p = http_parser_new(kind, max_body);
	struct evbuffer *in = evbuffer_new();
	enum http_status st;

	*out = NULL;
	evbuffer_add(in, data, len);
	st = http_parser_feed(p, in);
	if (st == HTTP_DONE)
		*out = http_parser_take(p);
	evbuffer_free(in);
	http_parser_free(p);
	return st;
}

/* The message one byte per feed; stops at the first status other than MORE. */
static enum http_status parse_bytewise(enum http_kind kind, size_t max_body, const char *data,
				       size_t len, struct http_msg **out)
{
	struct http_parser *p = http_parser_new(kind, max_body);
	struct evbuffer *in = evbuffer_new();
	enum http_status st = HTTP_MORE;
	size_t i;

	*out = NULL;
	for (i = 0; i < len && st == HTTP_MORE; i++) {
		evbuffer_add(in, data + i, 1);
		st = http_parser_feed(p, in);
	}
	if (st == HTTP_DONE)
		*out = http_parser_take(p);
	evbuffer_free(in);
	http_parser_free(p);
	return st;
}

static enum http_status req(const char *s)
{
	struct http_msg *m;
	enum http_status st = parse_whole(HTTP_REQUEST, TEST_BODY_LIMIT, s, strlen(s), &m);
	enum http_status st1;

	http_msg_free(m);
	st1 = parse_bytewise(HTTP_REQUEST, TEST_BODY_LIMIT, s, strlen(s), &m);
	http_msg_free(m);
	CHECK(st == st1);
	return st;
}

static int body_is(const struct http_msg *m, const char *s)
{
	size_t len = evbuffer_get_length(m->body);

	if (len != strlen(s))
		return 0;
	return len == 0 || memcmp(evbuffer_pullup(m->body, -1), s, len) == 0;
}

static void test_simple_get(void)
{
	const char *s = "GET /a/b?x=1&y HTTP/1.1\r\nHost: example.com\r\n"
			"User-Agent:  curl/8 \t\r\nX-Empty:\r\n\r\n";
	struct http_msg *m;

	CHECK(parse_whole(HTTP_REQUEST, 0, s, strlen(s), &m) == HTTP_DONE);
	if (!m)
		return;
	CHECK(m->kind == HTTP_REQUEST);
	CHECK_STR(m->method, "GET");
	CHECK_STR(m->target, "/a/b?x=1&y");
	CHECK_STR(m->path, "/a/b");
	CHECK(m->path_len == 4);
	CHECK_STR(m->query, "x=1&y");
	CHECK(m->query_len == 5);
	CHECK(m->version_minor == 1);
	CHECK(m->nheaders == 3);
	CHECK_STR(m->headers[0].name, "Host");
	CHECK_STR(m->headers[0].value, "example.com");
	CHECK_STR(http_msg_header(m, "user-agent"), "curl/8");
	CHECK_STR(http_msg_header(m, "X-EMPTY"), "");
	CHECK(http_msg_header(m, "Accept") == NULL);
	CHECK(http_msg_header_count(m, "host") == 1);
	CHECK(m->content_length == -1);
	CHECK(!m->chunked);
	CHECK(m->keep_alive);
	CHECK(!m->expect_continue);
	CHECK(m->body && evbuffer_get_length(m->body) == 0);
	http_msg_free(m);

	s = "GET /p? HTTP/1.1\r\nHost: h\r\n\r\n";
	CHECK(parse_whole(HTTP_REQUEST, 0, s, strlen(s), &m) == HTTP_DONE);
	if (m) {
		CHECK_STR(m->path, "/p");
		CHECK_STR(m->query, "");
		CHECK(m->query_len == 0);
		http_msg_free(m);
	}
	s = "GET / HTTP/1.1\r\nHost: h\r\n\r\n";
	CHECK(parse_whole(HTTP_REQUEST, 0, s, strlen(s), &m) == HTTP_DONE);
	if (m) {
		CHECK_STR(m->path, "/");
		CHECK(m->query == NULL);
		http_msg_free(m);
	}
	s = "OPTIONS * HTTP/1.1\r\nHost: h\r\n\r\n";
	CHECK(parse_whole(HTTP_REQUEST, 0, s, strlen(s), &m) == HTTP_DONE);
	if (m) {
		CHECK_STR(m->target, "*");
		http_msg_free(m);
	}
	/* HTTP/1.0 needs no Host; obs-text is allowed in values. */
	s = "GET / HTTP/1.0\r\nX-Name: caf\xc3\xa9\r\n\r\n";
	CHECK(parse_whole(HTTP_REQUEST, 0, s, strlen(s), &m) == HTTP_DONE);
	if (m) {
		CHECK(m->version_minor == 0);
		CHECK(!m->keep_alive);
		CHECK_STR(http_msg_header(m, "x-name"), "caf\xc3\xa9");
		http_msg_free(m);
	}
}

/* A POST fed one byte at a time: head_complete, msg and started follow. */
static void test_bytewise_post(void)
{
	const char *s = "POST /orders HTTP/1.1\r\nHost: h\r\nContent-Length: 11\r\n"
			"Expect: 100-Continue\r\n\r\nhello world";
	struct http_parser *p = http_parser_new(HTTP_REQUEST, TEST_BODY_LIMIT);
	struct evbuffer *in = evbuffer_new();
	size_t i, len = strlen(s), head = strstr(s, "\r\n\r\n") + 4 - s;
	enum http_status st = HTTP_MORE;
	struct http_msg *m;

	CHECK(!http_parser_started(p));
	CHECK(!http_parser_head_complete(p));
	CHECK(http_parser_msg(p) == NULL);
	CHECK(http_parser_take(p) == NULL);
	for (i = 0; i < len; i++) {
		evbuffer_add(in, s + i, 1);
		st = http_parser_feed(p, in);
		CHECK(http_parser_started(p));
		CHECK(http_parser_head_complete(p) == (i + 1 >= head));
		if (i + 1 < len)
			CHECK(st == HTTP_MORE);
		if (i + 1 == head) {
			const struct http_msg *cur = http_parser_msg(p);

			CHECK(cur && cur->expect_continue && cur->content_length == 11);
		}
	}
	CHECK(st == HTTP_DONE);
	CHECK(http_parser_feed(p, in) == HTTP_DONE);
	m = http_parser_take(p);
	CHECK(m != NULL);
	if (m) {
		CHECK_STR(m->method, "POST");
		CHECK(m->content_length == 11);
		CHECK(body_is(m, "hello world"));
		CHECK(m->expect_continue);
		http_msg_free(m);
	}
	CHECK(!http_parser_started(p));
	CHECK(!http_parser_head_complete(p));
	CHECK(http_parser_eof(p) == HTTP_MORE);
	evbuffer_free(in);
	http_parser_free(p);
}

static void test_pipelined(void)
{
	const char *s = "\r\nGET /1 HTTP/1.1\r\nHost: h\r\n\r\n"
			"POST /2 HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\n\r\nabc"
			"POST /3 HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n"
			"2\r\nxy\r\n0\r\n\r\n"
			"GET /4 HTTP/1.1\r\nHo";
	struct http_parser *p = http_parser_new(HTTP_REQUEST, TEST_BODY_LIMIT);
	struct evbuffer *in = evbuffer_new();
	static const char *const targets[] = {"/1", "/2", "/3"};
	static const char *const bodies[] = {"", "abc", "xy"};
	struct http_msg *m;
	int i;

	evbuffer_add(in, s, strlen(s));
	for (i = 0; i < 3; i++) {
		CHECK(http_parser_feed(p, in) == HTTP_DONE);
		m = http_parser_take(p);
		CHECK(m != NULL);
		if (!m)
			continue;
		CHECK_STR(m->target, targets[i]);
		CHECK(body_is(m, bodies[i]));
		http_msg_free(m);
	}
	CHECK(http_parser_feed(p, in) == HTTP_MORE);
	CHECK(http_parser_started(p));
	CHECK(http_parser_eof(p) == HTTP_ERR_BAD);
	evbuffer_free(in);
	http_parser_free(p);
}

static void test_chunked(void)
{
	const char *s = "POST /c HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: Chunked\r\n\r\n"
			"5;name=value;x\r\nhello\r\n"
			"1 ; ext\r\n \r\n"
			"A\r\n0123456789\r\n"
			"0\r\nX-Trailer: t\r\nX-Other:  v \r\n\r\n";
	struct http_msg *m;

	CHECK(parse_whole(HTTP_REQUEST, TEST_BODY_LIMIT, s, strlen(s), &m) == HTTP_DONE);
	if (m) {
		CHECK(m->chunked);
		CHECK(m->content_length == -1);
		CHECK(body_is(m, "hello 0123456789"));
		CHECK(http_msg_header(m, "X-Trailer") == NULL);
		http_msg_free(m);
	}
	CHECK(parse_bytewise(HTTP_REQUEST, TEST_BODY_LIMIT, s, strlen(s), &m) == HTTP_DONE);
	if (m) {
		CHECK(body_is(m, "hello 0123456789"));
		http_msg_free(m);
	}
	/* Body exactly at the limit, upper-case hex. */
	s = "POST /c HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n"
	    "3\r\nabc\r\n0\r\n\r\n";
	CHECK(parse_whole(HTTP_REQUEST, 3, s, strlen(s), &m) == HTTP_DONE);
	http_msg_free(m);

	/* Malformed chunk framing. */
	CHECK(req("POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n"
		  "5\r\nhelloX\r\n0\r\n\r\n") == HTTP_ERR_BAD);
	CHECK(req("POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n"
		  "5\r\nhello\n0\r\n\r\n") == HTTP_ERR_BAD);
	CHECK(req("POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n"
		  "5\nhello\r\n0\r\n\r\n") == HTTP_ERR_BAD);
	CHECK(req("POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n"
		  "g\r\n") == HTTP_ERR_BAD);
	CHECK(req("POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n"
		  "-5\r\n") == HTTP_ERR_BAD);
	CHECK(req("POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n"
		  "\r\n") == HTTP_ERR_BAD);
	CHECK(req("POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n"
		  "5 \r\n") == HTTP_ERR_BAD);
	CHECK(req("POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n"
		  "0x5\r\n") == HTTP_ERR_BAD);
	CHECK(req("POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n"
		  "5;a\x01\r\n") == HTTP_ERR_BAD);
	/* 16 hex digits overflow the limit, even as leading zeros. */
	CHECK(req("POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n"
		  "ffffffffffffffff\r\n") == HTTP_ERR_BAD);
	CHECK(req("POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n"
		  "0000000000000001\r\n") == HTTP_ERR_BAD);
	/* Bad trailer fields. */
	CHECK(req("POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n"
		  "0\r\nBad Name: x\r\n\r\n") == HTTP_ERR_BAD);
	CHECK(req("POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n"
		  "0\r\nX: a\r\n folded\r\n\r\n") == HTTP_ERR_BAD);
	CHECK(req("POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n"
		  "0\r\nX: a\n\r\n") == HTTP_ERR_BAD);
}

static void test_chunk_line_limit(void)
{
	const char *head = "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n";
	size_t hl = strlen(head), len;
	char *s = malloc(hl + HTTP_MAX_CHUNK_LINE + 16);
	struct http_msg *m;

	/* A chunk line of exactly HTTP_MAX_CHUNK_LINE bytes incl. CRLF is fine. */
	memcpy(s, head, hl);
	len = hl;
	s[len++] = '1';
	s[len++] = ';';
	memset(s + len, 'e', HTTP_MAX_CHUNK_LINE - 4);
	len += HTTP_MAX_CHUNK_LINE - 4;
	memcpy(s + len, "\r\nZ\r\n0\r\n\r\n", 10);
	CHECK(parse_whole(HTTP_REQUEST, 0, s, len + 10, &m) == HTTP_DONE);
	if (m) {
		CHECK(body_is(m, "Z"));
		http_msg_free(m);
	}
	/* One more byte fails, without waiting for the line end. */
	len = hl + 2;
	memset(s + len, 'e', HTTP_MAX_CHUNK_LINE);
	len += HTTP_MAX_CHUNK_LINE - 2;
	CHECK(parse_whole(HTTP_REQUEST, 0, s, len, &m) == HTTP_ERR_BAD);
	CHECK(parse_whole(HTTP_REQUEST, 0, s, len - 1, &m) == HTTP_MORE);
	free(s);
}

/* Every case here must be rejected as HTTP_ERR_BAD. */
static void test_smuggling(void)
{
	static const char *const bad[] = {
	    /* CL + TE, in both orders */
	    "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n",
	    "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n",
	    /* TE other than exactly chunked */
	    "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n"
	    "Transfer-Encoding: chunked\r\n\r\n",
	    "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked, chunked\r\n\r\n",
	    "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
	    "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: xchunked\r\n\r\n",
	    "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunkedx\r\n\r\n",
	    "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: identity\r\n\r\n",
	    "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: \"chunked\"\r\n\r\n",
	    "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding:\r\n\r\n",
	    "POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
	    /* Content-Length not plain digits, or repeated */
	    "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 5, 5\r\n\r\nhello",
	    "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\nhello",
	    "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello",
	    "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: +5\r\n\r\nhello",
	    "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: -1\r\n\r\n",
	    "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 5 5\r\n\r\n",
	    "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 0x5\r\n\r\n",
	    "POST / HTTP/1.1\r\nHost: h\r\nContent-Length:\r\n\r\n",
	    "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 99999999999999999999\r\n\r\n",
	    "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 4611686018427387905\r\n\r\n",
	    /* header syntax */
	    "POST / HTTP/1.1\r\nHost: h\r\nContent-Length : 5\r\n\r\nhello",
	    "POST / HTTP/1.1\r\nHost: h\r\nContent-Length\t: 5\r\n\r\nhello",
	    "GET / HTTP/1.1\r\nHost: h\r\nX-A: 1\r\n  folded\r\n\r\n",
	    "GET / HTTP/1.1\r\n Host: h\r\n\r\n",
	    "GET / HTTP/1.1\r\nHost: h\r\n\tX: 1\r\n\r\n",
	    "GET / HTTP/1.1\r\nHost: h\r\nX-A: a\x7f\r\n\r\n",
	    "GET / HTTP/1.1\r\nHost: h\r\nX-A: a\rb\r\n\r\n",
	    "GET / HTTP/1.1\r\nHost: h\r\nX-A: a\x01\r\n\r\n",
	    "GET / HTTP/1.1\r\nHost: h\r\n: empty-name\r\n\r\n",
	    "GET / HTTP/1.1\r\nHost: h\r\nNo-Colon\r\n\r\n",
	    "GET / HTTP/1.1\r\nHost: h\r\nX(A): 1\r\n\r\n",
	    "GET / HTTP/1.1\r\nHost: h\r\nX\x80: 1\r\n\r\n",
	    /* bare LF / bare CR */
	    "GET / HTTP/1.1\nHost: h\r\n\r\n",
	    "GET / HTTP/1.1\r\nHost: h\n\r\n",
	    "GET / HTTP/1.1\r\nHost: h\r\n\n",
	    "GET / HTTP/1.1\r\nHost: h\r\r\n\r\n",
	    "GET / HTTP/1.1\rHost: h\r\n\r\n",
	    "\nGET / HTTP/1.1\r\nHost: h\r\n\r\n",
	    "\r\rGET / HTTP/1.1\r\nHost: h\r\n\r\n",
	    /* Host */
	    "GET / HTTP/1.1\r\n\r\n",
	    "GET / HTTP/1.1\r\nHost: a\r\nHost: a\r\n\r\n",
	    "GET / HTTP/1.0\r\nHost: a\r\nhost: b\r\n\r\n",
	    "GET / HTTP/1.1\r\nHost: a b\r\n\r\n",
	    "GET / HTTP/1.1\r\nHost: a/b\r\n\r\n",
	    "GET / HTTP/1.1\r\nHost: user@a\r\n\r\n",
	    /* request-line */
	    "GET / HTTP/2.0\r\nHost: h\r\n\r\n",
	    "GET / HTTP/1.2\r\nHost: h\r\n\r\n",
	    "GET / HTTP/0.9\r\nHost: h\r\n\r\n",
	    "GET / http/1.1\r\nHost: h\r\n\r\n",
	    "GET / HTTP/1.1 \r\nHost: h\r\n\r\n",
	    "GET /\r\nHost: h\r\n\r\n",
	    "GET  / HTTP/1.1\r\nHost: h\r\n\r\n",
	    "GET /  HTTP/1.1\r\nHost: h\r\n\r\n",
	    " GET / HTTP/1.1\r\nHost: h\r\n\r\n",
	    "GET\t/ HTTP/1.1\r\nHost: h\r\n\r\n",
	    "G(T / HTTP/1.1\r\nHost: h\r\n\r\n",
	    "GE@T / HTTP/1.1\r\nHost: h\r\n\r\n",
	    "G\xc3\x89T / HTTP/1.1\r\nHost: h\r\n\r\n",
	    "GET /a#frag HTTP/1.1\r\nHost: h\r\n\r\n",
	    "GET /caf\xc3\xa9 HTTP/1.1\r\nHost: h\r\n\r\n",
	    "GET /a\x01 HTTP/1.1\r\nHost: h\r\n\r\n",
	    "GET /a\tb HTTP/1.1\r\nHost: h\r\n\r\n",
	    "GET ftp://h/ HTTP/1.1\r\nHost: h\r\n\r\n",
	    "GET http:///x HTTP/1.1\r\nHost: h\r\n\r\n",
	    "GET * HTTP/1.1\r\nHost: h\r\n\r\n",
	    "GET a HTTP/1.1\r\nHost: h\r\n\r\n",
	    "\r\nHTTP/1.1 200 OK\r\n\r\n",
	};
	size_t i;

	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct http_msg *m;
		enum http_status st;
		size_t len = strlen(bad[i]);

		st = parse_whole(HTTP_REQUEST, TEST_BODY_LIMIT, bad[i], len, &m);
		if (st != HTTP_ERR_BAD)
			fprintf(stderr, "not rejected: case %zu: %s\n", i, bad[i]);
		CHECK(st == HTTP_ERR_BAD);
		http_msg_free(m);
		st = parse_bytewise(HTTP_REQUEST, TEST_BODY_LIMIT, bad[i], len, &m);
		CHECK(st == HTTP_ERR_BAD);
		http_msg_free(m);
	}
}

/* NUL bytes cannot hide in a value, a name or the request-line. */
static void test_nul(void)
{
	static const char nul_value[] = "GET / HTTP/1.1\r\nHost: h\r\nX-A: a\0b\r\n\r\n";
	static const char nul_name[] = "GET / HTTP/1.1\r\nHost: h\r\nX\0A: b\r\n\r\n";
	static const char nul_target[] = "GET /\0 HTTP/1.1\r\nHost: h\r\n\r\n";
	static const char nul_chunk[] =
	    "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n"
	    "\r\n1;\0\r\nx\r\n0\r\n\r\n";
	struct http_msg *m;

	CHECK(parse_whole(HTTP_REQUEST, 0, nul_value, sizeof(nul_value) - 1, &m) == HTTP_ERR_BAD);
	CHECK(parse_whole(HTTP_REQUEST, 0, nul_name, sizeof(nul_name) - 1, &m) == HTTP_ERR_BAD);
	CHECK(parse_whole(HTTP_REQUEST, 0, nul_target, sizeof(nul_target) - 1, &m) == HTTP_ERR_BAD);
	CHECK(parse_whole(HTTP_REQUEST, 0, nul_chunk, sizeof(nul_chunk) - 1, &m) == HTTP_ERR_BAD);
}

/* Cases a strict parser must still accept. */
static void test_accepted(void)
{
	static const char *const good[] = {
	    "\r\n\r\nGET / HTTP/1.1\r\nHost: h\r\n\r\n",
	    "GET / HTTP/1.1\r\nHost: h:8080\r\n\r\n",
	    "GET / HTTP/1.1\r\nHost: [::1]:8080\r\n\r\n",
	    "GET / HTTP/1.1\r\nHost:\r\n\r\n",
	    "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 0005\r\n\r\nhello",
	    "POST / HTTP/1.1\r\nHost: h\r\nContent-Length:5\t\r\n\r\nhello",
	    "POST / HTTP/1.1\r\nHost: h\r\ntransfer-encoding:  CHUNKED \r\n\r\n0\r\n\r\n",
	    "PATCH /x HTTP/1.1\r\nhost: h\r\nX-A: \"q\" (c) {} \t v\r\n\r\n",
	    "M-SEARCH /a!$&'()*+,;=:@%20?/q=[x]|{y}^`~\\ HTTP/1.1\r\nHost: h\r\n\r\n",
	    "GET http://h/ HTTP/1.1\r\nHost: h\r\n\r\n",
	    "VERSION-CONTROL /x HTTP/1.1\r\nHost: h\r\n\r\n",
	    "OPTIONS * HTTP/1.0\r\n\r\n",
	    "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 1000\r\n\r\n",
	};
	size_t i;

	for (i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
		struct http_msg *m;
		enum http_status st =
		    parse_whole(HTTP_REQUEST, TEST_BODY_LIMIT, good[i], strlen(good[i]), &m);
		size_t len = strlen(good[i]);

		if (strstr(good[i], "Content-Length: 1000")) {
			CHECK(st == HTTP_MORE);
			continue;
		}
		if (st != HTTP_DONE)
			fprintf(stderr, "not accepted: case %zu: %s\n", i, good[i]);
		CHECK(st == HTTP_DONE);
		http_msg_free(m);
		CHECK(parse_bytewise(HTTP_REQUEST, TEST_BODY_LIMIT, good[i], len, &m) == HTTP_DONE);
		http_msg_free(m);
	}
}

/* The request line's method and target: what is refused, and the path routes see. */
static void test_targets(void)
{
	static const struct {
		const char *line, *path, *query;
	} ok[] = {
	    {"POST /api/courses HTTP/1.1", "/api/courses", NULL},
	    {"POST /api/courses/ HTTP/1.1", "/api/courses", NULL},
	    {"POST //api//courses HTTP/1.1", "/api/courses", NULL},
	    {"POST /api/%63ourses HTTP/1.1", "/api/courses", NULL},
	    {"POST /api/courses;x=1 HTTP/1.1", "/api/courses", NULL},
	    {"POST /API/Courses HTTP/1.1", "/API/Courses", NULL},
	    {"POST /api/./x/../courses?b=1&a=2 HTTP/1.1", "/api/courses", "b=1&a=2"},
	    {"POST /a/%2f/%7E%41/%2e%2E/b HTTP/1.1", "/a/%2F/b", NULL},
	    {"POST /a/%7e%41%2E HTTP/1.1", "/a/~A.", NULL},
	    {"POST http://h:8080/api/courses?q HTTP/1.1", "/api/courses", "q"},
	    {"POST HTTPS://h HTTP/1.1", "/", NULL},
	    {"POST http://h?x=1 HTTP/1.1", "/", "x=1"},
	    {"POST / HTTP/1.1", "/", NULL},
	    {"POST /..;/x/..;/y HTTP/1.1", NULL, NULL},
	    {"OPTIONS * HTTP/1.1", "*", NULL},
	};
	static const struct {
		const char *line;
		enum http_status st;
	} bad[] = {
	    {"post /x HTTP/1.1", HTTP_ERR_METHOD},
	    {"Post /x HTTP/1.1", HTTP_ERR_METHOD},
	    {"POST1 /x HTTP/1.1", HTTP_ERR_METHOD},
	    {"PO.ST /x HTTP/1.1", HTTP_ERR_METHOD},
	    {"CONNECT /api/courses HTTP/1.1", HTTP_ERR_CONNECT},
	    {"CONNECT h:443 HTTP/1.1", HTTP_ERR_CONNECT},
	    {"CONNECT * HTTP/1.1", HTTP_ERR_CONNECT},
	    {"CONNECT http://h/x HTTP/1.0", HTTP_ERR_CONNECT},
	    {"POST /a/%zz HTTP/1.1", HTTP_ERR_TARGET},
	    {"POST /a/%4 HTTP/1.1", HTTP_ERR_TARGET},
	    {"POST /a%00b HTTP/1.1", HTTP_ERR_TARGET},
	    {"POST /a/../.. HTTP/1.1", HTTP_ERR_TARGET},
	    {"POST /%2e%2e/x HTTP/1.1", HTTP_ERR_TARGET},
	    {"POST http://h/../x HTTP/1.1", HTTP_ERR_TARGET},
	};
	char text[256];
	struct http_msg *m;
	enum http_status st;
	size_t i;

	for (i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		snprintf(text, sizeof(text), "%s\r\nHost: h\r\n\r\n", ok[i].line);
		st = parse_whole(HTTP_REQUEST, TEST_BODY_LIMIT, text, strlen(text), &m);
		if (!ok[i].path) {
			CHECK(st == HTTP_ERR_TARGET);
			http_msg_free(m);
			continue;
		}
		CHECK(st == HTTP_DONE);
		if (st != HTTP_DONE)
			continue;
		CHECK_STR(m->path, ok[i].path);
		CHECK(m->path_len == strlen(ok[i].path));
		CHECK((m->query == NULL) == (ok[i].query == NULL));
		if (ok[i].query && m->query)
			CHECK_STR(m->query, ok[i].query);
		/* The target stays as it came: that is what goes upstream. */
		CHECK(strncmp(text + strlen(m->method) + 1, m->target, strlen(m->target)) == 0);
		CHECK(m->raw_path_len == strcspn(m->target, "?"));
		http_msg_free(m);
	}
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		snprintf(text, sizeof(text), "%s\r\nHost: h\r\n\r\n", bad[i].line);
		st = parse_whole(HTTP_REQUEST, TEST_BODY_LIMIT, text, strlen(text), &m);
		if (st != bad[i].st)
			fprintf(stderr, "case %zu: %s: status %d\n", i, bad[i].line, st);
		CHECK(st == bad[i].st);
		http_msg_free(m);
		CHECK(parse_bytewise(HTTP_REQUEST, TEST_BODY_LIMIT, text, strlen(text), &m) ==
		      bad[i].st);
		http_msg_free(m);
	}
}

/*
 * What the target before its query holds that servers may read as "/":
 * a backslash, %2F or %5C in either case, wherever it is (a ;parameter, an
 * absolute-form target's authority), but never what the query holds.
 */
static void test_slash_alias(void)
{
	static const struct {
		const char *line;
		int alias;
	} cases[] = {
	    {"POST /api/courses HTTP/1.1", 0},
	    {"POST /api%2Fcourses HTTP/1.1", 1},
	    {"POST /api%2fcourses HTTP/1.1", 1},
	    {"POST /api%5Ccourses HTTP/1.1", 1},
	    {"POST /api%5ccourses HTTP/1.1", 1},
	    {"POST /api\\courses HTTP/1.1", 1},
	    {"POST /api/courses%2F HTTP/1.1", 1},
	    {"POST /x;\\..\\api HTTP/1.1", 1},
	    {"POST /a;p=%2f/b HTTP/1.1", 1},
	    {"POST http://h\\api/courses HTTP/1.1", 1},
	    {"POST http://h/api%2Fcourses?x HTTP/1.1", 1},
	    {"GET /files/a%2Fb HTTP/1.1", 1},
	    {"POST /api/courses?next=%2F%5C\\ HTTP/1.1", 0},
	    {"POST /a%252Fb HTTP/1.1", 0},
	    {"POST /a%2e%2Ab%20 HTTP/1.1", 0},
	    {"POST /a%2 HTTP/1.1", -1}, /* malformed: refused before it matters */
	    {"OPTIONS * HTTP/1.1", 0},
	};
	char text[256];
	struct http_msg *m;
	enum http_status st;
	size_t i;

	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		snprintf(text, sizeof(text), "%s\r\nHost: h\r\n\r\n", cases[i].line);
		st = parse_whole(HTTP_REQUEST, TEST_BODY_LIMIT, text, strlen(text), &m);
		if (cases[i].alias < 0) {
			CHECK(st == HTTP_ERR_TARGET);
		} else {
			CHECK(st == HTTP_DONE);
			if (st == HTTP_DONE && m->slash_alias != cases[i].alias)
				fprintf(stderr, "case %zu: %s: slash_alias %d\n", i, cases[i].line,
					m->slash_alias);
			CHECK(st == HTTP_DONE && m->slash_alias == cases[i].alias);
		}
		http_msg_free(m);
	}
}

static void test_empty_lines_limit(void)
{
	char s[128] = "";
	int i;

	for (i = 0; i < 9; i++)
		strcat(s, "\r\n");
	strcat(s, "GET / HTTP/1.1\r\nHost: h\r\n\r\n");
	CHECK(req(s) == HTTP_ERR_BAD);
	CHECK(req(s + 2) == HTTP_DONE);
	/* Empty lines alone do not start a message. */
	{
		struct http_parser *p = http_parser_new(HTTP_REQUEST, 0);
		struct evbuffer *in = evbuffer_new();

		evbuffer_add(in, "\r\n\r\n", 4);
		CHECK(http_parser_feed(p, in) == HTTP_MORE);
		CHECK(!http_parser_started(p));
		CHECK(http_parser_eof(p) == HTTP_MORE);
		evbuffer_free(in);
		http_parser_free(p);
	}
}

/* A request of exactly total bytes: filler header padded to the size. */
static char *make_head(size_t total, size_t *len)
{
	const char *start = "GET / HTTP/1.1\r\nHost: h\r\nX-Pad: ";
	char *s = malloc(total + 1);
	size_t sl = strlen(start);

	memcpy(s, start, sl);
	memset(s + sl, 'a', total - sl - 4);
	memcpy(s + total - 4, "\r\n\r\n", 4);
	s[total] = '\0';
	*len = total;
	return s;
}

static void test_head_limits(void)
{
	struct http_msg *m;
	size_t len;
	char *s, *big;
	int i;

	s = make_head(HTTP_MAX_HEAD, &len);
	CHECK(parse_whole(HTTP_REQUEST, 0, s, len, &m) == HTTP_DONE);
	http_msg_free(m);
	free(s);
	s = make_head(HTTP_MAX_HEAD + 1, &len);
	CHECK(parse_whole(HTTP_REQUEST, 0, s, len, &m) == HTTP_ERR_HEAD_TOO_LARGE);
	/* Detected as soon as HTTP_MAX_HEAD bytes hold no blank line. */
	CHECK(parse_whole(HTTP_REQUEST, 0, s, HTTP_MAX_HEAD, &m) == HTTP_ERR_HEAD_TOO_LARGE);
	CHECK(parse_whole(HTTP_REQUEST, 0, s, HTTP_MAX_HEAD - 1, &m) == HTTP_MORE);
	free(s);

	big = malloc(64 + (HTTP_MAX_HEADERS + 1) * 16);
	strcpy(big, "GET / HTTP/1.1\r\nHost: h\r\n");
	for (i = 1; i < HTTP_MAX_HEADERS; i++)
		sprintf(big + strlen(big), "X-%d: v\r\n", i);
	len = strlen(big);
	strcat(big, "\r\n");
	CHECK(parse_whole(HTTP_REQUEST, 0, big, strlen(big), &m) == HTTP_DONE);
	if (m) {
		CHECK(m->nheaders == HTTP_MAX_HEADERS);
		http_msg_free(m);
	}
	strcpy(big + len, "X-Last: v\r\n\r\n");
	CHECK(parse_whole(HTTP_REQUEST, 0, big, strlen(big), &m) == HTTP_ERR_HEAD_TOO_LARGE);
	/* Too many lines fail before the head ends. */
	CHECK(parse_whole(HTTP_REQUEST, 0, big, strlen(big) - 2, &m) == HTTP_ERR_HEAD_TOO_LARGE);
	free(big);

	/* A request line that alone fills the limit: the target is too long. */
	s = malloc(HTTP_MAX_HEAD + 64);
	strcpy(s, "GET /");
	memset(s + 5, 'a', HTTP_MAX_HEAD);
	strcpy(s + 5 + HTTP_MAX_HEAD, " HTTP/1.1\r\n\r\n");
	CHECK(parse_whole(HTTP_REQUEST, 0, s, strlen(s), &m) == HTTP_ERR_TARGET_TOO_LONG);
	free(s);
}

static void test_body_limits(void)
{
	struct http_parser *p = http_parser_new(HTTP_REQUEST, TEST_BODY_LIMIT);
	struct evbuffer *in = evbuffer_new();
	const char *s = "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 1001\r\n\r\n";
	struct http_msg *m;

	/* From Content-Length, before any body byte; the head is available. */
	evbuffer_add(in, s, strlen(s));
	CHECK(http_parser_feed(p, in) == HTTP_ERR_BODY_TOO_LARGE);
	CHECK(http_parser_head_complete(p));
	CHECK(http_parser_msg(p) && http_parser_msg(p)->content_length == 1001);
	CHECK(http_parser_feed(p, in) == HTTP_ERR_BODY_TOO_LARGE);
	CHECK(http_parser_eof(p) == HTTP_ERR_BODY_TOO_LARGE);
	evbuffer_free(in);
	http_parser_free(p);

	s = "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 4611686018427387904\r\n\r\n";
	CHECK(parse_whole(HTTP_REQUEST, TEST_BODY_LIMIT, s, strlen(s), &m) ==
	      HTTP_ERR_BODY_TOO_LARGE);
	/* While decoding chunks: the size line that crosses the limit fails. */
	s = "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n"
	    "3\r\nabc\r\n1\r\n";
	CHECK(parse_whole(HTTP_REQUEST, 3, s, strlen(s), &m) == HTTP_ERR_BODY_TOO_LARGE);
	s = "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n"
	    "fffffffffffffff\r\n";
	CHECK(parse_whole(HTTP_REQUEST, TEST_BODY_LIMIT, s, strlen(s), &m) ==
	      HTTP_ERR_BODY_TOO_LARGE);
	/* No limit: a huge chunk is only waited for. */
	CHECK(parse_whole(HTTP_REQUEST, 0, s, strlen(s), &m) == HTTP_MORE);
}

static void test_keep_alive(void)
{
	static const struct {
		const char *head;
		int keep_alive;
	} cases[] = {
	    {"GET / HTTP/1.1\r\nHost: h\r\n\r\n", 1},
	    {"GET / HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n", 0},
	    {"GET / HTTP/1.1\r\nHost: h\r\nConnection: X-Foo ,  CLOSE\r\n\r\n", 0},
	    {"GET / HTTP/1.1\r\nHost: h\r\nConnection: x\r\nConnection: Close\r\n\r\n", 0},
	    {"GET / HTTP/1.1\r\nHost: h\r\nConnection: closed\r\n\r\n", 1},
	    {"GET / HTTP/1.1\r\nHost: h\r\nConnection: keep-alive\r\n\r\n", 1},
	    {"GET / HTTP/1.0\r\n\r\n", 0},
	    {"GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n", 1},
	    {"GET / HTTP/1.0\r\nConnection: keep-alive, close\r\n\r\n", 0},
	    {"GET / HTTP/1.0\r\nKeep-Alive: 5\r\n\r\n", 0},
	};
	size_t i;

	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct http_msg *m;

		CHECK(parse_whole(HTTP_REQUEST, 0, cases[i].head, strlen(cases[i].head), &m) ==
		      HTTP_DONE);
		if (!m)
			continue;
		if (m->keep_alive != cases[i].keep_alive)
			fprintf(stderr, "keep_alive case %zu\n", i);
		CHECK(m->keep_alive == cases[i].keep_alive);
		http_msg_free(m);
	}
}

static void test_expect(void)
{
	const char *s;
	struct http_msg *m;

	s = "POST / HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\nContent-Length: 1\r\n\r\nx";
	CHECK(parse_whole(HTTP_REQUEST, 0, s, strlen(s), &m) == HTTP_DONE);
	CHECK(m && m->expect_continue);
	http_msg_free(m);
	s = "POST / HTTP/1.0\r\nExpect: 100-continue\r\nContent-Length: 1\r\n\r\nx";
	CHECK(parse_whole(HTTP_REQUEST, 0, s, strlen(s), &m) == HTTP_DONE);
	CHECK(m && !m->expect_continue);
	http_msg_free(m);
	s = "POST / HTTP/1.1\r\nHost: h\r\nExpect: 200-ok\r\nContent-Length: 1\r\n\r\nx";
	CHECK(parse_whole(HTTP_REQUEST, 0, s, strlen(s), &m) == HTTP_DONE);
	CHECK(m && !m->expect_continue);
	http_msg_free(m);
}

static void test_hop_headers(void)
{
	/* every header's value says whether it is hop-by-hop here */
	const char *s = "GET / HTTP/1.1\r\nHost: 0\r\nConnection: X-Secret, keep-alive\r\n"
			"Connection: ,x-other ,\r\nkeep-alive: 1\r\nPROXY-CONNECTION: 1\r\n"
			"Proxy-Authenticate: 1\r\nproxy-authorization: 1\r\nte: 1\r\n"
			"Trailer: 1\r\nUpgrade: 1\r\nx-secret: 1\r\nX-OTHER: 1\r\nX-Secre: 0\r\n"
			"Content-Type: 0\r\nTrailers: 0\r\nhttp2-settings: 1\r\n"
			"transfer-encoding: chunked\r\n\r\n0\r\n\r\n";
	struct http_msg *m;

	CHECK(parse_whole(HTTP_REQUEST, 0, s, strlen(s), &m) == HTTP_DONE);
	if (!m)
		return;
	CHECK(m->nheaders == 17);
	for (int i = 0; i < m->nheaders; i++) {
		const struct http_header *h = &m->headers[i];
		int hop = h->known == HTTP_N_CONNECTION || h->known == HTTP_N_TRANSFER_ENCODING ||
			  strcmp(h->value, "1") == 0;
		if (http_header_is_hop(m, h) != hop)
			fprintf(stderr, "header %s: hop-by-hop %d\n", h->name, !hop);
		CHECK(http_header_is_hop(m, h) == hop);
	}
	CHECK(http_msg_header_count(m, "connection") == 2);
	CHECK(m->connection_names);
	http_msg_free(m);

	/* Connection naming only close, keep-alive or upgrade lists nothing more */
	s = "GET / HTTP/1.1\r\nHost: h\r\nConnection: Keep-Alive , close,UPGRADE\r\n\r\n";
	CHECK(parse_whole(HTTP_REQUEST, 0, s, strlen(s), &m) == HTTP_DONE);
	if (!m)
		return;
	CHECK(!m->connection_names);
	CHECK(http_msg_known(m, HTTP_N_HOST) && !strcmp(http_msg_known(m, HTTP_N_HOST), "h"));
	CHECK(!http_msg_known(m, HTTP_N_UPGRADE));
	http_msg_free(m);
}

/* Every name http_name_of knows, in any case, and names beside them that it must not. */
static void test_name_classes(void)
{
	static const struct {
		const char *name;
		enum http_name known;
	} names[] = {
	    {"Connection", HTTP_N_CONNECTION},
	    {"Keep-Alive", HTTP_N_KEEP_ALIVE},
	    {"Proxy-Connection", HTTP_N_PROXY_CONNECTION},
	    {"Proxy-Authenticate", HTTP_N_PROXY_AUTHENTICATE},
	    {"Proxy-Authorization", HTTP_N_PROXY_AUTHORIZATION},
	    {"TE", HTTP_N_TE},
	    {"Trailer", HTTP_N_TRAILER},
	    {"Transfer-Encoding", HTTP_N_TRANSFER_ENCODING},
	    {"Upgrade", HTTP_N_UPGRADE},
	    {"HTTP2-Settings", HTTP_N_HTTP2_SETTINGS},
	    {"Content-Length", HTTP_N_CONTENT_LENGTH},
	    {"Host", HTTP_N_HOST},
	    {"Expect", HTTP_N_EXPECT},
	    {"Via", HTTP_N_VIA},
	    {"Forwarded", HTTP_N_FORWARDED},
	    {"X-Forwarded-For", HTTP_N_X_FORWARDED_FOR},
	    {"X-Forwarded-Proto", HTTP_N_X_FORWARDED_PROTO},
	    {"X-Forwarded-Host", HTTP_N_X_FORWARDED_HOST},
	    {"X-Real-IP", HTTP_N_X_REAL_IP},
	    {"Content-Type", HTTP_N_CONTENT_TYPE},
	};
	static const char *const others[] = {
	    "", "T", "TEE", "Hosts", "Hos", "Content-Types", "Content-Lengths", "Trailers",
	    "X-Forwarded-Fo", "X-Forwarded-Port", "Proxy-Authorizatio", "Proxy-Authorizations",
	    "Upgrade-Insecure-Requests", "Connectio", "Keep-Alive2", "Via:",
	    "HTTP2-Setting", "HTTP2-Settings-", "HTTP2_Settings",
	};
	char lower[32], upper[32];

	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		size_t n = strlen(names[i].name);
		for (size_t k = 0; k <= n; k++) {
			lower[k] = (char)tolower((unsigned char)names[i].name[k]);
			upper[k] = (char)toupper((unsigned char)names[i].name[k]);
		}
		CHECK(http_name_of(names[i].name, n) == names[i].known);
		CHECK(http_name_of(lower, n) == names[i].known);
		CHECK(http_name_of(upper, n) == names[i].known);
	}
	for (size_t i = 0; i < sizeof(others) / sizeof(others[0]); i++)
		CHECK(http_name_of(others[i], strlen(others[i])) == HTTP_N_OTHER);
}

/* Feed a response whole; no_body as for a HEAD request. */
static enum http_status resp(const char *s, int no_body, struct http_msg **out)
{
	struct http_parser *p = http_parser_new(HTTP_RESPONSE, TEST_BODY_LIMIT);
	struct evbuffer *in = evbuffer_new();
	enum http_status st;

	*out = NULL;
	http_parser_expect_no_body(p, no_body);
	evbuffer_add(in, s, strlen(s));
	st = http_parser_feed(p, in);
	if (st == HTTP_MORE)
		st = http_parser_eof(p);
	if (st == HTTP_DONE)
		*out = http_parser_take(p);
	evbuffer_free(in);
	http_parser_free(p);
	return st;
}

static void test_responses(void)
{
	struct http_msg *m;

	CHECK(resp("HTTP/1.1 201 Created\r\nContent-Length: 2\r\nX: y\r\n\r\nok", 0, &m) ==
	      HTTP_DONE);
	if (m) {
		CHECK(m->kind == HTTP_RESPONSE);
		CHECK(m->status == 201);
		CHECK_STR(m->reason, "Created");
		CHECK(m->keep_alive);
		CHECK(body_is(m, "ok"));
		CHECK(m->method == NULL && m->path == NULL);
		http_msg_free(m);
	}
	CHECK(resp("HTTP/1.1 200\r\nContent-Length: 0\r\n\r\n", 0, &m) == HTTP_DONE);
	if (m) {
		CHECK_STR(m->reason, "");
		http_msg_free(m);
	}
	CHECK(resp("HTTP/1.0 404 Not  Found \t\r\nContent-Length: 0\r\n\r\n", 0, &m) == HTTP_DONE);
	if (m) {
		CHECK_STR(m->reason, "Not  Found \t");
		CHECK(!m->keep_alive);
		http_msg_free(m);
	}
	CHECK(resp("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
		   "3;x\r\nabc\r\n0\r\nT: 1\r\n\r\n",
		   0, &m) == HTTP_DONE);
	if (m) {
		CHECK(m->chunked);
		CHECK(body_is(m, "abc"));
		CHECK(m->keep_alive);
		http_msg_free(m);
	}
	/* Until close: eof completes it and forbids keep-alive. */
	CHECK(resp("HTTP/1.1 200 OK\r\nX: y\r\n\r\nall of it", 0, &m) == HTTP_DONE);
	if (m) {
		CHECK(body_is(m, "all of it"));
		CHECK(!m->keep_alive);
		CHECK(m->content_length == -1);
		http_msg_free(m);
	}
	/* HEAD, 204, 304: no body whatever the headers say. */
	CHECK(resp("HTTP/1.1 200 OK\r\nContent-Length: 1234\r\n\r\n", 1, &m) == HTTP_DONE);
	if (m) {
		CHECK(m->content_length == 1234);
		CHECK(evbuffer_get_length(m->body) == 0);
		CHECK(m->keep_alive);
		http_msg_free(m);
	}
	CHECK(resp("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", 1, &m) == HTTP_DONE);
	http_msg_free(m);
	CHECK(resp("HTTP/1.1 204 No Content\r\n\r\n", 0, &m) == HTTP_DONE);
	CHECK(m && m->keep_alive && evbuffer_get_length(m->body) == 0);
	http_msg_free(m);
	CHECK(resp("HTTP/1.1 304 Not Modified\r\nContent-Length: 10\r\n\r\n", 0, &m) == HTTP_DONE);
	CHECK(m && m->keep_alive && evbuffer_get_length(m->body) == 0);
	http_msg_free(m);

	/* Truncated messages. */
	CHECK(resp("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nabc", 0, &m) == HTTP_ERR_BAD);
	CHECK(resp("HTTP/1.1 200 OK\r\nContent-Len", 0, &m) == HTTP_ERR_BAD);
	CHECK(resp("H", 0, &m) == HTTP_ERR_BAD);
	CHECK(resp("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nabcde\r\n", 0, &m) ==
	      HTTP_ERR_BAD);
	CHECK(resp("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n", 0, &m) ==
	      HTTP_ERR_BAD);
	CHECK(resp("", 0, &m) == HTTP_MORE);

	/* Framing and syntax errors. */
	CHECK(resp("HTTP/1.1 200 OK\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n", 0,
		   &m) == HTTP_ERR_BAD);
	CHECK(resp("HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n", 0, &m) == HTTP_ERR_BAD);
	CHECK(resp("HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nabc", 0, &m) ==
	      HTTP_ERR_BAD);
	CHECK(resp("HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\nab", 0, &m) ==
	      HTTP_ERR_BAD);
	CHECK(resp("HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 0, &m) ==
	      HTTP_ERR_BAD);
	CHECK(resp("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n", 0, &m) ==
	      HTTP_ERR_BAD);
	CHECK(resp("HTTP/1.1 600 Bad\r\n\r\n", 0, &m) == HTTP_ERR_BAD);
	CHECK(resp("HTTP/1.1 099 Bad\r\n\r\n", 0, &m) == HTTP_ERR_BAD);
	CHECK(resp("HTTP/1.1 20 OK\r\n\r\n", 0, &m) == HTTP_ERR_BAD);
	CHECK(resp("HTTP/1.1 2000 OK\r\n\r\n", 0, &m) == HTTP_ERR_BAD);
	CHECK(resp("HTTP/1.1  200 OK\r\n\r\n", 0, &m) == HTTP_ERR_BAD);
	CHECK(resp("HTTP/2 200 OK\r\n\r\n", 0, &m) == HTTP_ERR_BAD);
	CHECK(resp("HTTP/2.0 200 OK\r\n\r\n", 0, &m) == HTTP_ERR_BAD);
	CHECK(resp("HTTP/1.2 200 OK\r\n\r\n", 0, &m) == HTTP_ERR_BAD);
	CHECK(resp("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nx\rX", 0, &m) ==
	      HTTP_ERR_BAD);
	CHECK(resp("HTTP/1.1 200 O\x01K\r\n\r\n", 0, &m) == HTTP_ERR_BAD);
	CHECK(resp("HTTP/1.1 200 OK\nContent-Length: 0\r\n\r\n", 0, &m) == HTTP_ERR_BAD);
	CHECK(resp("\r\nHTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", 0, &m) == HTTP_ERR_BAD);
	CHECK(resp("HTTP/1.1 200 OK\r\nX : y\r\nContent-Length: 0\r\n\r\n", 0, &m) == HTTP_ERR_BAD);
}

static void test_response_limits(void)
{
	struct http_parser *p = http_parser_new(HTTP_RESPONSE, 4);
	struct evbuffer *in = evbuffer_new();
	const char *s = "HTTP/1.1 200 OK\r\n\r\nabc";
	struct http_msg *m;

	evbuffer_add(in, s, strlen(s));
	CHECK(http_parser_feed(p, in) == HTTP_MORE);
	evbuffer_add(in, "d", 1);
	CHECK(http_parser_feed(p, in) == HTTP_MORE);
	evbuffer_add(in, "e", 1);
	CHECK(http_parser_feed(p, in) == HTTP_ERR_BODY_TOO_LARGE);
	http_parser_free(p);
	evbuffer_drain(in, evbuffer_get_length(in));

	/* Until close in pieces, with feeds that bring nothing. */
	p = http_parser_new(HTTP_RESPONSE, 0);
	evbuffer_add(in, s, strlen(s));
	CHECK(http_parser_feed(p, in) == HTTP_MORE);
	CHECK(http_parser_head_complete(p));
	CHECK(http_parser_feed(p, in) == HTTP_MORE);
	evbuffer_add(in, "de", 2);
	CHECK(http_parser_feed(p, in) == HTTP_MORE);
	CHECK(http_parser_eof(p) == HTTP_DONE);
	m = http_parser_take(p);
	CHECK(m && body_is(m, "abcde") && !m->keep_alive);
	http_msg_free(m);
	http_parser_free(p);

	p = http_parser_new(HTTP_RESPONSE, 4);
	s = "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n";
	evbuffer_drain(in, evbuffer_get_length(in));
	evbuffer_add(in, s, strlen(s));
	CHECK(http_parser_feed(p, in) == HTTP_ERR_BODY_TOO_LARGE);
	http_parser_free(p);
	evbuffer_free(in);
}

/* 100 Continue (and other 1xx) are skipped; the final response follows. */
static void test_interim(void)
{
	struct http_parser *p = http_parser_new(HTTP_RESPONSE, 0);
	struct evbuffer *in = evbuffer_new();
	const char *s = "HTTP/1.1 100 Continue\r\n\r\n";
	struct http_msg *m;

	evbuffer_add(in, s, strlen(s));
	CHECK(http_parser_feed(p, in) == HTTP_MORE);
	CHECK(evbuffer_get_length(in) == 0);
	CHECK(http_parser_started(p));
	CHECK(!http_parser_head_complete(p));
	s = "HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n"
	    "\r\nhi"
	    "HTTP/1.1 100 Continue\r\n\r\n";
	evbuffer_add(in, s, strlen(s));
	CHECK(http_parser_feed(p, in) == HTTP_DONE);
	m = http_parser_take(p);
	CHECK(m && m->status == 200 && body_is(m, "hi"));
	http_msg_free(m);
	CHECK(http_parser_feed(p, in) == HTTP_MORE);
	CHECK(http_parser_started(p));
	/* A 1xx then eof is a truncated response. */
	CHECK(http_parser_eof(p) == HTTP_ERR_BAD);
	evbuffer_free(in);
	http_parser_free(p);

	CHECK(resp("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n", 0, &m) ==
	      HTTP_DONE);
	CHECK(m && m->status == 204);
	http_msg_free(m);
}

/* Keep-alive upstream: HEAD then GET on one parser; expect_no_body resets. */
static void test_response_sequence(void)
{
	struct http_parser *p = http_parser_new(HTTP_RESPONSE, 0);
	struct evbuffer *in = evbuffer_new();
	const char *s = "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\n"
			"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabc";
	struct http_msg *m;

	evbuffer_add(in, s, strlen(s));
	http_parser_expect_no_body(p, 1);
	CHECK(http_parser_feed(p, in) == HTTP_DONE);
	m = http_parser_take(p);
	CHECK(m && evbuffer_get_length(m->body) == 0);
	http_msg_free(m);
	CHECK(http_parser_feed(p, in) == HTTP_DONE);
	m = http_parser_take(p);
	CHECK(m && body_is(m, "abc") && m->keep_alive);
	http_msg_free(m);
	CHECK(evbuffer_get_length(in) == 0);
	evbuffer_free(in);
	http_parser_free(p);
}

/* A body spread over many evbuffer chains arrives intact. */
static void test_large_body(void)
{
	struct http_parser *p = http_parser_new(HTTP_REQUEST, 0);
	struct evbuffer *in = evbuffer_new();
	const char *s = "PUT /big HTTP/1.1\r\nHost: h\r\nContent-Length: 300000\r\n\r\n";
	char chunk[1000];
	struct http_msg *m;
	int i;
	enum http_status st = HTTP_MORE;

	evbuffer_add(in, s, strlen(s));
	for (i = 0; i < 300; i++) {
		memset(chunk, 'a' + i % 26, sizeof(chunk));
		evbuffer_add(in, chunk, sizeof(chunk));
		st = http_parser_feed(p, in);
	}
	CHECK(st == HTTP_DONE);
	m = http_parser_take(p);
	CHECK(m && evbuffer_get_length(m->body) == 300000);
	if (m) {
		unsigned char *b = evbuffer_pullup(m->body, -1);

		CHECK(b[0] == 'a' && b[299999] == 'a' + 299 % 26);
		http_msg_free(m);
	}
	evbuffer_free(in);
	http_parser_free(p);
}

/* A head in one-byte evbuffer chains: CR and LF meet across chains. */
static enum http_status parse_chained(const char *s, struct http_msg **out)
{
	struct http_parser *p = http_parser_new(HTTP_REQUEST, TEST_BODY_LIMIT);
	struct evbuffer *in = evbuffer_new();
	enum http_status st;
	size_t i;

	*out = NULL;
	for (i = 0; s[i]; i++)
		evbuffer_add_reference(in, s + i, 1, NULL, NULL);
	st = http_parser_feed(p, in);
	if (st == HTTP_DONE)
		*out = http_parser_take(p);
	evbuffer_free(in);
	http_parser_free(p);
	return st;
}

static void test_chains(void)
{
	struct http_msg *m;

	CHECK(parse_chained("POST /chains?q HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\n"
			    "X-Long-Header-Name: some value here\r\n\r\nabc",
			    &m) == HTTP_DONE);
	if (m) {
		CHECK_STR(m->path, "/chains");
		CHECK_STR(http_msg_header(m, "x-long-header-name"), "some value here");
		CHECK(body_is(m, "abc"));
		http_msg_free(m);
	}
	CHECK(parse_chained("GET / HTTP/1.1\r\nHost: h\r\nX-A: a\r\nX-B: b\nX: c\r\n\r\n", &m) ==
	      HTTP_ERR_BAD);
	CHECK(parse_chained("POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n"
			    "3;e=f\r\nabc\r\n10\r\n0123456789abcdef\r\n0\r\nT: 1\r\n\r\n",
			    &m) == HTTP_DONE);
	if (m) {
		CHECK(body_is(m, "abc0123456789abcdef"));
		http_msg_free(m);
	}
}

/* Trailers count toward the head limits. */
static void test_trailer_limits(void)
{
	const char *start = "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n";
	size_t head = strlen(start) - 3, len;
	char *s = malloc(HTTP_MAX_HEAD + 256);
	struct http_msg *m;
	int i;

	/* head + trailer field exactly HTTP_MAX_HEAD, then one byte more */
	strcpy(s, start);
	len = strlen(s);
	memcpy(s + len, "T: ", 3);
	memset(s + len + 3, 'v', HTTP_MAX_HEAD - head - 5);
	strcpy(s + len + 3 + HTTP_MAX_HEAD - head - 5, "\r\n\r\n");
	CHECK(parse_whole(HTTP_REQUEST, 0, s, strlen(s), &m) == HTTP_DONE);
	http_msg_free(m);
	strcpy(s + len + 3 + HTTP_MAX_HEAD - head - 5, "v\r\n\r\n");
	CHECK(parse_whole(HTTP_REQUEST, 0, s, strlen(s), &m) == HTTP_ERR_HEAD_TOO_LARGE);

	/* 2 header fields + 98 trailer fields is the most */
	strcpy(s, start);
	for (i = 0; i < HTTP_MAX_HEADERS - 2; i++)
		strcat(s, "T: 1\r\n");
	len = strlen(s);
	strcat(s, "\r\n");
	CHECK(parse_whole(HTTP_REQUEST, 0, s, strlen(s), &m) == HTTP_DONE);
	http_msg_free(m);
	strcpy(s + len, "T: 1\r\n\r\n");
	CHECK(parse_whole(HTTP_REQUEST, 0, s, strlen(s), &m) == HTTP_ERR_HEAD_TOO_LARGE);
	http_msg_free(m);
	free(s);
}

/* HTTP_OPT_HEAD: a head with a body stops there; taken, its body streams. */
static void test_head_first_streaming(void)
{
	static const char *const framings[] = {
		"POST /up HTTP/1.1\r\nHost: a\r\nContent-Length: 11\r\n\r\nhello world",
		"POST /up HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"
		"5\r\nhello\r\n6\r\n world\r\n0\r\nX-T: 1\r\n\r\n",
	};

	for (size_t f = 0; f < sizeof(framings) / sizeof(framings[0]); f++) {
		struct http_parser *p = http_parser_new(HTTP_REQUEST, 4);
		struct evbuffer *in = evbuffer_new(), *got = evbuffer_new();
		const char *s = framings[f];
		size_t len = strlen(s), i, done = 0;
		enum http_status st = HTTP_MORE;
		struct http_msg *m = NULL;

		http_parser_set_options(p, HTTP_OPT_HEAD);
		/* Byte by byte: the head first, then the body as it comes. */
		for (i = 0; i < len && st != HTTP_DONE; i++) {
			evbuffer_add(in, s + i, 1);
			st = http_parser_feed(p, in);
			if (st == HTTP_HEAD) {
				CHECK(!m);
				CHECK(http_parser_limit_body(p, 0) == 0); /* the 4 no longer holds */
				m = http_parser_take_head(p);
				CHECK(m && strcmp(m->path, "/up") == 0);
				CHECK(http_parser_msg(p) == NULL);
				st = http_parser_feed(p, in);
			}
			CHECK(st == HTTP_MORE || st == HTTP_DONE);
			if (m && http_parser_body(p))
				evbuffer_add_buffer(got, http_parser_body(p));
		}
		CHECK(st == HTTP_DONE && i == len);
		CHECK(m && evbuffer_get_length(m->body) == 0);
		done = evbuffer_get_length(got);
		CHECK(done == 11 && memcmp(evbuffer_pullup(got, -1), "hello world", 11) == 0);
		/* The head was taken: take readies the parser, returns nothing. */
		CHECK(http_parser_take(p) == NULL);
		evbuffer_add(in, "GET / HTTP/1.1\r\nHost: a\r\n\r\n", 27);
		CHECK(http_parser_feed(p, in) == HTTP_DONE);
		http_msg_free(http_parser_take(p));
		http_msg_free(m);
		evbuffer_free(got);
		evbuffer_free(in);
		http_parser_free(p);
	}
}

/* HTTP_OPT_HEAD: a body limit set after the head, from Content-Length or as chunks come. */
static void test_limit_after_head(void)
{
	struct http_parser *p = http_parser_new(HTTP_REQUEST, 0);
	struct evbuffer *in = evbuffer_new();
	const char *big = "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 10\r\n\r\n";
	const char *chunked = "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"
			      "3\r\nabc\r\n3\r\ndef\r\n0\r\n\r\n";

	http_parser_set_options(p, HTTP_OPT_HEAD);
	evbuffer_add(in, big, strlen(big));
	CHECK(http_parser_feed(p, in) == HTTP_HEAD);
	CHECK(http_parser_limit_body(p, 9) == -1);
	CHECK(http_parser_feed(p, in) == HTTP_ERR_BODY_TOO_LARGE);
	http_parser_free(p);

	p = http_parser_new(HTTP_REQUEST, 0);
	http_parser_set_options(p, HTTP_OPT_HEAD);
	evbuffer_drain(in, evbuffer_get_length(in));
	evbuffer_add(in, chunked, strlen(chunked));
	CHECK(http_parser_feed(p, in) == HTTP_HEAD);
	CHECK(http_parser_limit_body(p, 5) == 0);
	CHECK(http_parser_feed(p, in) == HTTP_ERR_BODY_TOO_LARGE);
	http_parser_free(p);

	/* Without a body there is no HTTP_HEAD: the message is complete. */
	p = http_parser_new(HTTP_REQUEST, 0);
	http_parser_set_options(p, HTTP_OPT_HEAD);
	evbuffer_drain(in, evbuffer_get_length(in));
	evbuffer_add(in, "GET / HTTP/1.1\r\nHost: a\r\n\r\n", 27);
	CHECK(http_parser_feed(p, in) == HTTP_DONE);
	http_msg_free(http_parser_take(p));
	http_parser_free(p);
	evbuffer_free(in);
}

/* HTTP_OPT_INTERIM: 103 is a message of its own; 100 is still skipped. */
static void test_interim_kept(void)
{
	struct http_parser *p = http_parser_new(HTTP_RESPONSE, 0);
	struct evbuffer *in = evbuffer_new();
	const char *s = "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n"
			"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhi";
	struct http_msg *m;

	http_parser_set_options(p, HTTP_OPT_INTERIM);
	http_parser_expect_no_body(p, 1);
	evbuffer_add(in, s, strlen(s));
	CHECK(http_parser_feed(p, in) == HTTP_DONE);
	m = http_parser_take(p);
	CHECK(m && m->status == 103 && strcmp(http_msg_header(m, "Link"), "</a>") == 0);
	http_msg_free(m);
	/* The HEAD setting survives the interim response. */
	CHECK(http_parser_feed(p, in) == HTTP_DONE);
	m = http_parser_take(p);
	CHECK(m && m->status == 200 && evbuffer_get_length(m->body) == 0);
	CHECK(evbuffer_get_length(in) == 2);
	http_msg_free(m);
	evbuffer_free(in);
	http_parser_free(p);
}

/* A 101 answers only a request that asked to upgrade; what follows is not HTTP. */
static void test_upgrade_response(void)
{
	const char *s = "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
			"Connection: Upgrade\r\n\r\n\x81\x02hi";
	struct http_parser *p = http_parser_new(HTTP_RESPONSE, 0);
	struct evbuffer *in = evbuffer_new();
	struct http_msg *m;

	CHECK(resp(s, 0, &m) == HTTP_ERR_BAD);
	http_msg_free(m);
	http_parser_expect_upgrade(p, 1);
	evbuffer_add(in, s, strlen(s));
	CHECK(http_parser_feed(p, in) == HTTP_DONE);
	m = http_parser_take(p);
	CHECK(m && m->status == 101 && evbuffer_get_length(in) == 4);
	http_msg_free(m);
	evbuffer_free(in);
	http_parser_free(p);
}

/* Requests that ask to switch protocols. */
static void test_wants_upgrade(void)
{
	static const struct {
		const char *head;
		int want;
	} cases[] = {
		{"GET / HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n", 1},
		{"GET / HTTP/1.1\r\nHost: a\r\nConnection: keep-alive, upgrade\r\nUpgrade: h2c\r\n\r\n", 1},
		{"GET / HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\n\r\n", 0},
		{"GET / HTTP/1.1\r\nHost: a\r\nConnection: upgrade\r\n\r\n", 0},
		{"GET / HTTP/1.0\r\nConnection: upgrade\r\nUpgrade: websocket\r\n\r\n", 0},
		{"GET / HTTP/1.1\r\nHost: a\r\nConnection: upgrade\r\nUpgrade: a\r\nUpgrade: b\r\n\r\n", 0},
	};
	struct http_msg *m;

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		CHECK(parse_whole(HTTP_REQUEST, 0, cases[i].head, strlen(cases[i].head), &m) ==
		      HTTP_DONE);
		CHECK(m && http_msg_wants_upgrade(m) == cases[i].want);
		http_msg_free(m);
	}
}

/* HTTP_OPT_TRAILERS keeps a chunked body's trailer fields, normalised, until the message is taken. */
static void test_trailers_kept(void)
{
	static const char resp[] = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
				   "3\r\nabc\r\n0\r\nGrpc-Status:  0 \r\ngrpc-message: ok\r\n\r\n";
	struct http_parser *p = http_parser_new(HTTP_RESPONSE, 0);
	struct evbuffer *in = evbuffer_new();
	struct evbuffer *t;
	struct http_msg *m;
	char text[128];
	size_t len;

	evbuffer_add(in, resp, sizeof(resp) - 1);
	http_parser_set_options(p, HTTP_OPT_HEAD | HTTP_OPT_TRAILERS);
	CHECK(http_parser_feed(p, in) == HTTP_HEAD);
	m = http_parser_take_head(p);
	CHECK(http_parser_trailers(p) == NULL);
	CHECK(http_parser_feed(p, in) == HTTP_DONE);
	t = http_parser_trailers(p);
	CHECK(t != NULL);
	if (t) {
		len = evbuffer_copyout(t, text, sizeof(text) - 1);
		text[len] = '\0';
		CHECK_STR(text, "Grpc-Status: 0\r\ngrpc-message: ok\r\n");
	}
	CHECK(evbuffer_get_length(http_parser_body(p)) == 3);
	http_parser_take(p);
	CHECK(http_parser_trailers(p) == NULL);
	http_msg_free(m);
	evbuffer_free(in);
	http_parser_free(p);
}

/* http_trailers_keep: what goes on after the body, within the head limits. */
static void test_trailers_filtered(void)
{
	static const char resp[] = "HTTP/1.1 200 OK\r\nConnection: x-hop\r\nContent-Length: 0\r\n"
				   "Content-Type: a/b\r\n\r\n";
	static const char fields[] = "grpc-status: 0\r\nConnection: close\r\nTE: trailers\r\n"
				     "Transfer-Encoding: chunked\r\nContent-Length: 3\r\n"
				     "Host: h\r\nDate: x\r\nX-Request-Id: r\r\nX-Hop: 1\r\n"
				     "Trailer: a\r\ngrpc-message: ok\r\n";
	struct evbuffer *in = evbuffer_new(), *to = evbuffer_new();
	struct http_msg *m = NULL;
	char text[256];
	size_t len;

	CHECK(parse_whole(HTTP_RESPONSE, 0, resp, sizeof(resp) - 1, &m) == HTTP_DONE);
	CHECK(m != NULL);
	if (!m || !in || !to)
		return;
	evbuffer_add(in, fields, sizeof(fields) - 1);
	CHECK(http_trailers_keep(m, in, to) == 9);
	CHECK(evbuffer_get_length(in) == 0);
	len = evbuffer_copyout(to, text, sizeof(text) - 1);
	text[len] = '\0';
	CHECK_STR(text, "grpc-status: 0\r\ngrpc-message: ok\r\n");
	/* With the head's own, no more than HTTP_MAX_HEADERS fields. */
	evbuffer_drain(to, evbuffer_get_length(to));
	for (int i = 0; i < HTTP_MAX_HEADERS; i++)
		evbuffer_add_printf(in, "x-t%d: v\r\n", i);
	CHECK(http_trailers_keep(m, in, to) == m->nheaders);
	http_msg_free(m);
	evbuffer_free(in);
	evbuffer_free(to);
}

/* http_msg_field: a trailer first, then the head; names in any case. */
static void test_msg_field(void)
{
	static const char resp[] = "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n"
				   "grpc-status: 3\r\nX-Only-Head: h\r\n\r\n";
	struct http_msg *m = NULL;
	const char *v;
	size_t len = 99;

	CHECK(parse_whole(HTTP_RESPONSE, 0, resp, sizeof(resp) - 1, &m) == HTTP_DONE);
	if (!m)
		return;
	v = http_msg_field(m, "grpc-status", &len);
	CHECK(v && len == 1 && v[0] == '3');
	m->trailers = evbuffer_new();
	evbuffer_add_printf(m->trailers, "grpc-statusx: 1\r\nGRPC-Status: 13\r\nempty: \r\n");
	v = http_msg_field(m, "grpc-status", &len);
	CHECK(v && len == 2 && memcmp(v, "13", 2) == 0);
	v = http_msg_field(m, "empty", &len);
	CHECK(v && len == 0);
	v = http_msg_field(m, "x-only-head", &len);
	CHECK(v && len == 1 && v[0] == 'h');
	CHECK(http_msg_field(m, "grpc-message", &len) == NULL);
	CHECK(http_msg_field(m, "grpc", &len) == NULL);
	http_msg_free(m);
}

int main(void)
{
	test_msg_field();
	test_name_classes();
	test_simple_get();
	test_bytewise_post();
	test_pipelined();
	test_chunked();
	test_chunk_line_limit();
	test_smuggling();
	test_nul();
	test_accepted();
	test_targets();
	test_slash_alias();
	test_empty_lines_limit();
	test_head_limits();
	test_body_limits();
	test_keep_alive();
	test_expect();
	test_hop_headers();
	test_responses();
	test_response_limits();
	test_interim();
	test_response_sequence();
	test_large_body();
	test_chains();
	test_trailer_limits();
	test_head_first_streaming();
	test_limit_after_head();
	test_interim_kept();
	test_upgrade_response();
	test_wants_upgrade();
	test_trailers_kept();
	test_trailers_filtered();
	UNIT_DONE("http");
}
