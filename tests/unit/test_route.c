/* Unit tests for conf/route.c: path templates, matching and route lookup. */
#include "conf/conf.h"
#include "proxy/lookup.h"
#include "tests/unit/unit.h"

#include <stdlib.h>

static char err[CONF_ERR_MAX];

/* Whether template TMPL parses and matches PATH, letters compared in either case when icase. */
static int matches_case(const char *tmpl, const char *path, int icase)
{
	struct path_seg *segs = NULL;
	int nsegs = 0, m;

	if (route_template_parse(tmpl, &segs, &nsegs, err, sizeof(err))) {
		fprintf(stderr, "template \"%s\": %s\n", tmpl, err);
		return -1;
	}
	m = route_template_match(segs, nsegs, path, strlen(path), icase, NULL);
	route_template_free(segs, nsegs);
	return m;
}

static int matches(const char *tmpl, const char *path)
{
	return matches_case(tmpl, path, 0);
}

/* The reason TMPL is rejected, or "" when it parses. */
static const char *reject(const char *tmpl)
{
	struct path_seg *segs = NULL;
	int nsegs = 0;

	err[0] = '\0';
	if (route_template_parse(tmpl, &segs, &nsegs, err, sizeof(err)) == 0) {
		route_template_free(segs, nsegs);
		return "";
	}
	CHECK(segs == NULL);
	return err;
}

static void test_parse(void)
{
	struct path_seg *segs = NULL;
	int nsegs = 0;

	CHECK(route_template_parse("/api/{id}/items/*", &segs, &nsegs, err, sizeof(err)) == 0);
	CHECK(nsegs == 4);
	if (nsegs == 4) {
		CHECK(segs[0].kind == SEG_LITERAL && strcmp(segs[0].text, "api") == 0);
		CHECK(segs[0].len == 3);
		CHECK(segs[1].kind == SEG_PARAM && strcmp(segs[1].text, "id") == 0);
		CHECK(segs[1].len == 2);
		CHECK(segs[2].kind == SEG_LITERAL && strcmp(segs[2].text, "items") == 0);
		CHECK(segs[3].kind == SEG_REST && segs[3].text == NULL);
	}
	route_template_free(segs, nsegs);

	CHECK(route_template_parse("/", &segs, &nsegs, err, sizeof(err)) == 0);
	CHECK(nsegs == 1 && segs[0].kind == SEG_LITERAL && segs[0].len == 0);
	route_template_free(segs, nsegs);

	CHECK_STR(reject("/*"), "");
	CHECK_STR(reject("/a/%20b/{x_1}/{Y}"), "");
	CHECK_STR(reject(""), "must start with \"/\"");
	CHECK_STR(reject("api"), "must start with \"/\"");
	CHECK_STR(reject("*"), "must start with \"/\"");
	/* Templates are written as requests are compared: normalised. */
	CHECK_STR(reject("/a/b/"), "requests are compared normalised: write \"/a/b\"");
	CHECK_STR(reject("/a//b"), "requests are compared normalised: write \"/a/b\"");
	CHECK_STR(reject("//"), "requests are compared normalised: write \"/\"");
	CHECK_STR(reject("/a/%63"), "requests are compared normalised: write \"/a/c\"");
	CHECK_STR(reject("/a/%2f"), "requests are compared normalised: write \"/a/%2F\"");
	CHECK_STR(reject("/a/%2F"), "holds %2F, %5C or \"\\\": unsafe requests with such a path "
				    "are refused, so it would never match");
	CHECK_STR(reject("/a\\b/{x}"), "holds %2F, %5C or \"\\\": unsafe requests with such a "
					"path are refused, so it would never match");
	CHECK_STR(reject("/a/%3a"), "requests are compared normalised: write \"/a/%3A\"");
	CHECK_STR(reject("/a/./../b"), "requests are compared normalised: write \"/b\"");
	CHECK_STR(reject("/a;v=1/b"), "requests are compared normalised: write \"/a/b\"");
	CHECK_STR(reject("/a/*/"), "requests are compared normalised: write \"/a/*\"");
	CHECK_STR(reject("/.."), "holds \"..\" above the root");
	CHECK_STR(reject("/a/%zz"), "holds a malformed percent-encoding");
	CHECK_STR(reject("/a/%00"), "holds an encoded NUL (%00)");
	CHECK_STR(reject("/a/*/b"), "\"*\" is only allowed as the last segment");
	CHECK_STR(reject("/a*"), "\"*\" must be a whole segment");
	CHECK_STR(reject("/{}"), "\"{name}\" must be a whole segment");
	CHECK_STR(reject("/{id"), "\"{name}\" must be a whole segment");
	CHECK_STR(reject("/{id}x"), "\"{name}\" must be a whole segment");
	CHECK_STR(reject("/x{id}"), "\"{name}\" must be a whole segment");
	CHECK_STR(reject("/{a-b}"), "invalid parameter name \"a-b\" (letters, digits and _)");
	CHECK_STR(reject("/{a}/{a}"), "duplicate parameter \"{a}\"");
	CHECK_STR(reject("/a?b=1"), "\"?\" is not allowed (the query is not matched)");
	CHECK_STR(reject("/a b"), "invalid character 0x20");
	CHECK_STR(reject("/\xc3\xa9"), "invalid character 0xc3");
}

static void test_match(void)
{
	/* literal */
	CHECK(matches("/api/courses", "/api/courses") == 1);
	CHECK(matches("/api/courses", "/api/course") == 0);
	CHECK(matches("/api/courses", "/api/coursesx") == 0);
	CHECK(matches("/api/courses", "/api") == 0);
	CHECK(matches("/api/courses", "/api/courses/1") == 0);
	CHECK(matches("/api/courses", "/API/courses") == 0);
	CHECK(matches_case("/api/courses", "/API/Courses", 1) == 1);
	CHECK(matches_case("/API/Courses", "/api/courses", 1) == 1);
	CHECK(matches_case("/api/courses", "/api/coursez", 1) == 0);
	CHECK(matches_case("/a%3Ab", "/A%3aB", 1) == 1);
	CHECK(matches("/api/courses", "api/courses") == 0);
	CHECK(matches("/api/courses", "") == 0);
	CHECK(matches("/", "/") == 1);
	CHECK(matches("/", "/a") == 0);
	CHECK(matches("/", "") == 0);

	/* normalised paths compare byte for byte (letters aside) */
	CHECK(matches("/a%20b", "/a%20b") == 1);
	CHECK(matches("/a%20b", "/a b") == 0);
	CHECK(matches("/api/courses", "/api/courses/") == 0); /* never normalised */

	/* parameters: exactly one non-empty segment */
	CHECK(matches("/o/{id}/pay", "/o/42/pay") == 1);
	CHECK(matches("/o/{id}/pay", "/o//pay") == 0);
	CHECK(matches("/o/{id}/pay", "/o/4/2/pay") == 0);
	CHECK(matches("/o/{id}", "/o/42") == 1);
	CHECK(matches("/o/{id}", "/o/") == 0);
	CHECK(matches("/o/{id}", "/o") == 0);
	CHECK(matches("/o/{id}", "/o/42/") == 0);
	CHECK(matches("/{a}/{b}", "/x/y") == 1);

	/* rest: zero or more remaining segments */
	CHECK(matches("/a/*", "/a") == 1);
	CHECK(matches("/a/*", "/a/") == 1);
	CHECK(matches("/a/*", "/a/b") == 1);
	CHECK(matches("/a/*", "/a/b/c") == 1);
	CHECK(matches("/a/*", "/a/b/c/") == 1);
	CHECK(matches("/a/*", "/ab") == 0);
	CHECK(matches("/a/*", "/b/a") == 0);
	CHECK(matches("/a/*", "/") == 0);
	CHECK(matches("/*", "/") == 1);
	CHECK(matches("/*", "/anything/at/all") == 1);
	CHECK(matches("/o/{id}/*", "/o/1") == 1);
	CHECK(matches("/o/{id}/*", "/o/1/x/y") == 1);
	CHECK(matches("/o/{id}/*", "/o/") == 0);
}

/* Match with an explicit length: the path need not be NUL-terminated. */
static void test_match_len(void)
{
	struct path_seg *segs = NULL;
	int nsegs = 0;

	CHECK(route_template_parse("/api/courses", &segs, &nsegs, err, sizeof(err)) == 0);
	CHECK(route_template_match(segs, nsegs, "/api/courses?x=1", 12, 0, NULL) == 1);
	CHECK(route_template_match(segs, nsegs, "/api/courses/", 12, 0, NULL) == 1);
	CHECK(route_template_match(segs, nsegs, "/api/courses", 11, 0, NULL) == 0);
	route_template_free(segs, nsegs);
	route_template_free(NULL, 0);
}

static void test_find_route(void)
{
	static const char text[] = "upstream http://127.0.0.1:3000\n"
				   "actor anonymous\n"
				   "route pay {\n"
				   "  match POST /orders/{id}/payments\n"
				   "  match PUT /orders/{id}/payments\n"
				   "}\n"
				   "route orders.any {\n"
				   "  match POST /orders/*\n"
				   "}\n"
				   "route orders.create {\n"
				   "  match POST /orders\n"
				   "}\n"
				   "route patch {\n"
				   "  match patch /p/{x}\n"
				   "}\n"
				   "route exact {\n"
				   "  match POST /Exact/{id}/*\n"
				   "  match_case sensitive\n"
				   "}\n"
				   "route spelled {\n"
				   "  match POST /Spelled/{id}/Items/*\n"
				   "}\n";
	char path[64];
	struct conf *c = NULL;
	const struct route *r;

	CHECK(conf_parse("t.conf", text, sizeof(text) - 1, &c, err, sizeof(err)) == 0);
	if (!c) {
		fprintf(stderr, "%s\n", err);
		return;
	}
	r = lookup_route(c, "POST", "/orders/7/payments", 18, NULL);
	CHECK(r && strcmp(r->operation, "pay") == 0);
	r = lookup_route(c, "PUT", "/orders/7/payments", 18, NULL);
	CHECK(r && strcmp(r->operation, "pay") == 0);
	/* first match wins: "orders.any" also covers /orders */
	r = lookup_route(c, "POST", "/orders", 7, NULL);
	CHECK(r && strcmp(r->operation, "orders.any") == 0);
	r = lookup_route(c, "POST", "/orders/7/refunds", 17, NULL);
	CHECK(r && strcmp(r->operation, "orders.any") == 0);
	/* method mismatch and case */
	CHECK(lookup_route(c, "DELETE", "/orders/7/payments", 18, NULL) == NULL);
	CHECK(lookup_route(c, "post", "/orders", 7, NULL) == NULL);
	r = lookup_route(c, "PATCH", "/p/1", 4, NULL);
	CHECK(r && strcmp(r->operation, "patch") == 0);
	CHECK(lookup_route(c, "patch", "/p/1", 4, NULL) == NULL);
	CHECK(lookup_route(c, "POST", "/other", 6, NULL) == NULL);
	/* match_case */
	r = lookup_route(c, "POST", "/ORDERS/7/Payments", 18, NULL);
	CHECK(r && strcmp(r->operation, "pay") == 0);
	r = lookup_route(c, "POST", "/Exact/Ab/c", 11, NULL);
	CHECK(r && strcmp(r->operation, "exact") == 0);
	CHECK(lookup_route(c, "POST", "/exact/Ab/c", 11, NULL) == NULL);
	/* literal segments in the template's spelling, the others as they came */
	strcpy(path, "/spelled/AbC/ITEMS/X/y");
	r = lookup_route(c, "POST", path, strlen(path), path);
	CHECK(r && strcmp(r->operation, "spelled") == 0);
	CHECK_STR(path, "/Spelled/AbC/Items/X/y");
	/* a match that fails half way leaves the path alone */
	strcpy(path, "/spelled/x/other");
	CHECK(lookup_route(c, "POST", path, strlen(path), path) == NULL);
	CHECK_STR(path, "/spelled/x/other");
	conf_free(c);
}

int main(void)
{
	test_parse();
	test_match();
	test_match_len();
	test_find_route();
	UNIT_DONE("route");
}
