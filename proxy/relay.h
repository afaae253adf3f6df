/*
 * The relay (relay.c): one request's exchange between its client
 * connection and the upstream. It sends the request (its body whole, or
 * streamed from the client as it arrives), and brings the response back:
 * streamed to the client as it arrives, or, for an owner, read whole up to
 * a limit so that it can be recorded before the client sees it. Upgraded
 * connections become a byte tunnel. At most `buffer` bytes wait unsent in
 * either direction: reading from the sending side stops while the
 * receiving side is behind, so memory never grows with a body's size. The
 * same reads stop while the relay budget (budget.h) is spent, so it does
 * not grow with the number of slow readers either.
 *
 * request.c starts a relay and hears back once, through relay_done_cb;
 * the listener's events about the client reach it through request.c.
 */
#ifndef IDEMPROXY_RELAY_H
#define IDEMPROXY_RELAY_H

#include <stddef.h>
#include <stdint.h>

#include "proxy/forward.h"
#include "proxy/upstream.h"

struct client_conn;
struct event_base;
struct http_msg;
struct relay;

struct relay_params {
	size_t buffer;              /* relay_buffer: unsent bytes per direction */
	size_t hold;                /* owner: read a body of up to this many bytes whole
				     * (max_stored_body); 0: stream it at once */
	int owner;                  /* an owner's exchange: a streamed response keeps
				     * its last bytes until relay_release(), and goes on
				     * when the client goes */
	int unenforced;             /* answered with Idempotency-Enforced: false */
	int retry_safe;             /* safe to send twice (see UPSTREAM_RETRY_SAFE) */
	const char *upgrade;        /* the protocol the client may switch to (upgrade.h):
				     * a 101 that switches to it makes a tunnel */
	int idle_timeout;           /* upstream_timeout bounds silence, not the exchange */
	int64_t upstream_timeout_ms;
	int64_t client_timeout_ms;  /* silence of a client sending a streamed body */
	int64_t tunnel_timeout_ms;  /* silence of a tunnel */
	struct forward_view view;   /* the forwarding headers: what idemproxy saw */
};

struct conf;

/*
 * *p for an exchange under conf for request m of client c (NULL once it
 * went away). An owner's response is read whole up to max_stored_body and
 * waits for its record, and upstream_timeout bounds the whole exchange
 * (it must end within the lease); everything else streams, upstream_timeout
 * bounding the upstream's silence, and a pass-through (neither owner nor
 * unenforced) may become a tunnel (tunnel_upgrades). The strings are
 * conf's, c's and m's.
 */
void relay_params_init(struct relay_params *p, const struct conf *conf,
		       const struct client_conn *c, const struct http_msg *m, int owner,
		       int unenforced);

/*
 * How the exchange ended, once. res is the upstream's result. answered
 * says whether the relay has written (part of) a response to the client:
 *   !answered, UPSTREAM_OK    resp is complete, body included (held): the
 *                             caller answers with it (respond_relay);
 *   !answered, failure        nothing reached the client: the caller answers;
 *   answered, UPSTREAM_OK     streamed: complete (pass-through), or, for an
 *                             owner, all but its last bytes (relay_release);
 *   answered, failure         the response broke off: the client's
 *                             connection was closed short of its end.
 * resp (NULL when there was no response) belongs to the relay and stays
 * valid until relay_free.
 */
typedef void (*relay_done_cb)(void *arg, enum upstream_result res, struct http_msg *resp,
			      int answered);

/*
 * Forward req to pool's upstream on behalf of client c. When streamed, the
 * body follows in c's parser (http_parser_body) as relay_input reports it;
 * else req's body is whole and moved out. req must outlive the relay. NULL
 * when out of memory before anything was sent.
 */
struct relay *relay_start(struct event_base *base, struct upstream_pool *pool,
			  struct client_conn *c, struct http_msg *req, int streamed,
			  const struct relay_params *p, relay_done_cb cb, void *arg);

/*
 * The client sent more: of the streamed body (end: it is complete now), or
 * of a tunnel.
 */
void relay_input(struct relay *r, int end);

/* The client's output fell to the drain mark: go on reading the upstream. */
void relay_output_drained(struct relay *r);

/*
 * The client went away. Returns 1 when that ended the exchange (done is not
 * called: the caller ends the request), 0 when it goes on (an owner's
 * response is still read and recorded).
 */
int relay_conn_gone(struct relay *r);

/* An owner's streamed response: write the bytes held back and end it
 * (nothing once the response is complete, or the client gone). */
void relay_release(struct relay *r);

/* 1 while not a byte of the request has been written to the upstream. */
int relay_unsent(const struct relay *r);

/* 1 once the relay has written a response head to the client. */
int relay_answered(const struct relay *r);

/* The status of the response head the relay wrote to the client, 0 before one. */
int relay_status(const struct relay *r);

/* Stop whatever is left (a response under way is cut short) and free r. NULL is accepted. */
void relay_free(struct relay *r);

#endif
