/* Request fingerprints: SHA-256 over method, path, sorted query and body. */
#ifndef IDEMPROXY_FINGERPRINT_H
#define IDEMPROXY_FINGERPRINT_H

#include <stddef.h>
#include "conf/conf.h"

#define FINGERPRINT_LEN 32

struct fp_buf {
	unsigned char *data;
	size_t len, cap;
};

void fp_buf_free(struct fp_buf *b);

/*
 * Canonical form of a JSON document in the spirit of RFC 8785: object keys
 * sorted (byte order of their UTF-8, stable so duplicate keys are all kept),
 * no insignificant whitespace, strings as UTF-8 after unescaping, numbers
 * normalised by value (32, 32.0, 3.2e1 -> same text). With nfields > 0 only
 * the selected dot-path fields are kept, each transformed, as an object
 * keyed by path (a missing field is recorded as absent, distinct from null).
 * Appends to out and returns 0; returns -1 when body is not valid JSON
 * (out then holds nothing new).
 */
int fingerprint_canonical_json(const unsigned char *body, size_t len,
			       const struct fp_field *fields, int nfields,
			       struct fp_buf *out) __attribute__((warn_unused_result));

/*
 * SHA-256 over method, the concrete path, the query string with parameters
 * sorted (query may be NULL), and the body as mode says: FP_JSON canonical
 * JSON (raw bytes when the body is not valid JSON), FP_BODY raw bytes,
 * FP_NONE nothing. Each part is length-prefixed so parts cannot run into
 * each other. Returns 0, or -1 on an internal failure (out of memory).
 */
int fingerprint_request(const char *method, const char *path, size_t path_len,
			const char *query, size_t query_len,
			const unsigned char *body, size_t body_len,
			enum fp_mode mode, const struct fp_field *fields, int nfields,
			unsigned char out[FINGERPRINT_LEN])
	__attribute__((warn_unused_result));

/* One request header value that joins the fingerprint: of the which-th name. */
struct fp_header {
	int which;
	const char *value;
	size_t len;
};

/*
 * fingerprint_headers: fp becomes SHA-256 of itself and the n values (in
 * the order given: each name's values as received), so a request that
 * differs in one of them never shares a fingerprint. 0, or -1 (OpenSSL).
 */
int fingerprint_with_headers(unsigned char fp[FINGERPRINT_LEN], const struct fp_header *h, int n)
	__attribute__((warn_unused_result));

struct http_msg;

/*
 * The fingerprint of request m on route r, its body the body_len bytes at
 * body (NULL when it has none): fingerprint_request by the route's
 * fingerprint mode and fields, then the values of its fingerprint_headers
 * (fingerprint_with_headers). 0, or -1 on an internal failure.
 */
int fingerprint_of_request(const struct route *r, const struct http_msg *m,
			   const unsigned char *body, size_t body_len,
			   unsigned char out[FINGERPRINT_LEN]) __attribute__((warn_unused_result));

#endif
