/* Base64 (RFC 4648, section 4: the standard alphabet, with padding). */
#ifndef IDEMPROXY_BASE64_H
#define IDEMPROXY_BASE64_H

#include <stddef.h>

/*
 * The n bytes at s in base64, malloc'ed and NUL-terminated, its length in
 * *outlen; NULL when out of memory. The caller frees it.
 */
char *base64_encode(const unsigned char *s, size_t n, size_t *outlen)
	__attribute__((warn_unused_result));

#endif
