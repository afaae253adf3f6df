/*
 * libevent allocates an evbuffer chain of a power of two from 1 KiB up
 * whenever a buffer that was empty gets data, and frees it once drained:
 * for a proxied request that includes two 32 KiB blocks for the 16 KiB
 * head reads (io.h) and others of 1-2 KiB, above what glibc's per-thread
 * cache keeps (1032 bytes), so each one went through the allocator's bins.
 * Here a freed block of 2-32 KiB is kept in a per-thread stack by the
 * power of two its usable size reaches, at most EVALLOC_KEEP per size, and
 * handed to the next request of more than 1 KiB up to that size. The
 * blocks are plain malloc blocks (no header): whatever came from malloc
 * may be freed here and the other way round, and the memory held is
 * bounded (EVALLOC_KEEP x 62 KiB per thread). Under AddressSanitizer
 * nothing is installed, so every use after free is still caught.
 */
#include "proxy/evalloc.h"

#include <malloc.h>
#include <stdlib.h>

#include <event2/event.h>

#define EVALLOC_MIN_SHIFT 11 /* 2 KiB */
#define EVALLOC_MAX_SHIFT 15 /* 32 KiB */
#define EVALLOC_SIZES	  (EVALLOC_MAX_SHIFT - EVALLOC_MIN_SHIFT + 1)
#define EVALLOC_KEEP	  8

static __thread struct {
	void *block[EVALLOC_SIZES][EVALLOC_KEEP];
	int n[EVALLOC_SIZES];
} evalloc_cache;

/* The size index whose blocks (at least 1 << shift bytes) serve size, or -1. */
static int evalloc_index_for(size_t size)
{
	int shift = EVALLOC_MIN_SHIFT;

	/* 1 KiB and less: glibc's own per-thread cache is as good */
	if (size > (size_t)1 << EVALLOC_MAX_SHIFT || size <= (size_t)1 << (EVALLOC_MIN_SHIFT - 1))
		return -1;
	while (((size_t)1 << shift) < size)
		shift++;
	return shift - EVALLOC_MIN_SHIFT;
}

/* The size index a block of usable bytes belongs to, or -1. */
static int evalloc_index_of(size_t usable)
{
	int shift = EVALLOC_MAX_SHIFT;

	if (usable < (size_t)1 << EVALLOC_MIN_SHIFT)
		return -1;
	while (shift > EVALLOC_MIN_SHIFT && ((size_t)1 << shift) > usable)
		shift--;
	return shift - EVALLOC_MIN_SHIFT;
}

static void *evalloc_malloc(size_t size)
{
	int i = evalloc_index_for(size);

	if (i >= 0 && evalloc_cache.n[i] > 0)
		return evalloc_cache.block[i][--evalloc_cache.n[i]];
	return malloc(size);
}

static void evalloc_free(void *p)
{
	int i;

	if (!p)
		return;
	i = evalloc_index_of(malloc_usable_size(p));
	if (i >= 0 && evalloc_cache.n[i] < EVALLOC_KEEP) {
		evalloc_cache.block[i][evalloc_cache.n[i]++] = p;
		return;
	}
	free(p);
}

void evalloc_install(void)
{
#if !defined(__SANITIZE_ADDRESS__)
	event_set_mem_functions(evalloc_malloc, realloc, evalloc_free);
#endif
}

void evalloc_thread_end(void)
{
	for (int i = 0; i < EVALLOC_SIZES; i++)
		while (evalloc_cache.n[i] > 0)
			free(evalloc_cache.block[i][--evalloc_cache.n[i]]);
}
