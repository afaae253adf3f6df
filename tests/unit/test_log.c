/*
 * Unit tests of proxy/log.c: every line is whole JSON that yajl's parser
 * reads back; escaping, cut fields, bytes that are not UTF-8, a line never
 * longer than its buffer, and levels.
 */
#include "proxy/log.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <yajl/yajl_tree.h>

#include "proxy/digest.h"
#include "proxy/utf8.h"
#include "tests/unit/unit.h"

#define LINE_MAX_BYTES 8192
#define CAPTURE_MAX    (1 << 20)

/* stderr while a test captures it, and what it captured. */
static struct {
	FILE *file;
	int saved;
	char text[CAPTURE_MAX];
	size_t len;
} cap;

static void capture_begin(void)
{
	fflush(stderr);
	cap.file = tmpfile();
	cap.saved = dup(STDERR_FILENO);
	dup2(fileno(cap.file), STDERR_FILENO);
}

/* Stop capturing: the lines written since capture_begin, in cap.text. */
static void capture_end(void)
{
	log_flush();
	dup2(cap.saved, STDERR_FILENO);
	close(cap.saved);
	rewind(cap.file);
	cap.len = fread(cap.text, 1, sizeof(cap.text) - 1, cap.file);
	cap.text[cap.len] = '\0';
	fclose(cap.file);
}

static int capture_lines(void)
{
	int n = 0;

	for (size_t i = 0; i < cap.len; i++)
		n += cap.text[i] == '\n';
	return n;
}

/* Line i (from 0) of what was captured, parsed; NULL when it is not JSON. Free with yajl_tree_free.
 */
static yajl_val capture_line(int i, size_t *len)
{
	char *start = cap.text, *end, line[LINE_MAX_BYTES * 2];
	char err[256];

	while (i-- > 0 && (start = strchr(start, '\n')))
		start++;
	if (!start || !(end = strchr(start, '\n')) || (size_t)(end - start) >= sizeof(line))
		return NULL;
	*len = (size_t)(end - start) + 1;
	memcpy(line, start, (size_t)(end - start));
	line[end - start] = '\0';
	return yajl_tree_parse(line, err, sizeof(err));
}

static const char *str_of(yajl_val v, const char *name)
{
	const char *path[] = {name, NULL};
	yajl_val s = yajl_tree_get(v, path, yajl_t_string);

	return s ? YAJL_GET_STRING(s) : NULL;
}

static yajl_val num_of(yajl_val v, const char *name)
{
	const char *path[] = {name, NULL};

	return yajl_tree_get(v, path, yajl_t_number);
}

static int ends_with(const char *s, const char *tail)
{
	size_t n = strlen(s), k = strlen(tail);

	return n >= k && strcmp(s + n - k, tail) == 0;
}

static void test_escaping(void)
{
	static const char odd[] = "quote \" backslash \\ newline \n tab \t bell \x07 del \x7f "
				  "slash / e\xcc\x81 \xe2\x82\xac \xf0\x9f\x98\x80";
	struct log_tag tag = {
	    .seq = 18446744073709551615ull, .request_id = "id \"q\" \\", .route = "pay\"ment"};
	yajl_val v;
	size_t len;

	capture_begin();
	log_write(LOG_ERROR, &tag, "%s", odd);
	capture_end();
	CHECK(capture_lines() == 1);
	/* The escapes as written: the short forms, \u00XX for other control bytes, the rest as is. */
	CHECK(strstr(cap.text, "\"msg\":\"quote \\\" backslash \\\\ newline \\n tab \\t bell "
			       "\\u0007 del \x7f slash / e\xcc\x81") != NULL);
	CHECK(strstr(cap.text, "\"route\":\"pay\\\"ment\"") != NULL);
	v = capture_line(0, &len);
	CHECK(v != NULL);
	CHECK_STR(str_of(v, "msg"), odd);
	CHECK_STR(str_of(v, "level"), "error");
	CHECK_STR(str_of(v, "route"), "pay\"ment");
	/* The largest count, exactly; the request id as it was. */
	CHECK(num_of(v, "seq") && strcmp(YAJL_GET_NUMBER(num_of(v, "seq")), "18446744073709551615") == 0);
	CHECK_STR(str_of(v, "request_id"), "id \"q\" \\");
	CHECK(str_of(v, "time") && strlen(str_of(v, "time")) == strlen("2026-01-01T00:00:00.000Z"));
	CHECK(str_of(v, "time") && ends_with(str_of(v, "time"), "Z"));
	yajl_tree_free(v);

	/* Numbers at both ends of their range, exactly. */
	capture_begin();
	log_access(&tag, &(struct log_access){.method = "GET",
					      .path = "/",
					      .path_len = 1,
					      .outcome = "pass",
					      .duration_us = INT64_MAX,
					      .upstream_us = INT64_MIN,
					      .trace_id = "4bf92f3577b34da6a3ce929d0e0e4736",
					      .parent_id = "00f067aa0ba902b7",
					      .actor = "h:a",
					      .replay_of_request_id = "owner \"1\"",
					      .replay_of_trace_id = "0af7651916cd43dd8448eb211c80319c"});
	capture_end();
	v = capture_line(0, &len);
	{
		const char *owner_id[] = {"replay_of", "request_id", NULL};
		const char *owner_trace[] = {"replay_of", "trace_id", NULL};
		yajl_val id = v ? yajl_tree_get(v, owner_id, yajl_t_string) : NULL;
		yajl_val trace = v ? yajl_tree_get(v, owner_trace, yajl_t_string) : NULL;

		const char *id_s = id ? id->u.string : NULL, *trace_s = trace ? trace->u.string : NULL;

		CHECK(id_s && !strcmp(id_s, "owner \"1\""));
		CHECK(trace_s && !strcmp(trace_s, "0af7651916cd43dd8448eb211c80319c"));
		CHECK(v && str_of(v, "trace_id") &&
		      !strcmp(str_of(v, "trace_id"), "4bf92f3577b34da6a3ce929d0e0e4736"));
		CHECK(v && str_of(v, "parent_id") &&
		      !strcmp(str_of(v, "parent_id"), "00f067aa0ba902b7"));
		/* The actor only as its short hash. */
		CHECK(v && str_of(v, "actor_hash") && strlen(str_of(v, "actor_hash")) == 12);
		CHECK(v && str_of(v, "actor") == NULL);
	}
	CHECK(v && num_of(v, "duration_us") &&
	      !strcmp(YAJL_GET_NUMBER(num_of(v, "duration_us")), "9223372036854775807"));
	CHECK(v && num_of(v, "upstream_us") &&
	      !strcmp(YAJL_GET_NUMBER(num_of(v, "upstream_us")), "-9223372036854775808"));
	CHECK(v && num_of(v, "store_us") && !strcmp(YAJL_GET_NUMBER(num_of(v, "store_us")), "0"));
	yajl_tree_free(v);
}

static void test_invalid_utf8(void)
{
	/* A stray continuation byte, a truncated sequence, an overlong '/', a surrogate. */
	static const char bad[] = "a\x80z \xe2\x82 \xc0\xaf \xed\xa0\x80.";
	const char *msg;
	yajl_val v;
	size_t len;

	capture_begin();
	log_write(LOG_WARN, NULL, "%s", bad);
	capture_end();
	v = capture_line(0, &len);
	CHECK(v != NULL);
	msg = str_of(v, "msg");
	CHECK(msg != NULL);
	CHECK(msg && utf8_valid((const unsigned char *)msg, strlen(msg)));
	CHECK(msg && strncmp(msg, "a\xef\xbf\xbdz ", 6) == 0);
	CHECK(msg && ends_with(msg, "."));
	/* No request: no request_id, no seq. */
	CHECK(str_of(v, "request_id") == NULL && num_of(v, "seq") == NULL);
	yajl_tree_free(v);
}

/* A value of n bytes made of unit repeated (cut to a whole last unit). */
static char *repeat(const char *unit, size_t n)
{
	char *s = malloc(n + 1);
	size_t k = strlen(unit), i;

	for (i = 0; i + k <= n; i += k)
		memcpy(s + i, unit, k);
	s[i] = '\0';
	return s;
}

static void test_cut_fields(void)
{
	char *path = repeat("\xc3\xa9", 3000); /* 'é': a cut must fall between characters */
	char *long_msg = repeat("m", 3000), *longer_msg = repeat("n", 10000);
	struct log_tag tag = {.seq = 7, .route = "r", .key = "k", .key_len = 1};
	const char *s;
	yajl_val v;
	size_t len;

	capture_begin();
	log_access(&tag, &(struct log_access){.method = "POST",
					      .path = path,
					      .path_len = strlen(path),
					      .status = 201,
					      .outcome = "owner",
					      .duration_us = 5});
	log_write(LOG_ERROR, NULL, "%s", long_msg);
	log_write(LOG_ERROR, NULL, "%s", longer_msg);
	capture_end();
	CHECK(capture_lines() == 3);

	v = capture_line(0, &len);
	CHECK(v != NULL);
	s = str_of(v, "path");
	CHECK(s && ends_with(s, "\xe2\x80\xa6(3000 bytes)"));
	CHECK(s && strlen(s) <= 1024);
	CHECK(s && utf8_valid((const unsigned char *)s, strlen(s)));
	CHECK_STR(str_of(v, "outcome"), "owner");
	CHECK(num_of(v, "store_us") != NULL);
	CHECK(str_of(v, "key_hash") && strlen(str_of(v, "key_hash")) == 12);
	CHECK(str_of(v, "key") == NULL);
	yajl_tree_free(v);

	v = capture_line(1, &len);
	CHECK(v != NULL);
	s = str_of(v, "msg");
	CHECK(s && ends_with(s, "\xe2\x80\xa6(3000 bytes)"));
	CHECK(s && strlen(s) <= 2048 && strlen(s) > 2000);
	yajl_tree_free(v);
	/* Longer than the message's own buffer: the mark still names its length. */
	v = capture_line(2, &len);
	s = str_of(v, "msg");
	CHECK(s && ends_with(s, "\xe2\x80\xa6(10000 bytes)"));
	yajl_tree_free(v);
	free(path);
	free(long_msg);
	free(longer_msg);
}

/*
 * Whatever the fields hold, a line fits its buffer: control characters
 * (six bytes each once escaped) in every string field at once.
 */
static void test_line_bound(void)
{
	char *ctl = repeat("\x01", 100000);
	struct log_tag tag = {.seq = 1, .route = ctl};
	const char *s;
	yajl_val v;
	size_t len;

	capture_begin();
	log_access(&tag, &(struct log_access){.method = ctl,
					      .path = ctl,
					      .path_len = 100000,
					      .status = 400,
					      .upgrade = ctl,
					      .outcome = ctl,
					      .duration_us = 1,
					      .upstream_us = 2,
					      .store_us = 3});
	log_write(LOG_ERROR, &tag, "%s", ctl);
	capture_end();
	CHECK(capture_lines() == 2);
	for (int i = 0; i < 2; i++) {
		v = capture_line(i, &len);
		CHECK(v != NULL);
		CHECK(len <= LINE_MAX_BYTES);
		s = str_of(v, "route");
		CHECK(s && ends_with(s, "(100000 bytes)"));
		yajl_tree_free(v);
	}
	v = capture_line(0, &len);
	/* The numbers after the strings are all there. */
	CHECK(v && num_of(v, "store_us") && YAJL_GET_INTEGER(num_of(v, "store_us")) == 3);
	CHECK(v && str_of(v, "outcome") && ends_with(str_of(v, "outcome"), "(100000 bytes)"));
	yajl_tree_free(v);
	free(ctl);
}

/* The actor's hash on lines in a row: each actor's own, also when the thread kept the last one. */
static void test_actor_hash(void)
{
	static const char *const actors[] = {"h:a", "h:a", "h:b", "", "h:a", "", "h:b"};
	char want[DIGEST_SHORT_HEX + 1];
	size_t n = sizeof(actors) / sizeof(actors[0]), len;
	struct log_tag tag = {.seq = 1};
	yajl_val v;

	capture_begin();
	for (size_t i = 0; i < n; i++)
		log_access(&tag, &(struct log_access){.method = "POST", .path = "/", .path_len = 1,
						      .outcome = "owner", .actor = actors[i]});
	capture_end();
	CHECK(capture_lines() == (int)n);
	for (size_t i = 0; i < n; i++) {
		digest_short_hex(actors[i], strlen(actors[i]), want);
		v = capture_line((int)i, &len);
		CHECK(v && str_of(v, "actor_hash"));
		CHECK_STR(v ? str_of(v, "actor_hash") : NULL, want);
		yajl_tree_free(v);
	}
}

/* At each least level: which of a debug, info, access, warn and error line are written. */
static void test_levels(void)
{
	static const struct {
		enum log_level level;
		const char *written; /* their msgs, in order */
	} cases[] = {
	    {LOG_DEBUG, "debug info request warn error "},
	    {LOG_INFO, "info request warn error "},
	    {LOG_WARN, "warn error "},
	    {LOG_ERROR, "error "},
	};
	struct log_tag tag = {.seq = 1, .request_id = "r-1"};
	struct log_access a = {.method = "GET", .path = "/", .path_len = 1, .outcome = "pass"};
	char written[128];
	yajl_val v;
	size_t len;

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		log_set_level(cases[i].level);
		capture_begin();
		log_debug(NULL, "debug");
		log_info(NULL, "info");
		log_access(&tag, &a);
		log_warn(NULL, "warn");
		log_error(NULL, "error");
		capture_end();
		written[0] = '\0';
		for (int k = 0; k < capture_lines(); k++) {
			v = capture_line(k, &len);
			strcat(written, v && str_of(v, "msg") ? str_of(v, "msg") : "?");
			strcat(written, " ");
			/* The access line is at info. */
			if (v && str_of(v, "msg") && !strcmp(str_of(v, "msg"), "request"))
				CHECK_STR(str_of(v, "level"), "info");
			yajl_tree_free(v);
		}
		CHECK_STR(written, cases[i].written);
		CHECK(log_enabled(LOG_WARN) == (cases[i].level <= LOG_WARN));
	}
	log_set_level(LOG_INFO);
}

int main(void)
{
	test_escaping();
	test_invalid_utf8();
	test_cut_fields();
	test_line_bound();
	test_levels();
	test_actor_hash();
	UNIT_DONE("log");
}
