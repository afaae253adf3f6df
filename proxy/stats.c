/*
 * Counters and their Prometheus text. Workers write their own struct stats
 * (stats.h); the route registry and the rendering run on the main thread.
 */
#include <event2/buffer.h>
#include <string.h>

#include "proxy/stats.h"

/* Upper bounds of the latency buckets, in microseconds; the last is +Inf. */
static const int64_t stats_bounds_us[STATS_BUCKETS - 1] = {
	500, 1000, 2500, 5000, 10000, 25000, 50000, 100000,
	250000, 500000, 1000000, 2500000, 5000000, 10000000,
};

static const char *const stats_hist_names[STATS_HISTS] = {
	[STATS_STORE_SECONDS] = "idemproxy_store_seconds",
	[STATS_UPSTREAM_SECONDS] = "idemproxy_upstream_seconds",
};

static const char *const stats_hist_help[STATS_HISTS] = {
	[STATS_STORE_SECONDS] = "Store round trips of claims and outcome writes.",
	[STATS_UPSTREAM_SECONDS] = "Upstream requests, from written to response complete.",
};

/* Operation names by counter row; row STATS_NO_ROUTE is requests no route matched. */
static char *stats_route_names[STATS_ROUTES_MAX + 1];
static int stats_nroutes = 1;

void stats_observe(struct stats *s, enum stats_hist h, int64_t us)
{
	struct stats_histogram *hist = &s->hist[h];
	int i = 0;

	while (i < STATS_BUCKETS - 1 && us > stats_bounds_us[i])
		i++;
	STATS_ADD(hist->buckets[i], 1);
	STATS_ADD(hist->sum_us, us);
}

int stats_route_id(const char *operation)
{
	int id = 1;

	while (id < stats_nroutes && strcmp(stats_route_names[id], operation) != 0)
		id++;
	if (id == stats_nroutes && id <= STATS_ROUTES_MAX &&
	    (stats_route_names[id] = strdup(operation)))
		stats_nroutes++;
	return id < stats_nroutes ? id : STATS_NO_ROUTE;
}

static int64_t stats_sum(struct stats *const *each, int n, size_t offset)
{
	int64_t v = 0;

	for (int i = 0; i < n; i++)
		v += atomic_load_explicit((_Atomic int64_t *)((char *)each[i] + offset),
					  memory_order_relaxed);
	return v;
}

#define STATS_SUM(each, n, field) stats_sum(each, n, offsetof(struct stats, field))

/* "# HELP" and "# TYPE" lines of a metric. */
static void stats_head(struct evbuffer *out, const char *name, const char *type,
		       const char *help)
{
	evbuffer_add_printf(out, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

void stats_metric(struct evbuffer *out, const char *name, const char *type, const char *help,
		  int64_t v)
{
	stats_head(out, name, type, help);
	evbuffer_add_printf(out, "%s %lld\n", name, (long long)v);
}

static void stats_requests(struct evbuffer *out, struct stats *const *each, int n)
{
	int64_t v;

	stats_head(out, "idemproxy_requests_total", "counter",
		   "Requests by route (operation) and outcome.");
	for (int r = 0; r < stats_nroutes; r++) {
		for (int o = OUT_PASS; o < OUT_COUNT; o++) {
			v = STATS_SUM(each, n, requests[r][o]);
			if (v)
				evbuffer_add_printf(out,
						    "idemproxy_requests_total{route=\"%s\","
						    "outcome=\"%s\"} %lld\n",
						    r == STATS_NO_ROUTE ? "" : stats_route_names[r],
						    outcome_name(o), (long long)v);
		}
	}
}

static void stats_histogram(struct evbuffer *out, struct stats *const *each, int n,
			    enum stats_hist h)
{
	const char *name = stats_hist_names[h];
	int64_t cum = 0;

	stats_head(out, name, "histogram", stats_hist_help[h]);
	for (int b = 0; b < STATS_BUCKETS; b++) {
		cum += STATS_SUM(each, n, hist[h].buckets[b]);
		if (b < STATS_BUCKETS - 1)
			evbuffer_add_printf(out, "%s_bucket{le=\"%g\"} %lld\n", name,
					    (double)stats_bounds_us[b] / 1e6, (long long)cum);
		else
			evbuffer_add_printf(out, "%s_bucket{le=\"+Inf\"} %lld\n", name,
					    (long long)cum);
	}
	evbuffer_add_printf(out, "%s_sum %.6f\n%s_count %lld\n", name,
			    (double)STATS_SUM(each, n, hist[h].sum_us) / 1e6, name, (long long)cum);
}

void stats_render(struct evbuffer *out, struct stats *const *each, int n)
{
	stats_requests(out, each, n);
	for (int h = 0; h < STATS_HISTS; h++)
		stats_histogram(out, each, n, h);
	stats_metric(out, "idemproxy_record_writes_fenced_total", "counter",
		  "Outcome writes refused because the record was taken over.",
		  STATS_SUM(each, n, fenced));
	stats_metric(out, "idemproxy_waits_total", "counter",
		  "Duplicates that waited for a running owner (in_progress wait).",
		  STATS_SUM(each, n, waits));
	stats_metric(out, "idemproxy_client_connections", "gauge", "Open client connections.",
		  STATS_SUM(each, n, client_conns));
	stats_metric(out, "idemproxy_requests_active", "gauge", "Requests being handled.",
		  STATS_SUM(each, n, requests_active));
	stats_head(out, "idemproxy_upstream_connections", "gauge",
		   "Upstream connections: idle in the pools, or carrying a request.");
	evbuffer_add_printf(out, "idemproxy_upstream_connections{state=\"idle\"} %lld\n",
			    (long long)STATS_SUM(each, n, upstream_idle));
	evbuffer_add_printf(out, "idemproxy_upstream_connections{state=\"active\"} %lld\n",
			    (long long)STATS_SUM(each, n, upstream_active));
	stats_metric(out, "idemproxy_store_connections", "gauge",
		  "Workers whose store connection is up.", STATS_SUM(each, n, store_connected));
	stats_metric(out, "idemproxy_store_pending", "gauge", "Store operations queued or in flight.",
		  STATS_SUM(each, n, store_pending));
	stats_metric(out, "idemproxy_store_statements_total", "counter",
		  "Store statements sent (each a batch of operations).",
		  STATS_SUM(each, n, store_statements));
	stats_metric(out, "idemproxy_store_operations_total", "counter",
		  "Store operations those statements carried.", STATS_SUM(each, n, store_operations));
}
