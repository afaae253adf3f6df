/*
 * The retention sweeper (sweeper.c): deletes expired completed records
 * and marks records whose owner's lease ran out as unknown, in bounded
 * batches, one instance at a time.
 */
#ifndef IDEMPROXY_SWEEPER_H
#define IDEMPROXY_SWEEPER_H

#include <stdint.h>

struct event_base;
struct evbuffer;
struct store;
struct sweeper;

/* Sweep through st every interval_ms (0: never). NULL when out of memory. */
struct sweeper *sweeper_new(struct event_base *base, struct store *st, int64_t interval_ms);
/* A reload's new interval; the next sweep follows it. */
void sweeper_set_interval(struct sweeper *sw, int64_t interval_ms);
/* The sweeper's counters as Prometheus text (on the sweeper's own thread). */
void sweeper_render(const struct sweeper *sw, struct evbuffer *out);
void sweeper_free(struct sweeper *sw);

#endif
