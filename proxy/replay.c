/* Replays: a stored record turned back into a response. */
#include "proxy/replay.h"

#include <event2/buffer.h>

#include "http/header.h"
#include "proxy/conn.h"
#include "proxy/http.h"
#include "proxy/record.h"
#include "proxy/respond.h"

int replay_says_final(int status)
{
	return status >= 500 && status <= 599;
}

int replay_send(struct client_conn *c, const struct record *rec, int flags, int stripe)
{
	int final = replay_says_final(rec->status);
	int no_body = http_status_bodiless(rec->status);
	size_t body_len = rec->body_omitted || no_body ? 0 : rec->body_len, head_len;
	const char *trailers;
	struct evbuffer *out;

	if (!c)
		return rec->status;
	/* Trailers follow the header lines after a blank line (record.h);
	 * a client that cannot take a chunked body does not get them. */
	head_len = record_trailers_at(rec->headers, rec->headers_len);
	trailers = head_len < rec->headers_len ? rec->headers + head_len + 2 : NULL;
	if (no_body || (flags & (RESPOND_HEAD | RESPOND_NO_CHUNKS)))
		trailers = NULL;
	out = conn_respond_start(c);
	http_add_status_line(out, rec->status, NULL);
	/* A record stored before Date and X-Request-Id were never stored may
	 * hold them: the replay sends its own (conn_respond_frame). */
	http_add_lines_except(out, rec->headers, head_len,
			      HEADER_FRESH | (final ? HEADER_RETRY_ADVICE : 0));
	http_add_lit(out, MARKER_REPLAYED ": true\r\n");
	/* The stored outcome never changes: a retry would get it again.
	 * gRPC trailers (and a trailers-only head's grpc-status) stay. */
	if (final) {
		http_add_lit(out, "X-Should-Retry: false\r\n");
		if (stripe)
			http_add_lit(out, "Stripe-Should-Retry: false\r\n");
	}
	http_add_date_after(out, MARKER_KEY_EXPIRES, rec->expires_in_ms);
	if (rec->body_omitted)
		http_add_lit(out, MARKER_BODY_OMITTED ": true\r\n");
	if (trailers) {
		respond_whole_chunked(c, out, body_len, flags);
		if (body_len) {
			evbuffer_add(out, rec->body, body_len);
			http_add_lit(out, "\r\n");
		}
		respond_last_chunk_lines(out, trailers,
					 rec->headers_len - (size_t)(trailers - rec->headers));
	} else {
		conn_respond_frame(c, body_len, flags | (no_body ? RESPOND_NO_LENGTH : 0));
		if (body_len)
			evbuffer_add(out, rec->body, body_len);
	}
	conn_respond_send(c);
	return rec->status;
}
