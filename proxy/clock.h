/*
 * The monotonic clock, for deadlines and durations, and durations in the
 * form libevent's timers take. Wall-clock time is the log's business alone.
 */
#ifndef IDEMPROXY_CLOCK_H
#define IDEMPROXY_CLOCK_H

#include <stdint.h>
#include <sys/time.h>
#include <time.h>

/* CLOCK_MONOTONIC in microseconds. */
static inline int64_t clock_now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* CLOCK_MONOTONIC in milliseconds. */
static inline int64_t clock_now_ms(void)
{
	return clock_now_us() / 1000;
}

/* ms milliseconds as a struct timeval; a negative duration counts as 0. */
static inline struct timeval clock_tv(int64_t ms)
{
	struct timeval tv;

	if (ms < 0)
		ms = 0;
	tv.tv_sec = ms / 1000;
	tv.tv_usec = (ms % 1000) * 1000;
	return tv;
}

/* us microseconds as a struct timeval; a negative duration counts as 0. */
static inline struct timeval clock_tv_us(int64_t us)
{
	struct timeval tv;

	if (us < 0)
		us = 0;
	tv.tv_sec = us / 1000000;
	tv.tv_usec = us % 1000000;
	return tv;
}

#endif
