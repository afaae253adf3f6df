/*
 * Request fingerprints.
 *
 * The JSON body is parsed with yajl's callback parser and written at once
 * in a canonical form, into one text buffer in document order; only the
 * members of objects may need another order. An object whose members are
 * out of order is sorted when it closes: in the text itself when it is
 * small (the members' text in their new order takes the place of the old,
 * which has the same length), else by keeping its members' offsets,
 * sorted, for the writer, which then writes the text around them. The
 * canonical form is:
 *
 *  - object members sorted by the bytes of their UTF-8 key (a shorter prefix
 *    first), stably, so duplicate keys are all kept in document order;
 *  - arrays in order, no whitespace, literals as true/false/null;
 *  - strings unescaped to UTF-8 and re-escaped the same way every time: only
 *    '"', '\' (as \" and \\) and bytes below 0x20 (as \u00xx);
 *  - numbers by value, computed from their decimal text and never through a
 *    double, so 32, 32.0, 3.2e1, 320e-1 and 0.32E2 agree while precision
 *    beyond a double still tells numbers apart. The text is the one
 *    ECMAScript's Number::toString would give for that exact value.
 *
 * Not valid JSON: yajl's errors, comments, trailing data, more than one
 * value, escapes of unpaired UTF-16 surrogates (yajl would turn them into
 * '?' or a wrong character, so two different bodies could agree), nesting
 * deeper than FP_MAX_DEPTH and exponents longer than FP_MAX_EXP_DIGITS.
 * Such bodies are fingerprinted by their raw bytes instead.
 *
 * Cost: the canonical text (about the body's size, reserved at once), 8
 * bytes a member of each open object, a scratch buffer of at most
 * FP_SORT_IN_PLACE_MAX, and 8 bytes a member and 16 an object for the
 * objects kept for the writer, which only large objects, objects around
 * them and bodies past FP_COPY_BUDGET need. Sorting in place copies at
 * most FP_COPY_BUDGET times the body. For 1 MiB bodies of several shapes
 * this is 1 to 2 MiB and 3 to 9 ms (tests/unit/test_fingerprint.c,
 * IDEMPROXY_FP_BENCH=1, measures it).
 *
 * Selected fields (fingerprint json a.b:int ...) are resolved after parsing;
 * a path step through a non-object or a missing key makes the field absent,
 * and absent fields are left out of the canonical object, so "absent" and
 * "not selected" read the same. A key containing '.' cannot be selected.
 *
 * The query string is sorted as raw bytes, without percent-decoding:
 * "a=%41" and "a=A" are different queries.
 */
#include "proxy/fingerprint.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <openssl/evp.h>
#include <yajl/yajl_parse.h>

#include "http/jsonrpc.h"
#include "proxy/digest.h"
#include "proxy/http.h"

#define FP_MAX_DEPTH	     256	/* deeper nesting is treated as invalid JSON */
#define FP_MAX_EXP_DIGITS    15		/* longer exponents are treated as invalid JSON */
#define FP_MAX_EXP	     999999999999999LL /* the largest of FP_MAX_EXP_DIGITS digits */
#define FP_MAX_TEXT	     UINT32_MAX /* offsets into the text have 32 bits */
#define FP_BUF_MIN	     256	/* first allocation of an fp_buf */
#define FP_ARRAY_MIN	     64		/* first allocation of a member or object array */
#define FP_NUMBER_PLAIN_MAX  21		/* Number::toString: plain digits up to 10^21 */
#define FP_NUMBER_SMALL_MIN  (-6)	/* Number::toString: 0.000001 is still plain */
#define FP_NUMBER_EXTRA	     32		/* room for sign, point, zeros and exponent */
#define FP_LEN_PREFIX	     8		/* bytes of the big-endian length before each part */
#define FP_ESCAPE_U_LEN	     6		/* \uXXXX */
#define FP_SORT_IN_PLACE_MAX 65536 /* larger objects out of order are sorted as they are written   \
				    */
#define FP_COPY_BUDGET	2	   /* sorting in place copies at most this many times the body */
#define FP_DIGEST_STAGE 4096	   /* bytes gathered before a digest update */

#define FP_TAG_JSON 'J'
#define FP_TAG_RAW  'R'
#define FP_TAG_NONE 'N'
#define FP_TAG_HEADERS 'H' /* fingerprint_with_headers: a fingerprint and header values */

/* Outcomes of the internal steps; the public functions map them to 0/-1. */
enum fp_status {
	FP_OK = 0,
	FP_INVALID, /* not JSON we can canonicalise */
	FP_NOMEM,
};

/*
 * A member of an object whose members are out of order: the text of its
 * "key":value at [start, end) of the document's text.
 */
struct fp_member {
	uint32_t start, end;
};

/*
 * An object whose members are out of order: its '{' at open and '}' at
 * close in the text, its members sorted at members[member ...]. A slot
 * with nmembers 0 was reserved for an object that turned out to be in
 * order after all (and keeps its open for the search); it is written as
 * it stands.
 */
struct fp_object {
	uint32_t open, close, member, nmembers;
};

/* An open container. */
struct fp_frame {
	int object;	  /* else an array */
	uint32_t nvalues; /* members or elements so far */
	uint32_t open;	  /* object: offset of its '{' */
	size_t slot;	  /* object: objects[slot] is reserved for it */
	size_t base;	  /* object: its members on the stack start here */
};

/*
 * A canonicalised document: its canonical text in document order, and
 * the objects whose members must be written in another order. Objects
 * are in the order they open, which is the order of their offsets.
 */
struct fp_doc {
	struct fp_buf text;
	struct fp_buf scratch;	 /* an object's members while it is sorted in place */
	size_t copied, budget;	 /* bytes sorted in place so far, and the most allowed */
	struct fp_member *stack; /* members of the open objects */
	size_t nstack, cap_stack;
	struct fp_member *members; /* members of closed objects, sorted object by object */
	size_t nmembers, cap_members;
	struct fp_object *objects;
	size_t nobjects, cap_objects;
	struct fp_frame frames[FP_MAX_DEPTH];
	int depth;
	enum fp_status status; /* why a callback stopped the parser */
};

/* A JSON number's decimal text split into its parts. */
struct fp_number {
	int neg;
	const char *ip, *fp; /* integer and fraction digits */
	size_t ilen, flen;
	size_t first, end; /* significant digits: [first, end) of ip followed by fp */
	int64_t point;	   /* value = 0.DIGITS x 10^point */
};

/* Where canonical text goes: a buffer or a digest. */
struct fp_sink {
	enum fp_status (*put)(void *ctx, const void *data, size_t n);
	void *ctx;
};

/* Frees the buffer's memory and leaves it empty and reusable. */
void fp_buf_free(struct fp_buf *b)
{
	free(b->data);
	b->data = NULL;
	b->len = 0;
	b->cap = 0;
}

/* Makes room for n more bytes in b. Returns FP_OK or FP_NOMEM. */
static enum fp_status fp_buf_reserve(struct fp_buf *b, size_t n)
{
	unsigned char *p;
	size_t cap;

	if (n > SIZE_MAX - b->len)
		return FP_NOMEM;
	if (b->len + n <= b->cap)
		return FP_OK;
	cap = b->cap ? b->cap : FP_BUF_MIN;
	while (cap < b->len + n)
		cap = cap > SIZE_MAX / 2 ? b->len + n : cap * 2;
	p = realloc(b->data, cap);
	if (!p)
		return FP_NOMEM;
	b->data = p;
	b->cap = cap;
	return FP_OK;
}

/* Appends n bytes to b, growing it. Returns FP_OK or FP_NOMEM. */
static inline enum fp_status fp_buf_append(struct fp_buf *b, const void *data, size_t n)
{
	if (b->cap - b->len < n && fp_buf_reserve(b, n))
		return FP_NOMEM;
	if (n > 0)
		memcpy(b->data + b->len, data, n);
	b->len += n;
	return FP_OK;
}

static enum fp_status fp_buf_putc(struct fp_buf *b, char c)
{
	return fp_buf_append(b, &c, 1);
}

static enum fp_status fp_buf_put(void *ctx, const void *data, size_t n)
{
	return fp_buf_append(ctx, data, n);
}

/* Room for one more element of size bytes in the array *arr of *cap. */
static enum fp_status fp_grow(void **arr, size_t *cap, size_t n, size_t size)
{
	size_t c = *cap ? *cap * 2 : FP_ARRAY_MIN;
	void *p;

	if (n < *cap)
		return FP_OK;
	if (c > SIZE_MAX / size)
		return FP_NOMEM;
	p = realloc(*arr, c * size);
	if (!p)
		return FP_NOMEM;
	*arr = p;
	*cap = c;
	return FP_OK;
}

static void fp_doc_free(struct fp_doc *d)
{
	fp_buf_free(&d->text);
	fp_buf_free(&d->scratch);
	free(d->stack);
	free(d->members);
	free(d->objects);
}

static int fp_is_digit(char c)
{
	return c >= '0' && c <= '9';
}

static char fp_number_digit(const struct fp_number *n, size_t i)
{
	return i < n->ilen ? n->ip[i] : n->fp[i - n->ilen];
}

/*
 * Splits s (exactly the JSON number grammar, nothing around it) into n.
 * Returns 0, or -1 when s is not a JSON number or its exponent, as given or
 * as the canonical form writes it, has more than FP_MAX_EXP_DIGITS
 * significant digits.
 */
static int fp_number_parse(const char *s, size_t len, struct fp_number *n)
{
	const char *end = s + len;
	int64_t exp = 0;
	int exp_neg = 0, exp_digits = 0;

	memset(n, 0, sizeof(*n));
	if (s < end && *s == '-') {
		n->neg = 1;
		s++;
	}
	n->ip = s;
	if (s < end && *s == '0') {
		s++;
	} else {
		if (s == end || !fp_is_digit(*s))
			return -1;
		while (s < end && fp_is_digit(*s))
			s++;
	}
	n->ilen = (size_t)(s - n->ip);
	if (s < end && *s == '.') {
		n->fp = ++s;
		while (s < end && fp_is_digit(*s))
			s++;
		n->flen = (size_t)(s - n->fp);
		if (n->flen == 0)
			return -1;
	}
	if (s < end && (*s == 'e' || *s == 'E')) {
		s++;
		if (s < end && (*s == '+' || *s == '-'))
			exp_neg = *s++ == '-';
		if (s == end || !fp_is_digit(*s))
			return -1;
		while (s < end && *s == '0')
			s++;
		for (; s < end && fp_is_digit(*s); s++) {
			if (++exp_digits > FP_MAX_EXP_DIGITS)
				return -1;
			exp = exp * 10 + (*s - '0');
		}
	}
	if (s != end)
		return -1;

	n->end = n->ilen + n->flen;
	while (n->first < n->end && fp_number_digit(n, n->first) == '0')
		n->first++;
	while (n->end > n->first && fp_number_digit(n, n->end - 1) == '0')
		n->end--;
	n->point = (int64_t)n->ilen - (int64_t)n->first + (exp_neg ? -exp : exp);
	/* The canonical exponent (point - 1) must fit the same limit, or the
	 * canonical form would not parse again (129999999e999999999999999
	 * is 1.29999999e+1000000000000007). */
	if (n->first < n->end && (n->point - 1 > FP_MAX_EXP || 1 - n->point > FP_MAX_EXP))
		return -1;
	return 0;
}

/*
 * 1 when s (len bytes) is an integer already in canonical form: at most
 * FP_NUMBER_PLAIN_MAX digits, no leading zero, not -0. Most numbers are.
 */
static int fp_number_is_canonical(const char *s, size_t len)
{
	size_t i = s[0] == '-';

	if (len - i == 0 || len - i > FP_NUMBER_PLAIN_MAX || (s[i] == '0' && len > 1))
		return 0;
	for (; i < len; i++) {
		if (!fp_is_digit(s[i]))
			return 0;
	}
	return 1;
}

static int fp_number_is_zero(const struct fp_number *n)
{
	return n->first == n->end;
}

static int fp_number_is_integral(const struct fp_number *n)
{
	return fp_number_is_zero(n) || (int64_t)(n->end - n->first) <= n->point;
}

/*
 * Appends the canonical text of n to out: Number::toString's layout of the
 * exact value (plain digits, a plain fraction, or d.ddde+N), and "0" for
 * any zero. Returns FP_OK or FP_NOMEM.
 */
static enum fp_status fp_number_format(struct fp_buf *out, const struct fp_number *n)
{
	size_t k = n->end - n->first, i;
	int64_t point = n->point, z;
	char *start, *p;

	if (fp_buf_reserve(out, k + FP_NUMBER_EXTRA))
		return FP_NOMEM;
	start = p = (char *)out->data + out->len;
	if (fp_number_is_zero(n)) {
		*p++ = '0';
	} else {
		if (n->neg)
			*p++ = '-';
		if ((int64_t)k <= point && point <= FP_NUMBER_PLAIN_MAX) {
			for (i = n->first; i < n->end; i++)
				*p++ = fp_number_digit(n, i);
			for (z = (int64_t)k; z < point; z++)
				*p++ = '0';
		} else if (0 < point && point <= FP_NUMBER_PLAIN_MAX) {
			for (i = 0; i < k; i++) {
				if ((int64_t)i == point)
					*p++ = '.';
				*p++ = fp_number_digit(n, n->first + i);
			}
		} else if (FP_NUMBER_SMALL_MIN < point && point <= 0) {
			*p++ = '0';
			*p++ = '.';
			for (z = point; z < 0; z++)
				*p++ = '0';
			for (i = n->first; i < n->end; i++)
				*p++ = fp_number_digit(n, i);
		} else {
			*p++ = fp_number_digit(n, n->first);
			if (k > 1) {
				*p++ = '.';
				for (i = n->first + 1; i < n->end; i++)
					*p++ = fp_number_digit(n, i);
			}
			p += snprintf(p, (size_t)(start + k + FP_NUMBER_EXTRA - p), "e%c%lld",
				      point - 1 < 0 ? '-' : '+',
				      (long long)(point - 1 < 0 ? 1 - point : point - 1));
		}
	}
	out->len += (size_t)(p - start);
	return FP_OK;
}

/* Appends s as a JSON string in the canonical escaping. */
static enum fp_status fp_emit_string(struct fp_buf *out, const char *s, size_t len)
{
	static const char hex[] = "0123456789abcdef";
	char esc[FP_ESCAPE_U_LEN];
	size_t i, run = 0;
	unsigned char c;

	if (fp_buf_putc(out, '"'))
		return FP_NOMEM;
	for (i = 0; i < len; i++) {
		c = (unsigned char)s[i];
		if (c >= 0x20 && c != '"' && c != '\\')
			continue;
		if (fp_buf_append(out, s + run, i - run))
			return FP_NOMEM;
		run = i + 1;
		if (c == '"' || c == '\\') {
			esc[0] = '\\';
			esc[1] = (char)c;
			if (fp_buf_append(out, esc, 2))
				return FP_NOMEM;
			continue;
		}
		memcpy(esc, "\\u00", 4);
		esc[4] = hex[c >> 4];
		esc[5] = hex[c & 0xf];
		if (fp_buf_append(out, esc, sizeof(esc)))
			return FP_NOMEM;
	}
	if (fp_buf_append(out, s + run, len - run) || fp_buf_putc(out, '"'))
		return FP_NOMEM;
	return FP_OK;
}

/* The value of the four hex digits at s, or -1. */
static long fp_hex4(const unsigned char *s)
{
	long v = 0;
	int i, c;

	for (i = 0; i < 4; i++) {
		c = s[i];
		if (c >= '0' && c <= '9')
			c -= '0';
		else if ((c | 0x20) >= 'a' && (c | 0x20) <= 'f')
			c = (c | 0x20) - 'a' + 10;
		else
			return -1;
		v = v * 16 + c;
	}
	return v;
}

/*
 * The next byte of a string in the canonical escaping (the text between
 * its quotes), from *p, which moves past it. Canonical text holds only
 * \", \\ and \u00XX escapes.
 */
static unsigned char fp_unescape_byte(const unsigned char **p)
{
	const unsigned char *s = *p;
	unsigned char c = s[0];

	if (c != '\\') {
		*p = s + 1;
		return c;
	}
	if (s[1] != 'u') {
		*p = s + 2;
		return s[1];
	}
	*p = s + FP_ESCAPE_U_LEN;
	return (unsigned char)fp_hex4(s + 2);
}

/* The unescaped bytes of the canonical string text s (n bytes between the quotes) into out. */
static enum fp_status fp_unescape(struct fp_buf *out, const unsigned char *s, size_t n)
{
	const unsigned char *end = s + n;
	unsigned char c;

	while (s < end) {
		c = fp_unescape_byte(&s);
		if (fp_buf_putc(out, (char)c))
			return FP_NOMEM;
	}
	return FP_OK;
}

static int fp_is_high_surrogate(long cp)
{
	return cp >= 0xd800 && cp <= 0xdbff;
}

static int fp_is_low_surrogate(long cp)
{
	return cp >= 0xdc00 && cp <= 0xdfff;
}

/*
 * Rejects \u escapes of unpaired UTF-16 surrogates, which yajl would
 * silently map onto other characters. A backslash outside a string makes
 * the body invalid anyway, so the scan need not track string boundaries;
 * malformed escapes are left for yajl to reject. Returns 0 when every
 * escaped surrogate is paired, -1 otherwise.
 */
static int fp_check_surrogates(const unsigned char *s, size_t len)
{
	size_t i = 0;
	long cp;

	while (i < len) {
		if (s[i] != '\\') {
			i++;
			continue;
		}
		if (len - i < FP_ESCAPE_U_LEN || s[i + 1] != 'u' || (cp = fp_hex4(s + i + 2)) < 0) {
			i += 2;
			continue;
		}
		i += FP_ESCAPE_U_LEN;
		if (fp_is_low_surrogate(cp))
			return -1;
		if (!fp_is_high_surrogate(cp))
			continue;
		if (len - i < FP_ESCAPE_U_LEN || s[i] != '\\' || s[i + 1] != 'u' ||
		    !fp_is_low_surrogate(fp_hex4(s + i + 2)))
			return -1;
		i += FP_ESCAPE_U_LEN;
	}
	return 0;
}

/* ---- building the document ---- */

/* Stops the callback: the parser fails with st. */
static int fp_fail(struct fp_doc *d, enum fp_status st)
{
	d->status = st;
	return 0;
}

/*
 * 1 while the text can still be addressed with 32-bit offsets; a body
 * whose canonical text is larger is fingerprinted by its raw bytes.
 */
static int fp_room(struct fp_doc *d)
{
	return d->text.len < FP_MAX_TEXT ? 1 : fp_fail(d, FP_INVALID);
}

/* A value begins in the open container: an array's comma before it. Returns 1 or 0. */
static int fp_value(struct fp_doc *d)
{
	struct fp_frame *f;

	if (!fp_room(d))
		return 0;
	if (d->depth == 0)
		return 1;
	f = &d->frames[d->depth - 1];
	if (f->object || f->nvalues++ == 0)
		return 1;
	return fp_buf_putc(&d->text, ',') ? fp_fail(d, FP_NOMEM) : 1;
}

/* A scalar's canonical text, s (n bytes). Returns 1 or 0. */
static int fp_scalar(struct fp_doc *d, const char *s, size_t n)
{
	if (!fp_value(d))
		return 0;
	return fp_buf_append(&d->text, s, n) ? fp_fail(d, FP_NOMEM) : 1;
}

static int fp_on_null(void *ctx)
{
	return fp_scalar(ctx, "null", 4);
}

static int fp_on_boolean(void *ctx, int value)
{
	return value ? fp_scalar(ctx, "true", 4) : fp_scalar(ctx, "false", 5);
}

static int fp_on_number(void *ctx, const char *s, size_t len)
{
	struct fp_doc *d = ctx;
	struct fp_number num;

	if (len > 0 && fp_number_is_canonical(s, len))
		return fp_scalar(d, s, len);
	if (fp_number_parse(s, len, &num) < 0)
		return fp_fail(d, FP_INVALID);
	if (!fp_value(d))
		return 0;
	return fp_number_format(&d->text, &num) ? fp_fail(d, FP_NOMEM) : 1;
}

static int fp_on_string(void *ctx, const unsigned char *s, size_t len)
{
	struct fp_doc *d = ctx;

	if (!fp_value(d))
		return 0;
	return fp_emit_string(&d->text, (const char *)s, len) ? fp_fail(d, FP_NOMEM) : 1;
}

/* A member begins with its key: the one before it ends, a comma between them. */
static int fp_on_map_key(void *ctx, const unsigned char *s, size_t len)
{
	struct fp_doc *d = ctx;
	struct fp_frame *f = &d->frames[d->depth - 1];

	if (!fp_room(d))
		return 0;
	if (f->nvalues++ > 0) {
		d->stack[d->nstack - 1].end = (uint32_t)d->text.len;
		if (fp_buf_putc(&d->text, ','))
			return fp_fail(d, FP_NOMEM);
	}
	if (fp_grow((void **)&d->stack, &d->cap_stack, d->nstack, sizeof(*d->stack)))
		return fp_fail(d, FP_NOMEM);
	d->stack[d->nstack++].start = (uint32_t)d->text.len;
	if (fp_emit_string(&d->text, (const char *)s, len) || fp_buf_putc(&d->text, ':'))
		return fp_fail(d, FP_NOMEM);
	return 1;
}

/* Opens a container; FP_MAX_DEPTH bounds the writer's recursion. */
static int fp_open(struct fp_doc *d, int object)
{
	struct fp_frame *f;

	if (d->depth == FP_MAX_DEPTH)
		return fp_fail(d, FP_INVALID);
	if (!fp_value(d))
		return 0;
	f = &d->frames[d->depth++];
	memset(f, 0, sizeof(*f));
	f->object = object;
	if (object) {
		if (fp_grow((void **)&d->objects, &d->cap_objects, d->nobjects,
			    sizeof(*d->objects)))
			return fp_fail(d, FP_NOMEM);
		f->open = (uint32_t)d->text.len;
		f->slot = d->nobjects;
		f->base = d->nstack;
		d->objects[d->nobjects++] = (struct fp_object){f->open, 0, 0, 0};
	}
	return fp_buf_putc(&d->text, object ? '{' : '[') ? fp_fail(d, FP_NOMEM) : 1;
}

static int fp_on_start_map(void *ctx)
{
	return fp_open(ctx, 1);
}

static int fp_on_start_array(void *ctx)
{
	return fp_open(ctx, 0);
}

/*
 * Compares two keys in the canonical escaping, p and q just past their
 * opening quotes: by their bytes, a shorter prefix first.
 */
static int fp_key_cmp(const unsigned char *p, const unsigned char *q)
{
	unsigned char c, e;

	while (*p != '"' && *q != '"') {
		if (*p == *q && *p != '\\') {
			p++;
			q++;
			continue;
		}
		c = fp_unescape_byte(&p);
		e = fp_unescape_byte(&q);
		if (c != e)
			return c < e ? -1 : 1;
	}
	if (*p == '"')
		return *q == '"' ? 0 : -1;
	return 1;
}

/* Orders two members by key, then by place, so duplicate keys keep document order. */
static int fp_member_cmp(const void *a, const void *b, void *ctx)
{
	const struct fp_member *x = a, *y = b;
	const struct fp_doc *d = ctx;
	int c = fp_key_cmp(d->text.data + x->start + 1, d->text.data + y->start + 1);

	if (c)
		return c;
	return x->start < y->start ? -1 : x->start > y->start;
}

/* 1 when the n members at m are in canonical order already. */
static int fp_in_order(const struct fp_doc *d, const struct fp_member *m, size_t n)
{
	for (size_t i = 1; i < n; i++) {
		if (fp_member_cmp(&m[i - 1], &m[i], (void *)d) > 0)
			return 0;
	}
	return 1;
}

/*
 * Sorts an out-of-order object's n members m (m[n - 1] ends before its
 * '}') in the text itself: the text of the members in their new order
 * takes the place of the old, which has the same length.
 */
static enum fp_status fp_sort_in_place(struct fp_doc *d, struct fp_member *m, size_t n,
				       uint32_t open)
{
	uint32_t len = m[n - 1].end - open - 1;

	qsort_r(m, n, sizeof(*m), fp_member_cmp, d);
	d->scratch.len = 0;
	for (size_t i = 0; i < n; i++) {
		if ((i > 0 && fp_buf_putc(&d->scratch, ',')) ||
		    fp_buf_append(&d->scratch, d->text.data + m[i].start, m[i].end - m[i].start))
			return FP_NOMEM;
	}
	memcpy(d->text.data + open + 1, d->scratch.data, len);
	d->copied += len;
	return FP_OK;
}

/* Keeps an out-of-order object's n members m, sorted, for the writer. */
static enum fp_status fp_keep(struct fp_doc *d, const struct fp_frame *f, struct fp_member *m,
			      size_t n)
{
	qsort_r(m, n, sizeof(*m), fp_member_cmp, d);
	while (d->cap_members - d->nmembers < n)
		if (fp_grow((void **)&d->members, &d->cap_members, d->cap_members,
			    sizeof(*d->members)))
			return FP_NOMEM;
	memcpy(d->members + d->nmembers, m, n * sizeof(*m));
	d->objects[f->slot] = (struct fp_object){f->open, (uint32_t)(d->text.len - 1),
						 (uint32_t)d->nmembers, (uint32_t)n};
	d->nmembers += n;
	return FP_OK;
}

/*
 * Closes an object. Out of order, it is sorted in the text when it is
 * small, holds no object kept for the writer and the copying so far stays
 * within FP_COPY_BUDGET times the body; else its members are kept for the
 * writer. Sorted in the text or in order, its slot is given back (or left
 * empty when objects inside it kept theirs).
 */
static int fp_on_end_map(void *ctx)
{
	struct fp_doc *d = ctx;
	struct fp_frame *f = &d->frames[d->depth - 1];
	size_t n = d->nstack - f->base, len = d->text.len - f->open - 1;
	struct fp_member *m = n > 0 ? d->stack + f->base : NULL;
	int in_text = f->slot == d->nobjects - 1;

	if (!fp_room(d))
		return 0;
	if (n > 0)
		m[n - 1].end = (uint32_t)d->text.len;
	if (fp_buf_putc(&d->text, '}'))
		return fp_fail(d, FP_NOMEM);
	if (!fp_in_order(d, m, n)) {
		if (in_text && len <= FP_SORT_IN_PLACE_MAX && d->copied + len <= d->budget) {
			if (fp_sort_in_place(d, m, n, f->open))
				return fp_fail(d, FP_NOMEM);
		} else {
			if (fp_keep(d, f, m, n))
				return fp_fail(d, FP_NOMEM);
			in_text = 0;
		}
	}
	if (in_text)
		d->nobjects--;
	d->nstack = f->base;
	d->depth--;
	return 1;
}

static int fp_on_end_array(void *ctx)
{
	struct fp_doc *d = ctx;

	d->depth--;
	return fp_buf_putc(&d->text, ']') ? fp_fail(d, FP_NOMEM) : 1;
}

static const yajl_callbacks fp_callbacks = {
    .yajl_null = fp_on_null,
    .yajl_boolean = fp_on_boolean,
    .yajl_number = fp_on_number,
    .yajl_string = fp_on_string,
    .yajl_start_map = fp_on_start_map,
    .yajl_map_key = fp_on_map_key,
    .yajl_end_map = fp_on_end_map,
    .yajl_start_array = fp_on_start_array,
    .yajl_end_array = fp_on_end_array,
};

/*
 * Parses body into d. yajl's defaults are what we want: strings must be
 * valid UTF-8, no comments, no trailing data, exactly one value. The
 * canonical text is rarely longer than the body, so it gets that much at
 * once. Returns FP_OK, FP_INVALID or FP_NOMEM.
 */
static enum fp_status fp_parse_json(const unsigned char *body, size_t len, struct fp_doc *d)
{
	yajl_handle h;
	enum fp_status st = FP_OK;

	if (fp_check_surrogates(body, len) < 0)
		return FP_INVALID;
	if (fp_buf_reserve(&d->text, len))
		return FP_NOMEM;
	d->budget = len * FP_COPY_BUDGET;
	d->status = FP_INVALID;
	h = yajl_alloc(&fp_callbacks, NULL, d);
	if (!h)
		return FP_NOMEM;
	if (yajl_parse(h, body, len) != yajl_status_ok || yajl_complete_parse(h) != yajl_status_ok)
		st = d->status;
	yajl_free(h);
	return st;
}

/* ---- writing it out ---- */

/*
 * The first of objects [i, nobjects) that opens at or after off (they are
 * in offset order). The search gallops from i: the object wanted is most
 * often the first or one of the next few.
 */
static size_t fp_object_from(const struct fp_doc *d, size_t i, uint32_t off)
{
	size_t hi = i, step = 1, mid;

	while (hi < d->nobjects && d->objects[hi].open < off) {
		i = hi + 1;
		hi += step;
		step *= 2;
	}
	if (hi > d->nobjects)
		hi = d->nobjects;
	while (i < hi) {
		mid = i + (hi - i) / 2;
		if (d->objects[mid].open < off)
			i = mid + 1;
		else
			hi = mid;
	}
	return i;
}

static enum fp_status fp_write_region(const struct fp_doc *d, const struct fp_sink *out,
				      size_t from, uint32_t start, uint32_t end);

/* Writes objects[index], its members sorted. Recursion is bounded by FP_MAX_DEPTH. */
static enum fp_status fp_write_object(const struct fp_doc *d, const struct fp_sink *out,
				      size_t index)
{
	const struct fp_object *o = &d->objects[index];
	const struct fp_member *m = d->members + o->member;
	enum fp_status st = out->put(out->ctx, "{", 1);

	for (uint32_t i = 0; st == FP_OK && i < o->nmembers; i++) {
		if (i > 0)
			st = out->put(out->ctx, ",", 1);
		if (st == FP_OK)
			st = fp_write_region(d, out, index + 1, m[i].start, m[i].end);
	}
	return st == FP_OK ? out->put(out->ctx, "}", 1) : st;
}

/*
 * Writes the canonical form of the text at [start, end): as it stands, but
 * for out-of-order objects, which are among objects[from ...].
 */
static enum fp_status fp_write_region(const struct fp_doc *d, const struct fp_sink *out,
				      size_t from, uint32_t start, uint32_t end)
{
	size_t i = fp_object_from(d, from, start);
	const struct fp_object *o;

	while (i < d->nobjects && d->objects[i].open < end) {
		o = &d->objects[i];
		if (o->nmembers == 0) {
			i++;
			continue;
		}
		if (out->put(out->ctx, d->text.data + start, o->open - start) ||
		    fp_write_object(d, out, i))
			return FP_NOMEM;
		start = o->close + 1;
		i = fp_object_from(d, i + 1, start);
	}
	return out->put(out->ctx, d->text.data + start, end - start);
}

/* Writes the whole document. */
static enum fp_status fp_write(const struct fp_doc *d, const struct fp_sink *out)
{
	return fp_write_region(d, out, 0, 0, (uint32_t)d->text.len);
}

/* ---- selected fields ---- */

/* What trim strips: Unicode White_Space as ECMAScript's String.prototype.trim sees it, in UTF-8. */
static const char *const fp_spaces[] = {
    " ",
    "\t",
    "\n",
    "\v",
    "\f",
    "\r",
    "\xc2\xa0",
    "\xe1\x9a\x80",
    "\xe2\x80\x80",
    "\xe2\x80\x81",
    "\xe2\x80\x82",
    "\xe2\x80\x83",
    "\xe2\x80\x84",
    "\xe2\x80\x85",
    "\xe2\x80\x86",
    "\xe2\x80\x87",
    "\xe2\x80\x88",
    "\xe2\x80\x89",
    "\xe2\x80\x8a",
    "\xe2\x80\xa8",
    "\xe2\x80\xa9",
    "\xe2\x80\xaf",
    "\xe2\x81\x9f",
    "\xe3\x80\x80",
    "\xef\xbb\xbf",
};

/*
 * Length of the white space character that s[0..len) starts with (at_end
 * 0) or ends with (at_end 1), or 0 when there is none.
 */
static size_t fp_space_len(const char *s, size_t len, int at_end)
{
	size_t i, n;

	for (i = 0; i < sizeof(fp_spaces) / sizeof(fp_spaces[0]); i++) {
		n = strlen(fp_spaces[i]);
		if (n <= len && memcmp(at_end ? s + len - n : s, fp_spaces[i], n) == 0)
			return n;
	}
	return 0;
}

/* Narrows the string at *text, *len without leading and trailing white space. */
static void fp_trim(const char **text, size_t *len)
{
	size_t n;

	while ((n = fp_space_len(*text, *len, 0)) > 0) {
		*text += n;
		*len -= n;
	}
	while ((n = fp_space_len(*text, *len, 1)) > 0)
		*len -= n;
}

/* Past the canonical string whose opening quote is at t[i]. */
static size_t fp_skip_string(const unsigned char *t, size_t i)
{
	for (i++; t[i] != '"'; i++) {
		if (t[i] == '\\')
			i++;
	}
	return i + 1;
}

/* Past the canonical value that begins at t[i] (len bytes of text in all). */
static size_t fp_skip_value(const unsigned char *t, size_t len, size_t i)
{
	size_t depth = 0;

	do {
		if (t[i] == '"') {
			i = fp_skip_string(t, i);
		} else if (t[i] == '{' || t[i] == '[') {
			depth++;
			i++;
		} else if (t[i] == '}' || t[i] == ']') {
			depth--;
			i++;
		} else if (depth > 0) {
			i++; /* ',' or ':' or a scalar's byte inside a container */
		} else {
			while (i < len && t[i] != ',' && t[i] != '}' && t[i] != ']')
				i++;
		}
	} while (depth > 0);
	return i;
}

/* 1 when the canonical key at p (just past its opening quote) is the n bytes at name. */
static int fp_key_is(const unsigned char *p, const char *name, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		if (*p == '"' || fp_unescape_byte(&p) != (unsigned char)name[i])
			return 0;
	}
	return *p == '"';
}

/*
 * The value of the member keyed by the n bytes at name in the object
 * whose '{' is at open, the last of its duplicates (as most JSON parsers
 * take them): [*start, *end) of the text. Returns 0, or -1 when absent.
 */
static int fp_find(const struct fp_doc *d, size_t open, const char *name, size_t n, size_t *start,
		   size_t *end)
{
	const unsigned char *t = d->text.data;
	size_t i = open + 1, key_end, value_end;
	int rc = -1;

	while (t[i] != '}') {
		key_end = fp_skip_string(t, i);
		value_end = fp_skip_value(t, d->text.len, key_end + 1);
		if (fp_key_is(t + i + 1, name, n)) {
			*start = key_end + 1;
			*end = value_end;
			rc = 0;
		}
		i = t[value_end] == ',' ? value_end + 1 : value_end;
	}
	return rc;
}

/*
 * The value at a dot path below the root object, [*start, *end) of the
 * text. Returns 0, or -1 when a step is missing or passes through
 * something other than an object.
 */
static int fp_resolve(const struct fp_doc *d, const char *path, size_t *start, size_t *end)
{
	const char *seg = path, *dot;
	size_t open = 0;

	for (;;) {
		dot = strchr(seg, '.');
		if (fp_find(d, open, seg, dot ? (size_t)(dot - seg) : strlen(seg), start, end) < 0)
			return -1;
		if (!dot)
			return 0;
		if (d->text.data[*start] != '{')
			return -1;
		open = *start;
		seg = dot + 1;
	}
}

/*
 * Appends to out the canonical text v (n bytes) with transform t applied.
 * A transform that does not apply to v's type leaves it as it is:
 *   trim    strings: white space stripped at both ends
 *   lower   strings: ASCII letters lower-cased
 *   int     strings holding a JSON number with an integral value become that
 *           number (numbers are canonical already, so they stay as they are)
 *   number  strings holding a JSON number become that number
 *   string  numbers become their canonical text, literals "true"/"false"/"null"
 */
static enum fp_status fp_transform(struct fp_buf *out, const unsigned char *v, size_t n,
				   enum fp_transform t)
{
	struct fp_buf raw = {NULL, 0, 0};
	struct fp_number num;
	const char *s;
	size_t len, i;
	enum fp_status st = FP_NOMEM;
	int string = n >= 2 && v[0] == '"';

	if (t == FPT_NONE || (!string && t != FPT_STRING))
		return fp_buf_append(out, v, n);
	if (t == FPT_STRING) {
		if (string || v[0] == '[' || v[0] == '{')
			return fp_buf_append(out, v, n);
		/* A number or a literal: its canonical text needs no escape. */
		if (fp_buf_putc(out, '"') || fp_buf_append(out, v, n) || fp_buf_putc(out, '"'))
			return FP_NOMEM;
		return FP_OK;
	}
	if (fp_unescape(&raw, v + 1, n - 2) || fp_buf_putc(&raw, '\0'))
		goto out;
	s = (const char *)raw.data;
	len = raw.len - 1;
	switch (t) {
	case FPT_TRIM:
		fp_trim(&s, &len);
		st = fp_emit_string(out, s, len);
		break;
	case FPT_LOWER:
		for (i = 0; i < len; i++) {
			if (raw.data[i] >= 'A' && raw.data[i] <= 'Z')
				raw.data[i] = (unsigned char)(raw.data[i] - 'A' + 'a');
		}
		st = fp_emit_string(out, s, len);
		break;
	default: /* FPT_INT, FPT_NUMBER */
		if (fp_number_parse(s, len, &num) < 0 ||
		    (t == FPT_INT && !fp_number_is_integral(&num)))
			st = fp_buf_append(out, v, n);
		else
			st = fp_number_format(out, &num);
		break;
	}
out:
	fp_buf_free(&raw);
	return st;
}

/*
 * Appends to out an object keyed by field path holding each present
 * field's transformed value. The root must be an object (FP_INVALID
 * otherwise, so the caller falls back to raw bytes).
 */
static enum fp_status fp_select(const struct fp_doc *d, const struct fp_field *fields, int nfields,
				struct fp_buf *out)
{
	struct fp_buf value = {NULL, 0, 0};
	struct fp_sink sink = {fp_buf_put, &value};
	const struct fp_field **order;
	size_t start, end;
	enum fp_status st = FP_NOMEM;
	int i, j, first = 1;

	if (d->text.len == 0 || d->text.data[0] != '{')
		return FP_INVALID;
	order = malloc((size_t)nfields * sizeof(*order));
	if (!order)
		return FP_NOMEM;
	/* The paths in byte order (they are distinct), by insertion. */
	for (i = 0; i < nfields; i++) {
		for (j = i; j > 0 && strcmp(order[j - 1]->path, fields[i].path) > 0; j--)
			order[j] = order[j - 1];
		order[j] = &fields[i];
	}
	if (fp_buf_putc(out, '{'))
		goto out;
	for (i = 0; i < nfields; i++) {
		if (fp_resolve(d, order[i]->path, &start, &end) < 0)
			continue;
		value.len = 0;
		if (fp_write_region(d, &sink, 0, (uint32_t)start, (uint32_t)end) ||
		    (!first && fp_buf_putc(out, ',')) ||
		    fp_emit_string(out, order[i]->path, strlen(order[i]->path)) ||
		    fp_buf_putc(out, ':') ||
		    fp_transform(out, value.data, value.len, order[i]->transform))
			goto out;
		first = 0;
	}
	st = fp_buf_putc(out, '}');
out:
	fp_buf_free(&value);
	free(order);
	return st;
}

/*
 * Parses body into d and, with fields, writes the selected object into sel.
 * Returns FP_OK, FP_INVALID or FP_NOMEM.
 */
static enum fp_status fp_canonical(const unsigned char *body, size_t len,
				   const struct fp_field *fields, int nfields, struct fp_doc *d,
				   struct fp_buf *sel)
{
	enum fp_status st = fp_parse_json(body, len, d);

	if (st == FP_OK && nfields > 0)
		st = fp_select(d, fields, nfields, sel);
	return st;
}

int fingerprint_canonical_json(const unsigned char *body, size_t len, const struct fp_field *fields,
			       int nfields, struct fp_buf *out)
{
	struct fp_doc d;
	struct fp_sink sink = {fp_buf_put, out};
	size_t mark = out->len;
	enum fp_status st;

	memset(&d, 0, sizeof(d));
	st = fp_canonical(body, len, fields, nfields, &d, out);
	if (st == FP_OK && nfields == 0)
		st = fp_write(&d, &sink);
	if (st != FP_OK)
		out->len = mark;
	fp_doc_free(&d);
	return st == FP_OK ? 0 : -1;
}

/* Feeds the 8-byte big-endian length that precedes every part. Returns 0 or -1. */
static int fp_digest_len(EVP_MD_CTX *md, size_t len)
{
	unsigned char prefix[FP_LEN_PREFIX];
	uint64_t n = len;
	int i;

	for (i = FP_LEN_PREFIX - 1; i >= 0; i--) {
		prefix[i] = (unsigned char)(n & 0xff);
		n >>= 8;
	}
	return EVP_DigestUpdate(md, prefix, sizeof(prefix)) == 1 ? 0 : -1;
}

/* Feeds one length-prefixed part. Returns 0 or -1. */
static int fp_digest_part(EVP_MD_CTX *md, const void *data, size_t len)
{
	if (fp_digest_len(md, len) < 0)
		return -1;
	return len == 0 || EVP_DigestUpdate(md, data, len) == 1 ? 0 : -1;
}

struct fp_param {
	const char *s;
	size_t len;
};

static int fp_param_cmp(const void *a, const void *b)
{
	const struct fp_param *x = a, *y = b;
	size_t n = x->len < y->len ? x->len : y->len;
	int c = memcmp(x->s, y->s, n);

	if (c)
		return c;
	return x->len < y->len ? -1 : x->len > y->len;
}

/*
 * Feeds the query as one part: its non-empty '&'-separated parameters
 * sorted by their bytes and joined by '&'. Parameters that compare equal
 * are identical, so the sort need not be stable. Returns 0 or -1.
 */
static int fp_digest_query(EVP_MD_CTX *md, const char *query, size_t len)
{
	struct fp_param *params = NULL;
	size_t n = 0, i, start, total = 0;
	int rc = -1;

	params = malloc((len / 2 + 1) * sizeof(*params));
	if (!params)
		goto out;
	for (start = 0, i = 0; i <= len; i++) {
		if (i < len && query[i] != '&')
			continue;
		if (i > start) {
			params[n].s = query + start;
			params[n].len = i - start;
			total += params[n].len + (n > 0);
			n++;
		}
		start = i + 1;
	}
	qsort(params, n, sizeof(*params), fp_param_cmp);

	if (fp_digest_len(md, total) < 0)
		goto out;
	for (i = 0; i < n; i++) {
		if (i > 0 && EVP_DigestUpdate(md, "&", 1) != 1)
			goto out;
		if (EVP_DigestUpdate(md, params[i].s, params[i].len) != 1)
			goto out;
	}
	rc = 0;
out:
	free(params);
	return rc;
}

/*
 * The digest as a sink. Out-of-order objects come out in small writes, so
 * they are gathered into FP_DIGEST_STAGE bytes before each update.
 */
struct fp_digest {
	EVP_MD_CTX *md;
	size_t len;
	unsigned char stage[FP_DIGEST_STAGE];
};

static enum fp_status fp_digest_flush(struct fp_digest *g)
{
	int ok = g->len == 0 || EVP_DigestUpdate(g->md, g->stage, g->len) == 1;

	g->len = 0;
	return ok ? FP_OK : FP_NOMEM;
}

static enum fp_status fp_digest_put(void *ctx, const void *data, size_t n)
{
	struct fp_digest *g = ctx;

	if (g->len + n > sizeof(g->stage) && fp_digest_flush(g))
		return FP_NOMEM;
	if (n > sizeof(g->stage))
		return EVP_DigestUpdate(g->md, data, n) == 1 ? FP_OK : FP_NOMEM;
	memcpy(g->stage + g->len, data, n);
	g->len += n;
	return FP_OK;
}

/*
 * See fingerprint.h. The digest input is: method, path and sorted query as
 * length-prefixed parts, one byte saying how the body was taken ('J'
 * canonical JSON, 'R' raw bytes, 'N' left out) and the body as a last part.
 * FP_UNSET counts as FP_JSON, the documented default. The whole body's
 * canonical text goes into the digest as it is written, never assembled.
 */
int fingerprint_request(const char *method, const char *path, size_t path_len, const char *query,
			size_t query_len, const unsigned char *body, size_t body_len,
			enum fp_mode mode, const struct fp_field *fields, int nfields,
			unsigned char out[FINGERPRINT_LEN])
{
	struct fp_buf sel = {NULL, 0, 0};
	struct fp_doc d;
	struct fp_digest g;
	struct fp_sink sink = {fp_digest_put, &g};
	EVP_MD_CTX *md = NULL;
	char tag = FP_TAG_RAW;
	enum fp_status st = FP_INVALID;
	int rc = -1;

	memset(&d, 0, sizeof(d));
	if (mode == FP_NONE) {
		tag = FP_TAG_NONE;
	} else if (mode != FP_BODY) {
		st = fp_canonical(body, body_len, fields, nfields, &d, &sel);
		if (st == FP_NOMEM)
			goto out;
		if (st == FP_OK)
			tag = FP_TAG_JSON;
	}

	md = digest_thread_ctx();
	if (!md)
		goto out;
	g.md = md;
	g.len = 0;
	if (EVP_DigestInit_ex(md, digest_sha256(), NULL) != 1 ||
	    fp_digest_part(md, method, strlen(method)) < 0 ||
	    fp_digest_part(md, path, path_len) < 0 ||
	    fp_digest_query(md, query ? query : "", query ? query_len : 0) < 0 ||
	    EVP_DigestUpdate(md, &tag, 1) != 1)
		goto out;
	if (tag == FP_TAG_NONE)
		st = fp_digest_part(md, "", 0) < 0 ? FP_NOMEM : FP_OK;
	else if (tag == FP_TAG_RAW)
		st = fp_digest_part(md, body, body_len) < 0 ? FP_NOMEM : FP_OK;
	else if (nfields > 0)
		st = fp_digest_part(md, sel.data, sel.len) < 0 ? FP_NOMEM : FP_OK;
	else
		st = fp_digest_len(md, d.text.len) || fp_write(&d, &sink) ? FP_NOMEM
									  : fp_digest_flush(&g);
	if (st != FP_OK || EVP_DigestFinal_ex(md, out, NULL) != 1)
		goto out;
	rc = 0;
out:
	fp_buf_free(&sel);
	fp_doc_free(&d);
	return rc;
}

int fingerprint_with_headers(unsigned char fp[FINGERPRINT_LEN], const struct fp_header *h, int n)
{
	static const char tag = FP_TAG_HEADERS;
	EVP_MD_CTX *md = digest_thread_ctx();
	int rc = -1;
	uint32_t which;

	if (!md)
		return -1;
	if (EVP_DigestInit_ex(md, digest_sha256(), NULL) != 1 || EVP_DigestUpdate(md, &tag, 1) != 1 ||
	    EVP_DigestUpdate(md, fp, FINGERPRINT_LEN) != 1)
		goto out;
	for (int i = 0; i < n; i++) {
		which = (uint32_t)h[i].which;
		if (EVP_DigestUpdate(md, &which, sizeof(which)) != 1 ||
		    fp_digest_part(md, h[i].value, h[i].len) < 0)
			goto out;
	}
	rc = EVP_DigestFinal_ex(md, fp, NULL) == 1 ? 0 : -1;
out:
	return rc;
}

int fingerprint_of_request(const struct route *r, const struct http_msg *m,
			   const unsigned char *body, size_t body_len,
			   unsigned char out[FINGERPRINT_LEN])
{
	struct fp_header h[HTTP_MAX_HEADERS];
	unsigned char *without = NULL;
	size_t without_len = 0;
	int n = 0, rc;

	/* A JSON-RPC call's id is left out: a retry with a new id is the same call. */
	if (r->operation_from == OPFROM_JSONRPC && body &&
	    jsonrpc_without_id(body, body_len, &without, &without_len) < 0)
		return -1;
	rc = fingerprint_request(m->method, m->path, m->path_len, m->query, m->query_len,
				 without ? without : body, without ? without_len : body_len,
				 r->fingerprint, r->fields, r->nfields, out);
	free(without);
	if (rc < 0)
		return -1;
	if (!r->nfp_headers)
		return 0;
	for (int w = 0; w < r->nfp_headers; w++) {
		for (int i = 0; i < m->nheaders && n < HTTP_MAX_HEADERS; i++) {
			if (strcasecmp(m->headers[i].name, r->fp_headers[w]) == 0)
				h[n++] = (struct fp_header){w, m->headers[i].value,
							    strlen(m->headers[i].value)};
		}
	}
	return fingerprint_with_headers(out, h, n);
}
