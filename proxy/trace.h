/*
 * Request ids and W3C Trace Context (trace.c): what lets a log line, a
 * record, the upstream's logs and a trace be joined. A leaf: it reads
 * header values and writes ids, nothing else.
 */
#ifndef IDEMPROXY_TRACE_H
#define IDEMPROXY_TRACE_H

#include <stddef.h>

/* The longest X-Request-Id taken from a client. */
#define TRACE_REQUEST_ID_MAX 128
/* One idemproxy makes: hex digits. */
#define TRACE_REQUEST_ID_MADE 32
/* A traceparent's trace id and parent id, in hex digits. */
#define TRACE_TRACE_ID_LEN  32
#define TRACE_PARENT_ID_LEN 16

/* What a request is known by; an empty string: none. */
struct trace {
	char request_id[TRACE_REQUEST_ID_MAX + 1];
	char trace_id[TRACE_TRACE_ID_LEN + 1];	 /* from a valid traceparent only */
	char parent_id[TRACE_PARENT_ID_LEN + 1]; /* likewise */
};

/* 1 when the len bytes at v may be a request id: 1 to 128 visible ASCII (0x21-0x7e). */
int trace_request_id_valid(const char *v, size_t len);

/*
 * A new request id into out (TRACE_REQUEST_ID_MADE hex digits and a NUL):
 * a random per-thread prefix and a per-thread counter, so no two in a
 * process repeat and none is a guess of another instance's.
 */
void trace_request_id_make(char out[TRACE_REQUEST_ID_MADE + 1]);

/*
 * 1 when the len bytes at v are a traceparent of version 00 as W3C Trace
 * Context writes it ("00-" 32 lowercase hex "-" 16 lowercase hex "-" 2
 * lowercase hex, 55 bytes), trace id and parent id not all zero; its ids
 * then go into t. Otherwise 0 and t's trace and parent ids are empty (the
 * header still goes on as it is: only the log does not name it).
 */
int trace_parent_parse(const char *v, size_t len, struct trace *t);

/*
 * t for a request whose X-Request-Id is request_id and traceparent is
 * traceparent (each NULL when absent): the client's id when valid,
 * otherwise a new one.
 */
void trace_of(struct trace *t, const char *request_id, const char *traceparent);

#endif
