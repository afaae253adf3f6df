/*
 * An idempotency record as the proxy sees it: its state and, once it is
 * completed, the response it keeps (see DESIGN section 4). The store reads
 * records, the replay cache keeps completed ones, replay.c sends them.
 */
#ifndef IDEMPROXY_RECORD_H
#define IDEMPROXY_RECORD_H

#include <stddef.h>
#include <stdint.h>

struct http_msg;

/* A request fingerprint: SHA-256 (fingerprint.h's FINGERPRINT_LEN). */
#define RECORD_FINGERPRINT_LEN 32

enum record_state {
	RECORD_IN_PROGRESS,
	RECORD_COMPLETED,
	RECORD_UNKNOWN,
};

/* Whoever hands out a record says how long its pointers stay valid. */
struct record {
	enum record_state state;
	unsigned char fingerprint[RECORD_FINGERPRINT_LEN];
	int64_t generation;
	int lease_expired;	    /* in_progress and lease_expires_at <= now() */
	int64_t lease_remaining_ms; /* in_progress: time left on the lease, >= 0 */
	int64_t expires_in_ms;	    /* completed: time left until expires_at, >= 0 */
	int status;		    /* completed only */
	const char *headers;	    /* completed: "Name: value\r\n" lines, may be "";
				     * any bytes (obs-text), NUL-terminated past headers_len */
	size_t headers_len;
	const unsigned char *body;
	size_t body_len;
	int body_omitted;	    /* the body was over max_stored_body: not kept */
	const char *sealed;	    /* completed: the id of the key that sealed headers and
				     * body (seal.h), NULL: they are plaintext */
};

/*
 * The headers of resp a record keeps: Content-Type, Content-Location,
 * Location, ETag and Last-Modified, plus the nextra names of extra (a
 * route's store_headers); never credentials, cookies, Content-Length or
 * hop-by-hop headers. As "Name: value\r\n" lines, malloc'ed and
 * NUL-terminated, their length in *len; NULL when out of memory.
 */
char *record_headers(const struct http_msg *resp, char *const *extra, int nextra, size_t *len)
	__attribute__((warn_unused_result));

struct scope;
struct seal_keys;

/* A record's headers and body sealed for the store (seal.h): two blobs, malloc'ed. */
struct record_sealed {
	unsigned char *headers;
	size_t headers_len;
	unsigned char *body; /* NULL when the body is omitted */
	size_t body_len;
};

/*
 * Seal headers (hlen bytes) and body (blen bytes; NULL: omitted) under k's
 * current key, with sc as associated data, so that a blob moved to another
 * scope never opens. 0, or -1 (out of memory, OpenSSL): nothing to free.
 */
int record_seal(const struct seal_keys *k, const struct scope *sc, const char *headers,
		size_t hlen, const unsigned char *body, size_t blen, struct record_sealed *out)
	__attribute__((warn_unused_result));
void record_sealed_free(struct record_sealed *s);

/*
 * Open a sealed record in (in->sealed set) for scope sc: on 0 *out is in
 * with plaintext headers and body, which live in *mem until the caller
 * frees it; on -1 *why says why it cannot be read (no keys, an unknown key,
 * a failed tag) and nothing is allocated.
 */
int record_open(const struct seal_keys *k, const struct scope *sc, const struct record *in,
		struct record *out, void **mem, const char **why) __attribute__((warn_unused_result));

#endif
