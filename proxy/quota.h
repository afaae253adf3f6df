/*
 * Per-actor quotas counted in PostgreSQL (quota.c): actor_max_records and
 * actor_max_stored_bytes. The main thread reads, every quota_refresh, the
 * actors at or above either quota with one aggregate statement; the
 * workers ask the set it publishes before each claim.
 */
#ifndef IDEMPROXY_QUOTA_H
#define IDEMPROXY_QUOTA_H

#include <stddef.h>
#include <stdint.h>

struct event_base;
struct evbuffer;
struct store;
struct quota;

/* Why an actor may make no new record. */
enum quota_over {
	QUOTA_UNDER,   /* under both quotas, or none is set */
	QUOTA_RECORDS, /* actor_max_records */
	QUOTA_BYTES,   /* actor_max_stored_bytes */
};

/* The refresher, on base's loop, through st. NULL when out of memory. */
struct quota *quota_new(struct event_base *base, struct store *st);
/* Start-up's or a reload's quotas (0: off) and refresh interval. */
void quota_configure(struct quota *q, int64_t max_records, size_t max_bytes, int64_t refresh_ms);
/* The refresher's counters as Prometheus text (on its own thread). */
void quota_render(const struct quota *q, struct evbuffer *out);
/* A refresh in flight calls back: free the store first. */
void quota_free(struct quota *q);

/*
 * Any thread: whether actor was at or above a quota at the last refresh,
 * and then in *retry_ms when a retry may find room (its oldest completed
 * record's expiry plus one refresh, at least one refresh).
 */
enum quota_over quota_check(const char *actor, int64_t *retry_ms);

/* The aggregate statement, for its tests: $1 records, $2 bytes, $3 at most this many actors. */
extern const char quota_sql[];

#endif
