/* Base64 encoding. */
#include "proxy/base64.h"

#include <stdint.h>
#include <stdlib.h>

static const char base64_digits[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

char *base64_encode(const unsigned char *s, size_t n, size_t *outlen)
{
	char *out = malloc((n + 2) / 3 * 4 + 1), *o = out;
	uint32_t v;
	size_t i;

	if (!out)
		return NULL;
	for (i = 0; i + 2 < n; i += 3) {
		v = (uint32_t)s[i] << 16 | (uint32_t)s[i + 1] << 8 | s[i + 2];
		*o++ = base64_digits[v >> 18];
		*o++ = base64_digits[(v >> 12) & 0x3f];
		*o++ = base64_digits[(v >> 6) & 0x3f];
		*o++ = base64_digits[v & 0x3f];
	}
	if (i < n) {
		v = (uint32_t)s[i] << 16 | (i + 1 < n ? (uint32_t)s[i + 1] << 8 : 0);
		*o++ = base64_digits[v >> 18];
		*o++ = base64_digits[(v >> 12) & 0x3f];
		*o++ = i + 1 < n ? base64_digits[(v >> 6) & 0x3f] : '=';
		*o++ = '=';
	}
	*o = '\0';
	*outlen = (size_t)(o - out);
	return out;
}
