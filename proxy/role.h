/*
 * What a request is to idemproxy, its role: decided where request.c's flow
 * learns it, read by the branches that ask "is this an owner?". What became
 * of the request is its outcome (outcome.h), set from what happened; each
 * role ends with one of a few outcomes (role_may_end). A duplicate that
 * waited and claims again may become an owner.
 */
#ifndef IDEMPROXY_ROLE_H
#define IDEMPROXY_ROLE_H

#include "proxy/outcome.h"

enum role {
	ROLE_UNDECIDED,	 /* its key, actor and fingerprint are being checked */
	ROLE_PASS,	 /* not subject to idempotency: forwarded as it came */
	ROLE_OWNER,	 /* holds its scope's claim: forwarded, its outcome recorded */
	ROLE_UNENFORCED, /* the store could not claim, store_unavailable fail-open:
			  * forwarded without idempotency */
	ROLE_DUPLICATE,	 /* another request holds its scope: replayed, refused or waiting */
	ROLE_REFUSED,	 /* answered with a problem of its own, holding no claim */
	ROLE_COUNT,
};

/* "owner", "duplicate", ...: the role's name, for the log. */
const char *role_name(enum role r);

/*
 * 1 when a request of role r may end with outcome o: a pass-through with
 * pass, an owner with owner, released or unknown (what its record became),
 * an unenforced one with unenforced, a duplicate with replay, conflict,
 * in_progress, unknown or store_unavailable, a refusal with rejected or
 * store_unavailable. Never an undecided role, never OUT_NONE.
 */
int role_may_end(enum role r, enum outcome o);

#endif
