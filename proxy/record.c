/* What a record keeps of a response. */
#include "proxy/record.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <event2/buffer.h>

#include "proxy/http.h"
#include "proxy/marker.h"

/* Response headers a record keeps (plus the route's store_headers). */
static const char *const record_kept_names[] = {
	"Content-Type", "Content-Location", "Location", "ETag", "Last-Modified",
};

/* Never kept, whatever store_headers says: credentials and cookies. */
static const char *const record_never_names[] = {
	"Set-Cookie", "Set-Cookie2", "Authorization", "Proxy-Authorization", "Cookie",
	"WWW-Authenticate", "Proxy-Authenticate", "Content-Length",
};

static int record_name_in(const char *name, const char *const *names, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (strcasecmp(name, names[i]) == 0)
			return 1;
	return 0;
}

#define RECORD_NAME_IN(name, arr) record_name_in(name, arr, sizeof(arr) / sizeof(arr[0]))

char *record_headers(const struct http_msg *resp, char *const *extra, int nextra, size_t *len)
{
	struct evbuffer *b = evbuffer_new();
	char *lines = NULL;
	size_t n;

	if (!b)
		return NULL;
	for (int i = 0; i < resp->nheaders; i++) {
		const struct http_header *h = &resp->headers[i];
		if (RECORD_NAME_IN(h->name, record_never_names) ||
		    http_msg_is_hop_header(resp, h->name) || marker_header(h->name))
			continue;
		if (!RECORD_NAME_IN(h->name, record_kept_names) &&
		    !record_name_in(h->name, (const char *const *)extra, (size_t)nextra))
			continue;
		http_add_header(b, h->name, h->value);
	}
	n = evbuffer_get_length(b);
	lines = malloc(n + 1);
	if (lines) {
		evbuffer_remove(b, lines, n);
		lines[n] = '\0';
		*len = n;
	}
	evbuffer_free(b);
	return lines;
}
