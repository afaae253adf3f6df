/*
 * A tiny unit-test harness: CHECK records a failure and goes on; each test
 * binary ends with UNIT_DONE(), which prints "NAME: N passed, N failed" and
 * exits non-zero on any failure.
 */
#ifndef IDEMPROXY_UNIT_H
#define IDEMPROXY_UNIT_H

#include <stdio.h>
#include <string.h>

static int unit_passed, unit_failed;

#define CHECK(cond)                                                                  \
	do {                                                                         \
		if (cond) {                                                          \
			unit_passed++;                                               \
		} else {                                                             \
			unit_failed++;                                               \
			fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, \
				#cond);                                              \
		}                                                                    \
	} while (0)

#define CHECK_STR(a, b)                                                              \
	do {                                                                         \
		const char *a_ = (a), *b_ = (b);                                     \
		if (a_ && b_ && strcmp(a_, b_) == 0) {                               \
			unit_passed++;                                               \
		} else {                                                             \
			unit_failed++;                                               \
			fprintf(stderr, "%s:%d: \"%s\" != \"%s\"\n", __FILE__, __LINE__, \
				a_ ? a_ : "(null)", b_ ? b_ : "(null)");             \
		}                                                                    \
	} while (0)

#define UNIT_DONE(name)                                                              \
	do {                                                                         \
		printf("%s: %d passed, %d failed\n", name, unit_passed, unit_failed); \
		return unit_failed ? 1 : 0;                                          \
	} while (0)

#endif
