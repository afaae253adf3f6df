/*
 * libFuzzer target for conf/: the input is parsed as a configuration file;
 * when it parses, every route is looked up with a path made from the input,
 * and the effective configuration (conf/dump.c) must parse back and write
 * the same text again.
 * Built by `make fuzz` from the Makefile's FUZZ_SRC_fuzz_conf.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conf/conf.h"
#include "conf/dump.h"
#include "proxy/lookup.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The dump of conf parses, and its own dump is the same text. */
static void round_trip(const struct conf *conf)
{
	struct conf *again = NULL;
	char err[CONF_ERR_MAX];
	size_t len = 0, len2 = 0;
	char *text = conf_dump(conf, &len), *text2;

	if (!text)
		return;
	if (conf_parse("fuzz.conf", text, len, &again, err, sizeof(err)) < 0) {
		fprintf(stderr, "dump does not parse: %s\n%s", err, text);
		abort();
	}
	text2 = conf_dump(again, &len2);
	if (text2 && (len != len2 || memcmp(text, text2, len) != 0)) {
		fprintf(stderr, "dump differs once read back:\n%s\n----\n%s", text, text2);
		abort();
	}
	free(text2);
	conf_free(again);
	free(text);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct conf *conf = NULL;
	char err[CONF_ERR_MAX];
	size_t cut = size / 2;

	if (conf_parse("fuzz.conf", (const char *)data, size, &conf, err, sizeof(err)) < 0) {
		/* Every error names the file and a line. */
		if (strncmp(err, "fuzz.conf:", 10) != 0)
			abort();
		return 0;
	}
	for (int i = 0; i < conf->nroutes; i++)
		for (int j = 0; j < conf->routes[i].nmatches; j++)
			lookup_route(conf, conf->routes[i].matches[j].method,
					(const char *)data + cut, size - cut, NULL);
	round_trip(conf);
	conf_free(conf);
	return 0;
}
