/*
 * What became of a request, as its access line and its counters name it.
 * Every request ends with exactly one outcome.
 */
#ifndef IDEMPROXY_OUTCOME_H
#define IDEMPROXY_OUTCOME_H

enum outcome {
	OUT_NONE,
	OUT_PASS,          /* not subject to idempotency */
	OUT_OWNER,         /* claimed and executed */
	OUT_REPLAY,
	OUT_CONFLICT,
	OUT_IN_PROGRESS,
	OUT_UNKNOWN,       /* outcome-unknown answered, or recorded unknown */
	OUT_RELEASED,
	OUT_REJECTED,      /* rejected before any claim */
	OUT_UNENFORCED,    /* fail-open: forwarded without idempotency */
	OUT_STORE_DOWN,
	OUT_COUNT,
};

/* "owner", "replay", ...: the outcome's name in logs and metrics. */
const char *outcome_name(enum outcome o);

#endif
