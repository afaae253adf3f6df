/* Forwarded requests: what idemproxy changes on the way upstream. */
#include "proxy/forward.h"

#include <string.h>
#include <strings.h>

#include <event2/buffer.h>

#include "http/header.h"
#include "proxy/http.h"

/* Room for idemproxy's own Forwarded element; a longer Host is cut there. */
#define FORWARD_ELEMENT_MAX  1024
#define FORWARD_ELEMENT_TAIL 32 /* kept free for ";proto=..." and the line's end */

/* Appends the values of every header known as known in m, each followed by ", "; 1 when there was one. */
static int forward_values(struct evbuffer *out, const struct http_msg *m, enum http_name known)
{
	int any = 0;

	for (int i = 0; i < m->nheaders; i++) {
		if (m->headers[i].known == known && *m->headers[i].value) {
			http_add_str(out, m->headers[i].value);
			http_add_lit(out, ", ");
			any = 1;
		}
	}
	return any;
}

/* "Name: v1, v2, ..., ours": every occurrence of name (known) in m (when kept), then ours. */
static void forward_joined_header(struct evbuffer *out, const struct http_msg *m,
				  const char *name, enum http_name known, int keep,
				  const char *ours)
{
	http_add_str(out, name);
	http_add_lit(out, ": ");
	if (keep)
		forward_values(out, m, known);
	http_add_str(out, ours);
	http_add_lit(out, "\r\n");
}

/* "Name: theirs" from a trusted peer that sent it, else "Name: ours". */
static void forward_kept_header(struct evbuffer *out, const struct http_msg *m, const char *name,
				enum http_name known, int keep, const char *ours)
{
	const char *theirs = keep ? http_msg_known(m, known) : NULL;

	http_add_header(out, name, theirs && *theirs ? theirs : ours);
}

/*
 * Forwarded (RFC 7239): the trusted peer's elements, then ours: for, host
 * (a quoted-string, '"' and '\\' escaped), proto.
 */
static void forward_forwarded(struct evbuffer *out, const struct http_msg *m,
			      const struct forward_view *v, const char *host)
{
	char ours[FORWARD_ELEMENT_MAX];
	size_t n = 0, peer = strlen(v->peer), proto = strlen(v->proto);
	int v6 = strchr(v->peer, ':') != NULL;

	http_add_lit(out, "Forwarded: ");
	if (v->trusted)
		forward_values(out, m, HTTP_N_FORWARDED);
	/* "for=" ["[ "] peer ["]"] ";host=\"" host "\";proto=" proto "\r\n", cut to fit */
	memcpy(ours, v6 ? "for=\"[" : "for=", v6 ? 6 : 4);
	n = v6 ? 6 : 4;
	if (peer > sizeof(ours) / 4)
		peer = sizeof(ours) / 4;
	memcpy(ours + n, v->peer, peer);
	n += peer;
	if (v6) {
		memcpy(ours + n, "]\"", 2);
		n += 2;
	}
	memcpy(ours + n, ";host=\"", 7);
	n += 7;
	for (; *host && n < sizeof(ours) - FORWARD_ELEMENT_TAIL; host++) {
		if (*host == '"' || *host == '\\')
			ours[n++] = '\\';
		ours[n++] = *host;
	}
	memcpy(ours + n, "\";proto=", 8);
	n += 8;
	if (proto > FORWARD_ELEMENT_TAIL - 12)
		proto = FORWARD_ELEMENT_TAIL - 12;
	memcpy(ours + n, v->proto, proto);
	n += proto;
	memcpy(ours + n, "\r\n", 2);
	evbuffer_add(out, ours, n + 2);
}

/* A header name that v does not forward as it is (forward_dropped_names()). */
static int forward_drops_name(const struct forward_view *v, const struct http_header *h)
{
	return !v->underscores && strchr(h->name, '_') != NULL;
}

int forward_dropped_names(const struct http_msg *m, const struct forward_view *v)
{
	int n = 0;

	for (int i = 0; i < m->nheaders; i++)
		n += forward_drops_name(v, &m->headers[i]);
	return n;
}

/* Headers of the client's request that idemproxy replaces or drops. */
static int forward_drops(const struct http_msg *m, const struct forward_view *v,
			 const struct http_header *h)
{
	return forward_drops_name(v, h) || (h->policy & (HEADER_MARKER | HEADER_REBUILT)) ||
	       http_header_is_hop(m, h) ||
	       (v->key_header && strcasecmp(h->name, v->key_header) == 0);
}

void forward_build(struct evbuffer *out, struct http_msg *m, const struct forward_view *v,
		   unsigned flags)
{
	size_t body_len = evbuffer_get_length(m->body);
	const char *host = http_msg_known(m, HTTP_N_HOST);

	http_add_str(out, m->method);
	http_add_lit(out, " ");
	http_add_str(out, m->target);
	http_add_lit(out, " HTTP/1.1\r\n");
	for (int i = 0; i < m->nheaders; i++) {
		const struct http_header *h = &m->headers[i];
		if (!forward_drops(m, v, h))
			http_add_field(out, h);
	}
	if (!host || !*host) {
		host = v->default_host;
		if (!http_msg_known(m, HTTP_N_HOST))
			http_add_header(out, "Host", host);
	}
	forward_joined_header(out, m, "X-Forwarded-For", HTTP_N_X_FORWARDED_FOR, v->trusted, v->peer);
	forward_kept_header(out, m, "X-Forwarded-Proto", HTTP_N_X_FORWARDED_PROTO, v->trusted,
			    v->proto);
	forward_kept_header(out, m, "X-Forwarded-Host", HTTP_N_X_FORWARDED_HOST, v->trusted, host);
	forward_kept_header(out, m, "X-Real-IP", HTTP_N_X_REAL_IP, v->trusted, v->peer);
	forward_forwarded(out, m, v, host);
	forward_joined_header(out, m, "Via", HTTP_N_VIA, 1,
			      m->version_minor ? "1.1 idemproxy" : "1.0 idemproxy");
	if (v->request_id)
		http_add_header(out, "X-Request-Id", v->request_id);
	if (v->key_header && v->key_value)
		http_add_header(out, v->key_header, v->key_value);
	if (flags & FORWARD_UPGRADE) {
		http_add_lit(out, "Connection: upgrade\r\n");
		http_add_header(out, "Upgrade", http_msg_known(m, HTTP_N_UPGRADE));
	} else if (v->trailers && http_msg_takes_trailers(m)) {
		http_add_lit(out, "TE: trailers\r\nConnection: TE\r\n");
	}
	if (flags & FORWARD_STREAMED) {
		if (m->chunked)
			http_add_lit(out, "Transfer-Encoding: chunked\r\n");
		else
			http_add_length(out, "Content-Length", (uint64_t)m->content_length);
		http_add_lit(out, "\r\n");
		return;
	}
	/* A bodiless safe request stays bodiless; everything else says its length. */
	if (body_len || !http_method_is_safe(m->method))
		http_add_length(out, "Content-Length", body_len);
	http_add_lit(out, "\r\n");
	evbuffer_add_buffer(out, m->body);
}
