/*
 * libFuzzer target for the canonical JSON writer, built by `make fuzz`
 * from the Makefile's FUZZ_SRC_fuzz_fingerprint:
 *   build/fuzz/fuzz_fingerprint -max_total_time=30
 * Besides memory errors it checks that a canonical form is a fixed point:
 * canonicalising it again gives the same bytes.
 */
#include "proxy/fingerprint.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const struct fp_field fuzz_fields[] = {
    {"a", FPT_NONE},   {"b", FPT_TRIM},	      {"c", FPT_LOWER}, {"d.e", FPT_INT},
    {"f", FPT_NUMBER}, {"g.h.i", FPT_STRING}, {"", FPT_INT},	{"a", FPT_STRING},
};

/* Canonicalises data; when valid, canonicalising the result must be a no-op. */
static void fuzz_one(const uint8_t *data, size_t size, const struct fp_field *fields, int nfields)
{
	struct fp_buf first = {NULL, 0, 0}, again = {NULL, 0, 0};

	if (fingerprint_canonical_json(data, size, fields, nfields, &first) == 0) {
		if (fingerprint_canonical_json(first.data, first.len, NULL, 0, &again) != 0 ||
		    again.len != first.len || memcmp(again.data, first.data, first.len) != 0)
			abort();
	}
	fp_buf_free(&first);
	fp_buf_free(&again);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	unsigned char digest[FINGERPRINT_LEN];

	fuzz_one(data, size, NULL, 0);
	fuzz_one(data, size, fuzz_fields, sizeof(fuzz_fields) / sizeof(fuzz_fields[0]));
	if (fingerprint_request("POST", "/", 1, (const char *)data, size, data, size, FP_JSON, NULL,
				0, digest) != 0)
		abort();
	return 0;
}
