/* Unit tests of proxy/stats.c: where an observation lands in the latency buckets. */
#include "proxy/stats.h"

#include <event2/buffer.h>
#include <stdlib.h>
#include <string.h>

#include "tests/unit/unit.h"

#define SEC 1000000 /* microseconds */

/* The bucket one observation of us lands in. */
static int bucket_of(int64_t us)
{
	struct stats_histogram h;

	memset(&h, 0, sizeof(h));
	stats_observe(&h, us);
	for (int i = 0; i < STATS_BUCKETS; i++)
		if (atomic_load(&h.buckets[i]))
			return i;
	return -1;
}

static void test_buckets(void)
{
	CHECK(bucket_of(0) == 0);
	CHECK(bucket_of(500) == 0);
	CHECK(bucket_of(501) == 1);
	CHECK(bucket_of(10 * SEC) == STATS_BUCKETS - 4);
	/* Past 10 s: 30 s, 60 s, then +Inf. */
	CHECK(bucket_of(10 * SEC + 1) == STATS_BUCKETS - 3);
	CHECK(bucket_of(30 * SEC) == STATS_BUCKETS - 3);
	CHECK(bucket_of(30 * SEC + 1) == STATS_BUCKETS - 2);
	CHECK(bucket_of(60 * SEC) == STATS_BUCKETS - 2);
	CHECK(bucket_of(60 * SEC + 1) == STATS_BUCKETS - 1);
}

/* The rendered store histogram after one 45 s round trip. */
static void test_render(void)
{
	struct stats *st = calloc(1, sizeof(*st));
	struct stats *const each[] = {st};
	struct stats_limits limits = {"test", 1, 10, 0};
	struct evbuffer *out = evbuffer_new();
	char *text;
	size_t len;

	stats_observe(&st->hist[STATS_STORE_SECONDS], 45 * SEC);
	stats_render(out, each, 1, &limits);
	len = evbuffer_get_length(out);
	text = malloc(len + 1);
	evbuffer_remove(out, text, len);
	text[len] = '\0';
	CHECK(strstr(text, "idemproxy_store_seconds_bucket{le=\"10\"} 0\n"
			   "idemproxy_store_seconds_bucket{le=\"30\"} 0\n"
			   "idemproxy_store_seconds_bucket{le=\"60\"} 1\n"
			   "idemproxy_store_seconds_bucket{le=\"+Inf\"} 1\n"
			   "idemproxy_store_seconds_sum 45.000000\n"
			   "idemproxy_store_seconds_count 1\n") != NULL);
	free(text);
	evbuffer_free(out);
	free(st);
}

int main(void)
{
	test_buckets();
	test_render();
	UNIT_DONE("stats");
}
