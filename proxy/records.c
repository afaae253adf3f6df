/*
 * Record operations for operators: statements and their JSON rendering,
 * for the admin API and the `idemproxy records` command (records_cli.c).
 *
 * Every operation is one statement, so it is one round trip and one
 * transaction whichever front end sends it. Release and resolve lock the
 * scope's row first and decide "stuck or not" on that locked row, so a
 * record that an owner finishes, or a retry takes over, at the same moment
 * is either changed by the operator or reported as it now is, never both.
 * They touch one scope's row, so a distributed engine runs each on one
 * shard; the new generation and the times come from a CTE that only
 * reads, and the notification that wakes the scope's waiters is the front
 * end's next statement (records_changed). Resolve raises the generation:
 * an owner that stalled past its lease and wakes up is fenced and cannot
 * overwrite the operator's outcome. The new generation is read by a
 * statement before it (RECORDS_SQL_GENERATION), because with
 * body_encryption what resolve stores is sealed for it.
 */
#include "proxy/records.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>

#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <libpq-fe.h>

#include "conf/conf.h"
#include "proxy/base64.h"
#include "proxy/digest.h"
#include "proxy/json.h"
#include "proxy/record.h"
#include "proxy/seal.h"
#include "proxy/store.h"
#include "proxy/utf8.h"

#define RECORDS_CONTENT_TYPE_MAX 1024

/*
 * The columns every statement returns, in this order: what happened
 * (RECORDS_FOUND, RECORDS_DONE or RECORDS_NOT_STUCK), then the record.
 * Timestamps are formatted by the statement, in UTC, so the document does
 * not depend on the session's DateStyle or TimeZone.
 */
/* clang-format off */
#define RECORDS_TS(col) "to_char(" col " AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')"

#define RECORDS_COLS                                                                           \
	" x.actor, x.operation, x.idem_key, x.state, x.generation, x.lease_owner,"             \
	" " RECORDS_TS("x.lease_expires_at") ","                                               \
	" coalesce(x.state = 'in_progress' AND x.lease_expires_at <= now(), false),"           \
	" " RECORDS_TS("x.created_at") ", " RECORDS_TS("x.completed_at") ","                   \
	" " RECORDS_TS("x.expires_at") ","                                                     \
	" x.response_status, encode(x.fingerprint, 'hex'),"                                    \
	" CASE WHEN x.response_sealed IS NULL THEN x.response_headers END,"                    \
	" CASE WHEN x.response_sealed IS NULL THEN x.response_body END, x.body_omitted,"       \
	" x.response_sealed, x.request_id, x.trace_id"

/* An operator may act on a record nobody else will finish: unknown, or in
 * progress with its owner's lease run out. Only used in WHERE clauses (NULL
 * counts as false), in a form that the partial indexes of
 * sql/003_stuck_indexes.sql can serve. */
#define RECORDS_STUCK                                                                          \
	"(x.state = 'unknown' OR (x.state = 'in_progress' AND x.lease_expires_at <= now()))"

#define RECORDS_FOUND	  "found"
#define RECORDS_DONE	  "done"
#define RECORDS_NOT_STUCK "not_stuck"

#define RECORDS_CUR                                                                            \
	"WITH cur AS (SELECT * FROM idempotency_records"                                       \
	" WHERE actor = $1 AND operation = $2 AND idem_key = $3 FOR UPDATE)"

#define RECORDS_CUR_JOIN                                                                       \
	"r.actor = x.actor AND r.operation = x.operation AND r.idem_key = x.idem_key"

static const char records_sql_list[] =
    "SELECT '" RECORDS_FOUND "'," RECORDS_COLS " FROM idempotency_records x WHERE " RECORDS_STUCK
    " ORDER BY x.created_at, x.actor, x.operation, x.idem_key LIMIT $1";

/* Tombstones (expired_keys refuse), the next to be deleted first. */
static const char records_sql_list_expired[] =
    "SELECT '" RECORDS_FOUND "'," RECORDS_COLS " FROM idempotency_records x"
    " WHERE x.state = 'expired'"
    " ORDER BY x.expires_at, x.actor, x.operation, x.idem_key LIMIT $1";

static const char records_sql_show[] =
    "SELECT '" RECORDS_FOUND "'," RECORDS_COLS " FROM idempotency_records x"
    " WHERE x.actor = $1 AND x.operation = $2 AND x.idem_key = $3";

/* The record as it was, and whether the delete took it. */
static const char records_sql_release[] =
    RECORDS_CUR ","
    " del AS (DELETE FROM idempotency_records r USING cur x"
    "  WHERE " RECORDS_CUR_JOIN " AND " RECORDS_STUCK " RETURNING 1)"
    " SELECT CASE WHEN EXISTS (SELECT 1 FROM del)"
    "  THEN '" RECORDS_DONE "' ELSE '" RECORDS_NOT_STUCK "' END," RECORDS_COLS
    " FROM cur x";

/* The record as it now is: the resolved one, or the one left alone. */
static const char records_sql_resolve[] =
    RECORDS_CUR ","
    " gen AS (SELECT $8::bigint AS generation, now() AS at,"
    "  now() + $7 * interval '1 millisecond' AS expires_at FROM cur x WHERE " RECORDS_STUCK "),"
    " upd AS (UPDATE idempotency_records r SET state = 'completed',"
    "  response_status = $4, response_headers = $5, response_body = $6,"
    "  response_sealed = $9, body_omitted = false, completed_at = g.at,"
    "  expires_at = g.expires_at, lease_owner = NULL, lease_expires_at = NULL,"
    "  generation = g.generation"
    "  FROM cur x, gen g WHERE " RECORDS_CUR_JOIN " AND " RECORDS_STUCK
    "  RETURNING r.*)"
    " SELECT '" RECORDS_DONE "'," RECORDS_COLS " FROM upd x"
    " UNION ALL"
    " SELECT '" RECORDS_NOT_STUCK "'," RECORDS_COLS " FROM cur x"
    " WHERE NOT EXISTS (SELECT 1 FROM upd)";

/* clang-format on */

/* RESOLVE's parameters by index ($1 is 0): the stored headers and body,
 * and how many records_stmt_build gives before records_stmt_resolve. */
#define RECORDS_RESOLVE_HEADERS 4
#define RECORDS_RESOLVE_BODY	5
#define RECORDS_RESOLVE_BUILT	7

enum records_col {
	COL_OUTCOME,
	COL_ACTOR,
	COL_OPERATION,
	COL_KEY,
	COL_STATE,
	COL_GENERATION,
	COL_LEASE_OWNER,
	COL_LEASE_EXPIRES_AT,
	COL_LEASE_EXPIRED,
	COL_CREATED_AT,
	COL_COMPLETED_AT,
	COL_EXPIRES_AT,
	COL_STATUS,
	COL_FINGERPRINT,
	COL_HEADERS,
	COL_BODY,
	COL_BODY_OMITTED,
	COL_SEALED,
	COL_REQUEST_ID,
	COL_TRACE_ID,
	COL_COUNT
};

enum records_kind {
	KIND_TEXT,    /* string, or null */
	KIND_NUMBER,  /* number as PostgreSQL prints it, or null */
	KIND_BOOL,    /* 't' / 'f' */
	KIND_HEADERS, /* bytea of header lines: a string, or null */
	KIND_BODY,    /* bytea: "body" and "body_encoding" */
	KIND_HASH,    /* text: its short hash, as the access log names it (digest_short_hex) */
};

/* A record in JSON: its members, in this order, and nothing else. */
static const struct {
	const char *name;
	enum records_col col;
	enum records_kind kind;
} records_fields[] = {
    {"actor", COL_ACTOR, KIND_TEXT},
    {"operation", COL_OPERATION, KIND_TEXT},
    {"key", COL_KEY, KIND_TEXT},
    {"state", COL_STATE, KIND_TEXT},
    {"generation", COL_GENERATION, KIND_NUMBER},
    {"lease_owner", COL_LEASE_OWNER, KIND_TEXT},
    {"lease_expires_at", COL_LEASE_EXPIRES_AT, KIND_TEXT},
    {"lease_expired", COL_LEASE_EXPIRED, KIND_BOOL},
    {"created_at", COL_CREATED_AT, KIND_TEXT},
    {"completed_at", COL_COMPLETED_AT, KIND_TEXT},
    {"expires_at", COL_EXPIRES_AT, KIND_TEXT},
    {"status", COL_STATUS, KIND_NUMBER},
    {"fingerprint", COL_FINGERPRINT, KIND_TEXT},
    {"headers", COL_HEADERS, KIND_HEADERS},
    {"body", COL_BODY, KIND_BODY},
    {"body_omitted", COL_BODY_OMITTED, KIND_BOOL},
    {"sealed", COL_SEALED, KIND_TEXT}, /* the key id; headers and body are then not shown */
    /* what joins the record to the log and to a trace: the claiming
     * request's X-Request-Id and trace id, the key_hash and actor_hash of
     * every access line about the scope */
    {"request_id", COL_REQUEST_ID, KIND_TEXT},
    {"trace_id", COL_TRACE_ID, KIND_TEXT},
    {"key_hash", COL_KEY, KIND_HASH},
    {"actor_hash", COL_ACTOR, KIND_HASH},
};

/* ---- statements ---- */

/* Append a parameter to st: value (len bytes when binary), its type and format. */
static void records_param(struct records_stmt *st, const char *value, int len, Oid type, int format)
{
	int i = st->query.nparams++;

	st->values[i] = value;
	st->lengths[i] = len;
	st->types[i] = type;
	st->formats[i] = format;
}

/* Append a text integer parameter of type type, kept in st->nums. */
static void records_param_num(struct records_stmt *st, int64_t n, Oid type)
{
	char *buf = st->nums[st->query.nparams];

	snprintf(buf, RECORDS_NUM_MAX, "%" PRId64, n);
	records_param(st, buf, 0, type, STORE_FORMAT_TEXT);
}

/* 1 when s is a usable Content-Type value: not empty, no control characters. */
static int records_content_type_ok(const char *s)
{
	size_t n = strlen(s);

	if (n == 0 || n > RECORDS_CONTENT_TYPE_MAX)
		return 0;
	for (; *s; s++) {
		if (((unsigned char)*s < 0x20 && *s != '\t') || *s == 0x7f)
			return 0;
	}
	return 1;
}

/* LIST: at most a->limit records (0: the default). Returns 0 or -1. */
static int records_build_list(const struct records_args *a, struct records_stmt *st, char *err,
			      size_t errlen)
{
	int limit = a->limit ? a->limit : RECORDS_LIST_DEFAULT;

	if (limit < 1 || limit > RECORDS_LIST_MAX) {
		snprintf(err, errlen, "limit must be 1..%d", RECORDS_LIST_MAX);
		return -1;
	}
	st->query.sql = a->expired ? records_sql_list_expired : records_sql_list;
	records_param_num(st, limit, STORE_OID_INT8);
	return 0;
}

/* The scope parameters ($1..$3) every other statement starts with. */
static int records_build_scope(const struct records_args *a, struct records_stmt *st, char *err,
			       size_t errlen)
{
	if (!a->actor || !*a->actor || !a->operation || !*a->operation || !a->key || !*a->key) {
		snprintf(err, errlen, "actor, operation and key are required");
		return -1;
	}
	records_param(st, a->actor, 0, STORE_OID_TEXT, STORE_FORMAT_TEXT);
	records_param(st, a->operation, 0, STORE_OID_TEXT, STORE_FORMAT_TEXT);
	records_param(st, a->key, 0, STORE_OID_TEXT, STORE_FORMAT_TEXT);
	return 0;
}

/* RESOLVE's outcome parameters ($4..$7), after the scope's; st->headers is
 * allocated here. Returns 0 or -1. */
static int records_build_resolve(const struct records_args *a, struct records_stmt *st, char *err,
				 size_t errlen)
{
	if (a->status < RECORDS_STATUS_MIN || a->status > RECORDS_STATUS_MAX) {
		snprintf(err, errlen, "status must be %d..%d", RECORDS_STATUS_MIN,
			 RECORDS_STATUS_MAX);
		return -1;
	}
	if (a->retention_ms == 0) {
		snprintf(err, errlen, "retention is required: no route is named \"%s\"",
			 a->operation);
		return -1;
	}
	if (a->retention_ms < 0) {
		snprintf(err, errlen, "retention must be positive");
		return -1;
	}
	if (a->body_len && !a->body) {
		snprintf(err, errlen, "body_len without a body");
		return -1;
	}
	if (a->body_len > INT_MAX) {
		snprintf(err, errlen, "body is too large");
		return -1;
	}
	if (a->content_type && !records_content_type_ok(a->content_type)) {
		snprintf(err, errlen, "content type must be 1..%d bytes without control characters",
			 RECORDS_CONTENT_TYPE_MAX);
		return -1;
	}
	if (!a->content_type)
		st->headers = strdup("");
	else if (asprintf(&st->headers, "Content-Type: %s\r\n", a->content_type) < 0)
		st->headers = NULL;
	if (!st->headers) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	st->query.sql = records_sql_resolve;
	records_param_num(st, a->status, STORE_OID_INT4);
	records_param(st, st->headers, (int)strlen(st->headers), STORE_OID_BYTEA,
		      STORE_FORMAT_BINARY);
	records_param(st, a->body ? (const char *)a->body : "", (int)a->body_len, STORE_OID_BYTEA,
		      STORE_FORMAT_BINARY);
	records_param_num(st, a->retention_ms, STORE_OID_INT8);
	return 0;
}

int records_generation(const PGresult *res, int64_t *generation)
{
	const char *v;
	char *end;

	if (!res || PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1 ||
	    PQnfields(res) != 1 || PQgetisnull(res, 0, 0))
		return -1;
	v = PQgetvalue(res, 0, 0);
	errno = 0;
	*generation = strtoll(v, &end, 10);
	return errno || end == v || *end || *generation <= 0 ? -1 : 0;
}

/* Point st's headers and body parameters at st->sealed's blobs. */
static void records_param_sealed(struct records_stmt *st)
{
	st->values[RECORDS_RESOLVE_HEADERS] = (const char *)st->sealed.headers;
	st->lengths[RECORDS_RESOLVE_HEADERS] = (int)st->sealed.headers_len;
	st->values[RECORDS_RESOLVE_BODY] = (const char *)st->sealed.body;
	st->lengths[RECORDS_RESOLVE_BODY] = (int)st->sealed.body_len;
}

int records_stmt_resolve(struct records_stmt *st, const struct records_args *a,
			 const struct seal_keys *keys, int64_t generation, char *err, size_t errlen)
{
	const struct scope sc = {a->actor, a->operation, a->key};
	const unsigned char *body = a->body ? a->body : (const unsigned char *)"";

	if (st->query.sql != records_sql_resolve || st->query.nparams != RECORDS_RESOLVE_BUILT) {
		snprintf(err, errlen, "not a resolve statement waiting for its generation");
		return -1;
	}
	if (keys && record_seal(keys, &sc, a->status, generation, st->headers, strlen(st->headers),
				body, a->body_len, &st->sealed) < 0) {
		snprintf(err, errlen, "sealing the resolved record failed");
		return -1;
	}
	if (keys && st->sealed.body_len > INT_MAX) {
		snprintf(err, errlen, "body is too large");
		return -1;
	}
	if (keys)
		records_param_sealed(st);
	records_param_num(st, generation, STORE_OID_INT8);
	records_param(st, keys ? seal_keys_current(keys) : NULL, 0, STORE_OID_TEXT,
		      STORE_FORMAT_TEXT);
	return 0;
}

int records_changed(enum records_cmd cmd, const struct records_args *a, const PGresult *res,
		    char token[SCOPE_TOKEN_SIZE])
{
	struct scope sc = {a->actor, a->operation, a->key};

	if ((cmd != RECORDS_RELEASE && cmd != RECORDS_RESOLVE) || !res ||
	    PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) < 1 ||
	    strcmp(PQgetvalue(res, 0, COL_OUTCOME), RECORDS_DONE) != 0)
		return 0;
	scope_token(&sc, token);
	return 1;
}

int records_stmt_build(enum records_cmd cmd, const struct records_args *a, struct records_stmt *st,
		       char *err, size_t errlen)
{
	int rc = -1;

	memset(st, 0, sizeof(*st));
	st->query.types = st->types;
	st->query.values = st->values;
	st->query.lengths = st->lengths;
	st->query.formats = st->formats;
	switch (cmd) {
	case RECORDS_LIST:
		rc = records_build_list(a, st, err, errlen);
		break;
	case RECORDS_SHOW:
		rc = records_build_scope(a, st, err, errlen);
		st->query.sql = records_sql_show;
		break;
	case RECORDS_RELEASE:
		rc = records_build_scope(a, st, err, errlen);
		st->query.sql = records_sql_release;
		break;
	case RECORDS_RESOLVE:
		rc = records_build_scope(a, st, err, errlen);
		if (rc == 0)
			rc = records_build_resolve(a, st, err, errlen);
		break;
	default:
		snprintf(err, errlen, "unknown records command");
		break;
	}
	if (rc < 0)
		records_stmt_clear(st);
	return rc;
}

/* The query parameters of the admin API, by command. */
enum records_param {
	RP_LIMIT,
	RP_ACTOR,
	RP_OPERATION,
	RP_KEY,
	RP_STATUS,
	RP_RETENTION,
	RP_STATE,
	RP_COUNT,
};

static const char *const records_param_names[RP_COUNT] = {
    [RP_LIMIT] = "limit",   [RP_ACTOR] = "actor",   [RP_OPERATION] = "operation",
    [RP_KEY] = "key",	    [RP_STATUS] = "status", [RP_RETENTION] = "retention",
    [RP_STATE] = "state",
};

#define RP_BIT(p) (1u << (p))
#define RP_SCOPE  (RP_BIT(RP_ACTOR) | RP_BIT(RP_OPERATION) | RP_BIT(RP_KEY))

static const unsigned records_params_of[] = {
    [RECORDS_LIST] = RP_BIT(RP_LIMIT) | RP_BIT(RP_STATE),
    [RECORDS_SHOW] = RP_SCOPE,
    [RECORDS_RELEASE] = RP_SCOPE,
    [RECORDS_RESOLVE] = RP_SCOPE | RP_BIT(RP_STATUS) | RP_BIT(RP_RETENTION),
};

int records_parse_query(enum records_cmd cmd, const char *query, struct evkeyvalq *q,
			struct records_args *a, char *err, size_t errlen)
{
	const char *v[RP_COUNT] = {NULL};
	const struct evkeyval *kv;
	int p;

	TAILQ_INIT(q);
	if (query && evhttp_parse_query_str(query, q) < 0) {
		snprintf(err, errlen, "malformed query string");
		return -1;
	}
	TAILQ_FOREACH(kv, q, next) {
		for (p = 0; p < RP_COUNT && strcmp(kv->key, records_param_names[p]) != 0; p++)
			;
		if (p == RP_COUNT || !(records_params_of[cmd] & RP_BIT(p))) {
			snprintf(err, errlen, "unknown parameter \"%.64s\"", kv->key);
			return -1;
		}
		if (v[p]) {
			snprintf(err, errlen, "parameter \"%s\" given twice", kv->key);
			return -1;
		}
		v[p] = kv->value;
	}
	a->actor = v[RP_ACTOR];
	a->operation = v[RP_OPERATION];
	a->key = v[RP_KEY];
	if (v[RP_LIMIT] && conf_parse_int(v[RP_LIMIT], 1, RECORDS_LIST_MAX, &a->limit) < 0) {
		snprintf(err, errlen, "limit must be 1..%d", RECORDS_LIST_MAX);
		return -1;
	}
	/* state=stuck (the default) or state=expired (tombstones). */
	if (v[RP_STATE] && strcmp(v[RP_STATE], "stuck") != 0 && strcmp(v[RP_STATE], "expired") != 0) {
		snprintf(err, errlen, "state must be stuck or expired");
		return -1;
	}
	a->expired = v[RP_STATE] && strcmp(v[RP_STATE], "expired") == 0;
	if (cmd == RECORDS_RESOLVE &&
	    (!v[RP_STATUS] ||
	     conf_parse_int(v[RP_STATUS], RECORDS_STATUS_MIN, RECORDS_STATUS_MAX, &a->status) < 0)) {
		snprintf(err, errlen, "resolve needs status=%d..%d", RECORDS_STATUS_MIN,
			 RECORDS_STATUS_MAX);
		return -1;
	}
	if (v[RP_RETENTION] &&
	    (conf_parse_duration(v[RP_RETENTION], &a->retention_ms) < 0 || a->retention_ms <= 0)) {
		snprintf(err, errlen, "invalid retention");
		return -1;
	}
	return 0;
}

void records_stmt_clear(struct records_stmt *st)
{
	free(st->headers);
	record_sealed_free(&st->sealed);
	memset(st, 0, sizeof(*st));
}

/* ---- rendering ---- */

/*
 * Header lines as a JSON string. They are bytes: a value may hold obs-text
 * that is not UTF-8, and then every byte is taken as ISO-8859-1 (what
 * obs-text historically meant), so the string stays readable and every byte
 * is still shown.
 */
static void records_gen_headers(struct json_writer *w, const unsigned char *s, size_t n)
{
	unsigned char *latin, *o;

	if (utf8_valid(s, n)) {
		json_strn(w, (const char *)s, n);
		return;
	}
	latin = malloc(2 * n);
	if (!latin) {
		json_writer_fail(w);
		return;
	}
	o = latin;
	for (size_t i = 0; i < n; i++) {
		if (s[i] < 0x80) {
			*o++ = s[i];
		} else {
			*o++ = (unsigned char)(0xc0 | s[i] >> 6);
			*o++ = (unsigned char)(0x80 | (s[i] & 0x3f));
		}
	}
	json_strn(w, (const char *)latin, (size_t)(o - latin));
	free(latin);
}

/* The body members: "body" as text when it is UTF-8, else base64, and the
 * "body_encoding" that says which. */
static void records_gen_body(struct json_writer *w, const unsigned char *s, size_t n)
{
	char *b64;
	size_t b64len;

	if (utf8_valid(s, n)) {
		json_strn(w, (const char *)s, n);
		json_key_str(w, "body_encoding", "utf-8");
		return;
	}
	b64 = base64_encode(s, n, &b64len);
	if (!b64)
		json_writer_fail(w);
	json_strn(w, b64, b64len);
	json_key_str(w, "body_encoding", "base64");
	free(b64);
}

/* A bytea column (text output, hex or escape form) as headers or body. */
static void records_gen_bytea(struct json_writer *w, const char *text, enum records_kind kind)
{
	unsigned char *bytes;
	size_t n;

	bytes = PQunescapeBytea((const unsigned char *)text, &n);
	if (!bytes) {
		json_writer_fail(w);
		return;
	}
	if (kind == KIND_HEADERS)
		records_gen_headers(w, bytes, n);
	else
		records_gen_body(w, bytes, n);
	PQfreemem(bytes);
}

/* The value of column col in row as the member's kind says. */
static void records_gen_value(struct json_writer *w, const PGresult *res, int row,
			      enum records_col col, enum records_kind kind)
{
	const char *v = PQgetvalue(res, row, col);
	size_t n = (size_t)PQgetlength(res, row, col);
	char hash[DIGEST_SHORT_HEX + 1];

	if (PQgetisnull(res, row, col)) {
		json_null(w);
		if (kind == KIND_BODY) {
			json_str(w, "body_encoding");
			json_null(w);
		}
		return;
	}
	switch (kind) {
	case KIND_TEXT:
		json_strn(w, v, n);
		break;
	case KIND_NUMBER:
		json_number(w, v, n);
		break;
	case KIND_BOOL:
		json_bool(w, v[0] == 't');
		break;
	case KIND_HASH:
		digest_short_hex(v, n, hash);
		json_str(w, hash);
		break;
	case KIND_HEADERS:
	case KIND_BODY:
		records_gen_bytea(w, v, kind);
		break;
	}
}

/* Row row of res as a record object. */
static void records_gen_record(struct json_writer *w, const PGresult *res, int row)
{
	json_map_open(w);
	for (size_t i = 0; i < sizeof(records_fields) / sizeof(records_fields[0]); i++) {
		json_str(w, records_fields[i].name);
		records_gen_value(w, res, row, records_fields[i].col, records_fields[i].kind);
	}
	json_map_close(w);
}

/* The members of a list document: every row, and their count. */
static void records_gen_list(struct json_writer *w, const PGresult *res)
{
	int rows = PQntuples(res);

	json_str(w, "records");
	json_array_open(w);
	for (int i = 0; i < rows; i++)
		records_gen_record(w, res, i);
	json_array_close(w);
	json_key_int(w, "count", rows);
}

/* The members of a show, release or resolve document; sets *http_status. */
static void records_gen_one(struct json_writer *w, enum records_cmd cmd, const PGresult *res,
			    int *http_status)
{
	static const char *const done_names[] = {
	    [RECORDS_SHOW] = "record",
	    [RECORDS_RELEASE] = "released",
	    [RECORDS_RESOLVE] = "resolved",
	};

	if (PQntuples(res) == 0) {
		*http_status = RECORDS_HTTP_NOT_FOUND;
		json_key_str(w, "error", "no such record");
		return;
	}
	if (strcmp(PQgetvalue(res, 0, COL_OUTCOME), RECORDS_NOT_STUCK) == 0) {
		*http_status = RECORDS_HTTP_CONFLICT;
		json_key_str(w, "error", "record is not stuck");
		json_str(w, "record");
	} else {
		*http_status = RECORDS_HTTP_OK;
		json_str(w, done_names[cmd]);
	}
	records_gen_record(w, res, 0);
}

char *records_render(enum records_cmd cmd, const struct pg_result *res, int *http_status,
		     size_t *len)
{
	struct json_writer w;

	if (cmd < RECORDS_LIST || cmd > RECORDS_RESOLVE || !res ||
	    PQresultStatus(res) != PGRES_TUPLES_OK || PQnfields(res) != COL_COUNT)
		return NULL;
	json_writer_init(&w, 0);
	json_map_open(&w);
	if (cmd == RECORDS_LIST) {
		*http_status = RECORDS_HTTP_OK;
		records_gen_list(&w, res);
	} else {
		records_gen_one(&w, cmd, res, http_status);
	}
	json_map_close(&w);
	return json_writer_finish(&w, len);
}

int64_t records_retention(const struct conf *conf, const char *operation)
{
	const struct route *r;
	size_t n;

	for (int i = 0; operation && i < conf->nroutes; i++) {
		if (strcmp(conf->routes[i].operation, operation) == 0)
			return conf->routes[i].retention_ms;
	}
	/* Then the scopes operation_from names "ROUTE:NAME". */
	for (int i = 0; operation && i < conf->nroutes; i++) {
		r = &conf->routes[i];
		n = strlen(r->operation);
		if (r->operation_from && strncmp(r->operation, operation, n) == 0 &&
		    operation[n] == ':')
			return r->retention_ms;
	}
	return 0;
}
