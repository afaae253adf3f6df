/* Problems and relayed upstream responses on a client connection. */
#include "proxy/respond.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>

#include "conf/conf.h"
#include "proxy/conn.h"
#include "proxy/http.h"
#include "proxy/marker.h"

#define RETRY_AFTER_S 1

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

	if (!msg->keep_alive)
		return flags | RESPOND_CLOSE;
	return flags | (msg->version_minor == 0 ? RESPOND_KEEP_ALIVE : 0);
}

int respond_problem_status(const struct conf *conf, enum problem_kind kind)
{
	return kind == PROBLEM_CONFLICT ? conf->mismatch_status : problem_default_status(kind);
}

int respond_problem(struct client_conn *c, const struct conf *conf, enum problem_kind kind,
		    const char *detail, int flags)
{
	int status = respond_problem_status(conf, kind);
	struct evbuffer *out;
	size_t len = 0;
	char *json;

	if (!c)
		return status;
	json = problem_render(kind, status, conf->problem_base, detail, &len);
	out = conn_respond_start(c);
	http_add_status_line(out, status, NULL);
	http_add_lit(out, "Content-Type: application/problem+json\r\n"
			  "Cache-Control: no-store\r\n");
	if (kind == PROBLEM_IN_PROGRESS || kind == PROBLEM_STORE_UNAVAILABLE ||
	    kind == PROBLEM_SHUTTING_DOWN)
		evbuffer_add_printf(out, "Retry-After: %d\r\n", RETRY_AFTER_S);
	/* A 401 names its scheme (RFC 9110 11.6.1; RFC 6750 3.1 for the error). */
	if (kind == PROBLEM_ACTOR_MISSING)
		http_add_lit(out, "WWW-Authenticate: Bearer\r\n");
	else if (kind == PROBLEM_ACTOR_INVALID)
		http_add_lit(out, "WWW-Authenticate: Bearer error=\"invalid_token\"\r\n");
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
			     enum upstream_result res, int flags)
{
	return respond_problem(c, conf, respond_upstream_problems[res].kind,
			       respond_upstream_problems[res].detail, flags);
}

/*
 * Status line and the upstream's headers, minus hop-by-hop ones, the
 * markers only idemproxy sets, the upstream's framing and, unless
 * keep_length, its Content-Length.
 */
static void respond_upstream_head(struct evbuffer *out, const struct http_msg *resp,
				  int keep_length)
{
	http_add_status_line(out, resp->status, resp->reason);
	for (int i = 0; i < resp->nheaders; i++) {
		const struct http_header *h = &resp->headers[i];
		if (http_msg_is_hop_header(resp, h->name) || marker_header(h->name))
			continue;
		if (!keep_length && !strcasecmp(h->name, "Content-Length"))
			continue;
		http_add_header(out, h->name, h->value);
	}
}

/* The final response's start: its status line and headers. */
static struct evbuffer *respond_relay_start(struct client_conn *c, const struct http_msg *resp,
					    int keep_length, int unenforced)
{
	struct evbuffer *out = conn_respond_start(c);

	respond_upstream_head(out, resp, keep_length);
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
	respond_upstream_head(out, m, 0);
	http_add_lit(out, "\r\n");
	conn_stream_flush(c);
}

int respond_relay(struct client_conn *c, const struct http_msg *resp, int flags, int unenforced)
{
	int no_body = (flags & RESPOND_HEAD) || http_status_bodiless(resp->status);
	struct evbuffer *out;

	if (!c)
		return resp->status;
	out = respond_relay_start(c, resp, no_body, unenforced);
	if (no_body) {
		conn_respond_frame(c, 0, flags | RESPOND_NO_LENGTH);
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
	out = respond_relay_start(c, resp, framing == RESPOND_BODILESS, unenforced);
	switch (framing) {
	case RESPOND_SWITCH:
		http_add_lit(out, "Connection: upgrade\r\n");
		http_add_header(out, "Upgrade",
				http_msg_header(resp, "Upgrade") ? http_msg_header(resp, "Upgrade") : "");
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
