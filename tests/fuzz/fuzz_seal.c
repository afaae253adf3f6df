/*
 * libFuzzer target for proxy/seal.c: the first byte picks the mode.
 *   even: the rest is a body_encryption key file (seal_keys_parse);
 *   odd:  the rest is a stored blob opened with fixed keys (seal_open),
 *         and a blob sealed from it must open to the same bytes.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "proxy/seal.h"

static const char keyfile[] = "k2 AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=\n"
			      "k1 ICEiIyQlJicoKSorLC0uLzAxMjM0NTY3ODk6Ozw9Pj8=\n";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct seal_keys *fixed;
	struct seal_keys *k = NULL;
	unsigned char *plain = NULL, *blob;
	size_t plain_len = 0;
	char err[256], id[SEAL_KEY_ID_MAX + 1];

	if (size < 1)
		return 0;
	if (!fixed && seal_keys_parse(keyfile, strlen(keyfile), &fixed, err, sizeof(err)) < 0)
		abort();
	if (data[0] % 2 == 0) {
		if (seal_keys_parse((const char *)data + 1, size - 1, &k, err, sizeof(err)) == 0)
			seal_keys_free(k);
		return 0;
	}
	if (seal_open(fixed, "scope", 5, data + 1, size - 1, &plain, &plain_len, id) == SEAL_OK)
		free(plain);
	blob = malloc(seal_len(fixed, size - 1));
	if (!blob)
		return 0;
	if (seal_data(fixed, "scope", 5, data + 1, size - 1, blob) == 0) {
		if (seal_open(fixed, "scope", 5, blob, seal_len(fixed, size - 1), &plain, &plain_len,
			      id) != SEAL_OK ||
		    plain_len != size - 1 || memcmp(plain, data + 1, plain_len) != 0)
			abort();
		free(plain);
	}
	free(blob);
	return 0;
}
