/* Forwarded requests: what idemproxy changes on the way upstream. */
#include "proxy/forward.h"

#include <string.h>
#include <strings.h>

#include <event2/buffer.h>

#include "proxy/http.h"
#include "proxy/marker.h"

/* Room for idemproxy's own Forwarded element; a longer Host is cut there. */
#define FORWARD_ELEMENT_MAX  1024
#define FORWARD_ELEMENT_TAIL 32 /* kept free for ";proto=..." and the line's end */

/* The forwarding headers, rebuilt from what idemproxy saw. */
static const char *const forward_view_names[] = {
    "X-Forwarded-For", "X-Forwarded-Proto", "X-Forwarded-Host", "Forwarded", "X-Real-IP",
};

/* Appends the values of every occurrence of name in m, each followed by ", "; 1 when there was one. */
static int forward_values(struct evbuffer *out, const struct http_msg *m, const char *name)
{
	int any = 0;

	for (int i = 0; i < m->nheaders; i++) {
		if (!strcasecmp(m->headers[i].name, name) && *m->headers[i].value) {
			http_add_str(out, m->headers[i].value);
			http_add_lit(out, ", ");
			any = 1;
		}
	}
	return any;
}

/* "Name: v1, v2, ..., ours": every occurrence of name in m (when kept), then ours. */
static void forward_joined_header(struct evbuffer *out, const struct http_msg *m,
				  const char *name, int keep, const char *ours)
{
	http_add_str(out, name);
	http_add_lit(out, ": ");
	if (keep)
		forward_values(out, m, name);
	http_add_str(out, ours);
	http_add_lit(out, "\r\n");
}

/* "Name: theirs" from a trusted peer that sent it, else "Name: ours". */
static void forward_kept_header(struct evbuffer *out, const struct http_msg *m, const char *name,
				int keep, const char *ours)
{
	const char *theirs = keep ? http_msg_header(m, name) : NULL;

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
		forward_values(out, m, "Forwarded");
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

/* Headers of the client's request that idemproxy replaces or drops. */
static int forward_drops(const struct http_msg *m, const char *name)
{
	for (size_t i = 0; i < sizeof(forward_view_names) / sizeof(forward_view_names[0]); i++) {
		if (!strcasecmp(name, forward_view_names[i]))
			return 1;
	}
	return http_msg_is_hop_header(m, name) || marker_header(name) ||
	       !strcasecmp(name, "Content-Length") || !strcasecmp(name, "Expect") ||
	       !strcasecmp(name, "Via");
}

void forward_build(struct evbuffer *out, struct http_msg *m, const struct forward_view *v,
		   unsigned flags)
{
	size_t body_len = evbuffer_get_length(m->body);
	const char *host = http_msg_header(m, "Host");

	http_add_str(out, m->method);
	http_add_lit(out, " ");
	http_add_str(out, m->target);
	http_add_lit(out, " HTTP/1.1\r\n");
	for (int i = 0; i < m->nheaders; i++) {
		const struct http_header *h = &m->headers[i];
		if (!forward_drops(m, h->name))
			http_add_header(out, h->name, h->value);
	}
	if (!host || !*host) {
		host = v->default_host;
		if (!http_msg_header(m, "Host"))
			http_add_header(out, "Host", host);
	}
	forward_joined_header(out, m, "X-Forwarded-For", v->trusted, v->peer);
	forward_kept_header(out, m, "X-Forwarded-Proto", v->trusted, v->proto);
	forward_kept_header(out, m, "X-Forwarded-Host", v->trusted, host);
	forward_kept_header(out, m, "X-Real-IP", v->trusted, v->peer);
	forward_forwarded(out, m, v, host);
	forward_joined_header(out, m, "Via", 1, m->version_minor ? "1.1 idemproxy" : "1.0 idemproxy");
	if (flags & FORWARD_UPGRADE) {
		http_add_lit(out, "Connection: upgrade\r\n");
		http_add_header(out, "Upgrade", http_msg_header(m, "Upgrade"));
	}
	if (flags & FORWARD_STREAMED) {
		if (m->chunked)
			http_add_lit(out, "Transfer-Encoding: chunked\r\n");
		else
			evbuffer_add_printf(out, "Content-Length: %lld\r\n",
					    (long long)m->content_length);
		http_add_lit(out, "\r\n");
		return;
	}
	/* A bodiless safe request stays bodiless; everything else says its length. */
	if (body_len || !http_method_is_safe(m->method))
		evbuffer_add_printf(out, "Content-Length: %zu\r\n", body_len);
	http_add_lit(out, "\r\n");
	evbuffer_add_buffer(out, m->body);
}
