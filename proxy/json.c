/* The yajl_tree helpers for untrusted JSON, and the writer (json.h). */
#include "proxy/json.h"

#include <stdlib.h>
#include <string.h>

#define JSON_HIGH_SURROGATE(c) ((c) >= 0xd800 && (c) <= 0xdbff)
#define JSON_LOW_SURROGATE(c)  ((c) >= 0xdc00 && (c) <= 0xdfff)
#define JSON_ESCAPE_U_LEN      6 /* \uXXXX */
#define JSON_INDENT	       "  "

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

/* ---- writing ---- */

void json_writer_init(struct json_writer *w, int flags)
{
	w->flags = flags;
	w->failed = 0;
	w->g = yajl_gen_alloc(NULL);
	if (!w->g || !yajl_gen_config(w->g, yajl_gen_validate_utf8, 1) ||
	    ((flags & JSON_PRETTY) &&
	     (!yajl_gen_config(w->g, yajl_gen_beautify, 1) ||
	      !yajl_gen_config(w->g, yajl_gen_indent_string, JSON_INDENT))))
		w->failed = 1;
}

void json_writer_fail(struct json_writer *w)
{
	w->failed = 1;
}

/* Latch st when it is a failure. */
static void json_check(struct json_writer *w, yajl_gen_status st)
{
	if (st != yajl_gen_status_ok)
		w->failed = 1;
}

void json_strn(struct json_writer *w, const char *s, size_t n)
{
	if (!w->failed)
		json_check(w, yajl_gen_string(w->g, (const unsigned char *)s, n));
}

void json_str(struct json_writer *w, const char *s)
{
	if (!w->failed)
		json_check(w, yajl_gen_string(w->g, (const unsigned char *)s, strlen(s)));
}

void json_int(struct json_writer *w, long long v)
{
	if (!w->failed)
		json_check(w, yajl_gen_integer(w->g, v));
}

void json_number(struct json_writer *w, const char *s, size_t n)
{
	if (!w->failed)
		json_check(w, yajl_gen_number(w->g, s, n));
}

void json_bool(struct json_writer *w, int v)
{
	if (!w->failed)
		json_check(w, yajl_gen_bool(w->g, v));
}

void json_null(struct json_writer *w)
{
	if (!w->failed)
		json_check(w, yajl_gen_null(w->g));
}

void json_map_open(struct json_writer *w)
{
	if (!w->failed)
		json_check(w, yajl_gen_map_open(w->g));
}

void json_map_close(struct json_writer *w)
{
	if (!w->failed)
		json_check(w, yajl_gen_map_close(w->g));
}

void json_array_open(struct json_writer *w)
{
	if (!w->failed)
		json_check(w, yajl_gen_array_open(w->g));
}

void json_array_close(struct json_writer *w)
{
	if (!w->failed)
		json_check(w, yajl_gen_array_close(w->g));
}

void json_key_str(struct json_writer *w, const char *key, const char *value)
{
	json_str(w, key);
	json_str(w, value);
}

void json_key_int(struct json_writer *w, const char *key, long long value)
{
	json_str(w, key);
	json_int(w, value);
}

void json_key_bool(struct json_writer *w, const char *key, int value)
{
	json_str(w, key);
	json_bool(w, value);
}

void json_key_map(struct json_writer *w, const char *key)
{
	json_str(w, key);
	json_map_open(w);
}

char *json_writer_finish(struct json_writer *w, size_t *len)
{
	const unsigned char *buf;
	char *out = NULL;
	size_t n;

	if (!w->failed && yajl_gen_get_buf(w->g, &buf, &n) == yajl_gen_status_ok &&
	    (out = malloc(n + 2))) {
		memcpy(out, buf, n);
		if ((w->flags & JSON_NEWLINE) && (n == 0 || buf[n - 1] != '\n'))
			out[n++] = '\n';
		out[n] = '\0';
		*len = n;
	}
	if (w->g)
		yajl_gen_free(w->g);
	w->g = NULL;
	w->failed = 1;
	return out;
}
