/* Unit tests for proxy/problem.c: the problem table and problem+json rendering. */
#include "proxy/problem.h"
#include "tests/unit/unit.h"

#include <stdlib.h>
#include <string.h>

#include <yajl/yajl_tree.h>

#include "http/grpc.h"

#define ERR_MAX 256

/* Parses a rendered body; the caller frees the tree with yajl_tree_free. */
static yajl_val parse(const char *body, size_t len)
{
	char err[ERR_MAX];
	yajl_val v;

	CHECK(strlen(body) == len);
	v = yajl_tree_parse(body, err, sizeof(err));
	if (!v)
		fprintf(stderr, "invalid JSON (%s): %s\n", err, body);
	CHECK(v && YAJL_IS_OBJECT(v));
	return v;
}

static const char *get_string(yajl_val v, const char *name)
{
	const char *path[] = {name, NULL};
	yajl_val s = yajl_tree_get(v, path, yajl_t_string);

	return s ? YAJL_GET_STRING(s) : NULL;
}

static long long get_int(yajl_val v, const char *name)
{
	const char *path[] = {name, NULL};
	yajl_val n = yajl_tree_get(v, path, yajl_t_number);

	return n && YAJL_IS_INTEGER(n) ? YAJL_GET_INTEGER(n) : -1;
}

static void test_table(void)
{
	const char *const names[PROBLEM_KIND_COUNT] = {
	    "bad-request",	     "idempotency-key-missing", "idempotency-key-invalid",
	    "actor-missing",	     "actor-invalid",		"request-too-large",
	    "idempotency-conflict",
	    "operation-in-progress", "outcome-unknown",		"store-unavailable",
	    "upstream-unavailable",  "upstream-error",		"upstream-timeout",
	    "request-timeout",	     "headers-too-large",	"uri-too-long",
	    "shutting-down",	     "key-unavailable",		"grpc-streaming-refused",
	    "too-many-requests",     "actor-quota-exceeded",	"idempotency-key-expired",
	};
	const int statuses[PROBLEM_KIND_COUNT] = {400, 400, 400, 401, 401, 413, 422, 409,
						  409, 503, 502, 502, 504, 408, 431,
						  414, 503, 503, 501, 429, 429, 422};
	int k;

	for (k = 0; k < PROBLEM_KIND_COUNT; k++) {
		CHECK_STR(problem_name(k), names[k]);
		CHECK(problem_default_status(k) == statuses[k]);
		CHECK(problem_title(k) && strlen(problem_title(k)) > 0);
	}
	CHECK_STR(problem_title(PROBLEM_KEY_MISSING), "Idempotency-Key header is missing");
	/* A limit's refusal: retryable, the SDKs' rate limit error, gRPC's own word for it. */
	CHECK(problem_should_retry(PROBLEM_TOO_MANY_REQUESTS));
	CHECK_STR(problem_stripe_type(PROBLEM_TOO_MANY_REQUESTS), "rate_limit_error");
	CHECK(problem_grpc_code(PROBLEM_TOO_MANY_REQUESTS) == GRPC_RESOURCE_EXHAUSTED);
}

static void test_render_all(void)
{
	const char *base = "https://errors.example.com/problems/";
	char type[ERR_MAX];
	size_t len;
	char *body;
	yajl_val v;
	int k;

	for (k = 0; k < PROBLEM_KIND_COUNT; k++) {
		body = problem_render(k, 0, base, "some detail", &len);
		CHECK(body != NULL);
		if (!body)
			continue;
		v = parse(body, len);
		snprintf(type, sizeof(type), "%s%s", base, problem_name(k));
		CHECK_STR(get_string(v, "type"), type);
		CHECK_STR(get_string(v, "title"), problem_title(k));
		CHECK(get_int(v, "status") == problem_default_status(k));
		CHECK_STR(get_string(v, "detail"), "some detail");
		CHECK(v && YAJL_IS_OBJECT(v) && v->u.object.len == 4);
		yajl_tree_free(v);
		free(body);
	}
}

static void test_render_exact(void)
{
	size_t len;
	char *body;

	body = problem_render(PROBLEM_IN_PROGRESS, 0, "urn:idemproxy:", "retry later", &len);
	CHECK_STR(body, "{\"type\":\"urn:idemproxy:operation-in-progress\","
			"\"title\":\"A request with this Idempotency-Key is still in progress\","
			"\"status\":409,\"detail\":\"retry later\"}");
	free(body);

	/* No detail: the member is left out. Empty or NULL base: the bare name. */
	body = problem_render(PROBLEM_KEY_MISSING, 0, "", NULL, &len);
	CHECK_STR(body, "{\"type\":\"idempotency-key-missing\","
			"\"title\":\"Idempotency-Key header is missing\",\"status\":400}");
	free(body);
	body = problem_render(PROBLEM_KEY_MISSING, 0, NULL, NULL, &len);
	CHECK(body && strstr(body, "\"type\":\"idempotency-key-missing\"") != NULL);
	free(body);
}

static void test_status_override(void)
{
	size_t len;
	char *body;
	yajl_val v;

	body = problem_render(PROBLEM_CONFLICT, 409, "", NULL, &len);
	v = body ? parse(body, len) : NULL;
	CHECK(get_int(v, "status") == 409);
	CHECK_STR(get_string(v, "type"), "idempotency-conflict");
	yajl_tree_free(v);
	free(body);

	body = problem_render(PROBLEM_CONFLICT, 0, "", NULL, &len);
	v = body ? parse(body, len) : NULL;
	CHECK(get_int(v, "status") == 422);
	yajl_tree_free(v);
	free(body);
}

static void test_escaping(void)
{
	const char *detail = "key \"a\\b\"\n\tcaf\xc3\xa9 </script>";
	size_t len;
	char *body;
	yajl_val v;

	body = problem_render(PROBLEM_KEY_INVALID, 0, "http://x/\"q\"/", detail, &len);
	CHECK(body && strchr(body, '\n') == NULL && strchr(body, '\t') == NULL);
	v = body ? parse(body, len) : NULL;
	CHECK_STR(get_string(v, "detail"), detail);
	CHECK_STR(get_string(v, "type"), "http://x/\"q\"/idempotency-key-invalid");
	yajl_tree_free(v);
	free(body);

	/* Invalid UTF-8 is refused rather than sent as broken JSON. */
	body = problem_render(PROBLEM_KEY_INVALID, 0, "", "bad \xff byte", &len);
	CHECK(body == NULL);
	free(body);
}

int main(void)
{
	test_table();
	test_render_all();
	test_render_exact();
	test_status_override();
	test_escaping();
	UNIT_DONE("problem");
}
