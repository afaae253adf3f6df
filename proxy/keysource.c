/* The key sources of key_from (keysource.h). */
#include "proxy/keysource.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <event2/buffer.h>
#include <yajl/yajl_tree.h>

#include "conf/conf.h"
#include "proxy/http.h"
#include "proxy/idemkey.h"
#include "http/path.h"

#define KEYSOURCE_PATH_MAX 16 /* dot-separated names in a json PATH */
#define KEYSOURCE_DEPTH_MAX 256 /* deeper JSON is not looked into (yajl_tree frees recursively) */
#define KEYSOURCE_RAW_MAX  (IDEMKEY_MAX * 3 + 3) /* a key, every byte %-encoded or quoted */

/* Percent-decode (and '+' as a blank) s (len bytes) into out; its length or -2. */
static int keysource_unescape(const char *s, size_t len, char *out, size_t outlen)
{
	size_t n = 0;

	for (size_t i = 0; i < len; i++) {
		char c = s[i];
		int hi, lo;

		if (c == '%') {
			if (i + 2 >= len || (hi = path_hex((unsigned char)s[i + 1])) < 0 ||
			    (lo = path_hex((unsigned char)s[i + 2])) < 0)
				return -2;
			c = (char)(hi * 16 + lo);
			i += 2;
		} else if (c == '+') {
			c = ' ';
		}
		if (n + 1 >= outlen)
			return -2;
		out[n++] = c;
	}
	out[n] = '\0';
	return (int)n;
}

int keysource_query_value(const char *query, size_t len, const char *name, char *out,
			  size_t outlen)
{
	size_t nlen = strlen(name);
	const char *p = query, *end = query + len;
	int found = -1;

	while (p && p < end) {
		const char *amp = memchr(p, '&', (size_t)(end - p));
		const char *pend = amp ? amp : end;

		if ((size_t)(pend - p) > nlen && memcmp(p, name, nlen) == 0 && p[nlen] == '=') {
			if (found >= 0)
				return -2;
			found = keysource_unescape(p + nlen + 1, (size_t)(pend - p - nlen - 1), out,
						   outlen);
			if (found < 0)
				return found;
		} else if ((size_t)(pend - p) == nlen && memcmp(p, name, nlen) == 0) {
			return -2; /* "?key" without a value */
		}
		p = amp ? amp + 1 : NULL;
	}
	return found;
}

/*
 * 1 when the JSON text (len bytes) nests arrays and objects no deeper than
 * KEYSOURCE_DEPTH_MAX: yajl's tree is built and freed by recursion, so a
 * body of a million "[" must never reach it.
 */
static int keysource_shallow(const unsigned char *json, size_t len)
{
	int depth = 0, in_string = 0;

	for (size_t i = 0; i < len; i++) {
		unsigned char c = json[i];

		if (in_string) {
			if (c == '\\')
				i++;
			else if (c == '"')
				in_string = 0;
		} else if (c == '"') {
			in_string = 1;
		} else if (c == '[' || c == '{') {
			if (++depth > KEYSOURCE_DEPTH_MAX)
				return 0;
		} else if (c == ']' || c == '}') {
			depth--;
		}
	}
	return 1;
}

/* 1 when s is a JSON integer's text: digits, maybe after a minus. */
static int keysource_integer(const char *s)
{
	s += *s == '-';
	if (!*s)
		return 0;
	for (; *s; s++)
		if (*s < '0' || *s > '9')
			return 0;
	return 1;
}

int keysource_json_value(const unsigned char *json, size_t len, const char *path, char *out,
			 size_t outlen)
{
	const char *names[KEYSOURCE_PATH_MAX + 1];
	char *text = malloc(len + 1), *copy = strdup(path), *save = NULL, *tok;
	yajl_val doc = NULL, v;
	const char *value = NULL;
	int n = 0, rc = -1;
	size_t vlen;

	if (!text || !copy) {
		rc = -3;
		goto out;
	}
	if (!keysource_shallow(json, len))
		goto out; /* as if absent: the key is not where it can be found */
	memcpy(text, json, len);
	text[len] = '\0';
	for (tok = strtok_r(copy, ".", &save); tok && n < KEYSOURCE_PATH_MAX;
	     tok = strtok_r(NULL, ".", &save))
		names[n++] = tok;
	names[n] = NULL;
	doc = yajl_tree_parse(text, NULL, 0);
	v = doc ? yajl_tree_get(doc, names, yajl_t_any) : NULL;
	if (!v)
		goto out;
	rc = -2;
	if (YAJL_IS_STRING(v))
		value = v->u.string;
	else if (YAJL_IS_NUMBER(v) && keysource_integer(v->u.number.r))
		value = v->u.number.r; /* its text as sent, however large */
	if (!value || (vlen = strlen(value)) + 1 > outlen)
		goto out;
	memcpy(out, value, vlen + 1);
	rc = (int)vlen;
out:
	yajl_tree_free(doc);
	free(text);
	free(copy);
	return rc;
}

const char *keysource_name(const struct conf *conf, const struct route *r)
{
	return r->key_from && r->key_from_name ? r->key_from_name : conf->key_header;
}

static const struct keysource_wording keysource_wordings[] = {
    [KEY_FROM_UNSET] = {"header", "the ", " header"},
    [KEY_FROM_HEADER] = {"header", "the ", " header"},
    [KEY_FROM_JSON] = {"json", "the string or integer at ", " in the JSON body"},
    [KEY_FROM_QUERY] = {"query", "the ", " query parameter (percent-decoded)"},
};

const struct keysource_wording *keysource_wording(const struct route *r)
{
	return &keysource_wordings[r->key_from];
}

int keysource_maybe(const struct conf *conf, const struct route *r, const struct http_msg *head)
{
	char raw[KEYSOURCE_RAW_MAX + 1];

	switch (r->key_from) {
	case KEY_FROM_JSON:
		return 1;
	case KEY_FROM_QUERY:
		return keysource_query_value(head->query, head->query ? head->query_len : 0,
					     r->key_from_name, raw, sizeof(raw)) != -1;
	default:
		return http_msg_header_count(head, keysource_name(conf, r)) > 0;
	}
}

enum keysource_result keysource_get(const struct conf *conf, const struct route *r,
				    const struct http_msg *m, char *out, size_t *out_len)
{
	char raw[KEYSOURCE_RAW_MAX + 1];
	const char *name = keysource_name(conf, r), *value = raw;
	size_t blen;
	int n;

	switch (r->key_from) {
	case KEY_FROM_JSON:
		blen = evbuffer_get_length(m->body);
		n = blen ? keysource_json_value(evbuffer_pullup(m->body, -1), blen, name, raw,
						sizeof(raw))
			 : -1;
		break;
	case KEY_FROM_QUERY:
		n = keysource_query_value(m->query, m->query ? m->query_len : 0, name, raw,
					  sizeof(raw));
		break;
	default:
		n = http_msg_header_count(m, name) > 1 ? -2 : 0;
		value = http_msg_header(m, name);
		if (!value)
			n = -1;
		else if (n == 0)
			n = (int)strlen(value);
		break;
	}
	if (n == -3)
		return KEYSOURCE_NOMEM;
	if (n == -1)
		return KEYSOURCE_ABSENT;
	if (n < 0 || idemkey_parse(value, (size_t)n, out, out_len) < 0)
		return KEYSOURCE_INVALID;
	return KEYSOURCE_FOUND;
}
