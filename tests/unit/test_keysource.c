/* Unit tests for proxy/keysource.c (key_from's parsers) and proxy/pace.c (Retry-After). */
#include "proxy/keysource.h"
#include "proxy/pace.h"
#include "tests/unit/unit.h"

#include <string.h>

static char out[64];

static int query(const char *q, const char *name)
{
	return keysource_query_value(q, strlen(q), name, out, sizeof(out));
}

static int json(const char *doc, const char *path)
{
	return keysource_json_value((const unsigned char *)doc, strlen(doc), path, out,
				    sizeof(out));
}

static void test_query(void)
{
	CHECK(query("a=1&key=abc&b=2", "key") == 3);
	CHECK_STR(out, "abc");
	CHECK(query("key=a%2Db+c", "key") == 5);
	CHECK_STR(out, "a-b c");
	CHECK(query("keys=1&xkey=2", "key") == -1);
	CHECK(query("", "key") == -1);
	CHECK(query("key=1&key=2", "key") == -2);
	CHECK(query("key", "key") == -2);
	CHECK(query("key=%4", "key") == -2);
	CHECK(query("key=%zz", "key") == -2);
	CHECK(query("key=", "key") == 0);
	/* Longer than out: refused, never cut. */
	CHECK(query("key=0123456789012345678901234567890123456789012345678901234567890123456789",
		    "key") == -2);
}

static void test_json(void)
{
	CHECK(json("{\"event\": {\"id\": \"evt_1\"}}", "event.id") == 5);
	CHECK_STR(out, "evt_1");
	CHECK(json("{\"id\": 12345678901234567890}", "id") == 20);
	CHECK_STR(out, "12345678901234567890");
	CHECK(json("{\"id\": 1.5}", "id") == -2);
	CHECK(json("{\"id\": {\"a\": 1}}", "id") == -2);
	CHECK(json("{\"id\": null}", "id") == -2);
	CHECK(json("{\"other\": 1}", "id") == -1);
	CHECK(json("not json", "id") == -1);
	CHECK(json("[1, 2]", "id") == -1);
	CHECK(json("{\"a\": {\"b\": {\"c\": \"deep\"}}}", "a.b.c") == 4);
	CHECK(json("{\"id\": \"[[[[\", \"x\": 1}", "id") == 4);
	/* Nesting beyond 256 levels is never parsed (yajl frees by recursion). */
	{
		static char deep[2 * 300000 + 32];
		size_t n = 0;

		n += (size_t)sprintf(deep, "{\"id\": \"k\", \"x\": ");
		for (int i = 0; i < 300000; i++)
			deep[n++] = '[';
		for (int i = 0; i < 300000; i++)
			deep[n++] = ']';
		deep[n++] = '}';
		CHECK(keysource_json_value((const unsigned char *)deep, n, "id", out, sizeof(out)) ==
		      -1);
	}
}

static void test_pace(void)
{
	struct pace *p = pace_new(4);

	CHECK(p != NULL);
	if (!p)
		return;
	/* Nothing known: the floor. */
	CHECK(pace_retry_ms(p, 1, 0, 30000) == PACE_MIN_MS);
	for (int i = 0; i < 5; i++)
		pace_owner_done(p, 1, 3000);
	pace_owner_done(p, 1, 60000); /* one outlier moves the median nowhere */
	CHECK(pace_retry_ms(p, 1, 500, 30000) == 3300 - 500);
	/* Never past the lease, never below the floor. */
	CHECK(pace_retry_ms(p, 1, 0, 2000) == 2000);
	CHECK(pace_retry_ms(p, 1, 10000, 30000) == PACE_MIN_MS);
	CHECK(pace_retry_ms(p, 1, 0, 500) == PACE_MIN_MS);
	/* Rows are apart; out-of-range rows are ignored. */
	CHECK(pace_retry_ms(p, 2, 0, 30000) == PACE_MIN_MS);
	pace_owner_done(p, 7, 1);
	CHECK(pace_retry_ms(p, 7, 0, 30000) == PACE_MIN_MS);
	/* The ring keeps the last PACE_SAMPLES. */
	for (int i = 0; i < PACE_SAMPLES; i++)
		pace_owner_done(p, 1, 10000);
	CHECK(pace_retry_ms(p, 1, 0, 60000) == 11000);
	pace_free(p);
}

int main(void)
{
	test_query();
	test_json();
	test_pace();
	UNIT_DONE("keysource");
}
