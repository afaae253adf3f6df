/*
 * How long a route's owners take, so that a duplicate told "in progress"
 * can be told when to come back (Retry-After): the last PACE_SAMPLES owner
 * durations per route, shared by every worker (a duplicate may land on
 * another worker than its owner) without a lock, in fixed memory.
 */
#ifndef IDEMPROXY_PACE_H
#define IDEMPROXY_PACE_H

#include <stdint.h>

#define PACE_SAMPLES	 16
#define PACE_MIN_MS	 1000 /* never sooner than this */

struct pace;

/* Room for rows 0..nrows-1 (stats route ids). NULL when out of memory. */
struct pace *pace_new(int nrows);
void pace_free(struct pace *p);

/* An owner of route row finished in ms milliseconds (any thread). */
void pace_owner_done(struct pace *p, int row, int64_t ms);

/*
 * When a duplicate should retry, in milliseconds: the median of the row's
 * recent owner durations, with a tenth more for spread, minus the owner's
 * elapsed_ms; no later than the lease's end (lease_left_ms) and no sooner
 * than PACE_MIN_MS (which wins when the lease ends sooner). PACE_MIN_MS
 * while no owner has finished yet.
 */
int64_t pace_retry_ms(const struct pace *p, int row, int64_t elapsed_ms, int64_t lease_left_ms);

#endif
