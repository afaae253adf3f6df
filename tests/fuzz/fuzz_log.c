/*
 * libFuzzer target for the log writer (proxy/log.c): whatever bytes a
 * message, a route, a method, a path or an upgrade holds, every line is
 * whole JSON that yajl's parser reads back, ends with a newline and is at
 * most 8 KiB. The input is split at NUL bytes into those five strings.
 * stderr goes to a memory file around the writer's calls only, so the
 * sanitizers' reports still reach the terminal.
 *   clang -g -O1 -fsanitize=fuzzer,address,undefined -I. tests/fuzz/fuzz_log.c \
 *         proxy/log.c proxy/digest.c proxy/utf8.c -lyajl -lcrypto -o fuzz_log
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <yajl/yajl_tree.h>

#include "proxy/log.h"

#define FUZZ_LOG_LINE_MAX 8192
#define FUZZ_LOG_PARTS	  8
#define FUZZ_LOG_OUT_MAX  (64 * 1024)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Each line of the n bytes at out: JSON, newline-terminated, within the line limit. */
static void check_lines(char *out, size_t n)
{
	char err[128];
	size_t start = 0;

	if (n == 0 || out[n - 1] != '\n')
		abort();
	for (size_t i = 0; i < n; i++) {
		yajl_val v;

		if (out[i] != '\n')
			continue;
		if (i + 1 - start > FUZZ_LOG_LINE_MAX)
			abort();
		out[i] = '\0';
		v = yajl_tree_parse(out + start, err, sizeof(err));
		if (!v || !YAJL_IS_OBJECT(v))
			abort();
		yajl_tree_free(v);
		start = i + 1;
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static int mem = -1;
	static char out[FUZZ_LOG_OUT_MAX];
	char *copy = malloc(size + FUZZ_LOG_PARTS), *part[FUZZ_LOG_PARTS];
	size_t len[FUZZ_LOG_PARTS] = {0}, at = 0;
	struct log_tag tag = {.seq = size, .key = (const char *)data, .key_len = size};
	ssize_t n;
	int saved;

	if (mem < 0 && (mem = memfd_create("fuzz_log", 0)) < 0)
		abort();
	if (!copy)
		return 0;
	/* FUZZ_LOG_PARTS NUL-terminated strings; missing ones are empty. */
	for (int k = 0; k < FUZZ_LOG_PARTS; k++) {
		part[k] = copy + at + k;
		while (at < size && data[at]) {
			part[k][len[k]++] = (char)data[at];
			at++;
		}
		part[k][len[k]] = '\0';
		at += at < size;
	}
	tag.route = part[1];
	tag.request_id = len[5] ? part[5] : NULL;
	if (ftruncate(mem, 0) < 0 || lseek(mem, 0, SEEK_SET) < 0 || (saved = dup(2)) < 0)
		abort();
	dup2(mem, 2);
	log_write(LOG_ERROR, &tag, "%s", part[0]);
	log_access(&tag, &(struct log_access){.method = part[2],
					      .path = part[3],
					      .path_len = len[3],
					      .status = (int)size,
					      .upgrade = len[4] ? part[4] : NULL,
					      .outcome = part[0],
					      .duration_us = -(int64_t)size,
					      .upstream_us = INT64_MAX,
					      .store_us = INT64_MIN,
					      .trace_id = part[6],
					      .parent_id = part[6],
					      .actor = len[7] ? part[7] : NULL,
					      .replay_of_request_id = len[5] ? part[5] : NULL,
					      .replay_of_trace_id = part[6]});
	log_flush();
	dup2(saved, 2);
	close(saved);
	n = pread(mem, out, sizeof(out), 0);
	if (n <= 0 || (size_t)n >= sizeof(out))
		abort();
	check_lines(out, (size_t)n);
	free(copy);
	return 0;
}
