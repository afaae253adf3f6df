/*
 * The relay: a request's exchange between its client and the upstream.
 *
 * Request direction: the head (and a whole body) go out at once; a
 * streamed body follows as the listener parses it, framed as the client
 * framed it (Content-Length as is, chunked re-chunked piece by piece).
 * Response direction: interim responses go straight through; the final
 * head and each decoded piece of body are written to the client as they
 * arrive, framed for the client (respond_framing). An owner's response is
 * held instead, up to p.hold bytes: if it ends within them it is handed
 * whole to the caller, who records it before anyone sees it; if it grows
 * past them it streams, and its last bytes (the piece that completes a
 * Content-Length, or the last-chunk) wait for relay_release, after the
 * record. After a 101 the connections become a tunnel.
 *
 * Backpressure: when p.buffer bytes wait unsent on one side, reading on the
 * other side stops (upstream_read_pause, conn_read_pause, or the tunnel's
 * EV_READ) until the waiting bytes fall to half of that. The same reads
 * stop while the relay budget (budget.h) has no room for one more: bytes
 * waiting for the client count in its connection's meter, bytes waiting
 * for the upstream in the relay's own.
 */
#include "proxy/relay.h"

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <stdlib.h>
#include <string.h>

#include "conf/conf.h"
#include "proxy/budget.h"
#include "proxy/clock.h"
#include "proxy/conn.h"
#include "proxy/evalloc.h"
#include "proxy/evfree.h"
#include "proxy/forward.h"
#include "proxy/http.h"
#include "proxy/io.h"
#include "proxy/log.h"
#include "proxy/lookup.h"
#include "proxy/respond.h"
#include "proxy/upgrade.h"

static const char relay_last_chunk[] = "0\r\n\r\n";

/* The two sides a relay reads from, named by where what they read goes. */
enum relay_side {
	RELAY_DOWN, /* the upstream's response, or tunnel bytes: to the client */
	RELAY_UP,   /* the client's streamed body, or tunnel bytes: to the upstream */
};

/* How a side reads. */
enum relay_read {
	RELAY_READ_OFF,
	RELAY_READ_LITTLE, /* RELAY_SPENT_READ at a time (the upstream's side only) */
	RELAY_READ_ON,
};

/*
 * What the upstream's side reads at a time while nothing waits for the
 * client but the relay budget is spent: so little that a client that
 * stalls keeps one 4 KiB block beyond the budget (see IO_HEAD_FIRST).
 */
#define RELAY_SPENT_READ IO_HEAD_FIRST

struct relay {
	struct event_base *base;
	struct client_conn *c;      /* NULL once the client went away */
	struct upstream_req *up;    /* NULL once the exchange ended */
	struct relay_params p;
	struct http_msg *req;
	struct http_msg *resp;      /* the final response's head (and held body) */
	relay_done_cb cb;
	void *arg;
	int flags;                  /* respond flags of the answer */
	enum respond_framing framing;
	int body_streams;           /* the request body comes from the client */
	int body_ended;             /* ... and all of it has been sent */
	int req_chunked;            /* ... re-chunked on the way */
	int streaming;              /* the response head went out: its body is not kept */
	int64_t resp_left;          /* RESPOND_LENGTH: body bytes still to come */
	struct evbuffer *tail;      /* owner: the last bytes, until relay_release */
	struct evbuffer *piece;     /* framing scratch (chunked bodies only) */
	struct bufferevent *tunnel; /* the upstream connection after a 101 */
	struct event *tunnel_timer;
	struct budget_meter up_meter; /* bytes waiting for the upstream, in the relay budget */
	struct budget_wait wait;    /* on the worker's queue while a side waits for the budget */
	unsigned held;              /* sides (1 << enum relay_side) stopped on the budget */
};

static void relay_interim(void *arg, const struct http_msg *m);
/*
 * A 101 to the upgrade the client asked for: relay_upgraded writes it and
 * opens the tunnel, if it switched to what was asked. Any other 101 ends
 * the exchange as a malformed response (502, the connection closed): no
 * tunnel opens to a protocol idemproxy did not agree to.
 */
static void relay_switch(struct relay *r)
{
	const char *why = upgrade_switch_refused(r->req, r->resp, r->p.upgrade);

	r->framing = RESPOND_SWITCH;
	if (!why)
		return;
	log_warn(NULL, "upstream answered the %s upgrade with a 101 that is refused: %s",
		 r->p.upgrade, why);
	upstream_cancel(r->up);
	r->up = NULL;
	r->cb(r->arg, UPSTREAM_ERROR, NULL, 0);
}

static void relay_head(void *arg, struct http_msg *resp);
static void relay_body(void *arg, struct evbuffer *data);
static void relay_done(void *arg, enum upstream_result res);
static void relay_upgraded(void *arg, struct bufferevent *bev);
static void relay_drained(void *arg);
static void relay_caught_up(void *arg);
static void relay_trailers(void *arg, struct evbuffer *fields);
static void relay_tunnel_idle(evutil_socket_t fd, short what, void *arg);
static void relay_budget_retry(void *arg);

static const struct upstream_events relay_upstream_events = {
	.interim = relay_interim,
	.head = relay_head,
	.body = relay_body,
	.done = relay_done,
	.upgraded = relay_upgraded,
	.drained = relay_drained,
	.caught_up = relay_caught_up,
	.trailers = relay_trailers,
};

void relay_params_init(struct relay_params *p, const struct conf *conf,
		       const struct client_conn *c, const struct http_msg *m, int owner,
		       int unenforced)
{
	*p = (struct relay_params){
	    .buffer = conf->relay_buffer,
	    .hold = owner ? conf->max_stored_body : 0,
	    .owner = owner,
	    .unenforced = unenforced,
	    .retry_safe = !owner && http_method_is_safe(m->method),
	    .upgrade = !owner && !unenforced
			   ? upgrade_wanted(m, conf->tunnel_upgrades, conf->ntunnel_upgrades)
			   : NULL,
	    .idle_timeout = !owner,
	    .upstream_timeout_ms = conf->upstream_timeout_ms,
	    .client_timeout_ms = conf->client_timeout_ms,
	    .tunnel_timeout_ms = conf->tunnel_timeout_ms,
	    .view =
		{
		    .peer = c ? c->peer : "unknown",
		    .trusted =
			c && lookup_trusted_proxy(conf, (const struct sockaddr *)&c->peer_addr),
		    .proto = c && c->tls ? "https" : "http",
		    .default_host = conf->upstream_hostport,
		    .underscores = conf->underscores_in_headers,
		    .trailers = conf->upstream_h2c || conf->upstream_http2,
		},
	};
}

struct relay *relay_start(struct event_base *base, struct upstream_pool *pool,
			  struct client_conn *c, struct http_msg *req, int streamed,
			  const struct relay_params *p, relay_done_cb cb, void *arg)
{
	struct relay *r = evalloc_calloc(sizeof(*r));
	struct evbuffer *out = evbuffer_new();
	struct upstream_params up = {0, p->upstream_timeout_ms, p->buffer / 2};
	unsigned fflags = 0;

	if (!r || !out)
		goto fail;
	r->c = c;
	if (c)
		budget_meter_twin(&r->up_meter, &c->out_meter);
	budget_wait_init(&r->wait, &r->up_meter, relay_budget_retry, r);
	r->p = *p;
	r->req = req;
	r->cb = cb;
	r->arg = arg;
	r->body_streams = streamed;
	r->req_chunked = streamed && req->chunked;
	r->flags = respond_flags(req);
	/* Whatever a client sends after an upgrade request that is turned
	 * down is not a next request. */
	if (p->upgrade)
		r->flags |= RESPOND_CLOSE;
	r->base = base;
	if (!strcmp(req->method, "HEAD"))
		up.flags |= UPSTREAM_HEAD_REQUEST;
	if (p->retry_safe)
		up.flags |= UPSTREAM_RETRY_SAFE;
	if (p->idle_timeout)
		up.flags |= UPSTREAM_IDLE_TIMEOUT;
	if (p->upgrade) {
		up.flags |= UPSTREAM_UPGRADE;
		fflags |= FORWARD_UPGRADE;
	}
	if (streamed) {
		up.flags |= UPSTREAM_STREAMED;
		fflags |= FORWARD_STREAMED;
	}
	forward_build(out, req, &p->view, fflags);
	r->up = upstream_start(pool, out, &up, &relay_upstream_events, r);
	if (!r->up)
		goto fail;
	evbuffer_free(out);
	return r;
fail:
	evfree_evbuffer(&out);
	relay_free(r);
	return NULL;
}

/* ---- the request's body ---- */

/*
 * 1 when one more read onto pending unsent bytes could take them past
 * p.buffer: the reads on the sending side stop before that happens.
 */
static int relay_full(const struct relay *r, size_t pending)
{
	return pending + IO_BODY_CHUNK > r->p.buffer;
}

/*
 * 1 while the reads of side are the relay's to stop: the client is there,
 * and a tunnel is open, or the exchange is under way with its response
 * streaming (down) or its body still coming from the client (up).
 */
static int relay_side_open(const struct relay *r, enum relay_side side)
{
	if (!r->c)
		return 0;
	if (r->tunnel)
		return 1;
	if (!r->up)
		return 0;
	return side == RELAY_DOWN ? r->streaming : r->body_streams && !r->body_ended;
}

/* Bytes waiting to be written where side's reads go (side open). */
static size_t relay_pending(const struct relay *r, enum relay_side side)
{
	if (side == RELAY_DOWN)
		return conn_pending(r->c);
	return r->tunnel ? evbuffer_get_length(bufferevent_get_output(r->tunnel))
			 : upstream_pending(r->up);
}

/* Where side's waiting bytes are counted (side open). */
static struct budget_meter *relay_meter(struct relay *r, enum relay_side side)
{
	return side == RELAY_DOWN ? &r->c->out_meter : &r->up_meter;
}

/* Let side's reads go on (a little at a time) or stop them. */
static void relay_reading(struct relay *r, enum relay_side side, enum relay_read how)
{
	size_t max = how == RELAY_READ_LITTLE ? RELAY_SPENT_READ : 0;

	if (side == RELAY_UP) {
		if (r->c)
			conn_read_pause(r->c, how == RELAY_READ_OFF);
	} else if (r->tunnel) {
		bufferevent_set_max_single_read(r->tunnel, max ? max : IO_SINGLE_MAX);
		if (how == RELAY_READ_OFF)
			bufferevent_disable(r->tunnel, EV_READ);
		else
			bufferevent_enable(r->tunnel, EV_READ);
	} else if (r->up) {
		upstream_read_max(r->up, max);
		upstream_read_pause(r->up, how == RELAY_READ_OFF);
	}
}

/*
 * Stop side's reads while bytes wait where they go. The client's output
 * is written on meanwhile, and says when it fell to half of p.buffer
 * (relay_output_drained): its write callback turns its writing off, so a
 * stop from there must turn it on again. The upstream's side is written
 * until it is empty (relay_drained, relay_tunnel_written).
 */
static void relay_stop(struct relay *r, enum relay_side side)
{
	relay_reading(r, side, RELAY_READ_OFF);
	if (side == RELAY_DOWN)
		conn_stream_wait(r->c, r->p.buffer / 2);
}

/*
 * Whether side's reads go on, once what they brought was passed on. They
 * stop while the receiving end holds nearly p.buffer, until it falls to
 * half of that (relay_output_drained, relay_drained). They also stop
 * while, with bytes already waiting there, one more read could take the
 * process's or the peer's count past its budget, until the budget has
 * room again (to three quarters of it: relay_budget_retry); a read let go
 * then is reserved in the counts until it has arrived, so a worker's
 * waits do not all go at once. A side with nothing waiting always reads,
 * so no exchange waits forever on the others; while the budget is spent,
 * the upstream's side reads RELAY_SPENT_READ at a time.
 */
static void relay_pace(struct relay *r, enum relay_side side)
{
	unsigned bit = 1u << side;
	int held = (r->held & bit) != 0;
	struct budget_meter *m;
	enum budget_verdict v;
	size_t pending;

	if (!relay_side_open(r, side)) {
		r->held &= ~bit;
		relay_reading(r, side, RELAY_READ_ON);
		goto out;
	}
	pending = relay_pending(r, side);
	if (pending > 0 && relay_full(r, pending)) {
		relay_stop(r, side);
		goto out;
	}
	m = relay_meter(r, side);
	v = budget_check(m, IO_BODY_CHUNK, held);
	if (v != BUDGET_ROOM && pending > 0) {
		if (!held)
			budget_paused(v);
		r->held |= bit;
		relay_stop(r, side);
		goto out;
	}
	if (v == BUDGET_ROOM && held)
		budget_meter_reserve(m, IO_BODY_CHUNK);
	r->held &= ~bit;
	relay_reading(r, side, v == BUDGET_ROOM ? RELAY_READ_ON : RELAY_READ_LITTLE);
out:
	if (r->held)
		budget_wait_start(&r->wait);
	else
		budget_wait_end(&r->wait);
}

/* The worker's queue found room in the budget: the sides stopped on it look again. */
static void relay_budget_retry(void *arg)
{
	struct relay *r = arg;

	if (r->held & (1u << RELAY_DOWN))
		relay_pace(r, RELAY_DOWN);
	if (r->held & (1u << RELAY_UP))
		relay_pace(r, RELAY_UP);
}

/* The exchange, or the client's part in it, is over: no read stays stopped on its account. */
static void relay_unpace(struct relay *r)
{
	relay_pace(r, RELAY_DOWN);
	relay_pace(r, RELAY_UP);
}

/* Memory an exchange under way cannot do without: running out ends the
 * process (as store.c's store_alloc), never an exchange half relayed. */
static void *relay_need(void *p)
{
	if (!p) {
		log_error(NULL, "relay: out of memory");
		abort();
	}
	return p;
}

/* r->piece, made on first use: most exchanges frame nothing themselves. */
static struct evbuffer *relay_piece(struct relay *r)
{
	if (!r->piece)
		r->piece = relay_need(evbuffer_new());
	return r->piece;
}

/* Frame data as a chunk in r->piece (moving it there). */
static struct evbuffer *relay_chunk(struct relay *r, struct evbuffer *data)
{
	relay_piece(r);
	evbuffer_add_printf(r->piece, "%zx\r\n", evbuffer_get_length(data));
	evbuffer_add_buffer(r->piece, data);
	http_add_lit(r->piece, "\r\n");
	return r->piece;
}

/* Tunnel: what the client sent goes to the upstream. */
static void relay_tunnel_up(struct relay *r)
{
	struct evbuffer *in = bufferevent_get_input(r->c->bev);
	struct evbuffer *out = bufferevent_get_output(r->tunnel);
	struct timeval tv = clock_tv(r->p.tunnel_timeout_ms);

	if (evbuffer_get_length(in) > 0) {
		evbuffer_add_buffer(out, in);
		bufferevent_enable(r->tunnel, EV_WRITE);
		evtimer_add(r->tunnel_timer, &tv);
	}
	budget_meter_set(&r->up_meter, evbuffer_get_length(out));
	relay_pace(r, RELAY_UP);
}

void relay_input(struct relay *r, int end)
{
	struct evbuffer *body;

	if (r->tunnel) {
		relay_tunnel_up(r);
		return;
	}
	if (!r->body_streams || r->body_ended || !r->c || !r->up)
		return;
	body = http_parser_body(r->c->parser);
	if (body && evbuffer_get_length(body) > 0)
		upstream_send(r->up, r->req_chunked ? relay_chunk(r, body) : body);
	if (end) {
		if (r->req_chunked) {
			http_add_lit(relay_piece(r), relay_last_chunk);
			upstream_send(r->up, r->piece);
		}
		upstream_send_end(r->up);
		r->body_ended = 1;
	}
	budget_meter_set(&r->up_meter, upstream_pending(r->up));
	relay_pace(r, RELAY_UP);
}

/* The upstream took the request bytes that were waiting: read the client again. */
static void relay_drained(void *arg)
{
	struct relay *r = arg;

	budget_meter_set(&r->up_meter, upstream_pending(r->up));
	if (r->c && r->body_streams && !r->body_ended)
		relay_input(r, 0);
}

/* ---- the response ---- */

static void relay_interim(void *arg, const struct http_msg *m)
{
	struct relay *r = arg;

	/* HTTP/1.0 clients know no interim responses. */
	if (r->c && r->req->version_minor >= 1)
		respond_interim(r->c, m);
}

/*
 * Queue data, a piece of the response body, for the client in its framing.
 * It goes out when the upstream has caught up (relay_caught_up) or the
 * response ends, so a head and a body that arrive together leave in one
 * write.
 */
static void relay_out(struct relay *r, struct evbuffer *data)
{
	size_t n = evbuffer_get_length(data);
	struct evbuffer *out;

	if (!r->c || n == 0) {
		evbuffer_drain(data, n);
		return;
	}
	out = bufferevent_get_output(r->c->bev);
	if (r->framing == RESPOND_LENGTH) {
		r->resp_left -= (int64_t)n;
		/* An owner's piece that completes the body waits for the record. */
		if (r->p.owner && r->resp_left <= 0) {
			evbuffer_add_buffer(r->tail, data);
			return;
		}
		evbuffer_add_buffer(out, data);
	} else if (r->framing == RESPOND_CHUNKED) {
		evbuffer_add_buffer(out, relay_chunk(r, data));
	} else {
		evbuffer_add_buffer(out, data);
	}
}

/* What arrived has been queued: write it out, then see whether to read on. */
static void relay_caught_up(void *arg)
{
	struct relay *r = arg;

	if (r->streaming && r->c) {
		conn_stream_flush(r->c);
		relay_pace(r, RELAY_DOWN);
	}
}

/* The response goes to the client from now on, head first, then what was held. */
static void relay_begin(struct relay *r)
{
	r->streaming = 1;
	r->resp_left = r->resp->content_length;
	if (r->p.owner && !r->tail)
		r->tail = relay_need(evbuffer_new());
	if (!r->c)
		return;
	/* The client is still sending its body: the answer closes the
	 * connection, whose rest is no next request. */
	if (r->body_streams && !r->body_ended)
		r->flags |= RESPOND_CLOSE;
	respond_relay_head(r->c, r->resp, r->flags, r->p.unenforced, r->framing);
	conn_stream_begin(r->c);
	relay_out(r, r->resp->body);
}

static void relay_head(void *arg, struct http_msg *resp)
{
	struct relay *r = arg;
	int bodiless;

	r->resp = resp;
	if (resp->status == 101) {
		relay_switch(r);
		return;
	}
	r->framing = respond_framing(resp, r->flags, r->req->version_minor);
	/* Trailers may follow a Content-Length body too: where the response
	 * announces them, or comes over HTTP/2 (where they need no notice) to
	 * a client that says it takes them, it goes chunked, which can carry
	 * them. Any other Content-Length response keeps its length. */
	if (r->framing == RESPOND_LENGTH && r->req->version_minor >= 1 &&
	    (http_msg_known(resp, HTTP_N_TRAILER) ||
	     (r->up && upstream_http2(r->up) && http_msg_takes_trailers(r->req))))
		r->framing = RESPOND_CHUNKED;
	bodiless = r->framing == RESPOND_BODILESS;
	/* An owner's response is read whole if it may fit p.hold. */
	if (r->p.owner && (bodiless || (r->framing == RESPOND_LENGTH
						? (uint64_t)resp->content_length <= r->p.hold
						: r->p.hold > 0)))
		return;
	relay_begin(r);
}

static void relay_body(void *arg, struct evbuffer *data)
{
	struct relay *r = arg;

	if (r->streaming) {
		relay_out(r, data);
		return;
	}
	evbuffer_add_buffer(r->resp->body, data);
	if (evbuffer_get_length(r->resp->body) > r->p.hold)
		relay_begin(r);
}

/*
 * The response's trailer fields, those that go on (http_trailers_keep),
 * kept with it: a chunked body ends with them (relay_finish, or
 * respond_relay for a response held whole). A client that cannot take
 * them (HTTP/1.0, a body without chunks) does not get them.
 */
static void relay_trailers(void *arg, struct evbuffer *fields)
{
	struct relay *r = arg;
	int left_out;

	if (!r->resp || r->req->version_minor == 0) {
		evbuffer_drain(fields, evbuffer_get_length(fields));
		return;
	}
	if (!r->resp->trailers)
		r->resp->trailers = relay_need(evbuffer_new());
	left_out = http_trailers_keep(r->resp, fields, r->resp->trailers);
	if (left_out > 0)
		log_warn(NULL,
			 "upstream response trailers: %d field(s) not relayed "
			 "(hop-by-hop, framing, or over the head limits)",
			 left_out);
}

/* The streamed response's end: its last bytes, then the connection goes on (or closes). */
static void relay_finish(struct relay *r)
{
	struct evbuffer *out;

	if (!r->c)
		return;
	out = bufferevent_get_output(r->c->bev);
	if (r->tail)
		evbuffer_add_buffer(out, r->tail);
	if (r->framing == RESPOND_CHUNKED)
		respond_last_chunk(out, r->resp->trailers);
	/* The client's body is not all read: its rest is no next request. */
	if (r->body_streams && !r->body_ended)
		conn_close_after(r->c);
	conn_respond_send(r->c);
	r->c = NULL;
}

/* The response broke off: the client must not take it for complete. */
static void relay_cut(struct relay *r)
{
	if (!r->c)
		return;
	log_warn(NULL, "upstream response broke off after %s; client connection closed short",
		 r->framing == RESPOND_SWITCH ? "the upgrade" : "its head");
	conn_abort(r->c, r->framing == RESPOND_TO_CLOSE);
	r->c = NULL;
}

static void relay_done(void *arg, enum upstream_result res)
{
	struct relay *r = arg;

	r->up = NULL;
	budget_meter_set(&r->up_meter, 0);
	relay_unpace(r);
	if (r->streaming) {
		if (res != UPSTREAM_OK)
			relay_cut(r);
		else if (!r->p.owner)
			relay_finish(r);
		else if (r->c)
			conn_stream_flush(r->c); /* all but the tail */
	}
	r->cb(r->arg, res, r->resp, r->streaming);
}

void relay_release(struct relay *r)
{
	relay_finish(r);
}

void relay_output_drained(struct relay *r)
{
	relay_pace(r, RELAY_DOWN);
}

/* ---- tunnels ---- */

/* The tunnel ended (either side closed, or it idled out): close the client after what is queued. */
static void relay_tunnel_end(struct relay *r)
{
	evfree_bufferevent(&r->tunnel);
	evfree_event(&r->tunnel_timer);
	budget_meter_set(&r->up_meter, 0);
	relay_unpace(r);
	if (r->c) {
		conn_close_after(r->c);
		conn_respond_send(r->c);
		r->c = NULL;
	}
	r->cb(r->arg, UPSTREAM_OK, r->resp, 1);
}

/* What the upstream sent goes to the client. */
static void relay_tunnel_read(struct bufferevent *bev, void *arg)
{
	struct relay *r = arg;
	struct timeval tv = clock_tv(r->p.tunnel_timeout_ms);

	evbuffer_add_buffer(bufferevent_get_output(r->c->bev), bufferevent_get_input(bev));
	conn_stream_flush(r->c);
	evtimer_add(r->tunnel_timer, &tv);
	relay_pace(r, RELAY_DOWN);
}

/* The upstream took what the client sent: read the client again. */
static void relay_tunnel_written(struct bufferevent *bev, void *arg)
{
	struct relay *r = arg;

	if (evbuffer_get_length(bufferevent_get_output(bev)) == 0)
		bufferevent_disable(bev, EV_WRITE);
	relay_tunnel_up(r);
}

static void relay_tunnel_event(struct bufferevent *bev, short what, void *arg)
{
	struct relay *r = arg;

	if (what & BEV_EVENT_EOF)
		evbuffer_add_buffer(bufferevent_get_output(r->c->bev), bufferevent_get_input(bev));
	relay_tunnel_end(r);
}

static void relay_tunnel_idle(evutil_socket_t fd, short what, void *arg)
{
	relay_tunnel_end(arg);
}

/* A 101: the client hears it, then both connections carry bytes as they are. */
static void relay_upgraded(void *arg, struct bufferevent *bev)
{
	struct relay *r = arg;
	struct timeval tv = clock_tv(r->p.tunnel_timeout_ms);

	r->up = NULL;
	budget_meter_set(&r->up_meter, 0);
	r->tunnel = bev;
	r->streaming = 1;
	r->tunnel_timer = relay_need(evtimer_new(r->base, relay_tunnel_idle, r));
	respond_relay_head(r->c, r->resp, r->flags, 0, RESPOND_SWITCH);
	conn_stream_begin(r->c);
	r->c->input = CONN_INPUT_TUNNEL;
	evtimer_add(r->tunnel_timer, &tv);
	bufferevent_setwatermark(bev, EV_WRITE, r->p.buffer / 2, 0);
	bufferevent_setcb(bev, relay_tunnel_read, relay_tunnel_written, relay_tunnel_event, r);
	bufferevent_enable(bev, EV_READ);
	/* Bytes either side sent right after the handshake. */
	if (evbuffer_get_length(bufferevent_get_input(bev)) > 0)
		relay_tunnel_read(bev, r);
	relay_tunnel_up(r);
	conn_stream_flush(r->c);
}

/* ---- the end ---- */

int relay_conn_gone(struct relay *r)
{
	r->c = NULL;
	if (r->p.owner && !r->tunnel) {
		relay_unpace(r); /* the response is still read and recorded */
		return 0;
	}
	upstream_cancel(r->up);
	r->up = NULL;
	evfree_bufferevent(&r->tunnel);
	budget_meter_set(&r->up_meter, 0);
	relay_unpace(r);
	return 1;
}

int relay_unsent(const struct relay *r)
{
	return !r->up || upstream_unsent(r->up);
}

int relay_answered(const struct relay *r)
{
	return r->streaming;
}

int relay_status(const struct relay *r)
{
	return r->streaming && r->resp ? r->resp->status : 0;
}

void relay_free(struct relay *r)
{
	if (!r)
		return;
	upstream_cancel(r->up);
	if (r->streaming && r->c)
		relay_cut(r);
	evfree_bufferevent(&r->tunnel);
	budget_meter_set(&r->up_meter, 0);
	budget_wait_end(&r->wait);
	evfree_event(&r->tunnel_timer);
	evfree_evbuffer(&r->tail);
	evfree_evbuffer(&r->piece);
	http_msg_free(r->resp);
	evalloc_free(r);
}
