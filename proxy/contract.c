/*
 * The published idempotency contract, from struct conf alone: its facts
 * are worked out once (contract_facts.c), then rendered as Markdown
 * (contract_md.c) or as an OpenAPI 3.1 document (contract_openapi.c).
 */
#include "proxy/contract.h"

#include <string.h>

#include "proxy/contract_facts.h"
#include "proxy/contract_md.h"
#include "proxy/contract_openapi.h"

char *contract_render(const struct conf *conf, enum contract_format fmt, size_t *len)
{
	struct contract c;
	char *out = NULL;

	if (contract_build(&c, conf) == 0)
		out = fmt == CONTRACT_OPENAPI ? contract_openapi_render(&c, len)
					      : contract_md_render(&c, len);
	contract_free(&c);
	return out;
}

int contract_format_parse(const char *name, enum contract_format *fmt)
{
	if (strcmp(name, "markdown") == 0)
		*fmt = CONTRACT_MARKDOWN;
	else if (strcmp(name, "openapi") == 0)
		*fmt = CONTRACT_OPENAPI;
	else
		return -1;
	return 0;
}

const char *contract_media_type(enum contract_format fmt)
{
	return fmt == CONTRACT_OPENAPI ? "application/json" : "text/markdown; charset=utf-8";
}
