/*
 * Direct socket I/O on bufferevent buffers. A socket bufferevent freezes
 * the start of its output (only it may drain it) and the end of its input
 * (only it may fill it); these functions unfreeze them for one system call.
 */
#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <sys/socket.h>

#include "proxy/io.h"

int io_write_now(struct bufferevent *bev)
{
	struct evbuffer *out = bufferevent_get_output(bev);
	int n;

	/* TLS: the bufferevent encrypts and writes (EV_WRITE); a pair (no
	 * socket) hands its output to its partner itself. */
	if (bufferevent_openssl_get_ssl(bev) || bufferevent_getfd(bev) < 0)
		return 0;
	evbuffer_unfreeze(out, 1);
	n = evbuffer_write(out, bufferevent_getfd(bev));
	evbuffer_freeze(out, 1);
	return n < 0 && errno != EAGAIN && errno != EINTR ? -1 : 0;
}

int io_read_now(struct bufferevent *bev, size_t max)
{
	struct evbuffer *in = bufferevent_get_input(bev);
	struct evbuffer_iovec v;
	ssize_t n;
	int rc;

	evbuffer_unfreeze(in, 0);
	if (evbuffer_reserve_space(in, (ev_ssize_t)max, &v, 1) < 1) {
		rc = -1;
		goto out;
	}
	n = recv(bufferevent_getfd(bev), v.iov_base, v.iov_len < max ? v.iov_len : max, 0);
	if (n > 0) {
		v.iov_len = (size_t)n;
		evbuffer_commit_space(in, &v, 1);
		rc = (int)n;
	} else if (n == 0) {
		rc = 0;
	} else {
		rc = errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? -2 : -1;
	}
out:
	evbuffer_freeze(in, 0);
	return rc;
}

size_t io_head_chunk(struct bufferevent *bev)
{
	return evbuffer_get_length(bufferevent_get_input(bev)) ? IO_HEAD_CHUNK : IO_HEAD_FIRST;
}

void io_tune(struct bufferevent *bev)
{
	bufferevent_set_max_single_write(bev, IO_SINGLE_MAX);
	bufferevent_set_max_single_read(bev, IO_SINGLE_MAX);
}
