/*
 * libFuzzer target for the request path normaliser (http/path.c): the
 * input is a path (a '/' is put before it when it has none). Besides
 * memory errors it checks what a normal path is: it starts with '/', has
 * no empty, "." or ".." segment and no trailing '/' (but "/"), no ';', no
 * encoded unreserved character, no lower-case hex and no %00; it is no
 * longer than the input, and normalising it again changes nothing.
 * path_slash_alias must agree with a reading of its own (a backslash, or a
 * percent-encoding that decodes to "/" or "\\"), and normalising never
 * makes such a byte where the input had none.
 * Built by `make fuzz` from the Makefile's FUZZ_SRC_fuzz_path.
 */
#include <ctype.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "http/path.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int hex(char c)
{
	return (c >= '0' && c <= '9') ? c - '0' : (c >= 'A' && c <= 'F') ? c - 'A' + 10 : -1;
}

static int unreserved(int c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       c == '-' || c == '.' || c == '_' || c == '~';
}

/* 1 when p (n bytes) starts "//" or holds a backslash or %XX decoding to "/" or "\\". */
static int slash_alias(const char *p, size_t n)
{
	size_t i;
	int hi, lo;

	if (n >= 2 && !strncmp(p, "//", 2))
		return 1;
	for (i = 0; i < n; i++) {
		if (p[i] == '\\')
			return 1;
		if (p[i] != '%' || i + 2 >= n)
			continue;
		hi = hex((char)toupper((unsigned char)p[i + 1]));
		lo = hex((char)toupper((unsigned char)p[i + 2]));
		if ((hi == 2 && lo == 15) || (hi == 5 && lo == 12))
			return 1;
	}
	return 0;
}

/* Aborts unless p (n bytes, NUL after them) is a normal path. */
static void check_normal(const char *p, size_t n)
{
	size_t i, seg;

	if (n == 0 || p[0] != '/' || p[n] != '\0' || memchr(p, ';', n))
		abort();
	if (n == 1)
		return;
	if (p[n - 1] == '/')
		abort();
	for (i = 0; i < n; i = seg) {
		seg = i + 1;
		while (seg < n && p[seg] != '/')
			seg++;
		/* the segment is p[i + 1 .. seg) */
		if (seg == i + 1 || (seg == i + 2 && p[i + 1] == '.') ||
		    (seg == i + 3 && p[i + 1] == '.' && p[i + 2] == '.'))
			abort();
	}
	for (i = 0; i < n; i++) {
		int hi, lo;

		if (p[i] != '%')
			continue;
		if (i + 2 >= n)
			abort();
		hi = hex(p[i + 1]);
		lo = hex(p[i + 2]);
		if (hi < 0 || lo < 0 || (hi == 0 && lo == 0) || unreserved(hi * 16 + lo))
			abort();
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *path = malloc(size + 2), *again;
	size_t len = 0, len2;
	const char *why = NULL;
	int alias;

	if (!path)
		return 0;
	if (size == 0 || data[0] != '/')
		path[len++] = '/';
	memcpy(path + len, data, size);
	len += size;
	path[len] = '\0';
	alias = slash_alias(path, len);
	if (path_slash_alias(path, len) != alias)
		abort();
	if (path_normalise(path, &len, &why) < 0) {
		if (!why)
			abort();
		free(path);
		return 0;
	}
	if (len > size + 1)
		abort();
	check_normal(path, len);
	if (!alias && path_slash_alias(path, len))
		abort();
	again = malloc(len + 1);
	if (!again)
		abort();
	memcpy(again, path, len + 1);
	len2 = len;
	if (path_normalise(again, &len2, &why) < 0 || len2 != len || memcmp(again, path, len))
		abort();
	free(again);
	free(path);
	return 0;
}
