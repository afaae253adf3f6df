/*
 * The retention sweeper: one repeating timer on the main thread's loop.
 *
 * Each tick runs a few statements through the main thread's store, under
 * a transaction-scoped advisory lock so that one instance sweeps at a
 * time however many share the database (and nothing stays locked on a
 * pgbouncer server connection). It deletes up to SWEEP_BATCH completed
 * records past expires_at, and marks up to SWEEP_BATCH in_progress
 * records whose lease ran out as unknown: their owner vanished, and an
 * operator (or `recovery forward`) must now decide. It never deletes an
 * in_progress or unknown record. A completed record whose route keeps
 * tombstones (expired_keys refuse: tombstone_ms set) is not deleted at its
 * expiry but made a tombstone (state 'expired', no headers, no body, its
 * expires_at the end of its window), and deleted at the window's end.
 * When a tick found a full batch, the next
 * one follows after SWEEP_AGAIN_MS instead of the interval. In a database
 * with Citus the writes take the forms Citus runs (no FOR UPDATE).
 */
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include <libpq-fe.h>

#include "proxy/clock.h"
#include "proxy/log.h"
#include "proxy/stats.h"
#include "proxy/store.h"
#include "proxy/sweeper.h"

#define SWEEP_BATCH	   500
#define SWEEP_AGAIN_MS	   100
#define SWEEP_LOCK_KEY	   "7594869612733442170"
#define SWEEP_STR(x)	   #x
#define SWEEP_TEXT(x)	   SWEEP_STR(x)

_Static_assert(SWEEP_BATCH > 0, "a sweep must make progress");

/*
 * A sweep is three statements, each its own transaction, each writing the
 * table at most once (the forms distributed engines run): the lock
 * probe, which also counts the records that need an operator (each
 * through its partial index) as they were before this sweep marked any;
 * the delete; the mark, which returns the tokens of the scopes it marked,
 * so that their waiters are woken (store_notify) and stop waiting. The
 * two writes take the lock again, a no-op for the instance that holds it
 * (an advisory lock is re-entrant), and do nothing when another instance
 * took it in between. Rows are picked with SKIP LOCKED, so a sweep never
 * waits for an owner's write; the lock subquery runs once per statement.
 */
#define SWEEP_LOCKED "(SELECT pg_try_advisory_xact_lock(" SWEEP_LOCK_KEY "))"

static const char sweep_sql_lock[] =
    "SELECT " SWEEP_LOCKED ","
    " (SELECT count(*) FROM idempotency_records"
    "  WHERE state = 'in_progress' AND lease_expires_at <= now()),"
    " (SELECT count(*) FROM idempotency_records WHERE state = 'unknown'),"
    " EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus')";

/*
 * A completed record past its expiry that keeps no tombstone (any more),
 * and one that becomes a tombstone (still within its window). The window
 * is compared as an interval, now() - expires_at (immutable operators),
 * not as expires_at + interval, a stable one Citus refuses on a column in
 * a write.
 */
#define SWEEP_WINDOW " tombstone_ms * interval '1 millisecond'"
#define SWEEP_GONE                                                                       \
	" AND (tombstone_ms IS NULL OR tombstone_ms <= 0 OR now() - expires_at >="      \
	SWEEP_WINDOW ")"
#define SWEEP_BURIED " AND tombstone_ms > 0 AND now() - expires_at <" SWEEP_WINDOW
#define SWEEP_TOMBSTONE                                                                  \
	" SET state = 'expired', response_headers = NULL, response_body = NULL,"          \
	" response_sealed = NULL, body_omitted = false,"

static const char sweep_sql_delete[] =
    "DELETE FROM idempotency_records r USING ("
    " SELECT actor, operation, idem_key FROM idempotency_records"
    " WHERE state = 'completed' AND expires_at <= now()" SWEEP_GONE " AND " SWEEP_LOCKED
    " ORDER BY expires_at LIMIT $1 FOR UPDATE SKIP LOCKED) d"
    " WHERE r.actor = d.actor AND r.operation = d.operation AND r.idem_key = d.idem_key"
    " AND r.state = 'completed'";

static const char sweep_sql_bury[] =
    "UPDATE idempotency_records r" SWEEP_TOMBSTONE " expires_at = b.until FROM ("
    " SELECT actor, operation, idem_key, expires_at +" SWEEP_WINDOW " AS until"
    " FROM idempotency_records"
    " WHERE state = 'completed' AND expires_at <= now()" SWEEP_BURIED " AND " SWEEP_LOCKED
    " ORDER BY expires_at LIMIT $1 FOR UPDATE SKIP LOCKED) b"
    " WHERE r.actor = b.actor AND r.operation = b.operation AND r.idem_key = b.idem_key"
    " AND r.state = 'completed'";

static const char sweep_sql_purge[] =
    "DELETE FROM idempotency_records r USING ("
    " SELECT actor, operation, idem_key FROM idempotency_records"
    " WHERE state = 'expired' AND expires_at <= now() AND " SWEEP_LOCKED
    " ORDER BY expires_at LIMIT $1 FOR UPDATE SKIP LOCKED) d"
    " WHERE r.actor = d.actor AND r.operation = d.operation AND r.idem_key = d.idem_key"
    " AND r.state = 'expired'";

static const char sweep_sql_mark[] =
    "UPDATE idempotency_records r SET state = 'unknown' FROM ("
    " SELECT actor, operation, idem_key FROM idempotency_records"
    " WHERE state = 'in_progress' AND lease_expires_at <= now() AND " SWEEP_LOCKED
    " ORDER BY lease_expires_at LIMIT $1 FOR UPDATE SKIP LOCKED) s"
    " WHERE r.actor = s.actor AND r.operation = s.operation AND r.idem_key = s.idem_key"
    " AND r.state = 'in_progress'"
    " RETURNING " SCOPE_SQL_TOKEN("r");

/*
 * The same writes where Citus may distribute the table: it runs no
 * distributed statement with FOR UPDATE, so the rows are picked by a plain
 * read (a CTE Citus evaluates first, its rows brought to the coordinator)
 * and the write re-checks each row's own state and time, which an owner's
 * write or a takeover in between changes: what is deleted or made a
 * tombstone is still completed with the expiry it was read with (a
 * takeover's finish writes another), what is marked still in_progress past
 * its lease; a tombstone's end is computed in the read, as Citus computes
 * no stable expression on a column in a write.
 * A row an owner holds is waited for instead of skipped. The lock is a CTE
 * of its own, evaluated once on the coordinator.
 */
#define SWEEP_LOCKED_CTE "l AS MATERIALIZED (SELECT pg_try_advisory_xact_lock(" SWEEP_LOCK_KEY ") AS held)"

static const char sweep_sql_delete_citus[] =
    "WITH " SWEEP_LOCKED_CTE ","
    " d AS (SELECT actor, operation, idem_key, expires_at FROM idempotency_records"
    "  WHERE state = 'completed' AND expires_at <= now()" SWEEP_GONE
    "  ORDER BY expires_at LIMIT $1)"
    " DELETE FROM idempotency_records r USING d, l"
    " WHERE l.held AND r.actor = d.actor AND r.operation = d.operation"
    " AND r.idem_key = d.idem_key AND r.state = 'completed' AND r.expires_at = d.expires_at";

static const char sweep_sql_bury_citus[] =
    "WITH " SWEEP_LOCKED_CTE ","
    " b AS (SELECT actor, operation, idem_key, expires_at,"
    "  expires_at +" SWEEP_WINDOW " AS until FROM idempotency_records"
    "  WHERE state = 'completed' AND expires_at <= now()" SWEEP_BURIED
    "  ORDER BY expires_at LIMIT $1)"
    " UPDATE idempotency_records r" SWEEP_TOMBSTONE " expires_at = b.until FROM b, l"
    " WHERE l.held AND r.actor = b.actor AND r.operation = b.operation"
    " AND r.idem_key = b.idem_key AND r.state = 'completed' AND r.expires_at = b.expires_at";

static const char sweep_sql_purge_citus[] =
    "WITH " SWEEP_LOCKED_CTE ","
    " d AS (SELECT actor, operation, idem_key FROM idempotency_records"
    "  WHERE state = 'expired' AND expires_at <= now() ORDER BY expires_at LIMIT $1)"
    " DELETE FROM idempotency_records r USING d, l"
    " WHERE l.held AND r.actor = d.actor AND r.operation = d.operation"
    " AND r.idem_key = d.idem_key AND r.state = 'expired' AND r.expires_at <= now()";

static const char sweep_sql_mark_citus[] =
    "WITH " SWEEP_LOCKED_CTE ","
    " s AS (SELECT actor, operation, idem_key FROM idempotency_records"
    "  WHERE state = 'in_progress' AND lease_expires_at <= now()"
    "  ORDER BY lease_expires_at LIMIT $1)"
    " UPDATE idempotency_records r SET state = 'unknown' FROM s, l"
    " WHERE l.held AND r.actor = s.actor AND r.operation = s.operation"
    " AND r.idem_key = s.idem_key AND r.state = 'in_progress' AND r.lease_expires_at <= now()"
    " RETURNING " SCOPE_SQL_TOKEN("r");

/* The sweep's statements, in the order they run. */
enum sweep_step {
	SWEEP_LOCK,
	SWEEP_DELETE,
	SWEEP_BURY,  /* expired_keys refuse: completed records become tombstones */
	SWEEP_PURGE, /* tombstones past their window are deleted */
	SWEEP_MARK,
	SWEEP_STEPS,
};

/* What the sweeper did since it started. */
struct sweeper_stats {
	int64_t runs;           /* sweeps that held the lock */
	int64_t skipped;        /* another instance held it */
	int64_t errors;         /* the store failed the sweep */
	int64_t deleted;        /* expired completed records (and tombstones) deleted */
	int64_t tombstoned;     /* expired completed records made tombstones */
	int64_t marked_unknown; /* in_progress records whose lease ran out */
	/* Records an operator must look at, as of the last sweep. */
	int64_t expired;        /* in_progress past their lease */
	int64_t unknown;
};

struct sweeper {
	struct store *store;
	struct event *timer;
	int64_t interval_ms;
	int running; /* a sweep is in flight */
	int citus;   /* the database has Citus: the writes take its forms */
	enum sweep_step step;
	int64_t deleted; /* by this sweep's delete */
	int64_t buried;	 /* by its bury */
	int64_t purged;	 /* by its purge */
	const char *params[1];
	struct sweeper_stats stats;
};

static void sweeper_arm(struct sweeper *sw, int64_t ms)
{
	struct timeval tv = clock_tv(ms);

	if (ms > 0)
		evtimer_add(sw->timer, &tv);
}

static void sweeper_send(struct sweeper *sw, enum sweep_step step);

/* The sweep is over: the next tick after ms. */
static void sweeper_end(struct sweeper *sw, int64_t ms)
{
	sw->running = 0;
	sweeper_arm(sw, ms);
}

/* The mark's result: tokens to notify, the sweep's figures, the next tick. */
static void sweeper_marked(struct sweeper *sw, const PGresult *result)
{
	const char *tokens[SWEEP_BATCH];
	int64_t marked = PQntuples(result);

	for (int i = 0; i < marked && i < SWEEP_BATCH; i++)
		tokens[i] = PQgetvalue(result, i, 0);
	store_notify(sw->store, tokens, marked < SWEEP_BATCH ? (int)marked : SWEEP_BATCH);
	/* What this sweep marked moved from one count to the other. */
	sw->stats.expired = sw->stats.expired > marked ? sw->stats.expired - marked : 0;
	sw->stats.unknown += marked;
	sw->stats.runs += 1;
	sw->stats.deleted += sw->deleted + sw->purged;
	sw->stats.tombstoned += sw->buried;
	sw->stats.marked_unknown += marked;
	if (marked)
		log_warn(NULL, "sweeper: %lld in_progress records outlived their lease; now unknown",
			 (long long)marked);
	sweeper_end(sw, sw->deleted >= SWEEP_BATCH || sw->buried >= SWEEP_BATCH ||
			    sw->purged >= SWEEP_BATCH || marked >= SWEEP_BATCH
			? SWEEP_AGAIN_MS
									     : sw->interval_ms);
}

static void sweeper_done(void *arg, enum store_result res, const PGresult *result)
{
	struct sweeper *sw = arg;

	if (res != STORE_OK || (sw->step == SWEEP_LOCK && (PQntuples(result) != 1 ||
							    PQnfields(result) != 4))) {
		sw->stats.errors += 1;
		sweeper_end(sw, sw->interval_ms);
		return;
	}
	switch (sw->step) {
	case SWEEP_LOCK:
		sw->stats.expired = strtoll(PQgetvalue(result, 0, 1), NULL, 10);
		sw->stats.unknown = strtoll(PQgetvalue(result, 0, 2), NULL, 10);
		sw->citus = strcmp(PQgetvalue(result, 0, 3), "t") == 0;
		if (strcmp(PQgetvalue(result, 0, 0), "t") != 0) {
			/* Another instance holds the lock: it is sweeping. */
			sw->stats.skipped += 1;
			sweeper_end(sw, sw->interval_ms);
			return;
		}
		sweeper_send(sw, SWEEP_DELETE);
		break;
	case SWEEP_DELETE:
		sw->deleted = strtoll(PQcmdTuples((PGresult *)result), NULL, 10);
		sweeper_send(sw, SWEEP_BURY);
		break;
	case SWEEP_BURY:
		sw->buried = strtoll(PQcmdTuples((PGresult *)result), NULL, 10);
		sweeper_send(sw, SWEEP_PURGE);
		break;
	case SWEEP_PURGE:
		sw->purged = strtoll(PQcmdTuples((PGresult *)result), NULL, 10);
		sweeper_send(sw, SWEEP_MARK);
		break;
	case SWEEP_MARK:
		sweeper_marked(sw, result);
		break;
	case SWEEP_STEPS:
		break;
	}
}

static void sweeper_send(struct sweeper *sw, enum sweep_step step)
{
	static const char *const sqls[2][SWEEP_STEPS] = {
	    {[SWEEP_LOCK] = sweep_sql_lock,
	     [SWEEP_DELETE] = sweep_sql_delete,
	     [SWEEP_BURY] = sweep_sql_bury,
	     [SWEEP_PURGE] = sweep_sql_purge,
	     [SWEEP_MARK] = sweep_sql_mark},
	    {[SWEEP_LOCK] = sweep_sql_lock,
	     [SWEEP_DELETE] = sweep_sql_delete_citus,
	     [SWEEP_BURY] = sweep_sql_bury_citus,
	     [SWEEP_PURGE] = sweep_sql_purge_citus,
	     [SWEEP_MARK] = sweep_sql_mark_citus},
	};
	struct store_stmt stmt = {sqls[sw->citus][step], step == SWEEP_LOCK ? 0 : 1, NULL, sw->params,
				  NULL, NULL};

	sw->step = step;
	store_query(sw->store, &stmt, sweeper_done, sw);
}

static void sweeper_tick(evutil_socket_t fd, short what, void *arg)
{
	struct sweeper *sw = arg;

	if (sw->running || !sw->interval_ms)
		return;
	sw->running = 1;
	sw->deleted = sw->buried = sw->purged = 0;
	sweeper_send(sw, SWEEP_LOCK);
}

struct sweeper *sweeper_new(struct event_base *base, struct store *st, int64_t interval_ms)
{
	struct sweeper *sw = calloc(1, sizeof(*sw));

	if (!sw)
		return NULL;
	sw->store = st;
	sw->params[0] = SWEEP_TEXT(SWEEP_BATCH);
	sw->timer = evtimer_new(base, sweeper_tick, sw);
	if (!sw->timer) {
		free(sw);
		return NULL;
	}
	sweeper_set_interval(sw, interval_ms);
	return sw;
}

void sweeper_set_interval(struct sweeper *sw, int64_t interval_ms)
{
	if (sw->interval_ms == interval_ms)
		return;
	sw->interval_ms = interval_ms;
	evtimer_del(sw->timer);
	if (!sw->running)
		sweeper_arm(sw, interval_ms);
}

void sweeper_render(const struct sweeper *sw, struct evbuffer *out)
{
	const struct sweeper_stats *st = &sw->stats;

	stats_metric(out, "idemproxy_sweeper_runs_total", "counter", "Sweeps that held the lock.",
		     st->runs);
	stats_metric(out, "idemproxy_sweeper_skipped_total", "counter",
		     "Sweeps skipped: another instance held the lock.", st->skipped);
	stats_metric(out, "idemproxy_sweeper_errors_total", "counter", "Sweeps the store failed.",
		     st->errors);
	stats_metric(out, "idemproxy_sweeper_deleted_total", "counter",
		     "Expired completed records, and tombstones past their window, deleted.",
		     st->deleted);
	stats_metric(out, "idemproxy_sweeper_tombstoned_total", "counter",
		     "Expired completed records made tombstones (expired_keys refuse).",
		     st->tombstoned);
	stats_metric(out, "idemproxy_sweeper_marked_unknown_total", "counter",
		     "In-progress records whose lease ran out, marked unknown.",
		     st->marked_unknown);
	stats_head(out, "idemproxy_records_needing_operator", "gauge",
		   "Records an operator must decide on, as of the last sweep: in_progress past "
		   "their lease, or unknown.");
	evbuffer_add_printf(out, "idemproxy_records_needing_operator{state=\"in_progress_expired\"} %lld\n",
			    (long long)st->expired);
	evbuffer_add_printf(out, "idemproxy_records_needing_operator{state=\"unknown\"} %lld\n",
			    (long long)st->unknown);
}

/* A sweep in flight calls back: free the store (which drops it) first. */
void sweeper_free(struct sweeper *sw)
{
	if (!sw)
		return;
	event_free(sw->timer);
	free(sw);
}
