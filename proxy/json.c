/* The yajl_tree helpers for untrusted JSON. */
#include "proxy/json.h"

#include <string.h>

#define JSON_HIGH_SURROGATE(c) ((c) >= 0xd800 && (c) <= 0xdbff)
#define JSON_LOW_SURROGATE(c)  ((c) >= 0xdc00 && (c) <= 0xdfff)
#define JSON_ESCAPE_U_LEN      6 /* \uXXXX */

/* The code unit of the \uXXXX at s (avail bytes there), or -1 when there is none. */
static long json_escape_u(const char *s, size_t avail)
{
	long v = 0;
	int k;

	if (avail < JSON_ESCAPE_U_LEN || s[0] != '\\' || s[1] != 'u')
		return -1;
	for (k = 2; k < JSON_ESCAPE_U_LEN; k++) {
		v <<= 4;
		if (s[k] >= '0' && s[k] <= '9')
			v |= s[k] - '0';
		else if (s[k] >= 'a' && s[k] <= 'f')
			v |= s[k] - 'a' + 10;
		else if (s[k] >= 'A' && s[k] <= 'F')
			v |= s[k] - 'A' + 10;
		else
			return -1;
	}
	return v;
}

/*
 * The escape at s[0] == '\\' (avail bytes there): how many bytes it takes,
 * or 0 when yajl would read it as something else than it says: \u0000
 * (which ends yajl's C string), a high surrogate not followed by a low one
 * (yajl writes "?" for it, or pairs it with whatever \u follows), or a low
 * surrogate on its own. A malformed escape is left to yajl, which refuses it.
 */
static size_t json_escape_len(const char *s, size_t avail)
{
	long unit = json_escape_u(s, avail), low;

	if (unit < 0)
		return avail < 2 ? avail : 2;
	if (unit == 0 || JSON_LOW_SURROGATE(unit))
		return 0;
	if (!JSON_HIGH_SURROGATE(unit))
		return JSON_ESCAPE_U_LEN;
	low = json_escape_u(s + JSON_ESCAPE_U_LEN, avail - JSON_ESCAPE_U_LEN);
	return JSON_LOW_SURROGATE(low) ? 2 * JSON_ESCAPE_U_LEN : 0;
}

int json_tree_safe(const char *s, size_t n)
{
	int depth = 0, in_string = 0;
	size_t i, k;

	if (memchr(s, '\0', n))
		return -1;
	for (i = 0; i < n; i++) {
		if (in_string) {
			if (s[i] == '"') {
				in_string = 0;
			} else if (s[i] == '\\') {
				if ((k = json_escape_len(s + i, n - i)) == 0)
					return -1;
				i += k - 1;
			}
		} else if (s[i] == '"') {
			in_string = 1;
		} else if (s[i] == '{' || s[i] == '[') {
			if (++depth > JSON_TREE_DEPTH)
				return -1;
		} else if (s[i] == '}' || s[i] == ']') {
			depth--;
		} else if (s[i] == '/') {
			return -1;
		}
	}
	return 0;
}

int json_member(yajl_val v, const char *name, yajl_val *out)
{
	size_t i;

	*out = NULL;
	for (i = 0; i < v->u.object.len; i++) {
		if (strcmp(v->u.object.keys[i], name) != 0)
			continue;
		if (*out)
			return -1;
		*out = v->u.object.values[i];
	}
	return 0;
}
