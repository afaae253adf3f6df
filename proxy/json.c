/* The yajl_tree helpers for untrusted JSON. */
#include "proxy/json.h"

#include <string.h>

int json_tree_safe(const char *s, size_t n)
{
	int depth = 0, in_string = 0;
	size_t i;

	if (memchr(s, '\0', n))
		return -1;
	for (i = 0; i < n; i++) {
		if (in_string) {
			if (s[i] == '"')
				in_string = 0;
			else if (s[i] == '\\' && ++i < n && s[i] == 'u' && n - i > 4 &&
				 memcmp(s + i + 1, "0000", 4) == 0)
				return -1;
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
