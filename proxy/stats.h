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
#define STATS_BUCKETS	 15  /* latency histogram buckets, +Inf included */

enum stats_hist {
	STATS_STORE_SECONDS,	/* a claim's or an outcome write's round trip */
	STATS_UPSTREAM_SECONDS, /* request written to response complete */
	STATS_HISTS,
};

struct stats_histogram {
	_Atomic int64_t buckets[STATS_BUCKETS]; /* not cumulative */
	_Atomic int64_t sum_us;
};

struct stats {
	_Atomic int64_t requests[STATS_ROUTES_MAX + 1][OUT_COUNT];
	struct stats_histogram hist[STATS_HISTS];
	_Atomic int64_t fenced;	       /* outcome writes refused by fencing */
	_Atomic int64_t waits;	       /* duplicates that waited (in_progress wait) */
	/* Gauges, refreshed by the worker's timer. */
	_Atomic int64_t client_conns;
	_Atomic int64_t requests_active;
	_Atomic int64_t upstream_idle;
	_Atomic int64_t upstream_active;
	_Atomic int64_t store_connected;
	_Atomic int64_t store_pending;
	_Atomic int64_t store_statements;
	_Atomic int64_t store_operations;
};

/* Only the owning thread writes: a plain load and store, no atomic RMW. */
#define STATS_ADD(field, n)                                                                \
	atomic_store_explicit(&(field), atomic_load_explicit(&(field), memory_order_relaxed) + \
						(n),                                         \
			      memory_order_relaxed)
#define STATS_SET(field, v) atomic_store_explicit(&(field), (v), memory_order_relaxed)

void stats_observe(struct stats *s, enum stats_hist h, int64_t us);

/*
 * The counter row of the route named operation (main thread, before any
 * worker sees the route). Rows are found by name, so a route keeps its
 * counters across reloads; past STATS_ROUTES_MAX names, new routes share
 * STATS_NO_ROUTE.
 */
int stats_route_id(const char *operation);

/* Prometheus text for the n workers' stats. */
void stats_render(struct evbuffer *out, struct stats *const *each, int n);

/* One metric without labels: its HELP and TYPE lines, then its value. */
void stats_metric(struct evbuffer *out, const char *name, const char *type, const char *help,
		  int64_t v);

#endif
