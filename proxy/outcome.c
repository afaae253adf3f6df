/* Outcome names, one table for the access log and the metrics. */
#include "proxy/outcome.h"

static const char *const outcome_names[] = {
	[OUT_NONE] = "none",           [OUT_PASS] = "pass",
	[OUT_OWNER] = "owner",         [OUT_REPLAY] = "replay",
	[OUT_CONFLICT] = "conflict",   [OUT_IN_PROGRESS] = "in_progress",
	[OUT_UNKNOWN] = "unknown",     [OUT_RELEASED] = "released",
	[OUT_REJECTED] = "rejected",   [OUT_UNENFORCED] = "unenforced",
	[OUT_STORE_DOWN] = "store_unavailable",
};

_Static_assert(sizeof(outcome_names) / sizeof(outcome_names[0]) == OUT_COUNT,
	       "outcome_names must name every outcome");

const char *outcome_name(enum outcome o)
{
	return outcome_names[o];
}
