/*
 * libFuzzer target for the Idempotency-Key parser (proxy/idemkey.c). An
 * accepted key is 1 to IDEMKEY_MAX visible ASCII characters, and parses
 * to itself again: bare when it holds no '"', and in the quoted form
 * (escaped as RFC 8941 says) always.
 * Built by `make fuzz` from the Makefile's FUZZ_SRC_fuzz_idemkey.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "proxy/idemkey.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char key[IDEMKEY_MAX + 1], again[IDEMKEY_MAX + 1], quoted[2 * IDEMKEY_MAX + 3];
	size_t len, len2, q = 0;

	if (idemkey_parse((const char *)data, size, key, &len) < 0)
		return 0;
	if (len < 1 || len > IDEMKEY_MAX || key[len] != '\0' || strlen(key) != len)
		abort();
	for (size_t i = 0; i < len; i++) {
		if (key[i] < 0x21 || key[i] > 0x7e)
			abort();
	}
	if (!memchr(key, '"', len) &&
	    (idemkey_parse(key, len, again, &len2) < 0 || len2 != len || memcmp(again, key, len)))
		abort();
	quoted[q++] = '"';
	for (size_t i = 0; i < len; i++) {
		if (key[i] == '"' || key[i] == '\\')
			quoted[q++] = '\\';
		quoted[q++] = key[i];
	}
	quoted[q++] = '"';
	if (idemkey_parse(quoted, q, again, &len2) < 0 || len2 != len || memcmp(again, key, len))
		abort();
	return 0;
}
