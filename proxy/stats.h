/*
 * Counters for /metrics. Each worker owns one struct stats and is its only
 * writer (relaxed atomic stores, no lock prefix on the request path); the
 * admin listener on the main thread reads every worker's and sums them.
 */
#ifndef IDEMPROXY_STATS_H
#define IDEMPROXY_STATS_H

#include <stdatomic.h>
#include <stdint.h>

#include "proxy/outcome.h"

struct evbuffer;

#define STATS_ROUTES_MAX 256 /* distinct operation names over all reloads */
#define STATS_NO_ROUTE	 0   /* requests no route matched */
#define STATS_BUCKETS	 17  /* latency histogram buckets, +Inf included */

enum stats_hist {
	STATS_STORE_SECONDS,	/* a claim's or an outcome write's round trip */
	STATS_UPSTREAM_SECONDS, /* request written to response complete */
	STATS_HISTS,
};

/* Responses idemproxy makes at the HTTP layer, before any route: by status. */
enum stats_refusal {
	STATS_REFUSED_400,
	STATS_REFUSED_408,
	STATS_REFUSED_413,
	STATS_REFUSED_414,
	STATS_REFUSED_431,
	STATS_REFUSED_503,
	STATS_REFUSALS,
};

/*
 * Requests a limit refused before their claim was made, by the limit (the
 * reason label of idemproxy_refusals_total): a new limit is a row here and
 * its name in stats.c's stats_limit_names.
 */
enum stats_limit {
	STATS_LIMIT_MAX_OWNERS,	      /* max_owners */
	STATS_LIMIT_ACTOR_MAX_OWNERS, /* actor_max_owners */
	STATS_LIMIT_ACTOR_MAX_RECORDS, /* actor_max_records (429) */
	STATS_LIMIT_ACTOR_MAX_BYTES,   /* actor_max_stored_bytes (429) */
	STATS_LIMIT_EXPIRED_KEY,       /* a tombstone of expired_keys refuse (422) */
	STATS_LIMITS,
};

/* The limit's reason label ("max_owners"). */
const char *stats_limit_name(enum stats_limit limit);

struct stats_histogram {
	_Atomic int64_t buckets[STATS_BUCKETS]; /* not cumulative */
	_Atomic int64_t sum_us;
};

struct stats {
	_Atomic int64_t requests[STATS_ROUTES_MAX + 1][OUT_COUNT];
	/* Whole requests, from their first byte to their last answer. */
	struct stats_histogram duration[STATS_ROUTES_MAX + 1][OUT_COUNT];
	struct stats_histogram hist[STATS_HISTS];
	_Atomic int64_t refusals[STATS_REFUSALS];
	_Atomic int64_t limited[STATS_LIMITS]; /* claims a limit refused (enum stats_limit) */
	_Atomic int64_t claims;	       /* claims sent to the store */
	_Atomic int64_t replays[2];    /* replays answered from the store [0] or the cache [1] */
	_Atomic int64_t conflicts;     /* same key, another request */
	_Atomic int64_t fenced;	       /* outcome writes refused by fencing */
	_Atomic int64_t waits;	       /* duplicates that waited (in_progress wait) */
	_Atomic int64_t dropped_underscore; /* request headers not forwarded: a name holding '_' */
	/* Gauges, refreshed by the worker's timer. */
	_Atomic int64_t client_conns;
	_Atomic int64_t requests_active;
	_Atomic int64_t owners_active; /* counted owners in flight (max_owners) */
	_Atomic int64_t upstream_idle;
	_Atomic int64_t upstream_active;
	_Atomic int64_t store_connected;
	_Atomic int64_t store_pending;
	_Atomic int64_t store_statements;
	_Atomic int64_t store_operations;
	_Atomic int64_t store_retries[2]; /* by enum store_retry_kind */
	_Atomic int64_t cache_hits;
	_Atomic int64_t cache_misses;
	_Atomic int64_t cache_entries;
	_Atomic int64_t cache_bytes;
};

/* What the process is configured for, beside the workers' counters. */
struct stats_limits {
	const char *version;
	int workers;
	int64_t max_connections;
	int64_t replay_cache_bytes; /* all workers' budgets */
};

/* Only the owning thread writes: a plain load and store, no atomic RMW. */
#define STATS_ADD(field, n)                                                                \
	atomic_store_explicit(&(field), atomic_load_explicit(&(field), memory_order_relaxed) + \
						(n),                                         \
			      memory_order_relaxed)
#define STATS_SET(field, v) atomic_store_explicit(&(field), (v), memory_order_relaxed)

/* One observation of us microseconds. */
void stats_observe(struct stats_histogram *h, int64_t us);

/* The refusal row of an HTTP-layer status, or -1 for another status. */
int stats_refusal(int status);

/*
 * The counter row of the route named operation (main thread, before any
 * worker sees the route). Rows are found by name, so a route keeps its
 * counters across reloads; past STATS_ROUTES_MAX names, new routes share
 * STATS_NO_ROUTE.
 */
int stats_route_id(const char *operation);

/*
 * Prometheus text for the n workers' stats. Every series of a known label
 * set is there from the start, at 0: each registered route with each
 * outcome, each refusal status.
 */
void stats_render(struct evbuffer *out, struct stats *const *each, int n,
		  const struct stats_limits *limits);

/* The "# HELP" and "# TYPE" lines of a metric family. */
void stats_head(struct evbuffer *out, const char *name, const char *type, const char *help);

/* One metric without labels: its HELP and TYPE lines, then its value. */
void stats_metric(struct evbuffer *out, const char *name, const char *type, const char *help,
		  int64_t v);

#endif
