/*
 * HTTP/2 toward the upstream (h2c:// with prior knowledge): exchanges as
 * streams multiplexed on nghttp2 client sessions, one session per
 * connection, behind the same contract as an HTTP/1.1 exchange
 * (upstream_events.h). upstream.c dispatches to it; its callers never know.
 *
 * The caller hands the request as HTTP/1.1 bytes (forward.c's head, then
 * body bytes framed by Content-Length or chunked), which h2up parses with
 * http.c's request parser and sends as HEADERS and DATA. The response's
 * HEADERS become an http_msg as the HTTP/1.1 parser would have made it,
 * its DATA the body, a HEADERS frame after DATA the trailers.
 */
#ifndef IDEMPROXY_H2UP_H
#define IDEMPROXY_H2UP_H

#include <stddef.h>
#include <stdint.h>

#include "proxy/http.h"
#include "proxy/upstream_events.h"

struct bufferevent;
struct event_base;
struct evbuffer;
struct http_msg;

/* Streams one upstream connection carries at most, whatever it allows. */
#define H2UP_MAX_STREAMS 128
/* The window each stream's response may fill before its caller took it. */
#define H2UP_STREAM_WINDOW 65535

struct h2up_pool;
struct h2up_stream;

/*
 * A new connection to the upstream, connecting (without blocking), or
 * NULL; the pool owns it.
 */
typedef struct bufferevent *(*h2up_connect_fn)(void *arg);

/*
 * Sessions to the upstream called name in the log (host:port), opened with connect(arg), at most
 * max_conns at once (0: none, only those h2up_adopt() hands over), each closed once idle_ms passed
 * without a stream on it. tls: the connections speak TLS (":scheme" https).
 */
struct h2up_pool *h2up_pool_new(struct event_base *base, const char *name, h2up_connect_fn connect,
				void *arg, int tls, int max_conns, int64_t idle_ms);
void h2up_pool_free(struct h2up_pool *hp);

/* Connections open or opening. */
int h2up_pool_conns(const struct h2up_pool *hp);

/* Connections with no stream on them. */
int h2up_pool_idle(const struct h2up_pool *hp);

/* 1 when a connection of hp has room for one more stream. */
int h2up_pool_room(const struct h2up_pool *hp);

/*
 * Start an exchange as h2up_start() does, on a new session over bev, a
 * connection that is established already (TLS whose ALPN picked h2); hp
 * owns bev from now on, even when NULL is returned (out of memory).
 */
struct h2up_stream *h2up_adopt(struct h2up_pool *hp, struct bufferevent *bev, struct evbuffer *req,
			       const struct upstream_params *params,
			       const struct upstream_events *ev, void *arg);

/*
 * The upstream.h calls, for one stream: start (req drained), more body and
 * its end, bytes not yet taken by a session, pause, read size, whether not
 * a byte reached the upstream, cancel (RST_STREAM CANCEL; NULL accepted).
 * ev and arg receive what happens, as upstream_events.h says. h2up_start
 * returns NULL only when out of memory before anything was sent.
 */
struct h2up_stream *h2up_start(struct h2up_pool *hp, struct evbuffer *req,
			       const struct upstream_params *params,
			       const struct upstream_events *ev, void *arg);
void h2up_send(struct h2up_stream *s, struct evbuffer *data);
void h2up_send_end(struct h2up_stream *s);
size_t h2up_pending(const struct h2up_stream *s);
void h2up_read_pause(struct h2up_stream *s, int pause);
void h2up_read_max(struct h2up_stream *s, size_t max);
int h2up_unsent(const struct h2up_stream *s);
void h2up_cancel(struct h2up_stream *s);

/* ---- the mapping between HTTP/1.1 messages and HTTP/2 fields ---- */

/* One field as HTTP/2 sends it; the strings are the message's. */
struct h2up_field {
	const char *name, *value;
	size_t name_len, value_len;
};

/* Fields a request maps to at most: its headers and the four pseudo-headers. */
#define H2UP_MAX_FIELDS (HTTP_MAX_HEADERS + 4)

/*
 * Request m as HTTP/2 fields (RFC 9113 8.3.1) into out (room for
 * H2UP_MAX_FIELDS): :method, :scheme (scheme), :authority from Host, :path
 * from the target (an absolute-form target's path and query, "*" for
 * OPTIONS *), then m's headers but Host, the hop-by-hop ones
 * (http_header_is_hop) and TE, which goes as "te: trailers" when it lists
 * trailers. Header names are lower-cased in m. Returns the count, or -1
 * when m has no Host.
 */
int h2up_request_fields(struct http_msg *m, const char *scheme, struct h2up_field *out);

/*
 * Append a response field to lines as "name: value\r\n". Returns 0, or -1
 * (nothing appended) for a field HTTP/1.1 cannot carry: an empty name, a
 * name that is not a token (a pseudo-header), a value holding CR, LF or
 * NUL, or lines already past HTTP_MAX_HEAD.
 */
int h2up_field_add(struct evbuffer *lines, const uint8_t *name, size_t name_len,
		   const uint8_t *value, size_t value_len);

/*
 * The response head of :status status and the field lines (drained), as
 * http.c's response parser makes it from the same HTTP/1.1 head: its
 * framing from Content-Length, else to be read until the stream ends;
 * no_body for a response that has none whatever it says (HEAD, 204, 304).
 * The caller owns the result; NULL when the parser refuses the head.
 */
struct http_msg *h2up_response_msg(int status, struct evbuffer *lines, int no_body);

#endif
