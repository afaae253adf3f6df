/* Owner durations and the Retry-After they suggest (pace.h). */
#include "proxy/pace.h"

#include <stdlib.h>
#include <string.h>

struct pace_row {
	int64_t ms[PACE_SAMPLES]; /* a ring: the last n durations */
	int n, next;
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

	if (row < 0 || row >= p->nrows)
		return;
	r = &p->rows[row];
	r->ms[r->next] = ms < 0 ? 0 : ms;
	r->next = (r->next + 1) % PACE_SAMPLES;
	if (r->n < PACE_SAMPLES)
		r->n++;
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

	if (row < 0 || row >= p->nrows || p->rows[row].n == 0)
		return PACE_MIN_MS;
	r = &p->rows[row];
	memcpy(sorted, r->ms, (size_t)r->n * sizeof(sorted[0]));
	qsort(sorted, (size_t)r->n, sizeof(sorted[0]), pace_cmp);
	ms = sorted[r->n / 2];
	ms += ms / 10 - elapsed_ms;
	if (lease_left_ms > 0 && ms > lease_left_ms)
		ms = lease_left_ms;
	return ms < PACE_MIN_MS ? PACE_MIN_MS : ms;
}
