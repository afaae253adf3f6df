/* Protocol upgrades: what may become a tunnel (see upgrade.h). */
#include "proxy/upgrade.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "proxy/base64.h"
#include "proxy/digest.h"
#include "proxy/http.h"

/* RFC 6455 1.3: appended to the client's key before it is hashed. */
static const char upgrade_ws_guid[] = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";
#define UPGRADE_WS_NONCE_LEN 16 /* a Sec-WebSocket-Key decodes to 16 bytes */
#define UPGRADE_WS_KEY_LEN   24 /* ... in 24 base64 characters */

/* The length of protocol's name, before any "/version". */
static size_t upgrade_name_len(const char *protocol)
{
	return strcspn(protocol, "/");
}

/* 1 when protocols a and b have the same name (any case). */
static int upgrade_same_name(const char *a, const char *b)
{
	size_t n = upgrade_name_len(a);

	return n == upgrade_name_len(b) && strncasecmp(a, b, n) == 0;
}

static int upgrade_is_websocket(const char *protocol)
{
	return upgrade_same_name(protocol, "websocket");
}

/* The request's Sec-WebSocket-Key when it is one (16 bytes in base64), else NULL. */
static const char *upgrade_ws_key(const struct http_msg *m)
{
	unsigned char nonce[UPGRADE_WS_NONCE_LEN];
	const char *key = http_msg_header(m, "Sec-WebSocket-Key");
	size_t len;

	if (!key || http_msg_header_count(m, "Sec-WebSocket-Key") != 1 ||
	    strlen(key) != UPGRADE_WS_KEY_LEN ||
	    base64_decode(key, UPGRADE_WS_KEY_LEN, BASE64_STD, nonce, sizeof(nonce), &len) < 0 ||
	    len != UPGRADE_WS_NONCE_LEN)
		return NULL;
	return key;
}

const char *upgrade_wanted(const struct http_msg *m, char *const *allowed, int nallowed)
{
	const char *protocol;

	if (!http_msg_wants_upgrade(m))
		return NULL;
	protocol = http_msg_known(m, HTTP_N_UPGRADE);
	/* One protocol, not a list of them to choose from. */
	if (strpbrk(protocol, ", \t"))
		return NULL;
	for (int i = 0; i < nallowed; i++) {
		if (!upgrade_same_name(protocol, allowed[i]))
			continue;
		if (upgrade_is_websocket(protocol) &&
		    (strcmp(m->method, "GET") != 0 || !upgrade_ws_key(m)))
			return NULL;
		return protocol;
	}
	return NULL;
}

/* 1 when accept is the Sec-WebSocket-Accept that key calls for. */
static int upgrade_ws_accepts(const char *key, const char *accept)
{
	char text[UPGRADE_WS_KEY_LEN + sizeof(upgrade_ws_guid)];
	unsigned char sha1[DIGEST_SHA1_LEN];
	size_t len;
	char *want;
	int ok;

	memcpy(text, key, UPGRADE_WS_KEY_LEN);
	memcpy(text + UPGRADE_WS_KEY_LEN, upgrade_ws_guid, sizeof(upgrade_ws_guid));
	if (digest_sha1_of(text, strlen(text), sha1) < 0 ||
	    !(want = base64_encode(sha1, sizeof(sha1), &len)))
		return 0;
	ok = strcmp(want, accept) == 0;
	free(want);
	return ok;
}

const char *upgrade_switch_refused(const struct http_msg *req, const struct http_msg *resp,
				   const char *protocol)
{
	const char *to = http_msg_known(resp, HTTP_N_UPGRADE);
	const char *accept;

	if (!to || http_msg_header_count(resp, "Upgrade") != 1 || !upgrade_same_name(to, protocol))
		return "its Upgrade names another protocol than the request's";
	if (!upgrade_is_websocket(protocol))
		return NULL;
	accept = http_msg_header(resp, "Sec-WebSocket-Accept");
	if (!accept || http_msg_header_count(resp, "Sec-WebSocket-Accept") != 1 ||
	    !upgrade_ws_accepts(upgrade_ws_key(req), accept))
		return "its Sec-WebSocket-Accept does not answer the request's Sec-WebSocket-Key";
	return NULL;
}
