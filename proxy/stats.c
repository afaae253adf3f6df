/*
 * Counters and their Prometheus text. Workers write their own struct stats
 * (stats.h); the route registry and the rendering run on the main thread.
 */
#include <event2/buffer.h>
#include <stdio.h>
#include <string.h>

#include "proxy/stats.h"

/*
 * Upper bounds of the latency buckets, in microseconds; the last is +Inf.
 * They reach 60 s so that a request held to upstream_timeout (30 s by
 * default) or a little past it still lands in a finite bucket.
 */
static const int64_t stats_bounds_us[STATS_BUCKETS - 1] = {
	500, 1000, 2500, 5000, 10000, 25000, 50000, 100000,
	250000, 500000, 1000000, 2500000, 5000000, 10000000, 30000000, 60000000,
};

static const char *const stats_hist_names[STATS_HISTS] = {
	[STATS_STORE_SECONDS] = "idemproxy_store_seconds",
	[STATS_UPSTREAM_SECONDS] = "idemproxy_upstream_seconds",
};

static const char *const stats_hist_help[STATS_HISTS] = {
	[STATS_STORE_SECONDS] = "Store round trips of claims and outcome writes.",
	[STATS_UPSTREAM_SECONDS] = "Upstream requests, from written to response complete.",
};

#define STATS_LABELS_MAX 512

/* Operation names by counter row; row STATS_NO_ROUTE is requests no route matched. */
static char *stats_route_names[STATS_ROUTES_MAX + 1];
static int stats_nroutes = 1;

static const int stats_refusal_status[STATS_REFUSALS] = {
	[STATS_REFUSED_400] = 400, [STATS_REFUSED_408] = 408, [STATS_REFUSED_413] = 413,
	[STATS_REFUSED_414] = 414, [STATS_REFUSED_431] = 431, [STATS_REFUSED_503] = 503,
};

static const char *const stats_limit_names[STATS_LIMITS] = {
	[STATS_LIMIT_MAX_OWNERS] = "max_owners",
	[STATS_LIMIT_ACTOR_MAX_OWNERS] = "actor_max_owners",
	[STATS_LIMIT_ACTOR_MAX_RECORDS] = "actor_max_records",
	[STATS_LIMIT_ACTOR_MAX_BYTES] = "actor_max_stored_bytes",
	[STATS_LIMIT_EXPIRED_KEY] = "expired_key",
};

_Static_assert(sizeof(stats_limit_names) / sizeof(stats_limit_names[0]) == STATS_LIMITS,
	       "stats_limit_names must name every limit");

const char *stats_limit_name(enum stats_limit limit)
{
	return stats_limit_names[limit];
}

void stats_observe(struct stats_histogram *hist, int64_t us)
{
	int i = 0;

	while (i < STATS_BUCKETS - 1 && us > stats_bounds_us[i])
		i++;
	STATS_ADD(hist->buckets[i], 1);
	STATS_ADD(hist->sum_us, us);
}

int stats_refusal(int status)
{
	for (int i = 0; i < STATS_REFUSALS; i++)
		if (stats_refusal_status[i] == status)
			return i;
	return -1;
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
void stats_head(struct evbuffer *out, const char *name, const char *type,
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

/* The label value of row r's route: "" for requests no route matched. */
static const char *stats_route_label(int r)
{
	return r == STATS_NO_ROUTE ? "" : stats_route_names[r];
}

/*
 * 1 when row r shows outcome o even at 0: a route can end in every
 * outcome; a request no route matched is relayed or refused.
 */
static int stats_known(int r, int o)
{
	return r != STATS_NO_ROUTE || o == OUT_PASS || o == OUT_REJECTED;
}

static void stats_requests(struct evbuffer *out, struct stats *const *each, int n)
{
	int64_t v;

	stats_head(out, "idemproxy_requests_total", "counter",
		   "Requests by route (operation) and outcome.");
	for (int r = 0; r < stats_nroutes; r++) {
		for (int o = OUT_PASS; o < OUT_COUNT; o++) {
			v = STATS_SUM(each, n, requests[r][o]);
			if (v || stats_known(r, o))
				evbuffer_add_printf(out,
						    "idemproxy_requests_total{route=\"%s\","
						    "outcome=\"%s\"} %lld\n",
						    stats_route_label(r), outcome_name(o), (long long)v);
		}
	}
}

/*
 * The series of one histogram (the sum over workers of the one at offset
 * in struct stats); labels ("route=\"x\",") come before le.
 */
static void stats_histogram_series(struct evbuffer *out, struct stats *const *each, int n,
				   const char *name, const char *labels, size_t offset)
{
	int64_t cum = 0;
	const char *sep = *labels ? "," : "", *open = *labels ? "{" : "", *close = *labels ? "}" : "";
	double sum = (double)stats_sum(each, n, offset + offsetof(struct stats_histogram, sum_us)) / 1e6;

	for (int b = 0; b < STATS_BUCKETS; b++) {
		cum += stats_sum(each, n, offset + offsetof(struct stats_histogram, buckets[b]));
		if (b < STATS_BUCKETS - 1)
			evbuffer_add_printf(out, "%s_bucket{%s%sle=\"%g\"} %lld\n", name, labels, sep,
					    (double)stats_bounds_us[b] / 1e6, (long long)cum);
		else
			evbuffer_add_printf(out, "%s_bucket{%s%sle=\"+Inf\"} %lld\n", name, labels,
					    sep, (long long)cum);
	}
	evbuffer_add_printf(out, "%s_sum%s%s%s %.6f\n%s_count%s%s%s %lld\n", name, open, labels,
			    close, sum, name, open, labels, close, (long long)cum);
}

static void stats_durations(struct evbuffer *out, struct stats *const *each, int n)
{
	static const char name[] = "idemproxy_request_duration_seconds";
	char labels[STATS_LABELS_MAX];

	stats_head(out, name, "histogram",
		   "Whole requests, first byte to last answer, by route and outcome.");
	for (int r = 0; r < stats_nroutes; r++) {
		for (int o = OUT_PASS; o < OUT_COUNT; o++) {
			if (!stats_known(r, o) && !STATS_SUM(each, n, requests[r][o]))
				continue;
			snprintf(labels, sizeof(labels), "route=\"%s\",outcome=\"%s\"",
				 stats_route_label(r), outcome_name(o));
			stats_histogram_series(out, each, n, name, labels,
					       offsetof(struct stats, duration[r][o]));
		}
	}
}

static void stats_refusals(struct evbuffer *out, struct stats *const *each, int n)
{
	stats_head(out, "idemproxy_http_refusals_total", "counter",
		   "Responses idemproxy made at the HTTP layer, before any route, by status.");
	for (int i = 0; i < STATS_REFUSALS; i++)
		evbuffer_add_printf(out, "idemproxy_http_refusals_total{status=\"%d\"} %lld\n",
				    stats_refusal_status[i], (long long)STATS_SUM(each, n, refusals[i]));
}

static void stats_limited(struct evbuffer *out, struct stats *const *each, int n)
{
	stats_head(out, "idemproxy_refusals_total", "counter",
		   "Requests refused by a limit before their claim was made, by the limit: 429 "
		   "for the owner and quota limits, 422 for an expired key (expired_keys "
		   "refuse).");
	for (int i = 0; i < STATS_LIMITS; i++)
		evbuffer_add_printf(out, "idemproxy_refusals_total{reason=\"%s\"} %lld\n",
				    stats_limit_names[i], (long long)STATS_SUM(each, n, limited[i]));
}

/* The metrics that are one sum over the workers, with their labels if any. */
#define STATS_SIMPLE(name, labels, type, help, field) \
	{name, labels, type, help, offsetof(struct stats, field)}
static const struct stats_simple {
	const char *name;
	const char *labels; /* NULL: none; else the series' labels */
	const char *type;
	const char *help;   /* NULL: the series belongs to the family above */
	size_t offset;
} stats_simple[] = {
	STATS_SIMPLE("idemproxy_claims_total", NULL, "counter", "Claims sent to the store.", claims),
	STATS_SIMPLE("idemproxy_replays_total", "source=\"store\"", "counter",
		     "Stored responses replayed, from the store or the replay cache.", replays[0]),
	STATS_SIMPLE("idemproxy_replays_total", "source=\"cache\"", "counter", NULL, replays[1]),
	STATS_SIMPLE("idemproxy_conflicts_total", NULL, "counter",
		     "Requests that reused a key with another payload.", conflicts),
	STATS_SIMPLE("idemproxy_replay_cache_hits_total", NULL, "counter",
		     "Replay cache lookups that found a record.", cache_hits),
	STATS_SIMPLE("idemproxy_replay_cache_misses_total", NULL, "counter",
		     "Replay cache lookups that did not.", cache_misses),
	STATS_SIMPLE("idemproxy_replay_cache_entries", NULL, "gauge",
		     "Records the replay caches hold.", cache_entries),
	STATS_SIMPLE("idemproxy_replay_cache_bytes", NULL, "gauge", "Bytes the replay caches hold.",
		     cache_bytes),
	STATS_SIMPLE("idemproxy_record_writes_fenced_total", NULL, "counter",
		     "Outcome writes refused because the record was taken over.", fenced),
	STATS_SIMPLE("idemproxy_waits_total", NULL, "counter",
		     "Duplicates that waited for a running owner (in_progress wait).", waits),
	STATS_SIMPLE("idemproxy_headers_dropped_total", "reason=\"underscore\"", "counter",
		     "Client request headers not forwarded upstream, by reason: a name holding an "
		     "underscore (underscores_in_headers off).",
		     dropped_underscore),
	STATS_SIMPLE("idemproxy_client_connections", NULL, "gauge", "Open client connections.",
		     client_conns),
	STATS_SIMPLE("idemproxy_requests_active", NULL, "gauge", "Requests being handled.",
		     requests_active),
	STATS_SIMPLE("idemproxy_owners_active", NULL, "gauge",
		     "Owners in flight, as max_owners counts them: from the decision to claim a key "
		     "until its record is written.",
		     owners_active),
	STATS_SIMPLE("idemproxy_upstream_connections", "state=\"idle\"", "gauge",
		     "Upstream connections: idle in the pools, or carrying a request.",
		     upstream_idle),
	STATS_SIMPLE("idemproxy_upstream_connections", "state=\"active\"", "gauge", NULL,
		     upstream_active),
	STATS_SIMPLE("idemproxy_store_connections", NULL, "gauge",
		     "Workers whose store connection is up.", store_connected),
	STATS_SIMPLE("idemproxy_store_pending", NULL, "gauge",
		     "Store operations queued or in flight.", store_pending),
	STATS_SIMPLE("idemproxy_store_statements_total", NULL, "counter",
		     "Store statements sent (each a batch of operations).", store_statements),
	STATS_SIMPLE("idemproxy_store_operations_total", NULL, "counter",
		     "Store operations those statements carried.", store_operations),
	STATS_SIMPLE("idemproxy_store_retries_total", "sqlstate=\"40001\"", "counter",
		     "Store statements sent again because PostgreSQL rolled them back: a "
		     "serialization failure (40001) or a deadlock (40P01).",
		     store_retries[0]),
	STATS_SIMPLE("idemproxy_store_retries_total", "sqlstate=\"40P01\"", "counter", NULL,
		     store_retries[1]),
};

void stats_render(struct evbuffer *out, struct stats *const *each, int n,
		  const struct stats_limits *limits)
{
	stats_head(out, "idemproxy_build_info", "gauge", "The running idemproxy's version.");
	evbuffer_add_printf(out, "idemproxy_build_info{version=\"%s\"} 1\n", limits->version);
	stats_metric(out, "idemproxy_workers", "gauge", "Worker threads.", limits->workers);
	stats_metric(out, "idemproxy_client_connections_limit", "gauge",
		     "Client connections accepted at most (max_connections).",
		     limits->max_connections);
	stats_metric(out, "idemproxy_replay_cache_bytes_limit", "gauge",
		     "The replay caches' budget (replay_cache times workers).",
		     limits->replay_cache_bytes);
	stats_requests(out, each, n);
	stats_durations(out, each, n);
	stats_refusals(out, each, n);
	stats_limited(out, each, n);
	for (int h = 0; h < STATS_HISTS; h++) {
		stats_head(out, stats_hist_names[h], "histogram", stats_hist_help[h]);
		stats_histogram_series(out, each, n, stats_hist_names[h], "",
				       offsetof(struct stats, hist[h]));
	}
	for (size_t i = 0; i < sizeof(stats_simple) / sizeof(stats_simple[0]); i++) {
		const struct stats_simple *m = &stats_simple[i];

		if (m->help)
			stats_head(out, m->name, m->type, m->help);
		evbuffer_add_printf(out, "%s%s%s%s %lld\n", m->name, m->labels ? "{" : "",
				    m->labels ? m->labels : "", m->labels ? "}" : "",
				    (long long)stats_sum(each, n, m->offset));
	}
}
