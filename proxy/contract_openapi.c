/*
 * The contract as an OpenAPI 3.1 document (contract_openapi.h), read from
 * its facts only: a path item per intercepted path, an operation per
 * method with the key and actor as parameters (or the request body and a
 * security scheme), the facts as its description and as the x-idempotency
 * extension, and its answers as references to components.responses, one
 * per dialect and status, whose headers are components.headers.
 */
#include "proxy/contract_openapi.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "http/header.h"
#include "proxy/contract_facts.h"
#include "proxy/idemkey.h"
#include "proxy/json.h"
#include "proxy/problem.h"
#include "proxy/respond.h"

#define CONTRACT_TITLE		 "idemproxy idempotency contract"
#define CONTRACT_OPENAPI_VERSION "3.1.0"
/* A key's longest spelling: the sf-string form with every character escaped. */
#define CONTRACT_KEY_WIRE_MAX (2 + 2 * IDEMKEY_MAX)
/* What idemkey.c accepts: bare visible ASCII without '"', or "..." with \" and \\. */
#define CONTRACT_KEY_PATTERN "^(?:[!#-~]{1,255}|\"(?:[!#-\\[\\]-~]|\\\\[\"\\\\]){1,255}\")$"
_Static_assert(IDEMKEY_MAX == 255, "CONTRACT_KEY_PATTERN spells IDEMKEY_MAX");

/* Security scheme names (components.securitySchemes) of credential actors. */
static const char *const oa_scheme_names[] = {
    [CONTRACT_NO_CREDENTIAL] = NULL,
    [CONTRACT_BEARER_JWT] = "bearerJWT",
    [CONTRACT_AUTHORIZATION] = "authorizationHeader",
};

/* The document being written and the contract it tells. */
struct oa {
	struct json_writer w;
	const struct contract *c;
};

/* {"$ref": "#/components/KIND/NAME"}, with a description when it is not NULL. */
static void oa_ref(struct oa *o, const char *kind, const char *name, const char *description)
{
	char ref[CONTRACT_ID_MAX];

	snprintf(ref, sizeof(ref), "#/components/%s/%s", kind, name);
	json_map_open(&o->w);
	json_key_str(&o->w, "$ref", ref);
	if (description)
		json_key_str(&o->w, "description", description);
	json_map_close(&o->w);
}

/* {"type": "string", "const": value} or {"type": type} */
static void oa_schema(struct oa *o, const char *type, const char *value)
{
	json_key_map(&o->w, "schema");
	json_key_str(&o->w, "type", type);
	if (value)
		json_key_str(&o->w, "const", value);
	json_map_close(&o->w);
}

/* A key's schema: idemkey.c's rules; from a JSON body an integer too. */
static void oa_key_schema(struct oa *o, int json)
{
	json_map_open(&o->w);
	json_str(&o->w, "type");
	if (json) {
		json_array_open(&o->w);
		json_str(&o->w, "string");
		json_str(&o->w, "integer");
		json_array_close(&o->w);
	} else {
		json_str(&o->w, "string");
	}
	json_key_int(&o->w, "minLength", 1);
	json_key_int(&o->w, "maxLength", CONTRACT_KEY_WIRE_MAX);
	json_key_str(&o->w, "pattern", CONTRACT_KEY_PATTERN);
	json_map_close(&o->w);
}

/* The key as a header or query parameter. */
static void oa_key_param(struct oa *o, const struct contract_route *cr)
{
	json_map_open(&o->w);
	json_key_str(&o->w, "name", cr->key.name);
	json_key_str(&o->w, "in", cr->key.in);
	json_key_bool(&o->w, "required", cr->key.required);
	json_key_str(&o->w, "description", cr->fact[FACT_KEY_SYNTAX]);
	json_str(&o->w, "schema");
	oa_key_schema(o, 0);
	json_map_close(&o->w);
}

static void oa_parameters(struct oa *o, const struct contract_route *cr)
{
	json_str(&o->w, "parameters");
	json_array_open(&o->w);
	if (strcmp(cr->key.in, "json") != 0)
		oa_key_param(o, cr);
	json_array_close(&o->w);
}

/* A dot path of the JSON body the contract names: the key's or a fingerprinted field's. */
struct oa_member {
	const char *at;			    /* the segment being written */
	const struct contract_field *field; /* NULL: the key */
};

/* The length of the segment at s, up to a '.' or the end. */
static size_t oa_segment_len(const char *s)
{
	return strcspn(s, ".");
}

/* 1 when a and b are at the same segment. */
static int oa_same_segment(const char *a, const char *b)
{
	size_t n = oa_segment_len(a);

	return n == oa_segment_len(b) && memcmp(a, b, n) == 0;
}

static void oa_body_object(struct oa *o, const struct contract_route *cr, struct oa_member *m,
			   int n);

/* The schema of the members m[0..n) (all at one segment): the key's, an
 * object of the deeper ones, or a fingerprinted field of any type. */
static void oa_body_member(struct oa *o, const struct contract_route *cr, struct oa_member *m,
			   int n)
{
	int deeper = 0;
	const struct contract_field *field = NULL;

	for (int i = 0; i < n; i++) {
		if (!m[i].field && !m[i].at[oa_segment_len(m[i].at)]) {
			oa_key_schema(o, 1);
			return;
		}
		if (m[i].at[oa_segment_len(m[i].at)])
			deeper = 1;
		else
			field = m[i].field;
	}
	if (deeper) {
		struct oa_member sub[n];
		int k = 0;

		for (int i = 0; i < n; i++) {
			if (!m[i].at[oa_segment_len(m[i].at)])
				continue;
			sub[k] = m[i];
			sub[k++].at += oa_segment_len(m[i].at) + 1;
		}
		oa_body_object(o, cr, sub, k);
		return;
	}
	char text[CONTRACT_NAME_MAX];

	snprintf(text, sizeof(text), "part of the fingerprint%s%s%s",
		 field->transform ? " (transform `" : "", field->transform ? field->transform : "",
		 field->transform ? "`)" : "");
	json_map_open(&o->w);
	json_key_str(&o->w, "description", text);
	json_map_close(&o->w);
}

/* An open object (other members allowed) of the members m[0..n), each at
 * the segment that names its property. */
static void oa_body_object(struct oa *o, const struct contract_route *cr, struct oa_member *m,
			   int n)
{
	int done[n > 0 ? n : 1];

	json_map_open(&o->w);
	json_key_str(&o->w, "type", "object");
	json_key_bool(&o->w, "additionalProperties", 1);
	for (int i = 0; i < n; i++) {
		if (!m[i].field && cr->key.required) {
			json_str(&o->w, "required");
			json_array_open(&o->w);
			json_strn(&o->w, m[i].at, oa_segment_len(m[i].at));
			json_array_close(&o->w);
		}
	}
	if (n)
		json_key_map(&o->w, "properties");
	memset(done, 0, sizeof(done));
	for (int i = 0; i < n; i++) {
		struct oa_member same[n];
		int k = 0;

		if (done[i])
			continue;
		for (int j = i; j < n; j++) {
			if (!done[j] && oa_same_segment(m[i].at, m[j].at)) {
				done[j] = 1;
				same[k++] = m[j];
			}
		}
		json_strn(&o->w, m[i].at, oa_segment_len(m[i].at));
		oa_body_member(o, cr, same, k);
	}
	if (n)
		json_map_close(&o->w);
	json_map_close(&o->w);
}

/* The media type a route reads the body as: JSON when the key or the fingerprint is in it. */
static int oa_body_is_json(const struct contract_route *cr)
{
	return strcmp(cr->key.in, "json") == 0 || strcmp(cr->fp.mode, "json") == 0;
}

/* The request body: the JSON one with the key at its dot path and the
 * fingerprinted fields, as nested open objects; else any content. */
static void oa_request_body(struct oa *o, const struct contract_route *cr)
{
	int json = strcmp(cr->key.in, "json") == 0, n = 0;
	struct oa_member m[cr->fp.nfields + 1];

	if (json)
		m[n++] = (struct oa_member){.at = cr->key.name};
	for (int i = 0; i < cr->fp.nfields; i++)
		m[n++] =
		    (struct oa_member){.at = cr->fp.fields[i].path, .field = &cr->fp.fields[i]};
	json_key_map(&o->w, "requestBody");
	json_key_str(&o->w, "description", cr->fact[json ? FACT_KEY : FACT_FINGERPRINT]);
	json_key_bool(&o->w, "required", json && cr->key.required);
	json_key_map(&o->w, "content");
	if (oa_body_is_json(cr)) {
		json_str(&o->w, "application/json");
		json_map_open(&o->w);
		json_str(&o->w, "schema");
		oa_body_object(o, cr, m, n);
		json_map_close(&o->w);
	} else {
		json_key_map(&o->w, "*/*");
		json_key_map(&o->w, "schema");
		json_map_close(&o->w);
		json_map_close(&o->w);
	}
	json_map_close(&o->w); /* content */
	json_map_close(&o->w); /* requestBody */
}

/* A set of statuses as ["4xx", "503"]. */
static void oa_status_set(struct oa *o, const char *key, const struct status_set *s)
{
	char item[CONTRACT_STATUS_TEXT];
	int st = CONTRACT_STATUS_MIN;

	json_str(&o->w, key);
	json_array_open(&o->w);
	while (contract_status_next(s, &st, item) == 0)
		json_str(&o->w, item);
	json_array_close(&o->w);
}

/* x-idempotency's key and actor: where each comes from. */
static void oa_x_key_actor(struct oa *o, const struct contract_route *cr)
{
	const struct contract_actor *a = &cr->actor;

	json_key_map(&o->w, "key");
	json_key_str(&o->w, "in", cr->key.in);
	json_key_str(&o->w, strcmp(cr->key.in, "json") == 0 ? "path" : "name", cr->key.name);
	json_key_bool(&o->w, "required", cr->key.required);
	json_key_int(&o->w, "max_length", IDEMKEY_MAX);
	json_map_close(&o->w);
	json_key_map(&o->w, "actor");
	json_key_str(&o->w, "source", a->source);
	if (a->header)
		json_key_str(&o->w, "header", a->header);
	if (a->jwt) {
		if (a->issuer)
			json_key_str(&o->w, "issuer", a->issuer);
		if (a->audience)
			json_key_str(&o->w, "audience", a->audience);
		json_key_str(&o->w, "claim", a->claim);
		json_key_bool(&o->w, "require_exp", a->require_exp);
	}
	json_map_close(&o->w);
}

static void oa_x_fingerprint(struct oa *o, const struct contract_fingerprint *fp)
{
	json_key_map(&o->w, "fingerprint");
	json_key_str(&o->w, "mode", fp->mode);
	if (fp->nfields) {
		json_str(&o->w, "fields");
		json_array_open(&o->w);
		for (int i = 0; i < fp->nfields; i++) {
			json_map_open(&o->w);
			json_key_str(&o->w, "path", fp->fields[i].path);
			if (fp->fields[i].transform)
				json_key_str(&o->w, "transform", fp->fields[i].transform);
			json_map_close(&o->w);
		}
		json_array_close(&o->w);
	}
	json_str(&o->w, "headers");
	json_array_open(&o->w);
	for (int i = 0; i < fp->nheaders; i++)
		json_str(&o->w, fp->headers[i]);
	json_array_close(&o->w);
	json_map_close(&o->w);
}

/* The x-idempotency extension: the route's facts as data. */
static void oa_x_idempotency(struct oa *o, const struct contract_route *cr)
{
	json_key_map(&o->w, "x-idempotency");
	json_key_str(&o->w, "operation", cr->operation);
	oa_x_key_actor(o, cr);
	oa_x_fingerprint(o, &cr->fp);
	json_key_int(&o->w, "retention_seconds", cr->retention_ms / 1000);
	json_key_map(&o->w, "in_progress");
	json_key_str(&o->w, "mode", cr->in_progress);
	if (cr->wait_ms)
		json_key_int(&o->w, "wait_ms", cr->wait_ms);
	json_map_close(&o->w);
	json_key_str(&o->w, "recovery", cr->recovery);
	oa_status_set(o, "release_on", cr->release_on);
	oa_status_set(o, "unknown_on", cr->unknown_on);
	json_key_str(&o->w, "errors", cr->errors);
	json_key_str(&o->w, "store_unavailable", o->c->store_unavailable);
	json_map_close(&o->w);
}

/* The name of the components.responses entry for status in cr's dialect. */
static void oa_response_name(char *out, size_t n, int stripe, int status)
{
	snprintf(out, n, "%s%d", stripe ? "Stripe" : "Problem", status);
}

/* "- NAME: when" for each of cr's rows with status. */
static char *oa_status_description(const struct contract *c, const struct contract_route *cr,
				   int status)
{
	struct contract_text t;

	if (!contract_text_begin(&t))
		return NULL;
	for (int i = 0; i < cr->nrows; i++) {
		if (cr->rows[i].status != status)
			continue;
		fputs("- ", t.f);
		contract_error_name(t.f, c, cr, cr->rows[i].kind);
		fprintf(t.f, ": %s.\n", cr->rows[i].when);
	}
	return contract_text_end(&t, NULL);
}

static void oa_responses(struct oa *o, const struct contract_route *cr)
{
	char code[CONTRACT_STATUS_TEXT], name[CONTRACT_NAME_MAX], *text;

	json_key_map(&o->w, "responses");
	json_str(&o->w, "default");
	oa_ref(o, "responses", "Response", NULL);
	for (int i = 0; i < cr->nrows; i++) {
		if (i && cr->rows[i - 1].status == cr->rows[i].status)
			continue;
		snprintf(code, sizeof(code), "%d", cr->rows[i].status);
		oa_response_name(name, sizeof(name), cr->stripe, cr->rows[i].status);
		text = oa_status_description(o->c, cr, cr->rows[i].status);
		if (!text)
			json_writer_fail(&o->w);
		json_str(&o->w, code);
		oa_ref(o, "responses", name, text ? text : "");
		free(text);
	}
	json_map_close(&o->w);
}

/* The route's facts as a CommonMark list, an operation's description (malloc'd;
 * NULL when out of memory). */
static char *oa_facts_list(const struct contract_route *cr)
{
	struct contract_text t;

	if (!contract_text_begin(&t))
		return NULL;
	for (int i = 0; i < FACT_COUNT; i++)
		if (cr->fact[i][0])
			fprintf(t.f, "- **%s**: %s.\n", contract_fact_label(i), cr->fact[i]);
	return contract_text_end(&t, NULL);
}

/* The header an actor is read from when it is a key of its own (apiKey), else NULL. */
static const char *oa_actor_api_key(const struct contract_route *cr)
{
	return cr->actor.credential == CONTRACT_NO_CREDENTIAL ? cr->actor.header : NULL;
}

/* The security scheme name of the actor header h: "actorHeader." and h in
 * lower case, a character outside [a-z0-9.-] as "_XX" (hex). */
static void oa_header_scheme_name(char *out, size_t n, const char *h)
{
	size_t k = (size_t)snprintf(out, n, "actorHeader.");

	for (; *h && k + 4 < n; h++) {
		unsigned char ch = (unsigned char)(*h >= 'A' && *h <= 'Z' ? *h - 'A' + 'a' : *h);

		if ((ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '.' || ch == '-')
			out[k++] = (char)ch;
		else
			k += (size_t)snprintf(out + k, n - k, "_%02X", ch);
	}
	out[k] = '\0';
}

/* "security": [{SCHEME: []}], the credential or header the actor is taken
 * from; [] for an anonymous actor (no credential asked for). */
static void oa_security(struct oa *o, const struct contract_route *cr)
{
	char name[CONTRACT_NAME_MAX * 2];
	const char *h = oa_actor_api_key(cr);

	json_str(&o->w, "security");
	json_array_open(&o->w);
	if (cr->actor.credential != CONTRACT_NO_CREDENTIAL || h) {
		if (h)
			oa_header_scheme_name(name, sizeof(name), h);
		json_map_open(&o->w);
		json_str(&o->w, h ? name : oa_scheme_names[cr->actor.credential]);
		json_array_open(&o->w);
		json_array_close(&o->w);
		json_map_close(&o->w);
	}
	json_array_close(&o->w);
}

/* 1 for a method whose request has a body a client sends. */
static int oa_method_has_body(const char *method)
{
	return strcmp(method, "DELETE") != 0 && strcmp(method, "OPTIONS") != 0 &&
	       strcmp(method, "TRACE") != 0;
}

static void oa_operation(struct oa *o, const struct contract_op *op)
{
	const struct contract_route *cr = op->cr;
	char *facts = oa_facts_list(cr);

	if (!facts)
		json_writer_fail(&o->w);
	json_map_open(&o->w);
	json_key_str(&o->w, "operationId", op->id);
	json_key_str(&o->w, "summary", cr->operation);
	json_key_str(&o->w, "description", facts);
	free(facts);
	oa_parameters(o, cr);
	if (strcmp(cr->key.in, "json") == 0 || oa_method_has_body(op->method))
		oa_request_body(o, cr);
	oa_security(o, cr);
	oa_x_idempotency(o, cr);
	oa_responses(o, cr);
	json_map_close(&o->w);
}

/* 1 for a method an OpenAPI 3.1 path item has a field for (the unsafe ones). */
static int oa_method_fixed(const char *method)
{
	return !strcmp(method, "POST") || !strcmp(method, "PUT") || !strcmp(method, "PATCH") ||
	       !strcmp(method, "DELETE");
}

/* 1 when an op before k has k's path and method: the first match wins. */
static int oa_op_shadowed(const struct contract *c, int k)
{
	for (int i = 0; i < k; i++)
		if (!strcmp(c->ops[i].oa_path, c->ops[k].oa_path) &&
		    !strcmp(c->ops[i].method, c->ops[k].method))
			return 1;
	return 0;
}

/* 1 when ops[k] goes in the path item of ops[first], among the methods with a
 * field of their own (fixed) or the others. */
static int oa_op_listed(const struct contract *c, int first, int k, int fixed)
{
	return !strcmp(c->ops[k].oa_path, c->ops[first].oa_path) &&
	       oa_method_fixed(c->ops[k].method) == fixed && !oa_op_shadowed(c, k);
}

/* The operations of ops[first]'s path item, keyed by their method. */
static void oa_path_operations(struct oa *o, int first, int fixed)
{
	const struct contract *c = o->c;
	char method[CONTRACT_NAME_MAX];

	for (int k = first; k < c->nops; k++) {
		if (!oa_op_listed(c, first, k, fixed))
			continue;
		snprintf(method, sizeof(method), "%s", c->ops[k].method);
		for (char *s = method; fixed && *s; s++)
			*s = (char)(*s - 'A' + 'a');
		json_str(&o->w, method);
		oa_operation(o, &c->ops[k]);
	}
}

/* The path's parameters: each {name}, and a final "*" as {rest}. */
static void oa_path_params(struct oa *o, const struct contract_op *op)
{
	json_str(&o->w, "parameters");
	json_array_open(&o->w);
	for (int i = 0; i < op->nparams; i++) {
		const struct contract_param *p = &op->params[i];

		json_map_open(&o->w);
		json_str(&o->w, "name");
		json_strn(&o->w, p->name, p->len);
		json_key_str(&o->w, "in", "path");
		json_key_bool(&o->w, "required", 1);
		json_key_str(&o->w, "description",
			     p->rest
				 ? "the rest of the path: it matches zero or more segments, \"/\" "
				   "included"
				 : "one path segment");
		oa_schema(o, "string", NULL);
		json_map_close(&o->w);
	}
	json_array_close(&o->w);
}

static void oa_paths(struct oa *o)
{
	const struct contract *c = o->c;
	int seen, other;

	json_key_map(&o->w, "paths");
	for (int k = 0; k < c->nops; k++) {
		seen = other = 0;
		for (int i = 0; i < k && !seen; i++)
			seen = !strcmp(c->ops[i].oa_path, c->ops[k].oa_path);
		if (seen)
			continue;
		json_key_map(&o->w, c->ops[k].oa_path);
		if (strchr(c->ops[k].oa_path, '{'))
			oa_path_params(o, &c->ops[k]);
		oa_path_operations(o, k, 1);
		for (int i = k; i < c->nops && !other; i++)
			other = oa_op_listed(c, k, i, 0);
		/* OpenAPI 3.1 has no field for other methods (3.2 calls them
		 * additionalOperations). */
		if (other) {
			json_key_map(&o->w, "x-additionalOperations");
			oa_path_operations(o, k, 0);
			json_map_close(&o->w);
		}
		json_map_close(&o->w);
	}
	json_map_close(&o->w);
}

/* The schema type of a header's value; "boolean" is the text true or false. */
static const char *const oa_value_types[] = {
    [RESPOND_VALUE_TEXT] = "string",
    [RESPOND_VALUE_BOOL] = "boolean",
    [RESPOND_VALUE_INTEGER] = "integer",
};

/* What the problem headers (respond.c's advice) mean, for components.headers. */
static const char *const oa_problem_header_descriptions[RESPOND_PH_COUNT] = {
    [RESPOND_PH_SHOULD_RETRY] = "`true` when the same request may succeed later, `false` "
				"otherwise",
    [RESPOND_PH_STRIPE_SHOULD_RETRY] = "as `X-Should-Retry`, for Stripe's SDKs",
    [RESPOND_PH_RETRY_AFTER] = "seconds to wait before retrying; for `operation-in-progress` an "
			       "estimate of when the first request will be done",
    [RESPOND_PH_RETRY_AFTER_MS] = "`Retry-After` in milliseconds",
    [RESPOND_PH_WWW_AUTHENTICATE] = "`Bearer`, or `Bearer error=\"invalid_token\"` for an actor "
				    "that is not valid",
    [RESPOND_PH_LINK] = "where this contract is published",
};

/* 1 when the contract of c names marker row r: a fail-open marker only under fail-open. */
static int oa_marker_named(const struct contract *c, const struct header_policy *r)
{
	return (r->flags & HEADER_MARKER) && (!(r->flags & HEADER_FAIL_OPEN) || c->fail_open);
}

/* components.headers' entry name: {description, schema}; value: the one it takes, or NULL. */
static void oa_header(struct oa *o, const char *name, const char *type, const char *value,
		      const char *description)
{
	json_key_map(&o->w, name);
	json_key_str(&o->w, "description", description);
	json_key_map(&o->w, "schema");
	json_key_str(&o->w, "type", strcmp(type, "boolean") == 0 ? "string" : type);
	if (strcmp(type, "boolean") == 0) {
		json_str(&o->w, "enum");
		json_array_open(&o->w);
		json_str(&o->w, "true");
		json_str(&o->w, "false");
		json_array_close(&o->w);
	} else if (strcmp(type, "integer") == 0) {
		json_key_int(&o->w, "minimum", 1);
	}
	if (value)
		json_key_str(&o->w, "const", value);
	json_map_close(&o->w);
	json_map_close(&o->w);
}

/* 1 when some answer of the document may carry the problem header h. */
static int oa_problem_header_described(const struct contract *c, enum respond_problem_header h)
{
	switch (respond_problem_header(h)->on) {
	case RESPOND_ON_STRIPE:
		return c->any_stripe;
	case RESPOND_ON_CONTRACT_URL:
		return c->link != NULL;
	default:
		return 1;
	}
}

/* The header every response carries, the API's own and idemproxy's answers alike. */
#define OA_REQUEST_ID "X-Request-Id"

/* components.headers: every header the responses name. */
static void oa_component_headers(struct oa *o)
{
	const struct respond_ph_def *d;

	json_key_map(&o->w, "headers");
	oa_header(o, OA_REQUEST_ID, "string", NULL,
		  "the request's id: the client's `X-Request-Id` when it sent one of 1 to 128 "
		  "visible ASCII characters, otherwise one made for it; a replay carries the "
		  "retry's");
	for (int h = 0; h < RESPOND_PH_COUNT; h++) {
		d = respond_problem_header(h);
		if (!d->advice || !oa_problem_header_described(o->c, h))
			continue;
		oa_header(o, d->name, oa_value_types[d->value],
			  h == RESPOND_PH_LINK ? o->c->link : NULL,
			  oa_problem_header_descriptions[h]);
	}
	for (size_t i = 0; i < header_npolicies; i++)
		if (oa_marker_named(o->c, &header_policies[i]))
			oa_header(o, header_policies[i].name, "string", header_policies[i].value,
				  header_policies[i].about);
	json_map_close(&o->w);
}

/* "NAME": {"$ref": "#/components/headers/NAME"} */
static void oa_header_ref(struct oa *o, const char *name)
{
	json_str(&o->w, name);
	oa_ref(o, "headers", name, NULL);
}

_Static_assert(PROBLEM_KIND_COUNT <= 32, "kinds are a bit mask");
#define OA_KIND(k) (1u << (k))

/* The kinds the document's routes of one dialect answer with status, and
 * in *headers the headers those answers carry. */
static unsigned oa_status_kinds(const struct contract *c, int stripe, int status, unsigned *headers)
{
	unsigned kinds = 0;

	*headers = 0;
	for (int i = 0; i < c->nroutes; i++) {
		const struct contract_route *cr = &c->routes[i];

		for (int j = 0; cr->live && cr->stripe == stripe && j < cr->nrows; j++) {
			if (cr->rows[j].status == status) {
				kinds |= OA_KIND(cr->rows[j].kind);
				*headers |= cr->rows[j].headers;
			}
		}
	}
	return kinds;
}

/* The advice among headers (a row's mask), each a reference. */
static void oa_problem_header_refs(struct oa *o, unsigned headers)
{
	const struct respond_ph_def *d;

	json_key_map(&o->w, "headers");
	oa_header_ref(o, OA_REQUEST_ID);
	for (int h = 0; h < RESPOND_PH_COUNT; h++) {
		d = respond_problem_header(h);
		if (d->advice && (headers & (1u << h)))
			oa_header_ref(o, d->name);
	}
	json_map_close(&o->w);
}

/* components.responses' entry of one dialect and status: kinds say what it
 * may be, headers what it carries. */
static void oa_component_response(struct oa *o, int stripe, int status, unsigned kinds,
				  unsigned headers)
{
	char name[CONTRACT_NAME_MAX], text[CONTRACT_ID_MAX * 4];
	size_t n = (size_t)snprintf(text, sizeof(text), "Answered %d:", status);
	int named = 0;

	for (int k = 0; k < PROBLEM_KIND_COUNT; k++) {
		if (!(kinds & OA_KIND(k)))
			continue;
		if (n < sizeof(text))
			n += (size_t)snprintf(text + n, sizeof(text) - n, "%s `%s`",
					      named++ ? "," : "",
					      stripe ? o->c->stripe_code[k] : problem_name(k));
	}
	oa_response_name(name, sizeof(name), stripe, status);
	json_key_map(&o->w, name);
	json_key_str(&o->w, "description", text);
	oa_problem_header_refs(o, headers);
	json_key_map(&o->w, "content");
	json_key_map(&o->w, stripe ? PROBLEM_STRIPE_MEDIA_TYPE : PROBLEM_MEDIA_TYPE);
	json_str(&o->w, "schema");
	oa_ref(o, "schemas", stripe ? "StripeError" : "Problem", NULL);
	json_map_close(&o->w);
	json_map_close(&o->w);
	json_map_close(&o->w);
}

/* components.responses: the API's own response, then every problem status. */
static void oa_component_responses(struct oa *o)
{
	unsigned kinds, headers;

	json_key_map(&o->w, "responses");
	json_key_map(&o->w, "Response");
	json_key_str(&o->w, "description",
		     "The API's own response. A retry of a completed request gets "
		     "it again, from the record, with `Idempotent-Replayed: true`; a "
		     "replay of a stored 5xx says `X-Should-Retry: false`.");
	json_key_map(&o->w, "headers");
	oa_header_ref(o, OA_REQUEST_ID);
	for (size_t i = 0; i < header_npolicies; i++)
		if (oa_marker_named(o->c, &header_policies[i]))
			oa_header_ref(o, header_policies[i].name);
	json_map_close(&o->w);
	json_map_close(&o->w);
	for (int stripe = 0; stripe <= 1; stripe++) {
		for (int st = CONTRACT_STATUS_MIN; st <= CONTRACT_STATUS_MAX; st++) {
			kinds = oa_status_kinds(o->c, stripe, st, &headers);
			if (kinds)
				oa_component_response(o, stripe, st, kinds, headers);
		}
	}
	json_map_close(&o->w);
}

/* {"type": "string"} as the property key of an object schema. */
static void oa_string_property(struct oa *o, const char *key, const char *description)
{
	json_key_map(&o->w, key);
	json_key_str(&o->w, "type", "string");
	if (description)
		json_key_str(&o->w, "description", description);
	json_map_close(&o->w);
}

static void oa_required(struct oa *o, const char *const *names)
{
	json_str(&o->w, "required");
	json_array_open(&o->w);
	for (; *names; names++)
		json_str(&o->w, *names);
	json_array_close(&o->w);
}

static void oa_problem_schema(struct oa *o)
{
	static const char *const required[] = {"type", "title", "status", NULL};

	json_key_map(&o->w, "Problem");
	json_key_str(&o->w, "description", "RFC 9457 problem details");
	json_key_str(&o->w, "type", "object");
	oa_required(o, required);
	json_key_map(&o->w, "properties");
	json_key_map(&o->w, "type");
	json_key_str(&o->w, "type", "string");
	json_key_str(&o->w, "format", "uri-reference");
	json_key_str(&o->w, "description", "problem_base followed by the error's name");
	json_map_close(&o->w);
	oa_string_property(o, "title", NULL);
	json_key_map(&o->w, "status");
	json_key_str(&o->w, "type", "integer");
	json_map_close(&o->w);
	oa_string_property(o, "detail", NULL);
	json_map_close(&o->w);
	json_map_close(&o->w);
}

static void oa_stripe_schema(struct oa *o)
{
	static const char *const outer[] = {"error", NULL}, *const inner[] = {"type", "code",
									      "message", NULL};
	const struct contract *c = o->c;

	json_key_map(&o->w, "StripeError");
	json_key_str(&o->w, "description", "An error in Stripe's shape (`errors stripe`)");
	json_key_str(&o->w, "type", "object");
	oa_required(o, outer);
	json_key_map(&o->w, "properties");
	json_key_map(&o->w, "error");
	json_key_str(&o->w, "type", "object");
	oa_required(o, inner);
	json_key_map(&o->w, "properties");
	json_key_map(&o->w, "type");
	json_key_str(&o->w, "type", "string");
	json_str(&o->w, "enum");
	json_array_open(&o->w);
	for (int i = 0; i < c->nstripe_types; i++)
		json_str(&o->w, c->stripe_types[i]);
	json_array_close(&o->w);
	json_map_close(&o->w);
	oa_string_property(o, "code", "the error's name in snake_case");
	oa_string_property(o, "message", NULL);
	json_map_close(&o->w);
	json_map_close(&o->w);
	json_map_close(&o->w);
	json_map_close(&o->w);
}

/* The first live route before k (or k) whose actor is the header of route k's. */
static int oa_first_header_route(const struct contract *c, int k)
{
	const char *h = oa_actor_api_key(&c->routes[k]);

	for (int i = 0; i < k; i++)
		if (c->routes[i].live && oa_actor_api_key(&c->routes[i]) &&
		    strcasecmp(oa_actor_api_key(&c->routes[i]), h) == 0)
			return i;
	return k;
}

/* An apiKey scheme per header an actor is read from. */
static void oa_header_schemes(struct oa *o)
{
	const struct contract *c = o->c;
	char name[CONTRACT_NAME_MAX * 2];

	for (int k = 0; k < c->nroutes; k++) {
		const struct contract_route *cr = &c->routes[k];

		if (!cr->live || !oa_actor_api_key(cr) || oa_first_header_route(c, k) != k)
			continue;
		oa_header_scheme_name(name, sizeof(name), cr->actor.header);
		json_key_map(&o->w, name);
		json_key_str(&o->w, "type", "apiKey");
		json_key_str(&o->w, "in", "header");
		json_key_str(&o->w, "name", cr->actor.header);
		json_key_str(&o->w, "description", cr->fact[FACT_ACTOR]);
		json_map_close(&o->w);
	}
}

/* 1 when some live route reads its actor from a header of its own. */
static int oa_any_header_actor(const struct contract *c)
{
	for (int k = 0; k < c->nroutes; k++)
		if (c->routes[k].live && oa_actor_api_key(&c->routes[k]))
			return 1;
	return 0;
}

/* The credentials a jwt or authorization actor comes from. */
static void oa_security_schemes(struct oa *o)
{
	json_key_map(&o->w, "securitySchemes");
	if (o->c->any_jwt) {
		json_key_map(&o->w, oa_scheme_names[CONTRACT_BEARER_JWT]);
		json_key_str(&o->w, "type", "http");
		json_key_str(&o->w, "scheme", "bearer");
		json_key_str(&o->w, "bearerFormat", "JWT");
		json_key_str(&o->w, "description",
			     "the token's claim is the actor a key belongs to");
		json_map_close(&o->w);
	}
	if (o->c->any_auth) {
		json_key_map(&o->w, oa_scheme_names[CONTRACT_AUTHORIZATION]);
		json_key_str(&o->w, "type", "apiKey");
		json_key_str(&o->w, "in", "header");
		json_key_str(&o->w, "name", "Authorization");
		json_key_str(&o->w, "description",
			     "a hash of the whole value is the actor a key belongs to");
		json_map_close(&o->w);
	}
	oa_header_schemes(o);
	json_map_close(&o->w);
}

static void oa_components(struct oa *o)
{
	json_key_map(&o->w, "components");
	json_key_map(&o->w, "schemas");
	if (o->c->any_problem)
		oa_problem_schema(o);
	if (o->c->any_stripe)
		oa_stripe_schema(o);
	json_map_close(&o->w);
	oa_component_responses(o);
	oa_component_headers(o);
	if (o->c->any_jwt || o->c->any_auth || oa_any_header_actor(o->c))
		oa_security_schemes(o);
	json_map_close(&o->w);
}

/* servers: contract_server, else "/" (the document's own origin, OpenAPI's default). */
static void oa_servers(struct oa *o)
{
	json_str(&o->w, "servers");
	json_array_open(&o->w);
	json_map_open(&o->w);
	json_key_str(&o->w, "url", o->c->server ? o->c->server : "/");
	json_key_str(&o->w, "description",
		     o->c->server ? "the API behind idemproxy"
				  : "the origin this document is served from (no contract_server)");
	json_map_close(&o->w);
	json_array_close(&o->w);
}

static void oa_doc(struct oa *o)
{
	json_map_open(&o->w);
	json_key_str(&o->w, "openapi", CONTRACT_OPENAPI_VERSION);
	json_key_map(&o->w, "info");
	json_key_str(&o->w, "title", CONTRACT_TITLE);
	json_key_str(&o->w, "version", IDEMPROXY_VERSION);
	json_key_str(&o->w, "description", o->c->intro);
	json_map_close(&o->w);
	oa_servers(o);
	oa_paths(o);
	oa_components(o);
	json_map_close(&o->w);
}

char *contract_openapi_render(const struct contract *c, size_t *len)
{
	struct oa o = {.c = c};

	json_writer_init(&o.w, JSON_PRETTY | JSON_NEWLINE);
	oa_doc(&o);
	return json_writer_finish(&o.w, len);
}
