/* The request as it goes upstream. */
#ifndef IDEMPROXY_FORWARD_H
#define IDEMPROXY_FORWARD_H

struct evbuffer;
struct http_msg;

enum forward_flags {
	/* The body follows later (relay.c streams it): framed as the client
	 * framed it, Content-Length or chunked; m's body is not used. */
	FORWARD_STREAMED = 1,
	/* A pass-through upgrade: Connection: upgrade and Upgrade go along. */
	FORWARD_UPGRADE = 2,
};

/* How idemproxy sees the client, for the forwarding headers (docs/http.md, "Intercepted requests"). */
struct forward_view {
	const char *peer;         /* the client's address, numeric */
	int trusted;              /* peer is in trusted_proxies: its forwarding headers are kept */
	const char *proto;        /* "http", or "https" on a TLS listener */
	const char *default_host; /* Host when the client sent none */
	int underscores;          /* header names holding '_' go along (underscores_in_headers on) */
	const char *request_id;	  /* X-Request-Id: the request's (trace.h); NULL: none */
	int trailers;		  /* the upstream may speak HTTP/2: a client's TE: trailers
				   * goes on (gRPC servers require it) */
	const char *key_header;	  /* forward_key's header: the client's never goes along; NULL: none */
	const char *key_value;	  /* ... and idemproxy's value of it; NULL: none set */
};

/*
 * How many of m's headers forward_build() leaves out under v for their
 * name alone: names holding '_', unless v keeps them. CGI, WSGI and PHP
 * read "X_Actor_Id" and "X-Actor-Id" as one variable (HTTP_X_ACTOR_ID), so
 * such a name could stand in for a header the upstream trusts.
 */
int forward_dropped_names(const struct http_msg *m, const struct forward_view *v);

/*
 * Append request m, as it goes upstream, to out: hop-by-hop headers,
 * Expect, idemproxy's own markers and the names forward_dropped_names()
 * counts removed, Host added when m has none.
 * X-Forwarded-For, X-Forwarded-Proto, X-Forwarded-Host, Forwarded and
 * X-Real-IP say what idemproxy saw (v); from a trusted peer its own values
 * are kept, the peer appended to the two lists (X-Forwarded-For,
 * Forwarded). Via is set, and X-Request-Id to v's; v->key_header, when
 * set, never goes as the client sent it, and is set to v->key_value when
 * there is one (forward_key). With v->trailers, a TE
 * that lists trailers goes on as "TE: trailers" (and Connection names it).
 * Without FORWARD_STREAMED, m's body follows,
 * framed by Content-Length, and is moved into out.
 */
void forward_build(struct evbuffer *out, struct http_msg *m, const struct forward_view *v,
		   unsigned flags);

#endif
