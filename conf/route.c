/*
 * Route path templates.
 *
 * A template is "/" followed by segments separated by "/": literal text,
 * "{name}" for exactly one non-empty segment, or a final "*" for zero or more
 * remaining segments. A template "/a/b" is stored as the segments "a", "b";
 * each segment but "*" consumes a "/" and its text from the request path.
 * Request paths arrive normalised (http/path.h), and templates must be
 * written so too (route_template_parse refuses others), so "/" is the only
 * template with an empty segment.
 */
#include "conf/route.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "http/path.h"

/* Whether C may appear in a literal segment: visible ASCII without the
 * characters that mean something in a template or never reach a path. */
static int route_literal_char(unsigned char c)
{
	return c > 0x20 && c < 0x7f && c != '{' && c != '}' && c != '*' && c != '?' && c != '#';
}

static int route_param_char(unsigned char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       c == '_';
}

/*
 * Check the literal segment S (LEN bytes). Returns 0, or -1 with the reason
 * in err.
 */
static int route_check_literal(const char *s, size_t len, char *err, size_t errlen)
{
	size_t i;
	unsigned char c;

	for (i = 0; i < len; i++) {
		c = (unsigned char)s[i];
		if (route_literal_char(c))
			continue;
		if (c == '{' || c == '}')
			snprintf(err, errlen, "\"{name}\" must be a whole segment");
		else if (c == '*')
			snprintf(err, errlen, "\"*\" must be a whole segment");
		else if (c == '?')
			snprintf(err, errlen, "\"?\" is not allowed (the query is not matched)");
		else
			snprintf(err, errlen, "invalid character 0x%02x", c);
		return -1;
	}
	return 0;
}

/*
 * Check the parameter segment S ("{name}", LEN bytes) against its name and
 * the parameters before it in SEGS[0..N). Returns 0, or -1 with the reason
 * in err.
 */
static int route_check_param(const char *s, size_t len, const struct path_seg *segs, int n,
			     char *err, size_t errlen)
{
	size_t i;
	int j;

	if (len < 3 || s[len - 1] != '}') {
		snprintf(err, errlen, "\"{name}\" must be a whole segment");
		return -1;
	}
	for (i = 1; i < len - 1; i++) {
		if (!route_param_char((unsigned char)s[i])) {
			snprintf(err, errlen,
				 "invalid parameter name \"%.*s\" (letters, digits and _)",
				 (int)(len - 2), s + 1);
			return -1;
		}
	}
	for (j = 0; j < n; j++) {
		if (segs[j].kind == SEG_PARAM && segs[j].len == len - 2 &&
		    memcmp(segs[j].text, s + 1, len - 2) == 0) {
			snprintf(err, errlen, "duplicate parameter \"{%.*s}\"", (int)(len - 2),
				 s + 1);
			return -1;
		}
	}
	return 0;
}

/*
 * Check that TMPL is written as requests are compared: normalised. Returns
 * 0, or -1 with the reason in err.
 */
static int route_check_normal(const char *tmpl, char *err, size_t errlen)
{
	char *copy = strdup(tmpl);
	size_t len = strlen(tmpl);
	const char *why;
	int rc = -1;

	if (!copy)
		snprintf(err, errlen, "out of memory");
	else if (path_normalise(copy, &len, &why) < 0)
		snprintf(err, errlen, "holds %s", why);
	else if (strcmp(copy, tmpl) != 0)
		snprintf(err, errlen, "requests are compared normalised: write \"%s\"", copy);
	else
		rc = 0;
	free(copy);
	return rc;
}

/*
 * Parse TMPL into a new array of segments stored in *segs and *nsegs (the
 * caller frees them with route_template_free). Returns 0, or -1 with the
 * reason (without the template itself) in err; *segs is then untouched.
 */
int route_template_parse(const char *tmpl, struct path_seg **segs, int *nsegs, char *err,
			 size_t errlen)
{
	struct path_seg *out = NULL, *seg;
	const char *s, *e;
	size_t len;
	int n = 0, count = 1, last, rc = -1;

	if (tmpl[0] != '/') {
		snprintf(err, errlen, "must start with \"/\"");
		goto out;
	}
	if (route_check_normal(tmpl, err, errlen))
		goto out;
	if (path_slash_alias(tmpl, strlen(tmpl))) {
		snprintf(err, errlen, "holds %%2F, %%5C or \"\\\": unsafe requests with such a path "
				      "are refused, so it would never match");
		goto out;
	}
	for (s = tmpl + 1; *s; s++)
		count += *s == '/';
	out = calloc(count, sizeof(*out));
	if (!out) {
		snprintf(err, errlen, "out of memory");
		goto out;
	}
	for (s = tmpl + 1;; s = e + 1) {
		e = strchr(s, '/');
		last = e == NULL;
		if (last)
			e = s + strlen(s);
		len = (size_t)(e - s);
		seg = &out[n];
		if (len == 1 && *s == '*') {
			if (!last) {
				snprintf(err, errlen, "\"*\" is only allowed as the last segment");
				goto out;
			}
			seg->kind = SEG_REST;
			n++;
			break;
		}
		if (len == 0 && !last) {
			snprintf(err, errlen, "empty segment");
			goto out;
		}
		if (len > 0 && *s == '{') {
			if (route_check_param(s, len, out, n, err, errlen))
				goto out;
			seg->kind = SEG_PARAM;
			seg->text = strndup(s + 1, len - 2);
			seg->len = len - 2;
		} else {
			if (route_check_literal(s, len, err, errlen))
				goto out;
			seg->kind = SEG_LITERAL;
			seg->text = strndup(s, len);
			seg->len = len;
		}
		if (!seg->text) {
			snprintf(err, errlen, "out of memory");
			goto out;
		}
		n++;
		if (last)
			break;
	}
	*segs = out;
	*nsegs = n;
	out = NULL;
	rc = 0;
out:
	route_template_free(out, n);
	return rc;
}

void route_template_free(struct path_seg *segs, int nsegs)
{
	int i;

	if (!segs)
		return;
	for (i = 0; i < nsegs; i++)
		free(segs[i].text);
	free(segs);
}

/* 1 when the n bytes at a and b are the same, ASCII letters in either case when icase. */
static int route_same(const char *a, const char *b, size_t n, int icase)
{
	unsigned char x, y;

	if (!icase)
		return memcmp(a, b, n) == 0;
	for (size_t i = 0; i < n; i++) {
		x = (unsigned char)a[i];
		y = (unsigned char)b[i];
		if (x >= 'A' && x <= 'Z')
			x = (unsigned char)(x - 'A' + 'a');
		if (y >= 'A' && y <= 'Z')
			y = (unsigned char)(y - 'A' + 'a');
		if (x != y)
			return 0;
	}
	return 1;
}

/*
 * Walks PATH (PATH_LEN bytes) along the template SEGS; with spelled, writes
 * each literal segment there in the template's spelling. Returns 1 when
 * the path matches, else 0.
 */
static int route_walk(const struct path_seg *segs, int nsegs, const char *path, size_t path_len,
		      int icase, char *spelled)
{
	const char *slash;
	size_t pos = 0, len;
	int i;

	if (path_len == 0 || path[0] != '/')
		return 0;
	for (i = 0; i < nsegs; i++) {
		if (segs[i].kind == SEG_REST)
			return pos == path_len || path[pos] == '/';
		if (pos == path_len || path[pos] != '/')
			return 0;
		pos++;
		slash = memchr(path + pos, '/', path_len - pos);
		len = slash ? (size_t)(slash - (path + pos)) : path_len - pos;
		if (segs[i].kind == SEG_PARAM) {
			if (len == 0)
				return 0;
		} else if (len != segs[i].len || !route_same(path + pos, segs[i].text, len, icase)) {
			return 0;
		} else if (spelled) {
			memcpy(spelled + pos, segs[i].text, len);
		}
		pos += len;
	}
	return pos == path_len;
}

int route_template_match(const struct path_seg *segs, int nsegs, const char *path, size_t path_len,
			 int icase, char *spelled)
{
	if (!route_walk(segs, nsegs, path, path_len, icase, NULL))
		return 0;
	if (spelled)
		route_walk(segs, nsegs, path, path_len, icase, spelled);
	return 1;
}

int route_template_same(const struct path_seg *a, int na, const struct path_seg *b, int nb,
			int icase)
{
	if (na != nb)
		return 0;
	for (int i = 0; i < na; i++) {
		if (a[i].kind != b[i].kind)
			return 0;
		if (a[i].kind == SEG_LITERAL &&
		    (a[i].len != b[i].len || !route_same(a[i].text, b[i].text, a[i].len, icase)))
			return 0;
	}
	return 1;
}
