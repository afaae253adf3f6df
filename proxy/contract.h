/*
 * The published idempotency contract: what a client of
 * each route is told about keys, actors, fingerprints, retention, duplicates
 * and the answers it may get, generated from the configuration alone.
 */
#ifndef IDEMPROXY_CONTRACT_H
#define IDEMPROXY_CONTRACT_H

#include <stddef.h>

struct conf;

enum contract_format {
	CONTRACT_MARKDOWN,
	CONTRACT_OPENAPI, /* an OpenAPI 3.1 document (JSON) */
};

/* The names contract_format_parse takes, for messages. */
#define CONTRACT_FORMATS "markdown or openapi"

/* "markdown" or "openapi" into *fmt: 0, or -1 for any other name. */
int contract_format_parse(const char *name, enum contract_format *fmt);

/* The media type of fmt's text, for a Content-Type header. */
const char *contract_media_type(enum contract_format fmt);

/*
 * The contract of every route of conf that intercepts something, in fmt.
 * It names header, parameter and field names, never a conninfo, a file
 * path or a secret. Returns a malloc'd NUL-terminated text the caller
 * frees, its length in *len; NULL when out of memory (or, for OpenAPI,
 * when a configured string is not UTF-8).
 */
char *contract_render(const struct conf *conf, enum contract_format fmt, size_t *len)
    __attribute__((warn_unused_result));

#endif
