/* Base64 (RFC 4648): the standard alphabet with padding (section 4), and
 * the URL alphabet without (section 5, as JOSE uses it). */
#ifndef IDEMPROXY_BASE64_H
#define IDEMPROXY_BASE64_H

#include <stddef.h>

enum base64_alphabet {
	BASE64_STD, /* A-Z a-z 0-9 + /, padded with '=' to a multiple of 4 */
	BASE64_URL, /* A-Z a-z 0-9 - _, no padding */
};

/* The most bytes n base64 characters decode to. */
#define BASE64_DECODED_MAX(n) ((n) / 4 * 3 + 2)

/*
 * The n bytes at s in standard base64, malloc'ed and NUL-terminated, its
 * length in *outlen; NULL when out of memory. The caller frees it.
 */
char *base64_encode(const unsigned char *s, size_t n, size_t *outlen)
	__attribute__((warn_unused_result));

/*
 * Decode the n bytes at s, in alphabet a: the decoded length goes to *len
 * and the first max bytes of it to out (so that a caller can report a
 * value of the wrong length by its length). Returns 0, or -1 when s is not
 * canonical base64 of that kind: a byte outside the alphabet, '=' other
 * than BASE64_STD's padding, a length no encoding has, or unused trailing
 * bits that are not zero (each byte string has one spelling).
 */
int base64_decode(const char *s, size_t n, enum base64_alphabet a, unsigned char *out,
		  size_t max, size_t *len) __attribute__((warn_unused_result));

#endif
