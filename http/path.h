/* Request paths as idemproxy compares them (docs/http.md, "Paths and methods"). */
#ifndef IDEMPROXY_PATH_H
#define IDEMPROXY_PATH_H

#include <stddef.h>

/*
 * Normalises the request path at path (*len bytes, starting with '/') in
 * place and NUL-terminates it; *len becomes its new length, never larger.
 * Percent-encoded unreserved characters are decoded and other encodings
 * written with upper-case hex; ";parameters" are cut from each segment;
 * empty and "." segments are dropped and ".." removes the segment before
 * it; so there is no repeated or trailing slash ("/" stays "/"). Letters
 * keep their case. Returns 0, or -1 with *why (a static string) when the
 * path holds a malformed percent-encoding, an encoded NUL or ".." above
 * the root, or does not start with '/'.
 */
int path_normalise(char *path, size_t *len, const char **why);

/*
 * 1 when the len bytes at s hold what a server behind idemproxy may read as
 * "/" although no segment ends there: "\" (WHATWG URL parsers read it as
 * "/") or "%2F" or "%5C" in either case (WSGI and ASGI servers decode the
 * path before routing), or begin with "//" (a WHATWG URL parser reads what
 * follows as a host, so "//x/api" routes as "/api"); else 0. s need not be
 * normalised, nor valid.
 */
int path_slash_alias(const char *s, size_t len);

/* The value of the hex digit c, or -1. */
int path_hex(unsigned char c);

#endif
