/*
 * The per-worker replay cache: completed records kept in memory so a retry
 * can be answered without a store round trip.
 *
 * A completed record is immutable until it expires, so a copy is as good as
 * the row. Each worker owns one cache and is its only user: there are no
 * locks and no shared state. Time is passed in by the caller as
 * CLOCK_MONOTONIC microseconds, so the module never reads a clock.
 */
#ifndef IDEMPROXY_CACHE_H
#define IDEMPROXY_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "proxy/record.h"
#include "proxy/scope.h"

struct cache;

/*
 * What the cache keeps of a completed record: fingerprint, status,
 * headers, body and body_omitted. As an argument to cache_put() every
 * pointer is borrowed and copied (headers and body may be NULL when their
 * length is 0). As returned by cache_get() the record is owned by the
 * cache, its state is RECORD_COMPLETED, expires_in_ms is the record's time
 * left (the ttl_us it was put with, less the time since), headers is never NULL and is
 * NUL-terminated after headers_len bytes, body is never NULL; both stay
 * valid until the next cache_put(), cache_remove(), cache_get() or
 * cache_free() on the same cache. The other members are zero.
 */

/*
 * A cache holding at most budget_bytes of entries, each kept no longer than
 * max_age_us. budget_bytes 0 makes a disabled cache: every get misses and
 * put does nothing. Returns NULL when out of memory; free with cache_free().
 */
struct cache *cache_new(size_t budget_bytes, int64_t max_age_us)
    __attribute__((warn_unused_result));

/* Frees the cache and every entry; NULL is accepted. */
void cache_free(struct cache *c);

/*
 * Looks up the scope (its three strings compared exactly and separately).
 * Returns the record and marks it most recently used, or NULL on a miss; an
 * entry expired at now_us counts as a miss and is removed. Never allocates.
 */
const struct record *cache_get(struct cache *c, const struct scope *sc, int64_t now_us);

/*
 * Inserts or replaces the completed record of the scope sc, copying everything.
 * It expires at now_us + min(ttl_us, max_age_us). Any entry already held for
 * the scope is dropped first, even when the new one is not kept: a new one
 * is not kept when its lifetime is not positive, when it costs more than
 * 1/8 of the budget, or when memory runs out. Least recently used entries
 * are evicted to keep cache_bytes() within the budget.
 */
void cache_put(struct cache *c, const struct scope *sc, const struct record *rec, int64_t ttl_us,
	       int64_t now_us);

/* Drops the scope's entry if there is one. */
void cache_remove(struct cache *c, const struct scope *sc);

/*
 * Bytes charged for the entries held: each entry's node, scope strings,
 * headers and body, plus its share of the hash table. Not counted: the
 * allocator's own overhead and the fixed struct cache.
 */
size_t cache_bytes(const struct cache *c);

/* Entries held, including expired ones not yet looked up or evicted. */
size_t cache_count(const struct cache *c);

/* cache_get() calls that returned an entry / that returned NULL. */
uint64_t cache_hits(const struct cache *c);
uint64_t cache_misses(const struct cache *c);

#endif
