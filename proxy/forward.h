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

/*
 * Append request m, as it goes upstream, to out: hop-by-hop headers and
 * Expect removed, Host added from default_host when m has none,
 * X-Forwarded-For (earlier hops kept, peer appended), X-Forwarded-Proto and
 * Via set. Without FORWARD_STREAMED, m's body follows, framed by
 * Content-Length, and is moved into out.
 */
void forward_build(struct evbuffer *out, struct http_msg *m, const char *peer,
		   const char *default_host, unsigned flags);

#endif
