/*
 * libFuzzer target for the /proc/PID/stat parser (proxy/procstat.c). An
 * accepted line's fields, written back in proc(5)'s layout after a
 * command name holding spaces and parentheses, parse to the same values.
 * Built by `make fuzz` from the Makefile's FUZZ_SRC_fuzz_procstat.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proxy/procstat.h"

#define FUZZ_LINE_MAX 4096

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char line[FUZZ_LINE_MAX + 1], again[512];
	struct procstat ps, ps2;

	if (size > FUZZ_LINE_MAX)
		return 0;
	memcpy(line, data, size);
	line[size] = '\0';
	if (procstat_parse(line, &ps) < 0)
		return 0;
	snprintf(again, sizeof(again),
		 "1 (a) (b) c) R 0 0 0 0 0 0 0 0 0 0 %lld %lld 0 0 0 0 0 0 %lld %lld %lld\n",
		 (long long)ps.utime, (long long)ps.stime, (long long)ps.starttime,
		 (long long)ps.vsize, (long long)ps.rss);
	if (procstat_parse(again, &ps2) < 0 || memcmp(&ps, &ps2, sizeof(ps)) != 0)
		abort();
	return 0;
}
