/*
 * Unit tests for operation_from: http/jsonrpc.c (a JSON-RPC call's id in
 * the text: found, left out, replaced) and proxy/opname.c (the scope's
 * operation a request's body names, a replay's body with the retry's id)
 * and the fingerprint of a JSON-RPC call, which leaves its id out.
 */
#include "conf/conf.h"
#include "http/jsonrpc.h"
#include "proxy/fingerprint.h"
#include "proxy/http.h"
#include "proxy/json.h"
#include "proxy/opname.h"
#include "proxy/record.h"
#include "tests/unit/unit.h"

#include <event2/buffer.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* What jsonrpc_without_id or jsonrpc_with_id (rc, out, n) made of s, as a static string:
 * s itself when nothing changed, NULL when it failed. */
static const char *text_of(int rc, unsigned char *out, size_t n, const char *s)
{
	static char text[1024];

	if (rc <= 0 || n >= sizeof(text)) {
		free(out);
		return rc == 0 ? s : NULL;
	}
	memcpy(text, out, n);
	text[n] = '\0';
	free(out);
	return text;
}

static const char *without(const char *s)
{
	unsigned char *out;
	size_t n;
	int rc = jsonrpc_without_id((const unsigned char *)s, strlen(s), &out, &n);

	return text_of(rc, out, n, s);
}

static const char *with(const char *s, const char *id)
{
	unsigned char *out;
	size_t n;
	int rc = jsonrpc_with_id((const unsigned char *)s, strlen(s), (const unsigned char *)id,
				 strlen(id), &out, &n);

	return text_of(rc, out, n, s);
}

static enum jsonrpc_find find(const char *s)
{
	struct jsonrpc_member m;

	return jsonrpc_id((const unsigned char *)s, strlen(s), &m);
}

static void test_find(void)
{
	struct jsonrpc_member m;
	const char *s = " {\"jsonrpc\":\"2.0\", \"id\" : 7 ,\"method\":\"a\"} ";

	CHECK(jsonrpc_id((const unsigned char *)s, strlen(s), &m) == JSONRPC_FOUND);
	CHECK(m.value == 26 && m.end == 27 && s[m.key] == '"');
	CHECK(find("{\"\\u0069d\":1}") == JSONRPC_FOUND);
	CHECK(find("\f{\v\"id\":1}") == JSONRPC_FOUND); /* yajl's white space */
	CHECK(find("{\"i\\u0064\":1}") == JSONRPC_FOUND);
	CHECK(find("{\"idx\":1}") == JSONRPC_ABSENT);
	CHECK(find("{\"i\":1}") == JSONRPC_ABSENT);
	CHECK(find("{\"ID\":1}") == JSONRPC_ABSENT);
	CHECK(find("{\"params\":{\"id\":1}}") == JSONRPC_ABSENT); /* only the top level's */
	CHECK(find("{}") == JSONRPC_ABSENT);
	CHECK(find("{\"id\":1,\"id\":2}") == JSONRPC_TWICE);
	CHECK(find("[{\"id\":1}]") == JSONRPC_NOT_OBJECT);
	CHECK(find("\"id\"") == JSONRPC_NOT_OBJECT);
	/* Not JSON. */
	static const char *const bad[] = {
	    "",	       "{",	     "{\"id\":}",	 "{\"id\":1,}",	   "{\"id\" 1}",
	    "{id:1}",  "{\"id\":01}", "{\"id\":1.}",	 "{\"id\":-}",	   "{\"id\":1e}",
	    "{\"id\":tru}", "{\"id\":\"a\nb\"}", "{\"id\":\"\\x\"}", "{\"id\":\"\\u12\"}",
	    "{\"id\":1} x", "{\"id\":[1,]}", "{\"id\":[1}", "{\"a\":{\"b\":1]}", "{\"id\":1}}",
	    "{\"id\":\"open}",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		if (find(bad[i]) != JSONRPC_NOT_OBJECT)
			fprintf(stderr, "read as JSON: %s\n", bad[i]);
		CHECK(find(bad[i]) == JSONRPC_NOT_OBJECT);
	}
	CHECK(find("{\"id\":[1,{\"a\":[true,false,null,-0.5e+3]},\"s\\\"}\"],\"x\":{}}") ==
	      JSONRPC_FOUND);
}

static void test_depth(void)
{
	char deep[2 * JSONRPC_DEPTH_MAX + 32];
	size_t n;

	for (int d = JSONRPC_DEPTH_MAX; d <= JSONRPC_DEPTH_MAX + 1; d++) {
		n = (size_t)sprintf(deep, "{\"id\":");
		for (int i = 0; i < d; i++)
			deep[n++] = '[';
		for (int i = 0; i < d; i++)
			deep[n++] = ']';
		memcpy(deep + n, "}", 2);
		CHECK(find(deep) == (d <= JSONRPC_DEPTH_MAX ? JSONRPC_FOUND : JSONRPC_NOT_OBJECT));
	}
}

static void test_without(void)
{
	CHECK_STR(without("{\"id\":1}"), "{}");
	CHECK_STR(without("{\"id\":1,\"method\":\"m\"}"), "{\"method\":\"m\"}");
	CHECK_STR(without("{ \"id\" : 1 , \"method\":\"m\"}"), "{ \"method\":\"m\"}");
	CHECK_STR(without("{\"method\":\"m\",\"id\":\"x\"}"), "{\"method\":\"m\"}");
	CHECK_STR(without("{\"a\":1,\"id\":[2,{}],\"b\":3}"), "{\"a\":1,\"b\":3}");
	/* Nothing to leave out: the body as it is. */
	CHECK_STR(without("{\"a\":1}"), "{\"a\":1}");
	CHECK_STR(without("{\"id\":1,\"id\":2}"), "{\"id\":1,\"id\":2}");
	CHECK_STR(without("not json"), "not json");
}

static void test_with(void)
{
	CHECK_STR(with("{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"id\":1}}", "\"r-2\""),
		  "{\"jsonrpc\":\"2.0\",\"id\":\"r-2\",\"result\":{\"id\":1}}");
	CHECK_STR(with("{\"result\":5, \"id\" : 12345678901234567890}", "3"),
		  "{\"result\":5, \"id\" : 3}");
	CHECK_STR(with("{\"id\":null}", "null"), "{\"id\":null}");
	CHECK_STR(with("{\"result\":5}", "3"), "{\"result\":5}");
	CHECK_STR(with("<html>", "3"), "<html>");
}

/* The request "POST /rpc" with Content-Type ct and body, parsed. */
static struct http_msg *request(const char *ct, const char *body)
{
	struct http_parser *p = http_parser_new(HTTP_REQUEST, 1 << 20);
	struct evbuffer *in = evbuffer_new();
	struct http_msg *m = NULL;

	if (p && in &&
	    evbuffer_add_printf(in,
				"POST /rpc HTTP/1.1\r\nHost: x\r\nContent-Type: %s\r\n"
				"Content-Length: %zu\r\n\r\n%s",
				ct, strlen(body), body) > 0 &&
	    http_parser_feed(p, in) == HTTP_DONE)
		m = http_parser_take(p);
	evbuffer_free(in);
	http_parser_free(p);
	return m;
}

/* The operation route r names for body (ct its Content-Type): "=OP", "pass" or "bad: DETAIL". */
static const char *named(const struct route *r, const char *ct, const char *body)
{
	static char out[512];
	struct http_msg *m = request(ct, body);
	char detail[256], *op = NULL;
	size_t len;
	enum opname_result res;

	if (!m)
		return "no request";
	len = evbuffer_get_length(m->body);
	res = opname_of_request(r, m, len ? evbuffer_pullup(m->body, -1) : NULL, len, &op, detail,
				sizeof(detail));
	if (res == OPNAME_SCOPED)
		snprintf(out, sizeof(out), "=%s", op ? op : "(route)");
	else if (res == OPNAME_PASS)
		snprintf(out, sizeof(out), "pass");
	else if (res == OPNAME_BAD)
		snprintf(out, sizeof(out), "bad: %s", detail);
	else
		snprintf(out, sizeof(out), "nomem");
	free(op);
	http_msg_free(m);
	return out;
}

static int bad(const char *verdict)
{
	return strncmp(verdict, "bad: ", 5) == 0;
}

#define JSON "application/json"

static void test_json(void)
{
	struct route rpc = {.operation = "rpc", .operation_from = OPFROM_JSONRPC,
			    .operation_path = "method"};
	struct route mcp = {.operation = "mcp", .operation_from = OPFROM_JSONRPC,
			    .operation_path = "params.name"};
	struct route act = {.operation = "act", .operation_from = OPFROM_JSON,
			    .operation_path = "action"};
	struct route plain = {.operation = "plain"};

	CHECK_STR(named(&rpc, JSON, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"transfer\"}"),
		  "=rpc:transfer");
	CHECK_STR(named(&mcp, JSON,
			"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\","
			"\"params\":{\"name\":\"send_email\",\"arguments\":{}}}"),
		  "=mcp:send_email");
	CHECK_STR(named(&act, JSON, "{\"action\":\"refund\"}"), "=act:refund");
	CHECK_STR(named(&plain, JSON, "{}"), "=(route)");
	/* Missing, not a string, not JSON, twice, too long, control characters: refused. */
	CHECK(bad(named(&rpc, JSON, "{\"id\":1}")));
	CHECK(bad(named(&rpc, JSON, "{\"method\":5}")));
	CHECK(bad(named(&rpc, JSON, "{\"method\":null}")));
	CHECK(bad(named(&rpc, JSON, "{\"method\":\"\"}")));
	CHECK(bad(named(&rpc, JSON, "[{\"method\":\"a\"}]")));
	CHECK(bad(named(&rpc, JSON, "method=a")));
	CHECK(bad(named(&rpc, JSON, "")));
	CHECK(bad(named(&rpc, JSON, "{\"method\":\"a\",\"method\":\"b\"}")));
	CHECK(bad(named(&rpc, JSON, "{\"method\":\"a\",\"id\":1,\"id\":2}")));
	CHECK(bad(named(&act, JSON, "{\"action\":\"a\\nb\"}")));
	CHECK(bad(named(&mcp, JSON, "{\"params\":\"send_email\"}")));
	CHECK(bad(named(&mcp, JSON, "{\"params\":{\"name\":\"a\",\"name\":\"b\"}}")));
	/* What yajl's tree is never given: deep nesting, \u0000, comments. */
	{
		char deep[256];
		int n = snprintf(deep, sizeof(deep), "{\"method\":\"m\",\"params\":");

		for (int i = 0; i < JSON_TREE_DEPTH; i++)
			deep[n++] = '[';
		for (int i = 0; i < JSON_TREE_DEPTH; i++)
			deep[n++] = ']';
		memcpy(deep + n, "}", 2);
		CHECK(strstr(named(&rpc, JSON, deep), "nested deeper than") != NULL);
	}
	CHECK(bad(named(&rpc, JSON, "{\"method\":\"m\",\"p\":\"\\u0000\"}")));
	CHECK(bad(named(&rpc, JSON, "{\"method\":\"m\"} /* c */")));
	{
		char body[300];
		snprintf(body, sizeof(body), "{\"action\":\"%0*d\"}", OPNAME_VALUE_MAX, 0);
		CHECK(strncmp(named(&act, JSON, body), "=act:0", 6) == 0 &&
		      strlen(named(&act, JSON, body)) == 5 + OPNAME_VALUE_MAX);
		snprintf(body, sizeof(body), "{\"action\":\"%0*d\"}", OPNAME_VALUE_MAX + 1, 0);
		CHECK(bad(named(&act, JSON, body)));
	}
}

static void test_graphql(void)
{
	struct route gql = {.operation = "gql", .operation_from = OPFROM_GRAPHQL};

	CHECK_STR(named(&gql, JSON, "{\"query\":\"mutation Pay { pay { id } }\"}"), "=gql:Pay");
	CHECK_STR(named(&gql, JSON, "{\"query\":\"mutation { refund(id: 1) { id } }\"}"),
		  "=gql:refund");
	CHECK_STR(named(&gql, JSON,
			"{\"query\":\"query Q { a } mutation M { m }\",\"operationName\":\"M\","
			"\"variables\":{}}"),
		  "=gql:M");
	CHECK_STR(named(&gql, JSON,
			"{\"query\":\"query Q { a } mutation M { m }\",\"operationName\":\"Q\"}"),
		  "pass");
	CHECK_STR(named(&gql, JSON, "{\"query\":\"{ a }\",\"operationName\":null}"), "pass");
	CHECK_STR(named(&gql, JSON, "{\"query\":\"subscription S { s }\"}"), "pass");
	CHECK_STR(named(&gql, "application/graphql; charset=utf-8", "mutation Raw { r }"),
		  "=gql:Raw");
	CHECK_STR(named(&gql, "application/graphql", "query { r }"), "pass");
	CHECK_STR(named(&gql, JSON, "[{\"query\":\"{ a }\"},{\"query\":\"query B { b }\"}]"),
		  "pass");
	CHECK(bad(named(&gql, JSON, "[{\"query\":\"{ a }\"},{\"query\":\"mutation M { m }\"}]")));
	CHECK(bad(named(&gql, JSON, "{\"query\":\"query Q { a } mutation M { m }\"}")));
	CHECK(bad(named(&gql, JSON, "{\"query\":\"mutation M { m }\",\"operationName\":\"X\"}")));
	CHECK(bad(named(&gql, JSON, "{\"query\":\"mutation M { m \"}")));
	CHECK(bad(named(&gql, JSON, "{\"query\":\"mutation { ...F } fragment F on M { m }\"}")));
	CHECK(bad(named(&gql, JSON, "{\"operationName\":\"M\"}")));
	CHECK(bad(named(&gql, JSON, "{\"query\":\"{ a }\",\"operationName\":5}")));
	CHECK(bad(named(&gql, JSON, "{\"query\":\"{ a }\",\"query\":\"mutation M { m }\"}")));
	CHECK(bad(named(&gql, JSON, "mutation M { m }")));
	CHECK(bad(named(&gql, "application/graphql-response+json", "mutation M { m }")));
}

static void test_replay_body(void)
{
	struct route rpc = {.operation = "rpc", .operation_from = OPFROM_JSONRPC,
			    .operation_path = "method"};
	struct route act = {.operation = "act", .operation_from = OPFROM_JSON,
			    .operation_path = "action"};
	const char *stored = "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":42}";
	struct record rec = {.headers = "Content-Type: application/json\r\n",
			     .body = (const unsigned char *)stored, .body_len = strlen(stored)};
	struct http_msg *m = request(JSON, "{\"jsonrpc\":\"2.0\",\"id\":\"again\",\"method\":\"m\"}");
	struct http_msg *noid = request(JSON, "{\"jsonrpc\":\"2.0\",\"method\":\"m\"}");
	unsigned char *body = NULL;
	size_t len = 0;

	CHECK(m && noid);
	if (!m || !noid)
		goto out;
	rec.headers_len = strlen(rec.headers);
	CHECK(opname_replay_body(&rpc, m, &rec, &body, &len) == 1);
	CHECK(body && len == strlen("{\"jsonrpc\":\"2.0\",\"id\":\"again\",\"result\":42}") &&
	      memcmp(body, "{\"jsonrpc\":\"2.0\",\"id\":\"again\",\"result\":42}", len) == 0);
	free(body);
	/* Not jsonrpc, no id in the retry, an encoded or omitted body: as stored. */
	CHECK(opname_replay_body(&act, m, &rec, &body, &len) == 0 && !body);
	CHECK(opname_replay_body(&rpc, noid, &rec, &body, &len) == 0 && !body);
	rec.headers = "Content-Type: application/json\r\ncontent-encoding: gzip\r\n";
	rec.headers_len = strlen(rec.headers);
	CHECK(opname_replay_body(&rpc, m, &rec, &body, &len) == 0 && !body);
	rec.headers = "";
	rec.headers_len = 0;
	rec.body_omitted = 1;
	CHECK(opname_replay_body(&rpc, m, &rec, &body, &len) == 0 && !body);
out:
	http_msg_free(m);
	http_msg_free(noid);
}

/* The fingerprint of body on r. */
static int fp_of(const struct route *r, const char *body, unsigned char out[FINGERPRINT_LEN])
{
	struct http_msg *m = request(JSON, body);
	size_t len;
	int rc = -1;

	if (m) {
		len = evbuffer_get_length(m->body);
		rc = fingerprint_of_request(r, m, evbuffer_pullup(m->body, -1), len, out);
	}
	http_msg_free(m);
	return rc;
}

static void test_fingerprint(void)
{
	struct route rpc = {.operation = "rpc", .fingerprint = FP_JSON,
			    .operation_from = OPFROM_JSONRPC, .operation_path = "method"};
	struct route act = {.operation = "act", .fingerprint = FP_JSON,
			    .operation_from = OPFROM_JSON, .operation_path = "method"};
	unsigned char a[FINGERPRINT_LEN], b[FINGERPRINT_LEN];

	/* A call's id is not the call. */
	CHECK(fp_of(&rpc, "{\"id\":1,\"method\":\"m\",\"params\":[1]}", a) == 0);
	CHECK(fp_of(&rpc, "{\"method\":\"m\",\"params\":[1],\"id\":\"other\"}", b) == 0);
	CHECK(memcmp(a, b, FINGERPRINT_LEN) == 0);
	CHECK(fp_of(&rpc, "{\"method\":\"m\",\"params\":[1]}", b) == 0);
	CHECK(memcmp(a, b, FINGERPRINT_LEN) == 0);
	/* Its params are. */
	CHECK(fp_of(&rpc, "{\"id\":1,\"method\":\"m\",\"params\":[2]}", b) == 0);
	CHECK(memcmp(a, b, FINGERPRINT_LEN) != 0);
	/* Without jsonrpc an "id" is part of the request. */
	CHECK(fp_of(&act, "{\"id\":1,\"method\":\"m\",\"params\":[1]}", a) == 0);
	CHECK(fp_of(&act, "{\"id\":2,\"method\":\"m\",\"params\":[1]}", b) == 0);
	CHECK(memcmp(a, b, FINGERPRINT_LEN) != 0);
}

int main(void)
{
	test_find();
	test_depth();
	test_without();
	test_with();
	test_json();
	test_graphql();
	test_replay_body();
	test_fingerprint();
	UNIT_DONE("opname");
}
