/*
 * The request state machine: what happens to a request, top to bottom.
 *
 *   REQ_NEW --(safe method, unmatched path, optional key absent)--> REQ_FORWARDING
 *   REQ_NEW --(key, actor, fingerprint checked)--> REQ_CLAIMING
 *   REQ_CLAIMING --owner--> REQ_FORWARDING --> REQ_RECORDING --> REQ_RESPONDING
 *   REQ_CLAIMING --existing record / store down--> REQ_RESPONDING
 *   REQ_CLAIMING --in progress, in_progress wait--> REQ_WAITING --woken--> REQ_CLAIMING
 *   REQ_RECORDING --store down--> REQ_RETRYING (response already sent)
 *   every path ends in REQ_DONE, where the request is logged and freed.
 *
 * The owner's outcome is written before its response is released, so a
 * retry never sees less than the client saw. The request outlives its client
 * connection: a client that goes away does not abandon the record.
 */
#include <event2/buffer.h>
#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "proxy/cache.h"
#include "proxy/clock.h"
#include "proxy/http.h"
#include "proxy/idemproxy.h"
#include "proxy/log.h"
#include "proxy/record.h"
#include "proxy/upstream.h"

#define RETRY_AFTER_S 1
#define RECORD_RETRY_MIN_MS 100
#define RECORD_RETRY_MAX_MS 2000
#define ACTOR_HEADER_PREFIX "h:"
#define ANONYMOUS_ACTOR_ID "anonymous"

_Static_assert(RECORD_FINGERPRINT_LEN == FINGERPRINT_LEN, "record and fingerprint sizes differ");
_Static_assert((WAKE_RING_SIZE & (WAKE_RING_SIZE - 1)) == 0, "WAKE_RING_SIZE: a power of two");

static const char *const state_names[] = {
	[REQ_NEW] = "new",           [REQ_CLAIMING] = "claiming", [REQ_WAITING] = "waiting",
	[REQ_FORWARDING] = "forwarding", [REQ_RECORDING] = "recording",
	[REQ_RESPONDING] = "responding", [REQ_RETRYING] = "retrying",
	[REQ_DONE] = "done",
};

static void request_forward(struct request *req);
static void request_record(struct request *req);
static void request_claim_send(struct request *req);

/* Move the request to state, logging the transition at debug level. */
static void request_set_state(struct request *req, enum request_state state)
{
	log_debug(&req->tag, "state %s -> %s", state_names[req->state], state_names[state]);
	req->state = state;
}

static void request_free(struct request *req)
{
	LIST_REMOVE(req, link);
	req->w->nrequests--;
	if (req->conn)
		req->conn->req = NULL;
	if (req->up)
		req->w->nforwarding--;
	upstream_cancel(req->up);
	if (req->state == REQ_WAITING)
		LIST_REMOVE(req, wait_link);
	if (req->wait_timer)
		event_free(req->wait_timer);
	if (req->retry_timer)
		event_free(req->retry_timer);
	http_msg_free(req->msg);
	http_msg_free(req->resp);
	free(req->actor);
	free(req->stored_headers);
	worker_conf_put(req->w, req->gen);
	free(req);
}

static void request_done(struct request *req)
{
	STATS_ADD(req->w->stats.requests[req->route ? req->route->stats_id : STATS_NO_ROUTE]
					[req->outcome],
		  1);
	request_set_state(req, REQ_DONE);
	log_access(&req->tag, &(struct log_access){
				      .method = req->msg->method,
				      .path = req->msg->path,
				      .status = req->status,
				      .outcome = outcome_name(req->outcome),
				      .duration_us = clock_now_us() - req->started_us,
				      .upstream_us = req->upstream_us,
				      .store_us = req->store_us,
			      });
	request_free(req);
}

/* Flags for the client's connection after this request's response. */
static int respond_flags(const struct request *req)
{
	int flags = strcmp(req->msg->method, "HEAD") ? 0 : RESPOND_HEAD;

	if (!req->msg->keep_alive)
		return flags | RESPOND_CLOSE;
	return flags | (req->msg->version_minor == 0 ? RESPOND_KEEP_ALIVE : 0);
}

void respond_problem(struct client_conn *c, const struct conf *conf, enum problem_kind kind,
		     int status, const char *detail, int flags)
{
	struct evbuffer *out;
	size_t len = 0;
	char *json;

	if (status <= 0)
		status = problem_default_status(kind);
	json = problem_render(kind, status, conf->problem_base, detail, &len);
	out = conn_respond_start(c);
	http_add_status_line(out, status, NULL);
	evbuffer_add_printf(out, "Content-Type: application/problem+json\r\n"
				 "Cache-Control: no-store\r\n");
	if (kind == PROBLEM_IN_PROGRESS || kind == PROBLEM_STORE_UNAVAILABLE)
		evbuffer_add_printf(out, "Retry-After: %d\r\n", RETRY_AFTER_S);
	/* Out of memory: the status line still says what happened. */
	conn_respond_frame(c, json ? len : 0, flags | (json ? 0 : RESPOND_CLOSE));
	if (json && !(flags & RESPOND_HEAD))
		evbuffer_add(out, json, len);
	conn_respond_send(c);
	free(json);
}

/* Answer with a problem (if the client is still there) and finish. */
static void request_problem(struct request *req, enum problem_kind kind, const char *detail)
{
	int status = kind == PROBLEM_CONFLICT ? req->conf->mismatch_status : 0;

	req->status = status > 0 ? status : problem_default_status(kind);
	request_set_state(req, REQ_RESPONDING);
	if (req->conn)
		respond_problem(req->conn, req->conf, kind, status, detail, respond_flags(req));
	req->conn = NULL;
}

static void request_reject(struct request *req, enum problem_kind kind, const char *detail)
{
	req->outcome = OUT_REJECTED;
	request_problem(req, kind, detail);
	request_done(req);
}

/* Relay the upstream's response to the client, minus hop-by-hop headers. */
static void request_relay(struct request *req)
{
	struct http_msg *resp = req->resp;
	struct evbuffer *out;
	int flags = respond_flags(req);
	int no_body = (flags & RESPOND_HEAD) || http_status_bodiless(resp->status);

	req->status = resp->status;
	request_set_state(req, REQ_RESPONDING);
	if (!req->conn)
		return;
	out = conn_respond_start(req->conn);
	http_add_status_line(out, resp->status, resp->reason);
	for (int i = 0; i < resp->nheaders; i++) {
		const struct http_header *h = &resp->headers[i];
		if (http_msg_is_hop_header(resp, h->name))
			continue;
		if (!no_body && !strcasecmp(h->name, "Content-Length"))
			continue;
		http_add_header(out, h->name, h->value);
	}
	if (req->unenforced)
		http_add_lit(out, "Idempotency-Enforced: false\r\n");
	if (no_body) {
		conn_respond_frame(req->conn, 0, flags | RESPOND_NO_LENGTH);
	} else {
		conn_respond_frame(req->conn, evbuffer_get_length(resp->body), flags);
		/* By reference: the record may still need these bytes. Should
		 * that fail, the connection closes short of Content-Length, so
		 * the client sees a cut body, never a whole-looking one. */
		if (evbuffer_add_buffer_reference(out, resp->body) < 0)
			req->conn->close_after = 1;
	}
	conn_respond_send(req->conn);
	req->conn = NULL;
}

/* Serve a completed record (from the store or the replay cache). */
static void request_replay(struct request *req, const struct record *rec)
{
	struct evbuffer *out;
	int no_body = http_status_bodiless(rec->status);
	size_t body_len = rec->body_omitted || no_body ? 0 : rec->body_len;

	req->outcome = OUT_REPLAY;
	req->status = rec->status;
	request_set_state(req, REQ_RESPONDING);
	if (req->conn) {
		out = conn_respond_start(req->conn);
		http_add_status_line(out, rec->status, NULL);
		evbuffer_add(out, rec->headers, rec->headers_len);
		http_add_lit(out, "Idempotent-Replayed: true\r\n");
		if (rec->body_omitted)
			http_add_lit(out, "Idempotency-Body-Omitted: true\r\n");
		conn_respond_frame(req->conn, body_len,
				   respond_flags(req) | (no_body ? RESPOND_NO_LENGTH : 0));
		if (body_len)
			evbuffer_add(out, rec->body, body_len);
		conn_respond_send(req->conn);
		req->conn = NULL;
	}
	request_done(req);
}

/* Remember a completed record for replays without a round trip. */
static void request_cache_put(struct request *req, const struct record *e, int64_t ttl_ms)
{
	cache_put(req->w->cache, &req->scope, e, ttl_ms * 1000, clock_now_us());
}

/* The answer of an owner after its outcome was recorded (or given up on). */
static void request_owner_respond(struct request *req)
{
	if (req->state == REQ_RESPONDING || req->state == REQ_RETRYING)
		return;
	if (req->resp && req->outcome != OUT_UNKNOWN) {
		request_relay(req);
		return;
	}
	switch (req->outcome) {
	case OUT_RELEASED:
		request_problem(req, PROBLEM_UPSTREAM_UNAVAILABLE,
				"the upstream could not be reached; nothing was sent");
		break;
	case OUT_UNKNOWN:
		if (req->resp) /* unknown_on: the upstream's own answer */
			request_relay(req);
		else if (req->status == 504)
			request_problem(req, PROBLEM_UPSTREAM_TIMEOUT,
					"the upstream did not answer within upstream_timeout");
		else
			request_problem(req, PROBLEM_UPSTREAM_ERROR,
					"the upstream connection failed after the request was sent");
		break;
	default:
		break;
	}
}

/*
 * The owner's record is written: cache it. Its expiry counts from when the
 * finish was sent, which is no later than the database's completed_at, so
 * the cache never outlives the record's retention.
 */
static void request_cache_finished(struct request *req)
{
	struct record e = {
		.state = RECORD_COMPLETED,
		.status = req->resp->status,
		.headers = req->stored_headers,
		.headers_len = req->stored_headers_len,
		.body_omitted = req->body_omitted,
	};
	int64_t ttl_ms = req->route->retention_ms - (clock_now_us() - req->finish_sent_us) / 1000;

	memcpy(e.fingerprint, req->fp, FINGERPRINT_LEN);
	if (!req->body_omitted) {
		e.body_len = evbuffer_get_length(req->resp->body);
		e.body = evbuffer_pullup(req->resp->body, -1);
	}
	if (ttl_ms > 0)
		request_cache_put(req, &e, ttl_ms);
}

/* Duplicates may wait for this route's owners: their writes notify. */
static int request_write_flags(const struct request *req)
{
	return req->route->in_progress == IN_PROGRESS_WAIT ? STORE_NOTIFY : 0;
}

static void record_retry_cb(evutil_socket_t fd, short what, void *arg)
{
	request_record(arg);
}

/* A store operation of req was answered: count its round trip. */
static void request_store_answered(struct request *req)
{
	int64_t us = clock_now_us() - req->store_sent_us;

	req->store_us += us;
	stats_observe(&req->w->stats, STATS_STORE_SECONDS, us);
}

static void record_done_cb(void *arg, enum store_result res)
{
	struct request *req = arg;
	int64_t delay_ms;
	struct timeval tv;

	request_store_answered(req);
	switch (res) {
	case STORE_OK:
		if (req->write == WRITE_FINISH)
			request_cache_finished(req);
		/* Local waiters need not wait for the notification's trip. */
		if (request_write_flags(req)) {
			scope_token(&req->scope, req->token);
			request_wake(req->w, req->token);
		}
		break;
	case STORE_FENCED:
		STATS_ADD(req->w->stats.fenced, 1);
		log_warn(&req->tag, "record write refused: the lease generation changed");
		break;
	case STORE_EXISTS:
	case STORE_UNAVAILABLE:
		/* The response goes out anyway; the write is retried while the
		 * lease lasts, and retries meanwhile see operation-in-progress. */
		request_owner_respond(req);
		if (clock_now_us() >= req->lease_deadline_us) {
			log_error(&req->tag, "record write abandoned: store unavailable until the lease ended");
			break;
		}
		if (!req->retry_timer)
			req->retry_timer = evtimer_new(req->w->base, record_retry_cb, req);
		if (!req->retry_timer)
			break;
		request_set_state(req, REQ_RETRYING);
		delay_ms = req->retry_ms ? req->retry_ms * 2 : RECORD_RETRY_MIN_MS;
		if (delay_ms > RECORD_RETRY_MAX_MS)
			delay_ms = RECORD_RETRY_MAX_MS;
		req->retry_ms = delay_ms;
		tv.tv_sec = delay_ms / 1000;
		tv.tv_usec = (delay_ms % 1000) * 1000;
		evtimer_add(req->retry_timer, &tv);
		return;
	}
	request_owner_respond(req);
	request_done(req);
}

/* Write the owner's outcome: finish, release or unknown. */
static void request_record(struct request *req)
{
	struct store *st = req->w->store;
	const unsigned char *body = NULL;
	size_t body_len = 0;
	int flags = request_write_flags(req);

	if (req->state != REQ_RETRYING)
		request_set_state(req, REQ_RECORDING);
	req->store_sent_us = clock_now_us();
	switch (req->write) {
	case WRITE_FINISH:
		req->finish_sent_us = clock_now_us();
		if (!req->body_omitted) {
			body_len = evbuffer_get_length(req->resp->body);
			body = body_len ? evbuffer_pullup(req->resp->body, -1) : (const unsigned char *)"";
		}
		store_finish(st, &req->scope, req->generation, req->resp->status,
			     req->stored_headers, req->stored_headers_len, body, body_len,
			     req->body_omitted, req->route->retention_ms, flags, record_done_cb, req);
		break;
	case WRITE_RELEASE:
		store_release(st, &req->scope, req->generation, flags, record_done_cb, req);
		break;
	case WRITE_UNKNOWN:
	case WRITE_NONE:
		store_mark_unknown(st, &req->scope, req->generation, flags, record_done_cb, req);
		break;
	}
}

/* The owner's upstream result decides what the record becomes. */
static void owner_upstream_done(struct request *req, enum upstream_result res)
{
	const struct route *r = req->route;

	switch (res) {
	case UPSTREAM_OK:
		req->status = req->resp->status;
		if (status_set_has(&r->release_on, req->resp->status)) {
			req->write = WRITE_RELEASE;
			req->outcome = OUT_RELEASED;
		} else if (status_set_has(&r->unknown_on, req->resp->status)) {
			req->write = WRITE_UNKNOWN;
			req->outcome = OUT_UNKNOWN;
		} else {
			req->write = WRITE_FINISH;
			req->body_omitted = evbuffer_get_length(req->resp->body) > req->conf->max_stored_body;
			req->stored_headers = record_headers(req->resp, r->store_headers,
							     r->nstore_headers, &req->stored_headers_len);
			if (!req->stored_headers)
				req->write = WRITE_UNKNOWN;
		}
		break;
	case UPSTREAM_NOT_SENT:
		req->write = WRITE_RELEASE;
		req->outcome = OUT_RELEASED;
		req->status = 502;
		break;
	case UPSTREAM_TIMEOUT:
		req->write = WRITE_UNKNOWN;
		req->outcome = OUT_UNKNOWN;
		req->status = 504;
		break;
	case UPSTREAM_ERROR:
		req->write = WRITE_UNKNOWN;
		req->outcome = OUT_UNKNOWN;
		req->status = 502;
		break;
	}
	request_record(req);
}

static void upstream_done_cb(void *arg, enum upstream_result res, struct http_msg *resp)
{
	struct request *req = arg;

	req->up = NULL;
	req->w->nforwarding--;
	req->resp = resp;
	req->upstream_us = clock_now_us() - req->upstream_us;
	stats_observe(&req->w->stats, STATS_UPSTREAM_SECONDS, req->upstream_us);
	if (req->outcome == OUT_OWNER) {
		owner_upstream_done(req, res);
		return;
	}
	switch (res) {
	case UPSTREAM_OK:
		request_relay(req);
		break;
	case UPSTREAM_NOT_SENT:
		request_problem(req, PROBLEM_UPSTREAM_UNAVAILABLE, "the upstream could not be reached");
		break;
	case UPSTREAM_TIMEOUT:
		request_problem(req, PROBLEM_UPSTREAM_TIMEOUT,
				"the upstream did not answer within upstream_timeout");
		break;
	case UPSTREAM_ERROR:
		request_problem(req, PROBLEM_UPSTREAM_ERROR, "the upstream connection failed");
		break;
	}
	request_done(req);
}

/* "Name: v1, v2, ..., ours": every occurrence of name in m, then ours. */
static void add_joined_header(struct evbuffer *out, const struct http_msg *m, const char *name,
			      const char *ours)
{
	http_add_str(out, name);
	http_add_lit(out, ": ");
	for (int i = 0; i < m->nheaders; i++) {
		if (!strcasecmp(m->headers[i].name, name) && *m->headers[i].value) {
			http_add_str(out, m->headers[i].value);
			http_add_lit(out, ", ");
		}
	}
	http_add_str(out, ours);
	http_add_lit(out, "\r\n");
}

/*
 * The request as it goes upstream: hop-by-hop headers removed, the body
 * framed by Content-Length, X-Forwarded-For/-Proto and Via added.
 */
static void build_upstream_request(struct request *req, struct evbuffer *out)
{
	struct http_msg *m = req->msg;
	const char *peer = req->conn ? req->conn->peer : "unknown";
	int has_host = 0;
	size_t body_len = evbuffer_get_length(m->body);

	http_add_str(out, m->method);
	http_add_lit(out, " ");
	http_add_str(out, m->target);
	http_add_lit(out, " HTTP/1.1\r\n");
	for (int i = 0; i < m->nheaders; i++) {
		const struct http_header *h = &m->headers[i];
		if (http_msg_is_hop_header(m, h->name) || !strcasecmp(h->name, "Content-Length") ||
		    !strcasecmp(h->name, "Expect") || !strcasecmp(h->name, "X-Forwarded-Proto") ||
		    !strcasecmp(h->name, "X-Forwarded-For") || !strcasecmp(h->name, "Via"))
			continue;
		if (!strcasecmp(h->name, "Host"))
			has_host = 1;
		http_add_header(out, h->name, h->value);
	}
	if (!has_host)
		http_add_header(out, "Host", req->conf->upstream_hostport);
	add_joined_header(out, m, "X-Forwarded-For", peer);
	http_add_lit(out, "X-Forwarded-Proto: http\r\n");
	add_joined_header(out, m, "Via", m->version_minor ? "1.1 idemproxy" : "1.0 idemproxy");
	if (body_len || (strcmp(m->method, "GET") && strcmp(m->method, "HEAD") &&
			 strcmp(m->method, "OPTIONS") && strcmp(m->method, "TRACE")))
		evbuffer_add_printf(out, "Content-Length: %zu\r\n", body_len);
	evbuffer_add(out, "\r\n", 2);
	evbuffer_add_buffer(out, m->body);
}

static void request_forward(struct request *req)
{
	struct evbuffer *out = evbuffer_new();
	int is_head = !strcmp(req->msg->method, "HEAD");

	request_set_state(req, REQ_FORWARDING);
	if (out) {
		build_upstream_request(req, out);
		req->upstream_us = clock_now_us();
		req->up = upstream_forward(req->w->pool, out, is_head,
					   req->outcome != OUT_OWNER && http_method_is_safe(req->msg->method),
					   req->conf->upstream_timeout_ms, upstream_done_cb, req);
		evbuffer_free(out);
	}
	if (req->up)
		req->w->nforwarding++;
	if (!req->up) {
		/* Nothing left this process: out of memory before sending. */
		if (req->outcome == OUT_OWNER) {
			owner_upstream_done(req, UPSTREAM_NOT_SENT);
			return;
		}
		request_problem(req, PROBLEM_UPSTREAM_UNAVAILABLE, "the request could not be sent");
		request_done(req);
	}
}

static void claim_done_cb(void *arg, enum store_result res, int64_t generation,
			  const struct record *rec);

/* Claim the scope: own it, or learn who does. */
static void request_claim_send(struct request *req)
{
	int flags = req->route->recovery == RECOVERY_FORWARD ? STORE_RECOVER : 0;

	request_set_state(req, REQ_CLAIMING);
	req->wakes_seen = req->w->wakes;
	/* The lease runs from the moment the claim was sent, not answered. */
	req->store_sent_us = clock_now_us();
	req->lease_deadline_us = req->store_sent_us + req->conf->lease_ms * 1000;
	store_claim(req->w->store, &req->scope, req->fp, req->conf->lease_ms, flags, claim_done_cb,
		    req);
}

/* Stop waiting and claim again: the owner may have finished. */
static void request_unwait(struct request *req)
{
	LIST_REMOVE(req, wait_link);
	evtimer_del(req->wait_timer);
	request_claim_send(req);
}

static void wait_timer_cb(evutil_socket_t fd, short what, void *arg)
{
	request_unwait(arg);
}

/*
 * 1 when a wake-up for req's scope (or for every scope) came after its
 * claim was sent: the owner's notification can arrive in the same read as
 * the claim's answer, which still saw the owner running.
 */
static int request_woken_since_claim(const struct request *req)
{
	const struct worker *w = req->w;
	uint64_t i = req->wakes_seen;
	const char *token;

	if (w->wakes - i > WAKE_RING_SIZE)
		return 1; /* too many to tell: look again */
	for (; i < w->wakes; i++) {
		token = w->wake_ring[i & (WAKE_RING_SIZE - 1)];
		if (!*token || strcmp(token, req->token) == 0)
			return 1;
	}
	return 0;
}

/*
 * A duplicate found the owner still running and its route lets it wait:
 * hold it (REQ_WAITING) until the owner's write wakes it (request_wake)
 * or its wait ends, then claim again (at once, when the wake-up came while
 * the claim was out). Returns 0 when the wait is over, nobody is left to
 * answer or the worker is past its shutdown deadline: the caller answers
 * in-progress.
 */
static int request_wait(struct request *req)
{
	int64_t now = clock_now_us(), left;
	struct timeval tv;

	if (!req->wait_deadline_us) {
		req->wait_deadline_us = now + req->route->in_progress_wait_ms * 1000;
		scope_token(&req->scope, req->token);
		STATS_ADD(req->w->stats.waits, 1);
	}
	left = req->wait_deadline_us - now;
	if (left <= 0 || !req->conn || req->w->past_deadline)
		return 0;
	if (request_woken_since_claim(req)) {
		request_claim_send(req);
		return 1;
	}
	if (!req->wait_timer)
		req->wait_timer = evtimer_new(req->w->base, wait_timer_cb, req);
	if (!req->wait_timer)
		return 0;
	tv.tv_sec = left / 1000000;
	tv.tv_usec = left % 1000000;
	evtimer_add(req->wait_timer, &tv);
	LIST_INSERT_HEAD(&req->w->waiters, req, wait_link);
	request_set_state(req, REQ_WAITING);
	return 1;
}

void request_wake(struct worker *w, const char *token)
{
	struct request *req = LIST_FIRST(&w->waiters), *next;

	snprintf(w->wake_ring[w->wakes++ & (WAKE_RING_SIZE - 1)], SCOPE_TOKEN_SIZE, "%s",
		 token ? token : "");
	for (; req; req = next) {
		next = LIST_NEXT(req, wait_link);
		if (!token || strcmp(token, req->token) == 0)
			request_unwait(req);
	}
}

static void claim_done_cb(void *arg, enum store_result res, int64_t generation,
			  const struct record *rec)
{
	struct request *req = arg;

	request_store_answered(req);
	switch (res) {
	case STORE_OK:
		req->outcome = OUT_OWNER;
		req->generation = generation;
		if (req->w->past_deadline) {
			/* Shutting down: nothing more goes upstream. */
			owner_upstream_done(req, UPSTREAM_NOT_SENT);
			return;
		}
		request_forward(req);
		return;
	case STORE_EXISTS:
		if (memcmp(rec->fingerprint, req->fp, FINGERPRINT_LEN) != 0) {
			req->outcome = OUT_CONFLICT;
			request_problem(req, PROBLEM_CONFLICT,
					"this Idempotency-Key was used with a different request");
		} else if (rec->state == RECORD_COMPLETED) {
			request_cache_put(req, rec, rec->expires_in_ms);
			request_replay(req, rec);
			return;
		} else if (rec->state == RECORD_UNKNOWN || rec->lease_expired) {
			req->outcome = OUT_UNKNOWN;
			request_problem(req, PROBLEM_OUTCOME_UNKNOWN,
					"the outcome of the first request with this key is unknown");
		} else if (req->route->in_progress == IN_PROGRESS_WAIT && request_wait(req)) {
			return;
		} else {
			req->outcome = OUT_IN_PROGRESS;
			request_problem(req, PROBLEM_IN_PROGRESS,
					"a request with this Idempotency-Key is still being processed");
		}
		break;
	case STORE_FENCED:
	case STORE_UNAVAILABLE:
		/* Fail-open forwards, but nothing new goes upstream after the
		 * shutdown deadline. */
		if (req->conf->store_unavailable == STORE_FAIL_OPEN && !req->w->past_deadline) {
			req->outcome = OUT_UNENFORCED;
			req->unenforced = 1;
			request_forward(req);
			return;
		}
		req->outcome = OUT_STORE_DOWN;
		request_problem(req, PROBLEM_STORE_UNAVAILABLE,
				"the idempotency store is unavailable");
		break;
	}
	request_done(req);
}

/* Key, actor and fingerprint of a matched unsafe request; then the claim. */
static void request_claim(struct request *req)
{
	const struct route *r = req->route;
	struct http_msg *m = req->msg;
	const struct record *cached;
	const char *value, *actor;
	size_t len;

	if (http_msg_header_count(m, req->conf->key_header) == 0) {
		if (r->key == KEY_OPTIONAL) {
			req->outcome = OUT_PASS;
			request_forward(req);
			return;
		}
		request_reject(req, PROBLEM_KEY_MISSING, "this operation requires an Idempotency-Key");
		return;
	}
	value = http_msg_header(m, req->conf->key_header);
	if (http_msg_header_count(m, req->conf->key_header) > 1 ||
	    idemkey_parse(value, strlen(value), req->key, &req->key_len) < 0) {
		req->key_len = 0;
		request_reject(req, PROBLEM_KEY_INVALID,
			       "an Idempotency-Key is 1 to 255 visible ASCII characters");
		return;
	}
	req->tag.key = req->key;
	req->tag.key_len = req->key_len;

	if (r->actor == ACTOR_ANONYMOUS) {
		req->actor = strdup(ANONYMOUS_ACTOR_ID);
	} else {
		actor = http_msg_header(m, r->actor_header);
		if (!actor || !*actor || http_msg_header_count(m, r->actor_header) > 1) {
			request_reject(req, PROBLEM_ACTOR_MISSING, "the request names no actor");
			return;
		}
		len = strlen(ACTOR_HEADER_PREFIX) + strlen(actor) + 1;
		req->actor = malloc(len);
		if (req->actor)
			snprintf(req->actor, len, ACTOR_HEADER_PREFIX "%s", actor);
	}
	if (!req->actor)
		goto fail;

	len = evbuffer_get_length(m->body);
	if (fingerprint_request(m->method, m->path, m->path_len, m->query, m->query_len,
				len ? evbuffer_pullup(m->body, -1) : NULL, len, r->fingerprint,
				r->fields, r->nfields, req->fp) < 0)
		goto fail;

	req->scope.actor = req->actor;
	req->scope.operation = r->operation;
	req->scope.key = req->key;

	/* Completed records never change until they expire: a cached one
	 * answers a retry, or a conflicting one, with no round trip. */
	cached = cache_get(req->w->cache, &req->scope, clock_now_us());
	if (cached) {
		if (memcmp(cached->fingerprint, req->fp, FINGERPRINT_LEN) != 0) {
			req->outcome = OUT_CONFLICT;
			request_problem(req, PROBLEM_CONFLICT,
					"this Idempotency-Key was used with a different request");
			request_done(req);
			return;
		}
		request_replay(req, cached);
		return;
	}

	request_claim_send(req);
	return;
fail:
	log_error(&req->tag, "out of memory");
	request_reject(req, PROBLEM_STORE_UNAVAILABLE, "the request could not be processed");
}

void request_start(struct client_conn *c, struct http_msg *msg)
{
	struct worker *w = c->w;
	struct request *req = calloc(1, sizeof(*req));

	if (!req) {
		http_msg_free(msg);
		respond_problem(c, w->conf, PROBLEM_STORE_UNAVAILABLE, 0, "out of memory",
				RESPOND_CLOSE);
		return;
	}
	req->w = w;
	req->conn = c;
	req->gen = worker_conf_get(w);
	req->conf = req->gen->conf;
	req->msg = msg;
	req->id = ++w->next_request_id;
	req->started_us = clock_now_us();
	req->state = REQ_NEW;
	c->req = req;
	LIST_INSERT_HEAD(&w->requests, req, link);
	w->nrequests++;

	req->tag.request_id = req->id;
	if (!http_method_is_safe(msg->method))
		req->route = conf_find_route(req->conf, msg->method, msg->path, msg->path_len);
	if (req->route)
		req->tag.route = req->route->operation;
	if (!req->route) {
		req->outcome = OUT_PASS;
		request_forward(req);
		return;
	}
	request_claim(req);
}

/*
 * The client went away: the request goes on without anyone to answer (an
 * owner still records its outcome); a waiting duplicate just ends.
 */
void request_conn_gone(struct request *req)
{
	req->conn = NULL;
	if (req->state == REQ_WAITING) {
		LIST_REMOVE(req, wait_link);
		request_set_state(req, REQ_RESPONDING);
		req->outcome = OUT_IN_PROGRESS;
		request_done(req);
	}
}

/*
 * shutdown_timeout passed. An owner still at the upstream is cut off and
 * its record marked unknown (a retry must not run it again, and should not
 * wait for the lease to learn that), or released when not a byte of it
 * was sent; a claim that
 * lands from now on is released without forwarding (see claim_done_cb); a
 * waiting duplicate is answered in-progress. The worker then gives these
 * writes one store_timeout before it stops.
 */
void request_deadline_all(struct worker *w)
{
	struct request *req = LIST_FIRST(&w->requests), *next;

	for (; req; req = next) {
		next = LIST_NEXT(req, link);
		if (req->state == REQ_WAITING) {
			LIST_REMOVE(req, wait_link);
			req->outcome = OUT_IN_PROGRESS;
			request_problem(req, PROBLEM_IN_PROGRESS, "idemproxy is shutting down");
			request_done(req);
		} else if (req->state == REQ_FORWARDING && req->outcome == OUT_OWNER) {
			int unsent = upstream_unsent(req->up);

			log_warn(&req->tag, "shutdown_timeout passed with the request at the upstream: %s",
				 unsent ? "nothing was sent, releasing its record"
					: "recording its outcome as unknown");
			upstream_cancel(req->up);
			req->up = NULL;
			w->nforwarding--;
			owner_upstream_done(req, unsent ? UPSTREAM_NOT_SENT : UPSTREAM_TIMEOUT);
		}
	}
}

/* End of shutdown: drop whatever is left (records keep their leases). */
void request_free_all(struct worker *w)
{
	struct request *req;

	while ((req = LIST_FIRST(&w->requests))) {
		log_warn(&req->tag, "request abandoned at shutdown in state %s", state_names[req->state]);
		request_free(req);
	}
}
