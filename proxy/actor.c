/* Actor sources. */
#include "proxy/actor.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conf/conf.h"
#include "proxy/http.h"

/* Header actors and the anonymous one never share a slot. */
#define ACTOR_HEADER_PREFIX "h:"
#define ACTOR_ANONYMOUS_ID  "anonymous"

enum actor_result actor_from_request(const struct route *r, const struct http_msg *m, char **actor)
{
	const char *value;
	size_t len;

	if (r->actor == ACTOR_ANONYMOUS) {
		*actor = strdup(ACTOR_ANONYMOUS_ID);
		return *actor ? ACTOR_OK : ACTOR_NOMEM;
	}
	value = http_msg_header(m, r->actor_header);
	if (!value || !*value || http_msg_header_count(m, r->actor_header) > 1)
		return ACTOR_ABSENT;
	len = strlen(ACTOR_HEADER_PREFIX) + strlen(value) + 1;
	*actor = malloc(len);
	if (!*actor)
		return ACTOR_NOMEM;
	snprintf(*actor, len, ACTOR_HEADER_PREFIX "%s", value);
	return ACTOR_OK;
}
