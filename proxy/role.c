/* Roles: one table of their names and the outcomes each may end with. */
#include "proxy/role.h"

#define ENDS(o) (1u << (o))

static const struct {
	const char *name;
	unsigned ends; /* a bit per outcome */
} roles[] = {
    [ROLE_UNDECIDED] = {"undecided", 0},
    [ROLE_PASS] = {"pass", ENDS(OUT_PASS)},
    [ROLE_OWNER] = {"owner", ENDS(OUT_OWNER) | ENDS(OUT_RELEASED) | ENDS(OUT_UNKNOWN)},
    [ROLE_UNENFORCED] = {"unenforced", ENDS(OUT_UNENFORCED)},
    [ROLE_DUPLICATE] = {"duplicate", ENDS(OUT_REPLAY) | ENDS(OUT_CONFLICT) | ENDS(OUT_IN_PROGRESS) |
					 ENDS(OUT_UNKNOWN) | ENDS(OUT_STORE_DOWN)},
    [ROLE_REFUSED] = {"refused", ENDS(OUT_REJECTED) | ENDS(OUT_STORE_DOWN)},
};

_Static_assert(sizeof(roles) / sizeof(roles[0]) == ROLE_COUNT, "roles must name every role");
_Static_assert(OUT_COUNT <= 32, "an outcome is a bit of roles[].ends");

const char *role_name(enum role r)
{
	return roles[r].name;
}

int role_may_end(enum role r, enum outcome o)
{
	return (roles[r].ends >> o) & 1u;
}
