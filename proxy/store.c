/*
 * The record store: asynchronous libpq against PostgreSQL.
 *
 * A struct store owns one connection and a FIFO of operations. The head of
 * the FIFO is the statement in flight; the rest wait for it. Finished
 * operations move to a completion list that a per-store event drains, so
 * every callback runs from the event loop and never inside the call that
 * queued it. Statements are unnamed PQsendQueryParams (no prepared
 * statements, no session state) so the store works through pgbouncer in
 * transaction mode; results come back in binary format.
 */
#include <endian.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <event2/event.h>
#include <libpq-fe.h>

#include "proxy/log.h"
#include "proxy/store.h"

#define STORE_BACKOFF_MIN_MS 50
#define STORE_BACKOFF_MAX_MS 2000
#define STORE_CLAIM_ATTEMPTS 5
#define STORE_NUM_MAX	     32
#define STORE_PARAM_MAX	     INT_MAX /* libpq parameter lengths are int */
#define STORE_CLAIM_PARAMS   6
#define STORE_FINISH_PARAMS  9
#define STORE_FENCE_PARAMS   4

/* Type OIDs from pg_type, for the parameters we send. */
#define STORE_OID_BOOL	16
#define STORE_OID_BYTEA 17
#define STORE_OID_INT8	20
#define STORE_OID_INT4	23
#define STORE_OID_TEXT	25

#define STORE_FORMAT_TEXT   0
#define STORE_FORMAT_BINARY 1

/*
 * The claim, one statement: insert a new record, or take over a completed
 * one whose retention has passed, or report the record that holds the
 * slot. ON CONFLICT DO NOTHING (not DO UPDATE) keeps the common "record
 * exists" answer read-only: no row lock, no transaction id, no WAL flush
 * for a replay. Zero rows means a concurrent writer changed the slot after
 * this statement's snapshot; the caller runs the claim again.
 */
static const char store_sql_claim[] =
    "WITH ins AS ("
    " INSERT INTO idempotency_records (actor, operation, idem_key, fingerprint, state,"
    "  lease_owner, lease_expires_at, generation)"
    " VALUES ($1, $2, $3, $4, 'in_progress', $5, now() + $6 * interval '1 millisecond', 1)"
    " ON CONFLICT (actor, operation, idem_key) DO NOTHING"
    " RETURNING generation),"
    " takeover AS ("
    " UPDATE idempotency_records r SET"
    "  fingerprint = $4, state = 'in_progress',"
    "  lease_owner = $5, lease_expires_at = now() + $6 * interval '1 millisecond',"
    "  generation = r.generation + 1, response_status = NULL, response_headers = NULL,"
    "  response_body = NULL, body_omitted = false, created_at = now(),"
    "  completed_at = NULL, expires_at = NULL"
    " WHERE r.actor = $1 AND r.operation = $2 AND r.idem_key = $3"
    "  AND r.state = 'completed' AND r.expires_at <= now()"
    "  AND NOT EXISTS (SELECT 1 FROM ins)"
    " RETURNING r.generation)"
    " SELECT true, generation, 'in_progress'::text, NULL::bytea, NULL::integer, NULL::text,"
    "  NULL::bytea, false, false, 0::bigint FROM ins"
    " UNION ALL"
    " SELECT true, generation, 'in_progress'::text, NULL::bytea, NULL::integer, NULL::text,"
    "  NULL::bytea, false, false, 0::bigint FROM takeover"
    " UNION ALL"
    " SELECT false, r.generation, r.state, r.fingerprint, r.response_status,"
    "  r.response_headers, r.response_body, r.body_omitted,"
    "  coalesce(r.state = 'in_progress' AND r.lease_expires_at <= now(), false),"
    "  CASE WHEN r.state = 'in_progress' THEN greatest(0, ceil(extract(epoch FROM"
    "   r.lease_expires_at - now()) * 1000))::bigint ELSE 0::bigint END"
    " FROM idempotency_records r"
    " WHERE r.actor = $1 AND r.operation = $2 AND r.idem_key = $3"
    "  AND NOT (r.state = 'completed' AND r.expires_at <= now())"
    "  AND NOT EXISTS (SELECT 1 FROM ins)";

static const char store_sql_finish[] =
    "UPDATE idempotency_records SET state = 'completed', response_status = $5,"
    " response_headers = $6, response_body = $7, body_omitted = $8, completed_at = now(),"
    " expires_at = now() + $9 * interval '1 millisecond', lease_owner = NULL,"
    " lease_expires_at = NULL"
    " WHERE actor = $1 AND operation = $2 AND idem_key = $3 AND generation = $4"
    " AND state = 'in_progress'";

static const char store_sql_unknown[] =
    "UPDATE idempotency_records SET state = 'unknown'"
    " WHERE actor = $1 AND operation = $2 AND idem_key = $3 AND generation = $4"
    " AND state = 'in_progress'";

static const char store_sql_release[] =
    "DELETE FROM idempotency_records"
    " WHERE actor = $1 AND operation = $2 AND idem_key = $3 AND generation = $4"
    " AND state = 'in_progress'";

/* The advisory lock key is "idemprxy" in ASCII. */
/* Columns of the claim's result row, in the order the statement selects them. */
enum store_claim_col {
	STORE_COL_OWNER,
	STORE_COL_GENERATION,
	STORE_COL_STATE,
	STORE_COL_FINGERPRINT,
	STORE_COL_STATUS,
	STORE_COL_HEADERS,
	STORE_COL_BODY,
	STORE_COL_OMITTED,
	STORE_COL_LEASE_EXPIRED,
	STORE_COL_LEASE_REMAINING,
	STORE_CLAIM_COLUMNS,
};

enum store_conn_state {
	STORE_DISCONNECTED, /* timer: backoff before the next connect */
	STORE_CONNECTING,   /* timer: connect deadline */
	STORE_CONNECTED,    /* timer: deadline of the statement in flight */
};

enum store_op_kind {
	STORE_OP_CLAIM,
	STORE_OP_FINISH,
	STORE_OP_UNKNOWN,
	STORE_OP_RELEASE,
};

/* One queued operation; the pointers belong to the caller until its callback. */
struct store_op {
	struct store_op *next;
	enum store_op_kind kind;
	struct scope sc;
	int64_t deadline_ms;
	int attempts;

	const unsigned char *fp;
	int64_t lease_ms;

	int64_t generation;
	int status;
	const char *headers;
	size_t headers_len;
	const unsigned char *body;
	size_t body_len;
	int omitted;
	int64_t retention_ms;

	store_claim_cb claim_cb;
	store_done_cb done_cb;
	void *arg;

	/* The outcome, filled in when the operation completes. */
	enum store_result res;
	PGresult *pgres; /* claim: backs rec until the callback returns */
	struct record rec;
};

struct store_queue {
	struct store_op *head, *tail;
};

struct store {
	struct event_base *base;
	char *conninfo;
	char *owner_id;
	int64_t timeout_ms;
	int64_t backoff_ms;

	enum store_conn_state state;
	PGconn *conn;
	struct event *io_ev;
	evutil_socket_t io_fd;
	short io_what;
	struct event *timer_ev;
	struct event *done_ev;

	struct store_queue queue; /* head is in flight when in_flight */
	int in_flight;
	int flushing;		 /* PQflush left data to write */
	struct store_queue done; /* completed, callbacks not yet run */
	int npending;

	int dispatching;    /* inside a callback from store_done_event */
	int free_requested; /* store_free called from a callback */
};

static void store_io_event(evutil_socket_t fd, short what, void *arg);
static void store_reset(struct store *st, const char *msg, const char *error);
static void store_send(struct store *st);

/* Milliseconds on the monotonic clock. */
static int64_t store_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static struct timeval store_tv(int64_t ms)
{
	struct timeval tv;

	if (ms < 0)
		ms = 0;
	tv.tv_sec = ms / 1000;
	tv.tv_usec = (ms % 1000) * 1000;
	return tv;
}


/* A store event for the project log; error is libpq's text, or NULL. */
static void store_log(enum log_level level, const char *msg, const char *error)
{
	if (level < log_min_level)
		return;
	if (error)
		log_write(level, NULL, "%s: %s", msg, error);
	else
		log_write(level, NULL, "%s", msg);
}

/* libpq notices (server NOTICE/WARNING) go to the log, not raw to stderr. */
static void store_notice(void *arg, const char *message)
{
	store_log(LOG_INFO, "store notice", message);
}

static void store_queue_push(struct store_queue *q, struct store_op *op)
{
	op->next = NULL;
	if (q->tail)
		q->tail->next = op;
	else
		q->head = op;
	q->tail = op;
}

static struct store_op *store_queue_pop(struct store_queue *q)
{
	struct store_op *op = q->head;

	if (op) {
		q->head = op->next;
		if (!q->head)
			q->tail = NULL;
		op->next = NULL;
	}
	return op;
}

static void store_op_free(struct store_op *op)
{
	PQclear(op->pgres);
	free(op);
}

/* Hand op to the completion event with result res; takes ownership of op. */
static void store_complete(struct store *st, struct store_op *op, enum store_result res)
{
	op->res = res;
	store_queue_push(&st->done, op);
	event_active(st->done_ev, EV_TIMEOUT, 0);
}

/* Free everything; runs no callback. */
static void store_destroy(struct store *st)
{
	struct store_op *op;

	while ((op = store_queue_pop(&st->queue)))
		store_op_free(op);
	while ((op = store_queue_pop(&st->done)))
		store_op_free(op);
	if (st->io_ev)
		event_free(st->io_ev);
	if (st->timer_ev)
		event_free(st->timer_ev);
	if (st->done_ev)
		event_free(st->done_ev);
	PQfinish(st->conn);
	free(st->conninfo);
	free(st->owner_id);
	free(st);
}

/* Run the callbacks of completed operations, oldest first. */
static void store_done_event(evutil_socket_t fd, short what, void *arg)
{
	struct store *st = arg;
	struct store_op *op;

	st->dispatching = 1;
	while (!st->free_requested && (op = store_queue_pop(&st->done))) {
		st->npending--;
		if (op->kind != STORE_OP_CLAIM)
			op->done_cb(op->arg, op->res);
		else if (op->res == STORE_EXISTS)
			op->claim_cb(op->arg, op->res, op->rec.generation, &op->rec);
		else
			op->claim_cb(op->arg, op->res, op->generation, NULL);
		store_op_free(op);
	}
	st->dispatching = 0;
	if (st->free_requested)
		store_destroy(st);
}

/*
 * Watch the connection's socket for what (EV_READ and/or EV_WRITE). The
 * event is re-created whenever the socket or the interest changes; force
 * re-creates it even when neither did, because libpq may have closed the
 * socket and opened another one under the same number.
 */
static int store_watch(struct store *st, short what, int force)
{
	evutil_socket_t fd = PQsocket(st->conn);

	if (fd < 0)
		return -1;
	if (!force && st->io_ev && st->io_fd == fd && st->io_what == what)
		return 0;
	if (st->io_ev)
		event_free(st->io_ev);
	st->io_fd = fd;
	st->io_what = what;
	st->io_ev = event_new(st->base, fd, what | EV_PERSIST, store_io_event, st);
	if (!st->io_ev || event_add(st->io_ev, NULL) < 0)
		return -1;
	return 0;
}

/* Close the connection, if any, and forget its socket event. */
static void store_close(struct store *st)
{
	if (st->io_ev)
		event_free(st->io_ev);
	st->io_ev = NULL;
	st->io_fd = -1;
	st->io_what = 0;
	PQfinish(st->conn);
	st->conn = NULL;
	st->in_flight = 0;
	st->flushing = 0;
}

/* Arm the state's timer: the deadline of the statement in flight. */
static void store_arm_deadline(struct store *st)
{
	struct timeval tv;

	if (!st->queue.head) {
		event_del(st->timer_ev);
		return;
	}
	tv = store_tv(st->queue.head->deadline_ms - store_now_ms());
	event_add(st->timer_ev, &tv);
}

/* Start a non-blocking connect; on failure schedule the next attempt. */
static void store_connect(struct store *st)
{
	struct timeval tv;

	st->conn = PQconnectStart(st->conninfo);
	if (!st->conn) {
		store_reset(st, "store connect failed", "out of memory");
		return;
	}
	if (PQstatus(st->conn) == CONNECTION_BAD) {
		store_reset(st, "store connect failed", PQerrorMessage(st->conn));
		return;
	}
	PQsetNoticeProcessor(st->conn, store_notice, NULL);
	st->state = STORE_CONNECTING;
	/* libpq's rule: before the first PQconnectPoll, wait for writability. */
	if (store_watch(st, EV_WRITE, 1) < 0) {
		store_reset(st, "store connect failed", "cannot watch the socket");
		return;
	}
	tv = store_tv(st->timeout_ms);
	event_add(st->timer_ev, &tv);
}

/* Advance the connect state machine after socket activity. */
static void store_connect_poll(struct store *st)
{
	short what;

	switch (PQconnectPoll(st->conn)) {
	case PGRES_POLLING_READING:
		what = EV_READ;
		break;
	case PGRES_POLLING_WRITING:
		what = EV_WRITE;
		break;
	case PGRES_POLLING_OK:
		if (PQsetnonblocking(st->conn, 1) != 0 || store_watch(st, EV_READ, 1) < 0) {
			store_reset(st, "store connect failed", PQerrorMessage(st->conn));
			return;
		}
		st->state = STORE_CONNECTED;
		st->backoff_ms = STORE_BACKOFF_MIN_MS;
		event_del(st->timer_ev);
		store_log(LOG_INFO, "store connected", NULL);
		return;
	default:
		store_reset(st, "store connect failed", PQerrorMessage(st->conn));
		return;
	}
	/* With multi-host conninfo the socket may have changed under us. */
	if (store_watch(st, what, 1) < 0)
		store_reset(st, "store connect failed", PQerrorMessage(st->conn));
}

/*
 * Drop the connection: every queued operation fails with STORE_UNAVAILABLE
 * (callbacks run later from the completion event), the connection is
 * closed and the next connect is scheduled after the current backoff.
 */
static void store_reset(struct store *st, const char *msg, const char *error)
{
	struct store_op *op;
	struct timeval tv;

	store_log(LOG_WARN, msg, error);
	while ((op = store_queue_pop(&st->queue))) {
		PQclear(op->pgres);
		op->pgres = NULL;
		store_complete(st, op, STORE_UNAVAILABLE);
	}
	store_close(st);
	st->state = STORE_DISCONNECTED;
	tv = store_tv(st->backoff_ms);
	event_add(st->timer_ev, &tv);
	st->backoff_ms *= 2;
	if (st->backoff_ms > STORE_BACKOFF_MAX_MS)
		st->backoff_ms = STORE_BACKOFF_MAX_MS;
}

/* The state's timer: reconnect, connect deadline or statement deadline. */
static void store_timer_event(evutil_socket_t fd, short what, void *arg)
{
	struct store *st = arg;

	switch (st->state) {
	case STORE_DISCONNECTED:
		store_connect(st);
		break;
	case STORE_CONNECTING:
		store_reset(st, "store connect timed out", NULL);
		break;
	case STORE_CONNECTED:
		if (st->queue.head && st->queue.head->deadline_ms <= store_now_ms())
			store_reset(st, "store round trip timed out", NULL);
		else
			store_arm_deadline(st);
		break;
	}
}

static int64_t store_int8(const PGresult *res, int col)
{
	uint64_t v;

	memcpy(&v, PQgetvalue(res, 0, col), sizeof(v));
	return (int64_t)be64toh(v);
}

static int32_t store_int4(const PGresult *res, int col)
{
	uint32_t v;

	memcpy(&v, PQgetvalue(res, 0, col), sizeof(v));
	return (int32_t)be32toh(v);
}

static int store_bool(const PGresult *res, int col)
{
	return PQgetvalue(res, 0, col)[0] != 0;
}

/* 1 when column col of row 0 is non-NULL and exactly len bytes long. */
static int store_has(const PGresult *res, int col, int len)
{
	return !PQgetisnull(res, 0, col) && PQgetlength(res, 0, col) == len;
}

/*
 * Read the claim's row (binary format) into op: STORE_OK with
 * op->generation, or STORE_EXISTS with op->rec pointing into res. Returns
 * -1 when the row is not what the statement produces.
 */
static int store_parse_claim(struct store_op *op, const PGresult *res)
{
	struct record *rec = &op->rec;
	const char *state;

	if (PQnfields(res) != STORE_CLAIM_COLUMNS || !store_has(res, STORE_COL_OWNER, 1) ||
	    !store_has(res, STORE_COL_GENERATION, sizeof(int64_t)))
		return -1;
	if (store_bool(res, STORE_COL_OWNER)) {
		op->generation = store_int8(res, STORE_COL_GENERATION);
		op->res = STORE_OK;
		return 0;
	}
	if (PQgetisnull(res, 0, STORE_COL_STATE) ||
	    !store_has(res, STORE_COL_FINGERPRINT, FINGERPRINT_LEN) ||
	    !store_has(res, STORE_COL_OMITTED, 1) || !store_has(res, STORE_COL_LEASE_EXPIRED, 1) ||
	    !store_has(res, STORE_COL_LEASE_REMAINING, sizeof(int64_t)))
		return -1;
	memset(rec, 0, sizeof(*rec));
	state = PQgetvalue(res, 0, STORE_COL_STATE);
	if (strcmp(state, "in_progress") == 0)
		rec->state = RECORD_IN_PROGRESS;
	else if (strcmp(state, "completed") == 0)
		rec->state = RECORD_COMPLETED;
	else if (strcmp(state, "unknown") == 0)
		rec->state = RECORD_UNKNOWN;
	else
		return -1;
	memcpy(rec->fingerprint, PQgetvalue(res, 0, STORE_COL_FINGERPRINT), FINGERPRINT_LEN);
	rec->generation = store_int8(res, STORE_COL_GENERATION);
	rec->lease_expired = store_bool(res, STORE_COL_LEASE_EXPIRED);
	rec->lease_remaining_ms = store_int8(res, STORE_COL_LEASE_REMAINING);
	rec->body_omitted = store_bool(res, STORE_COL_OMITTED);
	rec->headers = "";
	if (rec->state == RECORD_COMPLETED) {
		if (!store_has(res, STORE_COL_STATUS, sizeof(int32_t)))
			return -1;
		rec->status = store_int4(res, STORE_COL_STATUS);
		if (!PQgetisnull(res, 0, STORE_COL_HEADERS)) {
			rec->headers = PQgetvalue(res, 0, STORE_COL_HEADERS);
			rec->headers_len = (size_t)PQgetlength(res, 0, STORE_COL_HEADERS);
		}
		if (!PQgetisnull(res, 0, STORE_COL_BODY)) {
			rec->body = (const unsigned char *)PQgetvalue(res, 0, STORE_COL_BODY);
			rec->body_len = (size_t)PQgetlength(res, 0, STORE_COL_BODY);
		}
	}
	op->res = STORE_EXISTS;
	return 0;
}

/*
 * 1 when the error means this connection is no use: the server is read-only
 * (a standby after failover), going away, or the link failed.
 */
static int store_error_is_fatal(const char *sqlstate)
{
	if (!sqlstate)
		return 1;
	return strcmp(sqlstate, "25006") == 0 || strncmp(sqlstate, "08", 2) == 0 ||
	       strcmp(sqlstate, "57P01") == 0 || strcmp(sqlstate, "57P02") == 0 ||
	       strcmp(sqlstate, "57P03") == 0;
}

/*
 * The statement in flight (the queue's head) has its final result: decide
 * the outcome, then complete the operation, re-send a claim that found no
 * row, or reset the connection.
 */
static void store_handle_result(struct store *st)
{
	struct store_op *op = st->queue.head;
	PGresult *res = op->pgres;
	ExecStatusType status = res ? PQresultStatus(res) : PGRES_FATAL_ERROR;
	const char *sqlstate, *rows;

	st->in_flight = 0;
	if (status == PGRES_FATAL_ERROR) {
		sqlstate = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;
		if (store_error_is_fatal(sqlstate)) {
			store_reset(st, "store connection unusable",
				    res ? PQresultErrorMessage(res) : PQerrorMessage(st->conn));
			return;
		}
		store_log(LOG_WARN, "store statement failed", PQresultErrorMessage(res));
		op->res = STORE_UNAVAILABLE;
	} else if (op->kind == STORE_OP_CLAIM) {
		if (status != PGRES_TUPLES_OK) {
			store_log(LOG_WARN, "store claim failed", PQresStatus(status));
			op->res = STORE_UNAVAILABLE;
		} else if (PQntuples(res) == 0) {
			/* Raced with a concurrent commit or delete; look again. */
			PQclear(op->pgres);
			op->pgres = NULL;
			if (++op->attempts < STORE_CLAIM_ATTEMPTS) {
				store_send(st);
				return;
			}
			store_log(LOG_WARN, "store claim found no row", NULL);
			op->res = STORE_UNAVAILABLE;
		} else if (store_parse_claim(op, res) < 0) {
			store_log(LOG_WARN, "store claim returned an unexpected row", NULL);
			op->res = STORE_UNAVAILABLE;
		}
	} else if (status != PGRES_COMMAND_OK) {
		store_log(LOG_WARN, "store write failed", PQresStatus(status));
		op->res = STORE_UNAVAILABLE;
	} else {
		rows = PQcmdTuples(res);
		op->res = strcmp(rows, "0") == 0 ? STORE_FENCED : STORE_OK;
	}
	if (op->kind != STORE_OP_CLAIM || op->res != STORE_EXISTS) {
		PQclear(op->pgres);
		op->pgres = NULL;
	}
	store_complete(st, store_queue_pop(&st->queue), op->res);
	store_send(st);
}

/* Collect results of the statement in flight as far as they have arrived. */
static void store_read_results(struct store *st)
{
	PGresult *res;

	while (st->in_flight && !PQisBusy(st->conn)) {
		res = PQgetResult(st->conn);
		if (!res) {
			store_handle_result(st);
			continue;
		}
		if (!st->queue.head->pgres)
			st->queue.head->pgres = res;
		else
			PQclear(res);
	}
}

/* Socket activity: connect progress, or input / output of a statement. */
static void store_io_event(evutil_socket_t fd, short what, void *arg)
{
	struct store *st = arg;
	int r;

	if (st->state == STORE_CONNECTING) {
		store_connect_poll(st);
		return;
	}
	if ((what & EV_READ) && !PQconsumeInput(st->conn)) {
		store_reset(st, "store connection lost", PQerrorMessage(st->conn));
		return;
	}
	if (PQstatus(st->conn) == CONNECTION_BAD) {
		store_reset(st, "store connection lost", PQerrorMessage(st->conn));
		return;
	}
	if (st->flushing) {
		r = PQflush(st->conn);
		if (r < 0) {
			store_reset(st, "store connection lost", PQerrorMessage(st->conn));
			return;
		}
		st->flushing = r;
		if (store_watch(st, r ? EV_READ | EV_WRITE : EV_READ, 0) < 0) {
			store_reset(st, "store connection lost", "cannot watch the socket");
			return;
		}
	}
	store_read_results(st);
}

/* Send the queue's head unless a statement is already in flight. */
static void store_send(struct store *st)
{
	static const Oid claim_types[STORE_CLAIM_PARAMS] = {
	    STORE_OID_TEXT,  STORE_OID_TEXT, STORE_OID_TEXT,
	    STORE_OID_BYTEA, STORE_OID_TEXT, STORE_OID_INT8,
	};
	static const int claim_formats[STORE_CLAIM_PARAMS] = {
	    STORE_FORMAT_TEXT,	 STORE_FORMAT_TEXT, STORE_FORMAT_TEXT,
	    STORE_FORMAT_BINARY, STORE_FORMAT_TEXT, STORE_FORMAT_TEXT,
	};
	static const Oid finish_types[STORE_FINISH_PARAMS] = {
	    STORE_OID_TEXT, STORE_OID_TEXT,  STORE_OID_TEXT, STORE_OID_INT8, STORE_OID_INT4,
	    STORE_OID_TEXT, STORE_OID_BYTEA, STORE_OID_BOOL, STORE_OID_INT8,
	};
	/* Headers and body go as binary: sent by length, never copied here. */
	static const int finish_formats[STORE_FINISH_PARAMS] = {
	    STORE_FORMAT_TEXT,	 STORE_FORMAT_TEXT, STORE_FORMAT_TEXT,
	    STORE_FORMAT_TEXT,	 STORE_FORMAT_TEXT, STORE_FORMAT_BINARY,
	    STORE_FORMAT_BINARY, STORE_FORMAT_TEXT, STORE_FORMAT_TEXT,
	};
	struct store_op *op = st->queue.head;
	const char *values[STORE_FINISH_PARAMS];
	int lengths[STORE_FINISH_PARAMS] = {0};
	char gen[STORE_NUM_MAX], num[STORE_NUM_MAX], num2[STORE_NUM_MAX];
	const Oid *types = finish_types;
	const int *formats = finish_formats;
	const char *sql;
	int nparams, ok, r;

	if (!op || st->in_flight || st->state != STORE_CONNECTED)
		return;
	/* values[i] is the statement's $(i + 1). */
	values[0] = op->sc.actor;
	values[1] = op->sc.operation;
	values[2] = op->sc.key;
	snprintf(gen, sizeof(gen), "%" PRId64, op->generation);
	values[3] = gen;
	switch (op->kind) {
	case STORE_OP_CLAIM:
		sql = store_sql_claim;
		nparams = STORE_CLAIM_PARAMS;
		types = claim_types;
		formats = claim_formats;
		values[3] = (const char *)op->fp;
		lengths[3] = FINGERPRINT_LEN;
		values[4] = st->owner_id;
		snprintf(num, sizeof(num), "%" PRId64, op->lease_ms);
		values[5] = num;
		break;
	case STORE_OP_FINISH:
		sql = store_sql_finish;
		nparams = STORE_FINISH_PARAMS;
		snprintf(num, sizeof(num), "%d", op->status);
		values[4] = num;
		values[5] = op->headers ? op->headers : "";
		lengths[5] = (int)op->headers_len;
		values[6] = op->omitted ? NULL : op->body ? (const char *)op->body : "";
		lengths[6] = op->omitted ? 0 : (int)op->body_len;
		values[7] = op->omitted ? "true" : "false";
		snprintf(num2, sizeof(num2), "%" PRId64, op->retention_ms);
		values[8] = num2;
		break;
	case STORE_OP_UNKNOWN:
		sql = store_sql_unknown;
		nparams = STORE_FENCE_PARAMS;
		break;
	default:
		sql = store_sql_release;
		nparams = STORE_FENCE_PARAMS;
		break;
	}
	ok = PQsendQueryParams(st->conn, sql, nparams, types, values, lengths, formats,
			       STORE_FORMAT_BINARY);
	r = ok ? PQflush(st->conn) : -1;
	if (r < 0) {
		store_reset(st, "store send failed", PQerrorMessage(st->conn));
		return;
	}
	st->in_flight = 1;
	st->flushing = r;
	if (store_watch(st, r ? EV_READ | EV_WRITE : EV_READ, 0) < 0) {
		store_reset(st, "store send failed", "cannot watch the socket");
		return;
	}
	store_arm_deadline(st);
}

/* Queue op (or fail it at once, asynchronously, when not connected). */
static void store_submit(struct store *st, struct store_op *op)
{
	op->deadline_ms = store_now_ms() + st->timeout_ms;
	st->npending++;
	if (st->state != STORE_CONNECTED) {
		store_complete(st, op, STORE_UNAVAILABLE);
		return;
	}
	store_queue_push(&st->queue, op);
	store_send(st);
}

/*
 * A zeroed operation of kind for scope sc. The callback contract (exactly
 * once) cannot be kept without memory for the operation, so running out
 * of memory here ends the process, as redis's zmalloc does.
 */
static struct store_op *store_op_new(enum store_op_kind kind, const struct scope *sc,
				     int64_t generation, void *arg)
{
	struct store_op *op = calloc(1, sizeof(*op));

	if (!op) {
		store_log(LOG_ERROR, "store out of memory", NULL);
		abort();
	}
	op->kind = kind;
	op->sc = *sc;
	op->generation = generation;
	op->arg = arg;
	return op;
}

struct store *store_new(struct event_base *base, const char *conninfo, int64_t timeout_ms,
			const char *owner_id)
{
	struct store *st = calloc(1, sizeof(*st));

	if (!st)
		return NULL;
	st->base = base;
	st->timeout_ms = timeout_ms;
	st->backoff_ms = STORE_BACKOFF_MIN_MS;
	st->io_fd = -1;
	st->conninfo = strdup(conninfo ? conninfo : "");
	st->owner_id = strdup(owner_id ? owner_id : "");
	st->timer_ev = evtimer_new(base, store_timer_event, st);
	st->done_ev = event_new(base, -1, 0, store_done_event, st);
	if (!st->conninfo || !st->owner_id || !st->timer_ev || !st->done_ev) {
		store_destroy(st);
		return NULL;
	}
	store_connect(st);
	return st;
}

/*
 * Safe from inside a store callback: the store is then freed once that
 * callback returns, and the remaining callbacks are dropped.
 */
void store_free(struct store *st)
{
	if (!st)
		return;
	if (st->dispatching) {
		st->free_requested = 1;
		return;
	}
	store_destroy(st);
}

int store_ready(const struct store *st)
{
	return st->state == STORE_CONNECTED;
}

int store_pending(const struct store *st)
{
	return st->npending;
}

void store_claim(struct store *st, const struct scope *sc, const unsigned char *fp,
		 int64_t lease_ms, store_claim_cb cb, void *arg)
{
	struct store_op *op = store_op_new(STORE_OP_CLAIM, sc, 0, arg);

	op->fp = fp;
	op->lease_ms = lease_ms;
	op->claim_cb = cb;
	store_submit(st, op);
}

void store_finish(struct store *st, const struct scope *sc, int64_t generation, int status,
		  const char *headers, size_t headers_len, const unsigned char *body,
		  size_t body_len, int omitted, int64_t retention_ms, store_done_cb cb, void *arg)
{
	struct store_op *op = store_op_new(STORE_OP_FINISH, sc, generation, arg);

	op->status = status;
	op->headers = headers;
	op->headers_len = headers_len;
	op->body = body;
	op->body_len = body_len;
	op->omitted = omitted;
	op->retention_ms = retention_ms;
	op->done_cb = cb;
	if (headers_len > STORE_PARAM_MAX || body_len > STORE_PARAM_MAX) {
		store_log(LOG_ERROR, "store finish: response too large to store", NULL);
		st->npending++;
		store_complete(st, op, STORE_UNAVAILABLE);
		return;
	}
	store_submit(st, op);
}

void store_mark_unknown(struct store *st, const struct scope *sc, int64_t generation,
			store_done_cb cb, void *arg)
{
	struct store_op *op = store_op_new(STORE_OP_UNKNOWN, sc, generation, arg);

	op->done_cb = cb;
	store_submit(st, op);
}

void store_release(struct store *st, const struct scope *sc, int64_t generation, store_done_cb cb,
		   void *arg)
{
	struct store_op *op = store_op_new(STORE_OP_RELEASE, sc, generation, arg);

	op->done_cb = cb;
	store_submit(st, op);
}

