/* Owner durations and the Retry-After they suggest (pace.h). */
#include "proxy/pace.h"

#include <stdatomic.h>
#include <stdlib.h>

/* Workers write, any reads: relaxed atomics; a reader may see a sample
 * being replaced, which only shifts an estimate. */
struct pace_row {
	_Atomic int64_t ms[PACE_SAMPLES]; /* a ring: the last n durations */
	_Atomic unsigned next;
	_Atomic int n;
};

struct pace {
	int nrows;
	struct pace_row rows[];
};

struct pace *pace_new(int nrows)
{
	struct pace *p = calloc(1, sizeof(*p) + (size_t)nrows * sizeof(p->rows[0]));

	if (p)
		p->nrows = nrows;
	return p;
}

void pace_free(struct pace *p)
{
	free(p);
}

void pace_owner_done(struct pace *p, int row, int64_t ms)
{
	struct pace_row *r;
	unsigned i;

	if (row < 0 || row >= p->nrows)
		return;
	r = &p->rows[row];
	i = atomic_fetch_add_explicit(&r->next, 1, memory_order_relaxed) % PACE_SAMPLES;
	atomic_store_explicit(&r->ms[i], ms < 0 ? 0 : ms, memory_order_relaxed);
	if (atomic_load_explicit(&r->n, memory_order_relaxed) < PACE_SAMPLES)
		atomic_fetch_add_explicit(&r->n, 1, memory_order_relaxed);
}

static int pace_cmp(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;

	return (x > y) - (x < y);
}

int64_t pace_retry_ms(const struct pace *p, int row, int64_t elapsed_ms, int64_t lease_left_ms)
{
	int64_t sorted[PACE_SAMPLES], ms;
	const struct pace_row *r;
	int n;

	if (row < 0 || row >= p->nrows)
		return PACE_MIN_MS;
	r = &p->rows[row];
	n = atomic_load_explicit(&r->n, memory_order_relaxed);
	if (n <= 0)
		return PACE_MIN_MS;
	if (n > PACE_SAMPLES)
		n = PACE_SAMPLES;
	for (int i = 0; i < n; i++)
		sorted[i] = atomic_load_explicit(&r->ms[i], memory_order_relaxed);
	qsort(sorted, (size_t)n, sizeof(sorted[0]), pace_cmp);
	ms = sorted[n / 2];
	ms += ms / 10 - elapsed_ms;
	if (lease_left_ms > 0 && ms > lease_left_ms)
		ms = lease_left_ms;
	return ms < PACE_MIN_MS ? PACE_MIN_MS : ms;
}
