/*
 * Strict incremental HTTP/1.x message parser for both directions.
 *
 * The parser consumes bytes from an evbuffer and builds one struct http_msg
 * at a time: request or status line, headers, and the decoded body
 * (Content-Length or chunked; read-until-close for responses). It rejects
 * ambiguous framing instead of guessing, because a proxy that frames a
 * message differently from the server behind it is a smuggling vector.
 */
#ifndef IDEMPROXY_HTTP_H
#define IDEMPROXY_HTTP_H

#include <stddef.h>
#include <stdint.h>

#include "http/header.h"

struct evbuffer;

#define HTTP_MAX_HEAD 32768      /* start line + headers, bytes */
#define HTTP_MAX_HEADERS 100
#define HTTP_MAX_CHUNK_LINE 1024 /* chunk-size line incl. extensions */

enum http_kind {
	HTTP_REQUEST,
	HTTP_RESPONSE,
};

struct http_header {
	char *name;   /* as received, NUL-terminated */
	char *value;  /* leading/trailing blanks removed, NUL-terminated */
	size_t name_len, value_len;
	enum http_name known;
	unsigned policy; /* its row's flags in the header-policy table (http/header.h) */
};

struct http_msg {
	enum http_kind kind;

	/* requests */
	char *method;     /* as received: upper-case letters, '-' and '_' */
	char *target;     /* request-target as received (what goes upstream) */
	size_t raw_path_len; /* target's bytes before its '?' */
	int slash_alias;     /* those bytes hold a backslash, %2F or %5C (path_slash_alias) */
	char *path;       /* the target's path normalised (path.h), NUL-terminated copy;
			   * an absolute-form target's path, "*" for OPTIONS * */
	size_t path_len;
	char *query;      /* after '?', NUL-terminated copy; NULL when no '?' */
	size_t query_len;

	/* responses */
	int status;
	char *reason;

	int version_minor;            /* HTTP/1.<minor>: 0 or 1 */
	struct http_header *headers;
	int nheaders;

	int64_t content_length;       /* -1 when absent */
	int chunked;                  /* Transfer-Encoding: chunked */
	int keep_alive;               /* from version and Connection */
	int expect_continue;          /* request had Expect: 100-continue */
	int connection_names;         /* Connection lists more than close, keep-alive, upgrade */

	struct evbuffer *body;        /* decoded body bytes */
	struct evbuffer *trailers;    /* responses: trailer fields relayed after the body, as
				       * "name: value\r\n" lines (http_trailers_keep); NULL: none */
};

enum http_status {
	HTTP_MORE = 0,          /* need more bytes */
	HTTP_DONE,              /* one whole message parsed */
	HTTP_HEAD,              /* HTTP_OPT_HEAD: a head is complete and a body follows */
	HTTP_ERR_BAD,           /* malformed or ambiguous framing */
	HTTP_ERR_METHOD,        /* a request method other than A-Z, '-' and '_' */
	HTTP_ERR_CONNECT,       /* CONNECT, whatever its target: idemproxy opens no tunnel to it */
	HTTP_ERR_TARGET,        /* a request path that cannot be normalised (path.h) */
	HTTP_ERR_HEAD_TOO_LARGE,
	HTTP_ERR_TARGET_TOO_LONG, /* a request line alone over HTTP_MAX_HEAD */
	HTTP_ERR_BODY_TOO_LARGE,
};

struct http_parser;

/*
 * A parser for messages of one kind. Bodies larger than max_body bytes
 * (decoded) fail with HTTP_ERR_BODY_TOO_LARGE, detected from Content-Length
 * before any body byte is read when possible; 0 means no limit.
 */
struct http_parser *http_parser_new(enum http_kind kind, size_t max_body);
void http_parser_free(struct http_parser *p);

enum http_options {
	/* Stop once a head is complete when a body follows: feed returns
	 * HTTP_HEAD, so the caller can take the head and stream the body
	 * (http_parser_take_head) or set a body limit before it is read. */
	HTTP_OPT_HEAD = 1,
	/* Responses: an interim 1xx response (other than 100 and 101) is a
	 * message of its own (HTTP_DONE, status < 200), not skipped. */
	HTTP_OPT_INTERIM = 2,
	/* A chunked body's trailer fields are kept (http_parser_trailers),
	 * not dropped. */
	HTTP_OPT_TRAILERS = 4,
};

/* Set the parser's options (a mask of enum http_options). */
void http_parser_set_options(struct http_parser *p, unsigned options);

/*
 * After HTTP_HEAD: limit the body of the message being parsed to max_body
 * decoded bytes (0: none). Returns -1 when its Content-Length already says
 * more (the parser is then unusable), else 0.
 */
int http_parser_limit_body(struct http_parser *p, size_t max_body);

/*
 * After HTTP_HEAD: take the message being parsed (the caller owns and
 * frees it) before its body is read, to stream the body. The decoded body
 * bytes, those read so far and those of every later feed, collect in
 * http_parser_body(), which the caller drains at its own pace. Feed returns
 * HTTP_DONE once the body is complete; http_parser_take then returns NULL
 * and readies the parser for the next message (dropping undrained bytes).
 */
struct http_msg *http_parser_take_head(struct http_parser *p);

/*
 * With HTTP_OPT_TRAILERS, once a message is done (and until it is taken):
 * its trailer fields as "name: value\r\n" lines (checked as header fields
 * are, blanks around the value removed), owned by p; NULL when it had none.
 */
struct evbuffer *http_parser_trailers(struct http_parser *p);

/* The decoded body bytes of a message whose head was taken; NULL for others. */
struct evbuffer *http_parser_body(struct http_parser *p);

/*
 * For responses: the request that this response answers was HEAD, so the
 * response has no body whatever its headers say. Set before feeding.
 */
void http_parser_expect_no_body(struct http_parser *p, int no_body);

/*
 * For responses: the request asked to upgrade, so a 101 response is its
 * answer (HTTP_DONE, no body; what follows is no longer HTTP). Without
 * this a 101 is malformed. Set before feeding.
 */
void http_parser_expect_upgrade(struct http_parser *p, int upgrade);

/*
 * Consume as many bytes of in as belong to the current message. Returns
 * HTTP_DONE when a whole message is ready (take it with http_parser_take;
 * bytes after it stay in in), HTTP_MORE when more input is needed, or an
 * error (the parser is then unusable; the connection must be closed).
 * Interim 1xx responses (other than 101) are consumed and skipped, unless
 * HTTP_OPT_INTERIM makes them messages; HTTP_OPT_HEAD adds HTTP_HEAD.
 */
enum http_status http_parser_feed(struct http_parser *p, struct evbuffer *in);

/*
 * The peer closed the connection. Returns HTTP_DONE when that completes a
 * read-until-close response body, HTTP_ERR_BAD when a message was cut short,
 * HTTP_MORE when nothing of a message had been received.
 */
enum http_status http_parser_eof(struct http_parser *p);

/* 1 once the current message's head is complete (its body may still come). */
int http_parser_head_complete(const struct http_parser *p);

/* The message being parsed (head valid once head_complete), owned by p. */
const struct http_msg *http_parser_msg(const struct http_parser *p);

/* 1 when any byte of a message has been consumed since the last take. */
int http_parser_started(const struct http_parser *p);

/*
 * Take the finished message (caller frees); the parser is ready for the
 * next. NULL when no message is finished, or when its head was taken
 * (the parser is then ready for the next message all the same). Taking an
 * interim response keeps the no-body and upgrade settings for the final one.
 */
struct http_msg *http_parser_take(struct http_parser *p);

void http_msg_free(struct http_msg *m);

/* First header named name (case-insensitive) or NULL. */
const char *http_msg_header(const struct http_msg *m, const char *name);

/* Number of headers named name (case-insensitive). */
int http_msg_header_count(const struct http_msg *m, const char *name);

/* The first header of m that http_name_of classified as known, or NULL. */
const char *http_msg_known(const struct http_msg *m, enum http_name known);

/* What name (len bytes, case-insensitive) is among enum http_name. */
enum http_name http_name_of(const char *name, size_t len);

/*
 * 1 when m's own header h is hop-by-hop for m: Connection, Keep-Alive,
 * Proxy-Connection, Proxy-Authenticate, Proxy-Authorization, TE, Trailer,
 * Transfer-Encoding, HTTP2-Settings, Upgrade (by its class), or a name listed in a
 * Connection header.
 */
int http_header_is_hop(const struct http_msg *m, const struct http_header *h);

/*
 * Move the trailer fields of response m, "name: value\r\n" lines as
 * http_parser_trailers() or an HTTP/2 exchange gives them, from fields to
 * to, leaving out those that do not go on: hop-by-hop ones (as
 * http_header_is_hop, m's Connection included), framing and routing ones
 * (Content-Length, Host), idemproxy's markers and fresh fields (Date,
 * X-Request-Id). What is kept counts against the head limits: at most
 * HTTP_MAX_HEADERS fields with m's own and HTTP_MAX_HEAD bytes; fields past
 * them are left out. fields is left empty. Returns the count left out.
 */
int http_trailers_keep(const struct http_msg *m, struct evbuffer *fields, struct evbuffer *to);

/* 1 when a TE header of request m lists "trailers": the client takes them. */
int http_msg_takes_trailers(const struct http_msg *m);

/* One "name: value\r\n" line, as http_trailers_keep writes trailer lines. */
struct http_line {
	const char *start; /* the line, its CRLF included: len bytes */
	size_t len;
	const char *name; /* up to its first ':' (name_len 0: none) */
	size_t name_len;
	const char *value; /* after ": ", without the CRLF; NULL: the line has no room for one */
	size_t value_len;
};

/* The line at *at, before end, into *line, *at moved past it: 1, or 0 when
 * no whole line (ending in LF) is left. */
int http_line_next(const char **at, const char *end, struct http_line *line);

/*
 * The value of m's field named name (case-insensitive): from its trailers
 * when it has one there, else from its head; NULL when neither has it.
 * *len is the value's length (a trailer's is not NUL-terminated).
 */
const char *http_msg_field(struct http_msg *m, const char *name, size_t *len);

/* Lower-case the len bytes at s in place (a field name, as HTTP/2 wants it). */
void http_lower(char *s, size_t len);

/*
 * 1 when request m asks to switch protocols (RFC 9110 7.8): HTTP/1.1, an
 * Upgrade header and "upgrade" among the Connection options.
 */
int http_msg_wants_upgrade(const struct http_msg *m);

/* 1 for the safe methods (RFC 9110 9.2.1): GET, HEAD, OPTIONS, TRACE. */
int http_method_is_safe(const char *method);

/* 1 when a response with this status has no body nor Content-Length: 1xx, 204, 304. */
int http_status_bodiless(int status);

/* The standard reason phrase of status ("Created"), or a generic one. */
const char *http_status_reason(int status);

/* Writers of message heads, appending to out without printf. */
#define http_add_lit(out, lit) evbuffer_add(out, lit, sizeof(lit) - 1)
void http_add_str(struct evbuffer *out, const char *s);
/* "Name: value\r\n" */
void http_add_header(struct evbuffer *out, const char *name, const char *value);
/* Header h of a parsed message as it goes on: "name: value\r\n". */
void http_add_field(struct evbuffer *out, const struct http_header *h);

/* "name: VALUE\r\n" with value in decimal (a length, a count), no printf. */
void http_add_length(struct evbuffer *out, const char *name, uint64_t value);
/* "Name: IMF-fixdate\r\n" for the time ms_from_now milliseconds (rounded up) from now. */
void http_add_date_after(struct evbuffer *out, const char *name, int64_t ms_from_now);
/* "Date: IMF-fixdate\r\n" for now (formatted once a second per thread). */
void http_add_date_now(struct evbuffer *out);
/* The len bytes of "Name: value\r\n" lines at lines, but for those whose
 * name's row (http/header.h) has one of the header_flag bits in flags. */
void http_add_lines_except(struct evbuffer *out, const char *lines, size_t len, unsigned flags);
/* "HTTP/1.1 STATUS REASON\r\n"; reason NULL or "" gives the standard phrase. */
void http_add_status_line(struct evbuffer *out, int status, const char *reason);

#endif
