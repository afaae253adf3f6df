/*
 * Protocol upgrades (upgrade.c): which pass-through requests may switch
 * protocols, and whether the upstream's 101 switched to what was asked.
 * Only the protocols of tunnel_upgrades are tunnelled; everything else a
 * request asks to upgrade to (h2c above all) goes upstream as a plain
 * request, without its Upgrade, so no tunnel can carry requests past
 * enforcement. A WebSocket upgrade (RFC 6455 4.1, 4.2.2) must be a GET with
 * a Sec-WebSocket-Key, and its 101 must carry the Sec-WebSocket-Accept that
 * key calls for, before a byte is tunnelled.
 */
#ifndef IDEMPROXY_UPGRADE_H
#define IDEMPROXY_UPGRADE_H

struct http_msg;

/*
 * The protocol request m may switch to: its one Upgrade value when it is
 * an HTTP/1.1 upgrade request (http_msg_wants_upgrade) naming one protocol
 * of the nallowed in allowed (the name before any "/" compared
 * case-insensitively), and, for websocket, a GET with a valid
 * Sec-WebSocket-Key. NULL when the request is not to be upgraded. The
 * string is m's.
 */
const char *upgrade_wanted(const struct http_msg *m, char *const *allowed, int nallowed);

/*
 * Whether resp, a 101 to req whose upgrade to protocol was honoured,
 * switched to it: resp's Upgrade names the same protocol, and a websocket
 * 101 carries the Sec-WebSocket-Accept of req's key. NULL when it did, else
 * why not (a static string, for the log).
 */
const char *upgrade_switch_refused(const struct http_msg *req, const struct http_msg *resp,
				   const char *protocol);

#endif
