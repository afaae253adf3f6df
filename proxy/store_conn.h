/*
 * The store's connection to PostgreSQL, under the store as pgbouncer's
 * sbuf.c is under server.c: it connects without blocking
 * (its host names looked up with evdns, store_dns.c, then
 * PQconnectStartParams and PQconnectPoll on socket events), reconnects
 * after a backoff whenever the connection is lost, watches the socket,
 * and carries one pipeline at a time: statements added with
 * store_conn_send, named ones prepared once per session, up to a sync,
 * whose results it collects in order and hands up when the sync arrives.
 * One timer serves it all: the backoff before the next connect, the
 * lookups' deadline, the connect deadline, the deadline of the pipeline
 * in flight.
 *
 * It knows no operation: it tells the store what happened through the
 * callbacks of struct store_conn_cbs, from the event loop (and lost also
 * at once, from store_conn_fail and store_conn_start). The members of
 * struct store_conn are this module's: the store embeds one and uses it
 * only through these functions.
 */
#ifndef IDEMPROXY_STORE_CONN_H
#define IDEMPROXY_STORE_CONN_H

#include <stdint.h>

#include <event2/util.h>

#include "proxy/log.h"
#include "proxy/store_sql.h"
#include "proxy/store_stmt.h"

struct event;
struct event_base;
struct evdns_base;
struct pg_conn;	  /* libpq's PGconn */
struct pg_result; /* libpq's PGresult */
struct store_dns;

/* The backoff before a reconnect, doubling while connects and statements
 * fail (a lost claim's removal waits between attempts the same way). */
#define STORE_BACKOFF_MIN_MS 50
#define STORE_BACKOFF_MAX_MS 1000

/* What a statement's result is to the pipeline (store_conn_send); a
 * prepare's result is known by its statement's id, >= 0. */
#define STORE_RES_TIMEOUT (-1) /* the timeout setting: dropped when it worked */
#define STORE_RES_MAIN	  (-2) /* the statement: its result is the pipeline's answer */
#define STORE_RES_SIDE	  (-3) /* a companion: dropped when it worked, its rows counted */
#define STORE_RES_FIRST	  (-4) /* the statement sent before it: dropped when it worked */
/* At most a prepare and a result for each of the five statements a batch sends. */
#define STORE_EXPECT_MAX 10

enum store_conn_state {
	STORE_DISCONNECTED, /* timer: backoff before the next connect */
	STORE_RESOLVING,    /* timer: the host name lookups' deadline */
	STORE_CONNECTING,   /* timer: connect deadline */
	STORE_CONNECTED,    /* timer: deadline of the pipeline in flight */
};

/* What the connection tells the store; arg is store_conn_init's. */
struct store_conn_cbs {
	/* Connected: statements may go. */
	void (*connected)(void *arg);
	/* The connection failed or was lost (already logged): end the pipeline
	 * in flight and everything waiting for it. */
	void (*lost)(void *arg);
	/* The pipeline in flight ended with its sync. res is its main
	 * statement's result or the first error (NULL: none came), now the
	 * store's; side_rows what its companions returned. */
	void (*synced)(void *arg, struct pg_result *res, int side_rows);
	/* A notification arrived, with its payload. */
	void (*notify)(void *arg, const char *payload);
};

struct store_conn {
	/* Whom it tells. */
	const struct store_conn_cbs *cb;
	void *arg;

	/* The connection. */
	struct event_base *base;
	char *conninfo;
	struct evdns_base *dns;	   /* NULL: libpq looks host names up (blocking) */
	int64_t dns_timeout_ms;	   /* the lookups' deadline */
	struct store_dns *lookup;  /* the lookups under way (STORE_RESOLVING) */
	int64_t timeout_ms; /* a connect's deadline */
	int64_t backoff_ms; /* before the next connect */
	enum store_conn_state state;
	struct pg_conn *pg;
	struct event *io_ev;
	evutil_socket_t io_fd;
	short io_what;
	int flushing; /* PQflush left data to write */
	struct event *timer_ev;

	/* The pipeline in flight. */
	int busy; /* sent, its sync not arrived */
	int64_t deadline_ms;
	struct pg_result *res;	      /* its statement's result, or the first error */
	int side_rows;		      /* rows its companion statements returned */
	int expect[STORE_EXPECT_MAX]; /* what each result answers (STORE_RES_*, or a prepare) */
	int nexpect;
	int nresults; /* results so far */
	int nulls;    /* PQgetResult NULLs in a row */

	/* Prepared statements. */
	int named_mode; /* 1 named statements, 0 unnamed, -1 detect at each connect */
	int named;	/* this connection sends named statements */
	int named_told; /* what the log last said of detection: -1 nothing yet */
	uint64_t prepared[(STORE_NAMED_IDS + 63) / 64]; /* the named ones this session has */
	char names[STORE_NAMED_IDS][STORE_NAME_MAX];
};

/* A store event for the project log; error is libpq's text, or NULL. */
void store_log(enum log_level level, const char *msg, const char *error);

/*
 * Set c up, not connected yet: dns and dns_timeout_ms, conninfo (copied;
 * NULL: libpq's defaults), timeout_ms for a connect, named as store_new's.
 * 0, or -1 when out of memory (store_conn_free then frees what was made).
 */
int store_conn_init(struct store_conn *c, struct event_base *base, struct evdns_base *dns,
		    int64_t dns_timeout_ms, const char *conninfo, int64_t timeout_ms, int named,
		    const struct store_conn_cbs *cb, void *arg);

/* Start connecting; a failure is reported as lost, then retried after the backoff. */
void store_conn_start(struct store_conn *c);

/* Close and free everything; no callback runs. */
void store_conn_free(struct store_conn *c);

/* 1 while connected. */
int store_conn_ready(const struct store_conn *c);

/*
 * Give up on the connection: log msg (and error, or NULL), call lost,
 * close it and connect again after the backoff, which doubles. error may
 * be store_conn_error's.
 */
void store_conn_fail(struct store_conn *c, const char *msg, const char *error);

/* libpq's message for the connection's last failure. */
const char *store_conn_error(const struct store_conn *c);

/* 1 when whether to send named statements is found out at each connect
 * (prepared_statements auto): the store asks the server's pid
 * (store_sql_probe) and passes the answer to store_conn_probed. Until it
 * arrives the connection sends unnamed statements. */
int store_conn_auto(const struct store_conn *c);

/* The server's pid as the pooler probe answered it: named statements only
 * when it is the one libpq was told at startup (no pooler between). */
void store_conn_probed(struct store_conn *c, const char *pid);

/* Open a pipeline on a connected c; there must be none in flight. */
void store_conn_begin(struct store_conn *c);

/* 1 when statement id (-1: none) will go named and this session has it prepared. */
int store_conn_prepared(const struct store_conn *c, int id);

/*
 * Add stmt to the pipeline: as named statement id when this connection
 * sends named statements (prepared first, from stmt's text, when the
 * session does not have it yet), otherwise or with id -1 unnamed.
 * result_format is STORE_FORMAT_*, what the kind of result it gives
 * (STORE_RES_*). libpq copies what stmt points to. 0 when libpq refused it.
 */
int store_conn_send(struct store_conn *c, int id, const struct store_stmt *stmt, int result_format,
		    int what);

/* End the pipeline with a sync and start sending it: 0, or -1 when it
 * failed (store_conn_error says why). */
int store_conn_sync(struct store_conn *c);

/* Wait for the pipeline's results until deadline_ms (clock_now_ms), when
 * the connection is given up: 0, or -1 when the socket cannot be watched. */
int store_conn_wait(struct store_conn *c, int64_t deadline_ms);

#endif
