/* What a record keeps of a response. */
#include "proxy/record.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <event2/buffer.h>

#include "proxy/http.h"
#include "proxy/marker.h"
#include "proxy/scope.h"
#include "proxy/seal.h"

/* Response headers a record keeps (plus the route's store_headers). */
static const char *const record_kept_names[] = {
	"Content-Type", "Content-Location", "Location", "ETag", "Last-Modified",
};

/* Never kept, whatever store_headers says: credentials and cookies. */
static const char *const record_never_names[] = {
	"Set-Cookie", "Set-Cookie2", "Authorization", "Proxy-Authorization", "Cookie",
	"WWW-Authenticate", "Proxy-Authenticate", "Content-Length",
};

static int record_name_in(const char *name, const char *const *names, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (strcasecmp(name, names[i]) == 0)
			return 1;
	return 0;
}

#define RECORD_NAME_IN(name, arr) record_name_in(name, arr, sizeof(arr) / sizeof(arr[0]))

char *record_headers(const struct http_msg *resp, char *const *extra, int nextra, size_t *len)
{
	struct evbuffer *b = evbuffer_new();
	char *lines = NULL;
	size_t n;

	if (!b)
		return NULL;
	for (int i = 0; i < resp->nheaders; i++) {
		const struct http_header *h = &resp->headers[i];
		if (RECORD_NAME_IN(h->name, record_never_names) ||
		    http_header_is_hop(resp, h) || marker_header(h->name))
			continue;
		if (!RECORD_NAME_IN(h->name, record_kept_names) &&
		    !record_name_in(h->name, (const char *const *)extra, (size_t)nextra))
			continue;
		http_add_header(b, h->name, h->value);
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

/* The associated data of sc's blobs: actor, operation and key, NUL-separated. */
static char *record_aad(const struct scope *sc, size_t *len)
{
	size_t a = strlen(sc->actor) + 1, o = strlen(sc->operation) + 1, k = strlen(sc->key);
	char *aad = malloc(a + o + k + 1);

	if (!aad)
		return NULL;
	memcpy(aad, sc->actor, a);
	memcpy(aad + a, sc->operation, o);
	memcpy(aad + a + o, sc->key, k + 1);
	*len = a + o + k;
	return aad;
}

/* One blob of n bytes at plain into *blob (*blob_len). 0 or -1. */
static int record_seal_one(const struct seal_keys *k, const char *aad, size_t aad_len,
			   const void *plain, size_t n, unsigned char **blob, size_t *blob_len)
{
	*blob_len = seal_len(k, n);
	*blob = malloc(*blob_len);
	if (*blob && seal_data(k, aad, aad_len, plain, n, *blob) == 0)
		return 0;
	free(*blob);
	*blob = NULL;
	return -1;
}

int record_seal(const struct seal_keys *k, const struct scope *sc, const char *headers,
		size_t hlen, const unsigned char *body, size_t blen, struct record_sealed *out)
{
	size_t aad_len;
	char *aad = record_aad(sc, &aad_len);
	int rc = -1;

	memset(out, 0, sizeof(*out));
	if (aad && record_seal_one(k, aad, aad_len, headers, hlen, &out->headers,
				   &out->headers_len) == 0 &&
	    (!body || record_seal_one(k, aad, aad_len, body, blen, &out->body,
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

int record_open(const struct seal_keys *k, const struct scope *sc, const struct record *in,
		struct record *out, void **mem, const char **why)
{
	static const char *const whys[] = {
	    [SEAL_OK] = "",
	    [SEAL_NOT_SEALED] = "the record is marked sealed but is not",
	    [SEAL_UNKNOWN_KEY] = "it was sealed with a key body_encryption no longer has",
	    [SEAL_BAD] = "its authentication tag does not match (damaged, or moved from another "
			 "scope)",
	    [SEAL_NOMEM] = "out of memory",
	};
	unsigned char *h = NULL, *b = NULL, *both;
	size_t hlen = 0, blen = 0, aad_len;
	enum seal_result res;
	char *aad;

	if (!k) {
		*why = "it is sealed and body_encryption is off";
		return -1;
	}
	aad = record_aad(sc, &aad_len);
	if (!aad) {
		*why = whys[SEAL_NOMEM];
		return -1;
	}
	res = seal_open(k, aad, aad_len, in->headers, in->headers_len, &h, &hlen, NULL);
	if (res == SEAL_OK && in->body)
		res = seal_open(k, aad, aad_len, in->body, in->body_len, &b, &blen, NULL);
	free(aad);
	/* One allocation holds both, so the caller frees one pointer. */
	both = res == SEAL_OK ? malloc(hlen + 1 + blen + 1) : NULL;
	if (res == SEAL_OK && !both)
		res = SEAL_NOMEM;
	if (res != SEAL_OK) {
		free(h);
		free(b);
		*why = whys[res];
		return -1;
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
	return 0;
}
