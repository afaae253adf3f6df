/* Unit tests for proxy/idemkey.c: Idempotency-Key validation and normalisation. */
#include "proxy/idemkey.h"
#include "tests/unit/unit.h"

#include <string.h>

/* Parses the NUL-terminated value; returns the key, or NULL when invalid. */
static const char *parse(const char *value)
{
	static char key[IDEMKEY_MAX + 1];
	size_t len = 0;

	if (idemkey_parse(value, strlen(value), key, &len) < 0)
		return NULL;
	if (len != strlen(key))
		return "(length mismatch)";
	return key;
}

/* idemkey_parse() on n bytes that may contain NUL; returns its result. */
static int parse_bytes(const char *value, size_t n)
{
	char key[IDEMKEY_MAX + 1];
	size_t len;

	return idemkey_parse(value, n, key, &len);
}

static void test_forms(void)
{
	CHECK_STR(parse("abc"), "abc");
	CHECK_STR(parse("\"abc\""), "abc");
	CHECK_STR(parse("8e03978e-40d5-43e8-bc93-6894a57f9324"),
		  "8e03978e-40d5-43e8-bc93-6894a57f9324");
	CHECK_STR(parse("\"8e03978e-40d5-43e8-bc93-6894a57f9324\""),
		  "8e03978e-40d5-43e8-bc93-6894a57f9324");
	CHECK_STR(parse("a"), "a");
	CHECK_STR(parse("!~{}[]:;,=?/\\'"), "!~{}[]:;,=?/\\'");
	CHECK_STR(parse("a\\b"), "a\\b");
	CHECK_STR(parse("\"a\\\\b\""), "a\\b");
	CHECK_STR(parse("\"a\\\"b\""), "a\"b");
	CHECK_STR(parse("\"\\\"\""), "\"");
	CHECK_STR(parse("\"\\\\\""), "\\");
}

static void test_blanks(void)
{
	CHECK_STR(parse("  abc\t"), "abc");
	CHECK_STR(parse("\t\"abc\"  "), "abc");
	CHECK(parse("a b") == NULL);
	CHECK(parse("\"a b\"") == NULL);
	CHECK(parse("\" abc\"") == NULL);
	CHECK(parse("a\tb") == NULL);
}

static void test_empty(void)
{
	CHECK(parse("") == NULL);
	CHECK(parse("   ") == NULL);
	CHECK(parse("\"\"") == NULL);
	CHECK(parse(" \"\" ") == NULL);
	CHECK(parse_bytes("abc", 0) < 0);
}

static void test_length(void)
{
	char v[IDEMKEY_MAX + 4];
	const char *k;

	memset(v, 'k', IDEMKEY_MAX);
	v[IDEMKEY_MAX] = '\0';
	k = parse(v);
	CHECK(k && strlen(k) == IDEMKEY_MAX);

	v[IDEMKEY_MAX] = 'k';
	v[IDEMKEY_MAX + 1] = '\0';
	CHECK(parse(v) == NULL);

	/* Quotes do not count toward the length; escapes count once. */
	v[0] = '"';
	memset(v + 1, 'k', IDEMKEY_MAX);
	v[IDEMKEY_MAX + 1] = '"';
	v[IDEMKEY_MAX + 2] = '\0';
	k = parse(v);
	CHECK(k && strlen(k) == IDEMKEY_MAX);

	v[1] = '\\';
	v[2] = '\\';
	k = parse(v);
	CHECK(k && strlen(k) == IDEMKEY_MAX - 1 && k[0] == '\\');

	memset(v + 1, 'k', IDEMKEY_MAX + 1);
	v[IDEMKEY_MAX + 2] = '"';
	v[IDEMKEY_MAX + 3] = '\0';
	CHECK(parse(v) == NULL);
}

static void test_bad_bytes(void)
{
	CHECK(parse("a\001b") == NULL);
	CHECK(parse("a\x7f") == NULL);
	CHECK(parse("a\rb") == NULL);
	CHECK(parse("abc\n") == NULL);
	CHECK(parse("caf\xc3\xa9") == NULL);
	CHECK(parse("\"caf\xc3\xa9\"") == NULL);
	CHECK(parse("\x80") == NULL);
	CHECK(parse_bytes("ab\0c", 4) < 0);
	CHECK(parse_bytes("\"ab\0c\"", 6) < 0);
}

static void test_quotes(void)
{
	CHECK(parse("\"") == NULL);
	CHECK(parse("\"abc") == NULL);
	CHECK(parse("abc\"") == NULL);
	CHECK(parse("ab\"c") == NULL);
	CHECK(parse("\"abc\\\"") == NULL);
	CHECK(parse("\"ab\"c\"") == NULL);
	CHECK(parse("\"abc\"x") == NULL);
	CHECK(parse("\"a\\nb\"") == NULL);
	CHECK(parse("\"a\\b\"") == NULL);
	CHECK(parse("\"\\\"") == NULL);
}

static void test_output_untouched_on_error(void)
{
	char key[IDEMKEY_MAX + 1] = "prev";
	size_t len = 4;

	CHECK(idemkey_parse("a b", 3, key, &len) < 0);
	CHECK_STR(key, "prev");
	CHECK(len == 4);
}

int main(void)
{
	test_forms();
	test_blanks();
	test_empty();
	test_length();
	test_bad_bytes();
	test_quotes();
	test_output_untouched_on_error();
	UNIT_DONE("idemkey");
}
