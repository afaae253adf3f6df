/*
 * JSON-lines logger. Each line is built in a stack buffer and written whole
 * with write(2), so lines from different workers never interleave. Access
 * lines (one per request) are collected per thread and written in batches
 * by log_flush(), which each worker calls from a short timer: one system
 * call for many requests, as nginx's buffered access_log does. Every other
 * line flushes the batch first and goes out at once, in order.
 */
#include <openssl/sha.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "proxy/log.h"

#define LOG_LINE_MAX 2048
#define LOG_KEY_HASH_BYTES 6
#define LOG_BATCH_MAX 16384

static __thread struct {
	char buf[LOG_BATCH_MAX];
	size_t len;
} log_batch;

static __thread struct {
	time_t sec;
	char text[32];
	size_t len;
} log_clock = { -1, "", 0 };

enum log_level log_min_level = LOG_INFO;

static const char *const level_names[] = { "debug", "info", "warn", "error" };

struct line {
	char buf[LOG_LINE_MAX];
	size_t len;
};

static void line_raw(struct line *l, const char *s, size_t n)
{
	if (n > sizeof(l->buf) - 3 - l->len)
		n = sizeof(l->buf) - 3 - l->len;
	memcpy(l->buf + l->len, s, n);
	l->len += n;
}

/* Append s as the inside of a JSON string: quotes, backslashes and control
 * characters escaped. */
static void line_escaped(struct line *l, const char *s)
{
	char esc[8];

	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;
		if (c == '"' || c == '\\') {
			esc[0] = '\\';
			esc[1] = (char)c;
			line_raw(l, esc, 2);
		} else if (c < 0x20) {
			snprintf(esc, sizeof(esc), "\\u%04x", c);
			line_raw(l, esc, 6);
		} else {
			line_raw(l, s, 1);
		}
	}
}

static void line_str(struct line *l, const char *name, const char *value)
{
	line_raw(l, ",\"", 2);
	line_raw(l, name, strlen(name));
	line_raw(l, "\":\"", 3);
	line_escaped(l, value);
	line_raw(l, "\"", 1);
}

static void line_num(struct line *l, const char *name, long long value)
{
	char num[32];
	int n = snprintf(num, sizeof(num), "%lld", value);

	line_raw(l, ",\"", 2);
	line_raw(l, name, strlen(name));
	line_raw(l, "\":", 2);
	line_raw(l, num, (size_t)n);
}

static void line_start(struct line *l, enum log_level level)
{
	struct timespec ts;
	struct tm tm;
	char t[40];

	clock_gettime(CLOCK_REALTIME, &ts);
	/* The formatted second changes once a second: keep it per thread. */
	if (ts.tv_sec != log_clock.sec) {
		gmtime_r(&ts.tv_sec, &tm);
		log_clock.len = strftime(log_clock.text, sizeof(log_clock.text),
					 "%Y-%m-%dT%H:%M:%S", &tm);
		log_clock.sec = ts.tv_sec;
	}
	l->len = 0;
	line_raw(l, "{\"time\":\"", 9);
	line_raw(l, log_clock.text, log_clock.len);
	snprintf(t, sizeof(t), ".%03ldZ\"", ts.tv_nsec / 1000000);
	line_raw(l, t, strlen(t));
	line_str(l, "level", level_names[level]);
}

static void line_tag(struct line *l, const struct log_tag *tag)
{
	unsigned char md[SHA256_DIGEST_LENGTH];
	char hex[LOG_KEY_HASH_BYTES * 2 + 1];

	line_num(l, "request_id", (long long)tag->request_id);
	if (tag->route)
		line_str(l, "route", tag->route);
	if (tag->key_len) {
		SHA256((const unsigned char *)tag->key, tag->key_len, md);
		for (int i = 0; i < LOG_KEY_HASH_BYTES; i++)
			snprintf(hex + 2 * i, 3, "%02x", md[i]);
		line_str(l, "key_hash", hex);
	}
}

static void write_all(const char *buf, size_t len)
{
	while (len > 0) {
		ssize_t n = write(STDERR_FILENO, buf, len);
		if (n <= 0)
			return;
		buf += n;
		len -= (size_t)n;
	}
}

void log_flush(void)
{
	write_all(log_batch.buf, log_batch.len);
	log_batch.len = 0;
}

static void line_close(struct line *l)
{
	l->buf[l->len++] = '}';
	l->buf[l->len++] = '\n';
}

static void line_emit(struct line *l)
{
	line_close(l);
	log_flush();
	write_all(l->buf, l->len);
}

static void line_emit_batched(struct line *l)
{
	line_close(l);
	if (log_batch.len + l->len > sizeof(log_batch.buf))
		log_flush();
	memcpy(log_batch.buf + log_batch.len, l->buf, l->len);
	log_batch.len += l->len;
}

void log_write(enum log_level level, const struct log_tag *tag, const char *fmt, ...)
{
	struct line l;
	char msg[LOG_LINE_MAX / 2];
	va_list ap;

	if (level < log_min_level)
		return;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	line_start(&l, level);
	if (tag)
		line_tag(&l, tag);
	line_str(&l, "msg", msg);
	line_emit(&l);
}

void log_access(const struct log_tag *tag, const struct log_access *a)
{
	struct line l;

	if (log_min_level > LOG_INFO)
		return;
	line_start(&l, LOG_INFO);
	line_tag(&l, tag);
	line_str(&l, "msg", "request");
	line_str(&l, "method", a->method);
	line_str(&l, "path", a->path);
	line_num(&l, "status", a->status);
	line_str(&l, "outcome", a->outcome);
	line_num(&l, "duration_us", (long long)a->duration_us);
	line_num(&l, "upstream_us", (long long)a->upstream_us);
	line_num(&l, "store_us", (long long)a->store_us);
	line_emit_batched(&l);
}
