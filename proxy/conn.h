/*
 * A client connection, as the modules that answer on it see it.
 *
 * listener.c accepts, reads, parses and closes connections; it owns their
 * lifecycle and every member below. The modules that answer a request
 * (respond.c, replay.c, relay.c) write a response through the
 * conn_respond_* steps, a streamed one through conn_stream_* in between,
 * and request.c marks which request a connection serves. Nothing else
 * touches a connection.
 */
#ifndef IDEMPROXY_CONN_H
#define IDEMPROXY_CONN_H

#include <stddef.h>
#include <sys/queue.h>
#include <sys/socket.h>

#include "proxy/budget.h"
#include "proxy/trace.h"

struct bufferevent;
struct event;
struct evbuffer;
struct h2_session;
struct h2_stream;
struct http_parser;
struct listener;
struct request;

/* What the bytes a client sends are, while a request is served. */
enum conn_input {
	CONN_INPUT_REQUEST, /* the next request: they wait until this one is answered */
	CONN_INPUT_BODY,    /* the streamed body of this request: parsed, then relayed */
	CONN_INPUT_TUNNEL,  /* an upgraded connection: relayed as they are */
};

struct client_conn {
	LIST_ENTRY(client_conn) link;
	struct listener *l;
	struct bufferevent *bev;
	struct http_parser *parser;
	struct request *req;        /* the request being served, or NULL */
	struct event *timer;        /* client_timeout: request delivery / idle */
	struct event *next_ev;      /* response written: go on from the loop */
	struct event *read_ev;      /* the socket is readable (io_read_now) */
	int read_paused;            /* input buffer full: read_ev removed */
	int relay_paused;           /* the relay's receiver is behind: read_ev removed */
	enum conn_input input;
	char peer[64];              /* client address, numeric, for the forwarding headers */
	struct sockaddr_storage peer_addr; /* the same, for trusted_proxies */
	int close_after;            /* close once the response is written */
	int writing;                /* a response is being written out */
	int streaming;              /* ... piece by piece: more follows */
	int marked;                 /* a write watermark is set (conn_stream_wait) */
	int aborted;                /* the response cannot be completed: close at once */
	int expect_continue;        /* this request asked for 100 Continue */
	int continued;              /* 100 Continue sent for this request */
	int lingering;              /* write side shut, draining input */
	int tls;                    /* the client speaks TLS (X-Forwarded-Proto https) */
	int self_io;                /* bev reads and writes itself (TLS, a stream's pair): no read_ev */
	int h1;                     /* HTTP/1.1 began: no HTTP/2 preface any more */
	struct h2_session *h2;      /* this connection carries an HTTP/2 session */
	struct h2_stream *h2_stream; /* this is an HTTP/2 stream's virtual connection (a pair
				      * end, no socket), of one request */
	int64_t started_us;         /* the current request's first byte arrived */
	struct budget_meter out_meter; /* its output in the relay budget (conn_meter_start) */
	char request_id[TRACE_REQUEST_ID_MAX + 1]; /* the X-Request-Id of the request it
						    * answers (conn_set_request_id) */
};

enum respond_flags {
	RESPOND_CLOSE = 1,        /* close the connection after this response */
	RESPOND_NO_LENGTH = 2,    /* head already frames the body (HEAD, 204, 304) */
	RESPOND_KEEP_ALIVE = 4,   /* HTTP/1.0 client asked for keep-alive: say yes */
	RESPOND_HEAD = 8,         /* answer to HEAD: headers only, no body bytes */
	RESPOND_DATED = 16,       /* head already has a Date (the upstream's) */
	RESPOND_NO_CHUNKS = 32,   /* an HTTP/1.0 client: no chunked body, so no trailers */
	RESPOND_GRPC = 64,        /* a gRPC call: idemproxy's answers are gRPC errors */
};

/* c serves req from now on (NULL: no request any more). */
void conn_attach(struct client_conn *c, struct request *req);

/*
 * What c's responses say in X-Request-Id from now on: request_id (at most
 * TRACE_REQUEST_ID_MAX bytes, copied), the id of the request they answer.
 */
void conn_set_request_id(struct client_conn *c, const char *request_id);

/* "X-Request-Id: ...\r\n" of c's request into out, for a head that is not framed. */
void conn_add_request_id(const struct client_conn *c, struct evbuffer *out);

/*
 * A response on c, written straight into its output buffer: start returns
 * that buffer (the caller adds the status line and header lines, each with
 * CRLF); frame adds Date (unless RESPOND_DATED), X-Request-Id, Content-Length (unless
 * RESPOND_NO_LENGTH), Connection and the blank line; then the caller adds
 * body_len bytes of body and calls send, which writes what it can at once and detaches the
 * connection's request. Once everything is written the listener reads the
 * next request or closes.
 */
struct evbuffer *conn_respond_start(struct client_conn *c);
void conn_respond_frame(struct client_conn *c, size_t body_len, int flags);
void conn_respond_send(struct client_conn *c);

/* Close c once the response being written is out. */
void conn_close_after(struct client_conn *c);

/*
 * After conn_respond_frame: the body follows piece by piece. Each piece
 * goes into the output buffer, then conn_stream_flush. A writer that is
 * too far ahead waits (conn_stream_wait): once the output falls to mark
 * bytes, the listener tells the request (request_output_drained).
 * conn_respond_send ends the response. conn_stream_flush also writes
 * interim (1xx) responses, before any response began.
 */
void conn_stream_begin(struct client_conn *c);
void conn_stream_flush(struct client_conn *c);
void conn_stream_wait(struct client_conn *c, size_t mark);

/* Bytes queued for the client and not yet written. */
size_t conn_pending(const struct client_conn *c);

/*
 * From now on the bytes waiting in c's output count against q's relay
 * budget, for peer (NULL: for the process only), whatever wrote them; they
 * are counted once flushed (a response the socket takes whole is never
 * counted) and uncounted as the socket takes them. conn_meter_stop uncounts
 * what is left; it comes before c's bufferevent is freed.
 */
void conn_meter_start(struct client_conn *c, struct budget_queue *q, const struct sockaddr *peer);
void conn_meter_stop(struct client_conn *c);

/*
 * The response cannot be completed (the upstream broke off): what is
 * queued is written, then the connection closes, short of the end the
 * client was promised; rst closes it with a reset instead (a
 * close-delimited body, where a plain close would look complete).
 */
void conn_abort(struct client_conn *c, int rst);

/*
 * Stop (1) or go on (0) reading from the client. Two holds, either of
 * which stops the reads: the relay's (its receiver is behind) and the
 * listener's (the input buffer is full).
 */
void conn_read_pause(struct client_conn *c, int pause);
void conn_input_full(struct client_conn *c, int full);

#endif
