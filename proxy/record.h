/*
 * An idempotency record as the proxy sees it: its state and, once it is
 * completed, the response it keeps (see docs/http.md, "What a record keeps"). The store reads
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
	RECORD_EXPIRED, /* a tombstone (expired_keys refuse): its key is refused */
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
	int body_omitted;	  /* the body was over max_stored_body: not kept */
	const char *sealed;	  /* completed: the id of the key that sealed headers and
				   * body (seal.h), NULL: they are plaintext */
	int64_t completed_ms_ago; /* completed: the age of completed_at by the database's
				   * clock, >= 0 (0 when it is NULL or in the future); a
				   * value whoever writes the table sets */
	const char *request_id;	  /* the X-Request-Id of the request that claimed it
				   * (its owner), NULL: none kept */
	const char *trace_id;	  /* that request's trace id, NULL: none */
	const char *completed_at; /* RECORD_EXPIRED: when it completed, RFC 3339 UTC */
};

/*
 * The headers of resp a record keeps: Content-Type, Content-Location,
 * Location, ETag and Last-Modified, plus the nextra names of extra (a
 * route's store_headers); never credentials, cookies, Content-Length or
 * hop-by-hop headers; then, when resp has trailers a record keeps (by the
 * same rule: grpc-status, grpc-message, grpc-status-details-bin and
 * extra's), a blank line and those. As "Name: value\r\n" lines, malloc'ed and
 * NUL-terminated, their length in *len; NULL when out of memory.
 */
char *record_headers(const struct http_msg *resp, char *const *extra, int nextra, size_t *len)
	__attribute__((warn_unused_result));

/*
 * Where the trailer lines of a record's n bytes of header lines begin: the
 * offset of the blank line ("\r\n") record_headers puts before them, the
 * trailers from 2 bytes after it; n when the record keeps no trailers.
 */
size_t record_trailers_at(const char *lines, size_t n);

/*
 * 1 when the n bytes at lines are header lines a record may keep, as
 * record_headers writes them: each "Name: value\r\n", Name a token that
 * record_headers keeps (with the nextra names of extra), and at most one
 * blank line before trailer lines of the same form, the value HTAB,
 * SP, VCHAR and obs-text bytes only (never CR, LF or NUL). Otherwise 0, and
 * *why says what is wrong (static text). A stored record is checked so
 * before it is replayed: whoever can write the table must not be able to
 * split a response or add a header idemproxy never keeps.
 */
int record_headers_valid(const char *lines, size_t n, char *const *extra, int nextra,
			 const char **why);

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
 * current key for the record of scope sc completed with status under
 * generation: each blob's associated data names which blob it is,
 * whether the body was omitted, the scope, the status and the generation,
 * so a blob moved to the other column or to another record, a dropped
 * body, or a row whose status or generation was changed, never opens.
 * generation must be the one the row is written with. 0, or -1 (out of
 * memory, OpenSSL): nothing to free.
 */
int record_seal(const struct seal_keys *k, const struct scope *sc, int status, int64_t generation,
		const char *headers, size_t hlen, const unsigned char *body, size_t blen,
		struct record_sealed *out) __attribute__((warn_unused_result));
void record_sealed_free(struct record_sealed *s);

/*
 * What a completed record read from the store is judged by before a replay:
 * this instance's keys, since when it has had them, and the route's rules.
 * Durations count back from when the record was read.
 */
struct record_reader {
	const struct seal_keys *seal; /* body_encryption's keys; NULL: it is off */
	int64_t keys_ms;	      /* this long, the key set has lost no key id (the
				       * first load, or the last reload that removed one) */
	int64_t sealing_ms;	      /* with seal: this long, this instance has sealed
				       * what it stores (since the load that turned it on) */
	int64_t retention_ms;	      /* the route's retention */
	char *const *extra;	      /* the route's store_headers */
	int nextra;
};

/* What record_read makes of a stored record. */
enum record_read {
	RECORD_READ_OK,	     /* *out may be replayed */
	RECORD_READ_REFUSED, /* never replayed, never run again: outcome-unknown */
	RECORD_READ_LATER,   /* sealed under a key id this instance lacks, after it
			      * loaded its keys: another instance has a newer key */
};

/*
 * Judge the completed record in of scope sc by rd. A sealed record is
 * opened (an IPS1 blob with its scope-only associated data, an IPS2 one
 * with record_seal's); a plaintext one while encryption is on is read only
 * when it completed before this instance turned encryption on and
 * encryption has been on for less than the route's retention (so no
 * record from before can still be live); its headers must pass
 * record_headers_valid. On RECORD_READ_OK *out is in with plaintext headers
 * and body, which live in *mem (NULL when nothing was decrypted) until the
 * caller frees it; otherwise nothing is allocated and *why says why
 * (static text, for the log).
 */
enum record_read record_read(const struct record_reader *rd, const struct scope *sc,
			     const struct record *in, struct record *out, void **mem,
			     const char **why) __attribute__((warn_unused_result));

struct route;
struct secrets;

/*
 * An owner's record: plain, as the replay cache keeps it, and what the
 * store writes of it (store_finish's headers, body and key id): plain's
 * own bytes, or blobs sealed under the current key of body_encryption.
 */
struct record_stored {
	struct record plain; /* completed: its headers owned, its body borrowed */
	const char *headers; /* plain's, or sealed.headers */
	size_t headers_len;
	const unsigned char *body; /* NULL: the body is omitted */
	size_t body_len;
	const char *key_id;	     /* the sealing key's id (valid as long as the secrets);
				      * NULL: plaintext */
	struct record_sealed sealed; /* owned: the blobs, when sealed */
};

/* What record_to_store made of a response. */
enum record_store {
	RECORD_STORE_OK,
	RECORD_STORE_NOMEM,    /* out of memory: nothing to store */
	RECORD_STORE_UNSEALED, /* sealing failed (out of memory, OpenSSL): never
				* stored in the clear */
};

/*
 * The record to store of resp, the response the owner of scope sc (fp its
 * request's fingerprint, generation its claim's) got on route r: the
 * headers a record keeps (record_headers, with the route's store_headers)
 * and its body unless omitted (borrowed: resp must outlive *out), sealed
 * (record_seal) when sec has body_encryption keys. Made once per owner, so
 * a retried write sends the same blobs. record_stored_free releases *out,
 * whatever the result.
 */
enum record_store record_to_store(const struct secrets *sec, const struct route *r,
				  const struct scope *sc, int64_t generation,
				  const unsigned char *fp, const struct http_msg *resp, int omitted,
				  struct record_stored *out) __attribute__((warn_unused_result));
void record_stored_free(struct record_stored *s);

/* Room for what record_to_replay says of a record it does not replay. */
#define RECORD_WHY_MAX 512

/*
 * The record to replay of in, a completed record of scope sc on route r
 * just read from the store: record_read by sec's body_encryption keys and
 * since when this instance has had them and has sealed, and by the route's
 * retention and store_headers. As record_read, but for *why: unless the
 * result is RECORD_READ_OK, why (len bytes) says what became of the
 * record and why, for the log ("stored record sealed with key ...").
 */
enum record_read record_to_replay(const struct secrets *sec, const struct route *r,
				  const struct scope *sc, const struct record *in,
				  struct record *out, void **mem, char *why, size_t len)
	__attribute__((warn_unused_result));

#endif
