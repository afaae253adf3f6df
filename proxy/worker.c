/*
 * Workers: one thread each, with its own event loop, SO_REUSEPORT listener,
 * upstream pool and store connection. Nothing is shared between workers,
 * so the request path takes no lock: a worker's event base has none
 * (EVENT_BASE_FLAG_NOLOCK). The main thread only starts them, hands them
 * configurations and stop requests through atomics, wakes them with a
 * write to their eventfd, and joins them.
 */
#include "proxy/worker.h"

#include <errno.h>
#include <event2/event.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "conf/conf.h"
#include "proxy/budget.h"
#include "proxy/cache.h"
#include "proxy/clock.h"
#include "proxy/evalloc.h"
#include "proxy/evfree.h"
#include "proxy/listener.h"
#include "proxy/log.h"
#include "proxy/request.h"
#include "proxy/resolver.h"
#include "proxy/secrets.h"
#include "proxy/store.h"
#include "proxy/upstream.h"

#define DRAIN_CHECK_MS 50
#define TICK_MS 100
/* How long a cached record may answer replays: completed records are
 * immutable, so this only bounds how long an operator's deletion of a record
 * can go unseen by a worker. */
#define REPLAY_CACHE_MAX_AGE_US (5 * 1000000)
#define REQUEST_ID_WORKER_SHIFT 48  /* request ids: worker id in the top bits */

static const struct conf *worker_conf(const struct worker *w)
{
	return conf_gens_conf(&w->gens);
}

/* A store notification: an owner wrote its outcome somewhere. */
static void notify_cb(void *arg, const char *token)
{
	struct worker *w = arg;

	request_wake(w->reqs, token);
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

/* The relay budget's limits of conf, for this worker's exchanges from now on. */
static void worker_budget(struct worker *w, const struct conf *conf)
{
	budget_queue_limits(w->budget, conf->relay_budget, conf->relay_budget_per_peer);
}

/* Wake the worker's loop from another thread: its wake_ev reads the eventfd. */
static void worker_wake(struct worker *w)
{
	uint64_t one = 1;

	while (write(w->wake_fd, &one, sizeof(one)) < 0 && errno == EINTR)
		;
}

void worker_reload(struct worker *w, struct conf_gen *gen)
{
	struct conf_gen *unused;

	conf_gen_acquire(gen);
	/* A newer reload replaces one the worker has not switched to yet. */
	unused = atomic_exchange(&w->pending_gen, gen);
	conf_gen_release(unused);
	worker_wake(w);
}

/* Exit the loop once every request and connection has finished, or at the deadline. */
static void drain_cb(evutil_socket_t fd, short what, void *arg)
{
	struct worker *w = arg;
	struct timeval tv = clock_tv(DRAIN_CHECK_MS);

	listener_drain(w->listener);
	if (request_count(w->reqs) == 0 && listener_conns(w->listener) == 0) {
		event_base_loopbreak(w->base);
		return;
	}
	if (clock_now_us() >= w->drain_deadline_us) {
		if (w->past_deadline || request_count(w->reqs) == 0) {
			event_base_loopbreak(w->base);
			return;
		}
		/* One more store_timeout for the records of what is left. */
		w->past_deadline = 1;
		w->drain_deadline_us = clock_now_us() + worker_conf(w)->store_timeout_ms * 1000;
		request_deadline_all(w->reqs);
	}
	evtimer_add(w->drain_timer, &tv);
}

/* The worker's repeating timer: batched access lines out, gauges refreshed. */
static void worker_tick_cb(evutil_socket_t fd, short what, void *arg)
{
	struct worker *w = arg;
	struct stats *s = &w->stats;

	log_flush();
	STATS_SET(s->client_conns, listener_conns(w->listener));
	STATS_SET(s->requests_active, request_count(w->reqs));
	STATS_SET(s->owners_active, request_owners(w->reqs));
	STATS_SET(s->upstream_idle, upstream_pool_idle(w->pool));
	STATS_SET(s->upstream_active, request_forwarding(w->reqs));
	STATS_SET(s->store_connected, store_ready(w->store));
	STATS_SET(s->store_pending, store_pending(w->store));
	STATS_SET(s->store_statements, store_batches(w->store));
	STATS_SET(s->store_operations, store_batched_ops(w->store));
	STATS_SET(s->store_retries[0], store_retried(w->store, STORE_RETRY_SERIALIZATION));
	STATS_SET(s->store_retries[1], store_retried(w->store, STORE_RETRY_DEADLOCK));
	STATS_SET(s->cache_hits, (int64_t)cache_hits(w->cache));
	STATS_SET(s->cache_misses, (int64_t)cache_misses(w->cache));
	STATS_SET(s->cache_entries, (int64_t)cache_count(w->cache));
	STATS_SET(s->cache_bytes, (int64_t)cache_bytes(w->cache));
}

/* A stop request, on the worker's own thread: drain, or at the second one exit. */
static void worker_stopping(struct worker *w)
{
	if (w->draining) {
		event_base_loopbreak(w->base);
		return;
	}
	w->draining = 1;
	w->drain_deadline_us = clock_now_us() + worker_conf(w)->shutdown_timeout_ms * 1000;
	listener_stop(w->listener);
	drain_cb(-1, 0, w);
}

/* The main thread woke the loop: switch to a reloaded configuration, handle stops. */
static void wake_cb(evutil_socket_t fd, short what, void *arg)
{
	struct worker *w = arg;
	struct conf_gen *gen;
	uint64_t n;

	while (read(fd, &n, sizeof(n)) < 0 && errno == EINTR)
		;
	gen = atomic_exchange(&w->pending_gen, NULL);
	if (gen) {
		conf_gens_switch(&w->gens, gen);
		worker_listen(w, worker_conf(w));
		worker_budget(w, worker_conf(w));
	}
	while (w->stops_seen < atomic_load(&w->stops)) {
		w->stops_seen++;
		worker_stopping(w);
	}
}

int worker_init(struct worker *w, int id, struct conf_gen *gen, struct pace *pace,
		struct admit *admit)
{
	const struct conf *conf = gen->conf;
	char host[64] = "localhost";
	struct timeval tick_tv = clock_tv(TICK_MS);
	struct event_config *cfg;

	memset(w, 0, sizeof(*w));
	w->wake_fd = -1;
	conf_gens_init(&w->gens, gen);
	w->id = id;
	gethostname(host, sizeof(host) - 1);
	snprintf(w->owner_id, sizeof(w->owner_id), "%s:%d:%d", host, (int)getpid(), id);
	/* Only this worker's thread touches its base: no lock. */
	cfg = event_config_new();
	if (!cfg || event_config_set_flag(cfg, EVENT_BASE_FLAG_NOLOCK) < 0) {
		event_config_free(cfg);
		log_error(NULL, "worker %d: cannot configure its event loop", id);
		return -1;
	}
	w->base = event_base_new_with_config(cfg);
	event_config_free(cfg);
	w->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (!w->base || w->wake_fd < 0) {
		log_error(NULL, "worker %d: cannot make its event loop: %s", id,
			  w->base ? strerror(errno) : "libevent failed");
		return -1;
	}
	w->dns = resolver_new(w->base, conf);
	if (!w->dns)
		return -1;
	w->store = store_new(w->base, w->dns, conf->resolver_timeout_ms, conf->database,
			     conf->store_timeout_ms, w->owner_id, conf->prepared_statements);
	w->pool = upstream_pool_new(w->base, w->dns, conf->upstream_host, conf->upstream_port,
				    gen->secrets->upstream_tls,
				    conf->upstream_server_name ? conf->upstream_server_name
							       : conf->upstream_host,
				    conf->upstream_h2c     ? UPSTREAM_H2C
				    : conf->upstream_http2 ? UPSTREAM_ALPN
							   : UPSTREAM_HTTP1);
	w->cache = cache_new(conf->replay_cache, REPLAY_CACHE_MAX_AGE_US);
	w->budget = budget_queue_new(w->base);
	w->reqs = request_ctx_new(w->base, &w->gens, w->store, w->pool, w->cache, pace, admit, &w->stats,
				  (uint64_t)id << REQUEST_ID_WORKER_SHIFT);
	w->drain_timer = evtimer_new(w->base, drain_cb, w);
	w->wake_ev = event_new(w->base, w->wake_fd, EV_READ | EV_PERSIST, wake_cb, w);
	w->tick_timer = event_new(w->base, -1, EV_PERSIST, worker_tick_cb, w);
	if (!w->store || !w->pool || !w->cache || !w->budget || !w->reqs || !w->drain_timer ||
	    !w->wake_ev || !w->tick_timer || event_add(w->wake_ev, NULL) < 0 ||
	    event_add(w->tick_timer, &tick_tv) < 0) {
		log_error(NULL, "worker %d: cannot set up its store, upstream pool, cache or "
				"timers: out of memory", id);
		return -1;
	}
	worker_listen(w, conf);
	worker_budget(w, conf);
	w->listener = listener_new(w->base, &w->gens, w->reqs, w->budget);
	return w->listener ? 0 : -1;
}

void worker_free(struct worker *w)
{
	/* Requests first: freeing a connection tells its request. */
	request_ctx_free(w->reqs);
	listener_free(w->listener);
	budget_queue_free(w->budget);
	upstream_pool_free(w->pool);
	store_free(w->store);
	cache_free(w->cache);
	evfree_event(&w->drain_timer);
	evfree_event(&w->wake_ev);
	evfree_event(&w->tick_timer);
	/* Requests are gone, so are the retired configurations; then ours. */
	conf_gen_release(atomic_exchange(&w->pending_gen, NULL));
	conf_gens_clear(&w->gens);
	resolver_free(w->base, &w->dns);
	/* wake_fd is set (maybe -1) once worker_init made the base. */
	if (w->base && w->wake_fd >= 0)
		close(w->wake_fd);
	evfree_base(&w->base);
	memset(w, 0, sizeof(*w));
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;

	if (event_base_dispatch(w->base) < 0)
		log_error(NULL, "worker %d: event loop failed", w->id);
	log_flush();
	evalloc_thread_end();
	return NULL;
}

int worker_start(struct worker *w)
{
	return pthread_create(&w->thread, NULL, worker_main, w) == 0 ? 0 : -1;
}

void worker_stop(struct worker *w)
{
	atomic_fetch_add(&w->stops, 1);
	worker_wake(w);
}

void worker_join(struct worker *w)
{
	pthread_join(w->thread, NULL);
}
