/*
 * Workers (worker.c): one thread each, with its own event loop, listener,
 * upstream pool, store connection, replay cache and requests. Nothing is
 * shared between workers, so the request path takes no lock. The main
 * thread starts them, hands them reloaded configurations, tells them to
 * stop and joins them.
 */
#ifndef IDEMPROXY_WORKER_H
#define IDEMPROXY_WORKER_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "proxy/conf_gen.h"
#include "proxy/stats.h"

struct admit;
struct budget_queue;
struct cache;
struct evdns_base;
struct event;
struct event_base;
struct listener;
struct pace;
struct request_ctx;
struct store;
struct upstream_pool;

struct worker {
	struct event_base *base;
	struct evdns_base *dns;
	struct conf_gens gens;      /* the configuration new requests get */
	_Atomic(struct conf_gen *) pending_gen;  /* handed over by a reload */
	atomic_int stops;           /* worker_stop calls so far */
	int stops_seen;             /* of them, handled by the loop */
	int wake_fd;                /* eventfd: the main thread's wake-up */
	struct event *wake_ev;
	struct listener *listener;
	struct store *store;
	int listening;              /* the store LISTENs (a route may wait) */
	struct upstream_pool *pool;
	struct cache *cache;        /* completed records, for replays */
	struct budget_queue *budget; /* the relay budget's limits and this worker's waits */
	struct request_ctx *reqs;
	char owner_id[96];          /* lease owner: host:pid:worker */
	int id;
	int draining;               /* stopped accepting; exit when idle */
	int past_deadline;          /* shutdown_timeout passed: last writes only */
	int64_t drain_deadline_us;
	struct event *drain_timer;
	struct event *tick_timer;   /* access lines out, gauges refreshed */
	pthread_t thread;
	struct stats stats;         /* written here, read by the admin listener */
};

/*
 * Set up worker id on its own event loop with configuration gen (held
 * from now on), listening on the configured address, sharing pace (owner
 * durations) and admit (owners in flight) with the other workers. Returns
 * 0, or -1 with the reason logged; worker_free() cleans up either way.
 */
int worker_init(struct worker *w, int id, struct conf_gen *gen, struct pace *pace,
		struct admit *admit)
	__attribute__((warn_unused_result));
/* Hand a new configuration to the worker (from the main thread). */
void worker_reload(struct worker *w, struct conf_gen *gen);
int worker_start(struct worker *w) __attribute__((warn_unused_result));
/* Ask the worker to drain (first call) or to stop at once (second). */
void worker_stop(struct worker *w);
void worker_join(struct worker *w);
void worker_free(struct worker *w);

#endif
