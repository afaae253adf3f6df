/*
 * A JSON-RPC call's "id" (operation_from jsonrpc): the member of the
 * top-level object that names a call for its caller, not what the call
 * does. A retry that sends a new id is the same call: its fingerprint
 * leaves the id out, and its replay answers with the retry's id in place
 * of the first call's. Both work on the text, so everything else in the
 * body stays byte for byte as it was.
 *
 * The text is read by a strict JSON scanner (RFC 8259: one value, white
 * space around it (\v and \f too, as yajl, which read the request, takes them), strings with valid escapes and no control characters,
 * numbers by the grammar, nesting at most JSONRPC_DEPTH_MAX); member names
 * are compared after their escapes are decoded, so "\u0069d" is "id".
 */
#ifndef IDEMPROXY_HTTP_JSONRPC_H
#define IDEMPROXY_HTTP_JSONRPC_H

#include <stddef.h>

#define JSONRPC_DEPTH_MAX 256 /* deeper nesting is not JSON this scanner reads */

/* A member of the top-level object: [key, end) is `"id" : value`, [value, end) its value. */
struct jsonrpc_member {
	size_t key, value, end;
	size_t cut_from, cut_to; /* what leaving it out removes: it and one comma */
};

enum jsonrpc_find {
	JSONRPC_FOUND,
	JSONRPC_ABSENT,    /* an object without an "id" member */
	JSONRPC_TWICE,     /* an object with more than one */
	JSONRPC_NOT_OBJECT, /* not one JSON object (another value, or not JSON) */
};

/* The "id" member of the n bytes at s, in *m when found. */
enum jsonrpc_find jsonrpc_id(const unsigned char *s, size_t n, struct jsonrpc_member *m);

/*
 * The n bytes at s without their "id" member, malloc'd into *out (its
 * length in *out_len): 1. 0 when there is nothing to leave out (no object,
 * no id, or two of them: the body counts as it is), *out NULL. -1: out of
 * memory.
 */
int jsonrpc_without_id(const unsigned char *s, size_t n, unsigned char **out, size_t *out_len);

/*
 * The n bytes at s (a stored response) with the value of their "id"
 * member replaced by the id_len bytes at id (the retry's, a JSON value),
 * malloc'd into *out: 1. 0 when s has no single id member to replace, *out
 * NULL. -1: out of memory.
 */
int jsonrpc_with_id(const unsigned char *s, size_t n, const unsigned char *id, size_t id_len,
		    unsigned char **out, size_t *out_len);

#endif
