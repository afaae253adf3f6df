/*
 * The retention sweeper (sweeper.c): deletes expired completed records
 * and marks records whose owner's lease ran out as unknown, in bounded
 * batches, one instance at a time.
 */
#ifndef IDEMPROXY_SWEEPER_H
#define IDEMPROXY_SWEEPER_H

#include <stdint.h>

#include "proxy/store.h"

struct event_base;
struct sweeper;

/* What the sweeper did since it started (read on its own thread). */
struct sweeper_stats {
	int64_t runs;           /* sweeps that held the lock */
	int64_t skipped;        /* another instance held it */
	int64_t errors;         /* the store failed the sweep */
	int64_t deleted;        /* expired completed records deleted */
	int64_t marked_unknown; /* in_progress records whose lease ran out */
};

/* Sweep through st every interval_ms (0: never). NULL when out of memory. */
struct sweeper *sweeper_new(struct event_base *base, struct store *st, int64_t interval_ms);
/* A reload's new interval; the next sweep follows it. */
void sweeper_set_interval(struct sweeper *sw, int64_t interval_ms);
const struct sweeper_stats *sweeper_stats(const struct sweeper *sw);
void sweeper_free(struct sweeper *sw);

#endif
