/* Problems and relayed upstream responses on a client connection. */
#include "proxy/respond.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>

#include "conf/conf.h"
#include "http/grpc.h"
#include "http/header.h"
#include "proxy/conn.h"
#include "proxy/http.h"

#define RETRY_AFTER_MS 1000 /* when nothing better is known */

/* What a client is told when its request got no upstream response. */
static const struct {
	enum problem_kind kind;
	const char *detail;
} respond_upstream_problems[] = {
	[UPSTREAM_NOT_SENT] = {PROBLEM_UPSTREAM_UNAVAILABLE,
			       "the upstream could not be reached; nothing was sent"},
	[UPSTREAM_ERROR] = {PROBLEM_UPSTREAM_ERROR,
			    "the upstream connection failed after the request was sent"},
	[UPSTREAM_TIMEOUT] = {PROBLEM_UPSTREAM_TIMEOUT,
			      "the upstream did not answer within upstream_timeout"},
	[UPSTREAM_CUT_OFF] = {PROBLEM_SHUTTING_DOWN,
			      "idemproxy stopped (shutdown_timeout) before the upstream answered; "
			      "the request may have been carried out: a retry with the same key "
			      "reports its outcome"},
};

int respond_flags(const struct http_msg *msg)
{
	int flags = strcmp(msg->method, "HEAD") ? 0 : RESPOND_HEAD;

	if (grpc_content_type(http_msg_known(msg, HTTP_N_CONTENT_TYPE)))
		flags |= RESPOND_GRPC;

	/* Bytes a client sends after asking to switch protocols may already
	 * speak the new one: whatever the answer, they are never read as a
	 * next request (a relayed 101 makes a tunnel instead). */
	if (!msg->keep_alive || http_msg_known(msg, HTTP_N_UPGRADE))
		flags |= RESPOND_CLOSE;
	if (msg->version_minor == 0)
		flags |= RESPOND_NO_CHUNKS | (flags & RESPOND_CLOSE ? 0 : RESPOND_KEEP_ALIVE);
	return flags;
}

/* 1 when r renders its errors in Stripe's shape. */
static int respond_stripe(const struct route *r)
{
	return r && r->errors == ERRORS_STRIPE;
}

int respond_problem_status(const struct conf *conf, const struct route *r, enum problem_kind kind)
{
	/* Stripe answers a key reused with other parameters 400, and its SDK
	 * raises StripeIdempotencyError only for that. */
	if (kind == PROBLEM_CONFLICT)
		return respond_stripe(r) ? 400 : conf->mismatch_status;
	return problem_default_status(kind);
}

/*
 * Content-Type and Cache-Control say how to read and keep the body; the
 * others are advice, what a client's SDK reads to decide what to do next:
 * whether to retry (X-Should-Retry, and Stripe-Should-Retry for a Stripe
 * SDK), when (Retry-After, Retry-After-Ms), the scheme a 401 asks for (RFC
 * 9110 11.6.1; RFC 6750 3.1 for the error) and where the contract is.
 */
/* clang-format off */
static const struct respond_ph_def respond_problem_headers[] = {
    [RESPOND_PH_CONTENT_TYPE]        = {"Content-Type",        RESPOND_ON_EVERY,        RESPOND_VALUE_TEXT,    0},
    [RESPOND_PH_CACHE_CONTROL]       = {"Cache-Control",       RESPOND_ON_EVERY,        RESPOND_VALUE_TEXT,    0},
    [RESPOND_PH_SHOULD_RETRY]        = {"X-Should-Retry",      RESPOND_ON_EVERY,        RESPOND_VALUE_BOOL,    1},
    [RESPOND_PH_STRIPE_SHOULD_RETRY] = {"Stripe-Should-Retry", RESPOND_ON_STRIPE,       RESPOND_VALUE_BOOL,    1},
    [RESPOND_PH_RETRY_AFTER]         = {"Retry-After",         RESPOND_ON_RETRY_AFTER,  RESPOND_VALUE_INTEGER, 1},
    [RESPOND_PH_RETRY_AFTER_MS]      = {"Retry-After-Ms",      RESPOND_ON_RETRY_AFTER,  RESPOND_VALUE_INTEGER, 1},
    [RESPOND_PH_WWW_AUTHENTICATE]    = {"WWW-Authenticate",    RESPOND_ON_ACTOR,        RESPOND_VALUE_TEXT,    1},
    [RESPOND_PH_LINK]                = {"Link",                RESPOND_ON_CONTRACT_URL, RESPOND_VALUE_TEXT,    1},
};
/* clang-format on */

_Static_assert(sizeof(respond_problem_headers) / sizeof(respond_problem_headers[0]) ==
		   RESPOND_PH_COUNT,
	       "respond_problem_headers must have one row per respond_problem_header");

const struct respond_ph_def *respond_problem_header(enum respond_problem_header h)
{
	return &respond_problem_headers[h];
}

int respond_problem_carries(const struct conf *conf, int stripe, enum problem_kind kind,
			    enum respond_problem_header h)
{
	switch (respond_problem_headers[h].on) {
	case RESPOND_ON_STRIPE:
		return stripe;
	case RESPOND_ON_RETRY_AFTER:
		/* An unreachable upstream gives nothing to estimate from. */
		return problem_should_retry(kind) && kind != PROBLEM_UPSTREAM_UNAVAILABLE;
	case RESPOND_ON_ACTOR:
		return kind == PROBLEM_ACTOR_MISSING || kind == PROBLEM_ACTOR_INVALID;
	case RESPOND_ON_CONTRACT_URL:
		return conf->contract_url != NULL;
	default:
		return 1;
	}
}

/* The line of header h in a problem of kind; retry_ms says when to retry. */
static void respond_problem_field(struct evbuffer *out, const struct conf *conf, int stripe,
				  enum problem_kind kind, int64_t retry_ms,
				  enum respond_problem_header h)
{
	const char *name = respond_problem_headers[h].name;

	switch (h) {
	case RESPOND_PH_CONTENT_TYPE:
		evbuffer_add_printf(out, "%s: %s\r\n", name,
				    stripe ? PROBLEM_STRIPE_MEDIA_TYPE : PROBLEM_MEDIA_TYPE);
		break;
	case RESPOND_PH_CACHE_CONTROL:
		evbuffer_add_printf(out, "%s: no-store\r\n", name);
		break;
	case RESPOND_PH_SHOULD_RETRY:
	case RESPOND_PH_STRIPE_SHOULD_RETRY:
		evbuffer_add_printf(out, "%s: %s\r\n", name,
				    problem_should_retry(kind) ? "true" : "false");
		break;
	case RESPOND_PH_RETRY_AFTER:
		evbuffer_add_printf(out, "%s: %lld\r\n", name,
				    (long long)((retry_ms + 999) / 1000));
		break;
	case RESPOND_PH_RETRY_AFTER_MS:
		evbuffer_add_printf(out, "%s: %lld\r\n", name, (long long)retry_ms);
		break;
	case RESPOND_PH_WWW_AUTHENTICATE:
		evbuffer_add_printf(out, "%s: %s\r\n", name,
				    kind == PROBLEM_ACTOR_INVALID ? "Bearer error=\"invalid_token\""
								  : "Bearer");
		break;
	case RESPOND_PH_LINK:
		evbuffer_add_printf(out, "%s: " RESPOND_LINK_FORMAT "\r\n", name,
				    conf->contract_url);
		break;
	case RESPOND_PH_COUNT:
		break;
	}
}

/*
 * A problem answered to a gRPC call: HTTP 200 in the trailers-only form (a
 * head with no body, which HTTP/2 ends with the stream), grpc-status the
 * kind's code, grpc-message its name and detail, and where a retry may
 * succeed later grpc-retry-pushback-ms, which a client's retry policy waits.
 */
static int respond_grpc_problem(struct client_conn *c, const struct conf *conf,
				enum problem_kind kind, const char *detail, int64_t retry_ms,
				int flags)
{
	char text[512], message[3 * sizeof(text)];
	struct evbuffer *out = conn_respond_start(c);

	snprintf(text, sizeof(text), "%s: %s", problem_name(kind), detail ? detail : "");
	grpc_message_encode(text, message, sizeof(message));
	http_add_status_line(out, 200, NULL);
	http_add_lit(out, "Content-Type: application/grpc\r\n");
	evbuffer_add_printf(out, "grpc-status: %d\r\ngrpc-message: %s\r\n",
			    problem_grpc_code(kind), message);
	if (respond_problem_carries(conf, 0, kind, RESPOND_PH_RETRY_AFTER))
		evbuffer_add_printf(out, "grpc-retry-pushback-ms: %lld\r\n", (long long)retry_ms);
	conn_respond_frame(c, 0, flags);
	conn_respond_send(c);
	return 200;
}

int respond_problem(struct client_conn *c, const struct conf *conf, const struct route *r,
		    enum problem_kind kind, const char *detail, int64_t retry_ms, int flags)
{
	int status = respond_problem_status(conf, r, kind), stripe = respond_stripe(r);
	struct evbuffer *out;
	size_t len = 0;
	char *json;

	if (!c)
		return status;
	if (retry_ms <= 0)
		retry_ms = RETRY_AFTER_MS;
	if (flags & RESPOND_GRPC)
		return respond_grpc_problem(c, conf, kind, detail, retry_ms, flags);
	json = stripe ? problem_render_stripe(kind, detail, &len)
		      : problem_render(kind, status, conf->problem_base, detail, &len);
	out = conn_respond_start(c);
	http_add_status_line(out, status, NULL);
	for (int h = 0; h < RESPOND_PH_COUNT; h++)
		if (respond_problem_carries(conf, stripe, kind, h))
			respond_problem_field(out, conf, stripe, kind, retry_ms, h);
	/* Out of memory: the status line still says what happened. */
	conn_respond_frame(c, json ? len : 0, flags | (json ? 0 : RESPOND_CLOSE));
	if (json && !(flags & RESPOND_HEAD))
		evbuffer_add(out, json, len);
	conn_respond_send(c);
	free(json);
	return status;
}

int respond_upstream_status(enum upstream_result res)
{
	return problem_default_status(respond_upstream_problems[res].kind);
}

int respond_upstream_failure(struct client_conn *c, const struct conf *conf,
			     const struct route *r, enum upstream_result res, int flags)
{
	return respond_problem(c, conf, r, respond_upstream_problems[res].kind,
			       respond_upstream_problems[res].detail, 0, flags);
}

/*
 * Status line and the upstream's headers, minus hop-by-hop ones, the
 * markers only idemproxy sets, its X-Request-Id, the upstream's framing and, unless
 * keep_length, its Content-Length. RESPOND_DATED when they had a Date.
 */
static int respond_upstream_head(struct evbuffer *out, const struct http_msg *resp,
				 int keep_length)
{
	int dated = 0;

	http_add_status_line(out, resp->status, resp->reason);
	for (int i = 0; i < resp->nheaders; i++) {
		const struct http_header *h = &resp->headers[i];
		if ((h->policy & HEADER_MARKER) || http_header_is_hop(resp, h))
			continue;
		if (!keep_length && h->known == HTTP_N_CONTENT_LENGTH)
			continue;
		if (h->known == HTTP_N_X_REQUEST_ID)
			continue; /* the response carries the request's own */
		if (h->known == HTTP_N_DATE)
			dated = RESPOND_DATED;
		http_add_field(out, h);
	}
	return dated;
}

/* The final response's start: its status line and headers; *flags gets
 * RESPOND_DATED when the upstream dated it. */
static struct evbuffer *respond_relay_start(struct client_conn *c, const struct http_msg *resp,
					    int keep_length, int unenforced, int *flags)
{
	struct evbuffer *out = conn_respond_start(c);

	*flags |= respond_upstream_head(out, resp, keep_length);
	if (unenforced)
		http_add_lit(out, MARKER_ENFORCED ": false\r\n");
	return out;
}

void respond_interim(struct client_conn *c, const struct http_msg *m)
{
	struct evbuffer *out;

	if (!c)
		return;
	out = bufferevent_get_output(c->bev);
	(void)respond_upstream_head(out, m, 0);
	http_add_lit(out, "\r\n");
	conn_stream_flush(c);
}

void respond_last_chunk_lines(struct evbuffer *out, const char *lines, size_t n)
{
	http_add_lit(out, "0\r\n");
	evbuffer_add(out, lines, n);
	http_add_lit(out, "\r\n");
}

void respond_last_chunk(struct evbuffer *out, struct evbuffer *trailers)
{
	size_t n = trailers ? evbuffer_get_length(trailers) : 0;

	respond_last_chunk_lines(out, n ? (const char *)evbuffer_pullup(trailers, -1) : "", n);
	if (n)
		evbuffer_drain(trailers, n);
}

void respond_whole_chunked(struct client_conn *c, struct evbuffer *out, size_t len, int flags)
{
	http_add_lit(out, "Transfer-Encoding: chunked\r\n");
	conn_respond_frame(c, 0, flags | RESPOND_NO_LENGTH);
	if (len > 0)
		evbuffer_add_printf(out, "%zx\r\n", len);
}

int respond_relay(struct client_conn *c, const struct http_msg *resp, int flags, int unenforced,
		  int64_t key_expires_ms)
{
	int no_body = (flags & RESPOND_HEAD) || http_status_bodiless(resp->status);
	size_t len = evbuffer_get_length(resp->body);
	struct evbuffer *out;

	if (!c)
		return resp->status;
	out = respond_relay_start(c, resp, no_body, unenforced, &flags);
	if (key_expires_ms > 0)
		http_add_date_after(out, MARKER_KEY_EXPIRES, key_expires_ms);
	if (no_body) {
		conn_respond_frame(c, 0, flags | RESPOND_NO_LENGTH);
	} else if (resp->trailers && evbuffer_get_length(resp->trailers) > 0) {
		/* Trailers go after the body: one chunk, then the last-chunk
		 * with them (relay.c kept them only for an HTTP/1.1 client). */
		respond_whole_chunked(c, out, len, flags);
		if (len > 0) {
			if (evbuffer_add_buffer_reference(out, resp->body) < 0)
				conn_close_after(c);
			http_add_lit(out, "\r\n");
		}
		respond_last_chunk(out, resp->trailers);
	} else {
		conn_respond_frame(c, evbuffer_get_length(resp->body), flags);
		/* Should the reference fail, the connection closes short of
		 * Content-Length: the client sees a cut body, never a
		 * whole-looking one. */
		if (evbuffer_add_buffer_reference(out, resp->body) < 0)
			conn_close_after(c);
	}
	conn_respond_send(c);
	return resp->status;
}

enum respond_framing respond_framing(const struct http_msg *resp, int flags, int client_minor)
{
	if (resp->status == 101)
		return RESPOND_SWITCH;
	if ((flags & RESPOND_HEAD) || http_status_bodiless(resp->status))
		return RESPOND_BODILESS;
	if (!resp->chunked && resp->content_length >= 0)
		return RESPOND_LENGTH;
	/* Chunked, or up to the upstream's close: chunked where the client
	 * reads it, else up to our own close. */
	return client_minor >= 1 ? RESPOND_CHUNKED : RESPOND_TO_CLOSE;
}

int respond_relay_head(struct client_conn *c, const struct http_msg *resp, int flags,
		       int unenforced, enum respond_framing framing)
{
	struct evbuffer *out;

	if (!c)
		return resp->status;
	out = respond_relay_start(c, resp, framing == RESPOND_BODILESS, unenforced, &flags);
	switch (framing) {
	case RESPOND_SWITCH:
		conn_add_request_id(c, out);
		http_add_lit(out, "Connection: upgrade\r\n");
		http_add_header(out, "Upgrade",
				http_msg_known(resp, HTTP_N_UPGRADE) ? http_msg_known(resp, HTTP_N_UPGRADE)
								     : "");
		http_add_lit(out, "\r\n");
		return resp->status;
	case RESPOND_BODILESS:
		conn_respond_frame(c, 0, flags | RESPOND_NO_LENGTH);
		break;
	case RESPOND_LENGTH:
		conn_respond_frame(c, (size_t)resp->content_length, flags);
		break;
	case RESPOND_CHUNKED:
		http_add_lit(out, "Transfer-Encoding: chunked\r\n");
		conn_respond_frame(c, 0, flags | RESPOND_NO_LENGTH);
		break;
	case RESPOND_TO_CLOSE:
		conn_respond_frame(c, 0, flags | RESPOND_NO_LENGTH | RESPOND_CLOSE);
		break;
	}
	return resp->status;
}
