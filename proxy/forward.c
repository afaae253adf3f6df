/* Forwarded requests: what idemproxy changes on the way upstream. */
#include "proxy/forward.h"

#include <string.h>
#include <strings.h>

#include <event2/buffer.h>

#include "proxy/http.h"

/* "Name: v1, v2, ..., ours": every occurrence of name in m, then ours. */
static void forward_joined_header(struct evbuffer *out, const struct http_msg *m,
				  const char *name, const char *ours)
{
	http_add_str(out, name);
	http_add_lit(out, ": ");
	for (int i = 0; i < m->nheaders; i++) {
		if (!strcasecmp(m->headers[i].name, name) && *m->headers[i].value) {
			http_add_str(out, m->headers[i].value);
			http_add_lit(out, ", ");
		}
	}
	http_add_str(out, ours);
	http_add_lit(out, "\r\n");
}

/* Headers of the client's request that idemproxy replaces or drops. */
static int forward_drops(const struct http_msg *m, const char *name)
{
	return http_msg_is_hop_header(m, name) || !strcasecmp(name, "Content-Length") ||
	       !strcasecmp(name, "Expect") || !strcasecmp(name, "X-Forwarded-Proto") ||
	       !strcasecmp(name, "X-Forwarded-For") || !strcasecmp(name, "Via");
}

void forward_build(struct evbuffer *out, struct http_msg *m, const char *peer,
		   const char *default_host, unsigned flags)
{
	size_t body_len = evbuffer_get_length(m->body);
	int has_host = 0;

	http_add_str(out, m->method);
	http_add_lit(out, " ");
	http_add_str(out, m->target);
	http_add_lit(out, " HTTP/1.1\r\n");
	for (int i = 0; i < m->nheaders; i++) {
		const struct http_header *h = &m->headers[i];
		if (forward_drops(m, h->name))
			continue;
		if (!strcasecmp(h->name, "Host"))
			has_host = 1;
		http_add_header(out, h->name, h->value);
	}
	if (!has_host)
		http_add_header(out, "Host", default_host);
	forward_joined_header(out, m, "X-Forwarded-For", peer);
	http_add_lit(out, "X-Forwarded-Proto: http\r\n");
	forward_joined_header(out, m, "Via", m->version_minor ? "1.1 idemproxy" : "1.0 idemproxy");
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
