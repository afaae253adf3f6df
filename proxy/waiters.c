/*
 * The waiters' table: a hash of scope tokens to lists of waiters, a ring
 * of the last wake-ups' tokens, and a timer per waiter for the end of its
 * wait.
 */
#include "proxy/waiters.h"

#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proxy/clock.h"
#include "proxy/evfree.h"

/* Recent wake-ups a table remembers, for claims answered after one (a power of two). */
#define WAKE_RING_SIZE 256
/* Buckets of the table, by scope token (a power of two). */
#define WAIT_BUCKETS 1024

_Static_assert((WAKE_RING_SIZE & (WAKE_RING_SIZE - 1)) == 0, "WAKE_RING_SIZE: a power of two");
_Static_assert((WAIT_BUCKETS & (WAIT_BUCKETS - 1)) == 0, "WAIT_BUCKETS: a power of two");

struct waiters {
	struct event_base *base;
	void (*wake)(void *arg);
	LIST_HEAD(, waiter) buckets[WAIT_BUCKETS];
	int n;
	char ring[WAKE_RING_SIZE][SCOPE_TOKEN_SIZE]; /* "" for a wake-up of every scope */
	uint64_t wakes; /* wake-ups so far; the ring holds the last ones */
};

struct waiters *waiters_new(struct event_base *base, void (*wake)(void *arg))
{
	struct waiters *w = calloc(1, sizeof(*w));

	if (!w)
		return NULL;
	w->base = base;
	w->wake = wake;
	for (int i = 0; i < WAIT_BUCKETS; i++)
		LIST_INIT(&w->buckets[i]);
	return w;
}

void waiters_free(struct waiters *w)
{
	free(w);
}

void waiters_claiming(const struct waiters *w, struct waiter *x)
{
	x->mark = w->wakes;
}

/* 1 when a wake-up for x's scope, or for every scope, came after x->mark (or too many to tell). */
static int waiters_woken_since(const struct waiters *w, const struct waiter *x)
{
	const char *t;

	if (w->wakes - x->mark > WAKE_RING_SIZE)
		return 1; /* too many to tell: look again */
	for (uint64_t i = x->mark; i < w->wakes; i++) {
		t = w->ring[i & (WAKE_RING_SIZE - 1)];
		if (!*t || strcmp(t, x->token) == 0)
			return 1;
	}
	return 0;
}

/* x's wait ended: its owner claims again, and, still running, answers in-progress. */
static void waiters_timer_cb(evutil_socket_t fd, short what, void *arg)
{
	struct waiter *x = arg;

	x->table->wake(x->arg);
}

enum waiters_hold waiters_hold(struct waiters *w, struct waiter *x, int max_connections,
			       int workers)
{
	int64_t left = x->deadline_us - clock_now_us();
	int max = max_connections / (2 * workers);
	struct timeval tv;

	if (left <= 0 || w->n >= (max > 0 ? max : 1))
		return WAITERS_OVER;
	if (waiters_woken_since(w, x))
		return WAITERS_WOKEN;
	if (!x->timer)
		x->timer = evtimer_new(w->base, waiters_timer_cb, x);
	if (!x->timer)
		return WAITERS_OVER;
	x->table = w;
	tv = clock_tv_us(left);
	evtimer_add(x->timer, &tv);
	return WAITERS_HELD;
}

/* The bucket of a scope token: its first hex digits (an MD5's are as good as any). */
static unsigned waiters_bucket(const char *token)
{
	unsigned h = 0;

	for (int i = 0; i < 8 && token[i]; i++)
		h = h << 4 | (unsigned)(token[i] <= '9' ? token[i] - '0' : token[i] - 'a' + 10);
	return h & (WAIT_BUCKETS - 1);
}

void waiters_add(struct waiters *w, struct waiter *x)
{
	LIST_INSERT_HEAD(&w->buckets[waiters_bucket(x->token)], x, link);
	w->n++;
}

void waiters_remove(struct waiters *w, struct waiter *x)
{
	LIST_REMOVE(x, link);
	w->n--;
	evtimer_del(x->timer);
}

void waiters_forget(struct waiter *x)
{
	evfree_event(&x->timer);
}

/* Wakes every waiter of bucket whose scope is token (NULL: all of them). */
static void waiters_wake_bucket(struct waiters *w, unsigned bucket, const char *token)
{
	struct waiter *x = LIST_FIRST(&w->buckets[bucket]), *next;

	for (; x; x = next) {
		next = LIST_NEXT(x, link);
		if (!token || strcmp(token, x->token) == 0)
			w->wake(x->arg);
	}
}

void waiters_wake(struct waiters *w, const char *token)
{
	snprintf(w->ring[w->wakes++ & (WAKE_RING_SIZE - 1)], SCOPE_TOKEN_SIZE, "%s",
		 token ? token : "");
	if (token) {
		waiters_wake_bucket(w, waiters_bucket(token), token);
		return;
	}
	for (unsigned i = 0; i < WAIT_BUCKETS && w->n > 0; i++)
		waiters_wake_bucket(w, i, NULL);
}
