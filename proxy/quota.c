/*
 * Per-actor quotas, counted in PostgreSQL across every instance that
 * shares the table.
 *
 * Counting on the owner path would cost each claim a count over the
 * actor's records. Instead the main thread of each instance runs, every
 * quota_refresh, one aggregate statement that returns the actors at or
 * above either quota (quota_sql), and publishes them as a sorted array
 * under a mutex; a worker's claim asks it (quota_check), a lock and a
 * binary search, and nothing at all while no actor is over. An actor over
 * a quota is then refused new scopes, never replays of its records (the
 * request reads the record instead of claiming: STORE_PEEK). The count
 * lags by up to one refresh plus the statement's own time: an actor may
 * exceed a quota by what all instances let it claim in that lag.
 *
 * A record counts once whatever its state, except a tombstone (state
 * 'expired', expired_keys refuse), which counts toward neither quota: it
 * holds no response, and its window is bounded. Stored bytes are the
 * response's headers and body as stored (sealed, when body_encryption is
 * on). When the store fails a refresh, the last set stays.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include <libpq-fe.h>

#include "proxy/clock.h"
#include "proxy/log.h"
#include "proxy/quota.h"
#include "proxy/stats.h"
#include "proxy/store.h"

/* Actors kept over a quota at most: the statement's LIMIT. */
#define QUOTA_ACTORS_MAX   100000
#define QUOTA_NUM_MAX	   32
#define QUOTA_STR(x)	   #x
#define QUOTA_TEXT(x)	   QUOTA_STR(x)

/*
 * One row per actor at or above a quota (a quota of 0 is off): the actor,
 * whether the record quota is what it reached, and the milliseconds until
 * its oldest completed record expires (NULL: none completed). On Citus,
 * where the table is distributed by idem_key, the grouping is one
 * repartitioned aggregate the coordinator finishes.
 */
const char quota_sql[] =
    "SELECT actor, $1 > 0 AND count(*) >= $1,"
    " ceil(extract(epoch FROM min(expires_at) - now()) * 1000)::bigint"
    " FROM idempotency_records WHERE state <> 'expired' GROUP BY actor"
    " HAVING $1 > 0 AND count(*) >= $1"
    " OR $2 > 0 AND coalesce(sum(coalesce(octet_length(response_headers), 0)"
    "  + coalesce(octet_length(response_body), 0)), 0) >= $2"
    " LIMIT $3";

static const Oid quota_types[] = {STORE_OID_INT8, STORE_OID_INT8, STORE_OID_INT8};

/* The published set: actors sorted by strcmp, each with its reason and retry time. */
struct quota_actor {
	char *actor;
	enum quota_over over;
	int64_t retry_at_us; /* CLOCK_MONOTONIC */
};

static struct {
	pthread_mutex_t lock;
	atomic_int n; /* read without the lock: 0 answers at once */
	struct quota_actor *actors;
	int64_t refresh_ms;
} quota_set = {.lock = PTHREAD_MUTEX_INITIALIZER};

struct quota {
	struct store *store;
	struct event *timer;
	int64_t max_records;
	size_t max_bytes;
	int64_t refresh_ms;
	int running;
	char nums[3][QUOTA_NUM_MAX];
	const char *params[3];
	int64_t refreshes, errors, over; /* counters, and the last set's size */
};

static int quota_cmp(const void *a, const void *b)
{
	return strcmp(((const struct quota_actor *)a)->actor,
		      ((const struct quota_actor *)b)->actor);
}

static void quota_actors_free(struct quota_actor *a, int n)
{
	for (int i = 0; i < n; i++)
		free(a[i].actor);
	free(a);
}

/* Replace the published set by a (n actors, sorted; taken over). */
static void quota_publish(struct quota_actor *a, int n, int64_t refresh_ms)
{
	struct quota_actor *old;
	int oldn;

	pthread_mutex_lock(&quota_set.lock);
	old = quota_set.actors;
	oldn = atomic_load(&quota_set.n);
	quota_set.actors = a;
	quota_set.refresh_ms = refresh_ms;
	atomic_store(&quota_set.n, n);
	pthread_mutex_unlock(&quota_set.lock);
	quota_actors_free(old, oldn);
}

enum quota_over quota_check(const char *actor, int64_t *retry_ms)
{
	struct quota_actor key = {.actor = (char *)actor}, *hit;
	enum quota_over over = QUOTA_UNDER;
	int64_t now;

	if (atomic_load_explicit(&quota_set.n, memory_order_relaxed) == 0)
		return QUOTA_UNDER;
	pthread_mutex_lock(&quota_set.lock);
	hit = bsearch(&key, quota_set.actors, (size_t)atomic_load(&quota_set.n),
		      sizeof(*quota_set.actors), quota_cmp);
	if (hit) {
		over = hit->over;
		now = clock_now_us();
		*retry_ms = hit->retry_at_us > now ? (hit->retry_at_us - now + 999) / 1000 : 0;
		if (*retry_ms < quota_set.refresh_ms)
			*retry_ms = quota_set.refresh_ms;
	}
	pthread_mutex_unlock(&quota_set.lock);
	return over;
}

static void quota_arm(struct quota *q)
{
	struct timeval tv = clock_tv(q->refresh_ms);

	if (q->refresh_ms > 0 && (q->max_records || q->max_bytes))
		evtimer_add(q->timer, &tv);
}

/* The statement's rows into a new set, published; on failure the old one stays. */
static void quota_done(void *arg, enum store_result res, const PGresult *result)
{
	struct quota *q = arg;
	struct quota_actor *a;
	int n = result ? PQntuples(result) : 0, kept = 0;
	int64_t now = clock_now_us(), ms;

	q->running = 0;
	quota_arm(q);
	if (res != STORE_OK || PQnfields(result) != 3) {
		q->errors++;
		return;
	}
	q->refreshes++;
	a = calloc((size_t)n + 1, sizeof(*a));
	if (!a) {
		log_error(NULL, "quota: out of memory; the last set of actors over a quota stays");
		return;
	}
	for (int i = 0; i < n; i++) {
		a[kept].actor = strdup(PQgetvalue(result, i, 0));
		if (!a[kept].actor)
			continue;
		a[kept].over = strcmp(PQgetvalue(result, i, 1), "t") == 0 ? QUOTA_RECORDS
									  : QUOTA_BYTES;
		ms = PQgetisnull(result, i, 2) ? 0 : strtoll(PQgetvalue(result, i, 2), NULL, 10);
		a[kept].retry_at_us = now + (ms > 0 ? ms : 0) * 1000 + q->refresh_ms * 1000;
		kept++;
	}
	qsort(a, (size_t)kept, sizeof(*a), quota_cmp);
	if (kept != q->over)
		log_info(NULL, "quota: %d actors at or above a quota", kept);
	q->over = kept;
	quota_publish(a, kept, q->refresh_ms);
}

static void quota_tick(evutil_socket_t fd, short what, void *arg)
{
	struct quota *q = arg;
	struct store_stmt stmt = {quota_sql, 3, quota_types, q->params, NULL, NULL};

	if (q->running || !(q->max_records || q->max_bytes))
		return;
	q->running = 1;
	store_query(q->store, &stmt, quota_done, q);
}

struct quota *quota_new(struct event_base *base, struct store *st)
{
	struct quota *q = calloc(1, sizeof(*q));

	if (!q)
		return NULL;
	q->store = st;
	q->timer = evtimer_new(base, quota_tick, q);
	if (!q->timer) {
		free(q);
		return NULL;
	}
	for (int i = 0; i < 3; i++)
		q->params[i] = q->nums[i];
	snprintf(q->nums[2], QUOTA_NUM_MAX, "%d", QUOTA_ACTORS_MAX);
	return q;
}

void quota_configure(struct quota *q, int64_t max_records, size_t max_bytes, int64_t refresh_ms)
{
	int was = q->max_records || q->max_bytes;

	q->max_records = max_records;
	q->max_bytes = max_bytes;
	q->refresh_ms = refresh_ms;
	snprintf(q->nums[0], QUOTA_NUM_MAX, "%lld", (long long)max_records);
	snprintf(q->nums[1], QUOTA_NUM_MAX, "%zu", max_bytes);
	evtimer_del(q->timer);
	if (!max_records && !max_bytes) {
		/* Off: nobody is over. */
		q->over = 0;
		quota_publish(NULL, 0, refresh_ms);
		return;
	}
	if (q->running)
		return; /* its answer arms the next */
	if (!was) {
		/* On: the first refresh at once, not a refresh from now. */
		struct timeval tv = {0, 0};

		evtimer_add(q->timer, &tv);
		return;
	}
	quota_arm(q);
}

void quota_render(const struct quota *q, struct evbuffer *out)
{
	stats_metric(out, "idemproxy_quota_refreshes_total", "counter",
		     "Reads of the actors at or above a quota (actor_max_records, "
		     "actor_max_stored_bytes).",
		     q->refreshes);
	stats_metric(out, "idemproxy_quota_refresh_errors_total", "counter",
		     "Those reads the store failed: the last set stayed.", q->errors);
	stats_metric(out, "idemproxy_quota_actors_over", "gauge",
		     "Actors at or above a quota, as of the last read.", q->over);
}

void quota_free(struct quota *q)
{
	if (!q)
		return;
	event_free(q->timer);
	free(q);
	quota_publish(NULL, 0, 0);
}
