/*
 * libevent's memory (evalloc.c): its buffer chains, a few per request,
 * come from a small per-thread cache of recently freed blocks instead of
 * the allocator's bins.
 */
#ifndef IDEMPROXY_EVALLOC_H
#define IDEMPROXY_EVALLOC_H

/* Route libevent's allocations through the cache; before any libevent call. */
void evalloc_install(void);

/* Give the calling thread's cached blocks back (at thread exit). */
void evalloc_thread_end(void);

#endif
