/* A JSON-RPC call's id, by a strict JSON scanner (jsonrpc.h). */
#include "http/jsonrpc.h"

#include <stdlib.h>
#include <string.h>

#include "http/path.h"

struct jr_scan {
	const unsigned char *s;
	size_t n, i;
};

/* White space: RFC 8259's, and \v and \f, which yajl takes too (the body was read by it). */
static void jr_ws(struct jr_scan *sc)
{
	while (sc->i < sc->n && sc->s[sc->i] != '\0' && strchr(" \t\n\r\v\f", sc->s[sc->i]))
		sc->i++;
}

static int jr_digit(unsigned char c)
{
	return c >= '0' && c <= '9';
}

/*
 * Past the string whose '"' is at sc->i; with is_id, *is_id becomes 1 when
 * its decoded text is "id". 0 or -1.
 */
static int jr_string(struct jr_scan *sc, int *is_id)
{
	static const char id[] = "id";
	size_t i = sc->i + 1, matched = 0;
	int same = 1;
	unsigned c;

	for (; i < sc->n; i++) {
		c = sc->s[i];
		if (c == '"') {
			sc->i = i + 1;
			if (is_id)
				*is_id = same && matched == 2;
			return 0;
		}
		if (c < 0x20)
			return -1;
		if (c == '\\') {
			if (++i >= sc->n)
				return -1;
			switch (sc->s[i]) {
			case 'u':
				if (sc->n - i < 5)
					return -1;
				c = 0;
				for (int k = 1; k <= 4; k++) {
					int h = path_hex(sc->s[i + k]);

					if (h < 0)
						return -1;
					c = c * 16 + (unsigned)h;
				}
				i += 4;
				break;
			case '"': case '\\': case '/':
				c = sc->s[i];
				break;
			case 'b': case 'f': case 'n': case 'r': case 't':
				c = 0x100; /* a control character: never "id"'s */
				break;
			default:
				return -1;
			}
		}
		if (matched < 2 && c == (unsigned char)id[matched])
			matched++;
		else
			same = 0;
	}
	return -1;
}

/* Past a number at sc->i. 0 or -1. */
static int jr_number(struct jr_scan *sc)
{
	const unsigned char *s = sc->s;
	size_t i = sc->i, n = sc->n;

	if (i < n && s[i] == '-')
		i++;
	if (i >= n || !jr_digit(s[i]))
		return -1;
	if (s[i] == '0')
		i++;
	else
		while (i < n && jr_digit(s[i]))
			i++;
	if (i < n && s[i] == '.') {
		if (++i >= n || !jr_digit(s[i]))
			return -1;
		while (i < n && jr_digit(s[i]))
			i++;
	}
	if (i < n && (s[i] == 'e' || s[i] == 'E')) {
		if (++i < n && (s[i] == '+' || s[i] == '-'))
			i++;
		if (i >= n || !jr_digit(s[i]))
			return -1;
		while (i < n && jr_digit(s[i]))
			i++;
	}
	sc->i = i;
	return 0;
}

static int jr_literal(struct jr_scan *sc, const char *lit)
{
	size_t len = strlen(lit);

	if (sc->n - sc->i < len || memcmp(sc->s + sc->i, lit, len) != 0)
		return -1;
	sc->i += len;
	return 0;
}

/*
 * Past one value at sc->i (white space before it skipped), nesting kept
 * in a stack of its own rather than by recursion. 0 or -1.
 */
static int jr_value(struct jr_scan *sc)
{
	unsigned char stack[JSONRPC_DEPTH_MAX]; /* '}' or ']' each open container closes with */
	int depth = 0;
	unsigned char c;

	for (;;) {
		/* A value. */
		jr_ws(sc);
		if (sc->i >= sc->n)
			return -1;
		c = sc->s[sc->i];
		if (c == '{' || c == '[') {
			if (depth == JSONRPC_DEPTH_MAX)
				return -1;
			stack[depth++] = c == '{' ? '}' : ']';
			sc->i++;
			jr_ws(sc);
			if (sc->i < sc->n && sc->s[sc->i] == stack[depth - 1]) {
				sc->i++;
				depth--;
				goto after;
			}
			if (c == '[')
				continue;
			goto member;
		}
		if (c == '"' ? jr_string(sc, NULL)
		    : c == 't' ? jr_literal(sc, "true")
		    : c == 'f' ? jr_literal(sc, "false")
		    : c == 'n' ? jr_literal(sc, "null")
			       : jr_number(sc))
			return -1;
	after:
		/* After a value: a comma, or the close of its container. */
		for (;;) {
			if (depth == 0)
				return 0;
			jr_ws(sc);
			if (sc->i >= sc->n)
				return -1;
			c = sc->s[sc->i++];
			if (c == stack[depth - 1]) {
				depth--;
				continue;
			}
			if (c != ',')
				return -1;
			if (stack[depth - 1] == ']')
				break;
		member:
			/* A member's name and its colon. */
			jr_ws(sc);
			if (sc->i >= sc->n || sc->s[sc->i] != '"' || jr_string(sc, NULL))
				return -1;
			jr_ws(sc);
			if (sc->i >= sc->n || sc->s[sc->i++] != ':')
				return -1;
			break;
		}
	}
}

enum jsonrpc_find jsonrpc_id(const unsigned char *s, size_t n, struct jsonrpc_member *m)
{
	struct jr_scan sc = {s, n, 0};
	size_t prev_end = 0, key, value;
	int found = 0, first = 1, is_id;

	jr_ws(&sc);
	if (sc.i >= n || s[sc.i] != '{')
		return JSONRPC_NOT_OBJECT;
	sc.i++;
	jr_ws(&sc);
	if (sc.i < n && s[sc.i] == '}') {
		sc.i++;
	} else {
		for (;;) {
			jr_ws(&sc);
			key = sc.i;
			if (sc.i >= n || s[sc.i] != '"' || jr_string(&sc, &is_id))
				return JSONRPC_NOT_OBJECT;
			jr_ws(&sc);
			if (sc.i >= n || s[sc.i++] != ':')
				return JSONRPC_NOT_OBJECT;
			jr_ws(&sc);
			value = sc.i;
			if (jr_value(&sc))
				return JSONRPC_NOT_OBJECT;
			if (is_id && found++ == 0) {
				*m = (struct jsonrpc_member){key, value, sc.i, key, sc.i};
				if (!first)
					m->cut_from = prev_end; /* from the comma before it */
			}
			prev_end = sc.i;
			first = 0;
			jr_ws(&sc);
			if (sc.i >= n)
				return JSONRPC_NOT_OBJECT;
			if (s[sc.i] == '}') {
				sc.i++;
				break;
			}
			if (s[sc.i++] != ',')
				return JSONRPC_NOT_OBJECT;
			/* The first member leaves with the comma after it. */
			if (found == 1 && m->cut_from == m->key && m->cut_to == m->end) {
				jr_ws(&sc);
				m->cut_to = sc.i;
			}
		}
	}
	jr_ws(&sc);
	if (sc.i != n)
		return JSONRPC_NOT_OBJECT;
	return found == 0 ? JSONRPC_ABSENT : found == 1 ? JSONRPC_FOUND : JSONRPC_TWICE;
}

/* The n bytes at s with [from, to) replaced by the len bytes at with, into *out. */
static int jr_splice(const unsigned char *s, size_t n, size_t from, size_t to,
		     const unsigned char *with, size_t len, unsigned char **out, size_t *out_len)
{
	size_t total = n - (to - from) + len;
	unsigned char *p = malloc(total ? total : 1);

	if (!p)
		return -1;
	memcpy(p, s, from);
	if (len)
		memcpy(p + from, with, len);
	memcpy(p + from + len, s + to, n - to);
	*out = p;
	*out_len = total;
	return 1;
}

int jsonrpc_without_id(const unsigned char *s, size_t n, unsigned char **out, size_t *out_len)
{
	struct jsonrpc_member m;

	*out = NULL;
	*out_len = 0;
	if (jsonrpc_id(s, n, &m) != JSONRPC_FOUND)
		return 0;
	return jr_splice(s, n, m.cut_from, m.cut_to, NULL, 0, out, out_len);
}

int jsonrpc_with_id(const unsigned char *s, size_t n, const unsigned char *id, size_t id_len,
		    unsigned char **out, size_t *out_len)
{
	struct jsonrpc_member m;

	*out = NULL;
	*out_len = 0;
	if (jsonrpc_id(s, n, &m) != JSONRPC_FOUND)
		return 0;
	return jr_splice(s, n, m.value, m.end, id, id_len, out, out_len);
}
