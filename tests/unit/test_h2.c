/* Unit tests of proxy/h2.c's request mapping: an HTTP/2 header list to an HTTP/1.1 head. */
#include "proxy/h2.h"

#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>

#include "proxy/http.h"
#include "tests/unit/unit.h"

#define F(n, v)                                                                                    \
	{                                                                                          \
		(const uint8_t *)(n), sizeof(n) - 1, (const uint8_t *)(v), sizeof(v) - 1           \
	}
#define N(list) (sizeof(list) / sizeof(list[0]))

static char head_text[4096];

/* The head h2_request_head makes of f[0..n), into head_text; its refusal code. */
static enum h2_refusal map(const struct h2_field *f, size_t n, int body_follows, int *chunked)
{
	struct evbuffer *out = evbuffer_new();
	enum h2_refusal rc = h2_request_head(f, n, body_follows, out, chunked);
	size_t len = evbuffer_get_length(out);

	if (len >= sizeof(head_text))
		len = sizeof(head_text) - 1;
	evbuffer_remove(out, head_text, len);
	head_text[len] = '\0';
	evbuffer_free(out);
	return rc;
}

/* head_text through the HTTP/1.1 request parser: the message, or NULL. */
static struct http_msg *parse_back(void)
{
	struct http_parser *p = http_parser_new(HTTP_REQUEST, 0);
	struct evbuffer *in = evbuffer_new();
	struct http_msg *m = NULL;

	evbuffer_add(in, head_text, strlen(head_text));
	http_parser_set_options(p, HTTP_OPT_HEAD);
	switch (http_parser_feed(p, in)) {
	case HTTP_DONE:
		m = http_parser_take(p);
		break;
	case HTTP_HEAD:
		m = http_parser_take_head(p);
		break;
	default:
		break;
	}
	evbuffer_free(in);
	http_parser_free(p);
	return m;
}

static void test_get(void)
{
	const struct h2_field f[] = {F(":method", "GET"), F(":scheme", "https"),
				     F(":authority", "api.example"), F(":path", "/a/b?c=1"),
				     F("accept", "*/*")};
	int chunked = -1;
	struct http_msg *m;

	CHECK(map(f, N(f), 0, &chunked) == H2_OK);
	CHECK(chunked == 0);
	CHECK_STR(head_text, "GET /a/b?c=1 HTTP/1.1\r\nhost: api.example\r\naccept: */*\r\n\r\n");
	m = parse_back();
	CHECK(m != NULL);
	if (m) {
		CHECK_STR(m->method, "GET");
		CHECK_STR(m->target, "/a/b?c=1");
		CHECK_STR(http_msg_header(m, "Host"), "api.example");
		http_msg_free(m);
	}
}

static void test_bodies(void)
{
	const struct h2_field chunk[] = {F(":method", "POST"), F(":path", "/x"),
					 F(":authority", "h")};
	const struct h2_field length[] = {F(":method", "POST"), F(":path", "/x"),
					  F(":authority", "h"), F("content-length", "5")};
	int chunked;
	struct http_msg *m;

	CHECK(map(chunk, N(chunk), 1, &chunked) == H2_OK);
	CHECK(chunked == 1);
	CHECK(strstr(head_text, "transfer-encoding: chunked\r\n") != NULL);
	m = parse_back();
	CHECK(m && m->chunked);
	http_msg_free(m);

	CHECK(map(chunk, N(chunk), 0, &chunked) == H2_OK);
	CHECK(chunked == 0);
	CHECK(strstr(head_text, "transfer-encoding") == NULL);

	CHECK(map(length, N(length), 1, &chunked) == H2_OK);
	CHECK(chunked == 0);
	m = parse_back();
	CHECK(m && m->content_length == 5 && !m->chunked);
	http_msg_free(m);
}

static void test_authority_and_cookies(void)
{
	const struct h2_field f[] = {
	    F(":method", "GET"),    F(":path", "/"),	F(":authority", "a.example"),
	    F("host", "b.example"), F("cookie", "a=1"), F("x-y", "z"),
	    F("cookie", "b=2")};
	const struct h2_field host_only[] = {F(":method", "GET"), F(":path", "/"),
					     F("host", "b.example")};
	int chunked;
	struct http_msg *m;

	CHECK(map(f, N(f), 0, &chunked) == H2_OK);
	m = parse_back();
	CHECK(m != NULL);
	if (m) {
		CHECK(http_msg_header_count(m, "Host") == 1);
		CHECK_STR(http_msg_header(m, "Host"), "a.example");
		CHECK(http_msg_header_count(m, "Cookie") == 1);
		CHECK_STR(http_msg_header(m, "Cookie"), "a=1; b=2");
		CHECK_STR(http_msg_header(m, "X-Y"), "z");
		http_msg_free(m);
	}
	CHECK(map(host_only, N(host_only), 0, &chunked) == H2_OK);
	m = parse_back();
	CHECK(m && http_msg_header(m, "Host") &&
	      strcmp(http_msg_header(m, "Host"), "b.example") == 0);
	http_msg_free(m);
}

static void test_options_star(void)
{
	const struct h2_field ok[] = {F(":method", "OPTIONS"), F(":path", "*"),
				      F(":authority", "h")};
	const struct h2_field bad[] = {F(":method", "GET"), F(":path", "*"), F(":authority", "h")};
	int chunked;

	CHECK(map(ok, N(ok), 0, &chunked) == H2_OK);
	CHECK_STR(head_text, "OPTIONS * HTTP/1.1\r\nhost: h\r\n\r\n");
	CHECK(map(bad, N(bad), 0, &chunked) == H2_BAD_PATH);
}

static void test_refusals(void)
{
	const struct h2_field connect[] = {F(":method", "CONNECT"), F(":authority", "h:443")};
	const struct h2_field no_path[] = {F(":method", "GET"), F(":authority", "h")};
	const struct h2_field rel_path[] = {F(":method", "GET"), F(":path", "x"),
					    F(":authority", "h")};
	const struct h2_field space_path[] = {F(":method", "GET"), F(":path", "/a b")};
	const struct h2_field no_method[] = {F(":path", "/")};
	const struct h2_field bad_method[] = {F(":method", "G T"), F(":path", "/")};
	const struct h2_field twice[] = {F(":method", "GET"), F(":method", "GET"), F(":path", "/")};
	const struct h2_field unknown[] = {F(":method", "GET"), F(":path", "/"),
					   F(":protocol", "x")};
	const struct h2_field late[] = {F(":method", "GET"), F("a", "b"), F(":path", "/")};
	const struct h2_field conn[] = {F(":method", "GET"), F(":path", "/"),
					F("connection", "close")};
	const struct h2_field upgrade[] = {F(":method", "GET"), F(":path", "/"),
					   F("upgrade", "h2c")};
	const struct h2_field te_gzip[] = {F(":method", "GET"), F(":path", "/"), F("te", "gzip")};
	const struct h2_field te_ok[] = {F(":method", "GET"), F(":path", "/"), F("te", "trailers")};
	const struct h2_field crlf[] = {F(":method", "GET"), F(":path", "/"),
					F("x", "a\r\nInjected: 1")};
	const struct h2_field upper[] = {F(":method", "GET"), F(":path", "/"), F("X-A", "b")};
	const struct h2_field edge[] = {F(":method", "GET"), F(":path", "/"), F("x", " b")};
	const struct h2_field nul[] = {F(":method", "GET"),
				       F(":path", "/"),
				       {(const uint8_t *)"x", 1, (const uint8_t *)"a\0b", 3}};
	int chunked;

	CHECK(map(connect, N(connect), 0, &chunked) == H2_CONNECT);
	CHECK(map(no_path, N(no_path), 0, &chunked) == H2_BAD_PATH);
	CHECK(map(rel_path, N(rel_path), 0, &chunked) == H2_BAD_PATH);
	CHECK(map(space_path, N(space_path), 0, &chunked) == H2_BAD_PATH);
	CHECK(map(no_method, N(no_method), 0, &chunked) == H2_BAD_PSEUDO);
	CHECK(map(bad_method, N(bad_method), 0, &chunked) == H2_BAD_METHOD);
	CHECK(map(twice, N(twice), 0, &chunked) == H2_BAD_PSEUDO);
	CHECK(map(unknown, N(unknown), 0, &chunked) == H2_BAD_PSEUDO);
	CHECK(map(late, N(late), 0, &chunked) == H2_BAD_PSEUDO);
	CHECK(map(conn, N(conn), 0, &chunked) == H2_CONN_SPECIFIC);
	CHECK(map(upgrade, N(upgrade), 0, &chunked) == H2_CONN_SPECIFIC);
	CHECK(map(te_gzip, N(te_gzip), 0, &chunked) == H2_CONN_SPECIFIC);
	CHECK(map(te_ok, N(te_ok), 0, &chunked) == H2_OK);
	CHECK(map(crlf, N(crlf), 0, &chunked) == H2_BAD_FIELD);
	CHECK(map(upper, N(upper), 0, &chunked) == H2_BAD_FIELD);
	CHECK(map(edge, N(edge), 0, &chunked) == H2_BAD_FIELD);
	CHECK(map(nul, N(nul), 0, &chunked) == H2_BAD_FIELD);
	/* A refusal leaves the output as it was. */
	CHECK_STR(head_text, "");
}

static void test_preface(void)
{
	CHECK(h2_preface_prefix(H2_PREFACE, H2_PREFACE_LEN));
	CHECK(h2_preface_prefix("PRI * HT", 8));
	CHECK(h2_preface_prefix("", 0));
	CHECK(!h2_preface_prefix("PRI / HT", 8));
	CHECK(!h2_preface_prefix("GET / HTTP/1.1\r\n", 16));
	CHECK(!h2_preface_prefix(H2_PREFACE "x", H2_PREFACE_LEN + 1));
}

int main(void)
{
	test_get();
	test_bodies();
	test_authority_and_cookies();
	test_options_star();
	test_refusals();
	test_preface();
	UNIT_DONE("test_h2");
}
