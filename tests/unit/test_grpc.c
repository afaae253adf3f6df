/* Unit tests for http/grpc.c: codes, grpc-status values, content types, messages, grpc-message. */
#include "http/grpc.h"
#include "tests/unit/unit.h"

#include <stdlib.h>
#include <string.h>

static void test_codes(void)
{
	CHECK_STR(grpc_code_name(GRPC_OK), "OK");
	CHECK_STR(grpc_code_name(GRPC_UNAUTHENTICATED), "UNAUTHENTICATED");
	CHECK(grpc_code_name(-1) == NULL && grpc_code_name(GRPC_CODES) == NULL);
	for (int c = 0; c < GRPC_CODES; c++) {
		char num[12];

		CHECK(grpc_code_parse(grpc_code_name(c)) == c);
		snprintf(num, sizeof(num), "%d", c);
		CHECK(grpc_code_parse(num) == c);
	}
	CHECK(grpc_code_parse("unavailable") == -1);
	CHECK(grpc_code_parse("17") == -1);
	CHECK(grpc_code_parse("") == -1);
	CHECK(grpc_code_parse("OK ") == -1);
}

static void test_status_value(void)
{
	CHECK(grpc_status_value("0", 1) == 0);
	CHECK(grpc_status_value("16", 2) == 16);
	CHECK(grpc_status_value("13x", 2) == 13);
	CHECK(grpc_status_value("17", 2) == -1);
	CHECK(grpc_status_value("01", 2) == -1);
	CHECK(grpc_status_value("", 0) == -1);
	CHECK(grpc_status_value("100", 3) == -1);
	CHECK(grpc_status_value("-1", 2) == -1);
	CHECK(grpc_status_value(" 1", 2) == -1);
}

static void test_content_type(void)
{
	CHECK(grpc_content_type("application/grpc"));
	CHECK(grpc_content_type("application/grpc+proto"));
	CHECK(grpc_content_type("Application/GRPC;charset=x"));
	CHECK(!grpc_content_type("application/grpc-web"));
	CHECK(!grpc_content_type("application/grpc-web+proto"));
	CHECK(!grpc_content_type("application/grpcx"));
	CHECK(!grpc_content_type("application/json"));
	CHECK(!grpc_content_type(NULL));
	CHECK(!grpc_content_type(""));
}

static void test_messages(void)
{
	const unsigned char one[] = {0, 0, 0, 0, 3, 'a', 'b', 'c'};
	const unsigned char two[] = {0, 0, 0, 0, 1, 'a', 1, 0, 0, 0, 0};
	const unsigned char cut[] = {0, 0, 0, 0, 4, 'a', 'b', 'c'};
	const unsigned char big[] = {0, 0xff, 0xff, 0xff, 0xff, 'a'};

	CHECK(grpc_messages(NULL, 0) == 0);
	CHECK(grpc_messages(one, sizeof(one)) == 1);
	CHECK(grpc_messages(two, sizeof(two)) == 2);
	CHECK(grpc_messages(cut, sizeof(cut)) == -1);
	CHECK(grpc_messages(one, 4) == -1);
	CHECK(grpc_messages(big, sizeof(big)) == -1);
	CHECK(grpc_messages(two, 6) == 1);
	CHECK(grpc_messages(two, 7) == -1);
}

static void test_message_encode(void)
{
	char out[64];

	CHECK(grpc_message_encode("plain text", out, sizeof(out)) == 10);
	CHECK_STR(out, "plain text");
	grpc_message_encode("100% \"sure\"\n\xc3\xa9", out, sizeof(out));
	CHECK_STR(out, "100%25 \"sure\"%0A%C3%A9");
	/* Cut whole: never half an escape. */
	CHECK(grpc_message_encode("ab%", out, 5) == 2);
	CHECK_STR(out, "ab");
	CHECK(grpc_message_encode("abc", out, 1) == 0);
	CHECK_STR(out, "");
	CHECK(grpc_message_encode("abc", out, 0) == 0);
}

int main(void)
{
	test_codes();
	test_status_value();
	test_content_type();
	test_messages();
	test_message_encode();
	UNIT_DONE("grpc");
}
