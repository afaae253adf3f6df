/*
 * Request paths as idemproxy compares them.
 *
 * Frameworks route "/api/courses/", "//api/courses", "/api/%63ourses" and
 * "/api/courses;x=1" to one handler, so routes must match them as one
 * path, or a retry spelled differently would pass unenforced. The steps
 * are RFC 3986's normalisations (6.2.2: percent-encoding, dot segments)
 * plus what servers commonly ignore: repeated and trailing slashes and
 * ";parameters" (cut before dot segments are looked at, so "..;x" is
 * "..", as Tomcat reads it). One pass, in place: every step writes no more
 * bytes than it reads.
 *
 * What stays encoded here a server behind may still decode: "%2F" is no
 * separator to the routes but is "/" to a WSGI application, and "\" is "/"
 * to a WHATWG URL parser, as is a leading "//" the start of a host name.
 * path_slash_alias finds those, so that a caller
 * can refuse such a path instead of guessing where the upstream routes it.
 */
#include "http/path.h"

int path_hex(unsigned char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/* RFC 3986 2.3: ALPHA / DIGIT / "-" / "." / "_" / "~". */
static int path_unreserved(unsigned char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       c == '-' || c == '.' || c == '_' || c == '~';
}

int path_slash_alias(const char *s, size_t len)
{
	size_t i;
	int hi, lo, c;

	/* "//x/api" is a network-path reference (RFC 3986 4.2): a WHATWG URL
	 * parser takes x for a host and routes "/api". */
	if (len >= 2 && s[0] == '/' && s[1] == '/')
		return 1;
	for (i = 0; i < len; i++) {
		if (s[i] == '\\')
			return 1;
		if (s[i] != '%' || len - i < 3 || (hi = path_hex((unsigned char)s[i + 1])) < 0 ||
		    (lo = path_hex((unsigned char)s[i + 2])) < 0)
			continue;
		c = hi * 16 + lo;
		if (c == '/' || c == '\\')
			return 1;
	}
	return 0;
}

static int path_fail(const char **why, const char *reason)
{
	*why = reason;
	return -1;
}

int path_normalise(char *path, size_t *len, const char **why)
{
	static const char upper[] = "0123456789ABCDEF";
	size_t n = *len, r = 0, w = 0, seg;
	int hi, lo, params;
	unsigned char c;

	if (n == 0 || path[0] != '/')
		return path_fail(why, "the path does not start with \"/\"");
	while (r < n) {
		while (r < n && path[r] == '/')
			r++;
		if (r == n)
			break;
		/* A segment: its slash, then its bytes up to the next slash. */
		path[w++] = '/';
		seg = w;
		params = 0;
		while (r < n && path[r] != '/') {
			c = (unsigned char)path[r];
			if (c != '%') {
				params |= c == ';';
				if (!params)
					path[w++] = (char)c;
				r++;
				continue;
			}
			if (n - r < 3 || (hi = path_hex((unsigned char)path[r + 1])) < 0 ||
			    (lo = path_hex((unsigned char)path[r + 2])) < 0)
				return path_fail(why, "a malformed percent-encoding");
			if (hi == 0 && lo == 0)
				return path_fail(why, "an encoded NUL (%00)");
			r += 3;
			if (params)
				continue;
			c = (unsigned char)(hi * 16 + lo);
			if (path_unreserved(c)) {
				path[w++] = (char)c;
			} else {
				path[w++] = '%';
				path[w++] = upper[hi];
				path[w++] = upper[lo];
			}
		}
		if (w == seg || (w - seg == 1 && path[seg] == '.')) {
			w = seg - 1; /* empty or ".": gone with its slash */
		} else if (w - seg == 2 && path[seg] == '.' && path[seg + 1] == '.') {
			if (seg == 1)
				return path_fail(why, "\"..\" above the root");
			w = seg - 1; /* "..": gone, with the segment before it */
			while (path[--w] != '/')
				;
		}
	}
	if (w == 0)
		path[w++] = '/';
	path[w] = '\0';
	*len = w;
	return 0;
}
