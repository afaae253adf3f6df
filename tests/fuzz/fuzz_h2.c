/*
 * libFuzzer target for proxy/h2.c's request mapping.
 *
 * The input is a header list: a control byte (bit 0: a body follows), then
 * fields, each a length byte and that many name bytes, a length byte and
 * that many value bytes. h2_request_head either refuses the list, leaving
 * its output empty, or writes an HTTP/1.1 head that the strict request
 * parser (proxy/http.c) either refuses or reads as exactly one request,
 * with nothing left over, whose method is :method, target :path, Host
 * :authority (else the host field), whose fields are the list's in order
 * (cookie crumbs joined into one Cookie, a host field dropped behind
 * :authority) and whose framing is chunked exactly when the mapping said.
 * Built by the Makefile (`make fuzz`).
 */
#include "proxy/h2.h"
#include "proxy/http.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <event2/buffer.h>

#define FUZZ_MAX_FIELDS 128

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fuzz_fail(const char *what)
{
	fprintf(stderr, "fuzz_h2: %s\n", what);
	abort();
}

/* The fields of the input into f; their count. */
static size_t fuzz_fields(const uint8_t *data, size_t size, struct h2_field *f)
{
	size_t n = 0, at = 0;

	while (n < FUZZ_MAX_FIELDS && at < size) {
		size_t nl = data[at++], vl;

		if (at + nl >= size)
			break;
		f[n].name = data + at;
		f[n].namelen = nl;
		at += nl;
		vl = data[at++];
		if (at + vl > size)
			break;
		f[n].value = data + at;
		f[n].valuelen = vl;
		at += vl;
		n++;
	}
	return n;
}

static int fuzz_is(const struct h2_field *f, const char *name)
{
	return f->namelen == strlen(name) && memcmp(f->name, name, f->namelen) == 0;
}

static int fuzz_eq(const char *s, size_t len, const uint8_t *v, size_t vlen)
{
	return len == vlen && memcmp(s, v, len) == 0;
}

/* The parsed request m against the list f[0..n) it was made of. */
static void fuzz_check(const struct http_msg *m, const struct h2_field *f, size_t n, int chunked)
{
	const struct h2_field *method = NULL, *path = NULL, *authority = NULL;
	int h = 0;
	int cookies = 0;

	for (size_t i = 0; i < n; i++) {
		if (fuzz_is(&f[i], ":method"))
			method = &f[i];
		else if (fuzz_is(&f[i], ":path"))
			path = &f[i];
		else if (fuzz_is(&f[i], ":authority"))
			authority = &f[i];
	}
	if (!method || !path)
		fuzz_fail("a request without :method or :path");
	if (!fuzz_eq(m->method, strlen(m->method), method->value, method->valuelen))
		fuzz_fail("the method is not :method");
	if (!fuzz_eq(m->target, strlen(m->target), path->value, path->valuelen))
		fuzz_fail("the target is not :path");
	if (m->chunked != chunked)
		fuzz_fail("the framing is not the one the mapping said");
	if (authority) {
		const char *host = http_msg_header(m, "Host");

		if (!host || http_msg_header_count(m, "Host") != 1 ||
		    !fuzz_eq(host, strlen(host), authority->value, authority->valuelen))
			fuzz_fail("Host is not :authority");
		h = 1; /* the head's first field */
	}
	for (size_t i = 0; i < n; i++) {
		const struct http_header *got;

		if (f[i].namelen && f[i].name[0] == ':')
			continue;
		if (fuzz_is(&f[i], "cookie")) {
			cookies++;
			continue;
		}
		if (authority && fuzz_is(&f[i], "host"))
			continue;
		if (h >= m->nheaders)
			fuzz_fail("a field went missing");
		got = &m->headers[h++];
		if (got->name_len != f[i].namelen ||
		    strncasecmp(got->name, (const char *)f[i].name, f[i].namelen) != 0 ||
		    !fuzz_eq(got->value, got->value_len, f[i].value, f[i].valuelen))
			fuzz_fail("a field changed on the way");
	}
	if (cookies && (h >= m->nheaders || strcasecmp(m->headers[h++].name, "cookie") != 0))
		fuzz_fail("the cookie crumbs are not one Cookie");
	if (h + chunked != m->nheaders)
		fuzz_fail("fields were added");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct h2_field f[FUZZ_MAX_FIELDS];
	struct evbuffer *out;
	struct http_parser *p;
	struct http_msg *m = NULL;
	size_t n;
	int body, chunked = 0;

	if (size < 1)
		return 0;
	body = data[0] & 1;
	n = fuzz_fields(data + 1, size - 1, f);
	out = evbuffer_new();
	if (h2_request_head(f, n, body, out, &chunked) != H2_OK) {
		if (evbuffer_get_length(out))
			fuzz_fail("a refused list left bytes behind");
		evbuffer_free(out);
		return 0;
	}
	if (chunked && !body)
		fuzz_fail("chunked without a body");
	p = http_parser_new(HTTP_REQUEST, 0);
	http_parser_set_options(p, HTTP_OPT_HEAD);
	switch (http_parser_feed(p, out)) {
	case HTTP_DONE:
		m = http_parser_take(p);
		break;
	case HTTP_HEAD:
		m = http_parser_take_head(p);
		break;
	case HTTP_MORE:
		fuzz_fail("the head is not complete");
		break;
	default:
		break; /* refused by the HTTP/1.1 rules: answered as over HTTP/1.1 */
	}
	if (m) {
		if (evbuffer_get_length(out))
			fuzz_fail("bytes after the head");
		fuzz_check(m, f, n, chunked);
		http_msg_free(m);
	}
	http_parser_free(p);
	evbuffer_free(out);
	return 0;
}
