/*
 * A client connection, as the modules that answer on it see it.
 *
 * listener.c accepts, reads, parses and closes connections; it owns their
 * lifecycle and every member below. The modules that answer a request
 * (respond.c, replay.c) write a response through the three conn_respond_*
 * steps, and request.c marks which request a connection serves. Nothing
 * else touches a connection.
 */
#ifndef IDEMPROXY_CONN_H
#define IDEMPROXY_CONN_H

#include <stddef.h>
#include <sys/queue.h>

struct bufferevent;
struct event;
struct evbuffer;
struct http_parser;
struct listener;
struct request;

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
	char peer[64];              /* client address, for X-Forwarded-For */
	int close_after;            /* close once the response is written */
	int writing;                /* a response is being written out */
	int continued;              /* 100 Continue sent for this request */
	int lingering;              /* write side shut, draining input */
};

enum respond_flags {
	RESPOND_CLOSE = 1,        /* close the connection after this response */
	RESPOND_NO_LENGTH = 2,    /* head already frames the body (HEAD, 204, 304) */
	RESPOND_KEEP_ALIVE = 4,   /* HTTP/1.0 client asked for keep-alive: say yes */
	RESPOND_HEAD = 8,         /* answer to HEAD: headers only, no body bytes */
};

/* c serves req from now on (NULL: no request any more). */
void conn_attach(struct client_conn *c, struct request *req);

/*
 * A response on c, written straight into its output buffer: start returns
 * that buffer (the caller adds the status line and header lines, each with
 * CRLF) and detaches the connection's request; frame adds Content-Length
 * (unless RESPOND_NO_LENGTH), Connection and the blank line; then the
 * caller adds body_len bytes of body and calls send, which writes what it
 * can at once. Once everything is written the listener reads the next
 * request or closes.
 */
struct evbuffer *conn_respond_start(struct client_conn *c);
void conn_respond_frame(struct client_conn *c, size_t body_len, int flags);
void conn_respond_send(struct client_conn *c);

/* Close c once the response being written is out (a short or cut body). */
void conn_close_after(struct client_conn *c);

#endif
