/*
 * Request fingerprints.
 *
 * The JSON body is parsed with yajl's callback parser into a small tree that
 * lives in one arena, then written back in a canonical form:
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
 * Selected fields (fingerprint json a.b:int ...) are resolved after parsing;
 * a path step through a non-object or a missing key makes the field absent,
 * and absent fields are left out of the canonical object, so "absent" and
 * "not selected" read the same. A key containing '.' cannot be selected.
 *
 * The query string is sorted as raw bytes, without percent-decoding:
 * "a=%41" and "a=A" are different queries.
 */
#include "proxy/fingerprint.h"

#include <stdalign.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>
#include <yajl/yajl_parse.h>

#define FP_MAX_DEPTH	    256	  /* deeper nesting is treated as invalid JSON */
#define FP_MAX_EXP_DIGITS   15	  /* longer exponents are treated as invalid JSON */
#define FP_ARENA_CHUNK	    16384 /* bytes per arena chunk unless one object is larger */
#define FP_BUF_MIN	    256	  /* first allocation of an fp_buf */
#define FP_NUMBER_PLAIN_MAX 21	  /* Number::toString: plain digits up to 10^21 */
#define FP_NUMBER_SMALL_MIN (-6)  /* Number::toString: 0.000001 is still plain */
#define FP_NUMBER_EXTRA	    32	  /* room for sign, point, zeros and exponent */
#define FP_LEN_PREFIX	    8	  /* bytes of the big-endian length before each part */
#define FP_ESCAPE_U_LEN	    6	  /* \uXXXX */

#define FP_TAG_JSON 'J'
#define FP_TAG_RAW  'R'
#define FP_TAG_NONE 'N'

/* Outcomes of the internal steps; the public functions map them to 0/-1. */
enum fp_status {
	FP_OK = 0,
	FP_INVALID, /* not JSON we can canonicalise */
	FP_NOMEM,
};

enum fp_type {
	FP_T_NULL,
	FP_T_FALSE,
	FP_T_TRUE,
	FP_T_NUMBER,
	FP_T_STRING,
	FP_T_ARRAY,
	FP_T_OBJECT,
};

/*
 * One JSON value. Strings hold their unescaped bytes, numbers their
 * canonical text. Children are a list in document order; pos is a child's
 * index in it, the tie-break that makes the key sort stable.
 */
struct fp_node {
	enum fp_type type;
	const char *key; /* member name when the parent is an object */
	size_t key_len;
	const char *text;
	size_t len;
	struct fp_node *first, *last, *next;
	size_t nkids, pos;
};

struct fp_chunk {
	struct fp_chunk *next;
	size_t used, cap;
	alignas(max_align_t) unsigned char data[];
};

/* Everything one canonicalisation allocates; freed at once. */
struct fp_arena {
	struct fp_chunk *head;
};

struct fp_parse {
	struct fp_arena *arena;
	struct fp_node *stack[FP_MAX_DEPTH];
	int depth;
	struct fp_node *root;
	const char *key; /* pending member name */
	size_t key_len;
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

/* Frees the buffer's memory and leaves it empty and reusable. */
void fp_buf_free(struct fp_buf *b)
{
	free(b->data);
	b->data = NULL;
	b->len = 0;
	b->cap = 0;
}

/* Appends n bytes to b, growing it. Returns FP_OK or FP_NOMEM. */
static enum fp_status fp_buf_append(struct fp_buf *b, const void *data, size_t n)
{
	unsigned char *p;
	size_t cap;

	if (n > SIZE_MAX - b->len)
		return FP_NOMEM;
	if (b->len + n > b->cap) {
		cap = b->cap ? b->cap : FP_BUF_MIN;
		while (cap < b->len + n)
			cap = cap > SIZE_MAX / 2 ? b->len + n : cap * 2;
		p = realloc(b->data, cap);
		if (!p)
			return FP_NOMEM;
		b->data = p;
		b->cap = cap;
	}
	if (n > 0)
		memcpy(b->data + b->len, data, n);
	b->len += n;
	return FP_OK;
}

static enum fp_status fp_buf_putc(struct fp_buf *b, char c)
{
	return fp_buf_append(b, &c, 1);
}

static enum fp_status fp_buf_puts(struct fp_buf *b, const char *s)
{
	return fp_buf_append(b, s, strlen(s));
}

/* n bytes from the arena, aligned for any type, or NULL. */
static void *fp_arena_alloc(struct fp_arena *a, size_t n)
{
	const size_t align = alignof(max_align_t);
	struct fp_chunk *c = a->head;
	size_t cap;
	void *p;

	n = (n + align - 1) & ~(align - 1);
	if (!c || c->cap - c->used < n) {
		cap = n > FP_ARENA_CHUNK ? n : FP_ARENA_CHUNK;
		c = malloc(sizeof(*c) + cap);
		if (!c)
			return NULL;
		c->next = a->head;
		c->used = 0;
		c->cap = cap;
		a->head = c;
	}
	p = c->data + c->used;
	c->used += n;
	return p;
}

static void fp_arena_free(struct fp_arena *a)
{
	struct fp_chunk *c, *next;

	for (c = a->head; c; c = next) {
		next = c->next;
		free(c);
	}
	a->head = NULL;
}

/* A copy of n bytes in the arena, or NULL. */
static char *fp_arena_dup(struct fp_arena *a, const void *s, size_t n)
{
	char *p = fp_arena_alloc(a, n ? n : 1);

	if (p && n > 0)
		memcpy(p, s, n);
	return p;
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
 * Returns 0, or -1 when s is not a JSON number or its exponent has more than
 * FP_MAX_EXP_DIGITS significant digits.
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
	return 0;
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
 * Writes the canonical text of n into the arena: Number::toString's layout
 * of the exact value (plain digits, a plain fraction, or d.ddde+N), and "0"
 * for any zero. Returns the NUL-terminated text and its length, or NULL.
 */
static char *fp_number_format(struct fp_arena *a, const struct fp_number *n, size_t *len)
{
	size_t k = n->end - n->first, i;
	int64_t point = n->point, z;
	char *out, *p;

	out = fp_arena_alloc(a, k + FP_NUMBER_EXTRA);
	if (!out)
		return NULL;
	p = out;
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
			p += snprintf(p, (size_t)(out + k + FP_NUMBER_EXTRA - p), "e%c%lld",
				      point - 1 < 0 ? '-' : '+',
				      (long long)(point - 1 < 0 ? 1 - point : point - 1));
		}
	}
	*p = '\0';
	*len = (size_t)(p - out);
	return out;
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

/*
 * A new node of the given type, attached to the open container (taking the
 * pending member name inside an object) or made the root. Returns NULL and
 * records FP_NOMEM when out of memory.
 */
static struct fp_node *fp_parse_add(struct fp_parse *ps, enum fp_type type)
{
	struct fp_node *node, *parent;

	node = fp_arena_alloc(ps->arena, sizeof(*node));
	if (!node) {
		ps->status = FP_NOMEM;
		return NULL;
	}
	memset(node, 0, sizeof(*node));
	node->type = type;
	if (ps->depth == 0) {
		ps->root = node;
		return node;
	}
	parent = ps->stack[ps->depth - 1];
	if (parent->type == FP_T_OBJECT) {
		node->key = ps->key;
		node->key_len = ps->key_len;
	}
	node->pos = parent->nkids++;
	if (parent->last)
		parent->last->next = node;
	else
		parent->first = node;
	parent->last = node;
	return node;
}

static int fp_on_null(void *ctx)
{
	return fp_parse_add(ctx, FP_T_NULL) != NULL;
}

static int fp_on_boolean(void *ctx, int value)
{
	return fp_parse_add(ctx, value ? FP_T_TRUE : FP_T_FALSE) != NULL;
}

static int fp_on_number(void *ctx, const char *s, size_t len)
{
	struct fp_parse *ps = ctx;
	struct fp_number num;
	struct fp_node *node;

	if (fp_number_parse(s, len, &num) < 0) {
		ps->status = FP_INVALID;
		return 0;
	}
	node = fp_parse_add(ps, FP_T_NUMBER);
	if (!node)
		return 0;
	node->text = fp_number_format(ps->arena, &num, &node->len);
	if (!node->text) {
		ps->status = FP_NOMEM;
		return 0;
	}
	return 1;
}

static int fp_on_string(void *ctx, const unsigned char *s, size_t len)
{
	struct fp_parse *ps = ctx;
	struct fp_node *node;

	node = fp_parse_add(ps, FP_T_STRING);
	if (!node)
		return 0;
	node->text = fp_arena_dup(ps->arena, s, len);
	node->len = len;
	if (!node->text) {
		ps->status = FP_NOMEM;
		return 0;
	}
	return 1;
}

static int fp_on_map_key(void *ctx, const unsigned char *s, size_t len)
{
	struct fp_parse *ps = ctx;

	ps->key = fp_arena_dup(ps->arena, s, len);
	ps->key_len = len;
	if (!ps->key) {
		ps->status = FP_NOMEM;
		return 0;
	}
	return 1;
}

/* Opens an object or array; FP_MAX_DEPTH bounds the serialiser's recursion. */
static int fp_parse_open(struct fp_parse *ps, enum fp_type type)
{
	struct fp_node *node;

	if (ps->depth == FP_MAX_DEPTH) {
		ps->status = FP_INVALID;
		return 0;
	}
	node = fp_parse_add(ps, type);
	if (!node)
		return 0;
	ps->stack[ps->depth++] = node;
	return 1;
}

static int fp_on_start_map(void *ctx)
{
	return fp_parse_open(ctx, FP_T_OBJECT);
}

static int fp_on_start_array(void *ctx)
{
	return fp_parse_open(ctx, FP_T_ARRAY);
}

static int fp_on_end(void *ctx)
{
	struct fp_parse *ps = ctx;

	ps->depth--;
	return 1;
}

static const yajl_callbacks fp_callbacks = {
    .yajl_null = fp_on_null,
    .yajl_boolean = fp_on_boolean,
    .yajl_number = fp_on_number,
    .yajl_string = fp_on_string,
    .yajl_start_map = fp_on_start_map,
    .yajl_map_key = fp_on_map_key,
    .yajl_end_map = fp_on_end,
    .yajl_start_array = fp_on_start_array,
    .yajl_end_array = fp_on_end,
};

/*
 * Parses body into a tree allocated from arena and stores its root in
 * *root. yajl's defaults are what we want: strings must be valid UTF-8, no
 * comments, no trailing data, exactly one value. Returns FP_OK, FP_INVALID
 * or FP_NOMEM.
 */
static enum fp_status fp_parse_json(const unsigned char *body, size_t len, struct fp_arena *arena,
				    struct fp_node **root)
{
	struct fp_parse ps = {.arena = arena, .status = FP_INVALID};
	yajl_handle h;
	enum fp_status st = FP_OK;

	if (fp_check_surrogates(body, len) < 0)
		return FP_INVALID;
	h = yajl_alloc(&fp_callbacks, NULL, &ps);
	if (!h)
		return FP_NOMEM;
	if (yajl_parse(h, body, len) != yajl_status_ok || yajl_complete_parse(h) != yajl_status_ok)
		st = ps.status;
	else
		*root = ps.root;
	yajl_free(h);
	return st;
}

/* The text of a null, false or true node. */
static const char *fp_literal(enum fp_type type)
{
	return type == FP_T_NULL ? "null" : type == FP_T_TRUE ? "true" : "false";
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

/* qsort order of object members: key bytes, a shorter prefix first, then position. */
static int fp_member_cmp(const void *a, const void *b)
{
	const struct fp_node *x = *(const struct fp_node *const *)a;
	const struct fp_node *y = *(const struct fp_node *const *)b;
	size_t n = x->key_len < y->key_len ? x->key_len : y->key_len;
	int c = n ? memcmp(x->key, y->key, n) : 0;

	if (c)
		return c;
	if (x->key_len != y->key_len)
		return x->key_len < y->key_len ? -1 : 1;
	return x->pos < y->pos ? -1 : x->pos > y->pos;
}

static enum fp_status fp_emit(struct fp_buf *out, const struct fp_node *node);

/* Appends an object with its members sorted by key. */
static enum fp_status fp_emit_object(struct fp_buf *out, const struct fp_node *node)
{
	const struct fp_node **members;
	const struct fp_node *m;
	enum fp_status st = FP_NOMEM;
	size_t i = 0;

	members = malloc((node->nkids ? node->nkids : 1) * sizeof(*members));
	if (!members)
		goto out;
	for (m = node->first; m; m = m->next)
		members[i++] = m;
	qsort(members, node->nkids, sizeof(*members), fp_member_cmp);

	if (fp_buf_putc(out, '{'))
		goto out;
	for (i = 0; i < node->nkids; i++) {
		if (i > 0 && fp_buf_putc(out, ','))
			goto out;
		st = fp_emit_string(out, members[i]->key, members[i]->key_len);
		if (st == FP_OK)
			st = fp_buf_putc(out, ':');
		if (st == FP_OK)
			st = fp_emit(out, members[i]);
		if (st != FP_OK)
			goto out;
	}
	st = fp_buf_putc(out, '}');
out:
	free(members);
	return st;
}

/* Appends node's canonical text to out. Recursion is bounded by FP_MAX_DEPTH. */
static enum fp_status fp_emit(struct fp_buf *out, const struct fp_node *node)
{
	const struct fp_node *kid;

	switch (node->type) {
	case FP_T_NULL:
	case FP_T_FALSE:
	case FP_T_TRUE:
		return fp_buf_puts(out, fp_literal(node->type));
	case FP_T_NUMBER:
		return fp_buf_append(out, node->text, node->len);
	case FP_T_STRING:
		return fp_emit_string(out, node->text, node->len);
	case FP_T_ARRAY:
		if (fp_buf_putc(out, '['))
			return FP_NOMEM;
		for (kid = node->first; kid; kid = kid->next) {
			if (kid != node->first && fp_buf_putc(out, ','))
				return FP_NOMEM;
			if (fp_emit(out, kid))
				return FP_NOMEM;
		}
		return fp_buf_putc(out, ']');
	case FP_T_OBJECT:
		return fp_emit_object(out, node);
	}
	return FP_INVALID;
}

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

/* An ASCII lower-cased copy of s in the arena, or NULL. Other bytes are kept. */
static char *fp_lower(struct fp_arena *a, const char *s, size_t len)
{
	char *p = fp_arena_dup(a, s, len);
	size_t i;

	for (i = 0; p && i < len; i++) {
		if (p[i] >= 'A' && p[i] <= 'Z')
			p[i] = (char)(p[i] - 'A' + 'a');
	}
	return p;
}

/*
 * A copy of v (in the arena, not linked to any parent) with transform t
 * applied. A transform that does not apply to v's type leaves it as it is:
 *   trim    strings: white space stripped at both ends
 *   lower   strings: ASCII letters lower-cased
 *   int     strings holding a JSON number with an integral value become that
 *           number (numbers are canonical already, so they stay as they are)
 *   number  strings holding a JSON number become that number
 *   string  numbers become their canonical text, literals "true"/"false"/"null"
 * Returns NULL when out of memory.
 */
static struct fp_node *fp_transform(struct fp_arena *a, const struct fp_node *v,
				    enum fp_transform t)
{
	struct fp_number num;
	struct fp_node *r;

	r = fp_arena_alloc(a, sizeof(*r));
	if (!r)
		return NULL;
	*r = *v;
	r->next = NULL;
	switch (t) {
	case FPT_NONE:
		break;
	case FPT_TRIM:
		if (v->type == FP_T_STRING)
			fp_trim(&r->text, &r->len);
		break;
	case FPT_LOWER:
		if (v->type == FP_T_STRING) {
			r->text = fp_lower(a, v->text, v->len);
			if (!r->text)
				return NULL;
		}
		break;
	case FPT_INT:
	case FPT_NUMBER:
		if (v->type != FP_T_STRING || fp_number_parse(v->text, v->len, &num) < 0)
			break;
		if (t == FPT_INT && !fp_number_is_integral(&num))
			break;
		r->type = FP_T_NUMBER;
		r->text = fp_number_format(a, &num, &r->len);
		if (!r->text)
			return NULL;
		break;
	case FPT_STRING:
		if (v->type == FP_T_NULL || v->type == FP_T_FALSE || v->type == FP_T_TRUE) {
			r->text = fp_literal(v->type);
			r->len = strlen(r->text);
		}
		if (v->type != FP_T_ARRAY && v->type != FP_T_OBJECT)
			r->type = FP_T_STRING;
		break;
	}
	return r;
}

/*
 * The value at a dot path below root, taking the last member of each name
 * (as most JSON parsers do with duplicates), or NULL when a step is missing
 * or passes through something other than an object.
 */
static const struct fp_node *fp_resolve(const struct fp_node *root, const char *path)
{
	const struct fp_node *cur = root, *m, *found;
	const char *seg = path, *dot;
	size_t n;

	for (;;) {
		if (cur->type != FP_T_OBJECT)
			return NULL;
		dot = strchr(seg, '.');
		n = dot ? (size_t)(dot - seg) : strlen(seg);
		found = NULL;
		for (m = cur->first; m; m = m->next) {
			if (m->key_len == n && memcmp(m->key, seg, n) == 0)
				found = m;
		}
		if (!found || !dot)
			return found;
		cur = found;
		seg = dot + 1;
	}
}

/*
 * Builds in *sel an object keyed by field path holding each present field's
 * transformed value. root must be an object (FP_INVALID otherwise, so the
 * caller falls back to raw bytes). Returns FP_OK, FP_INVALID or FP_NOMEM.
 */
static enum fp_status fp_select(struct fp_arena *a, const struct fp_node *root,
				const struct fp_field *fields, int nfields, struct fp_node **sel)
{
	const struct fp_node *v;
	struct fp_node *obj, *r;
	int i;

	if (root->type != FP_T_OBJECT)
		return FP_INVALID;
	obj = fp_arena_alloc(a, sizeof(*obj));
	if (!obj)
		return FP_NOMEM;
	memset(obj, 0, sizeof(*obj));
	obj->type = FP_T_OBJECT;
	for (i = 0; i < nfields; i++) {
		v = fp_resolve(root, fields[i].path);
		if (!v)
			continue;
		r = fp_transform(a, v, fields[i].transform);
		if (!r)
			return FP_NOMEM;
		r->key = fields[i].path;
		r->key_len = strlen(fields[i].path);
		r->pos = obj->nkids++;
		if (obj->last)
			obj->last->next = r;
		else
			obj->first = r;
		obj->last = r;
	}
	*sel = obj;
	return FP_OK;
}

/*
 * Appends the canonical form of body (or of its selected fields) to out.
 * On failure out is left as it was. Returns FP_OK, FP_INVALID or FP_NOMEM.
 */
static enum fp_status fp_canonical(const unsigned char *body, size_t len,
				   const struct fp_field *fields, int nfields, struct fp_buf *out)
{
	struct fp_arena arena = {NULL};
	struct fp_node *root = NULL;
	size_t mark = out->len;
	enum fp_status st;

	st = fp_parse_json(body, len, &arena, &root);
	if (st == FP_OK && nfields > 0)
		st = fp_select(&arena, root, fields, nfields, &root);
	if (st == FP_OK)
		st = fp_emit(out, root);
	if (st != FP_OK)
		out->len = mark;
	fp_arena_free(&arena);
	return st;
}

int fingerprint_canonical_json(const unsigned char *body, size_t len, const struct fp_field *fields,
			       int nfields, struct fp_buf *out)
{
	return fp_canonical(body, len, fields, nfields, out) == FP_OK ? 0 : -1;
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
 * See fingerprint.h. The digest input is: method, path and sorted query as
 * length-prefixed parts, one byte saying how the body was taken ('J'
 * canonical JSON, 'R' raw bytes, 'N' left out) and the body as a last part.
 * FP_UNSET counts as FP_JSON, the documented default.
 */
int fingerprint_request(const char *method, const char *path, size_t path_len, const char *query,
			size_t query_len, const unsigned char *body, size_t body_len,
			enum fp_mode mode, const struct fp_field *fields, int nfields,
			unsigned char out[FINGERPRINT_LEN])
{
	struct fp_buf canon = {NULL, 0, 0};
	EVP_MD_CTX *md = NULL;
	const unsigned char *bytes = body;
	size_t nbytes = body_len;
	char tag = FP_TAG_RAW;
	enum fp_status st;
	int rc = -1;

	if (mode == FP_NONE) {
		tag = FP_TAG_NONE;
		nbytes = 0;
	} else if (mode != FP_BODY) {
		st = fp_canonical(body, body_len, fields, nfields, &canon);
		if (st == FP_NOMEM)
			goto out;
		if (st == FP_OK) {
			tag = FP_TAG_JSON;
			bytes = canon.data;
			nbytes = canon.len;
		}
	}

	md = EVP_MD_CTX_new();
	if (!md)
		goto out;
	if (EVP_DigestInit_ex(md, EVP_sha256(), NULL) != 1 ||
	    fp_digest_part(md, method, strlen(method)) < 0 ||
	    fp_digest_part(md, path, path_len) < 0 ||
	    fp_digest_query(md, query ? query : "", query ? query_len : 0) < 0 ||
	    EVP_DigestUpdate(md, &tag, 1) != 1 || fp_digest_part(md, bytes, nbytes) < 0 ||
	    EVP_DigestFinal_ex(md, out, NULL) != 1)
		goto out;
	rc = 0;
out:
	EVP_MD_CTX_free(md);
	fp_buf_free(&canon);
	return rc;
}
