/* Unit tests for http/graphql.c: the operation a GraphQL document executes, its type and name. */
#include "http/graphql.h"
#include "tests/unit/unit.h"

#include <stdlib.h>
#include <string.h>

/* The operation of doc (opname NULL: none asked for); the result. */
static enum graphql_result op_of(const char *doc, const char *opname, struct graphql_operation *op)
{
	return graphql_operation(doc, strlen(doc), opname, opname ? strlen(opname) : 0, op);
}

/* 1 when the n bytes at s are the string want. */
static int is(const char *s, size_t n, const char *want)
{
	return s && n == strlen(want) && memcmp(s, want, n) == 0;
}

static void test_types(void)
{
	struct graphql_operation op;

	CHECK(op_of("{ user(id: 1) { name } }", NULL, &op) == GRAPHQL_OK);
	CHECK(op.type == GRAPHQL_QUERY && op.name == NULL && is(op.field, op.field_len, "user"));
	CHECK(op_of("query Q { a }", NULL, &op) == GRAPHQL_OK);
	CHECK(op.type == GRAPHQL_QUERY && is(op.name, op.name_len, "Q"));
	CHECK(op_of("mutation CreateUser($n: String!) { createUser(name: $n) { id } }", NULL,
		    &op) == GRAPHQL_OK);
	CHECK(op.type == GRAPHQL_MUTATION && is(op.name, op.name_len, "CreateUser"));
	CHECK(is(op.field, op.field_len, "createUser"));
	CHECK(op_of("subscription S { onEvent { id } }", NULL, &op) == GRAPHQL_OK);
	CHECK(op.type == GRAPHQL_SUBSCRIPTION);
	CHECK_STR(graphql_type_name(GRAPHQL_MUTATION), "mutation");
	CHECK_STR(graphql_type_name(GRAPHQL_QUERY), "query");
	CHECK_STR(graphql_type_name(GRAPHQL_SUBSCRIPTION), "subscription");
}

static void test_anonymous_mutation(void)
{
	struct graphql_operation op;

	/* Its first top-level field names it; an alias does not. */
	CHECK(op_of("mutation { pay(amount: 5) { id } refund { id } }", NULL, &op) == GRAPHQL_OK);
	CHECK(op.type == GRAPHQL_MUTATION && !op.name && is(op.field, op.field_len, "pay"));
	CHECK(op_of("mutation { p1: pay(amount: 5) { id } }", NULL, &op) == GRAPHQL_OK);
	CHECK(is(op.field, op.field_len, "pay"));
	CHECK(op_of("mutation @dir(a: 1) { x }", NULL, &op) == GRAPHQL_OK);
	CHECK(is(op.field, op.field_len, "x"));
	CHECK(op_of("mutation { ...F } fragment F on M { pay { id } }", NULL, &op) == GRAPHQL_OK);
	CHECK(op.type == GRAPHQL_MUTATION && !op.name && !op.field);
}

static void test_choice(void)
{
	struct graphql_operation op;
	const char *doc = "query A { a } mutation B { b } mutation C { c } fragment F on T { f }";

	CHECK(op_of(doc, "B", &op) == GRAPHQL_OK && op.type == GRAPHQL_MUTATION &&
	      is(op.name, op.name_len, "B"));
	CHECK(op_of(doc, "A", &op) == GRAPHQL_OK && op.type == GRAPHQL_QUERY);
	CHECK(op_of(doc, "C", &op) == GRAPHQL_OK && is(op.field, op.field_len, "c"));
	CHECK(op_of(doc, NULL, &op) == GRAPHQL_AMBIGUOUS);
	CHECK(op_of(doc, "F", &op) == GRAPHQL_NOT_FOUND); /* a fragment is no operation */
	CHECK(op_of(doc, "Z", &op) == GRAPHQL_NOT_FOUND);
	CHECK(op_of("mutation B { b } mutation B { c }", "B", &op) == GRAPHQL_AMBIGUOUS);
	CHECK(op_of("{ a }", "A", &op) == GRAPHQL_NOT_FOUND);
	/* The only operation, whatever fragments there are. */
	CHECK(op_of("fragment F on T { f } mutation M { ...F }", NULL, &op) == GRAPHQL_OK &&
	      op.type == GRAPHQL_MUTATION);
}

/* What is skipped: comments, strings, block strings, commas, values, nested groups. */
static void test_skipped(void)
{
	struct graphql_operation op;

	CHECK(op_of("# mutation X { x }\nquery Q { a }", NULL, &op) == GRAPHQL_OK &&
	      op.type == GRAPHQL_QUERY);
	CHECK(op_of("query Q { a(s: \"} mutation M { m }\") }", NULL, &op) == GRAPHQL_OK &&
	      op.type == GRAPHQL_QUERY);
	CHECK(op_of("query Q { a(s: \"\"\"\n} \\\"\"\" mutation { m }\n\"\"\") }", NULL, &op) ==
	      GRAPHQL_OK);
	CHECK(op.type == GRAPHQL_QUERY);
	CHECK(op_of("query Q { a(s: \"\\\"} mutation\") }", NULL, &op) == GRAPHQL_OK);
	CHECK(op_of("\xef\xbb\xbf,,mutation,M,{,m,}", NULL, &op) == GRAPHQL_OK &&
	      op.type == GRAPHQL_MUTATION && is(op.name, op.name_len, "M"));
	CHECK(op_of("mutation M($in: In = {a: [1, -2.5e3, \"x\"], b: {c: null}}) { m(in: $in) }",
		    NULL, &op) == GRAPHQL_OK);
	CHECK(is(op.field, op.field_len, "m"));
	CHECK(op_of("mutation M { m(s: \"\\u00e9\\u{1F600}\") }", NULL, &op) == GRAPHQL_OK);
	/* The keywords are names anywhere else. */
	CHECK(op_of("query Q { mutation { query } }", NULL, &op) == GRAPHQL_OK &&
	      op.type == GRAPHQL_QUERY);
}

/* "query Q { a(x: [[...]]) }" with depth brackets, into buf. */
static const char *nested(char *buf, int depth)
{
	size_t n = (size_t)sprintf(buf, "query Q { a(x: ");

	for (int i = 0; i < depth; i++)
		buf[n++] = '[';
	for (int i = 0; i < depth; i++)
		buf[n++] = ']';
	memcpy(buf + n, ") }", 4);
	return buf;
}

static void test_malformed(void)
{
	static const char *const bad[] = {
	    "",
	    "   # only a comment",
	    "mutation",
	    "mutation M",
	    "mutation M { }",
	    "mutation M { m ",
	    "mutation M { m ) }",
	    "mutation M { m(a: [1}) }",
	    "query Q { a(s: \"unterminated) }",
	    "query Q { a(s: \"line\nbreak\") }",
	    "query Q { a(s: \"\"\"open) }",
	    "query Q { a(s: \"\\x\") }",
	    "query Q { a(s: \"\\u12\") }",
	    "query Q { a(n: 01) }",
	    "query Q { a(n: 1x) }",
	    "query Q { a(n: 1.) }",
	    "query Q { a } }",
	    "type Query { a: Int }",
	    "schema { query: Q }",
	    "extend type T { a: Int }",
	    "Mutation M { m }",
	    "mutation M { m } ..",
	    "fragment on on T { a }",
	    "fragment F T { a }",
	    "query Q { a \x01 }",
	    "query Q { \xc3\xa9 }",
	};
	struct graphql_operation op;
	char deep[GRAPHQL_DEPTH_MAX * 2 + 64];

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		enum graphql_result r = op_of(bad[i], NULL, &op);

		if (r != GRAPHQL_MALFORMED)
			fprintf(stderr, "not malformed: %s\n", bad[i]);
		CHECK(r == GRAPHQL_MALFORMED);
	}
	/* A NUL byte is never part of a document. */
	CHECK(graphql_operation("query Q { a\0 }", 15, NULL, 0, &op) == GRAPHQL_MALFORMED);
	/* Nesting deeper than GRAPHQL_DEPTH_MAX: the set's "{" and "(" count. */
	CHECK(op_of(nested(deep, GRAPHQL_DEPTH_MAX - 1), NULL, &op) == GRAPHQL_MALFORMED);
	CHECK(op_of(nested(deep, GRAPHQL_DEPTH_MAX - 2), NULL, &op) == GRAPHQL_OK);
}

int main(void)
{
	test_types();
	test_anonymous_mutation();
	test_choice();
	test_skipped();
	test_malformed();
	UNIT_DONE("graphql");
}
