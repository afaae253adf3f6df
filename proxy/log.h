/*
 * Logging: one JSON object per line on stderr. The level is checked before
 * anything is formatted. Credentials and bodies are never logged; keys are
 * logged only as a short hash.
 */
#ifndef IDEMPROXY_LOG_H
#define IDEMPROXY_LOG_H

struct request;

enum log_level {
	LOG_DEBUG,
	LOG_INFO,
	LOG_WARN,
	LOG_ERROR,
};

extern enum log_level log_min_level;

void log_write(enum log_level level, const struct request *req, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* The access line of a finished request: outcome, status and durations.
 * Batched per thread; written by the next log_flush() or other log line. */
void log_request_done(const struct request *req);

/* "owner", "replay", ...: the name logs and metrics give an outcome. */
const char *log_outcome_name(int outcome);

/* Write this thread's batched access lines. */
void log_flush(void);

#define log_debug(req, ...) do { if (log_min_level <= LOG_DEBUG) log_write(LOG_DEBUG, req, __VA_ARGS__); } while (0)
#define log_info(req, ...)  do { if (log_min_level <= LOG_INFO) log_write(LOG_INFO, req, __VA_ARGS__); } while (0)
#define log_warn(req, ...)  do { if (log_min_level <= LOG_WARN) log_write(LOG_WARN, req, __VA_ARGS__); } while (0)
#define log_error(req, ...) log_write(LOG_ERROR, req, __VA_ARGS__)

#endif
