/* Base64 encoding and decoding. */
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

/* The value of the digit c in alphabet a, or -1. */
static int base64_digit(unsigned char c, enum base64_alphabet a)
{
	if (c >= 'A' && c <= 'Z')
		return c - 'A';
	if (c >= 'a' && c <= 'z')
		return c - 'a' + 26;
	if (c >= '0' && c <= '9')
		return c - '0' + 52;
	if (c == (a == BASE64_URL ? '-' : '+'))
		return 62;
	if (c == (a == BASE64_URL ? '_' : '/'))
		return 63;
	return -1;
}

int base64_decode(const char *s, size_t n, enum base64_alphabet a, unsigned char *out,
		  size_t max, size_t *len)
{
	uint32_t acc = 0;
	size_t i, o = 0, pad = 0;
	int bits = 0, d;

	if (a == BASE64_STD) {
		if (n % 4 != 0)
			return -1;
		while (pad < 2 && n > pad && s[n - 1 - pad] == '=')
			pad++;
		n -= pad;
		if (pad && (n + pad) / 4 * 4 - n != pad)
			return -1;
	}
	if (n % 4 == 1)
		return -1;
	for (i = 0; i < n; i++) {
		d = base64_digit((unsigned char)s[i], a);
		if (d < 0)
			return -1;
		acc = acc << 6 | (uint32_t)d;
		bits += 6;
		if (bits >= 8) {
			bits -= 8;
			if (o < max)
				out[o] = (unsigned char)(acc >> bits);
			o++;
			acc &= (1u << bits) - 1;
		}
	}
	if (acc != 0)
		return -1;
	*len = o;
	return 0;
}
