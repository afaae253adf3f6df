/* The contract's facts (contract_facts.h) as an OpenAPI 3.1 document. */
#ifndef IDEMPROXY_CONTRACT_OPENAPI_H
#define IDEMPROXY_CONTRACT_OPENAPI_H

#include <stddef.h>

struct contract;

/* c as an OpenAPI 3.1 document (JSON, indented, ending with a newline). A
 * malloc'd NUL-terminated text the caller frees, its length in *len; NULL
 * when out of memory or when a configured string is not UTF-8. */
char *contract_openapi_render(const struct contract *c, size_t *len)
    __attribute__((warn_unused_result));

#endif
