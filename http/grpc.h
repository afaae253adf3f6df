/*
 * gRPC over HTTP/2 as idemproxy meets it: the status codes by name, the
 * length-prefixed messages of a body, the content type that says a
 * request is a call, and grpc-message's percent-encoding. Framing and
 * HPACK are nghttp2's (proxy/h2.c, proxy/h2up.c); this is only what a
 * call's head and body say.
 */
#ifndef IDEMPROXY_HTTP_GRPC_H
#define IDEMPROXY_HTTP_GRPC_H

#include <stddef.h>

/* The status codes (grpc/doc/statuscodes.md). */
enum grpc_code {
	GRPC_OK = 0,
	GRPC_CANCELLED = 1,
	GRPC_UNKNOWN = 2,
	GRPC_INVALID_ARGUMENT = 3,
	GRPC_DEADLINE_EXCEEDED = 4,
	GRPC_NOT_FOUND = 5,
	GRPC_ALREADY_EXISTS = 6,
	GRPC_PERMISSION_DENIED = 7,
	GRPC_RESOURCE_EXHAUSTED = 8,
	GRPC_FAILED_PRECONDITION = 9,
	GRPC_ABORTED = 10,
	GRPC_OUT_OF_RANGE = 11,
	GRPC_UNIMPLEMENTED = 12,
	GRPC_INTERNAL = 13,
	GRPC_UNAVAILABLE = 14,
	GRPC_DATA_LOSS = 15,
	GRPC_UNAUTHENTICATED = 16,
	GRPC_CODES
};

/* A message's prefix: a compressed flag and a 4-byte big-endian length. */
#define GRPC_PREFIX 5

/* The name of code ("INTERNAL"), or NULL outside 0..16. */
const char *grpc_code_name(int code);

/* The code named s (upper case, as grpc_code_name) or written as its
 * number 0..16; -1 when it is neither. */
int grpc_code_parse(const char *s);

/* The code a grpc-status value says (decimal 0..16, nothing else), or -1. */
int grpc_status_value(const char *v, size_t len);

/* 1 when a Content-Type value names a gRPC call: application/grpc, alone
 * or followed by "+format" or ";parameters" (never application/grpc-web,
 * which is a different protocol). */
int grpc_content_type(const char *v);

/*
 * The complete length-prefixed messages of the len bytes at body: their
 * number, or -1 when the bytes do not split into whole messages (a prefix
 * or a message cut short). An empty body holds 0.
 */
long grpc_messages(const unsigned char *body, size_t len);

/*
 * s percent-encoded for grpc-message (bytes outside 0x20..0x7e, and '%',
 * as %XX) into out, at most n - 1 bytes and a NUL; a sequence that does
 * not fit is left out whole. Returns the length written.
 */
size_t grpc_message_encode(const char *s, char *out, size_t n);

#endif
