/* Replays: a stored record turned back into a response. */
#include "proxy/replay.h"

#include <event2/buffer.h>

#include "http/header.h"
#include "proxy/conn.h"
#include "proxy/http.h"
#include "proxy/record.h"

int replay_send(struct client_conn *c, const struct record *rec, int flags)
{
	int no_body = http_status_bodiless(rec->status);
	size_t body_len = rec->body_omitted || no_body ? 0 : rec->body_len;
	struct evbuffer *out;

	if (!c)
		return rec->status;
	out = conn_respond_start(c);
	http_add_status_line(out, rec->status, NULL);
	/* A record stored before Date and X-Request-Id were never stored may
	 * hold them: the replay sends its own (conn_respond_frame). */
	http_add_lines_except(out, rec->headers, rec->headers_len, HEADER_FRESH);
	http_add_lit(out, MARKER_REPLAYED ": true\r\n");
	http_add_date_after(out, MARKER_KEY_EXPIRES, rec->expires_in_ms);
	if (rec->body_omitted)
		http_add_lit(out, MARKER_BODY_OMITTED ": true\r\n");
	conn_respond_frame(c, body_len, flags | (no_body ? RESPOND_NO_LENGTH : 0));
	if (body_len)
		evbuffer_add(out, rec->body, body_len);
	conn_respond_send(c);
	return rec->status;
}
