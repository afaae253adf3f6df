/* The request as it goes upstream. */
#ifndef IDEMPROXY_FORWARD_H
#define IDEMPROXY_FORWARD_H

struct evbuffer;
struct http_msg;

/*
 * Append request m, as it goes upstream, to out: hop-by-hop headers and
 * Expect removed, Host added from default_host when m has none,
 * X-Forwarded-For (earlier hops kept, peer appended), X-Forwarded-Proto and
 * Via set, the body framed by Content-Length. m's body is moved into out.
 */
void forward_build(struct evbuffer *out, struct http_msg *m, const char *peer,
		   const char *default_host);

#endif
