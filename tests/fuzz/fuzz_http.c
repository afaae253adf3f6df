/*
 * libFuzzer target for proxy/http.c.
 *
 * The input (after two control bytes) is parsed as a request stream and as a
 * response stream, each fed whole, split in two at a point taken from the
 * control bytes, and (when short) one byte at a time; and once more with
 * the head taken first and the body streamed (HTTP_OPT_HEAD, interim
 * responses as messages). Every way of feeding must produce the same
 * transcript of messages and final status: an incremental parser must not
 * depend on how its input was cut, nor on whether its bodies stream. A
 * request's slash_alias must say whether its target before the query holds
 * a backslash, %2F or %5C, a request is asked which protocol it may
 * upgrade to (upgrade.h), which must be one of the allowed ones when there
 * is one, and no CONNECT request is ever handed out (HTTP_ERR_CONNECT).
 * The streamed run keeps trailers (HTTP_OPT_TRAILERS) and passes them
 * through http_trailers_keep, which must leave well-formed fields within
 * the head limits.
 * Built by the Makefile (`make fuzz`).
 */
#include "proxy/http.h"
#include "proxy/upgrade.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <event2/buffer.h>

#define FUZZ_MAX_BODY	  64   /* small, to reach the body limit paths */
#define FUZZ_BYTEWISE_MAX 2048 /* inputs fed byte by byte up to this size */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fuzz_fail(const char *what)
{
	fprintf(stderr, "fuzz_http: %s\n", what);
	abort();
}

/* The protocols fuzz_upgrade allows, as tunnel_upgrades would. */
static char *const fuzz_upgrades[] = {"websocket", "x-raw/2"};

/* Which protocol request m may switch to: NULL, or one of fuzz_upgrades by name. */
static void fuzz_upgrade(struct evbuffer *log, const struct http_msg *m)
{
	const char *to = upgrade_wanted(m, fuzz_upgrades, 2);
	size_t n;

	if (!to)
		return;
	n = strcspn(to, "/");
	if (!((n == 9 && !strncasecmp(to, "websocket", 9)) || (n == 5 && !strncasecmp(to, "x-raw", 5))))
		fuzz_fail("upgrade to a protocol not allowed");
	if (strpbrk(to, ", \t") || m->version_minor != 1)
		fuzz_fail("upgrade to a list of protocols, or from HTTP/1.0");
	evbuffer_add_printf(log, "UPGRADE %s\n", to);
}

/* 1 when the n bytes at t start "//" or hold a backslash, %2F or %5C in either case. */
static int fuzz_slash_alias(const char *t, size_t n)
{
	size_t i;

	if (n >= 2 && t[0] == '/' && t[1] == '/')
		return 1;
	for (i = 0; i < n; i++) {
		if (t[i] == '\\' || (n - i >= 3 && (strncasecmp(t + i, "%2F", 3) == 0 ||
						    strncasecmp(t + i, "%5C", 3) == 0)))
			return 1;
	}
	return 0;
}

/* Check the invariants of a finished message and append it to the log. */
static void fuzz_record(struct evbuffer *log, const struct http_msg *m)
{
	int i;

	if (!m || !m->body || m->nheaders < 0 || m->nheaders > HTTP_MAX_HEADERS)
		fuzz_fail("bad message");
	if (m->version_minor != 0 && m->version_minor != 1)
		fuzz_fail("bad version");
	if (m->chunked && m->content_length != -1)
		fuzz_fail("chunked with content-length");
	if (m->kind == HTTP_REQUEST) {
		if (!m->method[0] || !m->target[0] || strlen(m->path) != m->path_len)
			fuzz_fail("bad request line");
		if (strcmp(m->method, "CONNECT") == 0)
			fuzz_fail("a CONNECT request parsed");
		if (m->query && strlen(m->query) != m->query_len)
			fuzz_fail("bad query");
		if (m->raw_path_len != strcspn(m->target, "?") ||
		    m->slash_alias != fuzz_slash_alias(m->target, m->raw_path_len))
			fuzz_fail("bad slash_alias");
		if (m->content_length >= 0 &&
		    evbuffer_get_length(m->body) != (size_t)m->content_length)
			fuzz_fail("body length differs from content-length");
		evbuffer_add_printf(log, "REQ %s %s %d alias=%d\n", m->method, m->target,
				    m->version_minor, m->slash_alias);
		fuzz_upgrade(log, m);
	} else {
		if (m->status < 200 || m->status > 599 || !m->reason)
			fuzz_fail("bad status");
		evbuffer_add_printf(log, "RESP %d %s %d\n", m->status, m->reason, m->version_minor);
	}
	for (i = 0; i < m->nheaders; i++)
		evbuffer_add_printf(log, "%s: %s\n", m->headers[i].name, m->headers[i].value);
	evbuffer_add_printf(log, "cl=%lld chunked=%d ka=%d expect=%d body=%zu\n",
			    (long long)m->content_length, m->chunked, m->keep_alive,
			    m->expect_continue, evbuffer_get_length(m->body));
	if (evbuffer_get_length(m->body) > 0)
		evbuffer_add(log, evbuffer_pullup(m->body, -1), evbuffer_get_length(m->body));
}

/*
 * Parse data fed in pieces ending at the offsets in cuts (the last being
 * len), taking every finished message, then signal eof. The transcript goes
 * to log.
 */
/*
 * Streamed: the message whose head was taken (its body collected from
 * http_parser_body as a caller would drain it), or NULL.
 */
static struct http_msg *fuzz_streamed;

/* What http_trailers_keep leaves of p's trailers for streamed message m: fields within limits. */
static void fuzz_trailers(struct http_parser *p, const struct http_msg *m)
{
	struct evbuffer *t = http_parser_trailers(p), *out;
	int kept = 0, left_out;
	size_t len;
	char *line;

	if (!t)
		return;
	out = evbuffer_new();
	if (!out)
		fuzz_fail("out of memory");
	left_out = http_trailers_keep(m, t, out);
	if (left_out < 0 || evbuffer_get_length(t) != 0 || evbuffer_get_length(out) > HTTP_MAX_HEAD)
		fuzz_fail("trailers kept past the limits, or not all taken");
	while ((line = evbuffer_readln(out, &len, EVBUFFER_EOL_CRLF_STRICT))) {
		if (!memchr(line, ':', len) || line[0] == ':' || memchr(line, '\n', len))
			fuzz_fail("a trailer kept that is no field");
		kept++;
		free(line);
	}
	if (evbuffer_get_length(out) != 0 || (kept > 0 && m->nheaders + kept > HTTP_MAX_HEADERS))
		fuzz_fail("trailer fields past the head's field limit");
	evbuffer_free(out);
}

/* The finished message: the streamed one, or the one the parser holds. */
static struct http_msg *fuzz_take(struct http_parser *p)
{
	struct http_msg *m = fuzz_streamed;

	if (m) {
		evbuffer_add_buffer(m->body, http_parser_body(p));
		fuzz_trailers(p, m);
		if (http_parser_take(p))
			fuzz_fail("take returned a message whose head was taken");
		fuzz_streamed = NULL;
		return m;
	}
	if (!http_parser_head_complete(p) || !http_parser_msg(p))
		fuzz_fail("done without a head");
	return http_parser_take(p);
}

/* One feed; with streamed, a head is taken and its limit set as a caller would. */
static enum http_status fuzz_feed(struct http_parser *p, struct evbuffer *in, size_t max_body)
{
	enum http_status st = http_parser_feed(p, in);

	if (st == HTTP_HEAD) {
		if (fuzz_streamed)
			fuzz_fail("a head while a body streams");
		if (http_parser_limit_body(p, max_body) < 0)
			return HTTP_ERR_BODY_TOO_LARGE;
		fuzz_streamed = http_parser_take_head(p);
		if (!fuzz_streamed || http_parser_msg(p))
			fuzz_fail("head not taken");
		st = http_parser_feed(p, in);
		if (st == HTTP_HEAD)
			fuzz_fail("two heads in a row");
	}
	if (fuzz_streamed && (st == HTTP_MORE || st == HTTP_DONE))
		evbuffer_add_buffer(fuzz_streamed->body, http_parser_body(p));
	return st;
}

static void fuzz_run(enum http_kind kind, int no_body, size_t max_body, int streamed,
		     const uint8_t *data, const size_t *cuts, size_t ncuts, struct evbuffer *log)
{
	struct http_parser *p = http_parser_new(kind, streamed ? 0 : max_body);
	struct evbuffer *in = evbuffer_new();
	enum http_status st = HTTP_MORE;
	struct http_msg *m;
	size_t i, from = 0;

	if (!p || !in)
		fuzz_fail("out of memory");
	if (streamed)
		http_parser_set_options(p, HTTP_OPT_HEAD | HTTP_OPT_INTERIM | HTTP_OPT_TRAILERS);
	http_parser_expect_no_body(p, no_body);
	for (i = 0; i < ncuts && (st == HTTP_MORE || st == HTTP_DONE); i++) {
		evbuffer_add(in, data + from, cuts[i] - from);
		from = cuts[i];
		while ((st = fuzz_feed(p, in, max_body)) == HTTP_DONE) {
			int interim;

			m = fuzz_take(p);
			interim = m && m->kind == HTTP_RESPONSE && m->status < 200;
			/* Interim responses kept as messages are what the
			 * other runs skip: left out of the transcript. */
			if (!interim)
				fuzz_record(log, m);
			else if (m->status == 100 || m->status == 101 || !streamed)
				fuzz_fail("interim response of the wrong kind");
			http_msg_free(m);
			if (http_parser_take(p) || (http_parser_started(p) && !interim))
				fuzz_fail("parser not reset by take");
			if (!interim)
				http_parser_expect_no_body(p, no_body);
		}
	}
	if (st == HTTP_MORE) {
		st = http_parser_eof(p);
		if (st == HTTP_DONE) {
			m = fuzz_take(p);
			fuzz_record(log, m);
			http_msg_free(m);
		}
	}
	http_msg_free(fuzz_streamed);
	fuzz_streamed = NULL;
	evbuffer_add_printf(log, "END %d rest=%zu\n", (int)st,
			    st == HTTP_MORE || st == HTTP_DONE ? evbuffer_get_length(in) : 0);
	evbuffer_free(in);
	http_parser_free(p);
}

static void fuzz_compare(struct evbuffer *a, struct evbuffer *b, const char *what)
{
	size_t la = evbuffer_get_length(a), lb = evbuffer_get_length(b);

	if (la != lb || (la && memcmp(evbuffer_pullup(a, -1), evbuffer_pullup(b, -1), la) != 0))
		fuzz_fail(what);
}

/* All ways of feeding one kind of stream must agree. */
static void fuzz_kind(enum http_kind kind, int no_body, size_t max_body, const uint8_t *data,
		      size_t len, size_t split)
{
	struct evbuffer *whole = evbuffer_new(), *other = evbuffer_new();
	size_t cuts[2] = {split, len};
	size_t *bytes, i;

	fuzz_run(kind, no_body, max_body, 0, data, &len, 1, whole);
	fuzz_run(kind, no_body, max_body, 0, data, cuts, 2, other);
	fuzz_compare(whole, other, "split feed differs from whole feed");
	evbuffer_drain(other, evbuffer_get_length(other));
	fuzz_run(kind, no_body, max_body, 1, data, cuts, 2, other);
	fuzz_compare(whole, other, "streamed body differs from whole feed");
	if (len > 0 && len <= FUZZ_BYTEWISE_MAX) {
		bytes = malloc(len * sizeof(*bytes));
		for (i = 0; i < len; i++)
			bytes[i] = i + 1;
		evbuffer_drain(other, evbuffer_get_length(other));
		fuzz_run(kind, no_body, max_body, 0, data, bytes, len, other);
		fuzz_compare(whole, other, "bytewise feed differs from whole feed");
		evbuffer_drain(other, evbuffer_get_length(other));
		fuzz_run(kind, no_body, max_body, 1, data, bytes, len, other);
		fuzz_compare(whole, other, "bytewise streamed feed differs from whole feed");
		free(bytes);
	}
	evbuffer_free(whole);
	evbuffer_free(other);
}

/*
 * data[0] bit 0: responses answer HEAD; bit 1: apply FUZZ_MAX_BODY.
 * data[1]: where to split the rest, scaled to its length.
 */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	size_t len, split, max_body;

	if (size < 2)
		return 0;
	len = size - 2;
	split = len * data[1] / 255;
	max_body = data[0] & 2 ? FUZZ_MAX_BODY : 0;
	fuzz_kind(HTTP_REQUEST, 0, max_body, data + 2, len, split);
	fuzz_kind(HTTP_RESPONSE, data[0] & 1, max_body, data + 2, len, split);
	return 0;
}
