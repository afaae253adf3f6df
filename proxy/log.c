/*
 * JSON-lines logger. Each line is built in a stack buffer and written whole
 * with write(2), so lines from different workers never interleave. Access
 * lines (one per request) are collected per thread and written in batches
 * by log_flush(), which each worker calls from a short timer: one system
 * call for many requests, as nginx's buffered access_log does. Every other
 * line flushes the batch first and goes out at once, in order.
 */
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "proxy/log.h"
#include "proxy/digest.h"
#include "proxy/utf8.h"

/*
 * A line is never cut: each string field is, to its own budget, so that
 * the longest fields together still fit in LOG_LINE_MAX.
 */
#define LOG_LINE_MAX 8192
#define LOG_MSG_MAX 2048   /* escaped bytes of "msg" */
#define LOG_FIELD_MAX 1024 /* escaped bytes of any other string field */
#define LOG_FIXED_MAX 1024 /* everything else: names, numbers, time, braces */
/* A replay's object naming its owner, up to the owner's request id. */
#define LOG_REPLAY_OF_OPEN ",\"replay_of\":{\"request_id\":\""
#define LOG_ID_MAX	   320 /* escaped bytes of a request id (128 bytes, each may be escaped) */
#define LOG_BATCH_MAX 16384
#define LOG_CUT_MARK_MAX 32 /* "…(N bytes)" */

/* The access line is the longest: msg, its three string fields and two request ids. */
_Static_assert(LOG_MSG_MAX + 3 * LOG_FIELD_MAX + 2 * LOG_ID_MAX + LOG_FIXED_MAX <= LOG_LINE_MAX,
	       "log fields can outgrow the line");

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

/* Appends n bytes; the field budgets keep them within the buffer. */
static void line_raw(struct line *l, const char *s, size_t n)
{
	if (n > sizeof(l->buf) - 2 - l->len) /* room for "}\n" */
		n = sizeof(l->buf) - 2 - l->len;
	memcpy(l->buf + l->len, s, n);
	l->len += n;
}

/*
 * Appends the n bytes at s as the inside of a JSON string of at most max
 * bytes: quotes, backslashes and control characters escaped, bytes that
 * are not UTF-8 as U+FFFD. A longer value is cut at a character and ends
 * with a mark that says how long it was.
 */
static void line_escaped(struct line *l, const char *s, size_t n, size_t max)
{
	const unsigned char *p = (const unsigned char *)s;
	size_t used = 0, keep = l->len, i = 0, k, w;
	char esc[8], mark[LOG_CUT_MARK_MAX];
	const char *out;

	while (i < n) {
		/* A run of printable ASCII that needs no escape goes at once. */
		for (k = i; k < n && p[k] >= 0x20 && p[k] < 0x7f && p[k] != '"' && p[k] != '\\' &&
			    used + (k - i) < max - LOG_CUT_MARK_MAX;
		     k++)
			;
		if (k > i) {
			line_raw(l, s + i, k - i);
			used += k - i;
			i = k;
			keep = l->len;
			continue;
		}
		k = utf8_seq(p + i, n - i);
		out = (const char *)p + i;
		w = k;
		if (k == 0) {
			out = "\\ufffd";
			w = 6;
			k = 1;
		} else if (p[i] == '"' || p[i] == '\\') {
			esc[0] = '\\';
			esc[1] = (char)p[i];
			out = esc;
			w = 2;
		} else if (p[i] < 0x20 || p[i] == 0x7f) {
			snprintf(esc, sizeof(esc), "\\u%04x", p[i]);
			out = esc;
			w = 6;
		}
		if (used + w > max) {
			/* Too long: back to the last character that leaves room for the mark. */
			l->len = keep;
			snprintf(mark, sizeof(mark), "\xe2\x80\xa6(%zu bytes)", n);
			line_raw(l, mark, strlen(mark));
			return;
		}
		line_raw(l, out, w);
		used += w;
		i += k;
		if (used <= max - LOG_CUT_MARK_MAX)
			keep = l->len;
	}
}

static void line_str_n(struct line *l, const char *name, const char *value, size_t n, size_t max)
{
	line_raw(l, ",\"", 2);
	line_raw(l, name, strlen(name));
	line_raw(l, "\":\"", 3);
	line_escaped(l, value, n, max);
	line_raw(l, "\"", 1);
}

static void line_str(struct line *l, const char *name, const char *value)
{
	line_str_n(l, name, value, strlen(value), LOG_FIELD_MAX);
}

/* The decimal digits of value, written backwards from end; returns where they start. */
static char *line_digits(char *end, long long value)
{
	unsigned long long v = value < 0 ? 0 - (unsigned long long)value : (unsigned long long)value;

	do
		*--end = (char)('0' + v % 10);
	while (v /= 10);
	if (value < 0)
		*--end = '-';
	return end;
}

static void line_num(struct line *l, const char *name, long long value)
{
	char num[24], *start = line_digits(num + sizeof(num), value);

	line_raw(l, ",\"", 2);
	line_raw(l, name, strlen(name));
	line_raw(l, "\":", 2);
	line_raw(l, start, (size_t)(num + sizeof(num) - start));
}

static void line_start(struct line *l, enum log_level level)
{
	struct timespec ts;
	struct tm tm;
	long ms;
	char t[8] = {'.', '0', '0', '0', 'Z', '"'};

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
	ms = ts.tv_nsec / 1000000;
	t[1] = (char)('0' + ms / 100);
	t[2] = (char)('0' + ms / 10 % 10);
	t[3] = (char)('0' + ms % 10);
	line_raw(l, t, 6);
	line_str(l, "level", level_names[level]);
}

static void line_tag(struct line *l, const struct log_tag *tag)
{
	char hex[DIGEST_SHORT_HEX + 1];

	if (tag->request_id)
		line_str_n(l, "request_id", tag->request_id, strlen(tag->request_id), LOG_ID_MAX);
	line_num(l, "seq", (long long)tag->seq);
	if (tag->route)
		line_str(l, "route", tag->route);
	if (tag->key_len) {
		digest_short_hex(tag->key, tag->key_len, hex);
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
	char msg[2 * LOG_MSG_MAX];
	va_list ap;
	int n;

	if (level < log_min_level)
		return;
	va_start(ap, fmt);
	n = vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	line_start(&l, level);
	if (tag)
		line_tag(&l, tag);
	line_str_n(&l, "msg", msg, n < 0 ? 0 : strlen(msg), LOG_MSG_MAX);
	line_emit(&l);
}

void log_access(const struct log_tag *tag, const struct log_access *a)
{
	char hash[DIGEST_SHORT_HEX + 1];
	struct line l;

	if (log_min_level > LOG_INFO)
		return;
	line_start(&l, LOG_INFO);
	line_tag(&l, tag);
	line_str(&l, "msg", "request");
	line_str(&l, "method", a->method);
	line_str_n(&l, "path", a->path, a->path_len, LOG_FIELD_MAX);
	line_num(&l, "status", a->status);
	if (a->upgrade)
		line_str_n(&l, "upgrade", a->upgrade, strlen(a->upgrade), LOG_FIELD_MAX);
	line_str(&l, "outcome", a->outcome);
	line_num(&l, "duration_us", (long long)a->duration_us);
	line_num(&l, "upstream_us", (long long)a->upstream_us);
	line_num(&l, "store_us", (long long)a->store_us);
	if (a->trace_id && a->trace_id[0]) {
		line_str(&l, "trace_id", a->trace_id);
		line_str(&l, "parent_id", a->parent_id);
	}
	if (a->actor) {
		digest_short_hex(a->actor, strlen(a->actor), hash);
		line_str(&l, "actor_hash", hash);
	}
	if (a->replay_of_request_id) {
		/* {"request_id":...[,"trace_id":...]}: the owner's, from its record */
		line_raw(&l, LOG_REPLAY_OF_OPEN, sizeof(LOG_REPLAY_OF_OPEN) - 1);
		line_escaped(&l, a->replay_of_request_id, strlen(a->replay_of_request_id),
			     LOG_ID_MAX);
		line_raw(&l, "\"", 1);
		if (a->replay_of_trace_id && a->replay_of_trace_id[0])
			line_str_n(&l, "trace_id", a->replay_of_trace_id,
				   strlen(a->replay_of_trace_id), LOG_ID_MAX);
		line_raw(&l, "}", 1);
	}
	line_emit_batched(&l);
}

int log_limit_pass(struct log_limit *l, int64_t now_us, int64_t interval_us, int *skipped)
{
	int64_t last = atomic_load(&l->last_us);

	if ((last && now_us - last < interval_us) ||
	    !atomic_compare_exchange_strong(&l->last_us, &last, now_us)) {
		atomic_fetch_add(&l->skipped, 1);
		return 0;
	}
	*skipped = atomic_exchange(&l->skipped, 0);
	return 1;
}
