/*
 * The header-policy table: one row per header name idemproxy acts on and
 * what it does with it (http/header.h). A name without a row is forwarded,
 * relayed and replayed as it came, and stored when store_headers names it.
 */
#include "http/header.h"

#include <strings.h>

#define NAME(s) s, sizeof(s) - 1

/* Why store_headers may not name a row's header. */
#define WHY_PRIVATE "credentials and hop-by-hop headers"
#define WHY_MARKER  "only idemproxy sets it"
#define WHY_FRAMING "a replay frames the stored body itself"
#define WHY_DATE    "a replay is dated when it is sent"
#define WHY_ID	    "a response carries the id of the request it answers"

#define HOP (HEADER_HOP | HEADER_NEVER_STORED)

const struct header_policy header_policies[] = {
    /* hop-by-hop (RFC 9110 7.6.1) */
    {NAME("Connection"), HTTP_N_CONNECTION, HOP, WHY_PRIVATE, NULL, NULL},
    {NAME("Keep-Alive"), HTTP_N_KEEP_ALIVE, HOP, WHY_PRIVATE, NULL, NULL},
    {NAME("Proxy-Connection"), HTTP_N_PROXY_CONNECTION, HOP, WHY_PRIVATE, NULL, NULL},
    {NAME("Proxy-Authenticate"), HTTP_N_PROXY_AUTHENTICATE, HOP, WHY_PRIVATE, NULL, NULL},
    {NAME("Proxy-Authorization"), HTTP_N_PROXY_AUTHORIZATION, HOP, WHY_PRIVATE, NULL, NULL},
    {NAME("TE"), HTTP_N_TE, HOP, WHY_PRIVATE, NULL, NULL},
    {NAME("Trailer"), HTTP_N_TRAILER, HOP, WHY_PRIVATE, NULL, NULL},
    {NAME("Transfer-Encoding"), HTTP_N_TRANSFER_ENCODING, HOP, WHY_PRIVATE, NULL, NULL},
    {NAME("HTTP2-Settings"), HTTP_N_HTTP2_SETTINGS, HOP, WHY_PRIVATE, NULL, NULL},
    {NAME("Upgrade"), HTTP_N_UPGRADE, HOP, WHY_PRIVATE, NULL, NULL},

    /* framing and routing */
    {NAME("Content-Length"), HTTP_N_CONTENT_LENGTH, HEADER_REBUILT | HEADER_NEVER_STORED,
     WHY_FRAMING, NULL, NULL},
    {NAME("Host"), HTTP_N_HOST, 0, NULL, NULL, NULL},
    {NAME("Expect"), HTTP_N_EXPECT, HEADER_REBUILT, NULL, NULL, NULL},
    {NAME("Via"), HTTP_N_VIA, HEADER_REBUILT, NULL, NULL, NULL},

    /* forwarding: what idemproxy saw, or a trusted peer's values kept */
    {NAME("Forwarded"), HTTP_N_FORWARDED, HEADER_REBUILT, NULL, NULL, NULL},
    {NAME("X-Forwarded-For"), HTTP_N_X_FORWARDED_FOR, HEADER_REBUILT, NULL, NULL, NULL},
    {NAME("X-Forwarded-Proto"), HTTP_N_X_FORWARDED_PROTO, HEADER_REBUILT, NULL, NULL, NULL},
    {NAME("X-Forwarded-Host"), HTTP_N_X_FORWARDED_HOST, HEADER_REBUILT, NULL, NULL, NULL},
    {NAME("X-Real-IP"), HTTP_N_X_REAL_IP, HEADER_REBUILT, NULL, NULL, NULL},

    /* relayed as the upstream sent it (idemproxy dates a response without one) */
    {NAME("Date"), HTTP_N_DATE, HEADER_NEVER_STORED | HEADER_FRESH, WHY_DATE, NULL, NULL},

    /* the request's id: the client's when valid, else one idemproxy makes;
     * the request's own goes upstream and on every response to it */
    {NAME("X-Request-Id"), HTTP_N_X_REQUEST_ID, HEADER_REBUILT | HEADER_NEVER_STORED | HEADER_FRESH,
     WHY_ID, NULL, NULL},

    /* credentials and cookies: forwarded and relayed, never stored */
    {NAME("Authorization"), HTTP_N_OTHER, HEADER_NEVER_STORED, WHY_PRIVATE, NULL, NULL},
    {NAME("Cookie"), HTTP_N_OTHER, HEADER_NEVER_STORED, WHY_PRIVATE, NULL, NULL},
    {NAME("Set-Cookie"), HTTP_N_OTHER, HEADER_NEVER_STORED, WHY_PRIVATE, NULL, NULL},
    {NAME("Set-Cookie2"), HTTP_N_OTHER, HEADER_NEVER_STORED, WHY_PRIVATE, NULL, NULL},
    {NAME("WWW-Authenticate"), HTTP_N_OTHER, HEADER_NEVER_STORED, WHY_PRIVATE, NULL, NULL},

    /* idemproxy's markers, in the order the published contract lists them */
    {NAME(MARKER_REPLAYED), HTTP_N_OTHER, HEADER_MARKER | HEADER_NEVER_STORED, WHY_MARKER, "true",
     "the response is the stored one of the first request with this key"},
    {NAME(MARKER_KEY_EXPIRES), HTTP_N_OTHER, HEADER_MARKER | HEADER_NEVER_STORED, WHY_MARKER, NULL,
     "an HTTP date: after it the key may run again"},
    {NAME(MARKER_BODY_OMITTED), HTTP_N_OTHER, HEADER_MARKER | HEADER_NEVER_STORED, WHY_MARKER,
     "true", "a replay whose body was too large to store: status and headers only"},
    {NAME(MARKER_ENFORCED), HTTP_N_OTHER, HEADER_MARKER | HEADER_NEVER_STORED | HEADER_FAIL_OPEN,
     WHY_MARKER, "false",
     "the store was unreachable: the request was forwarded without idempotency"},

    /* whether to retry: the upstream's, unless a replay says it (HEADER_RETRY_ADVICE) */
    {NAME("X-Should-Retry"), HTTP_N_OTHER, HEADER_RETRY_ADVICE, NULL, NULL, NULL},
    {NAME("Stripe-Should-Retry"), HTTP_N_OTHER, HEADER_RETRY_ADVICE, NULL, NULL, NULL},

    /* what every record keeps of a response (and the route's store_headers) */
    {NAME("Content-Type"), HTTP_N_CONTENT_TYPE, HEADER_STORED, NULL, NULL, NULL},
    {NAME("Content-Location"), HTTP_N_OTHER, HEADER_STORED, NULL, NULL, NULL},
    {NAME("Location"), HTTP_N_OTHER, HEADER_STORED, NULL, NULL, NULL},
    {NAME("ETag"), HTTP_N_OTHER, HEADER_STORED, NULL, NULL, NULL},
    {NAME("Last-Modified"), HTTP_N_OTHER, HEADER_STORED, NULL, NULL, NULL},
    /* a gRPC call's: how its messages are compressed, and its status
     * (in the trailers, or in the head of a trailers-only response) */
    {NAME("grpc-encoding"), HTTP_N_OTHER, HEADER_STORED, NULL, NULL, NULL},
    {NAME("grpc-status"), HTTP_N_OTHER, HEADER_STORED, NULL, NULL, NULL},
    {NAME("grpc-message"), HTTP_N_OTHER, HEADER_STORED, NULL, NULL, NULL},
    {NAME("grpc-status-details-bin"), HTTP_N_OTHER, HEADER_STORED, NULL, NULL, NULL},
};

const size_t header_npolicies = sizeof(header_policies) / sizeof(header_policies[0]);

const struct header_policy *header_policy(const char *name, size_t len)
{
	/* Length and first letter first: most names are out after two compares. */
	for (size_t i = 0; i < sizeof(header_policies) / sizeof(header_policies[0]); i++) {
		const struct header_policy *r = &header_policies[i];
		if (r->len == len && (r->name[0] | 0x20) == (name[0] | 0x20) &&
		    strncasecmp(name, r->name, len) == 0)
			return r;
	}
	return NULL;
}

unsigned header_flags(const char *name, size_t len)
{
	const struct header_policy *r = header_policy(name, len);

	return r ? r->flags : 0;
}
