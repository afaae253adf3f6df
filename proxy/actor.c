/* Actor sources. */
#include "proxy/actor.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conf/conf.h"
#include "proxy/http.h"
#include "proxy/utf8.h"

/* Header actors and the anonymous one never share a slot. */
#define ACTOR_HEADER_PREFIX "h:"
#define ACTOR_ANONYMOUS_ID  "anonymous"

int actor_value_ok(const char *s, size_t n)
{
	const unsigned char *p = (const unsigned char *)s;
	size_t k;

	if (n < 1 || n > ACTOR_MAX)
		return 0;
	while (n > 0) {
		k = utf8_seq(p, n);
		if (k == 0 || p[0] < 0x20 || p[0] == 0x7f)
			return 0;
		/* C1 controls: U+0080..U+009F, encoded 0xc2 0x80..0x9f. */
		if (k == 2 && p[0] == 0xc2 && p[1] < 0xa0)
			return 0;
		p += k;
		n -= k;
	}
	return 1;
}

enum actor_result actor_from_request(const struct route *r, const struct http_msg *m, char **actor)
{
	const char *value;
	size_t len;

	if (r->actor == ACTOR_ANONYMOUS) {
		*actor = strdup(ACTOR_ANONYMOUS_ID);
		return *actor ? ACTOR_OK : ACTOR_NOMEM;
	}
	value = http_msg_header(m, r->actor_header);
	if (!value)
		return ACTOR_ABSENT;
	if (http_msg_header_count(m, r->actor_header) > 1 || !actor_value_ok(value, strlen(value)))
		return ACTOR_INVALID;
	len = strlen(ACTOR_HEADER_PREFIX) + strlen(value) + 1;
	*actor = malloc(len);
	if (!*actor)
		return ACTOR_NOMEM;
	snprintf(*actor, len, ACTOR_HEADER_PREFIX "%s", value);
	return ACTOR_OK;
}
