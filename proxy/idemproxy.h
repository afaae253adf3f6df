/*
 * Shared types of the proxy: the worker that owns an event loop, the
 * downstream connection, and the request state machine.
 */
#ifndef IDEMPROXY_H
#define IDEMPROXY_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/queue.h>

#include "conf/conf.h"
#include "proxy/fingerprint.h"
#include "proxy/idemkey.h"
#include "proxy/log.h"
#include "proxy/outcome.h"
#include "proxy/problem.h"
#include "proxy/stats.h"
#include "proxy/store.h"

struct event_base;
struct event;
struct evdns_base;
struct evconnlistener;
struct bufferevent;
struct evbuffer;
struct http_msg;
struct http_parser;
struct upstream_pool;
struct upstream_req;
struct cache;

/* Recent wake-ups a worker remembers, for claims answered after one (a power of two). */
#define WAKE_RING_SIZE 256

/*
 * A configuration in use. The main thread and every worker hold it, and a
 * worker keeps holding a replaced one while its requests still use it; the
 * last release frees it. Only reloads and request ends touch the count.
 */
struct conf_gen {
	struct conf *conf;
	atomic_int holders;
};

/* A replaced configuration some of a worker's requests still use. */
struct retired_gen {
	LIST_ENTRY(retired_gen) link;
	struct conf_gen *gen;
	int requests;
};

/*
 * One worker: an event loop with its own listener, connections, upstream
 * pool and store. Nothing in it is shared with another worker, so the
 * request path takes no lock.
 */
struct worker {
	struct event_base *base;
	struct evdns_base *dns;
	const struct conf *conf;    /* gen->conf: what new requests use */
	struct conf_gen *gen;
	int gen_requests;           /* requests that use gen */
	LIST_HEAD(, retired_gen) retired;
	_Atomic(struct conf_gen *) pending_gen;  /* handed over by a reload */
	struct event *reload_ev;
	struct evconnlistener *listener;
	struct store *store;
	int listening;              /* the store LISTENs (a route may wait) */
	struct upstream_pool *pool;
	struct cache *cache;        /* completed records, for replays */
	char owner_id[96];          /* lease owner: host:pid:worker */
	uint64_t next_request_id;
	int id;
	int draining;               /* stopped accepting; exit when idle */
	int past_deadline;          /* shutdown_timeout passed: last writes only */
	int64_t drain_deadline_us;
	struct event *drain_timer;
	struct event *stop_ev;      /* activated from the main thread */
	struct event *tick_timer;   /* access lines out, gauges refreshed */
	pthread_t thread;
	LIST_HEAD(, client_conn) conns;
	LIST_HEAD(, request) requests;
	LIST_HEAD(, request) waiters;  /* duplicates waiting for an owner */
	char wake_ring[WAKE_RING_SIZE][SCOPE_TOKEN_SIZE]; /* "" for a wake-all */
	uint64_t wakes;                /* wake-ups so far; the ring holds the last ones */
	int nconns, nrequests, nforwarding;
	struct stats stats;            /* written here, read by the admin listener */
};

/* A downstream client connection (listener.c). */
struct client_conn {
	LIST_ENTRY(client_conn) link;
	struct worker *w;
	struct bufferevent *bev;
	struct http_parser *parser;
	struct request *req;        /* the request being served, or NULL */
	struct event *timer;        /* client_timeout: request delivery / idle */
	struct event *next_ev;      /* response written: go on from the loop */
	struct event *read_ev;      /* the socket is readable (io_read_now) */
	int read_paused;            /* input buffer full: read_ev removed */
	char peer[64];              /* client address, for X-Forwarded-For */
	int close_after;            /* close once the response is written */
	int writing;                /* a response is being written out */
	int continued;              /* 100 Continue sent for this request */
	int lingering;              /* write side shut, draining input */
};

enum request_state {
	REQ_NEW,
	REQ_CLAIMING,      /* waiting for the store's claim */
	REQ_WAITING,       /* a duplicate waiting for the owner (in_progress wait) */
	REQ_FORWARDING,    /* waiting for the upstream */
	REQ_RECORDING,     /* writing the outcome (finish/release/unknown) */
	REQ_RESPONDING,    /* response handed to the client connection */
	REQ_RETRYING,      /* response sent; outcome write still being retried */
	REQ_DONE,
};

enum record_write {
	WRITE_NONE,
	WRITE_FINISH,
	WRITE_RELEASE,
	WRITE_UNKNOWN,
};

/* One request from the moment its message is complete to its last write. */
struct request {
	LIST_ENTRY(request) link;
	struct worker *w;
	struct client_conn *conn;   /* NULL once the client went away */
	const struct conf *conf;
	struct conf_gen *gen;       /* holds conf while the request runs */
	const struct route *route;
	struct http_msg *msg;
	enum request_state state;
	enum outcome outcome;
	struct log_tag tag;         /* what its log lines say about it */
	uint64_t id;
	int64_t started_us;
	int64_t upstream_us;        /* time spent waiting for the upstream */
	int64_t store_us;           /* time spent waiting for the store */
	int64_t store_sent_us;      /* when the pending store operation was sent */

	char key[IDEMKEY_MAX + 1];
	size_t key_len;
	char *actor;
	struct scope scope;
	unsigned char fp[FINGERPRINT_LEN];
	int64_t generation;
	int64_t lease_deadline_us;  /* local monotonic end of our lease */
	LIST_ENTRY(request) wait_link;
	struct event *wait_timer;
	int64_t wait_deadline_us;   /* in_progress wait: when to stop waiting */
	char token[SCOPE_TOKEN_SIZE]; /* the scope in store notifications */
	uint64_t wakes_seen;        /* w->wakes when the last claim was sent */

	struct upstream_req *up;
	struct http_msg *resp;      /* the upstream's response */
	enum record_write write;
	char *stored_headers;       /* "Name: value\r\n" lines to record */
	size_t stored_headers_len;
	int body_omitted;
	struct event *retry_timer;
	int64_t retry_ms;           /* current backoff of the outcome write */
	int64_t finish_sent_us;     /* when the finish was last sent */
	int unenforced;             /* fail-open pass-through */
	int status;                 /* status sent to the client, for the log */
};

/* worker.c */
struct conf_gen *conf_gen_new(struct conf *conf);
void conf_gen_release(struct conf_gen *gen);
int worker_init(struct worker *w, int id, struct conf_gen *gen)
	__attribute__((warn_unused_result));
/* Hand a new configuration to the worker (from the main thread). */
void worker_reload(struct worker *w, struct conf_gen *gen);
/* The configuration a new request uses, and its release at the end. */
struct conf_gen *worker_conf_get(struct worker *w);
void worker_conf_put(struct worker *w, struct conf_gen *gen);
int worker_start(struct worker *w) __attribute__((warn_unused_result));
void worker_stop(struct worker *w);
void worker_join(struct worker *w);
void worker_free(struct worker *w);

/* listener.c */
int listener_start(struct worker *w) __attribute__((warn_unused_result));
void listener_stop(struct worker *w);

enum respond_flags {
	RESPOND_CLOSE = 1,        /* close the connection after this response */
	RESPOND_NO_LENGTH = 2,    /* head already frames the body (HEAD, 204, 304) */
	RESPOND_KEEP_ALIVE = 4,   /* HTTP/1.0 client asked for keep-alive: say yes */
	RESPOND_HEAD = 8,         /* answer to HEAD: headers only, no body bytes */
};

/*
 * A response on c, written straight into its output buffer: start returns
 * that buffer (the caller adds the status line and header lines, each with
 * CRLF) and detaches the connection's request; frame adds Content-Length
 * (unless RESPOND_NO_LENGTH), Connection and the blank line; then the
 * caller adds body_len bytes of body and calls send, which writes what it
 * can at once; the connection then reads the next request or closes.
 */
struct evbuffer *conn_respond_start(struct client_conn *c);
void conn_respond_frame(struct client_conn *c, size_t body_len, int flags);
void conn_respond_send(struct client_conn *c);
void conn_close_idle(struct worker *w);
void conn_free_all(struct worker *w);

/* problem.c's body, sent as a whole response on c (request.c). */
void respond_problem(struct client_conn *c, const struct conf *conf, enum problem_kind kind,
		     int status, const char *detail, int flags);

/* request.c */
void request_start(struct client_conn *c, struct http_msg *msg);
void request_conn_gone(struct request *req);
void request_free_all(struct worker *w);
/* shutdown_timeout passed: settle every owner's record (see request.c). */
void request_deadline_all(struct worker *w);
/* The owner of the scope named by token (NULL: of any scope) wrote its
 * outcome: the duplicates waiting for it claim again. */
void request_wake(struct worker *w, const char *token);

#endif
