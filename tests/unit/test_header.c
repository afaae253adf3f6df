/* Unit tests for http/header.c: the header-policy table and its lookup. */
#include "http/header.h"
#include "proxy/http.h"
#include "tests/unit/unit.h"

#include <ctype.h>
#include <string.h>
#include <strings.h>

#include <event2/buffer.h>

#include "proxy/replay.h"

/* The rows hold together: what one flag implies, the texts each needs. */
static void test_rows(void)
{
	for (size_t i = 0; i < header_npolicies; i++) {
		const struct header_policy *r = &header_policies[i];
		unsigned f = r->flags;

		CHECK(r->len == strlen(r->name));
		/* a hop-by-hop header or a marker is never stored, and says why */
		if (f & (HEADER_HOP | HEADER_MARKER))
			CHECK(f & HEADER_NEVER_STORED);
		CHECK(!(f & HEADER_NEVER_STORED) == !r->why);
		CHECK(!((f & HEADER_NEVER_STORED) && (f & HEADER_STORED)));
		/* a marker tells the contract what it means; nothing else has one */
		CHECK(!(f & HEADER_MARKER) == !r->about);
		CHECK((f & HEADER_MARKER) || !r->value);
		CHECK(!(f & HEADER_FAIL_OPEN) || (f & HEADER_MARKER));
		/* the names the parser acts on are hop-by-hop exactly by their class */
		CHECK(!(f & HEADER_HOP) ==
		      !(r->known >= HTTP_N_CONNECTION && r->known <= HTTP_N_UPGRADE));
		for (size_t k = i + 1; k < header_npolicies; k++)
			CHECK(strcasecmp(r->name, header_policies[k].name) != 0);
	}
}

/* Every row is found by its name in any case; other names by none. */
static void test_lookup(void)
{
	static const char *const others[] = {
	    "", "T", "TEE", "Hosts", "Content-Types", "Set-Cookie3", "Idempotency-Key",
	    "Idempotent-Replayed2", "X-Request-Ids", "Cookies", "ETags",
	};
	char lower[64], upper[64];

	for (size_t i = 0; i < header_npolicies; i++) {
		const struct header_policy *r = &header_policies[i];
		for (size_t k = 0; k <= r->len; k++) {
			lower[k] = (char)tolower((unsigned char)r->name[k]);
			upper[k] = (char)toupper((unsigned char)r->name[k]);
		}
		CHECK(header_policy(r->name, r->len) == r);
		CHECK(header_policy(lower, r->len) == r);
		CHECK(header_policy(upper, r->len) == r);
		CHECK(header_flags(lower, r->len) == r->flags);
		CHECK(http_name_of(upper, r->len) == r->known);
		/* a prefix of a name is not the name */
		CHECK(header_policy(r->name, r->len - 1) != r);
	}
	for (size_t i = 0; i < sizeof(others) / sizeof(others[0]); i++) {
		CHECK(header_policy(others[i], strlen(others[i])) == NULL);
		CHECK(header_flags(others[i], strlen(others[i])) == 0);
	}
}

/* What the table decides for the names that matter most. */
static void test_decisions(void)
{
	CHECK(header_flags("WWW-Authenticate", 16) & HEADER_NEVER_STORED);
	CHECK(header_flags("Set-Cookie2", 11) & HEADER_NEVER_STORED);
	CHECK(header_flags("HTTP2-Settings", 14) & HEADER_NEVER_STORED);
	CHECK(header_flags("content-length", 14) & HEADER_NEVER_STORED);
	CHECK(header_flags(MARKER_ENFORCED, strlen(MARKER_ENFORCED)) & HEADER_FAIL_OPEN);
	CHECK(header_flags("x-forwarded-for", 15) == HEADER_REBUILT);
	CHECK(header_flags("ETag", 4) == HEADER_STORED);
	CHECK(header_flags("Host", 4) == 0);
	CHECK(header_policy("Host", 4) != NULL);
	/* the retry advice is stored when asked, never marked as idemproxy's */
	CHECK(header_flags("x-should-retry", 14) == HEADER_RETRY_ADVICE);
	CHECK(header_flags("Stripe-Should-Retry", 19) == HEADER_RETRY_ADVICE);
}

/*
 * A replay of a stored 5xx says X-Should-Retry: false, and only a 5xx; the
 * stored advice lines go and every other stored line stays, in order.
 */
static void test_replay_advice(void)
{
	static const char lines[] = "Content-Type: text/plain\r\n"
				    "X-Should-Retry: true\r\n"
				    "stripe-should-retry: true\r\n"
				    "X-Should-Retry-Later: 1\r\n"
				    "Date: Fri, 04 Dec 2026 10:00:00 GMT\r\n";
	static const char want[] = "Content-Type: text/plain\r\n"
				   "X-Should-Retry-Later: 1\r\n";
	struct evbuffer *out = evbuffer_new();

	CHECK(replay_says_final(500) && replay_says_final(503) && replay_says_final(599));
	CHECK(!replay_says_final(499) && !replay_says_final(600) && !replay_says_final(200) &&
	      !replay_says_final(409) && !replay_says_final(429));
	http_add_lines_except(out, lines, sizeof(lines) - 1, HEADER_FRESH | HEADER_RETRY_ADVICE);
	CHECK(evbuffer_get_length(out) == sizeof(want) - 1 &&
	      memcmp(evbuffer_pullup(out, -1), want, sizeof(want) - 1) == 0);
	evbuffer_drain(out, evbuffer_get_length(out));
	/* not a 5xx: the upstream's advice is replayed as stored */
	http_add_lines_except(out, lines, sizeof(lines) - 1, HEADER_FRESH);
	CHECK(evbuffer_get_length(out) == sizeof(lines) - 1 - 37);
	evbuffer_free(out);
}

int main(void)
{
	test_rows();
	test_lookup();
	test_decisions();
	test_replay_advice();
	UNIT_DONE("header");
}
