/*
 * The record store: asynchronous libpq against PostgreSQL.
 *
 * One struct store per worker event_base owns one connection and a FIFO of
 * operations. Every call returns at once; the callback runs exactly once,
 * later, from the event loop (never from inside the call itself). Nothing
 * here blocks: connect is PQconnectStart/PQconnectPoll, queries are
 * PQsendQueryParams, results are read when the socket is readable.
 * Concurrent operations of one kind share a statement and its commit
 * (see store.c), each with its own outcome.
 */
#ifndef IDEMPROXY_STORE_H
#define IDEMPROXY_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "proxy/record.h"
#include "proxy/scope.h"
#include "proxy/store_stmt.h"

struct event_base;
struct evdns_base;
struct pg_result; /* libpq's PGresult */
struct store;

enum store_result {
	STORE_OK,	   /* claim: we own the slot; others: row written */
	STORE_EXISTS,	   /* claim: another record holds the slot (see rec) */
	STORE_FENCED,	   /* finish/unknown/release: generation changed, nothing written */
	STORE_UNAVAILABLE, /* not connected, timed out, read-only, or error */
	STORE_LOST,	   /* claim: sent, but its answer was lost (connection or
			    * timeout); it may have committed, so the store deletes
			    * it by its lease token once it can: never forward */
	STORE_VACANT,	   /* claim with STORE_PEEK: no record holds the slot, or
			    * one the claim would take over: nothing was written */
};

/* claim: STORE_OK with generation, STORE_EXISTS with rec (owned by the
 * store, valid only during the callback), STORE_UNAVAILABLE or STORE_LOST. */
typedef void (*store_claim_cb)(void *arg, enum store_result res, int64_t generation,
			       const struct record *rec);
typedef void (*store_done_cb)(void *arg, enum store_result res);
/* query: STORE_OK with the statement's result (text format), or
 * STORE_UNAVAILABLE with the error result or NULL; valid during the call. */
typedef void (*store_query_cb)(void *arg, enum store_result res, const struct pg_result *result);
/* A notification on STORE_CHANNEL: token (scope_token) names the scope whose owner wrote
 * its outcome; NULL after a reconnect, when some may have been missed. */
typedef void (*store_notify_cb)(void *arg, const char *token);

enum store_flags {
	STORE_RECOVER = 1, /* claim: take over an unknown or lease-expired record
			    * of the same fingerprint (recovery forward) */
	STORE_NOTIFY = 2,  /* finish/unknown/release: notify STORE_CHANNEL */
	STORE_PEEK = 4,	   /* claim: only read the record that holds the slot
			    * (STORE_EXISTS), never insert or take over
			    * (STORE_VACANT instead): a claim a limit refused */
};

/*
 * A store for one event loop. Its host names are looked up on dns, each
 * connect's within dns_timeout_ms (resolver_timeout); dns NULL leaves them
 * to libpq, which blocks: only for a loop that may. conninfo NULL means libpq defaults. It starts
 * connecting at once and reconnects with backoff whenever the connection is
 * lost. timeout_ms bounds every round trip (store_timeout). named: 1 sends
 * batches as named prepared statements, 0 unnamed, -1 named unless each
 * new connection turns out to go through a pooler (prepared_statements).
 */
struct store *store_new(struct event_base *base, struct evdns_base *dns, int64_t dns_timeout_ms,
			const char *conninfo, int64_t timeout_ms, const char *owner_id, int named);
void store_free(struct store *st);

/* 1 while connected and usable. */
int store_ready(const struct store *st);

/*
 * Claim the scope: insert an in_progress record with fingerprint fp and a
 * lease of lease_ms, or take over a completed record whose expires_at has
 * passed (generation + 1), or with STORE_RECOVER one of fingerprint fp
 * that is unknown or whose lease expired. Otherwise report the existing
 * record. Each claim's lease_owner is a token of its own (owner_id:nonce:N, the
 * nonce random per store, so no two stores ever share one). A record
 * inserted or taken over keeps request_id and trace_id (the claiming
 * request's X-Request-Id and trace id, each NULL: none; borrowed until the
 * callback), and an existing record reported says its claimant's.
 * When the answer is lost (STORE_LOST), the store removes that claim
 * later by its token, once the statement has run out of time (a
 * store_timeout after it was sent), it is connected again and the claim's
 * transaction has ended (a commit waiting for a synchronous standby is
 * waited for, with backoff, as long as it takes): a record it inserted is
 * deleted, one it took over for recovery is marked unknown again. The
 * request was never forwarded, so no key stays in_progress.
 * With STORE_PEEK the claim starts at its lookup and writes nothing: it
 * ends with STORE_EXISTS where a claim would, and STORE_VACANT where a
 * claim would have owned the slot.
 */
void store_claim(struct store *st, const struct scope *sc, const unsigned char *fp,
		 const char *request_id, const char *trace_id, int64_t lease_ms, int flags,
		 store_claim_cb cb, void *arg);

/*
 * Complete the record claimed with generation: status, headers ("Name:
 * value\r\n" lines, stored as bytes), body (NULL with omitted=1 when it
 * was too large), expires after retention_ms, then (tombstone_ms > 0, for
 * `expired_keys refuse`) refuses its key tombstone_ms more; sealed names the key that
 * sealed headers and body (NULL: plaintext). STORE_FENCED if the
 * generation changed, or the record is completed or gone. On
 * STORE_UNAVAILABLE the caller may retry.
 */
void store_finish(struct store *st, const struct scope *sc, int64_t generation, int status,
		  const char *headers, size_t headers_len, const unsigned char *body,
		  size_t body_len, int omitted, const char *sealed, int64_t retention_ms,
		  int64_t tombstone_ms, int flags, store_done_cb cb, void *arg);

/* Mark the record claimed with generation as unknown (outcome not known). */
void store_mark_unknown(struct store *st, const struct scope *sc, int64_t generation, int flags,
			store_done_cb cb, void *arg);

/* Delete the record claimed with generation (the request was not accepted). */
void store_release(struct store *st, const struct scope *sc, int64_t generation, int flags,
		   store_done_cb cb, void *arg);

/* Run stmt alone, in its own transaction, within store_timeout; everything
 * stmt points to lives until the callback. */
void store_query(struct store *st, const struct store_stmt *stmt, store_query_cb cb, void *arg);

/*
 * LISTEN on STORE_CHANNEL on this store's connection, now and after every
 * reconnect, and pass each notification to cb. Connections through
 * pgbouncer in transaction mode cannot LISTEN; waiters then rely on their
 * own deadline.
 */
void store_listen(struct store *st, store_notify_cb cb, void *arg);

/*
 * Notify STORE_CHANNEL for the n scope tokens, in a statement of its own,
 * with no callback: for writes outside the store's batches (the sweeper,
 * an operator's release or resolve), sent once they committed.
 */
void store_notify(struct store *st, const char *const *tokens, int n);

/* The text[] literal of the n tokens for STORE_SQL_NOTIFY's $1 (malloc'd;
 * tokens that are not scope tokens are left out), NULL when out of memory. */
char *store_tokens_array(const char *const *tokens, int n);

/* Pending operations, for shutdown: 0 when idle. */
int store_pending(const struct store *st);

/* Statements sent since store_new, and the operations they carried. */
int64_t store_batches(const struct store *st);
int64_t store_batched_ops(const struct store *st);

/* Why a statement was sent again: it committed nothing. */
enum store_retry_kind {
	STORE_RETRY_SERIALIZATION, /* SQLSTATE 40001 */
	STORE_RETRY_DEADLOCK,	   /* SQLSTATE 40P01 */
	STORE_RETRY_KINDS,
};

/* Batches sent again since store_new, for that reason. */
int64_t store_retried(const struct store *st, enum store_retry_kind kind);

#endif
