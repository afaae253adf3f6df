/*
 * JSON-lines logger. Each line is written into a fixed buffer of its
 * thread, escaped as JSON requires, and written whole with write(2), so
 * lines from different workers never interleave. Access lines (one per
 * request) are collected per thread and written in batches by
 * log_flush(), which each worker calls from a short timer: one system call
 * for many requests, as nginx's buffered access_log does. Every other line
 * flushes the batch first and goes out at once, in order.
 *
 * Memory is fixed per thread: the line, one string field's text and the
 * batch. The line is written byte by byte here rather than by a JSON
 * generator: every request has one, and it is a handful of known members.
 */
#include "proxy/log.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "proxy/digest.h"
#include "proxy/utf8.h"

/*
 * A line is never cut: each string field is, to its own budget and to the
 * room the line has left, keeping LOG_TAIL_ROOM for the numbers and names
 * that may follow it.
 */
#define LOG_LINE_MAX	   8192
#define LOG_MSG_MAX	   2048 /* written bytes of "msg" */
#define LOG_FIELD_MAX	   1024 /* written bytes of any other string field */
#define LOG_TAIL_ROOM	   512
#define LOG_BATCH_MAX	   16384
#define LOG_CUT_MARK_MAX   32	/* "…(N bytes)" */
#define LOG_TIME_MAX	   32
#define LOG_ACTOR_KEPT	   256 /* the longest actor whose hash a thread keeps */

static const char log_replacement[] = "\xef\xbf\xbd"; /* U+FFFD */

/*
 * A line as it is written; overflow: it did not fit (and is not written);
 * more: the object open now has a member, the next one needs a comma;
 * depth: the objects open.
 */
struct log_line {
	char buf[LOG_LINE_MAX];
	size_t len;
	int overflow;
	int more;
	int depth;
};

static __thread struct {
	struct log_line line;
	char text[LOG_MSG_MAX]; /* a string field's text, mended or cut */
	char batch[LOG_BATCH_MAX];
	size_t batch_len;
	time_t clock_sec; /* the second clock_text names */
	char clock_text[LOG_TIME_MAX];
	size_t clock_len;
	char actor[LOG_ACTOR_KEPT]; /* the last actor hashed, and its hash */
	size_t actor_len;
	char actor_hash[DIGEST_SHORT_HEX + 1];
} log_thread;

_Atomic enum log_level log_min_level = LOG_INFO;

static const char *const level_names[] = {"debug", "info", "warn", "error"};

void log_set_level(enum log_level level)
{
	atomic_store_explicit(&log_min_level, level, memory_order_relaxed);
}

/* ---- the line's bytes ---- */

static void line_put(struct log_line *l, const char *s, size_t n)
{
	/* One byte stays for the newline. */
	if (l->overflow || n > sizeof(l->buf) - 1 - l->len) {
		l->overflow = 1;
		return;
	}
	memcpy(l->buf + l->len, s, n);
	l->len += n;
}

/* This thread's line, emptied for a new one. */
static struct log_line *line_new(void)
{
	struct log_line *l = &log_thread.line;

	l->len = 0;
	l->overflow = 0;
	l->more = 0;
	l->depth = 0;
	return l;
}

/*
 * The n bytes at s as a JSON string: quotes, backslashes and control
 * characters escaped (\uXXXX for those without a short form), every other
 * byte as it is (the callers have made it UTF-8).
 */
static void line_string(struct log_line *l, const char *s, size_t n)
{
	static const char hex[] = "0123456789ABCDEF";
	char esc[6] = {'\\', 'u', '0', '0'};
	size_t from = 0, w;

	line_put(l, "\"", 1);
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];

		if (c >= 0x20 && c != '"' && c != '\\')
			continue;
		line_put(l, s + from, i - from);
		from = i + 1;
		w = 2;
		switch (c) {
		case '"':
		case '\\':
			esc[1] = (char)c;
			break;
		case '\b':
			esc[1] = 'b';
			break;
		case '\f':
			esc[1] = 'f';
			break;
		case '\n':
			esc[1] = 'n';
			break;
		case '\r':
			esc[1] = 'r';
			break;
		case '\t':
			esc[1] = 't';
			break;
		default:
			esc[1] = 'u';
			esc[4] = hex[c >> 4];
			esc[5] = hex[c & 15];
			w = 6;
		}
		line_put(l, esc, w);
	}
	line_put(l, s + from, n - from);
	line_put(l, "\"", 1);
}

/* ---- fields ---- */

/* The bytes line_string writes for the ASCII byte c inside a string. */
static size_t log_json_width(unsigned char c)
{
	switch (c) {
	case '"':
	case '\\':
	case '\b':
	case '\f':
	case '\n':
	case '\r':
	case '\t':
		return 2;
	default:
		return c < 0x20 ? 6 : 1;
	}
}

/*
 * The n bytes at s as the text of a JSON string that line_string writes in at
 * most max bytes (LOG_CUT_MARK_MAX <= max <= LOG_MSG_MAX): into
 * log_thread.text, bytes that are not UTF-8 as U+FFFD; a longer value is
 * cut at a character and ends with a mark that says how long it was
 * (total bytes: n, or more when s is already a cut). Returns the text's
 * length.
 */
static size_t log_text(const char *s, size_t n, size_t total, size_t max)
{
	const unsigned char *p = (const unsigned char *)s;
	char *out = log_thread.text;
	size_t i = 0, len = 0, width = 0, keep = 0, k, bytes, w;
	const char *from;

	while (i < n) {
		k = utf8_seq(p + i, n - i);
		from = s + i;
		bytes = w = k;
		if (k == 0) {
			from = log_replacement;
			bytes = w = sizeof(log_replacement) - 1;
			k = 1;
		} else if (k == 1) {
			w = log_json_width(p[i]);
		}
		if (width + w > max) {
			/* Back to the last character that leaves room for the mark. */
			return keep + (size_t)snprintf(out + keep, LOG_CUT_MARK_MAX,
						       "\xe2\x80\xa6(%zu bytes)", total);
		}
		memcpy(out + len, from, bytes);
		len += bytes;
		width += w;
		i += k;
		if (width <= max - LOG_CUT_MARK_MAX)
			keep = len;
	}
	return len;
}

/* 1 when the n bytes at s are written as they are: printable ASCII, within max. */
static int log_plain(const char *s, size_t n, size_t max)
{
	if (n > max)
		return 0;
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)s[i] < 0x20 || (unsigned char)s[i] >= 0x7f || s[i] == '"' ||
		    s[i] == '\\')
			return 0;
	return 1;
}

/*
 * A member's name of n bytes (a literal of idemproxy's, plain ASCII: no
 * escapes), after a comma when one came before.
 */
static void log_name_n(struct log_line *l, const char *name, size_t n)
{
	char buf[64];
	size_t k = 0;

	if (n > sizeof(buf) - 4) {
		l->overflow = 1;
		return;
	}
	if (l->more)
		buf[k++] = ',';
	buf[k++] = '"';
	memcpy(buf + k, name, n);
	k += n;
	buf[k++] = '"';
	buf[k++] = ':';
	line_put(l, buf, k);
	l->more = 1;
}

static void log_name(struct log_line *l, const char *name)
{
	log_name_n(l, name, strlen(name));
}

/*
 * The field name: the n bytes at value, of a value of total bytes, written
 * in at most max bytes and no more than the line has room for (cut and
 * marked otherwise).
 */
static void field_text(struct log_line *l, const char *name, const char *value, size_t n,
		       size_t total, size_t max)
{
	size_t name_len = strlen(name);
	size_t used = l->len + name_len + sizeof(",\"\":\"\"") + LOG_TAIL_ROOM;
	size_t room = used < sizeof(l->buf) ? sizeof(l->buf) - used : 0;

	if (max > room)
		max = room;
	if (max > sizeof(log_thread.text))
		max = sizeof(log_thread.text);
	if (max < LOG_CUT_MARK_MAX) /* a full line: this overflows, the line is refused */
		max = LOG_CUT_MARK_MAX;
	log_name_n(l, name, name_len);
	if (n == total && log_plain(value, n, max)) {
		/* nothing to escape */
		line_put(l, "\"", 1);
		line_put(l, value, n);
		line_put(l, "\"", 1);
		return;
	}
	n = log_text(value, n, total, max);
	line_string(l, log_thread.text, n);
}

/* The field name: the n bytes at value, to max bytes (field_text). */
static void field_str_max(struct log_line *l, const char *name, const char *value, size_t n,
			  size_t max)
{
	field_text(l, name, value, n, n, max);
}

/* The field name: the string value, to LOG_FIELD_MAX; none when value is NULL. */
static void field_str(struct log_line *l, const char *name, const char *value)
{
	if (value)
		field_str_max(l, name, value, strlen(value), LOG_FIELD_MAX);
}

/* The decimal digits of v, written backwards from end (no printf: every line has several). */
static char *log_digits(char *end, uint64_t v)
{
	do
		*--end = (char)('0' + v % 10);
	while (v /= 10);
	return end;
}

static void field_i64(struct log_line *l, const char *name, int64_t value)
{
	char num[24], *end = num + sizeof(num), *start;

	start = log_digits(end, value < 0 ? 0 - (uint64_t)value : (uint64_t)value);
	if (value < 0)
		*--start = '-';
	log_name(l, name);
	line_put(l, start, (size_t)(end - start));
}

static void field_u64(struct log_line *l, const char *name, uint64_t value)
{
	char num[24], *end = num + sizeof(num), *start = log_digits(end, value);

	log_name(l, name);
	line_put(l, start, (size_t)(end - start));
}

/* An object, the member name's (NULL: the line's own); its fields follow until object_end. */
static void object_begin(struct log_line *l, const char *name)
{
	if (name)
		log_name(l, name);
	line_put(l, "{", 1);
	l->more = 0;
	l->depth++;
}

/* 0, or -1 when no object is open. */
static int object_end(struct log_line *l)
{
	if (l->depth == 0)
		return -1;
	line_put(l, "}", 1);
	l->more = 1;
	l->depth--;
	return 0;
}

/* ---- lines ---- */

/* The line's opening: its time (UTC, milliseconds) and level. */
static void line_start(struct log_line *l, enum log_level level)
{
	struct timespec ts;
	struct tm tm;
	char t[LOG_TIME_MAX], ms[4];
	size_t n;

	clock_gettime(CLOCK_REALTIME, &ts);
	/* The formatted second changes once a second: keep it per thread. */
	if (ts.tv_sec != log_thread.clock_sec || !log_thread.clock_len) {
		gmtime_r(&ts.tv_sec, &tm);
		log_thread.clock_len = strftime(
		    log_thread.clock_text, sizeof(log_thread.clock_text), "%Y-%m-%dT%H:%M:%S", &tm);
		log_thread.clock_sec = ts.tv_sec;
	}
	/* ".mmmZ": 1000 + ms keeps the leading zeros. */
	log_digits(ms + sizeof(ms), (uint64_t)(1000 + ts.tv_nsec / 1000000));
	n = log_thread.clock_len;
	memcpy(t, log_thread.clock_text, n);
	t[n++] = '.';
	memcpy(t + n, ms + 1, 3);
	n += 3;
	t[n++] = 'Z';
	object_begin(l, NULL);
	field_str_max(l, "time", t, n, LOG_TIME_MAX);
	field_str(l, "level", level_names[level]);
}

static void line_tag(struct log_line *l, const struct log_tag *tag)
{
	char hex[DIGEST_SHORT_HEX + 1];

	field_str(l, "request_id", tag->request_id);
	field_u64(l, "seq", tag->seq);
	field_str(l, "route", tag->route);
	if (tag->key_len) {
		digest_short_hex(tag->key, tag->key_len, hex);
		field_str(l, "key_hash", hex);
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
	write_all(log_thread.batch, log_thread.batch_len);
	log_thread.batch_len = 0;
}

/*
 * Close the line and end it with a newline: 0. A line that did not fit, or
 * whose objects do not close, is replaced by one at level that says so (-1
 * only if that one could not be made either: nothing is written).
 */
static int line_close(struct log_line *l, enum log_level level)
{
	if (object_end(l) < 0 || l->depth != 0 || l->overflow) {
		l = line_new();
		line_start(l, level);
		field_str(l, "msg", "log line dropped: it does not fit in its buffer");
		object_end(l);
		if (l->overflow)
			return -1;
	}
	l->buf[l->len++] = '\n';
	return 0;
}

static void line_emit(struct log_line *l, enum log_level level)
{
	if (line_close(l, level) < 0)
		return;
	log_flush();
	write_all(l->buf, l->len);
}

static void line_emit_batched(struct log_line *l)
{
	if (line_close(l, LOG_INFO) < 0)
		return;
	if (log_thread.batch_len + l->len > sizeof(log_thread.batch))
		log_flush();
	memcpy(log_thread.batch + log_thread.batch_len, l->buf, l->len);
	log_thread.batch_len += l->len;
}

void log_write(enum log_level level, const struct log_tag *tag, const char *fmt, ...)
{
	char msg[2 * LOG_MSG_MAX]; /* more than "msg" holds: a longer one is cut anyway */
	struct log_line *l;
	va_list ap;
	int n;

	if (!log_enabled(level))
		return;
	l = line_new();
	va_start(ap, fmt);
	n = vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	line_start(l, level);
	if (tag)
		line_tag(l, tag);
	field_text(l, "msg", msg, n < 0 ? 0 : strlen(msg), n < 0 ? 0 : (size_t)n, LOG_MSG_MAX);
	line_emit(l, level);
}

/*
 * The short hash of an actor. A thread's access lines mostly follow one
 * another for the same actor: the last one's hash is kept, not computed
 * again.
 */
static const char *actor_hash(const char *actor)
{
	size_t n = strlen(actor);

	if (n == 0 || n != log_thread.actor_len || memcmp(actor, log_thread.actor, n) != 0) {
		digest_short_hex(actor, n, log_thread.actor_hash);
		log_thread.actor_len = 0;
		if (n > 0 && n <= sizeof(log_thread.actor)) {
			memcpy(log_thread.actor, actor, n);
			log_thread.actor_len = n;
		}
	}
	return log_thread.actor_hash;
}

void log_access(const struct log_tag *tag, const struct log_access *a)
{
	struct log_line *l;

	if (!log_enabled(LOG_INFO))
		return;
	l = line_new();
	line_start(l, LOG_INFO);
	line_tag(l, tag);
	field_str(l, "msg", "request");
	field_str(l, "method", a->method);
	field_str_max(l, "path", a->path, a->path_len, LOG_FIELD_MAX);
	field_i64(l, "status", a->status);
	field_str(l, "upgrade", a->upgrade);
	field_str(l, "outcome", a->outcome);
	field_i64(l, "duration_us", a->duration_us);
	field_i64(l, "upstream_us", a->upstream_us);
	field_i64(l, "store_us", a->store_us);
	if (a->trace_id && a->trace_id[0]) {
		field_str(l, "trace_id", a->trace_id);
		field_str(l, "parent_id", a->parent_id);
	}
	if (a->actor)
		field_str(l, "actor_hash", actor_hash(a->actor));
	if (a->replay_of_request_id) {
		/* the owner's, from its record */
		object_begin(l, "replay_of");
		field_str(l, "request_id", a->replay_of_request_id);
		if (a->replay_of_trace_id && a->replay_of_trace_id[0])
			field_str(l, "trace_id", a->replay_of_trace_id);
		object_end(l);
	}
	line_emit_batched(l);
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
