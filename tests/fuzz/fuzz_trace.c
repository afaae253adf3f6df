/*
 * libFuzzer target for the request id and traceparent parsers
 * (proxy/trace.c). An accepted request id is 1 to TRACE_REQUEST_ID_MAX
 * visible ASCII bytes; an accepted traceparent is 55 bytes and its ids,
 * lowercase hex and not all zero, are the bytes at their places.
 * Built by `make fuzz` from the Makefile's FUZZ_SRC_fuzz_trace.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "proxy/trace.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *v = (const char *)data;
	struct trace t;

	if (trace_request_id_valid(v, size)) {
		if (size < 1 || size > TRACE_REQUEST_ID_MAX)
			abort();
		for (size_t i = 0; i < size; i++)
			if (data[i] < 0x21 || data[i] > 0x7e)
				abort();
	}
	if (trace_parent_parse(v, size, &t)) {
		if (size != 55 || strlen(t.trace_id) != TRACE_TRACE_ID_LEN ||
		    strlen(t.parent_id) != TRACE_PARENT_ID_LEN ||
		    memcmp(t.trace_id, v + 3, TRACE_TRACE_ID_LEN) ||
		    memcmp(t.parent_id, v + 36, TRACE_PARENT_ID_LEN) ||
		    strspn(t.trace_id, "0") == TRACE_TRACE_ID_LEN ||
		    strspn(t.parent_id, "0") == TRACE_PARENT_ID_LEN)
			abort();
	} else if (t.trace_id[0] || t.parent_id[0]) {
		abort();
	}
	return 0;
}
