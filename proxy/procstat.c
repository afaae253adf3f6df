/*
 * The process collector (procstat.h). Every source is procfs or a system
 * call that answers from the kernel's memory: nothing here waits on a
 * device or the network. Counting /proc/self/fd takes one directory entry
 * per open descriptor (about 2 us each: 20 ms at 10,000), and those are
 * bounded by the configuration (max_connections and the pools) and by
 * RLIMIT_NOFILE; it runs on the admin's thread, not a worker's.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include <event2/buffer.h>

#include "proxy/procstat.h"
#include "proxy/stats.h"

#define PROCSTAT_LINE_MAX 4096 /* /proc/self/stat is one line of about 300 bytes */

/* The stat fields, numbered as proc(5) numbers them; the name is field 2. */
enum {
	PROCSTAT_FIELD_STATE = 3,
	PROCSTAT_FIELD_UTIME = 14,
	PROCSTAT_FIELD_STIME = 15,
	PROCSTAT_FIELD_STARTTIME = 22,
	PROCSTAT_FIELD_VSIZE = 23,
	PROCSTAT_FIELD_RSS = 24,
};

int procstat_parse(const char *text, struct procstat *ps)
{
	const char *p = strrchr(text, ')');
	char *end;

	if (!strchr(text, '(') || !p || p[1] != ' ' || !p[2])
		return -1;
	memset(ps, 0, sizeof(*ps));
	p += 2;
	for (int field = PROCSTAT_FIELD_STATE; field <= PROCSTAT_FIELD_RSS; field++) {
		if (field > PROCSTAT_FIELD_STATE && *p++ != ' ')
			return -1;
		if (field == PROCSTAT_FIELD_STATE) {
			/* The state is one letter; every later field is a number. */
			p += strcspn(p, " ");
			continue;
		}
		errno = 0;
		long long v = strtoll(p, &end, 10);

		if (end == p || errno)
			return -1;
		p = end;
		if (field == PROCSTAT_FIELD_UTIME)
			ps->utime = (uint64_t)v;
		else if (field == PROCSTAT_FIELD_STIME)
			ps->stime = (uint64_t)v;
		else if (field == PROCSTAT_FIELD_STARTTIME)
			ps->starttime = (uint64_t)v;
		else if (field == PROCSTAT_FIELD_VSIZE)
			ps->vsize = (uint64_t)v;
		else if (field == PROCSTAT_FIELD_RSS)
			ps->rss = v;
	}
	return 0;
}

/* The whole of a small procfs file, NUL-terminated, into buf: its length or -1. */
static ssize_t procstat_read(const char *path, char *buf, size_t len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t n, got = 0;

	if (fd < 0)
		return -1;
	while ((size_t)got < len - 1 && (n = read(fd, buf + got, len - 1 - (size_t)got)) != 0) {
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			got = -1;
			break;
		}
		got += n;
	}
	close(fd);
	if (got >= 0)
		buf[got] = '\0';
	return got;
}

/*
 * When the system booted, in seconds since the epoch ("btime" in
 * /proc/stat), read once: 0 when it could not be. The file has a line per
 * CPU and a long interrupt line, so it is read line by line; only the btime
 * line begins with "btime ".
 */
static int64_t procstat_boot_time(void)
{
	static int64_t btime = -1;
	char line[256];
	FILE *f;

	if (btime >= 0)
		return btime;
	btime = 0;
	f = fopen("/proc/stat", "re");
	if (!f)
		return btime;
	while (fgets(line, sizeof(line), f))
		if (strncmp(line, "btime ", 6) == 0) {
			btime = strtoll(line + 6, NULL, 10);
			break;
		}
	fclose(f);
	return btime;
}

/* Entries of /proc/self/fd, the directory's own descriptor included: -1 when unreadable. */
static int64_t procstat_open_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	int64_t n = 0;

	if (!d)
		return -1;
	while ((e = readdir(d)))
		if (e->d_name[0] != '.')
			n++;
	closedir(d);
	return n;
}

/* One metric without labels whose value is v, written with decimals digits after the point. */
static void procstat_value(struct evbuffer *out, const char *name, const char *type,
			   const char *help, int decimals, double v)
{
	stats_head(out, name, type, help);
	evbuffer_add_printf(out, "%s %.*f\n", name, decimals, v);
}

void procstat_render(struct evbuffer *out)
{
	char line[PROCSTAT_LINE_MAX];
	struct procstat ps;
	struct rlimit rl;
	long hz = sysconf(_SC_CLK_TCK), page = sysconf(_SC_PAGESIZE);
	int64_t fds = procstat_open_fds(), btime = procstat_boot_time();

	if (hz > 0 && page > 0 && procstat_read("/proc/self/stat", line, sizeof(line)) > 0 &&
	    procstat_parse(line, &ps) == 0) {
		procstat_value(out, "process_cpu_seconds_total", "counter",
			       "Total user and system CPU time spent in seconds.", 2,
			       (double)(ps.utime + ps.stime) / (double)hz);
		procstat_value(out, "process_resident_memory_bytes", "gauge",
			       "Resident memory size in bytes.", 0,
			       (double)ps.rss * (double)page);
		procstat_value(out, "process_virtual_memory_bytes", "gauge",
			       "Virtual memory size in bytes.", 0, (double)ps.vsize);
		if (btime > 0)
			procstat_value(out, "process_start_time_seconds", "gauge",
				       "Start time of the process since unix epoch in seconds.",
				       2, (double)btime + (double)ps.starttime / (double)hz);
	}
	if (fds >= 0)
		stats_metric(out, "process_open_fds", "gauge", "Number of open file descriptors.",
			     fds);
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0)
		procstat_value(out, "process_max_fds", "gauge",
			       "Maximum number of open file descriptors.", 0,
			       rl.rlim_cur == RLIM_INFINITY ? 18446744073709551615.0
							    : (double)rl.rlim_cur);
}
