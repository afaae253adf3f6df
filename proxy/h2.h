/*
 * HTTP/2 on the listener (h2.c): one nghttp2 server session per HTTP/2
 * client connection, each stream handed to the listener as a virtual
 * client connection (one end of a bufferevent pair) that carries the
 * stream's request as HTTP/1.1 bytes and takes its HTTP/1.1 response back.
 * nghttp2 does the framing, HPACK and flow control; this module maps
 * messages and moves bytes, within bounded buffers.
 */
#ifndef IDEMPROXY_H2_H
#define IDEMPROXY_H2_H

#include <stddef.h>
#include <stdint.h>

struct bufferevent;
struct evbuffer;
struct event_base;
struct h2_session;
struct h2_stream;

/* The client connection preface (RFC 9113 3.4), without its NUL. */
#define H2_PREFACE     "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
#define H2_PREFACE_LEN (sizeof(H2_PREFACE) - 1)

/* One field of a stream's header list, as HPACK decoded it. */
struct h2_field {
	const uint8_t *name;
	size_t namelen;
	const uint8_t *value;
	size_t valuelen;
};

/* Why a header list is not a request (h2_request_head). */
enum h2_refusal {
	H2_OK = 0,
	H2_BAD_PSEUDO, /* a pseudo-header missing, repeated, unknown or after a field */
	H2_BAD_METHOD, /* not a token */
	H2_CONNECT,    /* CONNECT: idemproxy opens no tunnels */
	H2_BAD_PATH,   /* not starting with "/" (or "*" for OPTIONS), or with bytes a target may not
			  hold */
	H2_BAD_FIELD,  /* a name that is not a lower-case token, a value with CR, LF, NUL or edge
			  blanks */
	H2_CONN_SPECIFIC, /* Connection, Keep-Alive, Proxy-Connection, Transfer-Encoding, Upgrade,
			     or TE other than trailers */
};

/*
 * The HTTP/1.1 request head for a stream's header list f[0..n), appended
 * to out: the request line from :method and :path, Host from :authority
 * (which wins over a Host field), the fields in order with cookie crumbs
 * joined into one Cookie, and, when body_follows and no content-length was
 * sent, Transfer-Encoding: chunked (the body is then written chunked).
 * *chunked says which. H2_OK, or why the list is refused (out is then
 * left as it was).
 */
enum h2_refusal h2_request_head(const struct h2_field *f, size_t n, int body_follows,
				struct evbuffer *out, int *chunked);

/* 1 when the first len bytes of buf may begin the preface (all of them match). */
int h2_preface_prefix(const char *buf, size_t len);

/* What a session takes from the configuration when it starts. */
struct h2_settings {
	uint32_t max_streams;	  /* SETTINGS_MAX_CONCURRENT_STREAMS */
	uint32_t max_header_list; /* SETTINGS_MAX_HEADER_LIST_SIZE; twice it: reset unread */
	int64_t idle_ms;	  /* no open stream for this long: GOAWAY and close */
	size_t stream_buffer;	  /* bytes buffered per stream each way, beyond the windows */
	const char *peer;	  /* the client's address, for the log (outlives the session) */
};

/* What the listener does for a session. */
struct h2_ops {
	/*
	 * A stream's request begins: bev is the listener's end of its pair
	 * (taken over: freed by the listener). Returns the listener's handle
	 * for it, or NULL when refused (bev then already freed; the stream is
	 * reset with REFUSED_STREAM).
	 */
	void *(*stream_open)(void *arg, struct h2_stream *st, struct bufferevent *bev);
	/* The stream ended first (reset, or the session is closing): close handle now; it must
	 * not call h2_stream_conn_gone. */
	void (*stream_close)(void *arg, void *handle);
	/* The session is over (closed, failed, or drained): free it (h2_session_free). */
	void (*session_done)(void *arg);
};

/*
 * An HTTP/2 server session on bev, the carrier connection's bufferevent
 * (borrowed: its callbacks are the session's from now on; the bytes in its
 * input, the preface first, are the session's). NULL when out of memory.
 */
struct h2_session *h2_session_new(struct event_base *base, struct bufferevent *bev,
				  const struct h2_settings *set, const struct h2_ops *ops,
				  void *arg);

/* Shutdown: GOAWAY, no new streams; the session is done once its streams are. */
void h2_session_drain(struct h2_session *s);

/* Close every stream (stream_close for each) and free s. NULL is accepted. */
void h2_session_free(struct h2_session *s);

/*
 * The listener is freeing the virtual connection of st (its pair end):
 * what it wrote and the pair took is the whole response, and a response
 * cut short resets the stream. reset: the response was aborted and
 * must not look complete: the stream is reset.
 */
void h2_stream_conn_gone(struct h2_stream *st, int reset);

#endif
