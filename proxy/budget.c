/*
 * The relay budget: the process's and every peer slot's count of buffered
 * bytes (atomics shared by the workers), and each worker's queue of the
 * exchanges that wait for room. A meter moves the counts by the difference
 * between what it holds now and what it had charged, so a holder that
 * sets its meter at every change costs two atomic additions per change and
 * none while its size stays the same.
 */
#include "proxy/budget.h"

#include <event2/buffer.h>
#include <event2/event.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/random.h>

#include "proxy/clock.h"
#include "proxy/stats.h"

struct budget_queue {
	struct event *retry_ev; /* a walk of the waits: timer, or made active by a drain */
	TAILQ_HEAD(, budget_wait) waits;
	size_t process; /* relay_budget, 0: none */
	size_t peer;	/* relay_budget_per_peer, 0: none */
};

static _Atomic size_t budget_total;
static _Atomic size_t budget_peers[BUDGET_PEER_SLOTS];
static _Atomic int64_t budget_pause_count[BUDGET_PEER + 1];
/* The peer hash's seed: peers cannot pick addresses that share a slot with another's. */
static uint64_t budget_seed;
static pthread_once_t budget_seed_once = PTHREAD_ONCE_INIT;

static void budget_seed_init(void)
{
	if (getrandom(&budget_seed, sizeof(budget_seed), 0) != sizeof(budget_seed))
		budget_seed = (uint64_t)clock_now_us();
}

/* splitmix64's finaliser: every bit of x moves every bit of the result. */
static uint64_t budget_mix(uint64_t x)
{
	x ^= x >> 30;
	x *= 0xbf58476d1ce4e5b9ULL;
	x ^= x >> 27;
	x *= 0x94d049bb133111ebULL;
	return x ^ (x >> 31);
}

/* The counter slot of sa: IPv4 by its address, IPv6 by its /64. */
static unsigned budget_slot(const struct sockaddr *sa)
{
	const unsigned char *b;
	uint64_t v = 0;
	int n;

	if (sa->sa_family == AF_INET) {
		b = (const unsigned char *)&((const struct sockaddr_in *)sa)->sin_addr;
		n = 4;
	} else if (sa->sa_family == AF_INET6) {
		const struct in6_addr *a6 = &((const struct sockaddr_in6 *)sa)->sin6_addr;

		b = a6->s6_addr;
		n = 8;
		if (IN6_IS_ADDR_V4MAPPED(a6)) {
			b += 12;
			n = 4;
		}
	} else {
		return BUDGET_NO_PEER;
	}
	for (int i = 0; i < n; i++)
		v = v << 8 | b[i];
	/* an IPv4 address apart from the /64 prefix of the same bits */
	v ^= (uint64_t)n << 60;
	return (unsigned)(budget_mix(v ^ budget_seed) % BUDGET_PEER_SLOTS);
}

static void budget_walk(evutil_socket_t fd, short what, void *arg);

struct budget_queue *budget_queue_new(struct event_base *base)
{
	struct budget_queue *q = calloc(1, sizeof(*q));

	pthread_once(&budget_seed_once, budget_seed_init);
	if (!q)
		return NULL;
	TAILQ_INIT(&q->waits);
	q->retry_ev = evtimer_new(base, budget_walk, q);
	if (!q->retry_ev) {
		free(q);
		return NULL;
	}
	return q;
}

void budget_queue_free(struct budget_queue *q)
{
	if (!q)
		return;
	event_free(q->retry_ev);
	free(q);
}

void budget_queue_limits(struct budget_queue *q, size_t process, size_t peer)
{
	q->process = process;
	q->peer = peer;
}

void budget_meter_init(struct budget_meter *m, struct budget_queue *q, const struct sockaddr *peer)
{
	m->q = q;
	m->slot = peer ? budget_slot(peer) : BUDGET_NO_PEER;
	m->charged = 0;
}

void budget_meter_twin(struct budget_meter *m, const struct budget_meter *of)
{
	m->q = of->q;
	m->slot = of->slot;
	m->charged = 0;
}

/* What a waiting read needs the count to fall to: three quarters of limit. */
static size_t budget_resume_mark(size_t limit)
{
	return limit - limit / 4;
}

/* A count fell from was to now: 1 when that took it down to limit's resume mark. */
static int budget_crossed(size_t limit, size_t was, size_t now)
{
	return limit && was > budget_resume_mark(limit) && now <= budget_resume_mark(limit);
}

/* The counts fell by n on m's behalf: the waits on its worker look again if that made room. */
static void budget_fall(struct budget_meter *m, size_t n)
{
	struct budget_queue *q = m->q;
	size_t was = atomic_fetch_sub_explicit(&budget_total, n, memory_order_relaxed);
	int room = budget_crossed(q->process, was, was - n);

	if (m->slot != BUDGET_NO_PEER) {
		was = atomic_fetch_sub_explicit(&budget_peers[m->slot], n, memory_order_relaxed);
		room |= budget_crossed(q->peer, was, was - n);
	}
	if (room && !TAILQ_EMPTY(&q->waits))
		event_active(q->retry_ev, EV_TIMEOUT, 1);
}

static void budget_rise(struct budget_meter *m, size_t n)
{
	atomic_fetch_add_explicit(&budget_total, n, memory_order_relaxed);
	if (m->slot != BUDGET_NO_PEER)
		atomic_fetch_add_explicit(&budget_peers[m->slot], n, memory_order_relaxed);
}

void budget_meter_set(struct budget_meter *m, size_t bytes)
{
	if (!m->q || bytes == m->charged)
		return;
	if (bytes > m->charged)
		budget_rise(m, bytes - m->charged);
	else
		budget_fall(m, m->charged - bytes);
	m->charged = bytes;
}

void budget_meter_reserve(struct budget_meter *m, size_t bytes)
{
	budget_meter_set(m, m->charged + bytes);
}

enum budget_verdict budget_check(const struct budget_meter *m, size_t more, int resuming)
{
	size_t process, peer;

	if (!m->q)
		return BUDGET_ROOM;
	process = resuming ? budget_resume_mark(m->q->process) : m->q->process;
	peer = resuming ? budget_resume_mark(m->q->peer) : m->q->peer;
	if (process && atomic_load_explicit(&budget_total, memory_order_relaxed) + more > process)
		return BUDGET_PROCESS;
	if (peer && m->slot != BUDGET_NO_PEER &&
	    atomic_load_explicit(&budget_peers[m->slot], memory_order_relaxed) + more > peer)
		return BUDGET_PEER;
	return BUDGET_ROOM;
}

void budget_paused(enum budget_verdict why)
{
	atomic_fetch_add_explicit(&budget_pause_count[why], 1, memory_order_relaxed);
}

void budget_wait_init(struct budget_wait *w, const struct budget_meter *m, void (*retry)(void *),
		      void *arg)
{
	w->q = m->q;
	w->retry = retry;
	w->arg = arg;
	w->queued = 0;
}

void budget_wait_start(struct budget_wait *w)
{
	struct timeval tv = clock_tv(BUDGET_RETRY_MS);

	if (w->queued || !w->q)
		return;
	TAILQ_INSERT_TAIL(&w->q->waits, w, link);
	w->queued = 1;
	if (!evtimer_pending(w->q->retry_ev, NULL))
		evtimer_add(w->q->retry_ev, &tv);
}

void budget_wait_end(struct budget_wait *w)
{
	if (!w->queued)
		return;
	TAILQ_REMOVE(&w->q->waits, w, link);
	w->queued = 0;
}

/* Every wait looks again, in the order they started; again in BUDGET_RETRY_MS while any is left. */
static void budget_walk(evutil_socket_t fd, short what, void *arg)
{
	struct budget_queue *q = arg;
	struct budget_wait *w, *next;
	struct timeval tv = clock_tv(BUDGET_RETRY_MS);

	for (w = TAILQ_FIRST(&q->waits); w; w = next) {
		next = TAILQ_NEXT(w, link);
		w->retry(w->arg);
	}
	if (!TAILQ_EMPTY(&q->waits))
		evtimer_add(q->retry_ev, &tv);
}

size_t budget_bytes(void)
{
	return atomic_load_explicit(&budget_total, memory_order_relaxed);
}

void budget_render(struct evbuffer *out, size_t limit)
{
	stats_metric(out, "idemproxy_relay_budget_bytes", "gauge",
		     "Bytes waiting unsent to clients and upstreams, counted against relay_budget.",
		     (int64_t)budget_bytes());
	stats_metric(out, "idemproxy_relay_budget_bytes_limit", "gauge",
		     "The process's relay budget (relay_budget; 0: none).", (int64_t)limit);
	stats_head(out, "idemproxy_relay_budget_pauses_total", "counter",
		   "Relayed reads stopped because the process's or one peer's budget was spent.");
	evbuffer_add_printf(out, "idemproxy_relay_budget_pauses_total{limit=\"process\"} %lld\n",
			    (long long)atomic_load(&budget_pause_count[BUDGET_PROCESS]));
	evbuffer_add_printf(out, "idemproxy_relay_budget_pauses_total{limit=\"peer\"} %lld\n",
			    (long long)atomic_load(&budget_pause_count[BUDGET_PEER]));
}
