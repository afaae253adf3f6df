/* Unit tests for proxy/cache.c: the per-worker replay cache. */
#include "proxy/cache.h"
#include "tests/unit/unit.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define SEC	       1000000LL
#define BIG_BUDGET     (64u * 1024 * 1024)
#define MAX_AGE	       (3600 * SEC)
#define T0	       (1000 * SEC)
#define MANY	       10000
#define LRU_SLOTS      8
#define SCOPE_PART_MAX 32

/* The scope of the three strings, for the calls below. */
#define SCOPE(a, o, k) (&(struct scope){(a), (o), (k)})

static const char HEADERS[] = "content-type: application/json\r\nx-a: 1\r\n";
static const unsigned char BODY[] = "{\"id\":42}";

/* A record with the given status, the fixed headers and body, and a
 * fingerprint filled with the status' low byte. */
static struct record record(int status)
{
	struct record e;

	memset(&e, 0, sizeof(e));
	memset(e.fingerprint, status & 0xff, sizeof(e.fingerprint));
	e.status = status;
	e.headers = HEADERS;
	e.headers_len = strlen(HEADERS);
	e.body = BODY;
	e.body_len = sizeof(BODY) - 1;
	return e;
}

/* Returns the status of the scope's entry, or -1 on a miss. */
static int status_of(struct cache *c, const char *actor, const char *op, const char *key,
		     int64_t now)
{
	const struct record *e = cache_get(c, SCOPE(actor, op, key), now);

	return e ? e->status : -1;
}

static void test_miss_then_hit(void)
{
	struct cache *c = cache_new(BIG_BUDGET, MAX_AGE);
	struct record in = record(201);
	char headers[sizeof(HEADERS)];
	unsigned char body[sizeof(BODY)];
	const struct record *out;

	CHECK(c != NULL);
	CHECK(cache_get(c, SCOPE("alice", "POST /orders", "k1"), T0) == NULL);
	CHECK(cache_misses(c) == 1);
	CHECK(cache_hits(c) == 0);

	memcpy(headers, HEADERS, sizeof(HEADERS));
	memcpy(body, BODY, sizeof(BODY));
	in.headers = headers;
	in.body = body;
	cache_put(c, SCOPE("alice", "POST /orders", "k1"), &in, 60 * SEC, T0);
	memset(headers, 'x', sizeof(headers));
	memset(body, 'x', sizeof(body));
	CHECK(cache_count(c) == 1);
	CHECK(cache_bytes(c) > strlen(HEADERS) + sizeof(BODY) - 1);

	out = cache_get(c, SCOPE("alice", "POST /orders", "k1"), T0 + SEC);
	CHECK(out != NULL);
	if (out) {
		CHECK(out->status == 201);
		CHECK(out->fingerprint[0] == 201 && out->fingerprint[31] == 201);
		CHECK(out->headers_len == strlen(HEADERS));
		CHECK(memcmp(out->headers, HEADERS, out->headers_len) == 0);
		CHECK(out->headers[out->headers_len] == '\0');
		CHECK(out->body_len == sizeof(BODY) - 1);
		CHECK(memcmp(out->body, BODY, out->body_len) == 0);
		CHECK(out->body_omitted == 0);
	}
	CHECK(cache_hits(c) == 1);
	CHECK(cache_misses(c) == 1);
	cache_free(c);
	cache_free(NULL);
}

static void test_scope_isolation(void)
{
	struct cache *c = cache_new(BIG_BUDGET, MAX_AGE);
	struct record e1 = record(201), e2 = record(202), e3 = record(203);

	cache_put(c, SCOPE("alice", "op", "k"), &e1, 60 * SEC, T0);
	CHECK(status_of(c, "alice", "op", "k", T0) == 201);
	CHECK(status_of(c, "bob", "op", "k", T0) == -1);
	CHECK(status_of(c, "alice", "op2", "k", T0) == -1);
	CHECK(status_of(c, "alice", "op", "k2", T0) == -1);
	CHECK(status_of(c, "alice", "op", "K", T0) == -1);
	CHECK(status_of(c, "alic", "eop", "k", T0) == -1);
	CHECK(status_of(c, "alice", "o", "pk", T0) == -1);
	CHECK(status_of(c, "", "aliceop", "k", T0) == -1);

	/* Concatenations that agree must still be different scopes. */
	cache_put(c, SCOPE("a", "bc", "k"), &e1, 60 * SEC, T0);
	cache_put(c, SCOPE("ab", "c", "k"), &e2, 60 * SEC, T0);
	cache_put(c, SCOPE("a", "b", "ck"), &e3, 60 * SEC, T0);
	CHECK(cache_count(c) == 4);
	CHECK(status_of(c, "a", "bc", "k", T0) == 201);
	CHECK(status_of(c, "ab", "c", "k", T0) == 202);
	CHECK(status_of(c, "a", "b", "ck", T0) == 203);
	CHECK(status_of(c, "abc", "", "k", T0) == -1);
	CHECK(status_of(c, "", "abc", "k", T0) == -1);

	/* Empty strings are ordinary values. */
	cache_put(c, SCOPE("", "", ""), &e2, 60 * SEC, T0);
	CHECK(status_of(c, "", "", "", T0) == 202);
	CHECK(status_of(c, "", "", "k", T0) == -1);

	/* The same key under another actor is another record. */
	cache_put(c, SCOPE("bob", "op", "k"), &e2, 60 * SEC, T0);
	CHECK(status_of(c, "alice", "op", "k", T0) == 201);
	CHECK(status_of(c, "bob", "op", "k", T0) == 202);
	cache_free(c);
}

static void test_expiry(void)
{
	struct cache *c = cache_new(BIG_BUDGET, 30 * SEC);
	struct record e = record(200);

	/* By ttl: the record's own expiry comes first. */
	cache_put(c, SCOPE("a", "op", "ttl"), &e, 10 * SEC, T0);
	CHECK(status_of(c, "a", "op", "ttl", T0 + 10 * SEC - 1) == 200);
	CHECK(cache_count(c) == 1);
	CHECK(status_of(c, "a", "op", "ttl", T0 + 10 * SEC) == -1);
	CHECK(cache_count(c) == 0);
	CHECK(cache_bytes(c) == 0);

	/* By max_age: the cache's own bound comes first. */
	cache_put(c, SCOPE("a", "op", "age"), &e, 3600 * SEC, T0);
	CHECK(status_of(c, "a", "op", "age", T0 + 30 * SEC - 1) == 200);
	CHECK(status_of(c, "a", "op", "age", T0 + 30 * SEC) == -1);
	CHECK(cache_count(c) == 0);

	/* Expired entries stay until looked up, and then count as misses. */
	cache_put(c, SCOPE("a", "op", "late"), &e, SEC, T0);
	CHECK(cache_count(c) == 1);
	CHECK(status_of(c, "a", "op", "late", T0 + 100 * SEC) == -1);
	CHECK(cache_count(c) == 0);

	/* A lifetime that is not positive is never cached, and drops the old one. */
	cache_put(c, SCOPE("a", "op", "zero"), &e, 10 * SEC, T0);
	cache_put(c, SCOPE("a", "op", "zero"), &e, 0, T0);
	CHECK(cache_count(c) == 0);
	cache_put(c, SCOPE("a", "op", "neg"), &e, -SEC, T0);
	CHECK(cache_count(c) == 0);
	CHECK(status_of(c, "a", "op", "neg", T0 - 2 * SEC) == -1);
	cache_free(c);

	/* Huge ttl and max_age do not overflow into the past. */
	c = cache_new(BIG_BUDGET, INT64_MAX);
	cache_put(c, SCOPE("a", "op", "forever"), &e, INT64_MAX, T0);
	CHECK(status_of(c, "a", "op", "forever", T0 + 3600 * SEC) == 200);
	CHECK(status_of(c, "a", "op", "forever", INT64_MAX - 1) == 200);
	cache_free(c);

	/* max_age 0: nothing is ever cached. */
	c = cache_new(BIG_BUDGET, 0);
	cache_put(c, SCOPE("a", "op", "k"), &e, 10 * SEC, T0);
	CHECK(cache_count(c) == 0);
	cache_free(c);
}

static void test_replace(void)
{
	struct cache *c = cache_new(BIG_BUDGET, MAX_AGE);
	struct record e = record(201);
	const struct record *out;
	size_t one;

	cache_put(c, SCOPE("a", "op", "k"), &e, 60 * SEC, T0);
	one = cache_bytes(c);
	e = record(409);
	e.body = (const unsigned char *)"longer body than before";
	e.body_len = strlen((const char *)e.body);
	cache_put(c, SCOPE("a", "op", "k"), &e, 5 * SEC, T0 + SEC);
	CHECK(cache_count(c) == 1);
	CHECK(cache_bytes(c) == one + e.body_len - (sizeof(BODY) - 1));
	out = cache_get(c, SCOPE("a", "op", "k"), T0 + 2 * SEC);
	CHECK(out != NULL);
	if (out) {
		CHECK(out->status == 409);
		CHECK(out->fingerprint[0] == (409 & 0xff));
		CHECK(out->body_len == e.body_len);
		CHECK(memcmp(out->body, "longer body than before", out->body_len) == 0);
	}
	/* The replacement's ttl applies, not the first one's. */
	CHECK(status_of(c, "a", "op", "k", T0 + 6 * SEC) == -1);
	CHECK(cache_bytes(c) == 0);
	cache_free(c);
}

/* Writes key number i into buf (SCOPE_PART_MAX bytes). */
static const char *key_name(char *buf, int i)
{
	snprintf(buf, SCOPE_PART_MAX, "key-%05d", i);
	return buf;
}

static void test_lru_eviction(void)
{
	struct cache *probe = cache_new(BIG_BUDGET, MAX_AGE);
	struct record e = record(200);
	struct cache *c;
	char k[SCOPE_PART_MAX];
	size_t cost;
	int i;

	/* Every key-NNNNN entry costs the same; measure it. */
	cache_put(probe, SCOPE("a", "op", key_name(k, 0)), &e, 60 * SEC, T0);
	cost = cache_bytes(probe);
	cache_free(probe);

	/* Room for exactly LRU_SLOTS entries (and each is within 1/8). */
	c = cache_new(LRU_SLOTS * cost + cost / 2, MAX_AGE);
	for (i = 0; i < LRU_SLOTS; i++) {
		e.status = 200 + i;
		cache_put(c, SCOPE("a", "op", key_name(k, i)), &e, 60 * SEC, T0 + i);
	}
	CHECK(cache_count(c) == LRU_SLOTS);
	CHECK(cache_bytes(c) == LRU_SLOTS * cost);

	/* Touch key 0: key 1 becomes the least recently used. */
	CHECK(status_of(c, "a", "op", key_name(k, 0), T0 + SEC) == 200);
	e.status = 300;
	cache_put(c, SCOPE("a", "op", key_name(k, 100)), &e, 60 * SEC, T0 + SEC);
	CHECK(cache_count(c) == LRU_SLOTS);
	CHECK(cache_bytes(c) <= LRU_SLOTS * cost + cost / 2);
	CHECK(status_of(c, "a", "op", key_name(k, 1), T0 + SEC) == -1);

	/* Next victims in order: 2, then 3. */
	e.status = 301;
	cache_put(c, SCOPE("a", "op", key_name(k, 101)), &e, 60 * SEC, T0 + SEC);
	CHECK(status_of(c, "a", "op", key_name(k, 2), T0 + SEC) == -1);
	CHECK(status_of(c, "a", "op", key_name(k, 3), T0 + SEC) == 203);
	e.status = 302;
	cache_put(c, SCOPE("a", "op", key_name(k, 102)), &e, 60 * SEC, T0 + SEC);
	CHECK(status_of(c, "a", "op", key_name(k, 4), T0 + SEC) == -1);
	CHECK(status_of(c, "a", "op", key_name(k, 3), T0 + SEC) == 203);

	CHECK(status_of(c, "a", "op", key_name(k, 0), T0 + SEC) == 200);
	for (i = 5; i < LRU_SLOTS; i++)
		CHECK(status_of(c, "a", "op", key_name(k, i), T0 + SEC) == 200 + i);
	CHECK(status_of(c, "a", "op", key_name(k, 100), T0 + SEC) == 300);
	CHECK(status_of(c, "a", "op", key_name(k, 101), T0 + SEC) == 301);
	CHECK(status_of(c, "a", "op", key_name(k, 102), T0 + SEC) == 302);
	CHECK(cache_count(c) == LRU_SLOTS);

	cache_free(c);
}

static void test_oversized(void)
{
	enum { BUDGET = 8192 };
	static unsigned char body[BUDGET / 8];
	struct cache *c = cache_new(BUDGET, MAX_AGE);
	struct record e = record(200);

	cache_put(c, SCOPE("a", "op", "k"), &e, 60 * SEC, T0);
	CHECK(cache_count(c) == 1);
	e.body = body;
	e.body_len = sizeof(body);
	cache_put(c, SCOPE("a", "op", "k"), &e, 60 * SEC, T0);
	CHECK(cache_count(c) == 0);
	CHECK(cache_bytes(c) == 0);
	CHECK(status_of(c, "a", "op", "k", T0) == -1);

	/* Just under the limit fits. */
	e.body_len = BUDGET / 8 - 2 * strlen(HEADERS) - 256;
	cache_put(c, SCOPE("a", "op", "k"), &e, 60 * SEC, T0);
	CHECK(cache_count(c) == 1);
	CHECK(cache_bytes(c) <= BUDGET / 8);
	cache_free(c);
}

static void test_disabled(void)
{
	struct cache *c = cache_new(0, MAX_AGE);
	struct record e = record(200);

	CHECK(c != NULL);
	cache_put(c, SCOPE("a", "op", "k"), &e, 60 * SEC, T0);
	CHECK(cache_count(c) == 0);
	CHECK(cache_bytes(c) == 0);
	CHECK(cache_get(c, SCOPE("a", "op", "k"), T0) == NULL);
	CHECK(cache_get(c, SCOPE("a", "op", "k"), T0) == NULL);
	CHECK(cache_misses(c) == 2);
	CHECK(cache_hits(c) == 0);
	cache_remove(c, SCOPE("a", "op", "k"));
	cache_free(c);
}

static void test_empty_and_omitted(void)
{
	struct cache *c = cache_new(BIG_BUDGET, MAX_AGE);
	struct record e;
	const struct record *out;
	static const unsigned char binary[] = {'a', 0, 'b', 0, 0xff};

	memset(&e, 0, sizeof(e));
	e.status = 204;
	cache_put(c, SCOPE("a", "op", "empty"), &e, 60 * SEC, T0);
	out = cache_get(c, SCOPE("a", "op", "empty"), T0);
	CHECK(out != NULL);
	if (out) {
		CHECK(out->status == 204);
		CHECK(out->headers != NULL && out->headers_len == 0 && out->headers[0] == '\0');
		CHECK(out->body != NULL && out->body_len == 0);
		CHECK(out->body_omitted == 0);
	}

	e = record(200);
	e.body = NULL;
	e.body_len = 0;
	e.body_omitted = 1;
	cache_put(c, SCOPE("a", "op", "omitted"), &e, 60 * SEC, T0);
	out = cache_get(c, SCOPE("a", "op", "omitted"), T0);
	CHECK(out != NULL);
	if (out) {
		CHECK(out->body_omitted == 1);
		CHECK(out->body_len == 0);
		CHECK(out->headers_len == strlen(HEADERS));
	}

	e = record(200);
	e.body = binary;
	e.body_len = sizeof(binary);
	cache_put(c, SCOPE("a", "op", "binary"), &e, 60 * SEC, T0);
	out = cache_get(c, SCOPE("a", "op", "binary"), T0);
	CHECK(out != NULL);
	if (out) {
		CHECK(out->body_len == sizeof(binary));
		CHECK(memcmp(out->body, binary, sizeof(binary)) == 0);
	}
	cache_free(c);
}

static void test_remove(void)
{
	struct cache *c = cache_new(BIG_BUDGET, MAX_AGE);
	struct record e = record(200);

	cache_put(c, SCOPE("a", "op", "k1"), &e, 60 * SEC, T0);
	cache_put(c, SCOPE("a", "op", "k2"), &e, 60 * SEC, T0);
	cache_remove(c, SCOPE("a", "op", "k3"));
	cache_remove(c, SCOPE("b", "op", "k1"));
	CHECK(cache_count(c) == 2);
	cache_remove(c, SCOPE("a", "op", "k1"));
	CHECK(cache_count(c) == 1);
	CHECK(status_of(c, "a", "op", "k1", T0) == -1);
	CHECK(status_of(c, "a", "op", "k2", T0) == 200);
	cache_remove(c, SCOPE("a", "op", "k1"));
	cache_remove(c, SCOPE("a", "op", "k2"));
	CHECK(cache_count(c) == 0);
	CHECK(cache_bytes(c) == 0);
	cache_remove(c, SCOPE("a", "op", "k2"));
	cache_free(c);
}

static void test_many(void)
{
	struct cache *c = cache_new(BIG_BUDGET, MAX_AGE);
	struct record e = record(0);
	char k[SCOPE_PART_MAX], actor[SCOPE_PART_MAX];
	int i, misses = 0;

	for (i = 0; i < MANY; i++) {
		e.status = i;
		snprintf(actor, sizeof(actor), "actor-%d", i % 7);
		cache_put(c, SCOPE(actor, "POST /x", key_name(k, i)), &e, 60 * SEC, T0);
	}
	CHECK(cache_count(c) == MANY);
	for (i = 0; i < MANY; i++) {
		snprintf(actor, sizeof(actor), "actor-%d", i % 7);
		if (status_of(c, actor, "POST /x", key_name(k, i), T0) != i)
			misses++;
		/* Wrong actor for the key: a miss. */
		snprintf(actor, sizeof(actor), "actor-%d", (i + 1) % 7);
		if (status_of(c, actor, "POST /x", key_name(k, i), T0) != -1)
			misses++;
	}
	CHECK(misses == 0);
	CHECK(cache_hits(c) == MANY);
	CHECK(cache_misses(c) == MANY);

	/* Drop every other one, then re-add them: still all found. */
	for (i = 0; i < MANY; i += 2) {
		snprintf(actor, sizeof(actor), "actor-%d", i % 7);
		cache_remove(c, SCOPE(actor, "POST /x", key_name(k, i)));
	}
	CHECK(cache_count(c) == MANY / 2);
	for (i = 0; i < MANY; i += 2) {
		e.status = i;
		snprintf(actor, sizeof(actor), "actor-%d", i % 7);
		cache_put(c, SCOPE(actor, "POST /x", key_name(k, i)), &e, 60 * SEC, T0);
	}
	CHECK(cache_count(c) == MANY);

	for (i = 0; i < MANY; i++) {
		snprintf(actor, sizeof(actor), "actor-%d", i % 7);
		cache_remove(c, SCOPE(actor, "POST /x", key_name(k, i)));
	}
	CHECK(cache_count(c) == 0);
	CHECK(cache_bytes(c) == 0);
	cache_free(c);
}

int main(void)
{
	test_miss_then_hit();
	test_scope_isolation();
	test_expiry();
	test_replace();
	test_lru_eviction();
	test_oversized();
	test_disabled();
	test_empty_and_omitted();
	test_remove();
	test_many();
	UNIT_DONE("test_cache");
}
