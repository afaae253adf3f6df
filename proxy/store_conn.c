/*
 * The store's connection (see store_conn.h). The connection is in
 * pipeline mode: a pipeline is the store's statements for one batch and a
 * sync, so they run in one implicit transaction, and its results come
 * back in the order they were sent: a prepare's, the statement_timeout
 * setting's, those of the statement sent first and of the companions
 * (dropped when they worked), the statement's (kept), each followed by a
 * NULL, then the sync. An error aborts the rest of the transaction,
 * whatever succeeded before it: the first error is the one kept.
 *
 * A batch of up to STORE_NAMED_ROWS operations goes out as a named
 * prepared statement, one per kind, part and row count, prepared on its
 * first use on each connection (PostgreSQL then skips parsing and, once
 * it settles on a generic plan, planning) -- where the connection keeps
 * them: a connection pooler in transaction mode (pgbouncer before 1.21)
 * hands each transaction to any server connection, so there every
 * statement is unnamed PQsendQueryParams and the store keeps no session
 * state. `prepared_statements auto` tells the two apart at each connect:
 * a pooler answers the startup with a backend key of its own, so
 * PQbackendPID differs from the server's pg_backend_pid().
 */
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>
#include <libpq-fe.h>

#include "proxy/clock.h"
#include "proxy/evfree.h"
#include "proxy/store_conn.h"
#include "proxy/store_dns.h"

#define STORE_APPLICATION_NAME "idemproxy"
#define STORE_MSG_MAX 512

static void store_conn_io_event(evutil_socket_t fd, short what, void *arg);

void store_log(enum log_level level, const char *msg, const char *error)
{
	if (level < log_min_level)
		return;
	if (error)
		log_write(level, NULL, "%s: %s", msg, error);
	else
		log_write(level, NULL, "%s", msg);
}

/* libpq notices (server NOTICE/WARNING) go to the log, not raw to stderr. */
static void store_conn_notice(void *arg, const char *message)
{
	store_log(LOG_INFO, "store notice", message);
}

/*
 * Watch the connection's socket for what (EV_READ and/or EV_WRITE). The
 * event is re-created whenever the socket or the interest changes; force
 * re-creates it even when neither did, because libpq may have closed the
 * socket and opened another one under the same number.
 */
static int store_conn_watch(struct store_conn *c, short what, int force)
{
	evutil_socket_t fd = PQsocket(c->pg);

	if (fd < 0)
		return -1;
	if (!force && c->io_ev && c->io_fd == fd && c->io_what == what)
		return 0;
	evfree_event(&c->io_ev);
	c->io_fd = fd;
	c->io_what = what;
	c->io_ev = event_new(c->base, fd, what | EV_PERSIST, store_conn_io_event, c);
	if (!c->io_ev || event_add(c->io_ev, NULL) < 0)
		return -1;
	return 0;
}

/* Close the connection, if any, and forget its socket event and session. */
static void store_conn_close(struct store_conn *c)
{
	evfree_event(&c->io_ev);
	c->io_fd = -1;
	c->io_what = 0;
	PQfinish(c->pg);
	c->pg = NULL;
	c->flushing = 0;
	/* A new session has no prepared statement yet. */
	memset(c->prepared, 0, sizeof(c->prepared));
	c->named = c->named_mode == 1;
}

/* Arm the timer for the pipeline in flight's deadline (or not, with none). */
static void store_conn_arm(struct store_conn *c)
{
	struct timeval tv;

	if (!c->busy) {
		event_del(c->timer_ev);
		return;
	}
	tv = clock_tv(c->deadline_ms - clock_now_ms());
	event_add(c->timer_ev, &tv);
}

void store_conn_fail(struct store_conn *c, const char *msg, const char *error)
{
	struct timeval tv;

	store_log(LOG_WARN, msg, error);
	store_dns_free(c->lookup);
	c->lookup = NULL;
	c->cb->lost(c->arg);
	c->busy = 0;
	PQclear(c->res);
	c->res = NULL;
	c->nresults = 0;
	c->nulls = 0;
	store_conn_close(c);
	c->state = STORE_DISCONNECTED;
	tv = clock_tv(c->backoff_ms);
	event_add(c->timer_ev, &tv);
	c->backoff_ms *= 2;
	if (c->backoff_ms > STORE_BACKOFF_MAX_MS)
		c->backoff_ms = STORE_BACKOFF_MAX_MS;
}

/* Start connecting with libpq's parameters (see PQconnectStartParams). */
static void store_conn_connect(struct store_conn *c, const char *const *keywords,
			       const char *const *values, int expand_dbname)
{
	struct timeval tv;

	c->pg = PQconnectStartParams(keywords, values, expand_dbname);
	if (!c->pg) {
		store_conn_fail(c, "store connect failed", "out of memory");
		return;
	}
	if (PQstatus(c->pg) == CONNECTION_BAD) {
		store_conn_fail(c, "store connect failed", PQerrorMessage(c->pg));
		return;
	}
	PQsetNoticeProcessor(c->pg, store_conn_notice, NULL);
	c->state = STORE_CONNECTING;
	/* libpq's rule: before the first PQconnectPoll, wait for writability. */
	if (store_conn_watch(c, EV_WRITE, 1) < 0) {
		store_conn_fail(c, "store connect failed", "cannot watch the socket");
		return;
	}
	tv = clock_tv(c->timeout_ms);
	event_add(c->timer_ev, &tv);
}

/* The conninfo's host names were looked up: connect to the addresses. */
static void store_conn_resolved(void *arg, struct store_dns *d, const char *error)
{
	struct store_conn *c = arg;

	if (error) {
		store_conn_fail(c, "store host name lookup failed", error);
		return;
	}
	c->lookup = NULL;
	event_del(c->timer_ev);
	/* libpq copies the parameters. */
	store_conn_connect(c, store_dns_keywords(d), store_dns_values(d), 0);
	store_dns_free(d);
}

void store_conn_start(struct store_conn *c)
{
	static const char *const keywords[] = {"dbname", "fallback_application_name", NULL};
	const char *values[] = {c->conninfo, STORE_APPLICATION_NAME, NULL};
	struct timeval tv;
	int oom = 0;

	/* Host names are looked up here, without blocking, at every connect,
	 * so a name that moves is followed; libpq would block on them. */
	if (c->dns) {
		c->lookup = store_dns_start(c->base, c->dns, c->conninfo, STORE_APPLICATION_NAME,
					    store_conn_resolved, c, &oom);
		if (oom) {
			store_conn_fail(c, "store connect failed", "out of memory");
			return;
		}
		if (c->lookup) {
			c->state = STORE_RESOLVING;
			tv = clock_tv(c->dns_timeout_ms);
			event_add(c->timer_ev, &tv);
			return;
		}
	}
	/* The conninfo string goes in as dbname, which libpq expands. */
	store_conn_connect(c, keywords, values, 1);
}

/* Advance the connect state machine after socket activity. */
static void store_conn_poll(struct store_conn *c)
{
	short what;

	switch (PQconnectPoll(c->pg)) {
	case PGRES_POLLING_READING:
		what = EV_READ;
		break;
	case PGRES_POLLING_WRITING:
		what = EV_WRITE;
		break;
	case PGRES_POLLING_OK:
		if (PQsetnonblocking(c->pg, 1) != 0 || PQenterPipelineMode(c->pg) != 1 ||
		    store_conn_watch(c, EV_READ, 1) < 0) {
			store_conn_fail(c, "store connect failed", PQerrorMessage(c->pg));
			return;
		}
		c->state = STORE_CONNECTED;
		event_del(c->timer_ev);
		store_log(LOG_INFO, "store connected", NULL);
		c->cb->connected(c->arg);
		return;
	default:
		store_conn_fail(c, "store connect failed", PQerrorMessage(c->pg));
		return;
	}
	/* With multi-host conninfo the socket may have changed under us. */
	if (store_conn_watch(c, what, 1) < 0)
		store_conn_fail(c, "store connect failed", PQerrorMessage(c->pg));
}

/* The timer: reconnect, connect deadline or the pipeline's deadline. */
static void store_conn_timer_event(evutil_socket_t fd, short what, void *arg)
{
	struct store_conn *c = arg;

	char msg[STORE_MSG_MAX];

	switch (c->state) {
	case STORE_DISCONNECTED:
		store_conn_start(c);
		break;
	case STORE_RESOLVING:
		snprintf(msg, sizeof(msg), "%s: no answer within %lld ms (resolver_timeout)",
			 store_dns_pending(c->lookup), (long long)c->dns_timeout_ms);
		store_conn_fail(c, "store host name lookup failed", msg);
		break;
	case STORE_CONNECTING:
		store_conn_fail(c, "store connect timed out", NULL);
		break;
	case STORE_CONNECTED:
		if (c->busy && c->deadline_ms <= clock_now_ms())
			store_conn_fail(c, "store round trip timed out", NULL);
		else
			store_conn_arm(c);
		break;
	}
}

/* 1 when res is not a statement's success. */
static int store_conn_res_failed(const PGresult *res)
{
	ExecStatusType status = PQresultStatus(res);

	return status != PGRES_TUPLES_OK && status != PGRES_COMMAND_OK;
}

/* The sync arrived: the pipeline's answer goes to the store. */
static void store_conn_synced(struct store_conn *c)
{
	PGresult *res = c->res;

	c->res = NULL;
	c->nresults = 0;
	c->busy = 0;
	/* The backoff starts over once a statement worked, not on connect:
	 * a server that accepts connections but fails every statement (read
	 * only, say) keeps being retried at the longer interval. */
	if (!store_conn_res_failed(res))
		c->backoff_ms = STORE_BACKOFF_MIN_MS;
	c->cb->synced(c->arg, res, c->side_rows);
}

/* One result of the pipeline (not the sync's), which this takes over. */
static void store_conn_result(struct store_conn *c, PGresult *res)
{
	int what = c->nresults < c->nexpect ? c->expect[c->nresults] : STORE_RES_MAIN;

	c->nresults++;
	if (what >= 0 && PQresultStatus(res) == PGRES_COMMAND_OK) {
		/* A prepare that worked: the session has it from now on
		 * (prepared statements outlive an aborted transaction). */
		c->prepared[what / 64] |= UINT64_C(1) << (what % 64);
		PQclear(res);
	} else if ((what == STORE_RES_TIMEOUT || what == STORE_RES_SIDE ||
		    what == STORE_RES_FIRST) &&
		   !store_conn_res_failed(res)) {
		c->side_rows += what == STORE_RES_SIDE ? PQntuples(res) : 0;
		PQclear(res);
	} else if (!c->res) {
		c->res = res;
	} else if (store_conn_res_failed(res) && !store_conn_res_failed(c->res)) {
		PQclear(c->res);
		c->res = res;
	} else {
		PQclear(res);
	}
}

/* Collect the results of the pipeline in flight as far as they have arrived. */
static void store_conn_read(struct store_conn *c)
{
	PGresult *res;

	while (c->busy && !PQisBusy(c->pg)) {
		res = PQgetResult(c->pg);
		if (!res) {
			/* NULL ends one statement's results; two in a row
			 * mean libpq has nothing more for this pipeline. */
			if (c->nulls++) {
				store_conn_fail(c, "store pipeline out of step",
						PQerrorMessage(c->pg));
				return;
			}
			continue;
		}
		c->nulls = 0;
		if (PQresultStatus(res) == PGRES_PIPELINE_SYNC) {
			PQclear(res);
			store_conn_synced(c);
		} else {
			store_conn_result(c, res);
		}
	}
}

/* Pass the notifications that arrived to the store. */
static void store_conn_notifies(struct store_conn *c)
{
	PGnotify *n;

	while (c->pg && (n = PQnotifies(c->pg))) {
		c->cb->notify(c->arg, n->extra);
		PQfreemem(n);
	}
}

/* Socket activity: connect progress, or input / output of a pipeline. */
static void store_conn_io_event(evutil_socket_t fd, short what, void *arg)
{
	struct store_conn *c = arg;
	int r;

	if (c->state == STORE_CONNECTING) {
		store_conn_poll(c);
		return;
	}
	if ((what & EV_READ) && !PQconsumeInput(c->pg)) {
		store_conn_fail(c, "store connection lost", PQerrorMessage(c->pg));
		return;
	}
	if (PQstatus(c->pg) == CONNECTION_BAD) {
		store_conn_fail(c, "store connection lost", PQerrorMessage(c->pg));
		return;
	}
	if (c->flushing) {
		r = PQflush(c->pg);
		if (r < 0) {
			store_conn_fail(c, "store connection lost", PQerrorMessage(c->pg));
			return;
		}
		c->flushing = r;
		if (store_conn_watch(c, r ? EV_READ | EV_WRITE : EV_READ, 0) < 0) {
			store_conn_fail(c, "store connection lost", "cannot watch the socket");
			return;
		}
	}
	store_conn_read(c);
	store_conn_notifies(c);
}

int store_conn_init(struct store_conn *c, struct event_base *base, struct evdns_base *dns,
		    int64_t dns_timeout_ms, const char *conninfo, int64_t timeout_ms, int named,
		    const struct store_conn_cbs *cb, void *arg)
{
	memset(c, 0, sizeof(*c));
	c->cb = cb;
	c->arg = arg;
	c->base = base;
	c->dns = dns;
	c->dns_timeout_ms = dns_timeout_ms;
	c->timeout_ms = timeout_ms;
	c->backoff_ms = STORE_BACKOFF_MIN_MS;
	c->io_fd = -1;
	c->named_mode = named;
	c->named = named == 1;
	c->named_told = -1;
	for (int id = 0; id < STORE_NAMED_IDS; id++)
		store_sql_name(id, c->names[id]);
	c->conninfo = strdup(conninfo ? conninfo : "");
	c->timer_ev = evtimer_new(base, store_conn_timer_event, c);
	return c->conninfo && c->timer_ev ? 0 : -1;
}

void store_conn_free(struct store_conn *c)
{
	store_dns_free(c->lookup);
	c->lookup = NULL;
	evfree_event(&c->io_ev);
	evfree_event(&c->timer_ev);
	PQclear(c->res);
	c->res = NULL;
	PQfinish(c->pg);
	c->pg = NULL;
	free(c->conninfo);
	c->conninfo = NULL;
}

int store_conn_ready(const struct store_conn *c)
{
	return c->state == STORE_CONNECTED;
}

const char *store_conn_error(const struct store_conn *c)
{
	return PQerrorMessage(c->pg);
}

int store_conn_auto(const struct store_conn *c)
{
	return c->named_mode < 0;
}

void store_conn_probed(struct store_conn *c, const char *pid)
{
	c->named = strtol(pid, NULL, 10) == PQbackendPID(c->pg);
	if (c->named == c->named_told)
		return;
	c->named_told = c->named;
	log_info(NULL, c->named ? "store connection is direct: named prepared statements"
				: "store connection goes through a connection pooler (its backend "
				  "pid is not the server's): unnamed statements only");
}

void store_conn_begin(struct store_conn *c)
{
	c->busy = 1;
	c->nexpect = 0;
	c->side_rows = 0;
}

int store_conn_prepared(const struct store_conn *c, int id)
{
	return c->named && id >= 0 && c->prepared[id / 64] >> (id % 64) & 1;
}

int store_conn_send(struct store_conn *c, int id, const struct store_stmt *stmt, int result_format,
		    int what)
{
	if (id < 0 || !c->named) {
		c->expect[c->nexpect++] = what;
		return PQsendQueryParams(c->pg, stmt->sql, stmt->nparams, stmt->types, stmt->values,
					 stmt->lengths, stmt->formats, result_format);
	}
	if (!store_conn_prepared(c, id)) {
		if (!PQsendPrepare(c->pg, c->names[id], stmt->sql, stmt->nparams, stmt->types))
			return 0;
		c->expect[c->nexpect++] = id;
	}
	c->expect[c->nexpect++] = what;
	return PQsendQueryPrepared(c->pg, c->names[id], stmt->nparams, stmt->values, stmt->lengths,
				   stmt->formats, result_format);
}

int store_conn_sync(struct store_conn *c)
{
	int r = PQpipelineSync(c->pg) ? PQflush(c->pg) : -1;

	if (r >= 0)
		c->flushing = r;
	return r;
}

int store_conn_wait(struct store_conn *c, int64_t deadline_ms)
{
	c->deadline_ms = deadline_ms;
	if (store_conn_watch(c, c->flushing ? EV_READ | EV_WRITE : EV_READ, 0) < 0)
		return -1;
	store_conn_arm(c);
	return 0;
}
