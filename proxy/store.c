/*
 * The record store: asynchronous libpq against PostgreSQL, in three
 * layers. store_sql.c is what PostgreSQL is asked and how its answers
 * read; store_conn.c is the connection and its pipeline; this file is the
 * operations: their queue, the batch in flight, what an answer means for
 * each of them, retries, the removal of lost claims, and the callbacks.
 *
 * A struct store owns one connection and a FIFO of operations. When the
 * connection is free, the head of the FIFO and every other queued
 * operation of the same kind go out together as one multi-row statement
 * (a batch), so one commit serves them all; a lone operation goes out at
 * once, with no added delay, and whatever queues while a batch is in
 * flight forms the next one. Every input row carries its ordinal in the
 * batch and every result row names the ordinal it answers, so each
 * operation still gets its own outcome. A claim first tries a plain
 * insert, which PostgreSQL plans in a fraction of the time the full claim
 * takes; only the claims whose slot is taken go on to a second statement
 * that reads the record there, and only those whose slot may be taken
 * over to a third that takes it. Finished operations move to a completion
 * list that a per-store event drains, so every callback runs from the
 * event loop and never inside the call that queued it. Callers' own
 * queries (store_query) go alone, unnamed, and answer in text. Besides
 * prepared statements, the one piece of session state is LISTEN, asked
 * for by store_listen and sent again on every new connection.
 *
 * Until the first connection is up (a start, PostgreSQL still accepting
 * its first connections), operations queue and wait for it, each within
 * store_timeout of its submission (first_ev fails the late ones), then get
 * a store_timeout for their round trip. Once a connection has been up, an
 * operation submitted while there is none fails at once, and a lost
 * connection fails every queued one.
 */
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include <event2/event.h>
#include <libpq-fe.h>

#include "proxy/clock.h"
#include "proxy/evfree.h"
#include "proxy/log.h"
#include "proxy/store.h"
#include "proxy/store_conn.h"
#include "proxy/store_sql.h"

#define STORE_CLAIM_ATTEMPTS 5
/* A lost claim is removed no sooner than this after its statement's
 * statement_timeout (store_timeout) ran out: by then its statement has
 * written the claim's row or never will. Whether that row commits, the
 * removal waits to see (the probe in store_sql.c), at most
 * STORE_FORGET_WAIT_MS at a time (and at most half the store_timeout),
 * then tries again after a backoff from STORE_BACKOFF_MIN_MS to
 * STORE_BACKOFF_MAX_MS. A store keeps at most STORE_FORGET_MAX lost
 * claims to remove. */
#define STORE_FORGET_MARGIN_MS 100
#define STORE_FORGET_WAIT_MS   100
#define STORE_FORGET_MAX       4096
#define STORE_PARAM_MAX	     INT_MAX /* libpq parameter lengths are int */

/* How far down the queue a batch looks. */
#define STORE_SCAN_MAX	 (4 * STORE_BATCH_MAX)
#define STORE_SEEN_SLOTS (2 * STORE_SCAN_MAX) /* a power of two */

/* Serialization failures and deadlocks: the batch runs again after a
 * backoff doubling from STORE_RETRY_MIN_MS to STORE_RETRY_MAX_MS. */
#define STORE_RETRY_MIN_MS 2
#define STORE_RETRY_MAX_MS 200

/* A claim batch's result, shared by the operations whose records point into it. */
struct store_shared {
	PGresult *res;
	int refs;
};

/* One operation, from the call that queues it until its callback has run. */
struct store_op {
	struct store_op *next;	 /* in the queue, the completion list or the lost claims */
	enum store_op_kind kind; /* its statement now: a claim goes on to a lookup or takeover */

	/* What the caller asked, and whom to tell. */
	struct store_ask ask;	/* a row's values: every kind but a query */
	struct store_stmt stmt; /* query: the caller's statement */
	int notify;		/* notify STORE_CHANNEL in the batch's transaction (STORE_NOTIFY) */
	union {
		store_claim_cb claim; /* claim */
		store_done_cb done;   /* finish, unknown, release */
		store_query_cb query; /* query; NULL: nobody to tell */
	} cb;			      /* a forget has none: it is the store's own */
	void *arg;

	/* What the store does with it on its way. */
	struct {
		uint64_t hash;	       /* of ask.sc */
		int solo;	       /* goes in a batch of its own */
		int64_t deadline_ms;   /* its answer is too late from then on */
		int64_t sent_ms;       /* when its statement was last sent */
		int64_t not_before_ms; /* forget: when it may run */
		int restarts;	       /* claim: times it went back to the insert */
		int waits;	       /* forget: times a transaction in its slot held it up */
		int answered;	       /* a result row of the batch in flight named it */
		int take;	       /* lookup: that row said the slot may be taken over */
		int peek;	       /* claim: lookup only (STORE_PEEK) */
		char nums[STORE_OP_NUMS][STORE_NUM_MAX]; /* its numbers as text, while in flight */
	} run;

	/* Memory it owns, freed with it. */
	char *scope_copy;	  /* forget: the lost claim's scope, which ask.sc points into */
	char *tokens;		  /* store_notify: the text[] literal of its tokens */
	const char *tokens_param; /* store_notify: stmt's one parameter, tokens */

	/* What the answer said, filled in when it completes. */
	struct {
		enum store_result res;
		int64_t generation; /* claim: the one STORE_OK took */
		struct record rec;  /* claim: the one STORE_EXISTS found, in shared's result */
		struct store_shared *shared; /* claim, query: backs rec or the query's result
					      * until the callback returns */
	} answer;
};

struct store_queue {
	struct store_op *head, *tail;
};

struct store {
	/* The connection and its pipeline, prepared statements included. */
	struct store_conn conn;

	/* Who this store is, and what it sends before each batch. */
	char *owner_id;
	uint64_t nonce;	    /* random: no other store's tokens share it */
	uint64_t nclaims;   /* claims so far: each one's token */
	int64_t timeout_ms; /* store_timeout */
	char timeout_sql[STORE_SQL_TIMEOUT_MAX];
	char timeout_rows_sql[STORE_SQL_TIMEOUT_MAX]; /* before a batch of several rows */
	char forget_timeout_sql[STORE_SQL_TIMEOUT_MAX]; /* a lost-claim removal's */

	/* The queue, and the operations done whose callbacks have not run. */
	struct store_queue queue; /* waiting for the next batch */
	struct store_queue done;  /* completed: store_done_event calls them back */
	struct event *done_ev;
	int npending;	    /* callers' operations not called back yet */
	int dispatching;    /* inside a callback from store_done_event */
	int free_requested; /* store_free called from a callback */

	/* The batch in flight, by ordinal; nbatch 0 when the connection is free. */
	struct store_op *batch[STORE_BATCH_MAX];
	int nbatch;
	int64_t nbatches, nbatched_ops; /* batches sent, and the operations they carried */

	/* Batches that failed with a serialization failure or a deadlock wait
	 * for retry_ev, then run again. */
	struct event *retry_ev;
	int retry_wait; /* the queue waits for retry_ev */
	int retries;	/* in a row, for the backoff */
	uint64_t rng;	/* the backoff's jitter */
	int64_t nretried[STORE_RETRY_KINDS];

	/* Claims whose answer was lost, to remove (store_lose). */
	struct store_queue forget; /* waiting for their time or a connection (not pending) */
	int nforget;		   /* not removed yet: waiting, queued or sent */
	struct event *forget_ev;   /* the first of them may run */

	/* Before the first connection operations wait in the queue until their
	 * deadline: first_ev fails the late ones. */
	int connected_once;
	struct event *first_ev;

	/* Who hears the notifications on STORE_CHANNEL (store_listen). */
	store_notify_cb notify_cb;
	void *notify_arg;

	/* Scratch space for forming and sending a batch. */
	struct store_op *seen[STORE_SEEN_SLOTS];
	char sql[STORE_SQL_MAX];
	char side_sql[STORE_SQL_MAX]; /* and the first statement's (libpq copies each as sent) */
	int citus; /* the connection's database has Citus (store_citus_done) */
	char tokens[3 + STORE_BATCH_MAX * SCOPE_TOKEN_SIZE]; /* the notification's array */
	const char *values[STORE_PARAMS_MAX];
	int lengths[STORE_PARAMS_MAX];
	Oid types[STORE_PARAMS_MAX];
	int formats[STORE_PARAMS_MAX];
};

static void store_send(struct store *st);

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

/* Put the operations of front, in their order, before those of q. */
static void store_queue_prepend(struct store_queue *q, struct store_queue *front)
{
	if (!front->head)
		return;
	front->tail->next = q->head;
	if (!q->tail)
		q->tail = front->tail;
	q->head = front->head;
}

/* Memory the callback contract cannot do without: running out ends the
 * process, as redis's zmalloc does. */
static void *store_alloc(size_t size)
{
	void *p = calloc(1, size);

	if (!p) {
		store_log(LOG_ERROR, "store out of memory", NULL);
		abort();
	}
	return p;
}

static void store_op_free(struct store_op *op)
{
	if (op->answer.shared && --op->answer.shared->refs == 0) {
		PQclear(op->answer.shared->res);
		free(op->answer.shared);
	}
	free(op->scope_copy);
	free(op->tokens);
	free(op);
}

/* Hand op to the completion event with result res; takes ownership of op. */
static void store_complete(struct store *st, struct store_op *op, enum store_result res)
{
	op->answer.res = res;
	store_queue_push(&st->done, op);
	event_active(st->done_ev, EV_TIMEOUT, 0);
}

/* Free everything; runs no callback. */
static void store_destroy(struct store *st)
{
	struct store_op *op;

	for (int i = 0; i < st->nbatch; i++)
		store_op_free(st->batch[i]);
	while ((op = store_queue_pop(&st->queue)))
		store_op_free(op);
	while ((op = store_queue_pop(&st->done)))
		store_op_free(op);
	if (st->nforget)
		log_warn(NULL,
			 "%d claims whose answer was lost were not removed: they stay "
			 "in_progress until their lease ends",
			 st->nforget);
	while ((op = store_queue_pop(&st->forget)))
		store_op_free(op);
	evfree_event(&st->forget_ev);
	evfree_event(&st->first_ev);
	evfree_event(&st->retry_ev);
	evfree_event(&st->done_ev);
	store_conn_free(&st->conn);
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
		switch (op->kind) {
		case STORE_OP_CLAIM:
		case STORE_OP_LOOKUP:
		case STORE_OP_TAKEOVER:
			if (op->answer.res == STORE_EXISTS)
				op->cb.claim(op->arg, op->answer.res, op->answer.rec.generation,
					     &op->answer.rec);
			else
				op->cb.claim(op->arg, op->answer.res, op->answer.generation, NULL);
			break;
		case STORE_OP_QUERY:
			if (op->cb.query)
				op->cb.query(op->arg, op->answer.res,
					     op->answer.shared ? op->answer.shared->res : NULL);
			break;
		default:
			op->cb.done(op->arg, op->answer.res);
			break;
		}
		store_op_free(op);
	}
	st->dispatching = 0;
	if (st->free_requested)
		store_destroy(st);
}

/*
 * The answer to the pooler probe (prepared_statements auto): the server's
 * own pid is the one libpq was told at startup on a direct connection
 * only. Until it arrives the connection sends unnamed statements.
 */
static void store_probe_done(void *arg, enum store_result res, const PGresult *result)
{
	struct store *st = arg;

	if (res != STORE_OK || !result || PQntuples(result) != 1 || !store_conn_ready(&st->conn))
		return;
	store_conn_probed(&st->conn, PQgetvalue(result, 0, 0));
}

/* The answer to the Citus probe: the batches' statements take Citus's form. */
static void store_citus_done(void *arg, enum store_result res, const PGresult *result)
{
	struct store *st = arg;

	if (res == STORE_OK && result && PQntuples(result) == 1 && PQnfields(result) == 1)
		st->citus = strcmp(PQgetvalue(result, 0, 0), "t") == 0;
}

/*
 * A new connection: ask whether the database has Citus, probe for a pooler when asked to, the lost claims may
 * go, LISTEN again when asked to, and tell the listener it may have missed
 * notifications while there was no connection.
 */
static void store_connected(void *arg)
{
	struct store *st = arg;

	if (!st->connected_once) {
		int64_t deadline = clock_now_ms() + st->timeout_ms;

		/* What waited for this connection: its round trip gets a whole
		 * store_timeout, as if submitted now. */
		st->connected_once = 1;
		event_del(st->first_ev);
		for (struct store_op *op = st->queue.head; op; op = op->next)
			op->run.deadline_ms = deadline;
		store_send(st);
	}
	st->citus = 0; /* until the probe says so: the plain form, which Citus runs too */
	store_query(st, &store_sql_citus, store_citus_done, st);
	if (store_conn_auto(&st->conn))
		store_query(st, &store_sql_probe, store_probe_done, st);
	if (st->forget.head)
		event_active(st->forget_ev, EV_TIMEOUT, 0);
	if (!st->notify_cb)
		return;
	store_query(st, &store_sql_listen, NULL, NULL);
	st->notify_cb(st->notify_arg, NULL);
}

/* The first lost claim may run at its time: arm forget_ev for it (or not, with none). */
static void store_forget_arm(struct store *st)
{
	int64_t first = INT64_MAX;
	struct timeval tv;

	for (struct store_op *op = st->forget.head; op; op = op->next)
		if (op->run.not_before_ms < first)
			first = op->run.not_before_ms;
	if (first == INT64_MAX) {
		event_del(st->forget_ev);
		return;
	}
	tv = clock_tv(first - clock_now_ms());
	event_add(st->forget_ev, &tv);
}

/* Queue the lost claims whose time has come, when connected; wait for the others. */
static void store_forget_event(evutil_socket_t fd, short what, void *arg)
{
	struct store *st = arg;
	struct store_queue later = {0};
	struct store_op *op;
	int64_t now = clock_now_ms();

	if (!store_conn_ready(&st->conn))
		return; /* store_connected() calls again */
	while ((op = store_queue_pop(&st->forget))) {
		if (op->run.not_before_ms > now) {
			store_queue_push(&later, op);
			continue;
		}
		store_queue_push(&st->queue, op);
	}
	st->forget = later;
	store_forget_arm(st);
	store_send(st);
}

/* Keep op (a forget) to run from not_before_ms on; the store owns it. */
static void store_forget_later(struct store *st, struct store_op *op, int64_t not_before_ms)
{
	op->run.not_before_ms = not_before_ms;
	store_queue_push(&st->forget, op);
	store_forget_arm(st);
}

/*
 * The claim op was sent and its answer is lost: it may have committed, or
 * still be committing. It completes with STORE_LOST, and a forget of its
 * own, owning a copy of the scope, removes the claim by its token once the
 * statement has run out of time and the claim's transaction has ended
 * (unless STORE_FORGET_MAX of them are already waiting: then the claim,
 * if it commits, stays in_progress until its lease ends).
 */
static void store_lose(struct store *st, struct store_op *op)
{
	size_t la = strlen(op->ask.sc.actor) + 1, lo = strlen(op->ask.sc.operation) + 1;
	size_t lk = strlen(op->ask.sc.key) + 1;
	struct store_op *f;

	if (st->nforget >= STORE_FORGET_MAX) {
		log_warn(NULL,
			 "store already has %d lost claims to remove: a claim whose answer "
			 "was lost stays in_progress until its lease ends, if it committed",
			 st->nforget);
		store_complete(st, op, STORE_LOST);
		return;
	}
	f = store_alloc(sizeof(*f));
	st->nforget++;
	f->kind = STORE_OP_FORGET;
	f->scope_copy = store_alloc(la + lo + lk);
	memcpy(f->scope_copy, op->ask.sc.actor, la);
	memcpy(f->scope_copy + la, op->ask.sc.operation, lo);
	memcpy(f->scope_copy + la + lo, op->ask.sc.key, lk);
	f->ask.sc = (struct scope){f->scope_copy, f->scope_copy + la, f->scope_copy + la + lo};
	f->run.hash = op->run.hash;
	f->ask.recovered = op->kind == STORE_OP_TAKEOVER && op->ask.recover;
	memcpy(f->ask.token, op->ask.token, sizeof(f->ask.token));
	store_forget_later(st, f, op->run.sent_ms + st->timeout_ms + STORE_FORGET_MARGIN_MS);
	store_complete(st, op, STORE_LOST);
}

/*
 * What a lost connection does to op, in flight (sent) or queued: a claim
 * that was sent is lost (store_lose), a forget waits for the next
 * connection, anything else fails with STORE_UNAVAILABLE.
 */
static void store_drop(struct store *st, struct store_op *op, int sent)
{
	if (op->kind == STORE_OP_FORGET)
		store_forget_later(st, op, 0);
	else if (sent && (op->kind == STORE_OP_CLAIM || op->kind == STORE_OP_TAKEOVER))
		store_lose(st, op);
	else
		store_complete(st, op, STORE_UNAVAILABLE);
}

/*
 * The connection is gone (store_conn_fail): the batch in flight and every
 * queued operation end as store_drop says (callbacks run later from the
 * completion event), and a retry's wait ends with it.
 */
static void store_lost(void *arg)
{
	struct store *st = arg;
	struct store_op *op;

	if (!st->connected_once)
		return; /* nothing was sent; the queue waits for the first connection */
	for (int i = 0; i < st->nbatch; i++)
		store_drop(st, st->batch[i], 1);
	st->nbatch = 0;
	st->retry_wait = 0;
	event_del(st->retry_ev);
	while ((op = store_queue_pop(&st->queue)))
		store_drop(st, op, 0);
}

/*
 * The batch's statement failed for a reason that may belong to one of its
 * operations alone (a value the server rejects, a deadlock): its
 * operations go back to the queue's front to run again one per statement,
 * so only the guilty one fails. A lone operation fails with
 * STORE_UNAVAILABLE.
 */
static void store_batch_failed(struct store *st)
{
	struct store_queue again = {0};

	if (st->nbatch == 1) {
		store_complete(st, st->batch[0], STORE_UNAVAILABLE);
	} else {
		for (int i = 0; i < st->nbatch; i++) {
			st->batch[i]->run.solo = 1;
			store_queue_push(&again, st->batch[i]);
		}
	}
	store_queue_prepend(&st->queue, &again);
	st->nbatch = 0;
}

/*
 * The rows of a claim's insert: each operation a row names owns its new
 * record and completes with STORE_OK; the others found the slot taken and
 * go back to the queue's front as lookups. Rows come back in the batch's
 * order, so the search for each row's operation starts after the last one
 * found (any order is still matched).
 */
static void store_insert_rows(struct store *st, const PGresult *res)
{
	struct store_queue again = {0};
	struct store_op *op = NULL;
	int next = 0, i;

	if (!store_sql_insert_columns(res)) {
		store_log(LOG_WARN, "store claim returned unexpected columns", NULL);
		for (i = 0; i < st->nbatch; i++)
			store_complete(st, st->batch[i], STORE_UNAVAILABLE);
		st->nbatch = 0;
		return;
	}
	for (int row = 0; row < PQntuples(res); row++) {
		for (i = 0; i < st->nbatch; i++) {
			op = st->batch[(next + i) % st->nbatch];
			if (!op->run.answered && store_sql_insert_scope(res, row, &op->ask.sc))
				break;
		}
		if (i == st->nbatch) {
			store_log(LOG_WARN, "store claim returned an unexpected row", NULL);
			continue;
		}
		next = (next + i + 1) % st->nbatch;
		op->run.answered = 1;
		if (store_sql_insert_generation(res, row, &op->answer.generation) == 0) {
			op->answer.res = STORE_OK;
		} else {
			store_log(LOG_WARN, "store claim returned an unexpected row", NULL);
			op->answer.res = STORE_UNAVAILABLE;
		}
	}
	for (i = 0; i < st->nbatch; i++) {
		op = st->batch[i];
		if (op->run.answered) {
			store_complete(st, op, op->answer.res);
		} else {
			op->kind = STORE_OP_LOOKUP;
			store_queue_push(&again, op);
		}
	}
	store_queue_prepend(&st->queue, &again);
	st->nbatch = 0;
}

/*
 * An operation whose lookup or takeover no row answered met a concurrent
 * change: back to the queue's front (again) to claim from the insert, a
 * bounded number of times.
 */
static void store_claim_again(struct store *st, struct store_op *op, struct store_queue *again)
{
	if (++op->run.restarts < STORE_CLAIM_ATTEMPTS) {
		op->kind = STORE_OP_CLAIM;
		store_queue_push(again, op);
	} else {
		store_log(LOG_WARN, "store claim found no row", NULL);
		store_complete(st, op, STORE_UNAVAILABLE);
	}
}

/*
 * The rows of a lookup batch (res, which this takes over): each answered
 * operation completes with STORE_EXISTS with a record that points into
 * res (kept alive until the last of those callbacks), or goes on to the
 * takeover, at the queue's front, when its slot may be taken over.
 */
static void store_lookup_rows(struct store *st, PGresult *res)
{
	struct store_queue again = {0};
	struct store_shared *shared = NULL;
	struct store_op *op;
	int ord, take;

	for (int row = 0; row < PQntuples(res); row++) {
		ord = store_sql_ord(res, row, st->nbatch);
		if (ord < 0 || st->batch[ord]->run.answered) {
			store_log(LOG_WARN, "store claim returned an unexpected row", NULL);
			continue;
		}
		op = st->batch[ord];
		op->run.answered = 1;
		take = store_sql_lookup_record(res, row, &op->answer.rec);
		if (take < 0) {
			store_log(LOG_WARN, "store claim returned an unexpected row", NULL);
			op->answer.res = STORE_UNAVAILABLE;
		} else if (take && op->run.peek) {
			op->answer.res = STORE_VACANT;
		} else if (take) {
			op->run.take = 1;
		} else {
			op->answer.res = STORE_EXISTS;
			if (!shared) {
				shared = store_alloc(sizeof(*shared));
				shared->res = res;
			}
			shared->refs++;
			op->answer.shared = shared;
		}
	}
	for (int i = 0; i < st->nbatch; i++) {
		op = st->batch[i];
		if (op->run.take) {
			op->run.take = 0;
			op->run.answered = 0;
			op->kind = STORE_OP_TAKEOVER;
			store_queue_push(&again, op);
		} else if (op->run.answered) {
			store_complete(st, op, op->answer.res);
		} else if (op->run.peek) {
			store_complete(st, op, STORE_VACANT); /* no record holds the slot */
		} else {
			store_claim_again(st, op, &again);
		}
	}
	store_queue_prepend(&st->queue, &again);
	st->nbatch = 0;
	if (!shared)
		PQclear(res);
}

/*
 * The rows of a takeover batch: the ordinals taken over complete with
 * STORE_OK and their new generation; the others claim again.
 */
static void store_takeover_rows(struct store *st, const PGresult *res)
{
	struct store_queue again = {0};
	struct store_op *op;
	int64_t generation;
	int ord;

	for (int row = 0; row < PQntuples(res); row++) {
		ord = store_sql_takeover_ord(res, row, st->nbatch, &generation);
		if (ord < 0) {
			store_log(LOG_WARN, "store takeover returned an unexpected row", NULL);
			continue;
		}
		op = st->batch[ord];
		op->run.answered = 1;
		op->answer.generation = generation;
	}
	for (int i = 0; i < st->nbatch; i++) {
		op = st->batch[i];
		if (op->run.answered)
			store_complete(st, op, STORE_OK);
		else
			store_claim_again(st, op, &again);
	}
	store_queue_prepend(&st->queue, &again);
	st->nbatch = 0;
}

/*
 * The rows of a finish, unknown or release batch: the ordinals written
 * complete with STORE_OK, the others with STORE_FENCED (their generation
 * changed or the record is no longer in_progress).
 */
static void store_fence_rows(struct store *st, const PGresult *res)
{
	int ord;

	for (int i = 0; i < st->nbatch; i++)
		st->batch[i]->answer.res = STORE_FENCED;
	for (int row = 0; row < PQntuples(res); row++) {
		ord = store_sql_ord(res, row, st->nbatch);
		if (ord < 0)
			store_log(LOG_WARN, "store write returned an unexpected row", NULL);
		else
			st->batch[ord]->answer.res = STORE_OK;
	}
	for (int i = 0; i < st->nbatch; i++)
		store_complete(st, st->batch[i], st->batch[i]->answer.res);
	st->nbatch = 0;
}

/*
 * The rows of a forget batch (res NULL: its statements failed) and of
 * its companion: the lost claims found are gone (a deleted row of
 * generation 0 was the probe's own); the store's own operations end here,
 * with no callback.
 */
static void store_forget_rows(struct store *st, const PGresult *res, int side_rows)
{
	int removed = res ? side_rows + store_sql_forget_removed(res) : 0;

	if (!res)
		store_log(LOG_WARN, "store could not remove lost claims; they stay in_progress "
				    "until their lease ends", NULL);
	else if (removed)
		log_info(NULL, "store removed %d claim%s whose answer was lost", removed,
			 removed == 1 ? "" : "s");
	for (int i = 0; i < st->nbatch; i++)
		store_op_free(st->batch[i]);
	st->nforget -= st->nbatch;
	st->nbatch = 0;
}

/* The wait before a forget's next attempt, after its n-th wait (from 1). */
static int64_t store_forget_backoff(int n)
{
	int64_t ms = (int64_t)STORE_BACKOFF_MIN_MS << (n < 8 ? n - 1 : 7);

	return ms < STORE_BACKOFF_MAX_MS ? ms : STORE_BACKOFF_MAX_MS;
}

/*
 * A forget batch ran out of time (lock_timeout or statement_timeout): a
 * claim's transaction, or another writer of its slot, has not ended; a
 * commit waiting for a synchronous standby waits as long as the standby is
 * missing. Nothing of the batch committed; each forget tries again after a
 * backoff of its own, for as long as the store lives.
 */
static void store_forget_wait(struct store *st)
{
	int64_t now = clock_now_ms();
	int first = 0;

	for (int i = 0; i < st->nbatch; i++) {
		struct store_op *op = st->batch[i];

		first += op->run.waits++ == 0;
		store_forget_later(st, op, now + store_forget_backoff(op->run.waits));
	}
	if (first)
		log_info(NULL,
			 "store waits to remove %d claim%s whose answer was lost: a transaction "
			 "writing %s has not ended (a commit waiting for a synchronous standby?)",
			 first, first == 1 ? "" : "s", first == 1 ? "it" : "them");
	st->nbatch = 0;
}

/*
 * A caller's statement finished (ok: it succeeded); its result, which this
 * takes over, stays alive until the callback returns.
 */
static void store_query_result(struct store *st, PGresult *res, int ok)
{
	struct store_op *op = st->batch[0];

	if (!ok)
		store_log(LOG_WARN,
			  op->stmt.sql == store_sql_listen.sql
			      ? "store cannot LISTEN; waiters wake at their deadline"
			      : "store query failed",
			  res ? PQresultErrorMessage(res) : "no result");
	if (res) {
		op->answer.shared = store_alloc(sizeof(*op->answer.shared));
		op->answer.shared->res = res;
		op->answer.shared->refs = 1;
	}
	store_complete(st, op, ok ? STORE_OK : STORE_UNAVAILABLE);
	st->nbatch = 0;
}

/* The backoff before retry number n (from 0): doubling, capped, with jitter. */
static int64_t store_retry_delay(struct store *st, int n)
{
	int64_t ms = STORE_RETRY_MIN_MS << (n < 8 ? n : 8);

	if (ms > STORE_RETRY_MAX_MS)
		ms = STORE_RETRY_MAX_MS;
	/* xorshift64: half the delay, plus up to the other half at random */
	st->rng ^= st->rng << 13;
	st->rng ^= st->rng >> 7;
	st->rng ^= st->rng << 17;
	return ms / 2 + (int64_t)(st->rng % (uint64_t)(ms / 2 + 1));
}

/*
 * The batch's transaction failed with a serialization failure or a
 * deadlock (why): PostgreSQL rolled it back, so nothing of it committed,
 * and it can simply run again. Its operations go back to the queue's
 * front, which waits for a backoff that grows while it keeps happening
 * (another transaction is in the way, and should be let through). One
 * whose store_timeout would end before the next attempt fails with
 * STORE_UNAVAILABLE instead: like any other store answer that did not
 * come in time, and still nothing was written.
 */
static void store_retry(struct store *st, enum store_retry_kind why)
{
	struct store_queue again = {0};
	int64_t delay = store_retry_delay(st, st->retries++), now = clock_now_ms();
	struct timeval tv = clock_tv(delay);

	st->nretried[why]++;
	for (int i = 0; i < st->nbatch; i++) {
		struct store_op *op = st->batch[i];

		/* The store's own forgets have no caller to fail: they wait. */
		if (op->kind == STORE_OP_FORGET)
			op->run.deadline_ms = now + delay + st->timeout_ms;
		if (op->run.deadline_ms <= now + delay)
			store_complete(st, op, STORE_UNAVAILABLE);
		else
			store_queue_push(&again, op);
	}
	store_queue_prepend(&st->queue, &again);
	st->nbatch = 0;
	st->retry_wait = 1;
	event_add(st->retry_ev, &tv);
}

/* The backoff after a retried failure is over: send again. */
static void store_retry_event(evutil_socket_t fd, short what, void *arg)
{
	struct store *st = arg;

	st->retry_wait = 0;
	store_send(st);
}

/*
 * The batch in flight failed in a way that is none of its operations'
 * own: a serialization failure or a deadlock (it runs again after a
 * backoff), or an error that makes the connection no use (it is given
 * up). Returns 1 when it was one of those, 0 for any other failure.
 */
static int store_refused(struct store *st, const PGresult *res, const char *sqlstate)
{
	if (sqlstate && (strcmp(sqlstate, "40001") == 0 || strcmp(sqlstate, "40P01") == 0)) {
		store_retry(st, strcmp(sqlstate, "40001") == 0 ? STORE_RETRY_SERIALIZATION
							       : STORE_RETRY_DEADLOCK);
		return 1;
	}
	if (!store_sql_error_fatal(sqlstate))
		return 0;
	/* The server refused the statement: nothing of it committed, so no
	 * claim is lost. (Without a SQLSTATE the link failed, and the claims
	 * may have.) */
	for (int i = 0; sqlstate && i < st->nbatch; i++)
		store_drop(st, st->batch[i], 0);
	if (sqlstate)
		st->nbatch = 0;
	store_conn_fail(&st->conn, "store connection unusable",
			res ? PQresultErrorMessage(res) : store_conn_error(&st->conn));
	return 1;
}

/*
 * Hand the batch in flight's answer (res with its status and SQLSTATE,
 * and the rows its companions returned) to its operations: complete
 * them, or put back those that must run again. Returns res when it is
 * still the caller's to free, NULL when the operations took it over.
 */
static PGresult *store_answer(struct store *st, PGresult *res, ExecStatusType status,
			      const char *sqlstate, int side_rows)
{
	enum store_op_kind kind = st->batch[0]->kind;

	if (kind == STORE_OP_QUERY) {
		store_query_result(st, res, status == PGRES_TUPLES_OK || status == PGRES_COMMAND_OK);
		return NULL;
	}
	if (kind == STORE_OP_FORGET && status == PGRES_FATAL_ERROR &&
	    store_sql_error_timeout(sqlstate)) {
		store_forget_wait(st);
	} else if (kind == STORE_OP_FORGET) {
		store_forget_rows(st, status == PGRES_TUPLES_OK ? res : NULL, side_rows);
	} else if (status == PGRES_FATAL_ERROR) {
		store_log(LOG_WARN,
			  store_sql_error_schema(res)
			      ? "store statement failed (the schema is missing or older than "
				"this idemproxy: run \"idemproxy migrate\")"
			      : "store statement failed",
			  PQresultErrorMessage(res));
		store_batch_failed(st);
	} else if (status != PGRES_TUPLES_OK) {
		store_log(LOG_WARN, "store statement failed", PQresStatus(status));
		store_batch_failed(st);
	} else if (kind == STORE_OP_CLAIM) {
		store_insert_rows(st, res);
	} else if (kind == STORE_OP_LOOKUP) {
		store_lookup_rows(st, res);
		return NULL;
	} else if (kind == STORE_OP_TAKEOVER) {
		store_takeover_rows(st, res);
	} else {
		store_fence_rows(st, res);
	}
	return res;
}

/*
 * The pipeline of the batch in flight ended (res, which this takes over,
 * is its answer): its operations complete or run again, or the
 * connection is given up; then the next batch goes.
 */
static void store_synced(void *arg, PGresult *res, int side_rows)
{
	struct store *st = arg;
	ExecStatusType status = res ? PQresultStatus(res) : PGRES_FATAL_ERROR;
	const char *sqlstate = NULL;

	if (status == PGRES_TUPLES_OK || status == PGRES_COMMAND_OK)
		st->retries = 0;
	if (status == PGRES_FATAL_ERROR) {
		sqlstate = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;
		if (store_refused(st, res, sqlstate))
			goto out;
	}
	res = store_answer(st, res, status, sqlstate, side_rows);
	store_send(st);
out:
	PQclear(res);
}

/* A notification on the connection: to the listener, if any. */
static void store_notified(void *arg, const char *payload)
{
	struct store *st = arg;

	if (st->notify_cb)
		st->notify_cb(st->notify_arg, payload);
}

static int store_same_scope(const struct store_op *a, const struct store_op *b)
{
	return a->run.hash == b->run.hash && scope_equal(&a->ask.sc, &b->ask.sc);
}

/*
 * Note op's scope in the set of scopes met while forming this batch;
 * returns 1 when an operation met earlier has the same scope.
 */
static int store_seen(struct store *st, struct store_op *op)
{
	size_t i = (size_t)op->run.hash & (STORE_SEEN_SLOTS - 1);

	for (; st->seen[i]; i = (i + 1) & (STORE_SEEN_SLOTS - 1))
		if (store_same_scope(st->seen[i], op))
			return 1;
	st->seen[i] = op;
	return 0;
}

/*
 * Move the next batch from the queue to st->batch: the head, then each
 * queued operation of the same kind whose scope no operation ahead of it
 * in the queue has, up to STORE_BATCH_MAX of them, looking at no more than
 * STORE_SCAN_MAX. So a batch never holds two operations on one scope and
 * the operations on one scope keep their order. A solo operation goes
 * alone. The queue must not be empty.
 */
static void store_take_batch(struct store *st)
{
	struct store_op *op = store_queue_pop(&st->queue), *prev = NULL, *next;
	int scanned = 1;

	st->batch[0] = op;
	st->nbatch = 1;
	if (op->run.solo || !st->queue.head)
		return;
	memset(st->seen, 0, sizeof(st->seen));
	store_seen(st, op);
	for (op = st->queue.head; op && st->nbatch < STORE_BATCH_MAX && scanned < STORE_SCAN_MAX;
	     op = next, scanned++) {
		next = op->next;
		if (store_seen(st, op) || op->kind != st->batch[0]->kind || op->run.solo) {
			prev = op;
			continue;
		}
		if (prev)
			prev->next = next;
		else
			st->queue.head = next;
		if (st->queue.tail == op)
			st->queue.tail = prev;
		op->next = NULL;
		st->batch[st->nbatch++] = op;
	}
}

/*
 * Write the batch's parameters into st->values, lengths, types and
 * formats; returns the parameter count.
 */
static int store_build_params(struct store *st)
{
	enum store_op_kind kind = st->batch[0]->kind;
	int n = 0;

	for (int i = 0; i < st->nbatch; i++)
		n += store_sql_row(kind, &st->batch[i]->ask, st->batch[i]->run.nums, st->values + n,
				   st->lengths + n, st->types + n, st->formats + n);
	return n;
}

/*
 * One of the batch's statements, part of its kind's, written out only
 * when the session has not prepared it.
 */
static int store_send_batch_stmt(struct store *st, enum store_part part, int nparams)
{
	static const int results[STORE_PARTS] = {
	    [STORE_PART_MAIN] = STORE_RES_MAIN,
	    [STORE_PART_SIDE] = STORE_RES_SIDE,
	    [STORE_PART_FIRST] = STORE_RES_FIRST,
	};
	enum store_op_kind kind = st->batch[0]->kind;
	int id = store_sql_id(kind, part, st->nbatch, st->citus);
	char *sql = part == STORE_PART_MAIN ? st->sql : st->side_sql;
	const struct store_stmt stmt = {
	    .sql = sql,
	    .nparams = nparams,
	    .types = st->types,
	    .values = st->values,
	    .lengths = st->lengths,
	    .formats = st->formats,
	};

	if (!store_conn_prepared(&st->conn, id))
		store_sql_write(sql, kind, part, st->nbatch, st->citus);
	return store_conn_send(&st->conn, id, &stmt, STORE_FORMAT_BINARY, results[part]);
}

/*
 * After a batch, in its transaction: the notification for the operations
 * that asked for one (writes with STORE_NOTIFY), if any. Returns 0 when
 * the pipeline refused it.
 */
static int store_send_notify(struct store *st)
{
	const char *param = st->tokens;
	char token[SCOPE_TOKEN_SIZE];
	struct store_stmt stmt;
	size_t len = 0;

	for (int i = 0; i < st->nbatch; i++) {
		if (!st->batch[i]->notify)
			continue;
		scope_token(&st->batch[i]->ask.sc, token);
		len = store_sql_tokens_add(st->tokens, len, token);
	}
	if (!len)
		return 1;
	memcpy(st->tokens + len, "}", 2);
	store_sql_notify(&stmt, &param);
	return store_conn_send(&st->conn, STORE_ID_NOTIFY, &stmt, STORE_FORMAT_BINARY,
			       STORE_RES_SIDE);
}

/* Order operations by scope (a total order every store shares). */
static int store_scope_cmp(const void *a, const void *b)
{
	const struct store_op *x = *(struct store_op *const *)a;
	const struct store_op *y = *(struct store_op *const *)b;

	return scope_cmp(&x->ask.sc, &y->ask.sc);
}

/*
 * Add the batch in flight to the pipeline, in one implicit transaction:
 * the timeout setting, so the server gives up on a statement when we do
 * (SET LOCAL semantics suit pgbouncer's transaction mode), then a query's
 * own statement or the batch's statements and notification. Returns 0
 * when the pipeline refused one.
 */
static int store_send_batch(struct store *st)
{
	const struct store_op *op = st->batch[0];
	int forget = op->kind == STORE_OP_FORGET, rows = st->nbatch > 1;
	int id = forget ? STORE_ID_FORGET_TIMEOUT : rows ? STORE_ID_TIMEOUT_ROWS : STORE_ID_TIMEOUT;
	struct store_stmt timeout = {.sql = forget ? st->forget_timeout_sql
					    : rows ? st->timeout_rows_sql
						   : st->timeout_sql};
	int nparams;

	if (!store_conn_send(&st->conn, id, &timeout, STORE_FORMAT_TEXT, STORE_RES_TIMEOUT))
		return 0;
	if (op->kind == STORE_OP_QUERY)
		return store_conn_send(&st->conn, -1, &op->stmt, STORE_FORMAT_TEXT, STORE_RES_MAIN);
	nparams = store_build_params(st);
	if (store_sql_has_part(op->kind, STORE_PART_FIRST) &&
	    !store_send_batch_stmt(st, STORE_PART_FIRST, nparams))
		return 0;
	if (!store_send_batch_stmt(st, STORE_PART_MAIN, nparams))
		return 0;
	if (store_sql_has_part(op->kind, STORE_PART_SIDE) &&
	    !store_send_batch_stmt(st, STORE_PART_SIDE, nparams))
		return 0;
	return store_send_notify(st);
}

/*
 * The batch in flight went out: count it and note when each operation was
 * sent. Returns the batch's deadline, the earliest of its operations'.
 */
static int64_t store_sent(struct store *st)
{
	int forget = st->batch[0]->kind == STORE_OP_FORGET;
	int64_t deadline_ms;

	st->nbatches++;
	st->nbatched_ops += st->nbatch;
	for (int i = 0; i < st->nbatch; i++) {
		st->batch[i]->run.sent_ms = clock_now_ms();
		/* The store's own forgets have no caller waiting: their time
		 * runs from here, not from when they queued. */
		if (forget)
			st->batch[i]->run.deadline_ms = st->batch[i]->run.sent_ms + st->timeout_ms;
	}
	deadline_ms = st->batch[0]->run.deadline_ms;
	for (int i = 1; i < st->nbatch; i++)
		if (st->batch[i]->run.deadline_ms < deadline_ms)
			deadline_ms = st->batch[i]->run.deadline_ms;
	return deadline_ms;
}

/* Send the next batch unless one is already in flight. */
static void store_send(struct store *st)
{
	if (st->nbatch || st->retry_wait || !st->queue.head || !store_conn_ready(&st->conn))
		return;
	store_take_batch(st);
	if (store_sql_scope_order(st->batch[0]->kind))
		qsort(st->batch, (size_t)st->nbatch, sizeof(st->batch[0]), store_scope_cmp);
	store_conn_begin(&st->conn);
	if (!store_send_batch(st) || store_conn_sync(&st->conn) < 0) {
		store_conn_fail(&st->conn, "store send failed", store_conn_error(&st->conn));
		return;
	}
	if (store_conn_wait(&st->conn, store_sent(st)) < 0)
		store_conn_fail(&st->conn, "store send failed", "cannot watch the socket");
}

/* Arm first_ev for the queue's head, the first to run out of time (deadlines
 * grow along the queue while nothing is sent), or disarm it with none. */
static void store_first_arm(struct store *st)
{
	struct timeval tv;

	if (!st->queue.head) {
		event_del(st->first_ev);
		return;
	}
	tv = clock_tv(st->queue.head->run.deadline_ms - clock_now_ms());
	event_add(st->first_ev, &tv);
}

/* No first connection in time for the operations at the queue's head: they fail. */
static void store_first_event(evutil_socket_t fd, short what, void *arg)
{
	struct store *st = arg;
	int64_t now = clock_now_ms();

	if (st->connected_once)
		return;
	while (st->queue.head && st->queue.head->run.deadline_ms <= now)
		store_complete(st, store_queue_pop(&st->queue), STORE_UNAVAILABLE);
	store_first_arm(st);
}

/* Queue op; when not connected fail it at once (asynchronously), or, before
 * the first connection, let it wait for that within its deadline. */
static void store_submit(struct store *st, struct store_op *op)
{
	op->run.deadline_ms = clock_now_ms() + st->timeout_ms;
	st->npending++;
	if (!store_conn_ready(&st->conn)) {
		if (st->connected_once) {
			store_complete(st, op, STORE_UNAVAILABLE);
			return;
		}
		store_queue_push(&st->queue, op);
		if (st->queue.head == op)
			store_first_arm(st);
		return;
	}
	store_queue_push(&st->queue, op);
	store_send(st);
}

/* A zeroed operation of kind for scope sc. */
static struct store_op *store_op_new(enum store_op_kind kind, const struct scope *sc,
				     int64_t generation, void *arg)
{
	struct store_op *op = store_alloc(sizeof(*op));

	op->kind = kind;
	op->ask.sc = *sc;
	op->run.hash = scope_hash(sc);
	op->ask.generation = generation;
	op->arg = arg;
	return op;
}

/* An owner's write (finish, unknown, release) fenced by generation. */
static struct store_op *store_write_new(enum store_op_kind kind, const struct scope *sc,
					int64_t generation, int flags, store_done_cb cb, void *arg)
{
	struct store_op *op = store_op_new(kind, sc, generation, arg);

	op->notify = (flags & STORE_NOTIFY) != 0;
	op->cb.done = cb;
	return op;
}

/* How long a forget's probe may wait (lock_timeout): never 0, which is no limit. */
static int64_t store_forget_wait_ms(int64_t timeout_ms)
{
	int64_t half = timeout_ms / 2 > 0 ? timeout_ms / 2 : 1;

	return half < STORE_FORGET_WAIT_MS ? half : STORE_FORGET_WAIT_MS;
}

struct store *store_new(struct event_base *base, struct evdns_base *dns, int64_t dns_timeout_ms,
			const char *conninfo, int64_t timeout_ms, const char *owner_id, int named)
{
	static const struct store_conn_cbs events = {
	    .connected = store_connected,
	    .lost = store_lost,
	    .synced = store_synced,
	    .notify = store_notified,
	};
	struct store *st = calloc(1, sizeof(*st));
	int conn_ok;

	if (!st)
		return NULL;
	conn_ok = store_conn_init(&st->conn, base, dns, dns_timeout_ms, conninfo, timeout_ms, named,
				  &events, st) == 0;
	st->timeout_ms = timeout_ms;
	store_sql_timeouts(st->timeout_sql, st->timeout_rows_sql, st->forget_timeout_sql,
			   timeout_ms, store_forget_wait_ms(timeout_ms));
	st->owner_id = strdup(owner_id ? owner_id : "");
	st->done_ev = event_new(base, -1, 0, store_done_event, st);
	st->forget_ev = evtimer_new(base, store_forget_event, st);
	st->first_ev = evtimer_new(base, store_first_event, st);
	st->retry_ev = evtimer_new(base, store_retry_event, st);
	if (getrandom(&st->nonce, sizeof(st->nonce), GRND_NONBLOCK) != sizeof(st->nonce))
		st->nonce = (uint64_t)clock_now_ms() ^ (uint64_t)(uintptr_t)st ^
			    (uint64_t)getpid() << 32;
	st->rng = st->nonce * UINT64_C(0x9E3779B97F4A7C15) | 1;
	if (!conn_ok || !st->owner_id || !st->done_ev || !st->forget_ev || !st->first_ev ||
	    !st->retry_ev) {
		store_destroy(st);
		return NULL;
	}
	store_conn_start(&st->conn);
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
	return store_conn_ready(&st->conn);
}

int store_pending(const struct store *st)
{
	return st->npending;
}

int64_t store_batches(const struct store *st)
{
	return st->nbatches;
}

int64_t store_retried(const struct store *st, enum store_retry_kind kind)
{
	return st->nretried[kind];
}

int64_t store_batched_ops(const struct store *st)
{
	return st->nbatched_ops;
}

void store_claim(struct store *st, const struct scope *sc, const unsigned char *fp,
		 const char *request_id, const char *trace_id, int64_t lease_ms, int flags,
		 store_claim_cb cb, void *arg)
{
	struct store_op *op =
	    store_op_new(flags & STORE_PEEK ? STORE_OP_LOOKUP : STORE_OP_CLAIM, sc, 0, arg);

	op->run.peek = (flags & STORE_PEEK) != 0;
	snprintf(op->ask.token, sizeof(op->ask.token), "%s:%016" PRIx64 ":%" PRIu64, st->owner_id,
		 st->nonce, ++st->nclaims);
	op->ask.recover = (flags & STORE_RECOVER) != 0;
	op->notify = (flags & STORE_NOTIFY) != 0;
	op->ask.fp = fp;
	op->ask.request_id = request_id;
	op->ask.trace_id = trace_id;
	op->ask.lease_ms = lease_ms;
	op->cb.claim = cb;
	store_submit(st, op);
}

void store_finish(struct store *st, const struct scope *sc, int64_t generation, int status,
		  const char *headers, size_t headers_len, const unsigned char *body,
		  size_t body_len, int omitted, const char *sealed, int64_t retention_ms,
		  int64_t tombstone_ms, int flags, store_done_cb cb, void *arg)
{
	struct store_op *op = store_write_new(STORE_OP_FINISH, sc, generation, flags, cb, arg);

	op->ask.status = status;
	op->ask.headers = headers;
	op->ask.headers_len = headers_len;
	op->ask.body = body;
	op->ask.body_len = body_len;
	op->ask.omitted = omitted;
	op->ask.sealed = sealed;
	op->ask.retention_ms = retention_ms;
	op->ask.tombstone_ms = tombstone_ms;
	if (headers_len > STORE_PARAM_MAX || body_len > STORE_PARAM_MAX) {
		store_log(LOG_ERROR, "store finish: response too large to store", NULL);
		st->npending++;
		store_complete(st, op, STORE_UNAVAILABLE);
		return;
	}
	store_submit(st, op);
}

void store_mark_unknown(struct store *st, const struct scope *sc, int64_t generation, int flags,
			store_done_cb cb, void *arg)
{
	store_submit(st, store_write_new(STORE_OP_UNKNOWN, sc, generation, flags, cb, arg));
}

void store_release(struct store *st, const struct scope *sc, int64_t generation, int flags,
		   store_done_cb cb, void *arg)
{
	store_submit(st, store_write_new(STORE_OP_RELEASE, sc, generation, flags, cb, arg));
}

/* What a caller's query names: no scope. */
static const struct scope store_no_scope = {"", "", ""};

void store_query(struct store *st, const struct store_stmt *stmt, store_query_cb cb, void *arg)
{
	struct store_op *op = store_op_new(STORE_OP_QUERY, &store_no_scope, 0, arg);

	op->run.solo = 1;
	op->stmt = *stmt;
	op->cb.query = cb;
	store_submit(st, op);
}

char *store_tokens_array(const char *const *tokens, int n)
{
	char *buf = malloc(3 + (size_t)n * SCOPE_TOKEN_SIZE);
	size_t len = 0;

	if (!buf)
		return NULL;
	for (int i = 0; i < n; i++)
		if (strlen(tokens[i]) < SCOPE_TOKEN_SIZE)
			len = store_sql_tokens_add(buf, len, tokens[i]);
	memcpy(buf + len, len ? "}" : "{}", len ? 2 : 3);
	return buf;
}

void store_notify(struct store *st, const char *const *tokens, int n)
{
	struct store_op *op;

	if (n <= 0)
		return;
	op = store_op_new(STORE_OP_QUERY, &store_no_scope, 0, NULL);
	op->run.solo = 1;
	op->tokens = store_tokens_array(tokens, n);
	if (!op->tokens) {
		store_log(LOG_WARN, "store cannot notify: out of memory", NULL);
		store_op_free(op);
		return;
	}
	op->tokens_param = op->tokens;
	store_sql_notify(&op->stmt, &op->tokens_param);
	store_submit(st, op);
}

void store_listen(struct store *st, store_notify_cb cb, void *arg)
{
	st->notify_cb = cb;
	st->notify_arg = arg;
	if (store_conn_ready(&st->conn))
		store_connected(st);
}
