/*
 * Idempotency-Key header values.
 *
 * A key is 1-255 visible ASCII characters (0x21-0x7E). It may be written
 * bare or as an RFC 8941 sf-string ("..." with \" and \\ as the only
 * escapes); both spellings of the same key give the same bytes, so a client
 * that switches between them still hits the same scope.
 */
#include "proxy/idemkey.h"

#include <string.h>

#define IDEMKEY_QUOTE	  '"'
#define IDEMKEY_BACKSLASH '\\'

static int idemkey_is_blank(char c)
{
	return c == ' ' || c == '\t';
}

static int idemkey_is_visible(char c)
{
	return c >= 0x21 && c <= 0x7e;
}

/*
 * The bare form: every byte visible ASCII and no '"'. Writes the key into
 * out (IDEMKEY_MAX + 1 bytes) and returns its length, or -1.
 */
static int idemkey_parse_bare(const char *s, size_t len, char *out)
{
	size_t i;

	if (len == 0 || len > IDEMKEY_MAX)
		return -1;
	for (i = 0; i < len; i++) {
		if (!idemkey_is_visible(s[i]) || s[i] == IDEMKEY_QUOTE)
			return -1;
	}
	memcpy(out, s, len);
	return (int)len;
}

/*
 * The sf-string form: s[0] and s[len - 1] are '"'; between them \" and \\
 * are the only escapes and every other byte is visible ASCII other than '"'.
 * Writes the unescaped key into out (IDEMKEY_MAX + 1 bytes) and returns its
 * length, or -1.
 */
static int idemkey_parse_quoted(const char *s, size_t len, char *out)
{
	size_t i, n = 0;
	char c;

	if (len < 2 || s[len - 1] != IDEMKEY_QUOTE)
		return -1;
	for (i = 1; i < len - 1; i++) {
		c = s[i];
		if (c == IDEMKEY_QUOTE || !idemkey_is_visible(c))
			return -1;
		if (c == IDEMKEY_BACKSLASH) {
			if (i + 1 >= len - 1)
				return -1;
			c = s[++i];
			if (c != IDEMKEY_QUOTE && c != IDEMKEY_BACKSLASH)
				return -1;
		}
		if (n == IDEMKEY_MAX)
			return -1;
		out[n++] = c;
	}
	return n == 0 ? -1 : (int)n;
}

/*
 * Accepts one field value with optional blanks around it; see idemkey.h.
 * out receives the NUL-terminated key only on success.
 */
int idemkey_parse(const char *value, size_t len, char *out, size_t *out_len)
{
	char key[IDEMKEY_MAX + 1];
	int n;

	while (len > 0 && idemkey_is_blank(value[0])) {
		value++;
		len--;
	}
	while (len > 0 && idemkey_is_blank(value[len - 1]))
		len--;

	if (len > 0 && value[0] == IDEMKEY_QUOTE)
		n = idemkey_parse_quoted(value, len, key);
	else
		n = idemkey_parse_bare(value, len, key);
	if (n < 0)
		return -1;

	memcpy(out, key, (size_t)n);
	out[n] = '\0';
	*out_len = (size_t)n;
	return 0;
}
