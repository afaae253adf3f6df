/* The operation of a request's scope (opname.h). */
#include "proxy/opname.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <event2/buffer.h>

#include "conf/conf.h"
#include "http/graphql.h"
#include "http/header.h"
#include "http/jsonrpc.h"
#include "proxy/http.h"
#include "proxy/json.h"
#include "proxy/record.h"

#define OPNAME_PATH_MAX 16 /* names in a dot path */

/*
 * The body as a yajl tree, or NULL (with detail said) when it is not JSON
 * yajl may read (json_tree_safe) or not JSON at all, or *nomem set.
 */
static yajl_val opname_parse(const unsigned char *body, size_t len, int *nomem, char *detail,
			     size_t dl)
{
	char *text;
	yajl_val doc;

	*nomem = 0;
	if (body && json_tree_safe((const char *)body, len) < 0) {
		snprintf(detail, dl, "the request body is not JSON idemproxy reads to name its "
				     "operation (nested deeper than %d, a NUL or \\u0000, an unpaired "
				     "surrogate escape, or a comment)", JSON_TREE_DEPTH);
		return NULL;
	}
	if (!body) {
		snprintf(detail, dl, "the request body is empty: it names the operation");
		return NULL;
	}
	text = malloc(len + 1);
	if (!text) {
		*nomem = 1;
		return NULL;
	}
	memcpy(text, body, len);
	text[len] = '\0';
	doc = yajl_tree_parse(text, NULL, 0);
	free(text);
	if (!doc)
		snprintf(detail, dl, "the request body is not JSON: it names the operation");
	return doc;
}

/*
 * The value at the dot path below doc in *out (NULL: absent, or a step
 * through something not an object). -1 when a step's name appears twice.
 */
static int opname_at(yajl_val doc, const char *path, yajl_val *out)
{
	const char *seg = path, *dot;
	char name[256];
	size_t n;
	yajl_val v = doc;

	for (int i = 0; i < OPNAME_PATH_MAX && v; i++) {
		dot = strchr(seg, '.');
		n = dot ? (size_t)(dot - seg) : strlen(seg);
		if (!YAJL_IS_OBJECT(v) || n >= sizeof(name)) {
			v = NULL;
			break;
		}
		memcpy(name, seg, n);
		name[n] = '\0';
		if (json_member(v, name, &v) < 0)
			return -1;
		if (!dot) {
			*out = v;
			return 0;
		}
		seg = dot + 1;
	}
	*out = NULL;
	return 0;
}

/* 1 when the n bytes at s may name an operation: 1 to OPNAME_VALUE_MAX, no control character. */
static int opname_value_ok(const char *s, size_t n)
{
	if (n == 0 || n > OPNAME_VALUE_MAX)
		return 0;
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f)
			return 0;
	return 1;
}

/* "ROUTE:NAME" into *operation. */
static enum opname_result opname_join(const struct route *r, const char *name, size_t n,
				      char **operation)
{
	size_t rl = strlen(r->operation);
	char *op = malloc(rl + 1 + n + 1);

	if (!op)
		return OPNAME_NOMEM;
	memcpy(op, r->operation, rl);
	op[rl] = ':';
	memcpy(op + rl + 1, name, n);
	op[rl + 1 + n] = '\0';
	*operation = op;
	return OPNAME_SCOPED;
}

/* operation_from json PATH, jsonrpc [PATH]. */
static enum opname_result opname_json(const struct route *r, const unsigned char *body, size_t len,
				      char **operation, char *detail, size_t dl)
{
	const char *how = r->operation_from == OPFROM_JSONRPC ? "jsonrpc" : "json";
	enum opname_result res = OPNAME_BAD;
	yajl_val doc, v = NULL;
	int nomem;

	doc = opname_parse(body, len, &nomem, detail, dl);
	if (nomem)
		return OPNAME_NOMEM;
	if (!doc) {
		/* detail said why */
	} else if (!YAJL_IS_OBJECT(doc)) {
		snprintf(detail, dl, "the request body must be a JSON object with a string at %s "
				     "(operation_from %s)", r->operation_path, how);
	} else if (opname_at(doc, r->operation_path, &v) < 0) {
		snprintf(detail, dl, "a member on the way to %s appears twice in the request body",
			 r->operation_path);
	} else if (!v || !YAJL_IS_STRING(v)) {
		snprintf(detail, dl, "the request body has no string at %s, which names the "
				     "operation (operation_from %s)", r->operation_path, how);
	} else if (!opname_value_ok(v->u.string, strlen(v->u.string))) {
		snprintf(detail, dl, "the operation name at %s must be 1 to %d bytes without "
				     "control characters", r->operation_path, OPNAME_VALUE_MAX);
	} else if (r->operation_from == OPFROM_JSONRPC && body &&
		   jsonrpc_id(body, len, &(struct jsonrpc_member){0}) == JSONRPC_TWICE) {
		snprintf(detail, dl, "the JSON-RPC request has more than one \"id\"");
	} else {
		res = opname_join(r, v->u.string, strlen(v->u.string), operation);
	}
	yajl_tree_free(doc);
	return res;
}

/* 1 when the request's Content-Type is application/graphql (the document itself). */
static int opname_graphql_body(const struct http_msg *m)
{
	static const char type[] = "application/graphql";
	const char *ct = http_msg_known(m, HTTP_N_CONTENT_TYPE);
	size_t n = sizeof(type) - 1;

	return ct && strncasecmp(ct, type, n) == 0 &&
	       (ct[n] == '\0' || ct[n] == ';' || ct[n] == ' ' || ct[n] == '\t');
}

/* The verdict on one GraphQL document (opname: operationName or NULL). */
static enum opname_result opname_document(const struct route *r, const char *doc, size_t len,
					  const char *opname, char **operation, char *detail,
					  size_t dl)
{
	struct graphql_operation op;

	switch (graphql_operation(doc, len, opname, opname ? strlen(opname) : 0, &op)) {
	case GRAPHQL_OK:
		break;
	case GRAPHQL_NOT_FOUND:
		snprintf(detail, dl, "the GraphQL document has no operation named by operationName");
		return OPNAME_BAD;
	case GRAPHQL_AMBIGUOUS:
		snprintf(detail, dl, "the GraphQL document has several operations: operationName "
				     "must name one");
		return OPNAME_BAD;
	default:
		snprintf(detail, dl, "the GraphQL document could not be read (an executable "
				     "document: operations and fragments)");
		return OPNAME_BAD;
	}
	if (op.type != GRAPHQL_MUTATION)
		return OPNAME_PASS;
	if (op.name)
		return opname_join(r, op.name, op.name_len, operation);
	if (op.field)
		return opname_join(r, op.field, op.field_len, operation);
	snprintf(detail, dl, "an anonymous GraphQL mutation that starts with a fragment has no "
			     "name for its scope: name the mutation");
	return OPNAME_BAD;
}

/* One GraphQL request object {"query": ..., "operationName": ...}. */
static enum opname_result opname_graphql_request(const struct route *r, yajl_val req,
						 char **operation, char *detail, size_t dl)
{
	yajl_val q = NULL, name = NULL;

	if (!YAJL_IS_OBJECT(req) || json_member(req, "query", &q) < 0 ||
	    json_member(req, "operationName", &name) < 0 || !q || !YAJL_IS_STRING(q) ||
	    (name && !YAJL_IS_STRING(name) && !YAJL_IS_NULL(name))) {
		snprintf(detail, dl, "a GraphQL request is a JSON object with a string \"query\" "
				     "and, maybe, a string \"operationName\"");
		return OPNAME_BAD;
	}
	return opname_document(r, q->u.string, strlen(q->u.string),
			       name && YAJL_IS_STRING(name) ? name->u.string : NULL, operation,
			       detail, dl);
}

/* operation_from graphql. A batch (an array of requests) passes only when it changes nothing. */
static enum opname_result opname_graphql(const struct route *r, const struct http_msg *m,
					 const unsigned char *body, size_t len, char **operation,
					 char *detail, size_t dl)
{
	enum opname_result res = OPNAME_PASS;
	yajl_val doc;
	int nomem;

	if (opname_graphql_body(m))
		return opname_document(r, body ? (const char *)body : "", len, NULL, operation,
				       detail, dl);
	doc = opname_parse(body, len, &nomem, detail, dl);
	if (nomem)
		return OPNAME_NOMEM;
	if (!doc)
		return OPNAME_BAD; /* a GraphQL document itself is sent as application/graphql */
	if (YAJL_IS_ARRAY(doc)) {
		for (size_t i = 0; res == OPNAME_PASS && i < doc->u.array.len; i++)
			res = opname_graphql_request(r, doc->u.array.values[i], operation, detail, dl);
		if (res == OPNAME_SCOPED) {
			free(*operation);
			*operation = NULL;
			snprintf(detail, dl, "a batch of GraphQL requests may not hold a mutation: "
					     "send each mutation on its own");
			res = OPNAME_BAD;
		}
	} else {
		res = opname_graphql_request(r, doc, operation, detail, dl);
	}
	yajl_tree_free(doc);
	return res;
}

enum opname_result opname_of_request(const struct route *r, const struct http_msg *m,
				     const unsigned char *body, size_t len, char **operation,
				     char *detail, size_t detail_len)
{
	*operation = NULL;
	detail[0] = '\0';
	switch (r->operation_from) {
	case OPFROM_JSON:
	case OPFROM_JSONRPC:
		return opname_json(r, body, len, operation, detail, detail_len);
	case OPFROM_GRAPHQL:
		return opname_graphql(r, m, body, len, operation, detail, detail_len);
	default:
		return OPNAME_SCOPED;
	}
}

/* 1 when the record's kept header lines name a Content-Encoding: its body is not JSON text. */
static int opname_encoded(const struct record *rec)
{
	const char *at = rec->headers, *end = rec->headers + rec->headers_len;
	struct http_line line;

	while (http_line_next(&at, end, &line) > 0)
		if (line.name_len == 16 && strncasecmp(line.name, "Content-Encoding", 16) == 0)
			return 1;
	return 0;
}

int opname_replay_body(const struct route *r, const struct http_msg *m, const struct record *rec,
		       unsigned char **body, size_t *len)
{
	size_t blen = evbuffer_get_length(m->body);
	const unsigned char *req;
	struct jsonrpc_member id;

	*body = NULL;
	*len = 0;
	if (r->operation_from != OPFROM_JSONRPC || rec->body_omitted || !rec->body_len || !blen ||
	    opname_encoded(rec))
		return 0;
	req = evbuffer_pullup(m->body, -1);
	if (!req || jsonrpc_id(req, blen, &id) != JSONRPC_FOUND)
		return 0;
	return jsonrpc_with_id(rec->body, rec->body_len, req + id.value, id.end - id.value, body,
			       len);
}
