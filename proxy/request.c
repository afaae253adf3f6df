/*
 * The request state machine: what happens to a request, top to bottom.
 *
 *   NEW --(safe method, unmatched path, optional key absent)--> FORWARDING --> DONE
 *   NEW --(key, actor, fingerprint checked; no cached record)--> CLAIMING
 *   CLAIMING --owner--> FORWARDING --> RECORDING --(written)--> DONE
 *   CLAIMING --existing record, store down--> DONE
 *   CLAIMING --in progress, in_progress wait--> WAITING --woken--> CLAIMING
 *   RECORDING --store down: answered anyway--> RETRYING --> DONE
 *   every path ends in DONE, where the request is counted, logged and freed.
 *
 * request_set_state() checks each move against request_next[] and owns the
 * waiter list. Answering is not a state: the answer_* helpers write the one
 * response a client gets and let go of its connection. The owner's outcome
 * is written before its answer is released, so a retry never sees less
 * than the client saw. A request outlives its client connection: a client
 * that goes away does not abandon the record.
 */
#include "proxy/request.h"

#include <event2/buffer.h>
#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>

#include "conf/conf.h"
#include "http/grpc.h"
#include "http/header.h"
#include "proxy/actor.h"
#include "proxy/admit.h"
#include "proxy/cache.h"
#include "proxy/clock.h"
#include "proxy/conf_gen.h"
#include "proxy/conn.h"
#include "proxy/evalloc.h"
#include "proxy/evfree.h"
#include "proxy/fingerprint.h"
#include "proxy/forward.h"
#include "proxy/http.h"
#include "proxy/idemkey.h"
#include "proxy/log.h"
#include "proxy/lookup.h"
#include "proxy/keysource.h"
#include "proxy/opname.h"
#include "proxy/outcome.h"
#include "proxy/pace.h"
#include "proxy/quota.h"
#include "proxy/record.h"
#include "proxy/relay.h"
#include "proxy/replay.h"
#include "proxy/respond.h"
#include "proxy/role.h"
#include "proxy/scope.h"
#include "proxy/stats.h"
#include "proxy/store.h"
#include "proxy/text.h"
#include "proxy/trace.h"
#include "proxy/upstream.h"
#include "proxy/waiters.h"

#define RECORD_RETRY_MIN_MS 100
#define RECORD_RETRY_MAX_MS 2000

_Static_assert(RECORD_FINGERPRINT_LEN == FINGERPRINT_LEN, "record and fingerprint sizes differ");

enum request_state {
	REQ_NEW,
	REQ_CLAIMING,   /* waiting for the store's claim */
	REQ_WAITING,    /* a duplicate waiting for the owner (in_progress wait) */
	REQ_FORWARDING, /* waiting for the upstream */
	REQ_RECORDING,  /* writing the owner's outcome, its answer held back */
	REQ_RETRYING,   /* answered; the outcome write is being retried */
	REQ_DONE,
	REQ_STATES,
};

static const char *const request_state_names[] = {
	[REQ_NEW] = "new",		 [REQ_CLAIMING] = "claiming",	[REQ_WAITING] = "waiting",
	[REQ_FORWARDING] = "forwarding", [REQ_RECORDING] = "recording", [REQ_RETRYING] = "retrying",
	[REQ_DONE] = "done",
};

/* The moves each state allows. DONE is reachable from everywhere: a
 * request may be abandoned in any state at the end of shutdown. */
#define TO(s) (1u << (s))
static const unsigned request_next[REQ_STATES] = {
	[REQ_NEW] = TO(REQ_CLAIMING) | TO(REQ_FORWARDING) | TO(REQ_DONE),
	[REQ_CLAIMING] = TO(REQ_CLAIMING) | TO(REQ_WAITING) | TO(REQ_FORWARDING) |
			 TO(REQ_RECORDING) | TO(REQ_DONE),
	[REQ_WAITING] = TO(REQ_CLAIMING) | TO(REQ_DONE),
	[REQ_FORWARDING] = TO(REQ_RECORDING) | TO(REQ_DONE),
	[REQ_RECORDING] = TO(REQ_RETRYING) | TO(REQ_DONE),
	[REQ_RETRYING] = TO(REQ_DONE),
	[REQ_DONE] = 0,
};
#undef TO

_Static_assert(sizeof(request_state_names) / sizeof(request_state_names[0]) == REQ_STATES,
	       "request_state_names must name every state");

/* What an owner's record becomes, and the outcome that names it. */
enum request_write {
	WRITE_NONE,    /* no owner's record decided */
	WRITE_FINISH,  /* the response stored: retries replay it */
	WRITE_RELEASE, /* the claim released: a retry runs again */
	WRITE_UNKNOWN, /* the outcome recorded unknown */
};

static const enum outcome request_write_outcomes[] = {
	[WRITE_NONE] = OUT_NONE,	  [WRITE_FINISH] = OUT_OWNER,
	[WRITE_RELEASE] = OUT_RELEASED, [WRITE_UNKNOWN] = OUT_UNKNOWN,
};

struct request_ctx {
	struct event_base *base;
	struct conf_gens *gens;
	struct store *store;
	struct upstream_pool *pool;
	struct cache *cache;
	struct actor_ctx *actor;       /* what actor sources keep: verified tokens */
	struct pace *pace;	       /* owner durations, all workers': Retry-After */
	struct admit *admit;	       /* owners in flight, all workers': max_owners */
	struct stats *stats;
	uint64_t next_id;
	int past_deadline;	       /* shutdown_timeout passed: last writes only */
	LIST_HEAD(, request) requests;
	struct waiters *waiters;       /* REQ_WAITING's; kept by request_set_state */
	int nrequests, nforwarding;
	int nadmitted;		       /* its requests counted as owners in flight */
};

/* One request from the moment its message is complete to its last write. */
struct request {
	LIST_ENTRY(request) link;
	struct request_ctx *ctx;
	struct client_conn *conn;   /* NULL once answered or the client went away */
	const struct conf *conf;
	struct conf_gen *gen;       /* holds conf while the request runs */
	const struct route *route;
	struct http_msg *msg;
	enum request_state state;
	enum role role;             /* what it is to idemproxy (role.h) */
	int grpc;                   /* a gRPC call (its Content-Type): gRPC answers and status */
	enum outcome outcome;       /* what became of it: set from what happened */
	enum request_write write;   /* an owner's: what its record becomes */
	struct log_tag tag;         /* what its log lines say about it */
	struct trace trace;	    /* its request id and trace context (tag's) */
	struct trace owner;	    /* a replay's: the owner's ids, from its record */
	int status;                 /* status sent to the client, for the log */
	int64_t retry_after_ms;     /* a problem's Retry-After; 0: the default */
	int64_t quota_retry_ms;     /* its actor is over a quota: when a retry may find room */
	int64_t key_expires_ms;     /* the owner's record was written: its time left */
	/* Clock readings (*_sent_us) apart from the durations they make: a
	 * duration grows when what it times ends, at the latest with req. */
	int64_t started_us;         /* its first byte arrived */
	int64_t upstream_sent_us;   /* the exchange under way began (forwarding) */
	int64_t store_sent_us;      /* the pending store operation was sent */
	int64_t upstream_us;        /* duration: waiting for the upstream, exchanges ended */
	int64_t store_us;           /* duration: waiting for the store, operations answered */

	char key[IDEMKEY_MAX + 1];
	size_t key_len;
	char *actor;
	char *operation;            /* its scope's, when operation_from names it; NULL: the route's */
	struct record_stored stored; /* the owner's record as the store writes it */
	struct scope scope;
	unsigned char fp[FINGERPRINT_LEN];
	int64_t generation;
	int64_t lease_deadline_us;  /* local monotonic end of our lease */
	struct waiter wait;         /* in_progress wait: its scope's token, its deadline */
	int admitted;               /* counted as an owner in flight (admit.h) until freed */
	int admit_counted;          /* ... and its actor with it (actor_max_owners) */
	int limited;                /* a limit refused its claim: 1 + enum stats_limit, 0: none */
	char forward_key[SCOPE_FORWARD_KEY_SIZE]; /* forward_key scoped: what goes upstream */

	const char *upgrade;        /* the protocol it may switch to (its msg's), or NULL */
	struct relay *relay;        /* the exchange with the upstream, once forwarded */
	int forwarding;             /* ... and still under way */
	int streamed;               /* the relay wrote the response (its body is not kept) */
	enum upstream_result up_result;
	struct http_msg *resp;      /* the upstream's response (the relay's) */
	struct event *retry_timer;
	int64_t retry_ms;           /* current backoff of the outcome write */
};

static void request_intercept(struct request *req);
static void request_claim(struct request *req);
static void claim_done_cb(void *arg, enum store_result res, int64_t generation,
			  const struct record *rec);
static void request_existing(struct request *req, const struct record *rec, int cached);
static int request_wait(struct request *req);
static void request_forward(struct request *req, int streamed);
static void request_relay_done(void *arg, enum upstream_result res, struct http_msg *resp,
			  int answered);
static void request_owner_result(struct request *req, enum upstream_result res);
static void request_record(struct request *req);
static void record_done_cb(void *arg, enum store_result res);
static void request_set_state(struct request *req, enum request_state state);
static void request_done(struct request *req);

/* ---- answers ---- */

/* The client's one answer, if it is still there: a problem; outcome is what it tells. */
static void request_answer_problem(struct request *req, enum outcome outcome,
				   enum problem_kind kind, const char *detail)
{
	req->outcome = outcome;
	req->status = respond_problem(req->conn, req->conf, req->route, kind, detail, req->retry_after_ms,
				      respond_flags(req->msg));
	req->conn = NULL;
}

/* Answer with a problem before anything was claimed, and finish. */
static void request_reject(struct request *req, enum problem_kind kind, const char *detail)
{
	req->role = ROLE_REFUSED;
	request_answer_problem(req, OUT_REJECTED, kind, detail);
	request_done(req);
}

/*
 * The client's one answer after the upstream: its response, or what became
 * of the request. A response the relay streamed is already there: an
 * owner's last bytes go out now, after the record.
 */
static void request_answer_upstream(struct request *req)
{
	int flags = respond_flags(req->msg);

	if (req->streamed) {
		if (req->up_result == UPSTREAM_OK)
			relay_release(req->relay);
		req->status = req->resp ? req->resp->status : 0;
	} else if (req->resp && req->up_result == UPSTREAM_OK)
		req->status = respond_relay(req->conn, req->resp, flags,
					    req->role == ROLE_UNENFORCED, req->key_expires_ms);
	else
		req->status = respond_upstream_failure(req->conn, req->conf, req->route, req->up_result,
						       flags);
	req->conn = NULL;
}

/* ---- from the client's request to the claim ---- */

/* 1 when m is a gRPC call its route r passes through (grpc streaming pass). */
static int request_grpc_passes(const struct route *r, const struct http_msg *m)
{
	return r->grpc_streaming == GRPC_STREAMING_PASS &&
	       grpc_content_type(http_msg_known(m, HTTP_N_CONTENT_TYPE));
}

int request_streams(const struct conf *conf, const struct http_msg *head)
{
	const struct route *r;

	if (http_method_is_safe(head->method))
		return 1;
	r = lookup_route(conf, head->method, head->path, head->path_len, NULL);
	return !r || request_grpc_passes(r, head) ||
	       (r->key == KEY_OPTIONAL && !keysource_maybe(conf, r, head));
}

void request_start(struct request_ctx *ctx, struct client_conn *c, struct http_msg *msg,
		   int streamed)
{
	struct request *req = evalloc_calloc(sizeof(*req));

	if (!req) {
		http_msg_free(msg);
		request_refuse(ctx, c, PROBLEM_STORE_UNAVAILABLE, "out of memory");
		return;
	}
	req->ctx = ctx;
	req->conn = c;
	req->gen = conf_gens_hold(ctx->gens);
	req->conf = req->gen->conf;
	req->msg = msg;
	req->tag.seq = ++ctx->next_id;
	trace_of(&req->trace, http_msg_known(msg, HTTP_N_X_REQUEST_ID),
		 http_msg_header(msg, "traceparent"));
	req->tag.request_id = req->trace.request_id;
	req->started_us = c->started_us;
	req->state = REQ_NEW;
	req->wait.arg = req;
	conn_attach(c, req);
	conn_set_request_id(c, req->trace.request_id);
	LIST_INSERT_HEAD(&ctx->requests, req, link);
	ctx->nrequests++;

	if (!http_method_is_safe(msg->method))
		req->route =
		    lookup_route(req->conf, msg->method, msg->path, msg->path_len, msg->path);
	if (req->route)
		req->tag.route = req->route->operation;
	req->grpc = grpc_content_type(http_msg_known(msg, HTTP_N_CONTENT_TYPE));
	if (!req->route || streamed || request_grpc_passes(req->route, msg)) {
		req->role = ROLE_PASS;
		request_forward(req, streamed);
		return;
	}
	request_intercept(req);
}

/*
 * The key of req from its route's source, into req->key. Without one, an
 * optional key's request is forwarded and a required one's rejected, as
 * is an invalid one: the result says which (KEYSOURCE_NOMEM: not answered).
 */
static enum keysource_result request_key(struct request *req)
{
	const struct route *r = req->route;
	enum keysource_result res = keysource_get(req->conf, r, req->msg, req->key, &req->key_len);
	char detail[256];

	if (res == KEYSOURCE_ABSENT && r->key == KEY_OPTIONAL) {
		req->role = ROLE_PASS;
		request_forward(req, 0);
	} else if (res == KEYSOURCE_ABSENT) {
		snprintf(detail, sizeof(detail),
			 "this operation requires an idempotency key (%s%s%s)",
			 keysource_wording(r)->before, keysource_name(req->conf, r),
			 keysource_wording(r)->after);
		request_reject(req, PROBLEM_KEY_MISSING, detail);
	} else if (res == KEYSOURCE_INVALID) {
		req->key_len = 0;
		request_reject(req, PROBLEM_KEY_INVALID,
			       "an idempotency key is one value of 1 to 255 visible ASCII characters");
	}
	return res;
}

/*
 * The scope's operation as the route's operation_from names it, into
 * req->operation: 0. Or -1: req was forwarded (a GraphQL query or
 * subscription) or refused.
 */
static int request_operation(struct request *req, const unsigned char *body, size_t len)
{
	char detail[256];

	switch (opname_of_request(req->route, req->msg, body, len, &req->operation, detail,
				  sizeof(detail))) {
	case OPNAME_SCOPED:
		if (req->operation) /* its log lines name the scope's operation */
			req->tag.route = req->operation;
		return 0;
	case OPNAME_PASS:
		req->role = ROLE_PASS;
		request_forward(req, 0);
		return -1;
	case OPNAME_BAD:
		request_reject(req, PROBLEM_BAD_REQUEST, detail);
		return -1;
	default:
		log_error(&req->tag, "out of memory");
		request_reject(req, PROBLEM_STORE_UNAVAILABLE, "the request could not be processed");
		return -1;
	}
}

/* A matched unsafe request: key, actor and fingerprint, then the record. */
static void request_intercept(struct request *req)
{
	const struct route *r = req->route;
	struct http_msg *m = req->msg;
	const struct record *cached;
	enum actor_result res;
	const char *why = NULL;
	char detail[128];
	size_t len = evbuffer_get_length(m->body);
	const unsigned char *body = len ? evbuffer_pullup(m->body, -1) : NULL;
	long messages;

	/* A call is recorded whole: one request message (unary or
	 * server-streaming). Client-streaming and bidirectional calls are
	 * refused before anything goes upstream. */
	if (req->grpc &&
	    (messages = grpc_messages(len ? evbuffer_pullup(m->body, -1) : NULL, len)) != 1) {
		if (messages < 0)
			request_reject(req, PROBLEM_BAD_REQUEST,
				       "the request body is not whole gRPC messages");
		else
			request_reject(req, PROBLEM_GRPC_STREAMING,
				       messages ? "this method is recorded by idemproxy: a call sends "
						  "one request message, not a stream"
						: "a call sends one request message; this one sent none");
		return;
	}
	/* A GraphQL query or subscription passes, whatever its key; the
	 * operation a JSON body names is looked for once the key is there. */
	if (r->operation_from == OPFROM_GRAPHQL && request_operation(req, body, len) < 0)
		return;
	switch (request_key(req)) {
	case KEYSOURCE_FOUND:
		break;
	case KEYSOURCE_NOMEM:
		goto fail;
	default:
		return; /* answered */
	}
	req->tag.key = req->key;
	req->tag.key_len = req->key_len;
	if ((r->operation_from == OPFROM_JSON || r->operation_from == OPFROM_JSONRPC) &&
	    request_operation(req, body, len) < 0)
		return;

	res = actor_from_request(req->ctx->actor, req->gen, r, m, &req->actor, &why);
	if (res == ACTOR_NOMEM)
		goto fail;
	if (res != ACTOR_OK) {
		request_reject(req,
			       res == ACTOR_ABSENT ? PROBLEM_ACTOR_MISSING : PROBLEM_ACTOR_INVALID,
			       actor_refusal(r, res, why, detail, sizeof(detail)));
		return;
	}

	if (fingerprint_of_request(r, m, body, len, req->fp) < 0)
		goto fail;

	req->scope = (struct scope){req->actor, req->operation ? req->operation : r->operation,
				    req->key};
	/* Completed records never change until they expire: a cached one
	 * answers a retry, or a conflicting one, with no round trip. */
	cached = cache_get(req->ctx->cache, &req->scope, clock_now_us());
	if (cached)
		request_existing(req, cached, 1);
	else
		request_claim(req);
	return;
fail:
	log_error(&req->tag, "out of memory");
	request_reject(req, PROBLEM_STORE_UNAVAILABLE, "the request could not be processed");
}

/*
 * Count req as an owner in flight before its claim is sent (admit.h):
 * 0, or -1 when max_owners or its actor's actor_max_owners is reached
 * (req->limited says which): its claim then only looks (STORE_PEEK), so
 * that a replay, a conflict or a duplicate in progress is answered as
 * ever, and only a request that would become an owner is refused.
 */
static int request_admit(struct request *req)
{
	const struct conf *conf = req->conf;
	int actor_max = req->route->actor_max_owners;
	enum admit_result res;

	req->limited = 0;
	/* An actor over a quota makes no new record, but replays its own. */
	switch (quota_check(req->actor, &req->quota_retry_ms)) {
	case QUOTA_RECORDS:
		req->limited = 1 + STATS_LIMIT_ACTOR_MAX_RECORDS;
		return -1;
	case QUOTA_BYTES:
		req->limited = 1 + STATS_LIMIT_ACTOR_MAX_BYTES;
		return -1;
	case QUOTA_UNDER:
		break;
	}
	if (req->admitted)
		return 0;
	res = admit_take(req->ctx->admit, conf->max_owners, req->actor, actor_max,
			 conf->max_owners > 0 ? conf->max_owners : conf->max_connections,
			 &req->admit_counted);
	if (res == ADMIT_OK || res == ADMIT_NOMEM) { /* out of memory: not refused for it */
		req->admitted = res == ADMIT_OK;
		req->ctx->nadmitted += req->admitted;
		return 0;
	}
	req->limited = 1 + (res == ADMIT_MAX_OWNERS ? STATS_LIMIT_MAX_OWNERS
						      : STATS_LIMIT_ACTOR_MAX_OWNERS);
	return -1;
}

/* req is no longer an owner in flight, if it was counted as one. */
static void request_unadmit(struct request *req)
{
	if (!req->admitted)
		return;
	admit_give(req->ctx->admit, req->actor, req->admit_counted);
	req->ctx->nadmitted--;
	req->admitted = 0;
	req->admit_counted = 0;
}

/* A limit refused req's claim, and the store found no record it would answer: 429. */
static void request_limited(struct request *req)
{
	static const char *const detail[STATS_LIMITS] = {
	    [STATS_LIMIT_MAX_OWNERS] = "too many requests with an idempotency key are in "
				       "progress on this instance (max_owners); retry later",
	    [STATS_LIMIT_ACTOR_MAX_OWNERS] = "too many requests of this actor with an idempotency "
					     "key are in progress (actor_max_owners); retry later",
	    [STATS_LIMIT_ACTOR_MAX_RECORDS] = "the actor holds actor_max_records records; new keys "
					      "are refused until some expire",
	    [STATS_LIMIT_ACTOR_MAX_BYTES] = "the actor's records hold actor_max_stored_bytes bytes; "
					    "new keys are refused until some expire",
	};
	enum stats_limit why = (enum stats_limit)(req->limited - 1);
	int quota = why == STATS_LIMIT_ACTOR_MAX_RECORDS || why == STATS_LIMIT_ACTOR_MAX_BYTES;

	STATS_ADD(req->ctx->stats->limited[why], 1);
	log_debug(&req->tag, "claim refused: %s reached", stats_limit_name(why));
	/* An owner's place frees when one ends: about one owner's duration; a
	 * quota's when the actor's oldest record expires (quota_check). */
	req->retry_after_ms =
	    quota ? req->quota_retry_ms
		  : pace_retry_ms(req->ctx->pace, req->route->stats_id, 0, req->conf->lease_ms);
	req->role = ROLE_REFUSED;
	request_answer_problem(req, OUT_REJECTED,
			       quota ? PROBLEM_ACTOR_QUOTA : PROBLEM_TOO_MANY_REQUESTS, detail[why]);
}

/* Claim the scope: own it, or learn who does. */
static void request_claim(struct request *req)
{
	int flags = req->route->recovery == RECOVERY_FORWARD ? STORE_RECOVER : 0;

	if (request_admit(req) < 0)
		flags |= STORE_PEEK;
	request_set_state(req, REQ_CLAIMING);
	waiters_claiming(req->ctx->waiters, &req->wait);
	/* The lease runs from the moment the claim was sent, not answered. */
	req->store_sent_us = clock_now_us();
	req->lease_deadline_us = req->store_sent_us + req->conf->lease_ms * 1000;
	if (!(flags & STORE_PEEK))
		STATS_ADD(req->ctx->stats->claims, 1);
	store_claim(req->ctx->store, &req->scope, req->fp, req->trace.request_id,
		    req->trace.trace_id[0] ? req->trace.trace_id : NULL, req->conf->lease_ms, flags,
		    claim_done_cb, req);
}

/* A store operation of req was answered: count its round trip. */
static void request_store_answered(struct request *req)
{
	int64_t us = clock_now_us() - req->store_sent_us;

	req->store_us += us;
	stats_observe(&req->ctx->stats->hist[STATS_STORE_SECONDS], us);
}

static void claim_done_cb(void *arg, enum store_result res, int64_t generation,
			  const struct record *rec)
{
	struct request *req = arg;

	request_store_answered(req);
	switch (res) {
	case STORE_OK:
		req->role = ROLE_OWNER;
		req->generation = generation;
		if (req->ctx->past_deadline) /* shutting down: nothing more goes upstream */
			request_owner_result(req, UPSTREAM_NOT_SENT);
		else
			request_forward(req, 0);
		return;
	case STORE_EXISTS:
		request_unadmit(req); /* not an owner */
		request_existing(req, rec, 0);
		return;
	case STORE_VACANT: /* the claim a limit refused would have owned the slot */
		request_limited(req);
		break;
	case STORE_FENCED:
	case STORE_UNAVAILABLE:
		/* Fail-open forwards, but nothing new goes upstream after the
		 * shutdown deadline, nor beyond a limit. */
		if (req->limited) {
			request_limited(req);
			break;
		}
		if (req->conf->store_unavailable == STORE_FAIL_OPEN && !req->ctx->past_deadline) {
			req->role = ROLE_UNENFORCED;
			request_forward(req, 0);
			return;
		}
		req->role = ROLE_REFUSED;
		request_answer_problem(req, OUT_STORE_DOWN, PROBLEM_STORE_UNAVAILABLE,
				       "the idempotency store is unavailable");
		break;
	case STORE_LOST:
		/* The claim may have committed: forwarding now, even fail-open,
		 * could run the request while a retry finds it in progress. The
		 * store removes the claim; the client retries. */
		req->role = ROLE_REFUSED;
		request_answer_problem(req, OUT_STORE_DOWN, PROBLEM_STORE_UNAVAILABLE,
				       "the idempotency store did not confirm the claim; retry");
		break;
	}
	request_done(req);
}

/* ---- an existing record ---- */

/* Remember a completed record for replays without a round trip. */
static void request_cache_put(struct request *req, const struct record *rec, int64_t ttl_ms)
{
	cache_put(req->ctx->cache, &req->scope, rec, ttl_ms * 1000, clock_now_us());
}

/*
 * Judge rec, a completed record of req's request read from the store,
 * before its replay (record_read): RECORD_READ_OK with *plain to replay
 * and *mem to free, or req answered (outcome-unknown, or key-unavailable
 * while a key rotation reaches this instance) and the reason logged.
 */
static enum record_read request_read_stored(struct request *req, const struct record *rec,
					    struct record *plain, void **mem)
{
	char why[RECORD_WHY_MAX];
	enum record_read r = record_to_replay(req->gen->secrets, req->route, &req->scope, rec,
					      plain, mem, why, sizeof(why));

	if (r == RECORD_READ_LATER) {
		log_warn(&req->tag, "%s", why);
		request_answer_problem(req, OUT_STORE_DOWN, PROBLEM_KEY_UNAVAILABLE,
				       "the stored outcome of the first request with this key is "
				       "sealed with a key this instance does not have yet; retry");
	} else if (r == RECORD_READ_REFUSED) {
		/* Never replayed, never run again: an operator decides. */
		log_error(&req->tag, "%s", why);
		request_answer_problem(req, OUT_UNKNOWN, PROBLEM_OUTCOME_UNKNOWN,
				       "the stored outcome of the first request with this key "
				       "cannot be read");
	}
	return r;
}

/* Send rec as req's replay: a JSON-RPC call's with req's own id (opname_replay_body). */
static void request_replay(struct request *req, const struct record *rec)
{
	struct record with;
	unsigned char *body;
	size_t len;
	int rc = opname_replay_body(req->route, req->msg, rec, &body, &len);

	if (rc < 0) {
		log_error(&req->tag, "out of memory");
		request_answer_problem(req, OUT_STORE_DOWN, PROBLEM_STORE_UNAVAILABLE,
				       "the replay could not be made; retry");
		return;
	}
	if (rc > 0) {
		with = *rec;
		with.body = body;
		with.body_len = len;
		rec = &with;
	}
	req->status = replay_send(req->conn, rec, respond_flags(req->msg),
				  req->route && req->route->errors == ERRORS_STRIPE);
	req->conn = NULL;
	free(body);
}

/*
 * The key's record is a tombstone (expired_keys refuse): its outcome has
 * expired, and the key is refused, never run again, until the tombstone's
 * window ends. Whatever the fingerprint: the key was used.
 */
static void request_expired(struct request *req, const struct record *rec)
{
	char detail[160];

	req->role = ROLE_REFUSED; /* nothing ran, nothing is replayed */
	STATS_ADD(req->ctx->stats->limited[STATS_LIMIT_EXPIRED_KEY], 1);
	snprintf(detail, sizeof(detail),
		 "this Idempotency-Key completed at %s; its stored outcome has expired and "
		 "the key is refused for a while",
		 rec->completed_at ? rec->completed_at : "an unknown time");
	request_answer_problem(req, OUT_REJECTED, PROBLEM_KEY_EXPIRED, detail);
	request_done(req);
}

/*
 * Another request holds the scope; rec is its record, from the replay
 * cache (cached: judged when it was read or written) or from the store. A
 * different request gets a conflict, a completed record its replay, an
 * unknown or abandoned one outcome-unknown, a running one in-progress (or
 * a wait for it).
 */
static void request_existing(struct request *req, const struct record *rec, int cached)
{
	struct record plain;
	void *mem = NULL;

	req->role = ROLE_DUPLICATE;
	if (rec->state == RECORD_EXPIRED) {
		request_expired(req, rec);
		return;
	}
	if (!cached && rec->state == RECORD_COMPLETED &&
	    memcmp(rec->fingerprint, req->fp, FINGERPRINT_LEN) == 0) {
		if (request_read_stored(req, rec, &plain, &mem) != RECORD_READ_OK) {
			request_done(req);
			return;
		}
		rec = &plain;
	}
	if (memcmp(rec->fingerprint, req->fp, FINGERPRINT_LEN) != 0) {
		STATS_ADD(req->ctx->stats->conflicts, 1);
		request_answer_problem(req, OUT_CONFLICT, PROBLEM_CONFLICT,
				       "this Idempotency-Key was used with a different request");
	} else if (rec->state == RECORD_COMPLETED) {
		if (!cached)
			request_cache_put(req, rec, rec->expires_in_ms);
		req->outcome = OUT_REPLAY;
		/* Its log line names the owner's request (as far as it fits). */
		text_copy(req->owner.request_id, sizeof(req->owner.request_id),
			  rec->request_id ? rec->request_id : "");
		text_copy(req->owner.trace_id, sizeof(req->owner.trace_id),
			  rec->trace_id ? rec->trace_id : "");
		STATS_ADD(req->ctx->stats->replays[cached], 1);
		request_replay(req, rec);
	} else if (rec->state == RECORD_UNKNOWN || rec->lease_expired) {
		request_answer_problem(req, OUT_UNKNOWN, PROBLEM_OUTCOME_UNKNOWN,
				       "the outcome of the first request with this key is unknown");
	} else if (req->route->in_progress == IN_PROGRESS_WAIT && request_wait(req)) {
		return;
	} else {
		/* When its owner should be done, from how long this route's
		 * owners take and how long this one has run. */
		req->retry_after_ms = pace_retry_ms(req->ctx->pace, req->route->stats_id,
					      req->conf->lease_ms - rec->lease_remaining_ms,
					      rec->lease_remaining_ms);
		request_answer_problem(req, OUT_IN_PROGRESS, PROBLEM_IN_PROGRESS,
				       "a request with this Idempotency-Key is still being processed");
	}
	free(mem); /* the replay and the cache copied what they keep */
	request_done(req);
}

/* ---- duplicates waiting for their owner (in_progress wait) ---- */

/*
 * A duplicate found the owner still running and its route lets it wait:
 * hold it (REQ_WAITING) until the owner's write wakes it (request_wake)
 * or its wait ends, then claim again (at once, when the wake-up came while
 * the claim was out). Returns 0 when the wait is over, nobody is left to
 * answer, the worker holds enough waiters or is past its shutdown
 * deadline: the caller answers in-progress.
 */
static int request_wait(struct request *req)
{
	enum waiters_hold hold;

	if (!req->wait.deadline_us) {
		req->wait.deadline_us = clock_now_us() + req->route->in_progress_wait_ms * 1000;
		scope_token(&req->scope, req->wait.token);
		STATS_ADD(req->ctx->stats->waits, 1);
	}
	if (!req->conn || req->ctx->past_deadline)
		return 0;
	hold = waiters_hold(req->ctx->waiters, &req->wait, req->conf->max_connections,
			    req->conf->workers);
	if (hold == WAITERS_HELD)
		request_set_state(req, REQ_WAITING);
	else if (hold == WAITERS_WOKEN)
		request_claim(req);
	return hold != WAITERS_OVER;
}

static void request_claim_again(void *arg)
{
	request_claim(arg);
}

void request_wake(struct request_ctx *ctx, const char *token)
{
	waiters_wake(ctx->waiters, token);
}

/* ---- the upstream ---- */

/*
 * forward_key: on its route the client's header of that name never goes
 * upstream; an owner's request (and one forwarded unenforced, its store
 * down) carries idemproxy's: the scope's digest, the same for every
 * attempt at it, or the client's key as sent.
 */
static void request_forward_key(struct request *req, struct forward_view *v)
{
	const struct route *r = req->route;

	if (!r || (r->forward_key != FORWARD_KEY_SCOPED && r->forward_key != FORWARD_KEY_RAW))
		return;
	v->key_header = r->forward_key_header;
	if ((req->role != ROLE_OWNER && req->role != ROLE_UNENFORCED) || !req->key_len)
		return;
	if (r->forward_key == FORWARD_KEY_RAW) {
		v->key_value = req->key;
		return;
	}
	scope_forward_key(&req->scope, req->forward_key);
	v->key_value = req->forward_key[0] ? req->forward_key : NULL;
}

/* Hand the request to a relay, with the parameters of what it is (relay_params_init). */
static void request_forward(struct request *req, int streamed)
{
	int owner = req->role == ROLE_OWNER;
	struct relay_params p;
	int dropped;

	relay_params_init(&p, req->conf, req->conn, req->msg, owner, req->role == ROLE_UNENFORCED);
	p.view.request_id = req->trace.request_id;
	request_forward_key(req, &p.view);
	dropped = forward_dropped_names(req->msg, &p.view);

	/* Forwarded without a claim: the outcome says so, whatever the upstream does. */
	if (!owner)
		req->outcome = req->role == ROLE_PASS ? OUT_PASS : OUT_UNENFORCED;
	req->upgrade = p.upgrade;
	if (dropped) {
		STATS_ADD(req->ctx->stats->dropped_underscore, dropped);
		log_debug(&req->tag,
			  "%d header(s) with \"_\" in the name not forwarded "
			  "(underscores_in_headers off)",
			  dropped);
	}
	request_set_state(req, REQ_FORWARDING);
	req->upstream_sent_us = clock_now_us();
	req->forwarding = 1;
	req->ctx->nforwarding++;
	req->relay = relay_start(req->ctx->base, req->ctx->pool, req->conn, req->msg, streamed, &p,
				 request_relay_done, req);
	if (!req->relay) /* nothing left this process: out of memory before sending */
		request_relay_done(req, UPSTREAM_NOT_SENT, NULL, 0);
}

/* The exchange with the upstream is over (ended, cut off, or req ended): its duration counts. */
static void request_forwarded(struct request *req)
{
	int64_t us;

	if (!req->forwarding)
		return;
	us = clock_now_us() - req->upstream_sent_us;
	req->forwarding = 0;
	req->ctx->nforwarding--;
	req->upstream_us += us;
	stats_observe(&req->ctx->stats->hist[STATS_UPSTREAM_SECONDS], us);
}

/* The exchange ends before the relay's own end: what it answered stays known, the relay goes. */
static void request_cut_off(struct request *req)
{
	req->streamed = relay_answered(req->relay);
	req->status = relay_status(req->relay);
	relay_free(req->relay);
	req->relay = NULL;
	request_forwarded(req);
}

static void request_relay_done(void *arg, enum upstream_result res, struct http_msg *resp,
			  int answered)
{
	struct request *req = arg;

	request_forwarded(req);
	req->resp = resp;
	req->streamed = answered;
	if (req->role == ROLE_OWNER) {
		request_owner_result(req, res);
		return;
	}
	req->up_result = res;
	request_answer_upstream(req);
	request_done(req);
}

/* ---- the owner's record ---- */

/*
 * What a gRPC call's answer makes of its record: its grpc-status (in the
 * trailers, or in the head of a trailers-only answer) releases it
 * (grpc_release_on), marks it unknown (grpc_unknown_on) or lets it be
 * stored. Without a status the call did not end as gRPC says it must, and
 * a response too large to keep would replay as a call with no messages:
 * both are unknown.
 */
static enum request_write request_grpc_write(struct request *req)
{
	size_t len = 0;
	const char *v = http_msg_field(req->resp, "grpc-status", &len);
	int code = v ? grpc_status_value(v, len) : -1;

	if (code < 0 || req->streamed ||
	    evbuffer_get_length(req->resp->body) > req->conf->max_stored_body)
		return WRITE_UNKNOWN;
	if (status_set_has(&req->route->grpc_release_on, code))
		return WRITE_RELEASE;
	return status_set_has(&req->route->grpc_unknown_on, code) ? WRITE_UNKNOWN : WRITE_FINISH;
}

/*
 * What the upstream did decides what the owner's record becomes, and so
 * its outcome: the response stored (record_to_store), the claim released
 * (a release_on status, or nothing sent), or the outcome unknown (an
 * unknown_on status, a failure after sending, or a response that cannot be
 * stored). Then it is written.
 */
static void request_owner_result(struct request *req, enum upstream_result res)
{
	const struct route *r = req->route;
	enum record_store kept;
	int omitted;

	req->up_result = res;
	req->status = res == UPSTREAM_OK ? req->resp->status : respond_upstream_status(res);
	if (res != UPSTREAM_OK)
		req->write = res == UPSTREAM_NOT_SENT ? WRITE_RELEASE : WRITE_UNKNOWN;
	else if (status_set_has(&r->release_on, req->status))
		req->write = WRITE_RELEASE;
	else if (status_set_has(&r->unknown_on, req->status))
		req->write = WRITE_UNKNOWN;
	else
		req->write = req->grpc && req->status == 200 ? request_grpc_write(req) : WRITE_FINISH;
	if (req->write == WRITE_FINISH) {
		/* A streamed body was not kept: over max_stored_body. */
		omitted = req->streamed ||
			  evbuffer_get_length(req->resp->body) > req->conf->max_stored_body;
		kept = record_to_store(req->gen->secrets, r, &req->scope, req->generation, req->fp,
				       req->resp, omitted, &req->stored);
		if (kept == RECORD_STORE_UNSEALED) /* never stored in the clear */
			log_error(&req->tag, "record sealing failed: the record is marked unknown");
		req->write = kept == RECORD_STORE_OK ? WRITE_FINISH : WRITE_UNKNOWN;
	}
	req->outcome = request_write_outcomes[req->write];
	request_set_state(req, REQ_RECORDING);
	request_record(req);
}

/* Duplicates may wait for this route's owners: their writes notify. */
static int request_write_flags(const struct request *req)
{
	return req->route->in_progress == IN_PROGRESS_WAIT ? STORE_NOTIFY : 0;
}

/* Write the owner's record: finish, release or unknown. */
static void request_record(struct request *req)
{
	struct store *st = req->ctx->store;
	const struct record_stored *s = &req->stored;
	int flags = request_write_flags(req);

	req->store_sent_us = clock_now_us();
	switch (req->write) {
	case WRITE_FINISH:
		store_finish(st, &req->scope, req->generation, req->status, s->headers,
			     s->headers_len, s->body, s->body_len, s->plain.body_omitted, s->key_id,
			     req->route->retention_ms,
			     req->route->expired_keys == EXPIRED_KEYS_REFUSE ? req->route->expired_keys_ms
									     : 0,
			     flags, record_done_cb, req);
		break;
	case WRITE_RELEASE:
		store_release(st, &req->scope, req->generation, flags, record_done_cb, req);
		break;
	default: /* WRITE_UNKNOWN */
		store_mark_unknown(st, &req->scope, req->generation, flags, record_done_cb, req);
		break;
	}
}

static void record_retry_cb(evutil_socket_t fd, short what, void *arg)
{
	request_record(arg);
}

/*
 * The write could not be made: retry it with backoff while the lease
 * lasts. Returns 0 when it will be retried, -1 when it is given up.
 */
static int request_record_retry(struct request *req)
{
	struct timeval tv;

	if (clock_now_us() >= req->lease_deadline_us) {
		log_error(&req->tag, "record write abandoned: store unavailable until the lease ended");
		return -1;
	}
	if (!req->retry_timer)
		req->retry_timer = evtimer_new(req->ctx->base, record_retry_cb, req);
	if (!req->retry_timer)
		return -1;
	req->retry_ms = req->retry_ms ? req->retry_ms * 2 : RECORD_RETRY_MIN_MS;
	if (req->retry_ms > RECORD_RETRY_MAX_MS)
		req->retry_ms = RECORD_RETRY_MAX_MS;
	tv = clock_tv(req->retry_ms);
	evtimer_add(req->retry_timer, &tv);
	return 0;
}

static void record_done_cb(void *arg, enum store_result res)
{
	struct request *req = arg;
	char token[SCOPE_TOKEN_SIZE];

	request_store_answered(req);
	switch (res) {
	case STORE_OK:
		if (req->write == WRITE_FINISH) {
			/* The record lives retention from its write; so does its
			 * cached copy, whose expiry counts from when the finish was
			 * sent: no later than the database's completed_at. */
			req->key_expires_ms = req->route->retention_ms -
					      (clock_now_us() - req->store_sent_us) / 1000;
			if (req->key_expires_ms > 0) {
				req->stored.plain.request_id = req->trace.request_id;
				req->stored.plain.trace_id =
				    req->trace.trace_id[0] ? req->trace.trace_id : NULL;
				request_cache_put(req, &req->stored.plain, req->key_expires_ms);
			}
		}
		/* Local waiters need not wait for the notification's trip. */
		if (request_write_flags(req)) {
			scope_token(&req->scope, token);
			request_wake(req->ctx, token);
		}
		break;
	case STORE_FENCED:
		STATS_ADD(req->ctx->stats->fenced, 1);
		log_warn(&req->tag, "record write refused: the lease generation changed");
		break;
	case STORE_EXISTS:
	case STORE_VACANT:
	case STORE_UNAVAILABLE:
	case STORE_LOST:
		/* The answer goes out anyway; the write is retried while the
		 * lease lasts, and retries meanwhile see operation-in-progress. */
		if (req->state == REQ_RECORDING) {
			request_answer_upstream(req);
			request_set_state(req, REQ_RETRYING);
		}
		if (request_record_retry(req) == 0)
			return;
		break;
	}
	if (req->state == REQ_RECORDING)
		request_answer_upstream(req);
	request_done(req);
}

/* ---- states and the end ---- */

/* A move request_next[] does not allow is a bug: the checked build stops at it. */
static void request_bad_move(const struct request *req, enum request_state state)
{
	log_error(&req->tag, "bug: request state %s -> %s is not a move the state machine allows",
		  request_state_names[req->state], request_state_names[state]);
#ifdef IDEMPROXY_CHECKS
	abort();
#endif
}

/* An outcome req's role may not end with is a bug, like a bad move. */
static void request_bad_end(const struct request *req)
{
	log_error(&req->tag, "bug: a request of role %s ended with outcome %s",
		  role_name(req->role), outcome_name(req->outcome));
#ifdef IDEMPROXY_CHECKS
	abort();
#endif
}

/* Move req to state; entering and leaving REQ_WAITING keeps the waiter list. */
static void request_set_state(struct request *req, enum request_state state)
{
	if (!(request_next[req->state] & (1u << state)))
		request_bad_move(req, state);
	log_debug(&req->tag, "state %s -> %s", request_state_names[req->state],
		  request_state_names[state]);
	if (req->state == REQ_WAITING)
		waiters_remove(req->ctx->waiters, &req->wait);
	if (state == REQ_WAITING)
		waiters_add(req->ctx->waiters, &req->wait);
	req->state = state;
}

static void request_free(struct request *req)
{
	struct request_ctx *ctx = req->ctx;

	LIST_REMOVE(req, link);
	ctx->nrequests--;
	request_unadmit(req);
	if (req->conn)
		conn_attach(req->conn, NULL);
	request_forwarded(req);
	relay_free(req->relay);
	record_stored_free(&req->stored);
	waiters_forget(&req->wait);
	evfree_event(&req->retry_timer);
	http_msg_free(req->msg);
	free(req->actor);
	free(req->operation);
	conf_gens_drop(ctx->gens, req->gen);
	evalloc_free(req);
}

/* A finished request in the counters and the access log: every answer goes through here. */
static void request_account(struct request_ctx *ctx, const struct log_tag *tag, int route_id,
			    enum outcome outcome, struct log_access *a)
{
	struct stats *s = ctx->stats;

	STATS_ADD(s->requests[route_id][outcome], 1);
	stats_observe(&s->duration[route_id][outcome], a->duration_us);
	a->outcome = outcome_name(outcome);
	log_access(tag, a);
}

/* What a replay's log line names of its owner: id, or NULL for any other outcome. */
static const char *request_replay_of(const struct request *req, const char *id)
{
	return req->outcome == OUT_REPLAY && id[0] ? id : NULL;
}

/* The end of every request: an exchange under way ends with it; counted, logged, freed. */
static void request_done(struct request *req)
{
	int64_t duration_us;

	request_forwarded(req);
	duration_us = clock_now_us() - req->started_us;
	if (!role_may_end(req->role, req->outcome))
		request_bad_end(req);
	if (req->write == WRITE_FINISH)
		pace_owner_done(req->ctx->pace, req->route->stats_id, duration_us / 1000);
	request_set_state(req, REQ_DONE);
	request_account(req->ctx, &req->tag, req->route ? req->route->stats_id : STATS_NO_ROUTE,
			req->outcome,
			&(struct log_access){
			    .method = req->msg->method,
			    .path = req->msg->target,
			    .path_len = req->msg->raw_path_len,
			    .status = req->status,
			    .upgrade = req->status == 101 ? req->upgrade : NULL,
			    .duration_us = duration_us,
			    .upstream_us = req->upstream_us,
			    .store_us = req->store_us,
			    .trace_id = req->trace.trace_id,
			    .parent_id = req->trace.parent_id,
			    .actor = req->actor,
			    .replay_of_request_id = request_replay_of(req, req->owner.request_id),
			    .replay_of_trace_id = request_replay_of(req, req->owner.trace_id),
			});
	request_free(req);
}

void request_refuse(struct request_ctx *ctx, struct client_conn *c, enum problem_kind kind,
		    const char *detail)
{
	const struct http_msg *head = http_parser_head_complete(c->parser) ? http_parser_msg(c->parser)
									     : NULL;
	struct trace t;
	struct log_tag tag = {.seq = ++ctx->next_id, .request_id = t.request_id};
	struct log_access a = {
	    .method = head ? head->method : "-",
	    .path = head ? head->target : "-",
	    .path_len = head ? head->raw_path_len : 1,
	    .duration_us = clock_now_us() - c->started_us,
	};
	int row;

	trace_of(&t, head ? http_msg_known(head, HTTP_N_X_REQUEST_ID) : NULL,
		 head ? http_msg_header(head, "traceparent") : NULL);
	a.trace_id = t.trace_id;
	a.parent_id = t.parent_id;
	conn_set_request_id(c, t.request_id);
	/* The log line is written before the answer may free c (and head). */
	a.status = respond_problem_status(conf_gens_conf(ctx->gens), NULL, kind);
	row = stats_refusal(a.status);
	if (row >= 0)
		STATS_ADD(ctx->stats->refusals[row], 1);
	request_account(ctx, &tag, STATS_NO_ROUTE, OUT_REJECTED, &a);
	respond_problem(c, conf_gens_conf(ctx->gens), NULL, kind, detail, 0,
			RESPOND_CLOSE | (head ? respond_flags(head) & RESPOND_GRPC : 0));
}

void request_conn_gone(struct request *req)
{
	req->conn = NULL;
	if (req->forwarding && relay_conn_gone(req->relay)) {
		/* A pass-through exchange or a tunnel ends with its client. */
		request_cut_off(req);
		request_done(req);
	} else if (req->state == REQ_WAITING) {
		req->outcome = OUT_IN_PROGRESS;
		request_done(req);
	}
}

/*
 * An owner still at the upstream is cut off and its record marked unknown
 * (a retry must not run it again, and should not wait for the lease to
 * learn that), or released when not a byte of it was sent; a claim that
 * lands from now on is released without forwarding (see claim_done_cb); a
 * waiting duplicate is answered in-progress. The worker then gives these
 * writes one store_timeout before it stops.
 */
void request_deadline_all(struct request_ctx *ctx)
{
	struct request *req = LIST_FIRST(&ctx->requests), *next;
	int unsent;

	ctx->past_deadline = 1;
	for (; req; req = next) {
		next = LIST_NEXT(req, link);
		if (req->state == REQ_WAITING) {
			request_answer_problem(req, OUT_IN_PROGRESS, PROBLEM_IN_PROGRESS,
					       "idemproxy is shutting down");
			request_done(req);
		} else if (req->state == REQ_FORWARDING && req->role == ROLE_OWNER) {
			unsent = relay_unsent(req->relay);
			log_warn(&req->tag,
				 "shutdown_timeout passed with the request at the upstream: %s",
				 unsent ? "nothing was sent, releasing its record"
					: "recording its outcome as unknown");
			/* A response under way is cut short. */
			request_cut_off(req);
			request_owner_result(req, unsent ? UPSTREAM_NOT_SENT : UPSTREAM_CUT_OFF);
		}
	}
}

struct request_ctx *request_ctx_new(struct event_base *base, struct conf_gens *gens,
				    struct store *st, struct upstream_pool *pool,
				    struct cache *cache, struct pace *pace, struct admit *admit,
				    struct stats *stats, uint64_t first_id)
{
	struct request_ctx *ctx = calloc(1, sizeof(*ctx));

	if (!ctx)
		return NULL;
	*ctx = (struct request_ctx){.base = base, .gens = gens, .store = st, .pool = pool,
				    .cache = cache, .pace = pace, .admit = admit, .stats = stats,
				    .next_id = first_id};
	LIST_INIT(&ctx->requests);
	ctx->actor = actor_ctx_new();
	ctx->waiters = waiters_new(base, request_claim_again);
	if (!ctx->actor || !ctx->waiters) {
		request_ctx_free(ctx);
		return NULL;
	}
	return ctx;
}

void request_ctx_free(struct request_ctx *ctx)
{
	struct request *req;

	if (!ctx)
		return;
	while ((req = LIST_FIRST(&ctx->requests))) {
		log_warn(&req->tag, "request abandoned at shutdown in state %s",
			 request_state_names[req->state]);
		request_set_state(req, REQ_DONE);
		request_free(req);
	}
	actor_ctx_free(ctx->actor);
	waiters_free(ctx->waiters);
	free(ctx);
}

int request_count(const struct request_ctx *ctx)
{
	return ctx->nrequests;
}

int request_owners(const struct request_ctx *ctx)
{
	return ctx->nadmitted;
}

int request_forwarding(const struct request_ctx *ctx)
{
	return ctx->nforwarding;
}

void request_input(struct request *req, enum request_input what)
{
	int bad = what == REQUEST_BODY_BAD;

	if (!req->forwarding)
		return;
	if (!bad && what != REQUEST_BODY_TIMEOUT) {
		relay_input(req->relay, what == REQUEST_BODY_END);
		return;
	}
	/* The client broke off its streamed body: the upstream never gets the
	 * rest; the client's connection closes. */
	log_warn(&req->tag, "the client's streamed body %s; exchange abandoned",
		 bad ? "was malformed" : "stalled for client_timeout");
	request_cut_off(req);
	if (!req->streamed && req->conn)
		req->status = respond_problem(req->conn, req->conf, req->route,
					      bad ? PROBLEM_BAD_REQUEST : PROBLEM_REQUEST_TIMEOUT,
					      bad ? "the request body is malformed"
						  : "the request body stalled for client_timeout",
					      0, respond_flags(req->msg) | RESPOND_CLOSE);
	req->conn = NULL;
	request_done(req);
}

void request_output_drained(struct request *req)
{
	if (req->forwarding)
		relay_output_drained(req->relay);
}
