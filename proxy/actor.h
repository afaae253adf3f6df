/* Where a request's actor comes from: the route's actor source. */
#ifndef IDEMPROXY_ACTOR_H
#define IDEMPROXY_ACTOR_H

struct http_msg;
struct route;

enum actor_result {
	ACTOR_OK,
	ACTOR_ABSENT,  /* the source is missing, empty or given twice */
	ACTOR_NOMEM,
};

/*
 * The actor of request m on route r as the scope stores it: "h:" and the
 * header's value for `actor header`, "anonymous" for `actor anonymous`. On
 * ACTOR_OK *actor is a new string the caller frees.
 */
enum actor_result actor_from_request(const struct route *r, const struct http_msg *m,
				     char **actor) __attribute__((warn_unused_result));

#endif
