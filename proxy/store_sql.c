/*
 * The store's statements (see store_sql.h): their text, one table row per
 * kind of operation, the parameters of an operation's row, and the
 * decoders of the rows that come back.
 */
#include <endian.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include <libpq-fe.h>

#include "proxy/store_sql.h"

/* Parameters per VALUES row. */
#define STORE_CLAIM_ROW_PARAMS	8
#define STORE_LOOKUP_ROW_PARAMS 9
#define STORE_FORGET_ROW_PARAMS 5
#define STORE_FINISH_ROW_PARAMS 11
#define STORE_FENCE_ROW_PARAMS	4

_Static_assert(STORE_FINISH_ROW_PARAMS <= STORE_ROW_PARAMS_MAX,
	       "a finish row must fit STORE_ROW_PARAMS_MAX");

/*
 * The statements keep to the forms PostgreSQL-compatible distributed
 * engines run (Citus with the table distributed by the key, CockroachDB,
 * YugabyteDB): times are computed in the VALUES rows (now() is the
 * transaction's start, the same in every statement of a batch); a new
 * generation comes from nextval in an INSERT's VALUES or in a CTE that
 * only reads; a statement writes the table once, and never through a
 * data-modifying CTE; and the notification that wakes waiting duplicates
 * is a statement of its own (STORE_SQL_NOTIFY), never a function
 * in a write's RETURNING.
 *
 * The claim's first step, one statement for the whole batch: insert a new
 * record for each scope and return those inserted, named by their scope
 * (an insert cannot return the ordinal). ON CONFLICT DO NOTHING makes
 * PostgreSQL pick one owner per slot; the operations that got no row find
 * the slot taken and go on to the lookup. The rows go in scope order (the
 * batch is sorted first) so that two stores inserting overlapping scopes
 * wait for each other in one order and cannot deadlock.
 */
static const char store_sql_claim_head[] =
    "INSERT INTO idempotency_records (actor, operation, idem_key, fingerprint, state,"
    " lease_expires_at, lease_owner, request_id, trace_id, generation) VALUES ";

static const char store_sql_claim_row[] =
    "(?, ?, ?, ?, 'in_progress', now() + ? * interval '1 millisecond', ?, ?, ?, "
    STORE_SQL_NEW_GENERATION ")";

static const char store_sql_claim_tail[] =
    " ON CONFLICT (actor, operation, idem_key) DO NOTHING"
    " RETURNING actor, operation, idem_key, generation";

/*
 * The claim's second step, for the slots the insert found taken: read the
 * records that hold them, one result row per ordinal. The read takes no
 * row lock, no transaction id and no WAL flush for the common "record
 * exists" answer. A row says whether the slot may be taken over (take): a
 * completed record whose retention has passed and, for a route with
 * `recovery forward`, a record of the same request whose outcome is
 * unknown or whose owner's lease ran out; those operations go on to the
 * takeover, a third step, and only they pay for its write. An ordinal
 * with no row met a concurrent delete; the caller claims again from the
 * insert. A batch never holds two operations on one scope, which keeps
 * each join on the scope one-to-one.
 */
static const char store_sql_lookup_head[] =
    "WITH v (ord, actor, operation, idem_key, fingerprint, lease_until, recover, lease_owner,"
    " request_id, trace_id, at) AS (VALUES ";

#define STORE_SQL_SCOPE_JOIN                                                             \
	" r.actor = v.actor AND r.operation = v.operation AND r.idem_key = v.idem_key"

/*
 * A slot the lookup may take over; NULL (never in a valid record) counts as
 * no. A completed record with a tombstone window (expired_keys refuse) is
 * refused, not taken over, from its expiry until the window's end, whether
 * the sweeper has made it a tombstone yet (state 'expired', whose expires_at
 * is then the window's end) or not. The window is compared as an interval
 * (timestamptz - timestamptz, interval * number: immutable), never as
 * expires_at + interval (stable), which Citus refuses on a column in a write.
 */
#define STORE_SQL_TAKEOVER                                                               \
	"(r.state = 'completed' AND r.expires_at <= v.at AND v.at - r.expires_at >="     \
	" coalesce(r.tombstone_ms, 0) * interval '1 millisecond'"                        \
	" OR r.state = 'expired' AND r.expires_at <= v.at"                               \
	" OR v.recover AND r.fingerprint = v.fingerprint AND (r.state = 'unknown'"       \
	" OR r.state = 'in_progress' AND r.lease_expires_at <= v.at))"

static const char store_sql_lookup_tail[] =
    ")"
    " SELECT v.ord, " STORE_SQL_TAKEOVER " IS TRUE, r.generation,"
    "  CASE WHEN r.state = 'completed' AND r.expires_at <= v.at THEN 'expired'"
    "   ELSE r.state END, r.fingerprint,"
    "  r.response_status, r.response_headers, r.response_body, r.body_omitted,"
    "  (r.state = 'in_progress' AND r.lease_expires_at <= v.at) IS TRUE,"
    "  CASE WHEN r.state = 'in_progress' THEN greatest(0, ceil(extract(epoch FROM"
    "   r.lease_expires_at - v.at) * 1000))::bigint ELSE 0::bigint END,"
    "  CASE WHEN r.state = 'completed' THEN coalesce(greatest(0, floor(extract(epoch FROM"
    "   r.expires_at - v.at) * 1000))::bigint, 0::bigint) ELSE 0::bigint END,"
    "  r.response_sealed,"
    "  CASE WHEN r.state = 'completed' THEN coalesce(greatest(0, floor(extract(epoch FROM"
    "   v.at - r.completed_at) * 1000))::bigint, 0::bigint) ELSE 0::bigint END,"
    "  r.request_id, r.trace_id,"
    "  CASE WHEN r.state = 'expired' OR r.state = 'completed' AND r.expires_at <= v.at"
    "   THEN to_char(r.completed_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"') END"
    " FROM v JOIN idempotency_records r ON" STORE_SQL_SCOPE_JOIN;

/*
 * The takeover of the slots the lookup found takeable, if they still are
 * (the same condition, checked again on the locked row): a new
 * generation for each from a CTE that reads no table, and the ordinals
 * taken over with it. One that is not returned was changed by a
 * concurrent writer: the caller claims again from the insert. The rows
 * go in scope order, like the insert's.
 */
static const char store_sql_takeover_tail[] =
    "),"
    " g AS (SELECT ord, " STORE_SQL_NEW_GENERATION " AS generation FROM v)"
    " UPDATE idempotency_records r SET"
    "  fingerprint = v.fingerprint, state = 'in_progress', lease_owner = v.lease_owner,"
    "  lease_expires_at = v.lease_until, generation = g.generation, response_status = NULL,"
    "  response_headers = NULL, response_body = NULL, response_sealed = NULL,"
    "  body_omitted = false, created_at = v.at, completed_at = NULL, expires_at = NULL,"
    "  request_id = v.request_id, trace_id = v.trace_id, tombstone_ms = NULL"
    " FROM v JOIN g ON g.ord = v.ord"
    " WHERE" STORE_SQL_SCOPE_JOIN " AND " STORE_SQL_TAKEOVER
    " RETURNING v.ord, r.generation";

/* Finish, mark unknown and release return the ordinals they wrote. */
static const char store_sql_finish_head[] =
    "UPDATE idempotency_records r SET state = 'completed', response_status = v.status,"
    " response_headers = v.headers, response_body = v.body, body_omitted = v.omitted,"
    " response_sealed = v.sealed, completed_at = v.at, expires_at = v.expires_at,"
    " tombstone_ms = v.tombstone_ms,"
    " lease_owner = NULL, lease_expires_at = NULL"
    " FROM (VALUES ";

/*
 * An owner's write lands while its generation holds: on its in_progress
 * record, or on one the sweeper marked unknown when the lease ran out
 * (nobody took it over, so the owner's outcome is still the truth).
 */
#define STORE_SQL_FENCE                                                                  \
	" WHERE" STORE_SQL_SCOPE_JOIN " AND r.generation = v.generation"                  \
	" AND r.state IN ('in_progress', 'unknown') RETURNING v.ord"

static const char store_sql_finish_tail[] =
    ") v (ord, actor, operation, idem_key, generation, status, headers, body, omitted,"
    " expires_at, sealed, tombstone_ms, at)" STORE_SQL_FENCE;

static const char store_sql_unknown_head[] =
    "UPDATE idempotency_records r SET state = 'unknown' FROM (VALUES ";

static const char store_sql_release_head[] = "DELETE FROM idempotency_records r USING (VALUES ";

static const char store_sql_fence_tail[] =
    ") v (ord, actor, operation, idem_key, generation)" STORE_SQL_FENCE;

/*
 * A lost claim's removal, three statements in one transaction. The
 * claim's own transaction may not have ended yet: a commit that waits for
 * a synchronous standby is bounded by no statement_timeout (the server
 * lifts it before committing), and until the commit ends the claim's row
 * is invisible to every other statement, so a delete by the lease token
 * alone would find nothing and the claim would land after it. So first a
 * probe inserts into each slot: meeting a row whose writer is still in
 * progress, the insert waits for that transaction to end (bounded by the
 * removal's lock_timeout), and the statements after it, with a snapshot
 * of their own, see what the claim left. A slot the probe finds free (the
 * claim never committed) gets the probe's own row, generation 0 (a
 * generation no claim has), which the delete after it removes in the
 * same transaction: nothing of the probe outlives it. Then the claim,
 * found by its lease token, is deleted when it inserted the record (or
 * took over an expired completed one), also when the sweeper has since
 * marked it unknown (its lease ran out before it committed); and, by the
 * third statement, marked unknown again when it took over an unknown or
 * abandoned record for recovery. The delete returns the ordinal and the
 * generation of each row it removed, the update the ordinals it wrote.
 */
static const char store_sql_forget_probe_head[] =
    "INSERT INTO idempotency_records (actor, operation, idem_key, fingerprint, state,"
    " lease_owner, generation) SELECT v.actor, v.operation, v.idem_key, ''::bytea,"
    " 'in_progress', v.lease_owner, 0 FROM (VALUES ";

#define STORE_SQL_LOST_CLAIM_ROWS ") v (ord, actor, operation, idem_key, lease_owner, recovered)"

static const char store_sql_forget_probe_tail[] =
    STORE_SQL_LOST_CLAIM_ROWS " ON CONFLICT (actor, operation, idem_key) DO NOTHING";

static const char store_sql_forget_head[] = "DELETE FROM idempotency_records r USING (VALUES ";

static const char store_sql_forget_held_head[] =
    "UPDATE idempotency_records r SET state = 'unknown', lease_owner = NULL FROM (VALUES ";

#define STORE_SQL_LOST_CLAIM                                                             \
	STORE_SQL_LOST_CLAIM_ROWS " WHERE" STORE_SQL_SCOPE_JOIN                          \
	" AND r.lease_owner = v.lease_owner"

static const char store_sql_forget_tail[] =
    STORE_SQL_LOST_CLAIM " AND (r.generation = 0 OR NOT v.recovered"
    " AND r.state IN ('in_progress', 'unknown')) RETURNING v.ord, r.generation";

static const char store_sql_forget_held_tail[] =
    STORE_SQL_LOST_CLAIM " AND r.state = 'in_progress' AND v.recovered RETURNING v.ord";

/* VALUES rows: '#' stands for the ordinal, '?' for the row's next parameter. */
static const char store_sql_lookup_row[] =
    "(#, ?, ?, ?, ?, now() + ? * interval '1 millisecond', ?, ?, ?, ?, now())";
static const char store_sql_forget_row[] = "(#, ?, ?, ?, ?, ?)";
static const char store_sql_finish_row[] =
    "(#, ?, ?, ?, ?, ?, ?, ?, ?, now() + ? * interval '1 millisecond', ?, ?, now())";
static const char store_sql_fence_row[] = "(#, ?, ?, ?, ?)";

/*
 * The notification (STORE_SQL_NOTIFY) after a write batch goes in the
 * write's transaction, so out at its commit. A write that was fenced
 * wakes its waiters too, and they read the record again.
 */
static const Oid store_sql_notify_types[] = {STORE_OID_TEXT_ARRAY};

/*
 * Sent before every statement, in the same implicit transaction, which
 * lasts until the pipeline's sync. set_config rather than SET LOCAL: the
 * effect is the same, but SET LOCAL warns outside an explicit transaction
 * block.
 */
#define STORE_SQL_TIMEOUT "SELECT set_config('statement_timeout', '%" PRId64 "', true)"

/*
 * Before a batch of more than one row, the same and a plan made for this
 * execution. After five executions PostgreSQL may settle a named statement
 * on a generic plan and keep it; one made while the table was small (just
 * created or emptied, no statistics yet) joins the rows to a scan of the
 * whole table, and goes on doing so as the table grows until the next
 * ANALYZE: 5-27 ms a batch instead of 0.2 at 30,000 rows. A plan per
 * execution looks the rows up by the primary key as soon as the table is
 * larger than a few pages; parsing is still saved. A one-row batch's
 * generic plan is one index probe whatever the table's size.
 */
#define STORE_SQL_TIMEOUT_ROWS                                                           \
	"SELECT set_config('statement_timeout', '%" PRId64 "', true),"                  \
	" set_config('plan_cache_mode', 'force_custom_plan', true)"

/* The lost-claim removal's: the same, and how long its probe may wait. */
#define STORE_SQL_FORGET_TIMEOUT                                                         \
	"SELECT set_config('statement_timeout', '%" PRId64 "', true),"                  \
	" set_config('plan_cache_mode', 'force_custom_plan', true),"                    \
	" set_config('lock_timeout', '%" PRId64 "', true)"

const struct store_stmt store_sql_listen = {"LISTEN " STORE_CHANNEL, 0, NULL, NULL, NULL, NULL};

/* Whether the database has Citus: then the table may be distributed (store_sql_write). */
const struct store_stmt store_sql_citus = {
    "SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus')", 0, NULL, NULL, NULL,
    NULL};

/* On a direct connection the server's own pid is the one libpq was told at startup. */
const struct store_stmt store_sql_probe = {"SELECT pg_backend_pid()", 0, NULL, NULL, NULL, NULL};

_Static_assert(sizeof(store_sql_lookup_head) + sizeof(store_sql_lookup_tail) < STORE_SQL_FIXED_MAX &&
		   sizeof(store_sql_lookup_head) + sizeof(store_sql_takeover_tail) <
		       STORE_SQL_FIXED_MAX,
	       "the lookup's fixed text must fit STORE_SQL_FIXED_MAX");
/* A row's parameters, and on Citus its key once more ("$N, "): 8 more. */
_Static_assert(sizeof(store_sql_lookup_row) + 7 * STORE_LOOKUP_ROW_PARAMS + 8 < STORE_SQL_ROW_MAX &&
		   sizeof(store_sql_finish_row) + 7 * STORE_FINISH_ROW_PARAMS + 8 < STORE_SQL_ROW_MAX,
	       "a lookup or finish row must fit STORE_SQL_ROW_MAX");
_Static_assert(sizeof(store_sql_claim_row) + 7 * STORE_CLAIM_ROW_PARAMS < STORE_SQL_ROW_MAX,
	       "a claim row must fit STORE_SQL_ROW_MAX");
_Static_assert(sizeof(store_sql_finish_head) + sizeof(store_sql_finish_tail) < STORE_SQL_FIXED_MAX,
	       "the finish's fixed text must fit STORE_SQL_FIXED_MAX");
_Static_assert(sizeof(store_sql_forget_probe_head) + sizeof(store_sql_forget_probe_tail) <
		   STORE_SQL_FIXED_MAX,
	       "the forget's probe must fit STORE_SQL_FIXED_MAX");

_Static_assert(2 * STORE_NUM_MAX + sizeof(STORE_SQL_FORGET_TIMEOUT) <= STORE_SQL_TIMEOUT_MAX,
	       "the timeout settings must fit STORE_SQL_TIMEOUT_MAX");

/* Columns of an insert result row, in the order the statement returns them. */
enum store_insert_col {
	STORE_INS_ACTOR,
	STORE_INS_OPERATION,
	STORE_INS_KEY,
	STORE_INS_GENERATION,
	STORE_INSERT_COLUMNS,
};

/* Columns of a lookup result row, in the order the statement selects them. */
enum store_claim_col {
	STORE_COL_ORD,
	STORE_COL_TAKE,
	STORE_COL_GENERATION,
	STORE_COL_STATE,
	STORE_COL_FINGERPRINT,
	STORE_COL_STATUS,
	STORE_COL_HEADERS,
	STORE_COL_BODY,
	STORE_COL_OMITTED,
	STORE_COL_LEASE_EXPIRED,
	STORE_COL_LEASE_REMAINING,
	STORE_COL_EXPIRES_IN,
	STORE_COL_SEALED,
	STORE_COL_COMPLETED_AGO,
	STORE_COL_REQUEST_ID,
	STORE_COL_TRACE_ID,
	STORE_COL_COMPLETED_AT, /* a tombstone's (refused key's) completion, RFC 3339 */
	STORE_CLAIM_COLUMNS,
};

/*
 * How one kind of operation is written: its statements, each a head, one
 * VALUES row per operation from the row template (with row_params
 * parameters of the given types and formats) and a tail; the companion
 * (STORE_PART_SIDE) is sent after the kind's own statement, the first
 * (STORE_PART_FIRST) before it, around the same rows with the same
 * parameters, in the same transaction. A part with no head is not sent.
 */
struct store_sql {
	struct {
		const char *head;
		const char *tail;
	} part[STORE_PARTS];
	const char *row;
	int row_params;
	Oid types[STORE_ROW_PARAMS_MAX];
	int formats[STORE_ROW_PARAMS_MAX];
	int scope_order; /* its rows go in scope order */
};

/* A claim row and a lookup row start alike: scope, fingerprint, lease (then
 * recover), token, then both end with the claimant's request and trace ids. */
#define STORE_CLAIM_ROW_TYPES                                                            \
	STORE_OID_TEXT, STORE_OID_TEXT, STORE_OID_TEXT, STORE_OID_BYTEA, STORE_OID_INT8
#define STORE_CLAIM_ROW_FORMATS                                                          \
	STORE_FORMAT_TEXT, STORE_FORMAT_TEXT, STORE_FORMAT_TEXT, STORE_FORMAT_BINARY,     \
	    STORE_FORMAT_TEXT

/* A write row starts with the scope and the generation. */
#define STORE_FENCE_ROW_TYPES STORE_OID_TEXT, STORE_OID_TEXT, STORE_OID_TEXT, STORE_OID_INT8
#define STORE_FENCE_ROW_FORMATS                                                          \
	STORE_FORMAT_TEXT, STORE_FORMAT_TEXT, STORE_FORMAT_TEXT, STORE_FORMAT_TEXT

/* Bytea (fingerprint, headers, body) goes binary: sent by length, never copied here. */
static const struct store_sql store_sqls[] = {
    [STORE_OP_CLAIM] =
	{
	    .part = {[STORE_PART_MAIN] = {store_sql_claim_head, store_sql_claim_tail}},
	    .row = store_sql_claim_row,
	    .row_params = STORE_CLAIM_ROW_PARAMS,
	    .types = {STORE_CLAIM_ROW_TYPES, STORE_OID_TEXT, STORE_OID_TEXT, STORE_OID_TEXT},
	    .formats = {STORE_CLAIM_ROW_FORMATS, STORE_FORMAT_TEXT, STORE_FORMAT_TEXT,
			STORE_FORMAT_TEXT},
	    .scope_order = 1,
	},
    [STORE_OP_LOOKUP] =
	{
	    .part = {[STORE_PART_MAIN] = {store_sql_lookup_head, store_sql_lookup_tail}},
	    .row = store_sql_lookup_row,
	    .row_params = STORE_LOOKUP_ROW_PARAMS,
	    .types = {STORE_CLAIM_ROW_TYPES, STORE_OID_BOOL, STORE_OID_TEXT, STORE_OID_TEXT,
		      STORE_OID_TEXT},
	    .formats = {STORE_CLAIM_ROW_FORMATS, STORE_FORMAT_TEXT, STORE_FORMAT_TEXT,
			STORE_FORMAT_TEXT, STORE_FORMAT_TEXT},
	},
    [STORE_OP_TAKEOVER] =
	{
	    .part = {[STORE_PART_MAIN] = {store_sql_lookup_head, store_sql_takeover_tail}},
	    .row = store_sql_lookup_row,
	    .row_params = STORE_LOOKUP_ROW_PARAMS,
	    .types = {STORE_CLAIM_ROW_TYPES, STORE_OID_BOOL, STORE_OID_TEXT, STORE_OID_TEXT,
		      STORE_OID_TEXT},
	    .formats = {STORE_CLAIM_ROW_FORMATS, STORE_FORMAT_TEXT, STORE_FORMAT_TEXT,
			STORE_FORMAT_TEXT, STORE_FORMAT_TEXT},
	    .scope_order = 1,
	},
    [STORE_OP_FINISH] =
	{
	    .part = {[STORE_PART_MAIN] = {store_sql_finish_head, store_sql_finish_tail}},
	    .row = store_sql_finish_row,
	    .row_params = STORE_FINISH_ROW_PARAMS,
	    .types = {STORE_FENCE_ROW_TYPES, STORE_OID_INT4, STORE_OID_BYTEA, STORE_OID_BYTEA,
		      STORE_OID_BOOL, STORE_OID_INT8, STORE_OID_TEXT, STORE_OID_INT8},
	    .formats = {STORE_FENCE_ROW_FORMATS, STORE_FORMAT_TEXT, STORE_FORMAT_BINARY,
			STORE_FORMAT_BINARY, STORE_FORMAT_TEXT, STORE_FORMAT_TEXT,
			STORE_FORMAT_TEXT, STORE_FORMAT_TEXT},
	},
    [STORE_OP_UNKNOWN] =
	{
	    .part = {[STORE_PART_MAIN] = {store_sql_unknown_head, store_sql_fence_tail}},
	    .row = store_sql_fence_row,
	    .row_params = STORE_FENCE_ROW_PARAMS,
	    .types = {STORE_FENCE_ROW_TYPES},
	    .formats = {STORE_FENCE_ROW_FORMATS},
	},
    [STORE_OP_RELEASE] =
	{
	    .part = {[STORE_PART_MAIN] = {store_sql_release_head, store_sql_fence_tail}},
	    .row = store_sql_fence_row,
	    .row_params = STORE_FENCE_ROW_PARAMS,
	    .types = {STORE_FENCE_ROW_TYPES},
	    .formats = {STORE_FENCE_ROW_FORMATS},
	},
    [STORE_OP_FORGET] =
	{
	    .part =
		{
		    [STORE_PART_FIRST] = {store_sql_forget_probe_head, store_sql_forget_probe_tail},
		    [STORE_PART_MAIN] = {store_sql_forget_head, store_sql_forget_tail},
		    [STORE_PART_SIDE] = {store_sql_forget_held_head, store_sql_forget_held_tail},
		},
	    .row = store_sql_forget_row,
	    .row_params = STORE_FORGET_ROW_PARAMS,
	    .types = {STORE_OID_TEXT, STORE_OID_TEXT, STORE_OID_TEXT, STORE_OID_TEXT,
		      STORE_OID_BOOL},
	    .formats = {STORE_FORMAT_TEXT, STORE_FORMAT_TEXT, STORE_FORMAT_TEXT,
			STORE_FORMAT_TEXT, STORE_FORMAT_TEXT},
	    .scope_order = 1,
	},
};

int store_sql_has_part(enum store_op_kind kind, enum store_part part)
{
	return kind != STORE_OP_QUERY && store_sqls[kind].part[part].head;
}

int store_sql_scope_order(enum store_op_kind kind)
{
	return kind != STORE_OP_QUERY && store_sqls[kind].scope_order;
}

int store_sql_id(enum store_op_kind kind, enum store_part part, int rows, int citus)
{
	if (kind == STORE_OP_QUERY || rows > STORE_NAMED_ROWS)
		return -1;
	return STORE_ID_BATCHES + (citus ? STORE_NAMED_FORMS : 0) +
	       (STORE_PARTS * (int)kind + (int)part) * STORE_NAMED_ROWS + rows - 1;
}

void store_sql_name(int id, char name[STORE_NAME_MAX])
{
	static const char *const fixed[STORE_ID_BATCHES] = {
	    [STORE_ID_TIMEOUT] = "idemproxy_timeout",
	    [STORE_ID_TIMEOUT_ROWS] = "idemproxy_timeout_rows",
	    [STORE_ID_NOTIFY] = "idemproxy_notify",
	    [STORE_ID_FORGET_TIMEOUT] = "idemproxy_forget_timeout",
	};
	static const char *const suffixes[STORE_PARTS] = {"", "_side", "_first"};
	int part, citus;

	if (id < STORE_ID_BATCHES) {
		snprintf(name, STORE_NAME_MAX, "%s", fixed[id]);
		return;
	}
	id -= STORE_ID_BATCHES;
	citus = id >= STORE_NAMED_FORMS;
	id %= STORE_NAMED_FORMS;
	part = id / STORE_NAMED_ROWS;
	snprintf(name, STORE_NAME_MAX, "idemproxy_%d_%d%s%s", part / STORE_PARTS,
		 id % STORE_NAMED_ROWS + 1, suffixes[part % STORE_PARTS], citus ? "_citus" : "");
}

/*
 * Append to sql, whose text is len long, the VALUES row of ordinal ord
 * from template row: '#' becomes ord, each '?' the next parameter after
 * the n already numbered. Returns the new length.
 */
static size_t store_sql_write_row(char *sql, size_t len, const char *row, int ord, int n)
{
	size_t size = STORE_SQL_MAX;
	const char *p;

	if (ord)
		len += (size_t)snprintf(sql + len, size - len, ", ");
	while ((p = strpbrk(row, "#?"))) {
		len += (size_t)snprintf(sql + len, size - len, "%.*s", (int)(p - row), row);
		if (*p == '#')
			len += (size_t)snprintf(sql + len, size - len, "%d", ord);
		else
			len += (size_t)snprintf(sql + len, size - len, "$%d", ++n);
		row = p + 1;
	}
	return len + (size_t)snprintf(sql + len, size - len, "%s", row);
}

/*
 * Where Citus distributes the table by idem_key: the rows' keys, the third
 * parameter of every row, as a restriction Citus prunes shards by, before
 * the tail's RETURNING (or at its end). Only a statement that joins the
 * table to its rows (r.idem_key = v.idem_key) takes one; the inserts are
 * routed row by row already.
 */
static size_t store_sql_write_tail(char *sql, size_t len, const struct store_sql *q,
				   enum store_part part, int rows, int citus)
{
	const char *tail = q->part[part].tail, *ret = strstr(tail, " RETURNING ");
	size_t size = STORE_SQL_MAX, at = ret ? (size_t)(ret - tail) : strlen(tail);

	if (!citus || !strstr(tail, STORE_SQL_SCOPE_JOIN))
		return len + (size_t)snprintf(sql + len, size - len, "%s", tail);
	len += (size_t)snprintf(sql + len, size - len, "%.*s AND r.idem_key IN (", (int)at, tail);
	for (int i = 0; i < rows; i++)
		len += (size_t)snprintf(sql + len, size - len, "%s$%d", i ? ", " : "",
					i * q->row_params + 3);
	return len + (size_t)snprintf(sql + len, size - len, ")%s", tail + at);
}

/* The sizes above keep the statement within STORE_SQL_MAX. */
void store_sql_write(char *sql, enum store_op_kind kind, enum store_part part, int rows,
		     int citus)
{
	const struct store_sql *q = &store_sqls[kind];
	size_t len;

	len = (size_t)snprintf(sql, STORE_SQL_MAX, "%s", q->part[part].head);
	for (int i = 0; i < rows; i++)
		len = store_sql_write_row(sql, len, q->row, i, i * q->row_params);
	store_sql_write_tail(sql, len, q, part, rows, citus);
}

/* A text parameter: sent as it is, its length not needed. */
static void store_sql_text(const char **values, int *lengths, int i, const char *text)
{
	values[i] = text;
	lengths[i] = 0;
}

/* Number v as the text parameter i, written into num. */
static void store_sql_num(const char **values, int *lengths, int i, char *num, int64_t v)
{
	snprintf(num, STORE_NUM_MAX, "%" PRId64, v);
	store_sql_text(values, lengths, i, num);
}

/* A claim's, lookup's or takeover's row after its scope: fingerprint, lease, for
 * a lookup or takeover whether it may recover, then the claim's token and
 * the claimant's request and trace ids. */
static void store_sql_claim_params(enum store_op_kind kind, const struct store_ask *a,
				   char nums[STORE_OP_NUMS][STORE_NUM_MAX], const char **values,
				   int *lengths)
{
	int lookup = kind != STORE_OP_CLAIM;

	values[3] = (const char *)a->fp;
	lengths[3] = RECORD_FINGERPRINT_LEN;
	store_sql_num(values, lengths, 4, nums[0], a->lease_ms);
	if (lookup)
		store_sql_text(values, lengths, 5, a->recover ? "true" : "false");
	store_sql_text(values, lengths, 5 + lookup, a->token);
	store_sql_text(values, lengths, 6 + lookup, a->request_id);
	store_sql_text(values, lengths, 7 + lookup, a->trace_id);
}

/* A finish's row after its scope and generation: the response the record keeps. */
static void store_sql_finish_params(const struct store_ask *a,
				    char nums[STORE_OP_NUMS][STORE_NUM_MAX], const char **values,
				    int *lengths)
{
	store_sql_num(values, lengths, 4, nums[1], a->status);
	values[5] = a->headers ? a->headers : "";
	lengths[5] = (int)a->headers_len;
	values[6] = a->omitted ? NULL : a->body ? (const char *)a->body : "";
	lengths[6] = a->omitted ? 0 : (int)a->body_len;
	store_sql_text(values, lengths, 7, a->omitted ? "true" : "false");
	store_sql_num(values, lengths, 8, nums[2], a->retention_ms);
	store_sql_text(values, lengths, 9, a->sealed);
	/* NULL without a window: the row is as wide as before tombstones. */
	if (a->tombstone_ms > 0)
		store_sql_num(values, lengths, 10, nums[3], a->tombstone_ms);
	else
		store_sql_text(values, lengths, 10, NULL);
}

int store_sql_row(enum store_op_kind kind, const struct store_ask *ask,
		  char nums[STORE_OP_NUMS][STORE_NUM_MAX], const char **values, int *lengths,
		  Oid *types, int *formats)
{
	const struct store_sql *q = &store_sqls[kind];

	store_sql_text(values, lengths, 0, ask->sc.actor);
	store_sql_text(values, lengths, 1, ask->sc.operation);
	store_sql_text(values, lengths, 2, ask->sc.key);
	if (kind == STORE_OP_FORGET) {
		store_sql_text(values, lengths, 3, ask->token);
		store_sql_text(values, lengths, 4, ask->recovered ? "true" : "false");
	} else if (kind == STORE_OP_CLAIM || kind == STORE_OP_LOOKUP || kind == STORE_OP_TAKEOVER) {
		store_sql_claim_params(kind, ask, nums, values, lengths);
	} else {
		store_sql_num(values, lengths, 3, nums[0], ask->generation);
		if (kind == STORE_OP_FINISH)
			store_sql_finish_params(ask, nums, values, lengths);
	}
	memcpy(types, q->types, (size_t)q->row_params * sizeof(*types));
	memcpy(formats, q->formats, (size_t)q->row_params * sizeof(*formats));
	return q->row_params;
}

size_t store_sql_tokens_add(char *buf, size_t len, const char *token)
{
	size_t n = strlen(token);

	if (!n)
		return len;
	buf[len] = len ? ',' : '{';
	memcpy(buf + len + 1, token, n);
	return len + 1 + n;
}

void store_sql_notify(struct store_stmt *stmt, const char *const *param)
{
	*stmt = (struct store_stmt){STORE_SQL_NOTIFY, 1, store_sql_notify_types, param, NULL, NULL};
}

void store_sql_timeouts(char *batch, char *rows, char *forget, int64_t timeout_ms,
			int64_t lock_ms)
{
	snprintf(batch, STORE_SQL_TIMEOUT_MAX, STORE_SQL_TIMEOUT, timeout_ms);
	snprintf(rows, STORE_SQL_TIMEOUT_MAX, STORE_SQL_TIMEOUT_ROWS, timeout_ms);
	snprintf(forget, STORE_SQL_TIMEOUT_MAX, STORE_SQL_FORGET_TIMEOUT, timeout_ms, lock_ms);
}

static int64_t store_sql_int8(const PGresult *res, int row, int col)
{
	uint64_t v;

	memcpy(&v, PQgetvalue(res, row, col), sizeof(v));
	return (int64_t)be64toh(v);
}

static int32_t store_sql_int4(const PGresult *res, int row, int col)
{
	uint32_t v;

	memcpy(&v, PQgetvalue(res, row, col), sizeof(v));
	return (int32_t)be32toh(v);
}

static int store_sql_bool(const PGresult *res, int row, int col)
{
	return PQgetvalue(res, row, col)[0] != 0;
}

/* 1 when column col of row is non-NULL and exactly len bytes long. */
static int store_sql_has(const PGresult *res, int row, int col, int len)
{
	return !PQgetisnull(res, row, col) && PQgetlength(res, row, col) == len;
}

int store_sql_ord(const PGresult *res, int row, int nbatch)
{
	int32_t ord;

	if (!store_sql_has(res, row, 0, sizeof(int32_t)))
		return -1;
	ord = store_sql_int4(res, row, 0);
	return ord >= 0 && ord < nbatch ? ord : -1;
}

int store_sql_insert_columns(const PGresult *res)
{
	return PQnfields(res) == STORE_INSERT_COLUMNS;
}

int store_sql_insert_scope(const PGresult *res, int row, const struct scope *sc)
{
	const char *parts[] = {sc->actor, sc->operation, sc->key};
	size_t len;

	for (int col = STORE_INS_ACTOR; col <= STORE_INS_KEY; col++) {
		len = strlen(parts[col]);
		if (PQgetisnull(res, row, col) || (size_t)PQgetlength(res, row, col) != len ||
		    memcmp(PQgetvalue(res, row, col), parts[col], len) != 0)
			return 0;
	}
	return 1;
}

int store_sql_insert_generation(const PGresult *res, int row, int64_t *generation)
{
	if (!store_sql_has(res, row, STORE_INS_GENERATION, sizeof(int64_t)))
		return -1;
	*generation = store_sql_int8(res, row, STORE_INS_GENERATION);
	return 0;
}

/* A completed record's response, from lookup result row into rec: 0, or -1 without a status. */
static int store_sql_response(const PGresult *res, int row, struct record *rec)
{
	if (!store_sql_has(res, row, STORE_COL_STATUS, sizeof(int32_t)))
		return -1;
	rec->status = store_sql_int4(res, row, STORE_COL_STATUS);
	if (!PQgetisnull(res, row, STORE_COL_SEALED))
		rec->sealed = PQgetvalue(res, row, STORE_COL_SEALED);
	if (!PQgetisnull(res, row, STORE_COL_HEADERS)) {
		rec->headers = PQgetvalue(res, row, STORE_COL_HEADERS);
		rec->headers_len = (size_t)PQgetlength(res, row, STORE_COL_HEADERS);
	}
	if (!PQgetisnull(res, row, STORE_COL_BODY)) {
		rec->body = (const unsigned char *)PQgetvalue(res, row, STORE_COL_BODY);
		rec->body_len = (size_t)PQgetlength(res, row, STORE_COL_BODY);
	}
	return 0;
}

int store_sql_lookup_record(const PGresult *res, int row, struct record *rec)
{
	const char *state;

	if (PQnfields(res) != STORE_CLAIM_COLUMNS || !store_sql_has(res, row, STORE_COL_TAKE, 1) ||
	    !store_sql_has(res, row, STORE_COL_GENERATION, sizeof(int64_t)))
		return -1;
	if (store_sql_bool(res, row, STORE_COL_TAKE))
		return 1;
	if (PQgetisnull(res, row, STORE_COL_STATE) ||
	    !store_sql_has(res, row, STORE_COL_FINGERPRINT, RECORD_FINGERPRINT_LEN) ||
	    !store_sql_has(res, row, STORE_COL_OMITTED, 1) ||
	    !store_sql_has(res, row, STORE_COL_LEASE_EXPIRED, 1) ||
	    !store_sql_has(res, row, STORE_COL_LEASE_REMAINING, sizeof(int64_t)) ||
	    !store_sql_has(res, row, STORE_COL_EXPIRES_IN, sizeof(int64_t)) ||
	    !store_sql_has(res, row, STORE_COL_COMPLETED_AGO, sizeof(int64_t)))
		return -1;
	memset(rec, 0, sizeof(*rec));
	state = PQgetvalue(res, row, STORE_COL_STATE);
	if (strcmp(state, "in_progress") == 0)
		rec->state = RECORD_IN_PROGRESS;
	else if (strcmp(state, "completed") == 0)
		rec->state = RECORD_COMPLETED;
	else if (strcmp(state, "unknown") == 0)
		rec->state = RECORD_UNKNOWN;
	else if (strcmp(state, "expired") == 0)
		rec->state = RECORD_EXPIRED;
	else
		return -1;
	memcpy(rec->fingerprint, PQgetvalue(res, row, STORE_COL_FINGERPRINT),
	       RECORD_FINGERPRINT_LEN);
	rec->generation = store_sql_int8(res, row, STORE_COL_GENERATION);
	rec->lease_expired = store_sql_bool(res, row, STORE_COL_LEASE_EXPIRED);
	rec->lease_remaining_ms = store_sql_int8(res, row, STORE_COL_LEASE_REMAINING);
	rec->expires_in_ms = store_sql_int8(res, row, STORE_COL_EXPIRES_IN);
	rec->completed_ms_ago = store_sql_int8(res, row, STORE_COL_COMPLETED_AGO);
	rec->body_omitted = store_sql_bool(res, row, STORE_COL_OMITTED);
	if (!PQgetisnull(res, row, STORE_COL_REQUEST_ID))
		rec->request_id = PQgetvalue(res, row, STORE_COL_REQUEST_ID);
	if (!PQgetisnull(res, row, STORE_COL_TRACE_ID))
		rec->trace_id = PQgetvalue(res, row, STORE_COL_TRACE_ID);
	if (!PQgetisnull(res, row, STORE_COL_COMPLETED_AT))
		rec->completed_at = PQgetvalue(res, row, STORE_COL_COMPLETED_AT);
	rec->headers = "";
	return rec->state == RECORD_COMPLETED ? store_sql_response(res, row, rec) : 0;
}

int store_sql_takeover_ord(const PGresult *res, int row, int nbatch, int64_t *generation)
{
	int ord = store_sql_ord(res, row, nbatch);

	if (ord < 0 || PQnfields(res) != 2 || !store_sql_has(res, row, 1, sizeof(int64_t)))
		return -1;
	*generation = store_sql_int8(res, row, 1);
	return ord;
}

int store_sql_forget_removed(const PGresult *res)
{
	int removed = 0;

	for (int row = 0; row < PQntuples(res); row++)
		removed += PQnfields(res) == 2 && store_sql_has(res, row, 1, sizeof(int64_t)) &&
			   store_sql_int8(res, row, 1) != 0;
	return removed;
}

int store_sql_error_schema(const PGresult *res)
{
	const char *sqlstate = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;

	/* undefined_table, undefined_column, undefined_function */
	return sqlstate && (strcmp(sqlstate, "42P01") == 0 || strcmp(sqlstate, "42703") == 0 ||
			    strcmp(sqlstate, "42883") == 0);
}

int store_sql_error_fatal(const char *sqlstate)
{
	if (!sqlstate)
		return 1;
	return strcmp(sqlstate, "25006") == 0 || strncmp(sqlstate, "08", 2) == 0 ||
	       strcmp(sqlstate, "57P01") == 0 || strcmp(sqlstate, "57P02") == 0 ||
	       strcmp(sqlstate, "57P03") == 0;
}

int store_sql_error_timeout(const char *sqlstate)
{
	return sqlstate && (strcmp(sqlstate, "55P03") == 0 || strcmp(sqlstate, "57014") == 0);
}
