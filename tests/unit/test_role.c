/* Unit tests for proxy/role.c: the outcomes each role may end with. */
#include "proxy/role.h"
#include "tests/unit/unit.h"

/* The outcomes of role r, as a bit per outcome. */
static unsigned ends_of(enum role r)
{
	unsigned bits = 0;

	for (int o = 0; o < OUT_COUNT; o++)
		if (role_may_end(r, (enum outcome)o))
			bits |= 1u << o;
	return bits;
}

#define B(o) (1u << (o))

int main(void)
{
	CHECK(ends_of(ROLE_UNDECIDED) == 0);
	CHECK(ends_of(ROLE_PASS) == B(OUT_PASS));
	CHECK(ends_of(ROLE_OWNER) == (B(OUT_OWNER) | B(OUT_RELEASED) | B(OUT_UNKNOWN)));
	CHECK(ends_of(ROLE_UNENFORCED) == B(OUT_UNENFORCED));
	CHECK(ends_of(ROLE_DUPLICATE) == (B(OUT_REPLAY) | B(OUT_CONFLICT) | B(OUT_IN_PROGRESS) |
					  B(OUT_UNKNOWN) | B(OUT_STORE_DOWN)));
	CHECK(ends_of(ROLE_REFUSED) == (B(OUT_REJECTED) | B(OUT_STORE_DOWN)));
	for (int r = 0; r < ROLE_COUNT; r++) {
		CHECK(!role_may_end((enum role)r, OUT_NONE));
		CHECK(role_name((enum role)r) != NULL);
	}
	CHECK_STR(role_name(ROLE_OWNER), "owner");
	CHECK_STR(role_name(ROLE_DUPLICATE), "duplicate");
	UNIT_DONE("role");
}
