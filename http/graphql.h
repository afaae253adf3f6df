/*
 * The GraphQL request document as idemproxy meets it (operation_from
 * graphql): which operation a request executes, what type it is and what
 * it is called. A lexer of the GraphQL grammar's tokens (October 2021
 * spec, section 2.1: names, punctuators, numbers, strings and block
 * strings, comments, commas and white space ignored) and a reader of the
 * executable definitions' outline: operations (query, mutation,
 * subscription, the shorthand "{ ... }" query) and fragments, whose
 * bodies are only checked to be balanced. It is no validator: a document
 * it reads may still be one the server refuses, but one it cannot read is
 * refused by idemproxy, so nothing a lexer here misreads as a query goes
 * upstream unrecorded.
 */
#ifndef IDEMPROXY_HTTP_GRAPHQL_H
#define IDEMPROXY_HTTP_GRAPHQL_H

#include <stddef.h>

#define GRAPHQL_DEPTH_MAX 128 /* deeper nesting of { ( [ is refused as malformed */

enum graphql_type {
	GRAPHQL_QUERY,
	GRAPHQL_MUTATION,
	GRAPHQL_SUBSCRIPTION,
};

enum graphql_result {
	GRAPHQL_OK,
	GRAPHQL_MALFORMED, /* not an executable document this lexer reads, or no operation */
	GRAPHQL_NOT_FOUND, /* no operation has the name asked for */
	GRAPHQL_AMBIGUOUS, /* several operations (or two of the name asked for) and none chosen */
};

/* The operation a document executes: pointers into the document. */
struct graphql_operation {
	enum graphql_type type;
	const char *name;  /* its name; NULL: anonymous */
	size_t name_len;
	const char *field; /* its selection set's first field's name (not its alias);
			    * NULL when that set starts with a fragment */
	size_t field_len;
};

/*
 * The operation the len bytes of GraphQL at doc execute: the one named by
 * the opname_len bytes at opname (the request's operationName) or, with
 * opname NULL, the document's only operation.
 */
enum graphql_result graphql_operation(const char *doc, size_t len, const char *opname,
				      size_t opname_len, struct graphql_operation *out)
	__attribute__((warn_unused_result));

/* "query", "mutation" or "subscription". */
const char *graphql_type_name(enum graphql_type t);

#endif
