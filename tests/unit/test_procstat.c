/* Unit tests of proxy/procstat.c: the stat line's fields, and the families it renders. */
#include "proxy/procstat.h"

#include <event2/buffer.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/unit/unit.h"

/* A line of proc(5)'s layout: utime 14, stime 15, starttime 22, vsize 23, rss 24. */
#define STAT_TAIL "S 1 2 3 0 -1 4194560 100 0 0 0 250 75 0 0 20 0 3 0 123456 180076544 2416 " \
		  "18446744073709551615 1 1 0 0 0 0 0 4096 0 0 0 17 1 0 0 0 0 0\n"

static void test_parse(void)
{
	struct procstat ps;

	CHECK(procstat_parse("4242 (idemproxy) " STAT_TAIL, &ps) == 0);
	CHECK(ps.utime == 250 && ps.stime == 75);
	CHECK(ps.starttime == 123456);
	CHECK(ps.vsize == 180076544u && ps.rss == 2416);
	/* The name may hold spaces and parentheses: fields count after the last ')'. */
	CHECK(procstat_parse("4242 (a) 1 2 (b) " STAT_TAIL, &ps) == 0);
	CHECK(ps.utime == 250 && ps.rss == 2416);
	/* Not such a line: no name, cut short, a field that is not a number. */
	CHECK(procstat_parse("4242 idemproxy " STAT_TAIL, &ps) == -1);
	CHECK(procstat_parse("4242 (idemproxy)", &ps) == -1);
	CHECK(procstat_parse("4242 (idemproxy) S 1 2 3 0 -1 4194560 100 0 0 0 250", &ps) == -1);
	CHECK(procstat_parse("4242 (idemproxy) S 1 2 3 0 -1 4194560 100 0 0 0 x 75 0 0 20 0 3 0 "
			     "123456 180076544 2416\n", &ps) == -1);
	CHECK(procstat_parse("", &ps) == -1);
}

static void test_own_stat(void)
{
	char line[4096];
	struct procstat ps;
	FILE *f = fopen("/proc/self/stat", "r");
	size_t n = f ? fread(line, 1, sizeof(line) - 1, f) : 0;

	if (f)
		fclose(f);
	line[n] = '\0';
	CHECK(n > 0);
	CHECK(procstat_parse(line, &ps) == 0);
	CHECK(ps.rss > 0 && ps.vsize > 0 && ps.starttime > 0);
}

/* Each family once, HELP then TYPE then one sample. */
static void test_render(void)
{
	static const char *const families[][2] = {
		{"process_cpu_seconds_total", "counter"},
		{"process_resident_memory_bytes", "gauge"},
		{"process_virtual_memory_bytes", "gauge"},
		{"process_start_time_seconds", "gauge"},
		{"process_open_fds", "gauge"},
		{"process_max_fds", "gauge"},
	};
	struct evbuffer *out = evbuffer_new();
	char want[256];
	char *text;
	size_t len;

	procstat_render(out);
	len = evbuffer_get_length(out);
	text = malloc(len + 1);
	evbuffer_remove(out, text, len);
	text[len] = '\0';
	for (size_t i = 0; i < sizeof(families) / sizeof(families[0]); i++) {
		snprintf(want, sizeof(want), "# TYPE %s %s\n%s ", families[i][0], families[i][1],
			 families[i][0]);
		CHECK(strstr(text, want) != NULL);
		snprintf(want, sizeof(want), "# HELP %s ", families[i][0]);
		CHECK(strstr(text, want) != NULL);
	}
	free(text);
	evbuffer_free(out);
}

int main(void)
{
	test_parse();
	test_own_stat();
	test_render();
	UNIT_DONE("procstat");
}
