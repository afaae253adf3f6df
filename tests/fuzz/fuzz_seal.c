/*
 * libFuzzer target for proxy/seal.c and what proxy/record.c makes of a
 * stored record: the first byte picks the mode.
 *   0: the rest is a body_encryption key file (seal_keys_parse);
 *   1: the rest is a stored blob opened with fixed keys (seal_open),
 *      and a blob sealed from it must open to the same bytes;
 *   2: the rest is a stored record's two columns, split at the next byte
 *      (headers, then body), judged by record_read as sealed blobs (IPS1,
 *      IPS2 or garbage); sealed by record_seal they must open again
 *      exactly when the headers are lines a record keeps;
 *   3: the rest is stored header lines (record_headers_valid): what passes
 *      is whole "\r\n"-terminated lines without NUL, bare CR or bare LF.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "proxy/record.h"
#include "proxy/scope.h"
#include "proxy/seal.h"

static const char keyfile[] = "k2 AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=\n"
			      "k1 ICEiIyQlJicoKSorLC0uLzAxMjM0NTY3ODk6Ozw9Pj8=\n";

static const struct scope fuzz_scope = {"h:fuzz", "op", "key"};
static char *fuzz_extra[] = {"X-Kept"};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fuzz_blob(const struct seal_keys *fixed, const uint8_t *data, size_t size)
{
	unsigned char *plain = NULL, *blob;
	size_t plain_len = 0;
	char id[SEAL_KEY_ID_MAX + 1];

	if (seal_open(fixed, "scope", 5, data, size, &plain, &plain_len, id) == SEAL_OK)
		free(plain);
	blob = malloc(seal_len(fixed, size));
	if (!blob)
		return;
	if (seal_data(fixed, "scope", 5, data, size, blob) == 0) {
		if (seal_open(fixed, "scope", 5, blob, seal_len(fixed, size), &plain, &plain_len,
			      id) != SEAL_OK ||
		    plain_len != size || memcmp(plain, data, plain_len) != 0)
			abort();
		free(plain);
	}
	free(blob);
}

/* record_read of in; on RECORD_READ_OK its plaintext in *out, freed with *mem. */
static enum record_read fuzz_read(const struct seal_keys *fixed, const struct record *in,
				  struct record *out, void **mem)
{
	struct record_reader rd = {fixed, 1000, 1000, 60000, fuzz_extra, 1};
	const char *why = NULL;
	enum record_read r = record_read(&rd, &fuzz_scope, in, out, mem, &why);

	if (r != RECORD_READ_OK && (!why || *mem))
		abort();
	return r;
}

static void fuzz_record(const struct seal_keys *fixed, const uint8_t *data, size_t size)
{
	size_t split = size ? data[0] % size : 0, hlen;
	const uint8_t *rest = data + (size ? 1 : 0);
	struct record in = {.state = RECORD_COMPLETED, .status = 201, .generation = 7};
	struct record_sealed s;
	struct record out;
	const char *why;
	char *headers;
	void *mem = NULL;
	int valid;

	if (size == 0)
		return;
	hlen = split > size - 1 ? size - 1 : split;
	headers = malloc(hlen + 1);
	if (!headers)
		return;
	memcpy(headers, rest, hlen);
	headers[hlen] = '\0';
	in.sealed = "k1";
	in.headers = headers;
	in.headers_len = hlen;
	in.body = rest + hlen;
	in.body_len = size - 1 - hlen;
	in.completed_ms_ago = data[0];
	if (fuzz_read(fixed, &in, &out, &mem) == RECORD_READ_OK)
		free(mem);
	mem = NULL;

	valid = record_headers_valid(headers, hlen, fuzz_extra, 1, &why);
	if (record_seal(fixed, &fuzz_scope, 201, 7, headers, hlen, in.body, in.body_len, &s) == 0) {
		in.headers = (const char *)s.headers;
		in.headers_len = s.headers_len;
		in.body = s.body;
		in.body_len = s.body_len;
		in.sealed = seal_keys_current(fixed);
		if ((fuzz_read(fixed, &in, &out, &mem) == RECORD_READ_OK) != valid)
			abort();
		if (valid && (out.headers_len != hlen || memcmp(out.headers, headers, hlen) != 0 ||
			      out.body_len != size - 1 - hlen ||
			      memcmp(out.body, rest + hlen, out.body_len) != 0))
			abort();
		free(mem);
		record_sealed_free(&s);
	}
	free(headers);
}

static void fuzz_headers(const uint8_t *data, size_t size)
{
	const char *why = NULL;
	size_t i;

	if (!record_headers_valid((const char *)data, size, fuzz_extra, 1, &why)) {
		if (!why)
			abort();
		return;
	}
	if (size && (size < 2 || data[size - 2] != '\r' || data[size - 1] != '\n'))
		abort();
	for (i = 0; i < size; i++) {
		if (data[i] == '\0' ||
		    (data[i] == '\r' && (i + 1 == size || data[i + 1] != '\n')) ||
		    (data[i] == '\n' && (i == 0 || data[i - 1] != '\r')))
			abort();
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct seal_keys *fixed;
	struct seal_keys *k = NULL;
	char err[256];

	if (size < 1)
		return 0;
	if (!fixed && seal_keys_parse(keyfile, strlen(keyfile), &fixed, err, sizeof(err)) < 0)
		abort();
	switch (data[0] % 4) {
	case 0:
		if (seal_keys_parse((const char *)data + 1, size - 1, &k, err, sizeof(err)) == 0)
			seal_keys_free(k);
		break;
	case 1:
		fuzz_blob(fixed, data + 1, size - 1);
		break;
	case 2:
		fuzz_record(fixed, data + 1, size - 1);
		break;
	default:
		fuzz_headers(data + 1, size - 1);
		break;
	}
	return 0;
}
