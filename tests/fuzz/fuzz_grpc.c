/*
 * libFuzzer target for what idemproxy reads of a gRPC call (http/grpc.c):
 * the length-prefixed messages of a body, a grpc-status value, a code's
 * name, the Content-Type test, and grpc-message's percent-encoding. The
 * message count is checked against a walk of its own; an encoding holds
 * only printable bytes, fits its buffer, and decodes back to a prefix of
 * the input.
 * Built by `make fuzz` from the Makefile's FUZZ_SRC_fuzz_grpc.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "http/grpc.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The messages of data by a plain walk: their count, or -1. */
static long walk(const uint8_t *data, size_t size)
{
	long n = 0;

	for (size_t at = 0; at < size; n++) {
		uint64_t len;

		if (size - at < 5)
			return -1;
		len = (uint64_t)data[at + 1] << 24 | (uint64_t)data[at + 2] << 16 |
		      (uint64_t)data[at + 3] << 8 | data[at + 4];
		if (len > size - at - 5)
			return -1;
		at += 5 + (size_t)len;
	}
	return n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *s = malloc(size + 1), enc[96];
	size_t n, in = 0;
	int code;

	if (!s)
		return 0;
	memcpy(s, data, size);
	s[size] = '\0';
	if (grpc_messages(data, size) != walk(data, size))
		abort();
	code = grpc_status_value(s, size);
	if (code >= GRPC_CODES || (code >= 0 && (size < 1 || size > 2)))
		abort();
	code = grpc_code_parse(s);
	if (code >= 0 && code != grpc_status_value(s, strlen(s)) &&
	    strcmp(grpc_code_name(code), s) != 0)
		abort();
	(void)grpc_content_type(s);
	n = grpc_message_encode(s, enc, sizeof(enc));
	if (n >= sizeof(enc) || strlen(enc) != n)
		abort();
	for (size_t i = 0; i < n; i++, in++) {
		unsigned int byte;

		if (enc[i] < 0x20 || enc[i] > 0x7e)
			abort();
		if (enc[i] != '%') {
			if (enc[i] != s[in])
				abort();
			continue;
		}
		if (i + 2 >= n) /* an escape is whole */
			abort();
		if (sscanf(enc + i + 1, "%2X", &byte) != 1 || (unsigned char)s[in] != byte)
			abort();
		i += 2;
	}
	free(s);
	return 0;
}
