/* Where a request's actor comes from: the route's actor source. */
#ifndef IDEMPROXY_ACTOR_H
#define IDEMPROXY_ACTOR_H

#include <stddef.h>

struct conf_gen;
struct http_msg;
struct route;

#define ACTOR_MAX 256 /* bytes of an actor value */

enum actor_result {
	ACTOR_OK,
	ACTOR_ABSENT,  /* the source is missing (no header, no bearer token) */
	ACTOR_INVALID, /* empty, given twice, not an actor value (actor_value_ok),
			* an Authorization scheme without a credential, or a
			* token that does not verify */
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
 * What actor sources keep from one request to the next: a worker's
 * verified tokens (actor jwt), so that a token seen again is not verified
 * again. One per worker thread (not thread-safe); NULL when out of memory.
 */
struct actor_ctx;
struct actor_ctx *actor_ctx_new(void);
void actor_ctx_free(struct actor_ctx *ax); /* NULL accepted */

/*
 * The actor of request m on route r of the configuration generation gen
 * (which holds the route's key set, for actor jwt) as the scope stores it:
 *   actor header     "h:" and the header's value
 *   actor jwt        "j:" LEN ":" ISSUER ":" CLAIM for a string claim,
 *                    "j:" LEN ":" ISSUER "#" DIGITS for an integer one (LEN
 *                    the issuer's length, so two issuers' subjects never
 *                    meet, nor 123 and "123")
 *   actor authorization  "a:" and the hex SHA-256 of the Authorization
 *                    value's canonical form: the scheme in lower case, one
 *                    blank, the credential as sent (none: ACTOR_INVALID)
 *   actor anonymous  "anonymous"
 * On ACTOR_OK *actor is a new string the caller frees. On ACTOR_INVALID
 * *why (when why is not NULL) says what was wrong, for the log: never the
 * credential itself.
 */
enum actor_result actor_from_request(struct actor_ctx *ax, const struct conf_gen *gen,
				     const struct route *r, const struct http_msg *m, char **actor,
				     const char **why) __attribute__((warn_unused_result));

/*
 * The problem detail of a request refused because its actor on route r was
 * res (ACTOR_ABSENT or ACTOR_INVALID; why as actor_from_request set it):
 * static text, or buf (len bytes) when it says why.
 */
const char *actor_refusal(const struct route *r, enum actor_result res, const char *why, char *buf,
			  size_t len);

/* 1 when s has the form of a stored actor (one of the forms above). */
int actor_stored_form(const char *s);

#endif
