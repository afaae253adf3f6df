/*
 * Owners in flight on this instance, so that a claim beyond max_owners or
 * actor_max_owners is refused before it is made (429 too-many-requests).
 * An owner is counted from the decision to claim until its request ends
 * (its record finished, released or marked unknown, or the request given
 * up: every path ends in request.c's request_free). Shared by every worker:
 * the instance's count is one atomic counter; the actors' counts are a
 * table under a lock, holding only the actors with owners in flight, so
 * at most the limit's actors (max_owners, or max_connections when that is
 * off).
 */
#ifndef IDEMPROXY_ADMIT_H
#define IDEMPROXY_ADMIT_H

#include <stdint.h>

struct admit;

enum admit_result {
	ADMIT_OK,		/* counted: give it back with admit_give */
	ADMIT_MAX_OWNERS,	/* the instance has max_owners owners in flight */
	ADMIT_ACTOR_MAX_OWNERS, /* the actor has its limit in flight, or the table is full */
	ADMIT_NOMEM,
};

/* NULL when out of memory. */
struct admit *admit_new(void);
void admit_free(struct admit *a);

/*
 * Count one more owner, of actor: refused when the instance already has
 * max_owners (0: no limit) or the actor actor_max (<= 0: no limit, the
 * actor is not counted). table_max bounds the actors counted at once. On
 * ADMIT_OK *counted says whether the actor was counted, for admit_give.
 */
enum admit_result admit_take(struct admit *a, int max_owners, const char *actor, int actor_max,
			     int table_max, int *counted);

/* The owner admit_take counted ended; counted as it said. */
void admit_give(struct admit *a, const char *actor, int counted);

/* Owners in flight now, and the actors counted (any thread). */
int64_t admit_owners(const struct admit *a);
int admit_actors(struct admit *a);

#endif
