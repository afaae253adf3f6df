/*
 * A proxied request allocates a dozen blocks and frees them again: its
 * request, relay and upstream structures, libevent's evbuffers and events,
 * and libevent's buffer chains (a power of two from 1 KiB up). glibc keeps
 * only 7 freed blocks per size per thread (none above 1032 bytes), and its
 * calloc never uses them, so with tens of requests in flight on a worker
 * nearly every one of those went through the allocator's bins. Here a freed
 * block of 64 B to 32 KiB goes onto a per-thread stack by the power of two
 * its usable size reaches (at most EVALLOC_KEEP(i) of them) and serves the
 * next request for at most that size; a request that finds its stack empty
 * gets a block of the full power of two, so that it comes back to the same
 * stack. The blocks are plain malloc blocks (no header): one that came from
 * malloc may be freed here and the other way round. The memory held is
 * bounded: 64 blocks of each size up to 8 KiB and 8 of 16 and 32 KiB, 1.4
 * MiB per thread at most. Under AddressSanitizer nothing is cached, so
 * every use after free is still caught.
 *
 * A block freed twice while it waits on its stack would be handed to two
 * owners: each free looks for the block on its stack first (at most 64
 * compares, in the cache lines the push touches anyway) and aborts on a
 * hit, in release builds too. One freed twice after it left the stack, or
 * on another thread, is glibc's to catch, as without the cache.
 */
#include "proxy/evalloc.h"

#include <malloc.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "proxy/log.h"

#define EVALLOC_MIN_SHIFT 6  /* 64 B */
#define EVALLOC_MAX_SHIFT 15 /* 32 KiB */
#define EVALLOC_SIZES	  (EVALLOC_MAX_SHIFT - EVALLOC_MIN_SHIFT + 1)
#define EVALLOC_KEEP_SMALL 64
#define EVALLOC_KEEP_LARGE 8
#define EVALLOC_SMALL_LAST (13 - EVALLOC_MIN_SHIFT) /* 8 KiB */
#define EVALLOC_KEEP(i)	   ((i) <= EVALLOC_SMALL_LAST ? EVALLOC_KEEP_SMALL : EVALLOC_KEEP_LARGE)

#if defined(__SANITIZE_ADDRESS__)
#define EVALLOC_CACHE 0
#else
#define EVALLOC_CACHE 1
#endif

static __thread struct {
	void *block[EVALLOC_SIZES][EVALLOC_KEEP_SMALL];
	int n[EVALLOC_SIZES];
} evalloc_cache;

/* The stack whose blocks (at least 1 << (i + MIN_SHIFT) bytes) serve size, or -1. */
static int evalloc_index_for(size_t size)
{
	int shift = EVALLOC_MIN_SHIFT;

	if (size > (size_t)1 << EVALLOC_MAX_SHIFT)
		return -1;
	while (((size_t)1 << shift) < size)
		shift++;
	return shift - EVALLOC_MIN_SHIFT;
}

/* The stack a block of usable bytes belongs on, or -1. */
static int evalloc_index_of(size_t usable)
{
	int shift = EVALLOC_MAX_SHIFT;

	if (usable < (size_t)1 << EVALLOC_MIN_SHIFT || usable >> (EVALLOC_MAX_SHIFT + 1))
		return -1;
	while (((size_t)1 << shift) > usable)
		shift--;
	return shift - EVALLOC_MIN_SHIFT;
}

static void *evalloc_malloc(size_t size)
{
	int i = EVALLOC_CACHE ? evalloc_index_for(size) : -1;

	if (i < 0)
		return malloc(size);
	if (evalloc_cache.n[i] > 0)
		return evalloc_cache.block[i][--evalloc_cache.n[i]];
	return malloc((size_t)1 << (i + EVALLOC_MIN_SHIFT));
}

void *evalloc_calloc(size_t size)
{
	void *p = evalloc_malloc(size);

	if (p)
		memset(p, 0, size);
	return p;
}

/* Abort when p is on stack i already: freed twice, it would have two owners. */
static void evalloc_check_unique(int i, const void *p)
{
	for (int k = 0; k < evalloc_cache.n[i]; k++) {
		if (evalloc_cache.block[i][k] == p) {
			log_error(NULL, "evalloc: a block of %d bytes was freed twice; aborting",
				  1 << (i + EVALLOC_MIN_SHIFT));
			abort();
		}
	}
}

void evalloc_free(void *p)
{
	int i;

	if (!p)
		return;
	i = EVALLOC_CACHE ? evalloc_index_of(malloc_usable_size(p)) : -1;
	if (i >= 0)
		evalloc_check_unique(i, p);
	if (i >= 0 && evalloc_cache.n[i] < EVALLOC_KEEP(i)) {
		evalloc_cache.block[i][evalloc_cache.n[i]++] = p;
		return;
	}
	free(p);
}

void evalloc_install(void)
{
	if (EVALLOC_CACHE)
		event_set_mem_functions(evalloc_malloc, realloc, evalloc_free);
}

void evalloc_thread_end(void)
{
	for (int i = 0; i < EVALLOC_SIZES; i++)
		while (evalloc_cache.n[i] > 0)
			free(evalloc_cache.block[i][--evalloc_cache.n[i]]);
}
