/* Unit tests for proxy/fingerprint.c: canonical JSON and request fingerprints. */
#include "proxy/fingerprint.h"
#include "proxy/http.h"
#include "tests/unit/unit.h"

#include <event2/buffer.h>
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CANON_MAX 4096
#define DEEP_OK	  100 /* nesting the canonical form must accept */
#define TOO_DEEP  300 /* nesting beyond fingerprint.c's limit */

/*
 * The canonical form of json with the given fields, as a NUL-terminated
 * string in a static buffer, or NULL when fingerprint_canonical_json fails.
 */
static const char *canon_fields(const char *json, const struct fp_field *fields, int nfields)
{
	static char text[CANON_MAX];
	struct fp_buf b = {NULL, 0, 0};
	const char *r = NULL;

	if (fingerprint_canonical_json((const unsigned char *)json, strlen(json), fields, nfields,
				       &b) == 0 &&
	    b.len < sizeof(text)) {
		memcpy(text, b.data, b.len);
		text[b.len] = '\0';
		r = text;
	}
	fp_buf_free(&b);
	return r;
}

/* fingerprint_canonical_json of the NUL-terminated json, appended to b. */
static int append(struct fp_buf *b, const char *json)
{
	return fingerprint_canonical_json((const unsigned char *)json, strlen(json), NULL, 0, b);
}

static const char *canon(const char *json)
{
	return canon_fields(json, NULL, 0);
}

/* 1 when a and b have the same canonical form, 0 when not or when either is invalid. */
static int same(const char *a, const char *b)
{
	char first[CANON_MAX];
	const char *c;

	c = canon(a);
	if (!c)
		return 0;
	strcpy(first, c);
	c = canon(b);
	return c && strcmp(first, c) == 0;
}

struct req {
	const char *method, *path, *query, *body;
	enum fp_mode mode;
	const struct fp_field *fields;
	int nfields;
};

static void fp(const struct req *r, unsigned char out[FINGERPRINT_LEN])
{
	int rc;

	memset(out, 0, FINGERPRINT_LEN);
	rc =
	    fingerprint_request(r->method, r->path, strlen(r->path), r->query,
				r->query ? strlen(r->query) : 0, (const unsigned char *)r->body,
				r->body ? strlen(r->body) : 0, r->mode, r->fields, r->nfields, out);
	CHECK(rc == 0);
}

static int fp_equal(const struct req *a, const struct req *b)
{
	unsigned char x[FINGERPRINT_LEN], y[FINGERPRINT_LEN];

	fp(a, x);
	fp(b, y);
	return memcmp(x, y, FINGERPRINT_LEN) == 0;
}

static void test_structure(void)
{
	CHECK_STR(canon("{ \"b\" : 1 , \"a\" : [ 1 , 2 , { } ] }"), "{\"a\":[1,2,{}],\"b\":1}");
	CHECK_STR(canon(" \n\t[ ]\r\n"), "[]");
	CHECK_STR(canon("{\"b\":{\"d\":1,\"c\":2},\"a\":null}"),
		  "{\"a\":null,\"b\":{\"c\":2,\"d\":1}}");
	CHECK_STR(canon("[true,false,null]"), "[true,false,null]");
	CHECK_STR(canon("\"x\""), "\"x\"");
	CHECK_STR(canon("7"), "7");
	CHECK(same("{\"a\":1,\"b\":2}", "{\"b\":2,\"a\":1}"));
	CHECK(!same("[1,2]", "[2,1]"));
	CHECK(!same("{\"a\":[1]}", "{\"a\":1}"));
	CHECK(!same("{\"a\":{\"b\":1}}", "{\"a\":{\"b\":2}}"));
	CHECK(!same("{\"a\":\"1\"}", "{\"a\":1}"));
	CHECK(!same("{\"a\":null}", "{}"));
}

static void test_key_order(void)
{
	/* Raw UTF-8 bytes, a shorter prefix first; upper case before lower. */
	CHECK_STR(canon("{\"ab\":1,\"a\":2,\"B\":3,\"\":4,\"\xc3\xa9\":5,\"z\":6}"),
		  "{\"\":4,\"B\":3,\"a\":2,\"ab\":1,\"z\":6,\"\xc3\xa9\":5}");
	/* A NUL inside a key sorts by its bytes too. */
	CHECK_STR(canon("{\"a\\u0000b\":1,\"a\":2}"), "{\"a\":2,\"a\\u0000b\":1}");
}

static void test_duplicates(void)
{
	CHECK_STR(canon("{\"b\":0,\"a\":1,\"a\":2}"), "{\"a\":1,\"a\":2,\"b\":0}");
	CHECK(!same("{\"a\":1,\"a\":2}", "{\"a\":1}"));
	CHECK(!same("{\"a\":1,\"a\":2}", "{\"a\":2}"));
	CHECK(!same("{\"a\":1,\"a\":2}", "{\"a\":2,\"a\":1}"));
	CHECK(same("{\"a\":1,\"b\":0,\"a\":2}", "{\"b\":0,\"a\":1,\"a\":2}"));
}

static void test_strings(void)
{
	CHECK(same("\"\\u00e9\"", "\"\xc3\xa9\""));
	CHECK(same("\"\\u00E9\"", "\"\xc3\xa9\""));
	CHECK(same("\"\\/\"", "\"/\""));
	CHECK(same("\"\\ud83d\\ude00\"", "\"\xf0\x9f\x98\x80\""));
	CHECK(same("{\"\\u0061\":1}", "{\"a\":1}"));
	CHECK_STR(canon("\"a\\\"b\\\\c\\/d\""), "\"a\\\"b\\\\c/d\"");
	CHECK_STR(canon("\"\\n\\t\\b\\f\\r\\u001F\""),
		  "\"\\u000a\\u0009\\u0008\\u000c\\u000d\\u001f\"");
	CHECK_STR(canon("\"\\u007f\\u2028\""), "\"\x7f\xe2\x80\xa8\"");
	CHECK_STR(canon("\"\\u0000\""), "\"\\u0000\"");
	CHECK(!same("\"a\"", "\"A\""));
	CHECK(!same("\"a \"", "\"a\""));
}

static void test_numbers(void)
{
	const char *const same32[] = {"32",	"32.0",	    "3.2e1",	"320e-1",
				      "0.32E2", "3.20E+01", "32000e-3", "0.0032e4"};
	size_t i;

	for (i = 0; i < sizeof(same32) / sizeof(same32[0]); i++)
		CHECK_STR(canon(same32[i]), "32");
	CHECK_STR(canon("-0"), "0");
	CHECK_STR(canon("-0.0e5"), "0");
	CHECK_STR(canon("0e-7"), "0");
	CHECK(same("[0]", "[-0]"));
	CHECK(!same("1", "1.0000001"));
	CHECK(!same("1", "-1"));
	CHECK_STR(canon("1.0000001"), "1.0000001");
	CHECK_STR(canon("-12.50"), "-12.5");
	CHECK_STR(canon("0.5"), "0.5");
	CHECK_STR(canon("1e-6"), "0.000001");
	CHECK_STR(canon("1e-7"), "1e-7");
	CHECK_STR(canon("1.5e-7"), "1.5e-7");
	CHECK_STR(canon("1e21"), "1e+21");
	CHECK_STR(canon("1e20"), "100000000000000000000");
	CHECK_STR(canon("123456789012345678901"), "123456789012345678901");
	CHECK_STR(canon("1234567890123456789012"), "1.234567890123456789012e+21");
	CHECK_STR(canon("-1.25e300"), "-1.25e+300");
	CHECK_STR(canon("1e999999999999999"), "1e+999999999999999");
	/* Precision beyond a double still tells numbers apart. */
	CHECK(!same("9007199254740993", "9007199254740992"));
	CHECK(!same("0.1000000000000000000001", "0.1"));
	CHECK(same("100000000000000000000000000001e-29", "1.00000000000000000000000000001"));
	/* Exponents too long to hold are not canonicalised. */
	CHECK(canon("1e1000000000000000") == NULL);
	/* ... nor are those whose canonical form would be (found by fuzz_fingerprint). */
	CHECK(canon("129999999e999999999999999") == NULL);
	CHECK(canon("0.001e-999999999999997") == NULL);
	CHECK_STR(canon("0.01e-999999999999997"), "1e-999999999999999");
	CHECK_STR(canon("1e0000000000000000000001"), "10");
}

/* Objects in order and out of order inside each other, and fields through both. */
static void test_layouts(void)
{
	static const struct fp_field inner[] = {{"a.b", FPT_NONE}, {"z.y", FPT_NONE}};

	CHECK_STR(canon("{\"a\":{\"c\":1,\"b\":2},\"z\":1}"), "{\"a\":{\"b\":2,\"c\":1},\"z\":1}");
	CHECK_STR(canon("{\"z\":{\"a\":1,\"b\":2},\"a\":[{\"y\":{},\"x\":[]}]}"),
		  "{\"a\":[{\"x\":[],\"y\":{}}],\"z\":{\"a\":1,\"b\":2}}");
	CHECK_STR(canon("[{\"b\":[{\"d\":1,\"c\":{\"f\":1,\"e\":2}}],\"a\":0},{\"x\":{}},{}]"),
		  "[{\"a\":0,\"b\":[{\"c\":{\"e\":2,\"f\":1},\"d\":1}]},{\"x\":{}},{}]");
	CHECK_STR(canon("{\"a\":{\"b\":{\"d\":1,\"c\":2}},\"b\":{\"a\":{\"d\":1,\"c\":2}}}"),
		  "{\"a\":{\"b\":{\"c\":2,\"d\":1}},\"b\":{\"a\":{\"c\":2,\"d\":1}}}");
	/* Keys that differ only after an escape, and a shorter key first. */
	CHECK_STR(canon("{\"a\\\"\":1,\"a\\n\":2,\"a\":3,\"a\\\\\":4}"),
		  "{\"a\":3,\"a\\u000a\":2,\"a\\\"\":1,\"a\\\\\":4}");
	CHECK_STR(
	    canon_fields(
		"{\"z\":{\"y\":{\"b\":1,\"a\":2},\"x\":0},\"a\":{\"b\":[3,{\"d\":1,\"c\":2}]}}",
		inner, 2),
	    "{\"a.b\":[3,{\"c\":2,\"d\":1}],\"z.y\":{\"a\":2,\"b\":1}}");
}

static void test_invalid(void)
{
	const char *const bad[] = {
	    "",
	    "   ",
	    "{",
	    "{\"a\":}",
	    "{\"a\" 1}",
	    "[1,]",
	    "{} {}",
	    "{}x",
	    "1 2",
	    "// c\n1",
	    "/* c */ 1",
	    "01",
	    "1.",
	    ".5",
	    "+1",
	    "NaN",
	    "'a'",
	    "\"a",
	    "\"\x01\"",
	    "\"\xff\"",
	    "\"\xc3\"",
	    "\"\\x\"",
	    "\"\\ud800\"",
	    "\"\\udc00\"",
	    "\"\\ud800x\"",
	    "\"\\ud800\\u0041\"",
	    "\"\\ud800\\ud800\"",
	    "[1]]",
	    "\xef\xbb\xbf{}",
	};
	struct fp_buf b = {NULL, 0, 0};
	size_t i;
	char deep[2 * TOO_DEEP + 1];

	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		if (canon(bad[i]) != NULL)
			fprintf(stderr, "accepted: %s\n", bad[i]);
		CHECK(canon(bad[i]) == NULL);
	}
	CHECK(fingerprint_canonical_json((const unsigned char *)"{\"a\":\0}", 7, NULL, 0, &b) < 0);

	/* Failure appends nothing; success appends. */
	CHECK(append(&b, "[1]") == 0);
	CHECK(append(&b, "[1,{\"a\":[2") < 0);
	CHECK(append(&b, "2") == 0);
	CHECK(b.len == 4 && memcmp(b.data, "[1]2", 4) == 0);
	fp_buf_free(&b);
	CHECK(b.data == NULL && b.len == 0);

	/* Nesting is bounded. */
	memset(deep, '[', TOO_DEEP);
	memset(deep + TOO_DEEP, ']', TOO_DEEP);
	deep[2 * TOO_DEEP] = '\0';
	CHECK(canon(deep) == NULL);
	memset(deep, '[', DEEP_OK);
	memset(deep + DEEP_OK, ']', DEEP_OK);
	deep[2 * DEEP_OK] = '\0';
	CHECK(canon(deep) != NULL);
}

static void test_fields(void)
{
	const char *body = "{\"title\":\"  Intro To C \\n\",\"topic\":\"Systems\","
			   "\"lessons\":\"12\",\"meta\":{\"level\":\"3.50\",\"tags\":[\"x\"]},"
			   "\"flag\":true,\"n\":null,\"price\":12.0,\"extra\":1}";
	struct fp_field f[] = {
	    {"title", FPT_TRIM},	{"topic", FPT_LOWER},  {"lessons", FPT_INT},
	    {"meta.level", FPT_NUMBER}, {"flag", FPT_STRING},  {"missing", FPT_NONE},
	    {"meta.tags", FPT_NONE},	{"title.x", FPT_NONE}, {"price", FPT_STRING},
	};

	CHECK_STR(canon_fields(body, f, 9),
		  "{\"flag\":\"true\",\"lessons\":12,\"meta.level\":3.5,\"meta.tags\":[\"x\"],"
		  "\"price\":\"12\",\"title\":\"Intro To C\",\"topic\":\"systems\"}");

	/* Fields not selected never matter; selected ones always do. */
	CHECK(strcmp(canon_fields(body, f, 2),
		     "{\"title\":\"Intro To C\",\"topic\":\"systems\"}") == 0);
	CHECK_STR(canon_fields("{\"topic\":\"SYSTEMS\",\"title\":\"Intro To C\",\"z\":9}", f, 2),
		  "{\"title\":\"Intro To C\",\"topic\":\"systems\"}");

	/* Absent is distinct from null. */
	CHECK_STR(canon_fields("{}", f + 5, 1), "{}");
	CHECK_STR(canon_fields("{\"missing\":null}", f + 5, 1), "{\"missing\":null}");

	/* The last of duplicate members wins. */
	CHECK_STR(canon_fields("{\"topic\":\"A\",\"topic\":\"B\"}", f + 1, 1), "{\"topic\":\"b\"}");

	/* Not an object: invalid for field selection. */
	CHECK(canon_fields("[1]", f, 1) == NULL);
	CHECK(canon_fields("\"title\"", f, 1) == NULL);
	CHECK(canon_fields("{", f, 1) == NULL);
}

static void test_transforms(void)
{
	struct fp_field trim = {"v", FPT_TRIM}, lower = {"v", FPT_LOWER}, to_int = {"v", FPT_INT},
			num = {"v", FPT_NUMBER}, str = {"v", FPT_STRING}, none = {"v", FPT_NONE};

	CHECK_STR(canon_fields("{\"v\":\" \\t\\r\\n a b \\u00a0\\u3000\"}", &trim, 1),
		  "{\"v\":\"a b\"}");
	CHECK_STR(canon_fields("{\"v\":\"   \"}", &trim, 1), "{\"v\":\"\"}");
	CHECK_STR(canon_fields("{\"v\":5}", &trim, 1), "{\"v\":5}");
	CHECK_STR(canon_fields("{\"v\":\"\xc3\x89"
			       "Ab-Z\"}",
			       &lower, 1),
		  "{\"v\":\"\xc3\x89"
		  "ab-z\"}");
	CHECK_STR(canon_fields("{\"v\":[\"A\"]}", &lower, 1), "{\"v\":[\"A\"]}");

	CHECK_STR(canon_fields("{\"v\":\"12\"}", &to_int, 1), "{\"v\":12}");
	CHECK_STR(canon_fields("{\"v\":\"12.0\"}", &to_int, 1), "{\"v\":12}");
	CHECK_STR(canon_fields("{\"v\":\"1.2e1\"}", &to_int, 1), "{\"v\":12}");
	CHECK_STR(canon_fields("{\"v\":12.0}", &to_int, 1), "{\"v\":12}");
	CHECK_STR(canon_fields("{\"v\":12.5}", &to_int, 1), "{\"v\":12.5}");
	CHECK_STR(canon_fields("{\"v\":\"12.5\"}", &to_int, 1), "{\"v\":\"12.5\"}");
	CHECK_STR(canon_fields("{\"v\":\" 12\"}", &to_int, 1), "{\"v\":\" 12\"}");
	CHECK_STR(canon_fields("{\"v\":\"twelve\"}", &to_int, 1), "{\"v\":\"twelve\"}");
	CHECK_STR(canon_fields("{\"v\":true}", &to_int, 1), "{\"v\":true}");

	CHECK_STR(canon_fields("{\"v\":\"3.50\"}", &num, 1), "{\"v\":3.5}");
	CHECK_STR(canon_fields("{\"v\":\"-0\"}", &num, 1), "{\"v\":0}");
	CHECK_STR(canon_fields("{\"v\":\"0x10\"}", &num, 1), "{\"v\":\"0x10\"}");
	CHECK_STR(canon_fields("{\"v\":\"\"}", &num, 1), "{\"v\":\"\"}");
	CHECK_STR(canon_fields("{\"v\":{\"a\":1}}", &num, 1), "{\"v\":{\"a\":1}}");

	CHECK_STR(canon_fields("{\"v\":3.20e1}", &str, 1), "{\"v\":\"32\"}");
	CHECK_STR(canon_fields("{\"v\":false}", &str, 1), "{\"v\":\"false\"}");
	CHECK_STR(canon_fields("{\"v\":null}", &str, 1), "{\"v\":\"null\"}");
	CHECK_STR(canon_fields("{\"v\":\"x\"}", &str, 1), "{\"v\":\"x\"}");
	CHECK_STR(canon_fields("{\"v\":[1]}", &str, 1), "{\"v\":[1]}");

	CHECK_STR(canon_fields("{\"v\":{\"b\":1,\"a\":2}}", &none, 1), "{\"v\":{\"a\":2,\"b\":1}}");
}

static void test_nested_paths(void)
{
	struct fp_field f = {"a.b.c", FPT_NONE}, empty = {"a..b", FPT_NONE};

	CHECK_STR(canon_fields("{\"a\":{\"b\":{\"c\":[1,2]}}}", &f, 1), "{\"a.b.c\":[1,2]}");
	CHECK_STR(canon_fields("{\"a\":{\"b\":[{\"c\":1}]}}", &f, 1), "{}");
	CHECK_STR(canon_fields("{\"a\":{\"b\":\"c\"}}", &f, 1), "{}");
	CHECK_STR(canon_fields("{\"a.b.c\":1}", &f, 1), "{}");
	CHECK_STR(canon_fields("{\"a\":{\"b\":{\"c\":1}},\"a\":{\"b\":{}}}", &f, 1), "{}");
	CHECK_STR(canon_fields("{\"a\":{\"\":{\"b\":1}}}", &empty, 1), "{\"a..b\":1}");
}

static void test_request(void)
{
	struct fp_field f[] = {{"a", FPT_NONE}};
	struct req base = {"POST", "/api/x", "b=2&a=1", "{\"a\":1,\"b\":[1,2]}", FP_JSON, NULL, 0};
	struct req r;
	unsigned char x[FINGERPRINT_LEN], y[FINGERPRINT_LEN];

	fp(&base, x);
	fp(&base, y);
	CHECK(memcmp(x, y, FINGERPRINT_LEN) == 0);

	r = base;
	r.body = " { \"b\" : [1, 2.0], \"a\" : 1e0 } ";
	CHECK(fp_equal(&base, &r));
	r.body = "{\"a\":1,\"b\":[2,1]}";
	CHECK(!fp_equal(&base, &r));

	r = base;
	r.method = "PUT";
	CHECK(!fp_equal(&base, &r));
	r = base;
	r.path = "/api/y";
	CHECK(!fp_equal(&base, &r));

	/* Query: parameters sorted, empty ones dropped, no percent-decoding. */
	r = base;
	r.query = "a=1&b=2";
	CHECK(fp_equal(&base, &r));
	r.query = "&a=1&&b=2&";
	CHECK(fp_equal(&base, &r));
	r.query = "a=1&b=3";
	CHECK(!fp_equal(&base, &r));
	r.query = "a=1&b=2&b=2";
	CHECK(!fp_equal(&base, &r));
	r.query = "a=%31&b=2";
	CHECK(!fp_equal(&base, &r));
	r.query = "a=1b=2";
	CHECK(!fp_equal(&base, &r));
	r = base;
	r.query = NULL;
	base.query = "";
	CHECK(fp_equal(&base, &r));
	base.query = "&";
	CHECK(fp_equal(&base, &r));
	base.query = "b=2&a=1";

	/* Parts cannot run into each other. */
	r = base;
	r.path = "/api/xb=2&a=1";
	r.query = NULL;
	CHECK(!fp_equal(&base, &r));

	/* FP_NONE ignores the body; FP_BODY takes its bytes as they are. */
	base.mode = FP_NONE;
	r = base;
	r.body = "completely different";
	CHECK(fp_equal(&base, &r));
	r.body = NULL;
	CHECK(fp_equal(&base, &r));
	r.method = "PUT";
	CHECK(!fp_equal(&base, &r));

	base.mode = FP_BODY;
	r = base;
	r.body = "{\"b\":[1,2],\"a\":1}";
	CHECK(!fp_equal(&base, &r));
	r.body = base.body;
	CHECK(fp_equal(&base, &r));
	r.mode = FP_JSON;
	CHECK(!fp_equal(&base, &r));

	/* Invalid JSON under FP_JSON is its raw bytes, as under FP_BODY. */
	base.body = "{\"a\":1,";
	r = base;
	r.mode = FP_JSON;
	CHECK(fp_equal(&base, &r));
	r.fields = f;
	r.nfields = 1;
	CHECK(fp_equal(&base, &r));
	base.body = "[1]";
	r.body = "[1]";
	CHECK(fp_equal(&base, &r));

	/* Selected fields. */
	base.mode = FP_JSON;
	base.body = "{\"a\":1,\"z\":2}";
	base.fields = f;
	base.nfields = 1;
	r = base;
	r.body = "{\"z\":3,\"a\":1.0}";
	CHECK(fp_equal(&base, &r));
	r.body = "{\"a\":2,\"z\":2}";
	CHECK(!fp_equal(&base, &r));
	r.body = "{\"z\":2}";
	CHECK(!fp_equal(&base, &r));

	/* FP_UNSET means the default, json. */
	base.fields = NULL;
	base.nfields = 0;
	r = base;
	r.mode = FP_UNSET;
	r.body = "{\"z\":2,\"a\":1}";
	CHECK(fp_equal(&base, &r));

	/* Empty body under json: raw (empty) bytes, same as body mode. */
	base.body = "";
	r = base;
	r.mode = FP_BODY;
	r.body = NULL;
	CHECK(fp_equal(&base, &r));
	r.mode = FP_NONE;
	CHECK(!fp_equal(&base, &r));
}

static void test_known_digest(void)
{
	static const unsigned char expect[FINGERPRINT_LEN] = {
	    0xc4, 0x5d, 0xe1, 0xd0, 0x2a, 0x9d, 0xaa, 0xf3, 0xc7, 0x61, 0x87,
	    0xf0, 0xc8, 0x38, 0x9e, 0x72, 0xc6, 0x91, 0xab, 0x3f, 0x45, 0x41,
	    0x53, 0x7e, 0x34, 0x94, 0x89, 0x0b, 0x9e, 0x08, 0xa5, 0xd4,
	};
	struct req r = {"POST", "/p", "b&a", "{\"x\":1}", FP_JSON, NULL, 0};
	unsigned char x[FINGERPRINT_LEN];

	/*
	 * Stored fingerprints outlive a release, so the digest input must not
	 * drift. Expected value computed independently from the layout:
	 * len64("POST") "POST" len64("/p") "/p" len64("a&b") "a&b" 'J'
	 * len64("{\"x\":1}") "{\"x\":1}", len64 being 8 bytes big-endian.
	 */
	fp(&r, x);
	CHECK(memcmp(x, expect, FINGERPRINT_LEN) == 0);
}

/*
 * IDEMPROXY_FP_BENCH=1: what fingerprinting a 1 MiB JSON body costs, for
 * bodies of several shapes, against the targets of 10 ms and 4 MiB beyond
 * the body. Time is the median thread CPU time of BENCH_RUNS; memory is
 * the peak of live heap bytes (every allocation in the process, yajl's
 * and OpenSSL's included, counted by the allocator below). The raw-bytes
 * fingerprint of the same body is the reference measured in the same run.
 */
#define BENCH_BODY	(1 << 20)
#define BENCH_RUNS	21
#define BENCH_MAX_MS	10.0
#define BENCH_MAX_EXTRA (4.0 * 1024 * 1024)

#ifndef __SANITIZE_ADDRESS__
/* Counting allocator: glibc's, with the live and peak bytes kept. */
void *__libc_malloc(size_t n);
void *__libc_calloc(size_t n, size_t size);
void *__libc_realloc(void *p, size_t n);
void *__libc_memalign(size_t align, size_t n);
void __libc_free(void *p);

static size_t bench_live, bench_peak;

static void *bench_count(void *p)
{
	if (p) {
		bench_live += malloc_usable_size(p);
		if (bench_live > bench_peak)
			bench_peak = bench_live;
	}
	return p;
}

void *malloc(size_t n)
{
	return bench_count(__libc_malloc(n));
}

void *calloc(size_t n, size_t size)
{
	return bench_count(__libc_calloc(n, size));
}

void *realloc(void *p, size_t n)
{
	size_t was = p ? malloc_usable_size(p) : 0;
	void *q = __libc_realloc(p, n);

	if (q || n == 0)
		bench_live -= was;
	return bench_count(q);
}

void *memalign(size_t align, size_t n)
{
	return bench_count(__libc_memalign(align, n));
}

void *aligned_alloc(size_t align, size_t n)
{
	return bench_count(__libc_memalign(align, n));
}

int posix_memalign(void **p, size_t align, size_t n)
{
	*p = bench_count(__libc_memalign(align, n));
	return *p ? 0 : 12; /* ENOMEM */
}

void free(void *p)
{
	if (p)
		bench_live -= malloc_usable_size(p);
	__libc_free(p);
}
#define BENCH_MEMORY 1
#else
static size_t bench_live, bench_peak;
#define BENCH_MEMORY 0
#endif

/* Appends element i of the shape to b (at most 512 bytes). Returns the bytes written. */
typedef int (*bench_element)(char *b, int i);

static int bench_records(char *b, int i)
{
	return sprintf(
	    b,
	    "{\"id\":%d,\"name\":\"customer %d\",\"tags\":[\"a\",\"b\"],\"amount\":%d.25,"
	    "\"currency\":\"eur\",\"active\":true,\"meta\":{\"source\":\"web\",\"attempt\":%d}}",
	    i, i, i % 10000, i % 7);
}

static int bench_sorted(char *b, int i)
{
	return sprintf(b,
		       "{\"active\":true,\"amount\":%d.25,\"currency\":\"eur\",\"id\":%d,"
		       "\"meta\":{\"attempt\":%d,\"source\":\"web\"},\"name\":\"customer "
		       "%d\",\"tags\":[\"a\",\"b\"]}",
		       i % 10000, i, i % 7, i);
}

static int bench_numbers(char *b, int i)
{
	return sprintf(b, "%d", i * 7919);
}

static int bench_decimals(char *b, int i)
{
	return sprintf(b, "%d.%03de%d", i % 1000, i % 997, i % 20 - 10);
}

static int bench_escapes(char *b, int i)
{
	return sprintf(b, "\"line %d\\n\\ttab \\\"quoted\\\" \\u00e9\\u20ac\\ud83d\\ude00\"", i);
}

static int bench_small_objects(char *b, int i)
{
	return sprintf(b, "{\"b\":%d,\"a\":0}", i % 10);
}

static int bench_empty_objects(char *b, int i)
{
	(void)i;
	return sprintf(b, "{}");
}

static int bench_deep(char *b, int i)
{
	int n = 0, depth = 200;

	(void)i;
	for (int k = 0; k < depth; k++)
		n += sprintf(b + n, "{\"k\":");
	n += sprintf(b + n, "0");
	for (int k = 0; k < depth; k++)
		b[n++] = '}';
	b[n] = '\0';
	return n;
}

/* A flat object with many keys in no order. */
static int bench_wide(char *b, int i)
{
	return sprintf(b, "\"k%08x\":%d", (unsigned)i * 2654435761u, i);
}

struct bench_shape {
	const char *name;
	bench_element element;
	int object; /* elements are members of one object, else elements of one array */
};

/* A body of the shape padded with spaces to exactly BENCH_BODY bytes. */
static char *bench_body(const struct bench_shape *shape)
{
	char *b = malloc(BENCH_BODY + 1);
	size_t n = 1;
	int i = 0, k;

	if (!b)
		return NULL;
	b[0] = shape->object ? '{' : '[';
	for (;;) {
		char el[8192];

		k = shape->element(el, i);
		if (n + (i > 0) + (size_t)k + 1 > BENCH_BODY)
			break;
		if (i++ > 0)
			b[n++] = ',';
		memcpy(b + n, el, (size_t)k);
		n += (size_t)k;
	}
	b[n++] = shape->object ? '}' : ']';
	memset(b + n, ' ', BENCH_BODY - n);
	b[BENCH_BODY] = '\0';
	return b;
}

static double bench_cpu_ms(void)
{
	struct timespec t;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
	return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static int bench_double_cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

/* Median CPU milliseconds of one fingerprint of body in mode; -1 when one fails. */
static double bench_time(const char *body, enum fp_mode mode)
{
	unsigned char out[FINGERPRINT_LEN];
	double t[BENCH_RUNS], start;

	for (int r = 0; r < BENCH_RUNS; r++) {
		start = bench_cpu_ms();
		if (fingerprint_request("POST", "/v1/charges", 11, NULL, 0,
					(const unsigned char *)body, BENCH_BODY, mode, NULL, 0,
					out) != 0)
			return -1;
		t[r] = bench_cpu_ms() - start;
	}
	qsort(t, BENCH_RUNS, sizeof(t[0]), bench_double_cmp);
	return t[BENCH_RUNS / 2];
}

static int bench(void)
{
	static const struct bench_shape shapes[] = {
	    {"records", bench_records, 0},
	    {"records-sorted", bench_sorted, 0},
	    {"integers", bench_numbers, 0},
	    {"decimals", bench_decimals, 0},
	    {"escaped-strings", bench_escapes, 0},
	    {"small-objects", bench_small_objects, 0},
	    {"empty-objects", bench_empty_objects, 0},
	    {"deep-200", bench_deep, 0},
	    {"wide-object", bench_wide, 1},
	};
	unsigned char out[FINGERPRINT_LEN];
	int missed = 0, failed = 0;

	printf("fingerprint of a %d-byte JSON body: shape, json ms, raw ms, ratio, MiB beyond the "
	       "body, within 10 ms and 4 MiB\n",
	       BENCH_BODY);
	for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++) {
		char *body = bench_body(&shapes[i]);
		double json, raw, extra;
		char mib[32] = "n/a";
		size_t base;
		int ok;

		if (!body)
			return 1;
		json = bench_time(body, FP_JSON);
		raw = bench_time(body, FP_BODY);
		base = bench_live;
		bench_peak = bench_live;
		if (fingerprint_request("POST", "/v1/charges", 11, NULL, 0,
					(const unsigned char *)body, BENCH_BODY, FP_JSON, NULL, 0,
					out) != 0)
			json = -1;
		extra = (double)(bench_peak - base);
		ok = json >= 0 && json <= BENCH_MAX_MS &&
		     (!BENCH_MEMORY || extra <= BENCH_MAX_EXTRA);
		failed += json < 0;
		missed += !ok;
		if (BENCH_MEMORY)
			snprintf(mib, sizeof(mib), "%.2f", extra / (1024.0 * 1024.0));
		printf("fingerprint %-16s %7.2f %7.2f %6.1f %7s %s\n", shapes[i].name, json, raw,
		       raw > 0 ? json / raw : 0.0, mib, ok ? "yes" : "MISSED");
		free(body);
	}
	printf("fingerprint bench: %d shapes, %d missed a target\n",
	       (int)(sizeof(shapes) / sizeof(shapes[0])), missed);
	return failed ? 1 : 0;
}

#define OF_BODY "{\"a\":1}"

/* The request "POST /orders?b=2&a=1" with the header lines extra and OF_BODY, parsed. */
static struct http_msg *of_request(const char *extra)
{
	struct http_parser *p = http_parser_new(HTTP_REQUEST, 1000);
	struct evbuffer *in = evbuffer_new();
	struct http_msg *m = NULL;

	if (p && in &&
	    evbuffer_add_printf(in,
				"POST /orders?b=2&a=1 HTTP/1.1\r\nHost: x\r\n%s"
				"Content-Length: %zu\r\n\r\n" OF_BODY,
				extra, strlen(OF_BODY)) > 0 &&
	    http_parser_feed(p, in) == HTTP_DONE)
		m = http_parser_take(p);
	evbuffer_free(in);
	http_parser_free(p);
	return m;
}

/* fingerprint_of_request of m on r; 0 or -1. */
static int of(const struct route *r, const struct http_msg *m, unsigned char out[FINGERPRINT_LEN])
{
	size_t len = evbuffer_get_length(m->body);

	return fingerprint_of_request(r, m, len ? evbuffer_pullup(m->body, -1) : NULL, len, out);
}

static void test_of_request(void)
{
	char *names[] = {"X-Tenant", "X-Region"};
	struct route plain = {.fingerprint = FP_JSON};
	struct route with = {.fingerprint = FP_JSON, .fp_headers = names, .nfp_headers = 2};
	struct http_msg *a = of_request("X-Tenant: t1\r\nX-Other: o\r\n");
	struct http_msg *b = of_request("x-tenant: t1\r\n");
	struct http_msg *c = of_request("X-Tenant: t2\r\n");
	struct http_msg *d = of_request("X-Region: t1\r\n");
	unsigned char fa[FINGERPRINT_LEN], fb[FINGERPRINT_LEN], want[FINGERPRINT_LEN];
	struct fp_header h = {0, "t1", 2};

	CHECK(a && b && c && d);
	if (!a || !b || !c || !d)
		goto out;
	/* Without fingerprint_headers: the request's own fingerprint. */
	CHECK(of(&plain, a, fa) == 0);
	CHECK(fingerprint_request("POST", "/orders", 7, "b=2&a=1", 7,
				  (const unsigned char *)OF_BODY, strlen(OF_BODY), FP_JSON, NULL, 0,
				  want) == 0);
	CHECK(memcmp(fa, want, FINGERPRINT_LEN) == 0);
	CHECK(of(&plain, c, fb) == 0 && memcmp(fa, fb, FINGERPRINT_LEN) == 0);
	/* With them: each named header's values join it, names case-insensitive. */
	CHECK(of(&with, a, fa) == 0);
	CHECK(fingerprint_with_headers(want, &h, 1) == 0 && memcmp(fa, want, FINGERPRINT_LEN) == 0);
	CHECK(of(&with, b, fb) == 0 && memcmp(fa, fb, FINGERPRINT_LEN) == 0);
	CHECK(of(&with, c, fb) == 0 && memcmp(fa, fb, FINGERPRINT_LEN) != 0);
	/* The same value under the other name is another request. */
	CHECK(of(&with, d, fb) == 0 && memcmp(fa, fb, FINGERPRINT_LEN) != 0);
out:
	http_msg_free(a);
	http_msg_free(b);
	http_msg_free(c);
	http_msg_free(d);
}

int main(void)
{
	if (getenv("IDEMPROXY_FP_BENCH"))
		return bench();
	test_structure();
	test_layouts();
	test_key_order();
	test_duplicates();
	test_strings();
	test_numbers();
	test_invalid();
	test_fields();
	test_transforms();
	test_nested_paths();
	test_request();
	test_known_digest();
	test_of_request();
	UNIT_DONE("fingerprint");
}
