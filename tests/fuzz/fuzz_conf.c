/*
 * libFuzzer target for conf/: the input is parsed as a configuration file;
 * when it parses, every route is looked up with a path made from the input.
 * Built by `make fuzz` from the Makefile's FUZZ_SRC_fuzz_conf.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conf/conf.h"
#include "proxy/lookup.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

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
	conf_free(conf);
	return 0;
}
