/* Which operation a GraphQL document executes (graphql.h). */
#include "http/graphql.h"

#include <string.h>

#include "http/path.h"

enum gql_tok {
	GT_END,
	GT_ERROR,
	GT_PUNCT,  /* one of ! $ & ( ) : = @ [ ] { | } in c */
	GT_SPREAD, /* ... */
	GT_NAME,
	GT_VALUE,  /* a number or a string: nothing this reader looks into */
};

struct gql_token {
	enum gql_tok t;
	char c;
	const char *p; /* GT_NAME: the name */
	size_t len;
};

struct gql_lexer {
	const char *s;
	size_t n, i;
};

static int gql_name_start(unsigned char c)
{
	return c == '_' || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z');
}

static int gql_name_char(unsigned char c)
{
	return gql_name_start(c) || (c >= '0' && c <= '9');
}

static int gql_digit(unsigned char c)
{
	return c >= '0' && c <= '9';
}

/* White space, line terminators, commas, a byte order mark and comments. */
static void gql_skip_ignored(struct gql_lexer *lx)
{
	const unsigned char *s = (const unsigned char *)lx->s;

	while (lx->i < lx->n) {
		unsigned char c = s[lx->i];

		if (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == ',') {
			lx->i++;
		} else if (c == 0xef && lx->n - lx->i >= 3 && s[lx->i + 1] == 0xbb &&
			   s[lx->i + 2] == 0xbf) {
			lx->i += 3;
		} else if (c == '#') {
			while (lx->i < lx->n && s[lx->i] != '\n' && s[lx->i] != '\r')
				lx->i++;
		} else {
			return;
		}
	}
}

/* Past a number at lx->i: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?; -1 when malformed. */
static int gql_number(struct gql_lexer *lx)
{
	const unsigned char *s = (const unsigned char *)lx->s;
	size_t i = lx->i;

	if (s[i] == '-')
		i++;
	if (i >= lx->n || !gql_digit(s[i]))
		return -1;
	if (s[i] == '0' && i + 1 < lx->n && gql_digit(s[i + 1]))
		return -1; /* no leading zero */
	while (i < lx->n && gql_digit(s[i]))
		i++;
	if (i < lx->n && s[i] == '.') {
		if (++i >= lx->n || !gql_digit(s[i]))
			return -1;
		while (i < lx->n && gql_digit(s[i]))
			i++;
	}
	if (i < lx->n && (s[i] == 'e' || s[i] == 'E')) {
		i++;
		if (i < lx->n && (s[i] == '+' || s[i] == '-'))
			i++;
		if (i >= lx->n || !gql_digit(s[i]))
			return -1;
		while (i < lx->n && gql_digit(s[i]))
			i++;
	}
	/* A number is never followed by a name's first byte or a '.'. */
	if (i < lx->n && (gql_name_start(s[i]) || s[i] == '.'))
		return -1;
	lx->i = i;
	return 0;
}

/* Past a string or a block string whose first '"' is at lx->i; -1 when malformed. */
static int gql_string(struct gql_lexer *lx)
{
	const unsigned char *s = (const unsigned char *)lx->s;
	size_t i = lx->i + 1, n = lx->n;

	if (n - lx->i >= 3 && s[i] == '"' && s[i + 1] == '"') { /* """ block string """ */
		for (i += 2; i < n; i++) {
			if (s[i] == '\\' && n - i >= 4 && s[i + 1] == '"' && s[i + 2] == '"' &&
			    s[i + 3] == '"') {
				i += 3; /* \""" */
			} else if (s[i] == '"' && n - i >= 3 && s[i + 1] == '"' && s[i + 2] == '"') {
				lx->i = i + 3;
				return 0;
			} else if (s[i] < 0x20 && s[i] != '\t' && s[i] != '\n' && s[i] != '\r') {
				return -1;
			}
		}
		return -1;
	}
	for (; i < n; i++) {
		if (s[i] == '"') {
			lx->i = i + 1;
			return 0;
		}
		if (s[i] < 0x20 && s[i] != '\t')
			return -1; /* a line terminator or a control character */
		if (s[i] != '\\')
			continue;
		if (++i >= n)
			return -1;
		if (s[i] == 'u') {
			if (i + 1 < n && s[i + 1] == '{') { /* \u{1F600} */
				size_t k = i + 2;

				while (k < n && path_hex(s[k]) >= 0 && k - i - 2 < 8)
					k++;
				if (k == i + 2 || k >= n || s[k] != '}')
					return -1;
				i = k;
				continue;
			}
			if (n - i < 5 || path_hex(s[i + 1]) < 0 || path_hex(s[i + 2]) < 0 ||
			    path_hex(s[i + 3]) < 0 || path_hex(s[i + 4]) < 0)
				return -1;
			i += 4;
		} else if (!strchr("\"\\/bfnrt", s[i]) || s[i] == '\0') {
			return -1;
		}
	}
	return -1;
}

/* The next token. */
static struct gql_token gql_next(struct gql_lexer *lx)
{
	const unsigned char *s = (const unsigned char *)lx->s;
	struct gql_token t = {GT_ERROR, 0, NULL, 0};
	unsigned char c;
	size_t start;

	gql_skip_ignored(lx);
	if (lx->i >= lx->n) {
		t.t = GT_END;
		return t;
	}
	c = s[lx->i];
	start = lx->i;
	if (c != '\0' && strchr("!$&():=@[]{|}", c)) {
		lx->i++;
		t.t = GT_PUNCT;
		t.c = (char)c;
	} else if (c == '.') {
		if (lx->n - lx->i >= 3 && s[lx->i + 1] == '.' && s[lx->i + 2] == '.') {
			lx->i += 3;
			t.t = GT_SPREAD;
		}
	} else if (gql_name_start(c)) {
		while (lx->i < lx->n && gql_name_char(s[lx->i]))
			lx->i++;
		t.t = GT_NAME;
		t.p = lx->s + start;
		t.len = lx->i - start;
	} else if (c == '-' || gql_digit(c)) {
		if (gql_number(lx) == 0)
			t.t = GT_VALUE;
	} else if (c == '"') {
		if (gql_string(lx) == 0)
			t.t = GT_VALUE;
	}
	return t;
}

static int gql_is(const struct gql_token *t, const char *name)
{
	return t->t == GT_NAME && t->len == strlen(name) && memcmp(t->p, name, t->len) == 0;
}

static int gql_punct(const struct gql_token *t, char c)
{
	return t->t == GT_PUNCT && t->c == c;
}

/*
 * Past the group whose opener (one of { ( [) was just read: every token
 * until its closer, the groups inside it balanced. 0, or -1 when a group
 * is not closed, closed by another bracket, or nested too deep.
 */
static int gql_skip_group(struct gql_lexer *lx, char open)
{
	char stack[GRAPHQL_DEPTH_MAX];
	int depth = 0;
	struct gql_token t;

	stack[depth++] = open == '{' ? '}' : open == '(' ? ')' : ']';
	while (depth > 0) {
		t = gql_next(lx);
		if (t.t == GT_END || t.t == GT_ERROR)
			return -1;
		if (t.t != GT_PUNCT)
			continue;
		if (t.c == '{' || t.c == '(' || t.c == '[') {
			if (depth == GRAPHQL_DEPTH_MAX)
				return -1;
			stack[depth++] = t.c == '{' ? '}' : t.c == '(' ? ')' : ']';
		} else if (t.c == '}' || t.c == ')' || t.c == ']') {
			if (stack[--depth] != t.c)
				return -1;
		}
	}
	return 0;
}

/*
 * A selection set whose '{' was just read: its first field's name into
 * op (an alias "a: f" names f), then past its '}'. 0 or -1.
 */
static int gql_selection_set(struct gql_lexer *lx, struct graphql_operation *op)
{
	struct gql_lexer peek;
	struct gql_token t, u;

	peek = *lx;
	t = gql_next(&peek);
	if (t.t == GT_NAME) {
		u = gql_next(&peek);
		if (gql_punct(&u, ':')) {
			u = gql_next(&peek);
			if (u.t != GT_NAME)
				return -1;
			t = u;
		}
		if (op) {
			op->field = t.p;
			op->field_len = t.len;
		}
	} else if (t.t != GT_SPREAD) {
		return -1; /* an empty set, or one that starts with no selection */
	}
	return gql_skip_group(lx, '{');
}

/* Directives "@name(args)" up to the token that follows them, into *t. 0 or -1. */
static int gql_directives(struct gql_lexer *lx, struct gql_token *t)
{
	while (gql_punct(t, '@')) {
		*t = gql_next(lx);
		if (t->t != GT_NAME)
			return -1;
		*t = gql_next(lx);
		if (gql_punct(t, '(')) {
			if (gql_skip_group(lx, '('))
				return -1;
			*t = gql_next(lx);
		}
	}
	return 0;
}

/*
 * An operation after its type's keyword: [name] [(variables)] [directives]
 * { selections }. 0 or -1.
 */
static int gql_operation(struct gql_lexer *lx, struct graphql_operation *op)
{
	struct gql_token t = gql_next(lx);

	if (t.t == GT_NAME) {
		op->name = t.p;
		op->name_len = t.len;
		t = gql_next(lx);
	}
	if (gql_punct(&t, '(')) {
		if (gql_skip_group(lx, '('))
			return -1;
		t = gql_next(lx);
	}
	if (gql_directives(lx, &t) || !gql_punct(&t, '{'))
		return -1;
	return gql_selection_set(lx, op);
}

/* A fragment after "fragment": Name on Type [directives] { selections }. 0 or -1. */
static int gql_fragment(struct gql_lexer *lx)
{
	struct gql_token t = gql_next(lx);

	if (t.t != GT_NAME || gql_is(&t, "on"))
		return -1;
	t = gql_next(lx);
	if (!gql_is(&t, "on"))
		return -1;
	t = gql_next(lx);
	if (t.t != GT_NAME)
		return -1;
	t = gql_next(lx);
	if (gql_directives(lx, &t) || !gql_punct(&t, '{'))
		return -1;
	return gql_selection_set(lx, NULL);
}

enum graphql_result graphql_operation(const char *doc, size_t len, const char *opname,
				      size_t opname_len, struct graphql_operation *out)
{
	struct gql_lexer lx = {doc, len, 0};
	struct graphql_operation op, first;
	struct gql_token t;
	int nops = 0, nmatch = 0;

	memset(&first, 0, sizeof(first));
	memset(out, 0, sizeof(*out));
	for (;;) {
		t = gql_next(&lx);
		if (t.t == GT_END)
			break;
		memset(&op, 0, sizeof(op));
		if (gql_punct(&t, '{')) {
			op.type = GRAPHQL_QUERY; /* the shorthand: an anonymous query */
			if (gql_selection_set(&lx, &op))
				return GRAPHQL_MALFORMED;
		} else if (gql_is(&t, "query") || gql_is(&t, "mutation") ||
			   gql_is(&t, "subscription")) {
			op.type = t.p[0] == 'q'	  ? GRAPHQL_QUERY
				  : t.p[0] == 'm' ? GRAPHQL_MUTATION
						  : GRAPHQL_SUBSCRIPTION;
			if (gql_operation(&lx, &op))
				return GRAPHQL_MALFORMED;
		} else if (gql_is(&t, "fragment")) {
			if (gql_fragment(&lx))
				return GRAPHQL_MALFORMED;
			continue;
		} else {
			return GRAPHQL_MALFORMED; /* not an executable definition */
		}
		if (nops++ == 0)
			first = op;
		if (opname && op.name && op.name_len == opname_len &&
		    memcmp(op.name, opname, opname_len) == 0 && nmatch++ == 0)
			*out = op;
	}
	if (nops == 0)
		return GRAPHQL_MALFORMED;
	if (opname)
		return nmatch == 1 ? GRAPHQL_OK : nmatch ? GRAPHQL_AMBIGUOUS : GRAPHQL_NOT_FOUND;
	if (nops > 1)
		return GRAPHQL_AMBIGUOUS;
	*out = first;
	return GRAPHQL_OK;
}

const char *graphql_type_name(enum graphql_type t)
{
	return t == GRAPHQL_MUTATION ? "mutation" : t == GRAPHQL_SUBSCRIPTION ? "subscription" : "query";
}
