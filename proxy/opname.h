/*
 * The operation of a request's scope (a route's operation_from): the
 * route's name alone, or with ":" and a name the request's body gives,
 * the string at a JSON path (json, jsonrpc: a JSON-RPC method, an MCP
 * tool's name) or the GraphQL mutation the document executes (graphql:
 * its operation's name, an anonymous one's first field). GraphQL queries
 * and subscriptions change nothing: they pass through, unrecorded. And a
 * JSON-RPC call's "id" belongs to the call, not to what it does: a replay
 * carries the retry's id (the fingerprint leaves it out, fingerprint.c).
 */
#ifndef IDEMPROXY_OPNAME_H
#define IDEMPROXY_OPNAME_H

#include <stddef.h>

struct http_msg;
struct record;
struct route;

#define OPNAME_VALUE_MAX 128 /* bytes of a name from the body */

enum opname_result {
	OPNAME_SCOPED, /* *operation: the scope's operation (malloc'd; NULL: the route's name) */
	OPNAME_PASS,   /* a GraphQL query or subscription: forwarded as it is */
	OPNAME_BAD,    /* refused (400): detail says why */
	OPNAME_NOMEM,
};

/*
 * The operation of request m (its whole body the len bytes at body, NULL
 * when empty) on route r, as r's operation_from says; detail gets
 * detail_len bytes at most.
 */
enum opname_result opname_of_request(const struct route *r, const struct http_msg *m,
				     const unsigned char *body, size_t len, char **operation,
				     char *detail, size_t detail_len)
	__attribute__((warn_unused_result));

/*
 * A replay of rec to the retry m on route r: for operation_from jsonrpc,
 * when m's body has one "id" and rec's body (kept whole, not encoded) one
 * too, rec's body with the retry's id, malloc'd into *body and *len: 1.
 * 0: rec replays as it is. -1: out of memory.
 */
int opname_replay_body(const struct route *r, const struct http_msg *m, const struct record *rec,
		       unsigned char **body, size_t *len) __attribute__((warn_unused_result));

#endif
