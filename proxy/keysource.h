/*
 * Where a request's idempotency key comes from (a route's key_from): a
 * header (key_header by default), a query parameter, or a string or
 * integer in the JSON body. Whatever the source, the value is validated as
 * an Idempotency-Key (idemkey.h).
 */
#ifndef IDEMPROXY_KEYSOURCE_H
#define IDEMPROXY_KEYSOURCE_H

#include <stddef.h>

struct conf;
struct http_msg;
struct route;

enum keysource_result {
	KEYSOURCE_FOUND,
	KEYSOURCE_ABSENT,  /* the source has no value */
	KEYSOURCE_INVALID, /* repeated, or not a valid key */
	KEYSOURCE_NOMEM,
};

/*
 * The key of m for route r under conf: on KEYSOURCE_FOUND the key in out
 * (IDEMKEY_MAX + 1 bytes), NUL-terminated, its length in *out_len.
 */
enum keysource_result keysource_get(const struct conf *conf, const struct route *r,
				    const struct http_msg *m, char *out, size_t *out_len);

/*
 * From the head alone: 1 when m carries a key for r (or may: a body
 * source is only known once the body is in), 0 when it certainly does not.
 */
int keysource_maybe(const struct conf *conf, const struct route *r, const struct http_msg *head);

/* The source's name: the header's ("Idempotency-Key"), the query parameter's or the JSON
 * dot path. */
const char *keysource_name(const struct conf *conf, const struct route *r);

/*
 * How messages and the contract tell r's source: before, its name
 * (keysource_name), after, as in "the Idempotency-Key header", "the idem
 * query parameter (percent-decoded)" or "the string or integer at event.id
 * in the JSON body"; in is where OpenAPI says it is ("header", "query") or
 * "json". Static strings.
 */
struct keysource_wording {
	const char *in;
	const char *before;
	const char *after;
};

const struct keysource_wording *keysource_wording(const struct route *r);

/* The query parameter name's value in query (len bytes), percent-decoded into
 * out (outlen bytes, NUL-terminated): its length, -1 when absent, -2 when
 * repeated, malformed or too long. */
int keysource_query_value(const char *query, size_t len, const char *name, char *out,
			  size_t outlen);

/* The string or integer at the dot path in the JSON text (len bytes) into
 * out as keysource_query_value; -1 when absent (or not JSON, or nested
 * deeper than 256 levels), -2 when of another type or too long, -3 when out
 * of memory. */
int keysource_json_value(const unsigned char *json, size_t len, const char *path, char *out,
			 size_t outlen);

#endif
