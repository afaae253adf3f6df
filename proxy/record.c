/* What a record keeps of a response. */
#include "proxy/record.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <event2/buffer.h>

#include "conf/conf.h"
#include "http/header.h"
#include "proxy/clock.h"
#include "proxy/http.h"
#include "proxy/scope.h"
#include "proxy/seal.h"
#include "proxy/secrets.h"

/* 1 when the len bytes at name are one of the n names (case-insensitive). */
static int record_name_in(const char *name, size_t len, const char *const *names, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (strlen(names[i]) == len && strncasecmp(name, names[i], len) == 0)
			return 1;
	return 0;
}

/*
 * 1 when a record keeps a header named by the len bytes at name, of flags
 * in the header-policy table: one every record keeps or one of extra's
 * (which conf checked are never of the never-stored), never a credential,
 * a cookie, a hop-by-hop header, framing or a marker.
 */
static int record_keeps(const char *name, size_t len, unsigned flags, char *const *extra,
			int nextra)
{
	if (flags & HEADER_NEVER_STORED)
		return 0;
	return (flags & HEADER_STORED) ||
	       record_name_in(name, len, (const char *const *)extra, (size_t)nextra);
}

/* The trailer lines of t ("Name: value\r\n", http_trailers_keep's) a record keeps, into b. */
static void record_trailer_lines(struct evbuffer *b, struct evbuffer *t, char *const *extra,
				 int nextra)
{
	size_t len = evbuffer_get_length(t);
	const char *at = (const char *)evbuffer_pullup(t, -1), *end = at + len;
	struct http_line line;

	while (http_line_next(&at, end, &line))
		if (line.name_len > 0 &&
		    record_keeps(line.name, line.name_len, header_flags(line.name, line.name_len),
				 extra, nextra))
			evbuffer_add(b, line.start, line.len);
}

char *record_headers(const struct http_msg *resp, char *const *extra, int nextra, size_t *len)
{
	struct evbuffer *b = evbuffer_new(), *t = NULL;
	char *lines = NULL;
	size_t n;

	if (!b)
		return NULL;
	for (int i = 0; i < resp->nheaders; i++) {
		const struct http_header *h = &resp->headers[i];
		if (http_header_is_hop(resp, h) ||
		    !record_keeps(h->name, h->name_len, h->policy, extra, nextra))
			continue;
		http_add_header(b, h->name, h->value);
	}
	/* Trailers, those kept, after a blank line (record_trailers_at). */
	if (resp->trailers && evbuffer_get_length(resp->trailers) > 0) {
		if (!(t = evbuffer_new())) {
			evbuffer_free(b);
			return NULL;
		}
		record_trailer_lines(t, resp->trailers, extra, nextra);
		if (evbuffer_get_length(t) > 0) {
			http_add_lit(b, "\r\n");
			evbuffer_add_buffer(b, t);
		}
		evbuffer_free(t);
	}
	n = evbuffer_get_length(b);
	lines = malloc(n + 1);
	if (lines) {
		evbuffer_remove(b, lines, n);
		lines[n] = '\0';
		*len = n;
	}
	evbuffer_free(b);
	return lines;
}

size_t record_trailers_at(const char *lines, size_t n)
{
	for (size_t at = 0; at + 1 < n;) {
		const char *nl;

		if (lines[at] == '\r' && lines[at + 1] == '\n')
			return at;
		nl = memchr(lines + at, '\n', n - at);
		if (!nl)
			break;
		at = (size_t)(nl - lines) + 1;
	}
	return n;
}

/* tchar (RFC 9110 5.6.2). */
static int record_tchar(unsigned char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       (c != '\0' && strchr("!#$%&'*+-.^_`|~", c) != NULL);
}

/* A field-value byte: HTAB, SP, VCHAR or obs-text; never CR, LF, NUL or another control. */
static int record_value_byte(unsigned char c)
{
	return c == '\t' || (c >= ' ' && c != 0x7f);
}

int record_headers_valid(const char *lines, size_t n, char *const *extra, int nextra,
			 const char **why)
{
	const unsigned char *p = (const unsigned char *)lines, *end = p + n, *name;
	const struct header_policy *row;
	size_t name_len;
	int blank = 0;

	while (p < end) {
		/* One blank line parts the headers from the trailers, which follow it. */
		if (!blank && end - p > 2 && p[0] == '\r' && p[1] == '\n') {
			blank = 1;
			p += 2;
			continue;
		}
		for (name = p; p < end && record_tchar(*p); p++)
			;
		name_len = (size_t)(p - name);
		if (name_len == 0 || end - p < 2 || p[0] != ':' || p[1] != ' ') {
			*why = "a header line is not \"Name: value\"";
			return 0;
		}
		/* A Date or an X-Request-Id, kept by records stored when
		 * store_headers could name it, is let through: the replay
		 * drops it and sends its own. */
		row = header_policy((const char *)name, name_len);
		if (!(row && (row->flags & HEADER_FRESH)) &&
		    !record_keeps((const char *)name, name_len, row ? row->flags : 0, extra,
				  nextra)) {
			*why = "it holds a header a record never keeps";
			return 0;
		}
		for (p += 2; p < end && record_value_byte(*p); p++)
			;
		if (end - p < 2 || p[0] != '\r' || p[1] != '\n') {
			*why = "a header value holds CR, LF, NUL or another control byte";
			return 0;
		}
		p += 2;
	}
	return 1;
}

/*
 * The bytes that go before the scope in an IPS2 blob's associated data:
 * which blob (1 byte), whether the body was omitted (1), the status (4)
 * and the generation (8), big-endian. An IPS1 blob's is the scope alone.
 */
#define RECORD_AAD_HEAD 14

enum record_blob {
	RECORD_BLOB_HEADERS = 'h',
	RECORD_BLOB_BODY = 'b',
};

/*
 * The associated data of sc's blobs, malloc'ed: RECORD_AAD_HEAD bytes
 * (which blob is set by record_aad_blob) then actor, operation and key,
 * NUL-separated; the scope alone, an IPS1 blob's, is its tail from
 * RECORD_AAD_HEAD.
 */
static unsigned char *record_aad(const struct scope *sc, int omitted, int status,
				 int64_t generation, size_t *len)
{
	size_t a = strlen(sc->actor) + 1, o = strlen(sc->operation) + 1, k = strlen(sc->key);
	unsigned char *aad = malloc(RECORD_AAD_HEAD + a + o + k + 1), *p;
	uint64_t g = (uint64_t)generation;
	uint32_t st = (uint32_t)status;
	int i;

	if (!aad)
		return NULL;
	aad[0] = 0;
	aad[1] = omitted ? 1 : 0;
	for (i = 0; i < 4; i++)
		aad[2 + i] = (unsigned char)(st >> (24 - 8 * i));
	for (i = 0; i < 8; i++)
		aad[6 + i] = (unsigned char)(g >> (56 - 8 * i));
	p = aad + RECORD_AAD_HEAD;
	memcpy(p, sc->actor, a);
	memcpy(p + a, sc->operation, o);
	memcpy(p + a + o, sc->key, k + 1);
	*len = RECORD_AAD_HEAD + a + o + k;
	return aad;
}

/* One blob of n bytes at plain into *blob (*blob_len). 0 or -1. */
static int record_seal_one(const struct seal_keys *k, unsigned char *aad, size_t aad_len,
			   enum record_blob which, const void *plain, size_t n,
			   unsigned char **blob, size_t *blob_len)
{
	aad[0] = (unsigned char)which;
	*blob_len = seal_len(k, n);
	*blob = malloc(*blob_len);
	if (*blob && seal_data(k, aad, aad_len, plain, n, *blob) == 0)
		return 0;
	free(*blob);
	*blob = NULL;
	return -1;
}

int record_seal(const struct seal_keys *k, const struct scope *sc, int status, int64_t generation,
		const char *headers, size_t hlen, const unsigned char *body, size_t blen,
		struct record_sealed *out)
{
	size_t aad_len;
	unsigned char *aad = record_aad(sc, !body, status, generation, &aad_len);
	int rc = -1;

	memset(out, 0, sizeof(*out));
	if (aad &&
	    record_seal_one(k, aad, aad_len, RECORD_BLOB_HEADERS, headers, hlen, &out->headers,
			    &out->headers_len) == 0 &&
	    (!body || record_seal_one(k, aad, aad_len, RECORD_BLOB_BODY, body, blen, &out->body,
				      &out->body_len) == 0))
		rc = 0;
	free(aad);
	if (rc < 0)
		record_sealed_free(out);
	return rc;
}

void record_sealed_free(struct record_sealed *s)
{
	free(s->headers);
	free(s->body);
	memset(s, 0, sizeof(*s));
}

/* Open one blob (n bytes at data) with the associated data of its version. */
static enum seal_result record_open_one(const struct seal_keys *k, unsigned char *aad,
					size_t aad_len, enum record_blob which, const void *data,
					size_t n, unsigned char **plain, size_t *plain_len)
{
	aad[0] = (unsigned char)which;
	if (seal_version(data, n) == 1)
		return seal_open(k, aad + RECORD_AAD_HEAD, aad_len - RECORD_AAD_HEAD, data, n,
				 plain, plain_len, NULL);
	return seal_open(k, aad, aad_len, data, n, plain, plain_len, NULL);
}

/* A blob's key id is not in rd's key set: a newer key, or a removed one. */
static enum record_read record_unknown_key(const struct record_reader *rd, const struct record *in,
					   const char **why)
{
	if (in->completed_ms_ago < rd->keys_ms) {
		*why = "unknown key id, newer than this instance's keys: a key rotation is in "
		       "progress (this instance needs the key)";
		return RECORD_READ_LATER;
	}
	*why = "unknown key id, older than this instance's keys: the key was removed";
	return RECORD_READ_REFUSED;
}

/* Open in's two blobs into *out and *mem (one allocation holds both). */
static enum record_read record_read_sealed(const struct record_reader *rd, const struct scope *sc,
					   const struct record *in, struct record *out, void **mem,
					   const char **why)
{
	static const char *const whys[] = {
	    [SEAL_OK] = "",
	    [SEAL_NOT_SEALED] = "the record is marked sealed but is not",
	    [SEAL_UNKNOWN_KEY] = "",
	    [SEAL_BAD] = "its authentication tag does not match: tampered with or the wrong key "
			 "(a blob moved from the other column or another record, or the status or "
			 "generation changed)",
	    [SEAL_NOMEM] = "out of memory",
	};
	unsigned char *h = NULL, *b = NULL, *both, *aad;
	size_t hlen = 0, blen = 0, aad_len;
	enum seal_result res;

	if (!in->body != !!in->body_omitted) {
		*why = "its body column does not match body_omitted";
		return RECORD_READ_REFUSED;
	}
	if (!rd->seal)
		return record_unknown_key(rd, in, why);
	aad = record_aad(sc, in->body_omitted, in->status, in->generation, &aad_len);
	if (!aad) {
		*why = whys[SEAL_NOMEM];
		return RECORD_READ_REFUSED;
	}
	res = record_open_one(rd->seal, aad, aad_len, RECORD_BLOB_HEADERS, in->headers,
			      in->headers_len, &h, &hlen);
	if (res == SEAL_OK && in->body)
		res = record_open_one(rd->seal, aad, aad_len, RECORD_BLOB_BODY, in->body,
				      in->body_len, &b, &blen);
	free(aad);
	both = res == SEAL_OK ? malloc(hlen + 1 + blen + 1) : NULL;
	if (res == SEAL_OK && !both)
		res = SEAL_NOMEM;
	if (res != SEAL_OK) {
		free(h);
		free(b);
		if (res == SEAL_UNKNOWN_KEY)
			return record_unknown_key(rd, in, why);
		*why = whys[res];
		return RECORD_READ_REFUSED;
	}
	memcpy(both, h, hlen + 1);
	if (b)
		memcpy(both + hlen + 1, b, blen + 1);
	free(h);
	free(b);
	*out = *in;
	out->sealed = NULL;
	out->headers = (const char *)both;
	out->headers_len = hlen;
	out->body = in->body ? both + hlen + 1 : NULL;
	out->body_len = blen;
	*mem = both;
	return RECORD_READ_OK;
}

/*
 * A plaintext record while encryption is on: one from before it was
 * turned on, or one written into the table by someone else.
 */
static enum record_read record_read_plain(const struct record_reader *rd, const struct record *in,
					  const char **why)
{
	if (rd->sealing_ms >= rd->retention_ms) {
		*why = "it is plaintext, and body_encryption has been on here for longer than "
		       "the route's retention";
		return RECORD_READ_REFUSED;
	}
	if (in->completed_ms_ago <= rd->sealing_ms) {
		*why = "it is plaintext but completed after body_encryption was turned on here";
		return RECORD_READ_REFUSED;
	}
	return RECORD_READ_OK;
}

enum record_read record_read(const struct record_reader *rd, const struct scope *sc,
			     const struct record *in, struct record *out, void **mem,
			     const char **why)
{
	enum record_read r;

	*mem = NULL;
	if (in->sealed)
		r = record_read_sealed(rd, sc, in, out, mem, why);
	else if (rd->seal)
		r = record_read_plain(rd, in, why);
	else
		r = RECORD_READ_OK;
	if (r == RECORD_READ_OK && !in->sealed)
		*out = *in;
	if (r == RECORD_READ_OK &&
	    !record_headers_valid(out->headers, out->headers_len, rd->extra, rd->nextra, why)) {
		free(*mem);
		*mem = NULL;
		r = RECORD_READ_REFUSED;
	}
	return r;
}

/* out's blobs for the store: plain's bytes, or sealed under sec's current key. */
static enum record_store record_seal_stored(const struct secrets *sec, const struct scope *sc,
					    struct record_stored *out)
{
	const struct record *p = &out->plain;

	out->headers = p->headers;
	out->headers_len = p->headers_len;
	out->body = p->body_omitted ? NULL : p->body;
	out->body_len = out->body ? p->body_len : 0;
	if (!sec->seal)
		return RECORD_STORE_OK;
	if (record_seal(sec->seal, sc, p->status, p->generation, p->headers, p->headers_len,
			out->body, out->body_len, &out->sealed) < 0)
		return RECORD_STORE_UNSEALED;
	out->headers = (const char *)out->sealed.headers;
	out->headers_len = out->sealed.headers_len;
	out->body = out->sealed.body;
	out->body_len = out->sealed.body_len;
	out->key_id = seal_keys_current(sec->seal);
	return RECORD_STORE_OK;
}

enum record_store record_to_store(const struct secrets *sec, const struct route *r,
				  const struct scope *sc, int64_t generation,
				  const unsigned char *fp, const struct http_msg *resp, int omitted,
				  struct record_stored *out)
{
	struct record *p = &out->plain;

	memset(out, 0, sizeof(*out));
	p->headers = record_headers(resp, r->store_headers, r->nstore_headers, &p->headers_len);
	if (!p->headers)
		return RECORD_STORE_NOMEM;
	p->state = RECORD_COMPLETED;
	p->generation = generation;
	p->status = resp->status;
	p->body_omitted = omitted;
	memcpy(p->fingerprint, fp, RECORD_FINGERPRINT_LEN);
	if (!omitted) {
		/* A body kept empty is "": only an omitted one is NULL. */
		p->body_len = evbuffer_get_length(resp->body);
		p->body = p->body_len ? evbuffer_pullup(resp->body, -1) : (const unsigned char *)"";
	}
	return record_seal_stored(sec, sc, out);
}

void record_stored_free(struct record_stored *s)
{
	free((char *)s->plain.headers);
	record_sealed_free(&s->sealed);
	memset(s, 0, sizeof(*s));
}

enum record_read record_to_replay(const struct secrets *sec, const struct route *r,
				  const struct scope *sc, const struct record *in,
				  struct record *out, void **mem, char *why, size_t len)
{
	int64_t now = clock_now_us();
	struct record_reader rd = {
	    .seal = sec->seal,
	    .keys_ms = (now - sec->keys_since_us) / 1000,
	    .sealing_ms = (now - sec->sealing_since_us) / 1000,
	    .retention_ms = r->retention_ms,
	    .extra = r->store_headers,
	    .nextra = r->nstore_headers,
	};
	const char *reason = "";
	enum record_read res = record_read(&rd, sc, in, out, mem, &reason);

	if (res != RECORD_READ_OK && in->sealed)
		snprintf(why, len, "stored record sealed with key \"%s\" cannot be read%s: %s",
			 in->sealed, res == RECORD_READ_LATER ? " yet" : "", reason);
	else if (res != RECORD_READ_OK)
		snprintf(why, len, "stored record is not replayed: %s", reason);
	return res;
}
