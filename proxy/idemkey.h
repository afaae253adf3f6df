/* Idempotency-Key header values: validation and normalisation. */
#ifndef IDEMPROXY_IDEMKEY_H
#define IDEMPROXY_IDEMKEY_H

#include <stddef.h>

#define IDEMKEY_MAX 255

/*
 * Parse one Idempotency-Key field value (leading/trailing blanks already
 * allowed and ignored). Accepts the bare form (1-255 visible ASCII, no '"')
 * and the RFC 8941 sf-string form "..." (\" and \\ escapes; the unescaped
 * content must be 1-255 visible ASCII). Both forms of the same key yield the
 * same bytes. On success writes the NUL-terminated key into out (at least
 * IDEMKEY_MAX + 1 bytes), its length into *out_len, and returns 0; returns -1
 * for any invalid value, including an empty one.
 */
int idemkey_parse(const char *value, size_t len, char *out, size_t *out_len)
	__attribute__((warn_unused_result));

#endif
