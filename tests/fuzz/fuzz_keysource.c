/*
 * libFuzzer target for key_from's parsers (proxy/keysource.c): the input
 * is taken as a query string and as a JSON body. A value found is
 * NUL-terminated at its length and fits the output; a query value holds
 * no byte an encoding did not put there.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "proxy/keysource.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fuzz_check(int n, const char *out, size_t outlen)
{
	if (n >= 0 && ((size_t)n >= outlen || out[n] != '\0' || strlen(out) > (size_t)n))
		abort();
	if (n < -3)
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char out[64];
	int n;

	n = keysource_query_value((const char *)data, size, "key", out, sizeof(out));
	fuzz_check(n, out, sizeof(out));
	n = keysource_json_value(data, size, "a.b", out, sizeof(out));
	fuzz_check(n, out, sizeof(out));
	n = keysource_json_value(data, size, "id", out, sizeof(out));
	fuzz_check(n, out, sizeof(out));
	return 0;
}
