/* Unit tests for proxy/trace.c: request ids and traceparent. */
#include "proxy/trace.h"
#include "tests/unit/unit.h"

#include <string.h>

#define TP_OK "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

static int valid(const char *v)
{
	return trace_request_id_valid(v, strlen(v));
}

static void test_request_id(void)
{
	char id[TRACE_REQUEST_ID_MAX + 2];

	CHECK(valid("a"));
	CHECK(valid("req-1/2:3~!"));
	CHECK(!valid(""));
	CHECK(!valid("a b"));
	CHECK(!valid("a\tb"));
	CHECK(!valid("caf\xc3\xa9"));
	CHECK(!trace_request_id_valid("a\0b", 3));
	memset(id, 'x', TRACE_REQUEST_ID_MAX);
	CHECK(trace_request_id_valid(id, TRACE_REQUEST_ID_MAX));
	CHECK(!trace_request_id_valid(id, TRACE_REQUEST_ID_MAX + 1));
}

static void test_made(void)
{
	char a[TRACE_REQUEST_ID_MADE + 1], b[TRACE_REQUEST_ID_MADE + 1];

	trace_request_id_make(a);
	trace_request_id_make(b);
	CHECK(strlen(a) == TRACE_REQUEST_ID_MADE);
	CHECK(strspn(a, "0123456789abcdef") == TRACE_REQUEST_ID_MADE);
	CHECK(valid(a));
	CHECK(strcmp(a, b) != 0);
	CHECK(memcmp(a, b, 16) == 0); /* one thread, one prefix */
}

static int parse(const char *v, struct trace *t)
{
	return trace_parent_parse(v, strlen(v), t);
}

static void test_traceparent(void)
{
	struct trace t;

	CHECK(parse(TP_OK, &t) == 1);
	CHECK_STR(t.trace_id, "4bf92f3577b34da6a3ce929d0e0e4736");
	CHECK_STR(t.parent_id, "00f067aa0ba902b7");
	CHECK(parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00", &t) == 1);
	/* uppercase hex, another version, a longer value, zero ids */
	CHECK(parse("00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01", &t) == 0);
	CHECK_STR(t.trace_id, "");
	CHECK_STR(t.parent_id, "");
	CHECK(parse("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", &t) == 0);
	CHECK(parse(TP_OK "-extra", &t) == 0);
	CHECK(parse("00-00000000000000000000000000000000-00f067aa0ba902b7-01", &t) == 0);
	CHECK(parse("00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", &t) == 0);
	CHECK(parse("00-4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7-01", &t) == 0);
	CHECK(parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0g", &t) == 0);
	CHECK(parse("", &t) == 0);
	CHECK(parse("00-", &t) == 0);
}

static void test_of(void)
{
	struct trace t;

	trace_of(&t, "client-id-1", TP_OK);
	CHECK_STR(t.request_id, "client-id-1");
	CHECK_STR(t.trace_id, "4bf92f3577b34da6a3ce929d0e0e4736");
	trace_of(&t, "bad id", "nonsense");
	CHECK(strlen(t.request_id) == TRACE_REQUEST_ID_MADE);
	CHECK_STR(t.trace_id, "");
	trace_of(&t, NULL, NULL);
	CHECK(strlen(t.request_id) == TRACE_REQUEST_ID_MADE);
	CHECK_STR(t.parent_id, "");
}

int main(void)
{
	test_request_id();
	test_made();
	test_traceparent();
	test_of();
	UNIT_DONE("trace");
}
