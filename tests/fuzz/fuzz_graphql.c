/*
 * libFuzzer target for http/graphql.c: the operation a GraphQL document
 * executes. The input's first byte splits it into an operationName and
 * the document. What comes back points into the document, names with
 * GraphQL's name bytes only, and an operation asked for by name has it.
 * Built by `make fuzz` from the Makefile's FUZZ_SRC_fuzz_graphql.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "http/graphql.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* 1 when [p, p + n) lies in doc and is a GraphQL name. */
static int name_in(const char *p, size_t n, const char *doc, size_t len)
{
	if (!p || n == 0 || p < doc || p + n > doc + len)
		return 0;
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)p[i];

		if (!(c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
		      (i > 0 && c >= '0' && c <= '9')))
			return 0;
	}
	return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct graphql_operation op;
	size_t split, len;
	char *doc;
	const char *opname;
	enum graphql_result r;

	if (size == 0)
		return 0;
	split = data[0] % 16 < size - 1 ? data[0] % 16 : size - 1;
	len = size - 1 - split;
	doc = malloc(len ? len : 1); /* exactly len bytes: a read past them is ASan's */
	if (!doc)
		return 0;
	memcpy(doc, data + 1 + split, len);
	opname = data[0] & 0x80 ? (const char *)data + 1 : NULL;
	r = graphql_operation(doc, len, opname, split, &op);
	if (r == GRAPHQL_OK) {
		if (op.type != GRAPHQL_QUERY && op.type != GRAPHQL_MUTATION &&
		    op.type != GRAPHQL_SUBSCRIPTION)
			abort();
		if (op.name && !name_in(op.name, op.name_len, doc, len))
			abort();
		if (op.field && !name_in(op.field, op.field_len, doc, len))
			abort();
		if (opname && (!op.name || op.name_len != split || memcmp(op.name, opname, split)))
			abort();
	} else if (r != GRAPHQL_MALFORMED && r != GRAPHQL_NOT_FOUND && r != GRAPHQL_AMBIGUOUS) {
		abort();
	}
	(void)graphql_type_name(op.type);
	free(doc);
	return 0;
}
