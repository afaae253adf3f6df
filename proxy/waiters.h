/*
 * Waiters: the duplicates one worker holds waiting for their owner
 * (in_progress wait), by the token of their scope (scope_token), each
 * until a wake-up for its scope or the end of its wait, and the wake-ups
 * the worker saw lately. A wake-up for a scope, or for every scope when
 * notifications may have been missed, reaches the waiters of that scope.
 * An owner's notification can arrive in the same read as the answer to a
 * duplicate's claim, which still saw the owner running: a duplicate that
 * would wait after a wake-up for its scope came since its claim was sent
 * claims again instead (waiters_hold).
 *
 * The table links and times waiters; each struct waiter belongs to
 * whoever embeds it (request.c, in a request), which adds it when it
 * starts waiting and removes it when it stops. One table per worker
 * thread; not thread-safe.
 */
#ifndef IDEMPROXY_WAITERS_H
#define IDEMPROXY_WAITERS_H

#include <stdint.h>
#include <sys/queue.h>

#include "proxy/scope.h"

struct event;
struct event_base;

struct waiter {
	LIST_ENTRY(waiter) link;
	char token[SCOPE_TOKEN_SIZE]; /* its scope's: set before it first waits */
	int64_t deadline_us;	      /* when its wait ends (clock_now_us); 0 before */
	uint64_t mark;		      /* the wake-ups seen when its last claim was sent */
	struct event *timer;	      /* the end of its wait; waiters_forget frees it */
	struct waiters *table;	      /* the table that times it (waiters_hold) */
	void *arg;		      /* its owner's, for the wake-up */
};

struct waiters;

/*
 * An empty table on base: wake(arg) is called with the arg of a waiter
 * whose scope is woken or whose wait ends (after it was removed, by its
 * owner, which claims again). NULL when out of memory.
 */
struct waiters *waiters_new(struct event_base *base, void (*wake)(void *arg));
/* NULL accepted; waiters still linked are left as they are. */
void waiters_free(struct waiters *w);

/* x's claim is being sent: the wake-ups from now on count for it (waiters_hold). */
void waiters_claiming(const struct waiters *w, struct waiter *x);

enum waiters_hold {
	WAITERS_HELD,  /* x's wait is timed: its owner adds it (waiters_add) */
	WAITERS_WOKEN, /* its scope was woken since its claim was sent: claim again now */
	WAITERS_OVER,  /* its wait has ended, the table is full, or out of memory */
};

/*
 * Whether x (token and deadline_us set) may wait now. A worker's table
 * holds half its share of max_connections among workers (at least one),
 * so waiting clients cannot take every connection; beyond it a duplicate
 * is answered at once.
 */
enum waiters_hold waiters_hold(struct waiters *w, struct waiter *x, int max_connections,
			       int workers) __attribute__((warn_unused_result));

void waiters_add(struct waiters *w, struct waiter *x);
/* x stops waiting: unlinked, its timer stopped. */
void waiters_remove(struct waiters *w, struct waiter *x);
/* x's timer is freed (x is not linked). */
void waiters_forget(struct waiter *x);

/*
 * A wake-up for token (NULL: for every scope): remembered, then wake is
 * called for each waiter of that scope (each waiter). wake may remove its
 * own waiter and free it, never another one.
 */
void waiters_wake(struct waiters *w, const char *token);

#endif
