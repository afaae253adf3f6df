/*
 * Copying a string into a fixed buffer of its owner, cut to fit (what
 * snprintf(dst, size, "%s", src) does, without the format machinery: the
 * request path copies several ids per request).
 */
#ifndef IDEMPROXY_TEXT_H
#define IDEMPROXY_TEXT_H

#include <stddef.h>
#include <string.h>

/* src into dst of size bytes (size > 0), cut to size - 1 bytes, always terminated. */
static inline void text_copy(char *dst, size_t size, const char *src)
{
	size_t n = strnlen(src, size - 1);

	memcpy(dst, src, n);
	dst[n] = '\0';
}

#endif
