/* The contract's facts (contract_facts.h) as a Markdown document. */
#ifndef IDEMPROXY_CONTRACT_MD_H
#define IDEMPROXY_CONTRACT_MD_H

#include <stddef.h>

struct contract;

/* c as CommonMark: the intro, then a section per live route with its facts
 * and status table. A malloc'd NUL-terminated text the caller frees, its
 * length in *len; NULL when out of memory. */
char *contract_md_render(const struct contract *c, size_t *len) __attribute__((warn_unused_result));

#endif
