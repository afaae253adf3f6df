/*
 * Unit tests for proxy/contract*.c: the facts each format states for a few
 * configurations, that secrets and file paths never appear, and that the
 * OpenAPI document parses with the keys, parameters, responses and $refs
 * a client's tooling reads.
 */
#include "conf/conf.h"
#include "proxy/contract.h"
#include "tests/unit/unit.h"

#include <stdlib.h>

#include <yajl/yajl_tree.h>

#define TOP                                                                                        \
	"upstream http://127.0.0.1:3000\n"                                                         \
	"actor header X-Actor-Id\n"

/* Everything secret or local a configuration may name. */
#define SECRETS                                                                                    \
	"database \"host=/run/pg dbname=idem user=app password=s3cr3t-pass\"\n"                    \
	"admin 127.0.0.1:9901\n"                                                                   \
	"admin_token /etc/idemproxy/admin-token-file\n"                                            \
	"body_encryption /etc/idemproxy/body-keys-file\n"                                          \
	"tls_certificate /etc/idemproxy/listener-cert.pem\n"                                       \
	"tls_certificate_key /etc/idemproxy/listener-key.pem\n"

static const char *const secret_needles[] = {
    "password",
    "s3cr3t-pass",
    "host=/run/pg",
    "dbname=idem",
    "admin-token-file",
    "body-keys-file",
    "listener-cert",
    "listener-key",
    "jwks-secret-file",
    "/etc/idemproxy",
    NULL,
};

static char err[CONF_ERR_MAX];

static struct conf *parse(const char *text)
{
	struct conf *c = NULL;

	err[0] = '\0';
	if (conf_parse("t.conf", text, strlen(text), &c, err, sizeof(err))) {
		fprintf(stderr, "config does not parse: %s\n", err);
		return NULL;
	}
	return c;
}

/* Both renderings of TEXT; *md and *oa are NULL when it did not parse. */
static void render(const char *text, char **md, char **oa)
{
	struct conf *c = parse(text);
	size_t len = 0;

	*md = *oa = NULL;
	CHECK(c != NULL);
	if (!c)
		return;
	*md = contract_render(c, CONTRACT_MARKDOWN, &len);
	CHECK(*md && strlen(*md) == len);
	*oa = contract_render(c, CONTRACT_OPENAPI, &len);
	CHECK(*oa && strlen(*oa) == len);
	conf_free(c);
}

static void has(const char *text, const char *needle, int line)
{
	if (text && strstr(text, needle)) {
		unit_passed++;
		return;
	}
	unit_failed++;
	fprintf(stderr, "%s:%d: no \"%s\" in the text\n", __FILE__, line, needle);
}

static void lacks(const char *text, const char *needle, int line)
{
	if (text && !strstr(text, needle)) {
		unit_passed++;
		return;
	}
	unit_failed++;
	fprintf(stderr, "%s:%d: \"%s\" should not be in the text\n", __FILE__, line, needle);
}

#define HAS(t, s)   has(t, s, __LINE__)
#define LACKS(t, s) lacks(t, s, __LINE__)

/* A copy of the Markdown section of operation op, up to the next one. */
static char *section(const char *md, const char *op)
{
	char head[128];
	const char *s, *e;

	snprintf(head, sizeof(head), "\n## `%s`\n", op);
	s = md ? strstr(md, head) : NULL;
	if (!s)
		return strdup("");
	e = strstr(s + 1, "\n## ");
	return strndup(s, e ? (size_t)(e - s) : strlen(s));
}

/* The value at a path of keys (NULL-terminated), or NULL. */
static yajl_val at(yajl_val v, const char **path)
{
	return v ? yajl_tree_get(v, path, yajl_t_any) : NULL;
}

#define AT(v, ...) at(v, (const char *[]){__VA_ARGS__, NULL})

static const char *str(yajl_val v)
{
	return YAJL_IS_STRING(v) ? YAJL_GET_STRING(v) : NULL;
}

/* The parameter of operation op named name (and in "in"), or NULL. */
static yajl_val param(yajl_val op, const char *name, const char *in)
{
	yajl_val list = AT(op, "parameters");

	for (size_t i = 0; YAJL_IS_ARRAY(list) && i < list->u.array.len; i++) {
		yajl_val p = list->u.array.values[i];
		const char *n = str(AT(p, "name")), *w = str(AT(p, "in"));

		if (n && w && !strcmp(n, name) && !strcmp(w, in))
			return p;
	}
	return NULL;
}

/* The value a JSON pointer "#/a/b" names in doc, or NULL. */
static yajl_val pointer(yajl_val doc, const char *ref)
{
	char part[256];
	yajl_val v = doc;
	size_t n;

	if (strncmp(ref, "#/", 2) != 0)
		return NULL;
	for (ref += 2; v && *ref; ref += n + (ref[n] == '/')) {
		const char *path[2] = {part, NULL};

		n = strcspn(ref, "/");
		if (n >= sizeof(part))
			return NULL;
		memcpy(part, ref, n);
		part[n] = '\0';
		v = YAJL_IS_OBJECT(v) ? yajl_tree_get(v, path, yajl_t_any) : NULL;
	}
	return v;
}

/* Every "$ref" under v resolves within doc; returns how many were checked. */
static int refs_resolve(yajl_val doc, yajl_val v)
{
	int n = 0;

	if (YAJL_IS_OBJECT(v)) {
		for (size_t i = 0; i < v->u.object.len; i++) {
			yajl_val sub = v->u.object.values[i];

			if (!strcmp(v->u.object.keys[i], "$ref") && YAJL_IS_STRING(sub)) {
				if (!pointer(doc, YAJL_GET_STRING(sub)))
					fprintf(stderr, "unresolved $ref %s\n",
						YAJL_GET_STRING(sub));
				CHECK(pointer(doc, YAJL_GET_STRING(sub)) != NULL);
				n++;
			}
			n += refs_resolve(doc, sub);
		}
	} else if (YAJL_IS_ARRAY(v)) {
		for (size_t i = 0; i < v->u.array.len; i++)
			n += refs_resolve(doc, v->u.array.values[i]);
	}
	return n;
}

/* Parse an OpenAPI text, check what every document must have; the caller frees it. */
static yajl_val openapi(const char *text)
{
	char e[256];
	yajl_val doc = text ? yajl_tree_parse(text, e, sizeof(e)) : NULL;

	CHECK(doc != NULL);
	if (!doc)
		return NULL;
	CHECK_STR(str(AT(doc, "openapi")), "3.1.0");
	CHECK_STR(str(AT(doc, "info", "title")), "idemproxy idempotency contract");
	CHECK_STR(str(AT(doc, "info", "version")), IDEMPROXY_VERSION);
	CHECK(YAJL_IS_OBJECT(AT(doc, "paths")));
	CHECK(YAJL_IS_OBJECT(AT(doc, "components", "schemas")));
	CHECK(YAJL_IS_OBJECT(AT(doc, "components", "responses")));
	CHECK(YAJL_IS_OBJECT(AT(doc, "components", "headers")));
	CHECK(refs_resolve(doc, doc) > 0);
	return doc;
}

static void no_secrets(const char *md, const char *oa)
{
	for (int i = 0; secret_needles[i]; i++) {
		LACKS(md, secret_needles[i]);
		LACKS(oa, secret_needles[i]);
	}
}

/* The defaults, problem errors, a header actor and every secret a file can name. */
static void test_header_actor(void)
{
	char *md, *oa;
	yajl_val doc, op, p;

	render(TOP SECRETS "max_request_body 64k\n"
			   "route course.create {\n match POST /api/courses\n"
			   " fingerprint json title:trim topic lessons:int\n}\n"
			   "route safe.too {\n match GET /api/safe\n match DELETE /api/unsafe\n}\n",
	       &md, &oa);
	no_secrets(md, oa);
	HAS(md, "# Idempotency contract");
	HAS(md, "one key per intent");
	HAS(md, "## `course.create`");
	HAS(md, "| Methods and paths | `POST /api/courses` |");
	HAS(md, "| Key | the `Idempotency-Key` header |");
	HAS(md, "1 to 255 visible ASCII characters");
	HAS(md, "RFC 8941 string");
	HAS(md, "| Key required | yes");
	HAS(md, "the `X-Actor-Id` header");
	HAS(md, "`title` (trimmed), `topic`, `lessons` (as an integer)");
	HAS(md, "24h from completion");
	HAS(md, "409 `operation-in-progress` at once");
	HAS(md, "409 `outcome-unknown`");
	HAS(md, "`4xx`, `503` release the key");
	HAS(md, "`502`, `504` make the outcome unknown");
	HAS(md, "| 400 | `idempotency-key-missing` |");
	HAS(md, "| 400 | `idempotency-key-invalid` |");
	HAS(md, "| 401 | `actor-missing` | no `X-Actor-Id` header |");
	HAS(md, "| 401 | `actor-invalid` |");
	HAS(md, "| 409 | `operation-in-progress` | a request with this key still runs | "
		"`X-Should-Retry: true`, `Retry-After`, `Retry-After-Ms` |");
	HAS(md, "- `X-Should-Retry: false` on a replay of a stored 5xx, in place of any the "
		"stored response had");
	HAS(md, "| 413 | `request-too-large` | the body is larger than 65536 bytes |");
	HAS(md, "| 422 | `idempotency-conflict` |");
	HAS(md, "| 503 | `store-unavailable` |");
	HAS(md, "| 502 | `upstream-unavailable` | the API could not be reached: nothing was sent, "
		"and the key is free again | `X-Should-Retry: true` |");
	HAS(md, "| 504 | `upstream-timeout` |");
	HAS(md, "`Idempotent-Replayed: true`");
	HAS(md, "`Idempotency-Key-Expires`");
	HAS(md, "https://idemproxy.dev/problems/");
	LACKS(md, "Stripe");
	LACKS(md, "`GET /api/safe`");
	LACKS(md, "Link:");

	doc = openapi(oa);
	op = AT(doc, "paths", "/api/courses", "post");
	CHECK(op != NULL);
	CHECK(AT(doc, "paths", "/api/safe") == NULL);
	CHECK_STR(str(AT(op, "operationId")), "course.create_post");
	p = param(op, "Idempotency-Key", "header");
	CHECK(p && YAJL_IS_TRUE(AT(p, "required")));
	CHECK(p && YAJL_IS_INTEGER(AT(p, "schema", "maxLength")) &&
	      YAJL_GET_INTEGER(AT(p, "schema", "maxLength")) == 512);
	CHECK(p && YAJL_IS_INTEGER(AT(p, "schema", "minLength")));
	CHECK(p && str(AT(p, "schema", "pattern")) &&
	      strstr(str(AT(p, "schema", "pattern")), "{1,255}"));
	/* the actor header is an apiKey security scheme, not a parameter */
	CHECK(param(op, "X-Actor-Id", "header") == NULL);
	CHECK(YAJL_IS_ARRAY(AT(op, "security")) && AT(op, "security")->u.array.len == 1);
	CHECK_STR(str(AT(doc, "components", "securitySchemes", "actorHeader.x-actor-id", "type")),
		  "apiKey");
	CHECK_STR(str(AT(doc, "components", "securitySchemes", "actorHeader.x-actor-id", "name")),
		  "X-Actor-Id");
	/* the fingerprinted fields are properties of an open JSON object */
	p = AT(op, "requestBody", "content", "application/json", "schema");
	CHECK(p && YAJL_IS_TRUE(AT(p, "additionalProperties")));
	CHECK(p && AT(p, "properties", "title") && AT(p, "properties", "lessons"));
	CHECK(YAJL_IS_ARRAY(AT(doc, "servers")) && AT(doc, "servers")->u.array.len == 1);
	CHECK_STR(str(AT(op, "responses", "422", "$ref")), "#/components/responses/Problem422");
	CHECK_STR(str(AT(op, "responses", "default", "$ref")), "#/components/responses/Response");
	CHECK(AT(op, "responses", "400") && AT(op, "responses", "401") &&
	      AT(op, "responses", "409") && AT(op, "responses", "413") &&
	      AT(op, "responses", "503") && AT(op, "responses", "502") &&
	      AT(op, "responses", "504"));
	CHECK_STR(str(AT(doc, "components", "responses", "Problem409", "content",
			 "application/problem+json", "schema", "$ref")),
		  "#/components/schemas/Problem");
	CHECK(AT(doc, "components", "responses", "Problem409", "headers", "Retry-After") != NULL);
	CHECK(AT(doc, "components", "responses", "Problem409", "headers", "Retry-After-Ms") !=
	      NULL);
	CHECK(AT(doc, "components", "responses", "Problem503", "headers", "Retry-After") != NULL);
	CHECK(AT(doc, "components", "responses", "Problem400", "headers", "Retry-After") == NULL);
	CHECK(AT(doc, "components", "responses", "Problem400", "headers", "X-Should-Retry") !=
	      NULL);
	CHECK(AT(doc, "components", "schemas", "Problem", "properties", "detail") != NULL);
	CHECK(AT(doc, "components", "schemas", "StripeError") == NULL);
	CHECK(YAJL_GET_INTEGER(AT(op, "x-idempotency", "retention_seconds")) == 86400);
	CHECK_STR(str(AT(op, "x-idempotency", "in_progress", "mode")), "reject");
	CHECK_STR(str(AT(op, "x-idempotency", "recovery")), "hold");
	CHECK_STR(str(AT(op, "x-idempotency", "actor", "source")), "header");
	CHECK_STR(str(AT(op, "x-idempotency", "fingerprint", "mode")), "json");
	CHECK(YAJL_IS_ARRAY(AT(op, "x-idempotency", "fingerprint", "fields")) &&
	      AT(op, "x-idempotency", "fingerprint", "fields")->u.array.len == 3);
	yajl_tree_free(doc);
	free(md);
	free(oa);
}

/* errors stripe, jwt, wait and forward, mismatch_status 409, contract_url. */
static void test_stripe_jwt(void)
{
	char *md, *oa;
	yajl_val doc, op;

	render(
	    TOP
	    "mismatch_status 409\ncontract_url https://api.example.com/idempotency\n"
	    "route order.pay {\n match POST /api/orders/{id}/payments\n"
	    " actor jwt /etc/idemproxy/jwks-secret-file.json issuer=https://id.example claim=uid\n"
	    " errors stripe\n in_progress wait 2s\n recovery forward\n retention 1h\n"
	    " fingerprint_headers Stripe-Version\n}\n"
	    "route plain.op {\n match POST /api/plain\n}\n",
	    &md, &oa);
	no_secrets(md, oa);
	HAS(md, "a bearer token (JWT) from issuer `https://id.example`, claim `uid`");
	HAS(md, "held up to 2s");
	HAS(md, "a retry runs again");
	HAS(md, "1h from completion");
	HAS(md, "the header `Stripe-Version`");
	HAS(md, "| 400 | `idempotency_conflict` (`idempotency_error`) |");
	HAS(md, "| 400 | `idempotency_key_missing` (`invalid_request_error`) |");
	HAS(md, "| 503 | `store_unavailable` (`api_error`) |");
	HAS(md, "`Stripe-Should-Retry: true`");
	HAS(md, "`X-Should-Retry: false` on a replay of a stored 5xx (and "
		"`Stripe-Should-Retry: false` on a route with Stripe's errors)");
	HAS(md, "| 401 | `actor_missing` (`invalid_request_error`) | no bearer token in the "
		"`Authorization` header |");
	/* mismatch_status where the dialect is problem+json */
	HAS(md, "| 409 | `idempotency-conflict` |");
	LACKS(md, "| 422 |");
	HAS(md, "`Link: <https://api.example.com/idempotency>; rel=\"describedby\"`");

	doc = openapi(oa);
	op = AT(doc, "paths", "/api/orders/{id}/payments", "post");
	CHECK(op != NULL);
	CHECK(param(AT(doc, "paths", "/api/orders/{id}/payments"), "id", "path") != NULL);
	CHECK(param(op, "Authorization", "header") == NULL);
	CHECK(AT(op, "security") != NULL);
	CHECK_STR(str(AT(doc, "components", "securitySchemes", "bearerJWT", "scheme")), "bearer");
	CHECK_STR(str(AT(op, "responses", "400", "$ref")), "#/components/responses/Stripe400");
	CHECK(AT(op, "responses", "422") == NULL);
	CHECK(AT(op, "responses", "409") != NULL);
	CHECK_STR(str(AT(doc, "components", "responses", "Stripe400", "content", "application/json",
			 "schema", "$ref")),
		  "#/components/schemas/StripeError");
	CHECK(AT(doc, "components", "responses", "Stripe409", "headers", "Stripe-Should-Retry"));
	CHECK(AT(doc, "components", "responses", "Problem409", "headers", "Link"));
	CHECK(AT(doc, "components", "headers", "Link") != NULL);
	CHECK(AT(doc, "components", "schemas", "StripeError", "properties", "error") != NULL);
	CHECK(YAJL_GET_INTEGER(AT(op, "x-idempotency", "retention_seconds")) == 3600);
	CHECK(YAJL_GET_INTEGER(AT(op, "x-idempotency", "in_progress", "wait_ms")) == 2000);
	CHECK_STR(str(AT(op, "x-idempotency", "recovery")), "forward");
	CHECK_STR(str(AT(op, "x-idempotency", "errors")), "stripe");
	CHECK_STR(str(AT(op, "x-idempotency", "actor", "issuer")), "https://id.example");
	CHECK_STR(str(AT(op, "x-idempotency", "actor", "claim")), "uid");
	yajl_tree_free(doc);
	free(md);
	free(oa);
}

/* Keys from a JSON body and a query, anonymous and authorization actors, rest paths. */
static void test_key_sources(void)
{
	char *md, *oa, *hook;
	yajl_val doc, op, p;

	render(TOP "route hook.in {\n match POST /hooks/*\n key_from json event.id\n"
		   " actor anonymous\n key optional\n fingerprint none\n}\n"
		   "route q.op {\n match PUT /q/{rest}/*\n match DELETE /q/{rest}/*\n"
		   " key_from query idem\n actor authorization\n fingerprint body\n"
		   " release_on 409\n unknown_on 500 502\n}\n",
	       &md, &oa);
	HAS(md, "`POST /hooks/*` (a final `*` matches zero or more segments)");
	HAS(md, "the string or integer at `event.id` in the JSON body");
	HAS(md, "an integer counts as its decimal text");
	HAS(md, "| Key required | no");
	HAS(md, "anonymous: every client shares one scope");
	HAS(md, "the body does not count");
	HAS(md, "the `idem` query parameter");
	HAS(md, "the `Authorization` header's value (hashed");
	HAS(md, "the body's raw bytes");
	HAS(md, "the API's `409` release the key");
	HAS(md, "`500`, `502` make the outcome unknown");
	/* anonymous: no actor to miss; optional key: none to miss */
	hook = section(md, "hook.in");
	HAS(md, "`idempotency-key-invalid`");
	LACKS(hook, "actor-missing");
	LACKS(hook, "actor-invalid");
	LACKS(hook, "idempotency-key-missing");
	free(hook);
	HAS(md, "| 400 | `idempotency-key-missing` | no key in the `idem` query parameter "
		"(percent-decoded) |");

	doc = openapi(oa);
	op = AT(doc, "paths", "/hooks/{rest}", "post");
	CHECK(op != NULL);
	p = param(AT(doc, "paths", "/hooks/{rest}"), "rest", "path");
	CHECK(p && YAJL_IS_TRUE(AT(p, "required")));
	CHECK(p && str(AT(p, "description")) && strstr(str(AT(p, "description")), "zero or more"));
	CHECK(param(op, "Idempotency-Key", "header") == NULL);
	CHECK(str(AT(op, "requestBody", "description")) &&
	      strstr(str(AT(op, "requestBody", "description")), "`event.id`"));
	CHECK(AT(op, "requestBody", "content", "application/json", "schema", "properties", "event",
		 "properties", "id", "pattern") != NULL);
	CHECK(AT(op, "responses", "401") == NULL);
	CHECK(AT(op, "responses", "400") != NULL); /* an invalid key still is */
	/* {rest} is taken: the final "*" is another name */
	op = AT(doc, "paths", "/q/{rest}/{rest_}", "put");
	CHECK(op != NULL);
	CHECK(AT(doc, "paths", "/q/{rest}/{rest_}", "delete") != NULL);
	p = param(op, "idem", "query");
	CHECK(p && YAJL_IS_TRUE(AT(p, "required")) && AT(p, "schema", "pattern"));
	CHECK(AT(op, "security") != NULL);
	CHECK(AT(doc, "components", "securitySchemes", "authorizationHeader") != NULL);
	CHECK_STR(str(AT(op, "x-idempotency", "key", "in")), "query");
	CHECK_STR(str(AT(op, "x-idempotency", "release_on")->u.array.values[0]), "409");
	yajl_tree_free(doc);
	free(md);
	free(oa);
}

/* operationIds stay unique; other methods, odd characters and no route at all. */
static void test_edges(void)
{
	char *md, *oa;
	yajl_val doc;

	render(TOP "route a {\n match POST /x\n match POST /y\n match LOCK /x\n}\n"
		   "route b {\n match POST /z\n match POST /p|q\n match POST /t`t\n}\n",
	       &md, &oa);
	HAS(md, "`POST /p\\|q`");
	HAS(md, "``POST /t`t``");
	doc = openapi(oa);
	CHECK_STR(str(AT(doc, "paths", "/x", "post", "operationId")), "a_post");
	CHECK_STR(str(AT(doc, "paths", "/y", "post", "operationId")), "a_post_2");
	CHECK(AT(doc, "paths", "/x", "x-additionalOperations", "LOCK") != NULL);
	/* numbered within the route */
	CHECK_STR(str(AT(doc, "paths", "/p|q", "post", "operationId")), "b_post_2");
	yajl_tree_free(doc);
	free(md);
	free(oa);

	/* fail-open and a token in a header of its own */
	render(TOP
	       "store_unavailable fail-open\n"
	       "route tok.op {\n match POST /tok\n"
	       " actor jwt /etc/idemproxy/jwks-secret-file.json audience=api header=X-Token\n}\n",
	       &md, &oa);
	no_secrets(md, oa);
	HAS(md, "`Idempotency-Enforced: false`");
	HAS(md, "for audience `api`, claim `sub`, as the whole value of the `X-Token` header");
	HAS(md, "no `X-Token` header");
	doc = openapi(oa);
	/* a JWT in a header of its own: an apiKey in that header */
	CHECK(param(AT(doc, "paths", "/tok", "post"), "X-Token", "header") == NULL);
	CHECK(YAJL_IS_ARRAY(AT(doc, "paths", "/tok", "post", "security")));
	CHECK_STR(str(AT(doc, "components", "securitySchemes", "actorHeader.x-token", "in")),
		  "header");
	CHECK(AT(doc, "components", "securitySchemes", "bearerJWT") == NULL);
	CHECK(AT(doc, "components", "headers", "Idempotency-Enforced") != NULL);
	CHECK(AT(doc, "components", "responses", "Response", "headers", "Idempotency-Enforced"));
	CHECK_STR(str(AT(doc, "paths", "/tok", "post", "x-idempotency", "store_unavailable")),
		  "fail-open");
	yajl_tree_free(doc);
	free(md);
	free(oa);

	render(TOP, &md, &oa);
	HAS(md, "No route intercepts anything");
	doc = openapi(oa);
	CHECK(YAJL_IS_OBJECT(AT(doc, "paths")) && AT(doc, "paths")->u.object.len == 0);
	yajl_tree_free(doc);
	free(md);
	free(oa);
}

/* max_owners, actor_max_owners and forward_key: a route states its limits and forwarded key. */
static void test_admission(void)
{
	char *md, *oa;
	yajl_val doc;

	render(TOP "max_owners 100\n"
		   "route order.pay {\n match POST /api/pay\n actor_max_owners 3\n"
		   " forward_key Upstream-Key\n}\n"
		   "route order.raw {\n match POST /api/raw\n forward_key Idempotency-Key raw\n"
		   " errors stripe\n}\n",
		   &md, &oa);
	HAS(md, "| Requests in flight | at most 3 requests with a new key of one actor, and 100 "
		"of all actors together run at once on each proxy instance; one more gets 429 "
		"`too-many-requests`");
	HAS(md, "| 429 | `too-many-requests` | a new key while too many requests run on this "
		"instance (3 of this actor, or 100 of all actors): nothing was recorded or sent "
		"to the API | `X-Should-Retry: true`, `Retry-After`, `Retry-After-Ms` |");
	HAS(md, "| Key sent to the API | the API receives `Upstream-Key` holding a key derived "
		"from the actor, the operation and the client's key");
	HAS(md, "the API receives `Idempotency-Key` holding the client's key as sent");
	HAS(md, "| 429 | `too_many_requests` (`rate_limit_error`) |");
	HAS(md, "at most 100 requests with a new key of all actors together");
	doc = openapi(oa);
	CHECK(AT(doc, "paths", "/api/pay", "post", "responses", "429") != NULL);
	yajl_tree_free(doc);
	free(md);
	free(oa);

	/* Without limits or forward_key neither is stated. */
	render(TOP "route order.pay {\n match POST /api/pay\n}\n", &md, &oa);
	LACKS(md, "Requests in flight");
	LACKS(md, "Key sent to the API");
	LACKS(md, "| 429 |");
	doc = openapi(oa);
	CHECK(AT(doc, "paths", "/api/pay", "post", "responses", "429") == NULL);
	yajl_tree_free(doc);
	free(md);
	free(oa);
}

/* Quotas and expired_keys: the rows each adds, only where it applies. */
static void test_quotas(void)
{
	char *md, *oa;
	yajl_val doc;
	int n;

	render(TOP "actor_max_records 100\nactor_max_stored_bytes 1m\n"
		   "route pay {\n match POST /pay\n expired_keys refuse 7d\n}\n"
		   "route run {\n match POST /run\n}\n",
	       &md, &oa);
	HAS(md, "| 429 | `actor-quota-exceeded` | a new key of an actor that holds 100 records or "
		"1048576 bytes of stored responses or more, counted over every instance up to 5s "
		"late");
	HAS(md, "| 422 | `idempotency-key-expired` | the key completed and its stored response "
		"expired less than 7d ago");
	HAS(md, "for 7d after it a retry is refused with 422 `idempotency-key-expired`");
	doc = openapi(oa);
	CHECK(AT(doc, "paths", "/pay", "post", "responses", "429") != NULL);
	CHECK(AT(doc, "paths", "/run", "post", "responses", "429") != NULL);
	yajl_tree_free(doc);
	/* One 422 row of it in the document: the route without refuse has none. */
	n = 0;
	for (const char *p = md; p && (p = strstr(p, "| `idempotency-key-expired` |")); p++)
		n++;
	CHECK(n == 1);
	free(md);
	free(oa);

	render(TOP "route run {\n match POST /run\n}\n", &md, &oa);
	CHECK(md && strstr(md, "actor-quota-exceeded") == NULL &&
	      strstr(md, "idempotency-key-expired") == NULL);
	doc = openapi(oa);
	CHECK(AT(doc, "paths", "/run", "post", "responses", "429") == NULL);
	yajl_tree_free(doc);
	free(md);
	free(oa);
}

static void test_formats(void)
{
	enum contract_format fmt = CONTRACT_OPENAPI;

	CHECK(contract_format_parse("markdown", &fmt) == 0 && fmt == CONTRACT_MARKDOWN);
	CHECK(contract_format_parse("openapi", &fmt) == 0 && fmt == CONTRACT_OPENAPI);
	CHECK(contract_format_parse("json", &fmt) == -1);
	CHECK(contract_format_parse("", &fmt) == -1);
	CHECK_STR(contract_media_type(CONTRACT_MARKDOWN), "text/markdown; charset=utf-8");
	CHECK_STR(contract_media_type(CONTRACT_OPENAPI), "application/json");
}

int main(void)
{
	test_header_actor();
	test_stripe_jwt();
	test_key_sources();
	test_edges();
	test_quotas();
	test_admission();
	test_formats();
	UNIT_DONE("contract");
}
