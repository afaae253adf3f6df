/*
 * Blocks that a request allocates and frees again (evalloc.c): libevent's
 * (installed as its allocator) and the request's own structures, from a
 * small per-thread cache of recently freed blocks.
 */
#ifndef IDEMPROXY_EVALLOC_H
#define IDEMPROXY_EVALLOC_H

#include <stddef.h>

/* Route libevent's allocations through the cache; before any libevent call. */
void evalloc_install(void);

/* A zeroed block of size bytes (NULL when out of memory), and its free. */
void *evalloc_calloc(size_t size);
void evalloc_free(void *p);

/* Give the calling thread's cached blocks back (at thread exit). */
void evalloc_thread_end(void);

#endif
