/*
 * Workers: one thread each, with its own event loop, SO_REUSEPORT listener,
 * upstream pool and store connection. Nothing is shared between workers,
 * so the request path takes no lock. The main thread only starts them,
 * tells them to stop (a cross-thread event_active, which libevent makes
 * safe once evthread_use_pthreads() has run) and joins them.
 */
#include <event2/dns.h>
#include <event2/event.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "proxy/cache.h"
#include "proxy/clock.h"
#include "proxy/idemproxy.h"
#include "proxy/log.h"
#include "proxy/store.h"
#include "proxy/upstream.h"

#define DRAIN_CHECK_MS 50
#define TICK_MS 100
/* How long a cached record may answer replays: completed records are
 * immutable, so this only bounds how long an operator's deletion of a record
 * can go unseen by a worker. */
#define REPLAY_CACHE_MAX_AGE_US (5 * 1000000)
#define REQUEST_ID_WORKER_SHIFT 48  /* request ids: worker id in the top bits */

struct conf_gen *conf_gen_new(struct conf *conf)
{
	struct conf_gen *gen = calloc(1, sizeof(*gen));

	if (!gen)
		return NULL;
	gen->conf = conf;
	atomic_init(&gen->holders, 1);
	return gen;
}

static void conf_gen_acquire(struct conf_gen *gen)
{
	atomic_fetch_add(&gen->holders, 1);
}

void conf_gen_release(struct conf_gen *gen)
{
	if (gen && atomic_fetch_sub(&gen->holders, 1) == 1) {
		conf_free(gen->conf);
		free(gen);
	}
}

struct conf_gen *worker_conf_get(struct worker *w)
{
	w->gen_requests++;
	return w->gen;
}

void worker_conf_put(struct worker *w, struct conf_gen *gen)
{
	struct retired_gen *r;

	if (gen == w->gen) {
		w->gen_requests--;
		return;
	}
	LIST_FOREACH(r, &w->retired, link) {
		if (r->gen == gen) {
			if (--r->requests == 0) {
				LIST_REMOVE(r, link);
				conf_gen_release(r->gen);
				free(r);
			}
			return;
		}
	}
}

/* A store notification: an owner wrote its outcome somewhere. */
static void notify_cb(void *arg, const char *token)
{
	request_wake(arg, token);
}

/*
 * LISTEN once a route of conf lets duplicates wait, and not before: LISTEN
 * is session state, which pgbouncer in transaction mode does not keep.
 */
static void worker_listen(struct worker *w, const struct conf *conf)
{
	for (int i = 0; i < conf->nroutes && !w->listening; i++) {
		if (conf->routes[i].in_progress == IN_PROGRESS_WAIT) {
			store_listen(w->store, notify_cb, w);
			w->listening = 1;
		}
	}
}

/* Switch to the configuration a reload handed over (worker thread). */
static void reload_cb(evutil_socket_t fd, short what, void *arg)
{
	struct worker *w = arg;
	struct conf_gen *gen = atomic_exchange(&w->pending_gen, NULL);
	struct retired_gen *r;

	if (!gen)
		return;
	if (w->gen_requests == 0) {
		conf_gen_release(w->gen);
	} else if ((r = calloc(1, sizeof(*r)))) {
		r->gen = w->gen;
		r->requests = w->gen_requests;
		LIST_INSERT_HEAD(&w->retired, r, link);
	}
	/* else out of memory: the old configuration is kept until exit. */
	w->gen = gen;
	w->conf = gen->conf;
	w->gen_requests = 0;
	worker_listen(w, w->conf);
}

void worker_reload(struct worker *w, struct conf_gen *gen)
{
	struct conf_gen *unused;

	conf_gen_acquire(gen);
	/* A newer reload replaces one the worker has not switched to yet. */
	unused = atomic_exchange(&w->pending_gen, gen);
	conf_gen_release(unused);
	event_active(w->reload_ev, 0, 0);
}

/* Exit the loop once every request and connection has finished, or at the deadline. */
static void drain_cb(evutil_socket_t fd, short what, void *arg)
{
	struct worker *w = arg;
	struct timeval tv = { 0, DRAIN_CHECK_MS * 1000 };

	conn_close_idle(w);
	if (LIST_EMPTY(&w->requests) && LIST_EMPTY(&w->conns)) {
		event_base_loopbreak(w->base);
		return;
	}
	if (clock_now_us() >= w->drain_deadline_us) {
		if (w->past_deadline || LIST_EMPTY(&w->requests)) {
			event_base_loopbreak(w->base);
			return;
		}
		/* One more store_timeout for the records of what is left. */
		w->past_deadline = 1;
		w->drain_deadline_us = clock_now_us() + w->conf->store_timeout_ms * 1000;
		request_deadline_all(w);
	}
	evtimer_add(w->drain_timer, &tv);
}

/* The worker's repeating timer: batched access lines out, gauges refreshed. */
static void worker_tick_cb(evutil_socket_t fd, short what, void *arg)
{
	struct worker *w = arg;
	struct stats *s = &w->stats;

	log_flush();
	STATS_SET(s->client_conns, w->nconns);
	STATS_SET(s->requests_active, w->nrequests);
	STATS_SET(s->upstream_idle, upstream_pool_idle(w->pool));
	STATS_SET(s->upstream_active, w->nforwarding);
	STATS_SET(s->store_connected, store_ready(w->store));
	STATS_SET(s->store_pending, store_pending(w->store));
	STATS_SET(s->store_statements, store_batches(w->store));
	STATS_SET(s->store_operations, store_batched_ops(w->store));
}

/* Runs on the worker's own thread, activated by worker_stop(). */
static void stop_cb(evutil_socket_t fd, short what, void *arg)
{
	struct worker *w = arg;

	if (w->draining) {
		event_base_loopbreak(w->base);
		return;
	}
	w->draining = 1;
	w->drain_deadline_us = clock_now_us() + w->conf->shutdown_timeout_ms * 1000;
	listener_stop(w);
	drain_cb(-1, 0, w);
}

/*
 * Set up worker id on its own event loop, listening on the configured
 * address (SO_REUSEPORT lets every worker bind it). Returns 0, or -1 with
 * the reason logged; worker_free() cleans up either way.
 */
int worker_init(struct worker *w, int id, struct conf_gen *gen)
{
	const struct conf *conf = gen->conf;
	char host[64] = "localhost";
	struct timeval tick_tv = { 0, TICK_MS * 1000 };

	memset(w, 0, sizeof(*w));
	LIST_INIT(&w->conns);
	LIST_INIT(&w->requests);
	LIST_INIT(&w->waiters);
	LIST_INIT(&w->retired);
	conf_gen_acquire(gen);
	w->gen = gen;
	w->id = id;
	w->conf = conf;
	w->next_request_id = (uint64_t)id << REQUEST_ID_WORKER_SHIFT;
	gethostname(host, sizeof(host) - 1);
	snprintf(w->owner_id, sizeof(w->owner_id), "%s:%d:%d", host, (int)getpid(), id);
	w->base = event_base_new();
	if (!w->base)
		return -1;
	w->dns = evdns_base_new(w->base, EVDNS_BASE_INITIALIZE_NAMESERVERS);
	w->store = store_new(w->base, conf->database, conf->store_timeout_ms, w->owner_id);
	w->pool = upstream_pool_new(w->base, w->dns, conf->upstream_host, conf->upstream_port);
	w->cache = cache_new(conf->replay_cache, REPLAY_CACHE_MAX_AGE_US);
	w->drain_timer = evtimer_new(w->base, drain_cb, w);
	w->stop_ev = event_new(w->base, -1, 0, stop_cb, w);
	w->reload_ev = event_new(w->base, -1, 0, reload_cb, w);
	w->tick_timer = event_new(w->base, -1, EV_PERSIST, worker_tick_cb, w);
	if (!w->dns || !w->store || !w->pool || !w->cache || !w->drain_timer || !w->stop_ev ||
	    !w->tick_timer || !w->reload_ev || event_add(w->tick_timer, &tick_tv) < 0)
		return -1;
	worker_listen(w, conf);
	return listener_start(w);
}

void worker_free(struct worker *w)
{
	listener_stop(w);
	request_free_all(w);
	conn_free_all(w);
	upstream_pool_free(w->pool);
	store_free(w->store);
	cache_free(w->cache);
	if (w->drain_timer)
		event_free(w->drain_timer);
	if (w->stop_ev)
		event_free(w->stop_ev);
	if (w->reload_ev)
		event_free(w->reload_ev);
	/* Requests are gone, so are the retired configurations; then ours. */
	conf_gen_release(atomic_exchange(&w->pending_gen, NULL));
	conf_gen_release(w->gen);
	if (w->tick_timer)
		event_free(w->tick_timer);
	if (w->dns)
		evdns_base_free(w->dns, 0);
	if (w->base)
		event_base_free(w->base);
	memset(w, 0, sizeof(*w));
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;

	if (event_base_dispatch(w->base) < 0)
		log_error(NULL, "worker %d: event loop failed", w->id);
	log_flush();
	return NULL;
}

int worker_start(struct worker *w)
{
	return pthread_create(&w->thread, NULL, worker_main, w) == 0 ? 0 : -1;
}

/* Ask the worker to drain (first call) or to stop at once (second). */
void worker_stop(struct worker *w)
{
	event_active(w->stop_ev, 0, 0);
}

void worker_join(struct worker *w)
{
	pthread_join(w->thread, NULL);
}
