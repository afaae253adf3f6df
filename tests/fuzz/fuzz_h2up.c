/*
 * libFuzzer target for proxy/h2up.c's mapping between HTTP/2 fields and
 * HTTP/1.1 messages.
 *
 * Response side: the input's first three bytes give a :status and whether
 * the response has no body; the rest is a list of fields, each a name
 * length byte, a value length byte, then the bytes (any bytes: HPACK
 * carries any). A field h2up_field_add accepts must be one HTTP/1.1 can
 * carry (a token for a name, no CR, LF or NUL in the value), one it
 * refuses must leave the lines untouched, and the head h2up_response_msg
 * makes of them must have the :status and exactly the accepted fields, in
 * order, with the names as sent.
 *
 * Request side: the whole input is parsed as an HTTP/1.1 request (what
 * forward.c hands); a request that parses maps to at most H2UP_MAX_FIELDS
 * fields, the four pseudo-headers first, no Host nor hop-by-hop field,
 * every name lower-case and TE only as "trailers".
 * Built by the Makefile (`make fuzz`).
 */
#include "proxy/h2up.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <event2/buffer.h>

#include "proxy/http.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fuzz_fail(const char *what)
{
	fprintf(stderr, "fuzz_h2up: %s\n", what);
	abort();
}

static int fuzz_tchar(unsigned char ch)
{
	return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
	       (ch && strchr("!#$%&'*+-.^_`|~", ch));
}

static int fuzz_carriable(const uint8_t *name, size_t nlen, const uint8_t *value, size_t vlen)
{
	if (nlen == 0)
		return 0;
	for (size_t i = 0; i < nlen; i++) {
		if (!fuzz_tchar(name[i]))
			return 0;
	}
	return !memchr(value, '\r', vlen) && !memchr(value, '\n', vlen) && !memchr(value, 0, vlen);
}

#define FUZZ_FIELDS 64

static void fuzz_response(const uint8_t *data, size_t size)
{
	struct evbuffer *lines = evbuffer_new();
	const uint8_t *names[FUZZ_FIELDS];
	size_t nlens[FUZZ_FIELDS];
	int added = 0, status, no_body;
	struct http_msg *m;
	size_t at = 3;

	if (size < 3 || !lines)
		goto out;
	status = 100 + (data[0] | data[1] << 8) % 900;
	no_body = data[2] & 1;
	while (at + 2 <= size && added < FUZZ_FIELDS) {
		size_t nlen = data[at], vlen = data[at + 1], before = evbuffer_get_length(lines);
		const uint8_t *name = data + at + 2, *value = name + nlen;

		if (at + 2 + nlen + vlen > size)
			break;
		at += 2 + nlen + vlen;
		if (h2up_field_add(lines, name, nlen, value, vlen) == 0) {
			if (!fuzz_carriable(name, nlen, value, vlen))
				fuzz_fail("a field HTTP/1.1 cannot carry was accepted");
			names[added] = name;
			nlens[added++] = nlen;
		} else if (evbuffer_get_length(lines) != before) {
			fuzz_fail("a refused field changed the lines");
		}
	}
	m = h2up_response_msg(status, lines, no_body);
	if (evbuffer_get_length(lines) != 0)
		fuzz_fail("the lines were not taken");
	if (m) {
		if (m->status != status)
			fuzz_fail("the status changed");
		if (m->nheaders != added)
			fuzz_fail("the head has other fields than those added");
		for (int i = 0; i < m->nheaders; i++) {
			if (m->headers[i].name_len != nlens[i] ||
			    memcmp(m->headers[i].name, names[i], nlens[i]) != 0)
				fuzz_fail("a field's name changed");
		}
		http_msg_free(m);
	}
out:
	if (lines)
		evbuffer_free(lines);
}

static int fuzz_is(const struct h2up_field *f, const char *name)
{
	return f->name_len == strlen(name) && memcmp(f->name, name, f->name_len) == 0;
}

static void fuzz_request(const uint8_t *data, size_t size)
{
	static const char *const pseudo[] = {":method", ":scheme", ":authority", ":path"};
	static const char *const never[] = {"host",	     "connection", "keep-alive",
					    "proxy-connection", "transfer-encoding", "upgrade",
					    "http2-settings"};
	struct http_parser *p = http_parser_new(HTTP_REQUEST, 0);
	struct evbuffer *in = evbuffer_new();
	struct h2up_field f[H2UP_MAX_FIELDS];
	struct http_msg *m = NULL;
	int n;

	if (!p || !in)
		goto out;
	evbuffer_add(in, data, size);
	if (http_parser_feed(p, in) != HTTP_DONE || !(m = http_parser_take(p)))
		goto out;
	n = h2up_request_fields(m, "http", f);
	if (n < 0)
		goto out;
	if (n < 4 || n > H2UP_MAX_FIELDS)
		fuzz_fail("a field count out of range");
	for (int i = 0; i < 4; i++) {
		if (!fuzz_is(&f[i], pseudo[i]))
			fuzz_fail("the pseudo-headers are not first, in order");
	}
	for (int i = 4; i < n; i++) {
		if (f[i].name_len == 0 || f[i].name[0] == ':')
			fuzz_fail("a pseudo-header among the fields");
		for (size_t j = 0; j < f[i].name_len; j++) {
			if (f[i].name[j] >= 'A' && f[i].name[j] <= 'Z')
				fuzz_fail("an upper-case field name");
		}
		for (size_t k = 0; k < sizeof(never) / sizeof(never[0]); k++) {
			if (fuzz_is(&f[i], never[k]))
				fuzz_fail("Host or a hop-by-hop field went along");
		}
		if (fuzz_is(&f[i], "te") &&
		    (f[i].value_len != 8 || memcmp(f[i].value, "trailers", 8) != 0))
			fuzz_fail("TE other than trailers");
	}
out:
	http_msg_free(m);
	if (in)
		evbuffer_free(in);
	http_parser_free(p);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	fuzz_response(data, size);
	fuzz_request(data, size);
	return 0;
}
