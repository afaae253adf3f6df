/*
 * libFuzzer target for http/jsonrpc.c: a JSON-RPC call's id in the text.
 * A body with one id, left without it, is an object with none, and given
 * another id has that one where its id was; neither changes anything
 * else. Built by `make fuzz` from the Makefile's FUZZ_SRC_fuzz_jsonrpc.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "http/jsonrpc.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const unsigned char id[] = "\"retry-2\"";
	unsigned char *body = malloc(size ? size : 1), *out = NULL;
	struct jsonrpc_member m, m2;
	enum jsonrpc_find f;
	size_t n;
	int rc;

	if (!body)
		return 0;
	memcpy(body, data, size);
	f = jsonrpc_id(body, size, &m);
	if (f == JSONRPC_FOUND &&
	    (m.key >= m.value || m.value >= m.end || m.end > size || m.cut_from > m.key ||
	     m.cut_to < m.end || m.cut_to > size || body[m.key] != '"'))
		abort();
	rc = jsonrpc_without_id(body, size, &out, &n);
	if (rc < 0)
		goto out;
	if ((rc == 1) != (f == JSONRPC_FOUND) || (rc == 0 && out))
		abort();
	if (rc == 1) {
		if (n != size - (m.cut_to - m.cut_from) || memcmp(out, body, m.cut_from) != 0 ||
		    jsonrpc_id(out, n, &m2) != JSONRPC_ABSENT)
			abort();
		free(out);
		out = NULL;
	}
	rc = jsonrpc_with_id(body, size, id, sizeof(id) - 1, &out, &n);
	if (rc < 0)
		goto out;
	if ((rc == 1) != (f == JSONRPC_FOUND))
		abort();
	if (rc == 1 &&
	    (jsonrpc_id(out, n, &m2) != JSONRPC_FOUND || m2.value != m.value ||
	     m2.end - m2.value != sizeof(id) - 1 || memcmp(out + m2.value, id, sizeof(id) - 1) ||
	     memcmp(out, body, m.value) != 0 ||
	     memcmp(out + m2.end, body + m.end, size - m.end) != 0))
		abort();
out:
	free(out);
	free(body);
	return 0;
}
