/* Request ids and W3C Trace Context (trace.h). */
#include "proxy/trace.h"

#include <stdint.h>
#include <string.h>

#include <openssl/rand.h>

#define TRACE_PARENT_LEN   55 /* "00-" trace "-" parent "-" flags */
#define TRACE_PREFIX_BYTES 8

static const char trace_hex[] = "0123456789abcdef";

int trace_request_id_valid(const char *v, size_t len)
{
	if (len == 0 || len > TRACE_REQUEST_ID_MAX)
		return 0;
	for (size_t i = 0; i < len; i++)
		if ((unsigned char)v[i] < 0x21 || (unsigned char)v[i] > 0x7e)
			return 0;
	return 1;
}

/* Per thread: the prefix, drawn once, and how many ids were made. */
static __thread struct {
	int seeded;
	unsigned char prefix[TRACE_PREFIX_BYTES];
	uint64_t count;
} trace_ids;

void trace_request_id_make(char out[TRACE_REQUEST_ID_MADE + 1])
{
	uint64_t n;
	int i;

	if (!trace_ids.seeded) {
		/* Without randomness the prefix stays zero: the ids are still
		 * unique per thread, and a request is not refused for it. */
		if (RAND_bytes(trace_ids.prefix, sizeof(trace_ids.prefix)) != 1)
			memset(trace_ids.prefix, 0, sizeof(trace_ids.prefix));
		trace_ids.seeded = 1;
	}
	for (i = 0; i < TRACE_PREFIX_BYTES; i++) {
		out[2 * i] = trace_hex[trace_ids.prefix[i] >> 4];
		out[2 * i + 1] = trace_hex[trace_ids.prefix[i] & 15];
	}
	n = ++trace_ids.count;
	for (i = TRACE_REQUEST_ID_MADE - 1; i >= 2 * TRACE_PREFIX_BYTES; i--, n >>= 4)
		out[i] = trace_hex[n & 15];
	out[TRACE_REQUEST_ID_MADE] = '\0';
}

/* 1 when the n bytes at p are lowercase hex, not all of them '0'. */
static int trace_hex_id(const char *p, size_t n, int *zero)
{
	*zero = 1;
	for (size_t i = 0; i < n; i++) {
		if (!((p[i] >= '0' && p[i] <= '9') || (p[i] >= 'a' && p[i] <= 'f')))
			return 0;
		if (p[i] != '0')
			*zero = 0;
	}
	return 1;
}

int trace_parent_parse(const char *v, size_t len, struct trace *t)
{
	const char *tid = v + 3, *pid = tid + TRACE_TRACE_ID_LEN + 1;
	const char *flags = pid + TRACE_PARENT_ID_LEN + 1;
	int tzero, pzero, fzero;

	t->trace_id[0] = '\0';
	t->parent_id[0] = '\0';
	if (len != TRACE_PARENT_LEN || v[0] != '0' || v[1] != '0' || v[2] != '-' ||
	    tid[TRACE_TRACE_ID_LEN] != '-' || pid[TRACE_PARENT_ID_LEN] != '-')
		return 0;
	if (!trace_hex_id(tid, TRACE_TRACE_ID_LEN, &tzero) ||
	    !trace_hex_id(pid, TRACE_PARENT_ID_LEN, &pzero) || !trace_hex_id(flags, 2, &fzero) ||
	    tzero || pzero)
		return 0;
	memcpy(t->trace_id, tid, TRACE_TRACE_ID_LEN);
	t->trace_id[TRACE_TRACE_ID_LEN] = '\0';
	memcpy(t->parent_id, pid, TRACE_PARENT_ID_LEN);
	t->parent_id[TRACE_PARENT_ID_LEN] = '\0';
	return 1;
}

void trace_of(struct trace *t, const char *request_id, const char *traceparent)
{
	size_t n = request_id ? strlen(request_id) : 0;

	if (request_id && trace_request_id_valid(request_id, n))
		memcpy(t->request_id, request_id, n + 1);
	else
		trace_request_id_make(t->request_id);
	if (traceparent)
		(void)trace_parent_parse(traceparent, strlen(traceparent), t);
	else
		t->trace_id[0] = t->parent_id[0] = '\0';
}
