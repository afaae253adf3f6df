/*
 * Record operations: statement argument checks, then every statement run
 * against real rows in the PostgreSQL that IDEMPROXY_TEST_DSN names (the
 * migrations are applied there), its result rendered and parsed back.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <libpq-fe.h>
#include <yajl/yajl_tree.h>

#include "conf/conf.h"
#include "proxy/digest.h"
#include "proxy/migrate.h"
#include "proxy/records.h"
#include "tests/unit/unit.h"

#define TEST_OP		  "order.pay"
#define TEST_RETENTION_MS 3600000
#define TEST_ERR_MAX	  512
#define TEST_RECORD_KEYS  22

static PGconn *conn;
static char actor[64];

/* ---- argument checks (no database) ---- */

static int build_ok(enum records_cmd cmd, const struct records_args *a)
{
	struct records_stmt st;
	char err[TEST_ERR_MAX] = "";
	int rc = records_stmt_build(cmd, a, &st, err, sizeof(err));

	if (rc == 0)
		records_stmt_clear(&st);
	else
		CHECK(err[0] != '\0');
	return rc == 0;
}

static void test_build(void)
{
	struct records_args a = {
	    .actor = "h:a", .operation = "op", .key = "k", .status = 201, .retention_ms = 1000};
	struct records_args bad;
	struct records_stmt st;
	char err[TEST_ERR_MAX];

	a.limit = 0;
	CHECK(build_ok(RECORDS_LIST, &a));
	a.limit = 1;
	CHECK(build_ok(RECORDS_LIST, &a));
	a.limit = RECORDS_LIST_MAX;
	CHECK(build_ok(RECORDS_LIST, &a));
	a.limit = RECORDS_LIST_MAX + 1;
	CHECK(!build_ok(RECORDS_LIST, &a));
	a.limit = -1;
	CHECK(!build_ok(RECORDS_LIST, &a));

	CHECK(records_stmt_build(RECORDS_LIST, &(struct records_args){0}, &st, err, sizeof(err)) ==
	      0);
	CHECK(st.query.nparams == 1);
	CHECK_STR(st.values[0], "100");
	records_stmt_clear(&st);

	for (int cmd = RECORDS_SHOW; cmd <= RECORDS_RESOLVE; cmd++) {
		CHECK(build_ok(cmd, &a));
		bad = a;
		bad.actor = NULL;
		CHECK(!build_ok(cmd, &bad));
		bad = a;
		bad.operation = "";
		CHECK(!build_ok(cmd, &bad));
		bad = a;
		bad.key = NULL;
		CHECK(!build_ok(cmd, &bad));
	}
	CHECK(!build_ok(7, &a));

	bad = a;
	bad.status = 199; /* a 1xx is never a final response to replay */
	CHECK(!build_ok(RECORDS_RESOLVE, &bad));
	bad.status = 600;
	CHECK(!build_ok(RECORDS_RESOLVE, &bad));
	bad.status = 200;
	CHECK(build_ok(RECORDS_RESOLVE, &bad));
	bad.status = 599;
	CHECK(build_ok(RECORDS_RESOLVE, &bad));
	bad = a;
	bad.retention_ms = 0;
	CHECK(!build_ok(RECORDS_RESOLVE, &bad));
	bad = a;
	bad.content_type = "text/plain\r\nSet-Cookie: x=1";
	CHECK(!build_ok(RECORDS_RESOLVE, &bad));
	bad.content_type = "";
	CHECK(!build_ok(RECORDS_RESOLVE, &bad));
	bad = a;
	bad.body_len = 3;
	CHECK(!build_ok(RECORDS_RESOLVE, &bad));
	/* Status and retention do not matter to the others. */
	CHECK(build_ok(RECORDS_RELEASE,
		       &(struct records_args){.actor = "a", .operation = "o", .key = "k"}));

	a.content_type = "text/plain; charset=utf-8";
	a.body = (const unsigned char *)"hi";
	a.body_len = 2;
	CHECK(records_stmt_build(RECORDS_RESOLVE, &a, &st, err, sizeof(err)) == 0);
	CHECK(st.query.nparams == 7);
	CHECK_STR(st.headers, "Content-Type: text/plain; charset=utf-8\r\n");
	CHECK(st.values[4] == st.headers && st.formats[4] == 1);
	CHECK(st.lengths[4] == (int)strlen(st.headers));
	CHECK(st.lengths[5] == 2 && st.formats[5] == 1);
	CHECK_STR(st.values[3], "201");
	CHECK_STR(st.values[6], "1000");
	records_stmt_clear(&st);
	CHECK(st.headers == NULL && st.query.sql == NULL);

	a.content_type = NULL;
	a.body = NULL;
	a.body_len = 0;
	CHECK(records_stmt_build(RECORDS_RESOLVE, &a, &st, err, sizeof(err)) == 0);
	CHECK_STR(st.headers, "");
	CHECK(st.values[5] != NULL && st.lengths[5] == 0);
	records_stmt_clear(&st);
}

/* ---- against the database ---- */

/* Run q with text parameters; 1 when it succeeded. */
static int sql(const char *q, int n, const char *const *values)
{
	PGresult *res = PQexecParams(conn, q, n, NULL, values, NULL, NULL, 0);
	ExecStatusType s = PQresultStatus(res);
	int ok = s == PGRES_COMMAND_OK || s == PGRES_TUPLES_OK;

	if (!ok)
		fprintf(stderr, "sql failed: %s", PQerrorMessage(conn));
	PQclear(res);
	return ok;
}

/* One value of a query with text parameters, copied into out. */
static const char *sql_value(char *out, size_t size, const char *q, int n,
			     const char *const *values)
{
	PGresult *res = PQexecParams(conn, q, n, NULL, values, NULL, NULL, 0);

	snprintf(out, size, "%s",
		 PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1 &&
			 !PQgetisnull(res, 0, 0)
		     ? PQgetvalue(res, 0, 0)
		     : "(none)");
	PQclear(res);
	return out;
}

/*
 * A record of actor's under TEST_OP: state, a lease ending lease from now
 * (NULL: none), created age ago, generation 3; a completed one holds 201,
 * a Content-Type header and {"ok":1}.
 */
static void insert(const char *key, const char *state, const char *lease, const char *age)
{
	const char *values[] = {actor, TEST_OP, key, state, lease, age};

	CHECK(
	    sql("INSERT INTO idempotency_records (actor, operation, idem_key, fingerprint,"
		" state, lease_owner, lease_expires_at, generation, response_status,"
		" response_headers, response_body, created_at, completed_at, expires_at)"
		" SELECT $1, $2, $3, '\\x00ff10'::bytea, $4::text,"
		"  CASE WHEN $5::interval IS NULL THEN NULL ELSE 'owner-1' END,"
		"  now() + $5::interval, 3,"
		"  CASE WHEN $4 = 'completed' THEN 201 END,"
		"  CASE WHEN $4 = 'completed' THEN"
		"   convert_to('Content-Type: application/json' || chr(13) || chr(10), 'UTF8') END,"
		"  CASE WHEN $4 = 'completed' THEN convert_to('{\"ok\":1}', 'UTF8') END,"
		"  now() - $6::interval,"
		"  CASE WHEN $4 = 'completed' THEN now() END,"
		"  CASE WHEN $4 = 'completed' THEN now() + interval '1 hour' END",
		6, values));
}

/* Build, run and render cmd over a; the parsed document (the caller frees
 * it) or NULL, and the HTTP status in *status. */
/* A resolve's new generation, as the front ends read it, into st: 0 or -1. */
static int resolve_at(const struct records_args *a, struct records_stmt *st)
{
	PGresult *res = PQexec(conn, RECORDS_SQL_GENERATION);
	char err[TEST_ERR_MAX];
	int64_t generation = 0;
	int rc;

	rc = records_generation(res, &generation);
	CHECK(rc == 0 && generation > 0);
	PQclear(res);
	if (rc == 0)
		rc = records_stmt_resolve(st, a, NULL, generation, err, sizeof(err));
	CHECK(rc == 0);
	CHECK(rc < 0 || (st->query.nparams == 9 && st->values[8] == NULL));
	return rc;
}

static yajl_val run(enum records_cmd cmd, const struct records_args *a, int *status)
{
	struct records_stmt st;
	char err[TEST_ERR_MAX];
	PGresult *res;
	yajl_val doc = NULL;
	size_t len = 0;
	char *text;

	*status = 0;
	if (records_stmt_build(cmd, a, &st, err, sizeof(err)) < 0) {
		fprintf(stderr, "build: %s\n", err);
		return NULL;
	}
	if (cmd == RECORDS_RESOLVE && resolve_at(a, &st) < 0) {
		records_stmt_clear(&st);
		return NULL;
	}
	res =
	    PQexecParams(conn, st.query.sql, st.query.nparams, st.query.types, st.query.values,
			 st.query.lengths, st.query.formats, 0);
	if (PQresultStatus(res) != PGRES_TUPLES_OK)
		fprintf(stderr, "statement failed: %s", PQerrorMessage(conn));
	text = records_render(cmd, res, status, &len);
	if (text) {
		CHECK(strlen(text) == len);
		CHECK(strchr(text, '\n') == NULL);
		doc = yajl_tree_parse(text, err, sizeof(err));
		if (!doc)
			fprintf(stderr, "bad JSON (%s): %s\n", err, text);
	}
	free(text);
	PQclear(res);
	records_stmt_clear(&st);
	return doc;
}

static struct records_args scope(const char *key)
{
	return (struct records_args){.actor = actor, .operation = TEST_OP, .key = key};
}

static yajl_val at(yajl_val v, const char *a, const char *b)
{
	const char *path[] = {a, b, NULL};

	return v ? yajl_tree_get(v, path, yajl_t_any) : NULL;
}

static const char *str(yajl_val v, const char *a, const char *b)
{
	v = at(v, a, b);
	return YAJL_IS_STRING(v) ? YAJL_GET_STRING(v) : NULL;
}

static long long num(yajl_val v, const char *a, const char *b)
{
	v = at(v, a, b);
	return YAJL_IS_INTEGER(v) ? YAJL_GET_INTEGER(v) : -1;
}

static int is_null(yajl_val v, const char *a, const char *b)
{
	v = at(v, a, b);
	return v && YAJL_IS_NULL(v);
}

/* 1 when s looks like 2024-05-01T12:00:00.000000Z. */
static int is_iso(const char *s)
{
	return s && strlen(s) == 27 && s[4] == '-' && s[10] == 'T' && s[19] == '.' && s[26] == 'Z';
}

/* The document names exactly one member, name, and it is a whole record. */
static void check_record(yajl_val doc, const char *name)
{
	static const char *const keys[TEST_RECORD_KEYS] = {
	    "actor",	     "operation",	 "key",		  "state",	"generation",
	    "lease_owner",   "lease_expires_at", "lease_expired", "created_at", "completed_at",
	    "expires_at",    "status",		 "fingerprint",	  "headers",	"body",
	    "body_encoding", "body_omitted",	 "sealed",	  "request_id", "trace_id",
	    "key_hash",	     "actor_hash",
	};
	yajl_val rec = at(doc, name, NULL);
	char hash[DIGEST_SHORT_HEX + 1];

	CHECK(YAJL_IS_OBJECT(rec));
	if (!YAJL_IS_OBJECT(rec))
		return;
	CHECK(rec->u.object.len == TEST_RECORD_KEYS);
	for (size_t i = 0; i < rec->u.object.len && i < TEST_RECORD_KEYS; i++)
		CHECK_STR(rec->u.object.keys[i], keys[i]);
	CHECK_STR(str(rec, "actor", NULL), actor);
	CHECK_STR(str(rec, "operation", NULL), TEST_OP);
	CHECK_STR(str(rec, "fingerprint", NULL), "00ff10");
	digest_short_hex(actor, strlen(actor), hash);
	CHECK_STR(str(rec, "actor_hash", NULL), hash); /* as the access log names it */
	CHECK(is_iso(str(rec, "created_at", NULL)));
}

/* 1 when the document is the 404. */
static int not_found(yajl_val doc, int status)
{
	return status == 404 && doc && doc->u.object.len == 1 && str(doc, "error", NULL) &&
	       !strcmp(str(doc, "error", NULL), "no such record");
}

/* 1 when the document is the 409 carrying a record in state. */
static int not_stuck(yajl_val doc, int status, const char *state)
{
	const char *s = str(doc, "record", "state");

	check_record(doc, "record");
	return status == 409 && doc->u.object.len == 2 && str(doc, "error", NULL) &&
	       !strcmp(str(doc, "error", NULL), "record is not stuck") && s && !strcmp(s, state);
}

static int exists(const char *key)
{
	const char *values[] = {actor, TEST_OP, key};
	char out[32];

	sql_value(out, sizeof(out),
		  "SELECT count(*) FROM idempotency_records"
		  " WHERE actor = $1 AND operation = $2 AND idem_key = $3",
		  3, values);
	return atoi(out);
}

static void test_list(void)
{
	struct records_args a = {.limit = 2};
	yajl_val doc, list, rec;
	int status, found = 0, mine = 0;
	const char *order[] = {"l-unknown", "l-expired", "l-unknown2"};

	insert("l-unknown", "unknown", NULL, "36500 days 00:00:04");
	insert("l-expired", "in_progress", "-1 minute", "36500 days 00:00:03");
	insert("l-live", "in_progress", "1 hour", "36500 days 00:00:02");
	insert("l-done", "completed", NULL, "36500 days 00:00:01");
	insert("l-unknown2", "unknown", NULL, "36499 days");

	doc = run(RECORDS_LIST, &a, &status);
	CHECK(status == 200);
	list = at(doc, "records", NULL);
	CHECK(YAJL_IS_ARRAY(list) && list->u.array.len == 2);
	CHECK(num(doc, "count", NULL) == 2);
	CHECK(doc && doc->u.object.len == 2);
	if (YAJL_IS_ARRAY(list) && list->u.array.len == 2) {
		CHECK_STR(str(list->u.array.values[0], "key", NULL), "l-unknown");
		CHECK_STR(str(list->u.array.values[1], "key", NULL), "l-expired");
		CHECK(at(list->u.array.values[1], "lease_expired", NULL) &&
		      YAJL_IS_TRUE(at(list->u.array.values[1], "lease_expired", NULL)));
		CHECK_STR(str(list->u.array.values[1], "lease_owner", NULL), "owner-1");
		CHECK(is_iso(str(list->u.array.values[1], "lease_expires_at", NULL)));
	}
	yajl_tree_free(doc);

	a.limit = RECORDS_LIST_MAX;
	doc = run(RECORDS_LIST, &a, &status);
	list = at(doc, "records", NULL);
	CHECK(YAJL_IS_ARRAY(list));
	for (size_t i = 0; YAJL_IS_ARRAY(list) && i < list->u.array.len; i++) {
		rec = list->u.array.values[i];
		if (!str(rec, "actor", NULL) || strcmp(str(rec, "actor", NULL), actor) != 0)
			continue;
		mine++;
		if (found < 3 && !strcmp(str(rec, "key", NULL), order[found]))
			found++;
	}
	CHECK(mine == 3 && found == 3);
	CHECK(num(doc, "count", NULL) == (long long)(list ? list->u.array.len : 0));
	yajl_tree_free(doc);
}

static void test_show(void)
{
	struct records_args a = scope("l-done");
	const char *values[] = {actor, TEST_OP, "s-latin", "582d4e616d653a20636166e90d0a"};
	yajl_val doc;
	int status;

	doc = run(RECORDS_SHOW, &a, &status);
	CHECK(status == 200);
	check_record(doc, "record");
	CHECK(doc && doc->u.object.len == 1);
	CHECK_STR(str(doc, "record", "key"), "l-done");
	CHECK_STR(str(doc, "record", "state"), "completed");
	CHECK(num(doc, "record", "generation") == 3);
	CHECK(num(doc, "record", "status") == 201);
	CHECK(is_null(doc, "record", "lease_owner"));
	CHECK(is_null(doc, "record", "lease_expires_at"));
	CHECK(YAJL_IS_FALSE(at(doc, "record", "lease_expired")));
	CHECK(is_iso(str(doc, "record", "completed_at")));
	CHECK(is_iso(str(doc, "record", "expires_at")));
	CHECK_STR(str(doc, "record", "headers"), "Content-Type: application/json\r\n");
	CHECK_STR(str(doc, "record", "body"), "{\"ok\":1}");
	CHECK_STR(str(doc, "record", "body_encoding"), "utf-8");
	CHECK(YAJL_IS_FALSE(at(doc, "record", "body_omitted")));
	yajl_tree_free(doc);

	a = scope("l-unknown");
	doc = run(RECORDS_SHOW, &a, &status);
	CHECK(status == 200);
	check_record(doc, "record");
	CHECK_STR(str(doc, "record", "state"), "unknown");
	CHECK(is_null(doc, "record", "status"));
	CHECK(is_null(doc, "record", "headers"));
	CHECK(is_null(doc, "record", "body"));
	CHECK(is_null(doc, "record", "body_encoding"));
	CHECK(is_null(doc, "record", "completed_at"));
	yajl_tree_free(doc);

	/* Header bytes that are not UTF-8 read as ISO-8859-1. */
	insert("s-latin", "completed", NULL, "0");
	CHECK(sql("UPDATE idempotency_records SET response_headers = decode($4, 'hex')"
		  " WHERE actor = $1 AND operation = $2 AND idem_key = $3",
		  4, values));
	a = scope("s-latin");
	doc = run(RECORDS_SHOW, &a, &status);
	CHECK(status == 200);
	CHECK_STR(str(doc, "record", "headers"), "X-Name: caf\xc3\xa9\r\n");
	yajl_tree_free(doc);

	a = scope("no-such-key");
	doc = run(RECORDS_SHOW, &a, &status);
	CHECK(not_found(doc, status));
	yajl_tree_free(doc);

	/* Another actor's or operation's slot is another scope. */
	a = scope("l-done");
	a.operation = "course.create";
	doc = run(RECORDS_SHOW, &a, &status);
	CHECK(not_found(doc, status));
	yajl_tree_free(doc);
}

static void test_release(void)
{
	struct records_args a;
	yajl_val doc;
	int status;

	insert("r-unknown", "unknown", NULL, "1 minute");
	insert("r-expired", "in_progress", "-1 second", "1 minute");
	insert("r-live", "in_progress", "1 hour", "1 minute");
	insert("r-done", "completed", NULL, "1 minute");

	a = scope("r-unknown");
	doc = run(RECORDS_RELEASE, &a, &status);
	CHECK(status == 200);
	check_record(doc, "released");
	CHECK(doc && doc->u.object.len == 1);
	CHECK_STR(str(doc, "released", "state"), "unknown");
	CHECK(num(doc, "released", "generation") == 3);
	CHECK(exists("r-unknown") == 0);
	yajl_tree_free(doc);

	doc = run(RECORDS_RELEASE, &a, &status);
	CHECK(not_found(doc, status));
	yajl_tree_free(doc);

	a = scope("r-expired");
	doc = run(RECORDS_RELEASE, &a, &status);
	CHECK(status == 200);
	check_record(doc, "released");
	CHECK_STR(str(doc, "released", "state"), "in_progress");
	CHECK(YAJL_IS_TRUE(at(doc, "released", "lease_expired")));
	CHECK(exists("r-expired") == 0);
	yajl_tree_free(doc);

	a = scope("r-live");
	doc = run(RECORDS_RELEASE, &a, &status);
	CHECK(not_stuck(doc, status, "in_progress"));
	CHECK(YAJL_IS_FALSE(at(doc, "record", "lease_expired")));
	CHECK(exists("r-live") == 1);
	yajl_tree_free(doc);

	a = scope("r-done");
	doc = run(RECORDS_RELEASE, &a, &status);
	CHECK(not_stuck(doc, status, "completed"));
	CHECK(exists("r-done") == 1);
	yajl_tree_free(doc);

	a = scope("r-missing");
	doc = run(RECORDS_RELEASE, &a, &status);
	CHECK(not_found(doc, status));
	yajl_tree_free(doc);
}

/* The stored columns of key, as "state|status|headers hex|body hex|
 * generation|retention ms|lease owner|lease expiry|omitted" ('' for NULL,
 * '-' for no lease; generation "new" when it is past insert()'s 3). */
static const char *stored(char *out, size_t size, const char *key)
{
	const char *values[] = {actor, TEST_OP, key};

	return sql_value(
	    out, size,
	    "SELECT concat_ws('|', state, coalesce(response_status::text, ''),"
	    " coalesce(encode(response_headers, 'hex'), ''),"
	    " coalesce(encode(response_body, 'hex'), ''),"
	    " CASE WHEN generation > 3 THEN 'new' ELSE generation::text END,"
	    " coalesce(((extract(epoch FROM expires_at - completed_at) * 1000)::bigint)"
	    "::text, ''),"
	    " coalesce(lease_owner, '-'), coalesce(lease_expires_at::text, '-'),"
	    " body_omitted)"
	    " FROM idempotency_records"
	    " WHERE actor = $1 AND operation = $2 AND idem_key = $3",
	    3, values);
}

static void test_resolve(void)
{
	static const unsigned char binary[] = {0xff, 0x00, 'A'};
	struct records_args a;
	char out[512];
	yajl_val doc;
	long long resolved_gen;
	int status;

	insert("v-unknown", "unknown", NULL, "1 minute");
	insert("v-expired", "in_progress", "-1 second", "1 minute");
	insert("v-live", "in_progress", "1 hour", "1 minute");
	insert("v-done", "completed", NULL, "1 minute");
	insert("v-empty", "unknown", NULL, "1 minute");

	a = scope("v-unknown");
	a.status = 201;
	a.content_type = "application/json";
	a.body = (const unsigned char *)"{\"id\":7}";
	a.body_len = strlen("{\"id\":7}");
	a.retention_ms = TEST_RETENTION_MS;
	doc = run(RECORDS_RESOLVE, &a, &status);
	CHECK(status == 200);
	check_record(doc, "resolved");
	CHECK(doc && doc->u.object.len == 1);
	CHECK_STR(str(doc, "resolved", "state"), "completed");
	/* A new generation, never one the scope had: a stalled owner is fenced. */
	resolved_gen = num(doc, "resolved", "generation");
	CHECK(resolved_gen > 3);
	CHECK(num(doc, "resolved", "status") == 201);
	CHECK_STR(str(doc, "resolved", "headers"), "Content-Type: application/json\r\n");
	CHECK_STR(str(doc, "resolved", "body"), "{\"id\":7}");
	CHECK_STR(str(doc, "resolved", "body_encoding"), "utf-8");
	CHECK(is_null(doc, "resolved", "lease_owner"));
	CHECK(YAJL_IS_FALSE(at(doc, "resolved", "lease_expired")));
	CHECK(is_iso(str(doc, "resolved", "completed_at")));
	CHECK(is_iso(str(doc, "resolved", "expires_at")));
	CHECK(YAJL_IS_FALSE(at(doc, "resolved", "body_omitted")));
	yajl_tree_free(doc);
	/* 201 | "Content-Type: application/json\r\n" | {"id":7} | new | 1h. */
	CHECK_STR(stored(out, sizeof(out), "v-unknown"),
		  "completed|201|436f6e74656e742d547970653a206170706c69636174696f6e2f6a736f6e0d0a|"
		  "7b226964223a377d|new|3600000|-|-|f");

	/* A body that is not UTF-8 comes back in base64; no Content-Type
	 * stores no header at all. */
	a = scope("v-expired");
	a.status = 500;
	a.body = binary;
	a.body_len = sizeof(binary);
	a.retention_ms = 1000;
	doc = run(RECORDS_RESOLVE, &a, &status);
	CHECK(status == 200);
	check_record(doc, "resolved");
	CHECK_STR(str(doc, "resolved", "body"), "/wBB");
	CHECK_STR(str(doc, "resolved", "body_encoding"), "base64");
	CHECK_STR(str(doc, "resolved", "headers"), "");
	CHECK(is_null(doc, "resolved", "lease_expires_at"));
	yajl_tree_free(doc);
	CHECK_STR(stored(out, sizeof(out), "v-expired"), "completed|500||ff0041|new|1000|-|-|f");

	a = scope("v-empty");
	a.status = 204;
	a.retention_ms = TEST_RETENTION_MS;
	doc = run(RECORDS_RESOLVE, &a, &status);
	CHECK(status == 200);
	CHECK_STR(str(doc, "resolved", "body"), "");
	CHECK_STR(str(doc, "resolved", "body_encoding"), "utf-8");
	yajl_tree_free(doc);

	/* Resolved is no longer stuck: a second resolve or a release is refused. */
	a = scope("v-unknown");
	a.status = 200;
	a.retention_ms = TEST_RETENTION_MS;
	doc = run(RECORDS_RESOLVE, &a, &status);
	CHECK(not_stuck(doc, status, "completed"));
	CHECK(num(doc, "record", "generation") == resolved_gen);
	CHECK(num(doc, "record", "status") == 201);
	yajl_tree_free(doc);
	doc = run(RECORDS_RELEASE, &a, &status);
	CHECK(not_stuck(doc, status, "completed"));
	yajl_tree_free(doc);

	a = scope("v-live");
	a.status = 201;
	a.retention_ms = TEST_RETENTION_MS;
	doc = run(RECORDS_RESOLVE, &a, &status);
	CHECK(not_stuck(doc, status, "in_progress"));
	yajl_tree_free(doc);
	CHECK(strncmp(stored(out, sizeof(out), "v-live"), "in_progress||||3||owner-1|", 26) == 0);

	a = scope("v-done");
	a.status = 201;
	a.retention_ms = TEST_RETENTION_MS;
	doc = run(RECORDS_RESOLVE, &a, &status);
	CHECK(not_stuck(doc, status, "completed"));
	CHECK(num(doc, "record", "generation") == 3);
	yajl_tree_free(doc);

	a = scope("v-missing");
	a.status = 201;
	a.retention_ms = TEST_RETENTION_MS;
	doc = run(RECORDS_RESOLVE, &a, &status);
	CHECK(not_found(doc, status));
	yajl_tree_free(doc);
	CHECK(exists("v-missing") == 0);
}

/* A result that is not one of the statements' is refused. */
static void test_render_other(void)
{
	PGresult *res = PQexec(conn, "SELECT 1");
	int status;
	size_t len;

	CHECK(records_render(RECORDS_SHOW, res, &status, &len) == NULL);
	CHECK(records_render(RECORDS_SHOW, NULL, &status, &len) == NULL);
	PQclear(res);
}

static void cleanup(void)
{
	const char *values[] = {actor};

	CHECK(sql("DELETE FROM idempotency_records WHERE actor = $1", 1, values));
}

/* A resolve's default retention: the route's, for its own scopes and for operation_from's. */
static void test_retention(void)
{
	struct route routes[] = {
	    {.operation = "a", .retention_ms = 1000},
	    {.operation = "rpc", .retention_ms = 2000, .operation_from = OPFROM_JSONRPC},
	    {.operation = "rpc:x", .retention_ms = 3000},
	};
	struct conf c = {.routes = routes, .nroutes = 3};

	CHECK(records_retention(&c, "a") == 1000);
	CHECK(records_retention(&c, "rpc") == 2000);
	CHECK(records_retention(&c, "rpc:transfer") == 2000);
	CHECK(records_retention(&c, "rpc:x") == 3000); /* a route's own name first */
	CHECK(records_retention(&c, "a:b") == 0);      /* a has no operation_from */
	CHECK(records_retention(&c, "rp") == 0);
	CHECK(records_retention(&c, NULL) == 0);
}

int main(void)
{
	const char *dsn = getenv("IDEMPROXY_TEST_DSN");
	char err[TEST_ERR_MAX] = "";

	test_build();
	test_retention();
	/* tests/run.sh always sets it: running without a database is a failure. */
	CHECK(dsn != NULL);
	if (!dsn) {
		fprintf(stderr, "IDEMPROXY_TEST_DSN is not set\n");
		UNIT_DONE("records");
	}
	snprintf(actor, sizeof(actor), "h:test-records-%ld-%ld", (long)getpid(), (long)time(NULL));
	CHECK(migrate_apply(dsn, err, sizeof(err)) == 0);
	if (err[0])
		fprintf(stderr, "migrate: %s\n", err);
	conn = PQconnectdb(dsn);
	CHECK(PQstatus(conn) == CONNECTION_OK);
	if (PQstatus(conn) == CONNECTION_OK) {
		/* insert() writes generation 3 by hand: keep the sequence past
		 * it, as migration 004 keeps it past every stored generation. */
		CHECK(sql("SELECT setval('idempotency_records_generation_seq',"
			  " greatest(last_value, 3)) FROM idempotency_records_generation_seq",
			  0, NULL));
		test_list();
		test_show();
		test_release();
		test_resolve();
		test_render_other();
		cleanup();
	}
	PQfinish(conn);
	UNIT_DONE("records");
}
