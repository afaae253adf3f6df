/* UTF-8 validation (RFC 3629): what may go into a JSON string as text. */
#ifndef IDEMPROXY_UTF8_H
#define IDEMPROXY_UTF8_H

#include <stddef.h>

/*
 * The length of the UTF-8 sequence that starts s (n > 0 bytes available),
 * or 0 when it is not one: a stray or truncated byte, an overlong form, a
 * surrogate, or a code point past U+10FFFF.
 */
size_t utf8_seq(const unsigned char *s, size_t n);

/* 1 when the n bytes at s are all valid UTF-8 (0 bytes are). */
int utf8_valid(const unsigned char *s, size_t n);

#endif
