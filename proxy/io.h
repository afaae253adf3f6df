/*
 * Direct socket I/O on a bufferevent's buffers. A socket bufferevent reads
 * only after an ioctl(FIONREAD) and writes only from its write event, which
 * costs an epoll_ctl pair per write; these do one recv(2) or writev(2) now.
 */
#ifndef IDEMPROXY_IO_H
#define IDEMPROXY_IO_H

#include <stddef.h>

struct bufferevent;

/* One read of a head, and one read of a body or tunnel, at the most. */
#define IO_HEAD_CHUNK (16 * 1024)
/* The first read of a head into an empty buffer: most heads fit, and the
 * block libevent allocates for it (this plus its 48-byte chain header,
 * rounded up to a power of two) stays at 4 KiB instead of 32 KiB. */
#define IO_HEAD_FIRST 4000
#define IO_BODY_CHUNK (64 * 1024)
/* The most a bufferevent writes or reads in one go (libevent's default is
 * 16 KiB, which halves a streamed transfer once its buffer backs up). */
#define IO_SINGLE_MAX (256 * 1024)

/* How much to read for a head: IO_HEAD_FIRST into an empty input buffer, else IO_HEAD_CHUNK. */
size_t io_head_chunk(struct bufferevent *bev);

/* Set bev's single read and write to IO_SINGLE_MAX. */
void io_tune(struct bufferevent *bev);

/*
 * Write what bev's output buffer holds with one writev(2). Returns -1 on a
 * socket error, else 0; what the socket did not take stays queued. A TLS
 * bufferevent is left alone: it encrypts and writes from its write event;
 * so is one without a socket (a pair), which writes itself.
 */
int io_write_now(struct bufferevent *bev);

/*
 * Append up to max bytes from bev's socket to its input buffer with one
 * recv(2). Returns the bytes read, 0 at end of stream, -1 on a socket
 * error, or -2 when nothing is there yet.
 */
int io_read_now(struct bufferevent *bev, size_t max);

#endif
