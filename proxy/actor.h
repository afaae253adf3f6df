/* Where a request's actor comes from: the route's actor source. */
#ifndef IDEMPROXY_ACTOR_H
#define IDEMPROXY_ACTOR_H

#include <stddef.h>

struct http_msg;
struct route;

#define ACTOR_MAX 256 /* bytes of an actor value */

enum actor_result {
	ACTOR_OK,
	ACTOR_ABSENT,  /* the source is missing */
	ACTOR_INVALID, /* empty, given twice, or not an actor value (actor_value_ok) */
	ACTOR_NOMEM,
};

/*
 * 1 when the n bytes at s may be an actor: 1 to ACTOR_MAX bytes of UTF-8
 * without control characters (C0, DEL, C1). Anything else is never
 * claimed: it could not be stored, or would read differently in logs and
 * in the records API.
 */
int actor_value_ok(const char *s, size_t n);

/*
 * The actor of request m on route r as the scope stores it: "h:" and the
 * header's value for `actor header`, "anonymous" for `actor anonymous`. On
 * ACTOR_OK *actor is a new string the caller frees.
 */
enum actor_result actor_from_request(const struct route *r, const struct http_msg *m,
				     char **actor) __attribute__((warn_unused_result));

#endif
