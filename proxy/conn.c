/*
 * Writing a response on a client connection. Whatever is written, the
 * listener's events take over once it is out: the bufferevent's write
 * callback when the socket did not take it all at once, next_ev when it
 * did, so the next request is read from the loop and never from inside a
 * response (a pipelined request would otherwise recurse).
 */
#include "proxy/conn.h"

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <sys/socket.h>

#include "proxy/http.h"
#include "proxy/io.h"
#include "proxy/text.h"

/* The output's meter follows what the socket took at once; what is added waits for a flush. */
static void conn_output_cb(struct evbuffer *buf, const struct evbuffer_cb_info *info, void *arg)
{
	struct client_conn *c = arg;
	size_t n = evbuffer_get_length(buf);

	if (info->n_deleted && n < c->out_meter.charged)
		budget_meter_set(&c->out_meter, n);
}

void conn_meter_start(struct client_conn *c, struct budget_queue *q, const struct sockaddr *peer)
{
	budget_meter_init(&c->out_meter, q, peer);
	if (!evbuffer_add_cb(bufferevent_get_output(c->bev), conn_output_cb, c))
		c->out_meter.q = NULL; /* out of memory: this connection goes uncounted */
}

void conn_meter_stop(struct client_conn *c)
{
	budget_meter_set(&c->out_meter, 0);
	evbuffer_remove_cb(bufferevent_get_output(c->bev), conn_output_cb, c);
}

/* A flush is over: what it left queued is counted. */
static void conn_meter_settle(struct client_conn *c)
{
	budget_meter_set(&c->out_meter, conn_pending(c));
}

void conn_attach(struct client_conn *c, struct request *req)
{
	c->req = req;
}

void conn_set_request_id(struct client_conn *c, const char *request_id)
{
	text_copy(c->request_id, sizeof(c->request_id), request_id);
}

void conn_add_request_id(const struct client_conn *c, struct evbuffer *out)
{
	if (c->request_id[0])
		http_add_header(out, "X-Request-Id", c->request_id);
}

struct evbuffer *conn_respond_start(struct client_conn *c)
{
	c->writing = 1;
	evtimer_del(c->timer);
	return bufferevent_get_output(c->bev);
}

void conn_respond_frame(struct client_conn *c, size_t body_len, int flags)
{
	struct evbuffer *out = bufferevent_get_output(c->bev);

	if (flags & RESPOND_CLOSE)
		c->close_after = 1;
	if (!(flags & RESPOND_DATED))
		http_add_date_now(out);
	conn_add_request_id(c, out);
	if (!(flags & RESPOND_NO_LENGTH))
		http_add_length(out, "Content-Length", body_len);
	if (c->close_after)
		http_add_lit(out, "Connection: close\r\n");
	else if (flags & RESPOND_KEEP_ALIVE)
		http_add_lit(out, "Connection: keep-alive\r\n");
	http_add_lit(out, "\r\n");
}

/*
 * Write what the output buffer holds now, with no change to what epoll
 * watches: most responses leave in this one writev(2). What the socket does
 * not take is left to the bufferevent (EV_WRITE, which also applies the
 * write deadline and reports a dead peer).
 */
void conn_respond_send(struct client_conn *c)
{
	struct evbuffer *out = bufferevent_get_output(c->bev);
	int failed;

	c->req = NULL;
	c->streaming = 0;
	if (c->marked) {
		c->marked = 0;
		bufferevent_setwatermark(c->bev, EV_WRITE, 0, 0);
	}
	failed = io_write_now(c->bev) < 0;
	conn_meter_settle(c);
	if (failed || evbuffer_get_length(out) > 0)
		bufferevent_enable(c->bev, EV_WRITE);
	else if (c->writing)
		event_active(c->next_ev, EV_WRITE, 0);
}

void conn_close_after(struct client_conn *c)
{
	c->close_after = 1;
}

void conn_stream_begin(struct client_conn *c)
{
	c->streaming = 1;
}

void conn_stream_wait(struct client_conn *c, size_t mark)
{
	if (!c->marked) {
		c->marked = 1;
		bufferevent_setwatermark(c->bev, EV_WRITE, mark, 0);
	}
	bufferevent_enable(c->bev, EV_WRITE);
}

void conn_stream_flush(struct client_conn *c)
{
	int failed = io_write_now(c->bev) < 0;

	conn_meter_settle(c);
	if (failed || conn_pending(c) > 0)
		bufferevent_enable(c->bev, EV_WRITE);
}

size_t conn_pending(const struct client_conn *c)
{
	return evbuffer_get_length(bufferevent_get_output(c->bev));
}

void conn_abort(struct client_conn *c, int rst)
{
	struct linger lg = {1, 0};

	if (rst) {
		/* A stream's virtual connection has no socket: the stream is reset. */
		if (!c->h2_stream)
			setsockopt(bufferevent_getfd(c->bev), SOL_SOCKET, SO_LINGER, &lg,
				   sizeof(lg));
		evbuffer_drain(bufferevent_get_output(c->bev),
			       evbuffer_get_length(bufferevent_get_output(c->bev)));
	}
	c->aborted = 1;
	c->close_after = 1;
	conn_respond_send(c);
}

/*
 * Reading runs while neither the input buffer nor the relay holds it back:
 * the read event, or the bufferevent's own reading (TLS, a stream's pair).
 */
static void conn_reading(struct client_conn *c)
{
	int on = !c->read_paused && !c->relay_paused;

	if (c->self_io)
		on ? bufferevent_enable(c->bev, EV_READ) : bufferevent_disable(c->bev, EV_READ);
	else
		on ? event_add(c->read_ev, NULL) : event_del(c->read_ev);
}

void conn_read_pause(struct client_conn *c, int pause)
{
	if (c->relay_paused != pause) {
		c->relay_paused = pause;
		conn_reading(c);
	}
}

void conn_input_full(struct client_conn *c, int full)
{
	if (c->read_paused != full) {
		c->read_paused = full;
		conn_reading(c);
	}
}
