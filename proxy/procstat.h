/*
 * The process's own figures for /metrics, under the names and with the
 * meaning of the Prometheus client libraries' process collector: CPU time,
 * resident and virtual memory, start time, open and allowed descriptors.
 * They are read from procfs and getrlimit at scrape time, on the admin
 * listener's thread, never on the request path.
 */
#ifndef IDEMPROXY_PROCSTAT_H
#define IDEMPROXY_PROCSTAT_H

#include <stdint.h>

struct evbuffer;

/* The fields of /proc/PID/stat that the collector reports. */
struct procstat {
	uint64_t utime;	    /* clock ticks in user mode */
	uint64_t stime;	    /* clock ticks in kernel mode */
	uint64_t starttime; /* clock ticks after boot when the process started */
	uint64_t vsize;	    /* bytes of virtual memory */
	int64_t rss;	    /* pages resident */
};

/*
 * Parse the text of /proc/PID/stat into ps. The command name, between the
 * first '(' and the last ')', may hold spaces and parentheses; the fields
 * are counted after it. 0, or -1 when the text is not such a line.
 */
int procstat_parse(const char *text, struct procstat *ps);

/*
 * The process_* families: each one whose source could be read (none is
 * shown half; one that could not be read is left out).
 */
void procstat_render(struct evbuffer *out);

#endif
