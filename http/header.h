/*
 * What idemproxy does with a header, by its name: one table row per name
 * it acts on (http/header.c), read wherever a header is kept or dropped.
 * The parser classifies each header once (http_header.known and .policy),
 * so forwarding a request, relaying or recording a response test bits
 * instead of comparing names; store_headers is checked against the same
 * rows, so what a configuration may ask to store is what a record keeps.
 */
#ifndef IDEMPROXY_HTTP_HEADER_H
#define IDEMPROXY_HTTP_HEADER_H

#include <stddef.h>

/*
 * The names the parser and the framing act on (http_header.known); every
 * other name is HTTP_N_OTHER, whatever its row says.
 */
enum http_name {
	HTTP_N_OTHER = 0,
	/* hop-by-hop (RFC 9110 7.6.1): never forwarded, relayed or stored */
	HTTP_N_CONNECTION,
	HTTP_N_KEEP_ALIVE,
	HTTP_N_PROXY_CONNECTION,
	HTTP_N_PROXY_AUTHENTICATE,
	HTTP_N_PROXY_AUTHORIZATION,
	HTTP_N_TE,
	HTTP_N_TRAILER,
	HTTP_N_TRANSFER_ENCODING,
	HTTP_N_HTTP2_SETTINGS, /* only ever meant for the hop an h2c upgrade would replace */
	HTTP_N_UPGRADE,
	/* framing and routing */
	HTTP_N_CONTENT_LENGTH,
	HTTP_N_HOST,
	HTTP_N_EXPECT,
	HTTP_N_VIA,
	/* forwarding, rebuilt by idemproxy */
	HTTP_N_FORWARDED,
	HTTP_N_X_FORWARDED_FOR,
	HTTP_N_X_FORWARDED_PROTO,
	HTTP_N_X_FORWARDED_HOST,
	HTTP_N_X_REAL_IP,
	/* the time of a response: the upstream's is relayed, replays get the current one */
	HTTP_N_DATE,
	/* the request's id: the client's when valid, else idemproxy's (trace.h) */
	HTTP_N_X_REQUEST_ID,
	/* what the body is: a gRPC call's says so (grpc.h) */
	HTTP_N_CONTENT_TYPE,
};

/* What idemproxy does with a header of a row's name (header_policy.flags). */
enum header_flag {
	/* hop-by-hop: dropped wherever a message goes on, and so is any
	 * name a message's Connection header lists */
	HEADER_HOP = 1 << 0,
	/* idemproxy's own: only it sets one, on its responses; dropped from
	 * client requests and from upstream responses, so none can fake it */
	HEADER_MARKER = 1 << 1,
	/* the client's is dropped on the way upstream, and idemproxy writes
	 * its own (forwarding headers, Via, framing) or none (Expect) */
	HEADER_REBUILT = 1 << 2,
	/* every record keeps it */
	HEADER_STORED = 1 << 3,
	/* no record keeps it, whatever store_headers says; store_headers
	 * naming it is an error (header_policy.why says why) */
	HEADER_NEVER_STORED = 1 << 4,
	/* a marker set only on a request forwarded unenforced
	 * (store_unavailable fail-open) */
	HEADER_FAIL_OPEN = 1 << 5,
	/* every response carries idemproxy's own of the moment it is sent
	 * (Date, X-Request-Id): one a record holds is dropped from a replay */
	HEADER_FRESH = 1 << 6,
	/* whether to retry (X-Should-Retry, Stripe-Should-Retry): stored
	 * when store_headers names it, but a replay of a stored 5xx drops the
	 * stored one and says false itself (replay_says_final) */
	HEADER_RETRY_ADVICE = 1 << 7,
};

struct header_policy {
	const char *name;
	size_t len;
	enum http_name known;
	unsigned flags;	   /* enum header_flag */
	const char *why;   /* HEADER_NEVER_STORED: why, for store_headers' error */
	const char *value; /* HEADER_MARKER: the one value idemproxy writes, or NULL */
	const char *about; /* HEADER_MARKER: what it tells a client (the published contract) */
};

/* The rows, header_npolicies of them. */
extern const struct header_policy header_policies[];
extern const size_t header_npolicies;

/* The row of the len bytes at name (any case), or NULL: a name idemproxy passes as it is. */
const struct header_policy *header_policy(const char *name, size_t len);

/* The flags of the len bytes at name: its row's, or 0. */
unsigned header_flags(const char *name, size_t len);

/* idemproxy's markers (HEADER_MARKER rows), for the code that writes them. */
#define MARKER_REPLAYED	    "Idempotent-Replayed"  /* true: a stored response */
#define MARKER_ENFORCED	    "Idempotency-Enforced" /* false: forwarded while the store was out */
#define MARKER_BODY_OMITTED "Idempotency-Body-Omitted" /* true: the body was too large to keep */
#define MARKER_KEY_EXPIRES  "Idempotency-Key-Expires"  /* when the record goes */

#endif
