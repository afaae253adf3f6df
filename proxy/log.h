/*
 * Logging: one JSON object per line on stderr.
 * The level is checked before anything is formatted.
 * Credentials and bodies are never logged; keys are logged only as a short
 * hash. A line is always whole, valid JSON of at most 8 KiB: a long field
 * is cut, marked with "…(N bytes)", never the line; bytes that are not
 * UTF-8 are written as U+FFFD.
 */
#ifndef IDEMPROXY_LOG_H
#define IDEMPROXY_LOG_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

enum log_level {
	LOG_DEBUG,
	LOG_INFO,
	LOG_WARN,
	LOG_ERROR,
};

/* The least level written; threads read it as it is set (log_set_level). */
extern _Atomic enum log_level log_min_level;

/* Set the least level written (log_level: at start and on reload). */
void log_set_level(enum log_level level);

/* 1 when a line at level is written. */
static inline int log_enabled(enum log_level level)
{
	return level >= atomic_load_explicit(&log_min_level, memory_order_relaxed);
}

/*
 * What a line says about the request it concerns: its id, its route's
 * operation (NULL: none matched) and its key (key_len 0: none yet), which
 * only its hash leaves the process as. The strings are borrowed.
 */
struct log_tag {
	uint64_t seq; /* the worker's count of requests */
	const char *route;
	const char *key;
	size_t key_len;
	const char *request_id; /* its X-Request-Id (trace.h), NULL: none */
};

/* A line at level; tag NULL for lines about no request. */
void log_write(enum log_level level, const struct log_tag *tag, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* The access line of a finished request. */
struct log_access {
	const char *method;
	const char *path;           /* as the client sent it, without the query */
	size_t path_len;
	int status;                 /* what the client was sent (0: nothing) */
	const char *upgrade;        /* a tunnel's protocol (status 101), else NULL */
	const char *outcome;        /* outcome_name() */
	int64_t duration_us;        /* whole request */
	int64_t upstream_us;        /* waiting for the upstream */
	int64_t store_us;           /* waiting for the store */
	const char *trace_id;	    /* its traceparent's, "" or NULL: no valid one */
	const char *parent_id;	    /* likewise */
	const char *actor;	    /* whom it was for (logged as a hash), or NULL */
	const char *replay_of_request_id; /* a replay: the owner's ids, or NULL */
	const char *replay_of_trace_id;
};

/* At info; batched per thread, written by the next log_flush() or other log line. */
void log_access(const struct log_tag *tag, const struct log_access *a);

/* Write this thread's batched access lines. */
void log_flush(void);

/*
 * A message that may repeat quickly (a failing accept(2)) is written at
 * most once per interval, whichever thread repeats it.
 */
struct log_limit {
	_Atomic int64_t last_us; /* when it was last written */
	_Atomic int skipped;     /* times it was not since */
};

/*
 * 1 when the limited message may be written now (at now_us, every
 * interval_us), with *skipped the times it was held back since the last
 * one; 0 when it must be held back (and is counted).
 */
int log_limit_pass(struct log_limit *l, int64_t now_us, int64_t interval_us, int *skipped);

#define log_debug(tag, ...) do { if (log_enabled(LOG_DEBUG)) log_write(LOG_DEBUG, tag, __VA_ARGS__); } while (0)
#define log_info(tag, ...)  do { if (log_enabled(LOG_INFO)) log_write(LOG_INFO, tag, __VA_ARGS__); } while (0)
#define log_warn(tag, ...)  do { if (log_enabled(LOG_WARN)) log_write(LOG_WARN, tag, __VA_ARGS__); } while (0)
#define log_error(tag, ...) log_write(LOG_ERROR, tag, __VA_ARGS__)

#endif
