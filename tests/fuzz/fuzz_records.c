/*
 * libFuzzer target for the records API's query parsing (proxy/records.c):
 * the first byte picks the command, the rest is the query string. What
 * parses must build a statement or be refused with a message, and a
 * statement has its text and at most RECORDS_PARAMS_MAX parameters.
 * Built by `make fuzz` from the Makefile's FUZZ_SRC_fuzz_records.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <event2/http.h>
#include <event2/keyvalq_struct.h>

#include "proxy/records.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct evkeyvalq q;
	struct records_args a;
	struct records_stmt st;
	enum records_cmd cmd;
	char err[256], *query;

	if (size == 0)
		return 0;
	cmd = (enum records_cmd)(data[0] % 4);
	query = malloc(size);
	if (!query)
		return 0;
	memcpy(query, data + 1, size - 1);
	query[size - 1] = '\0';
	memset(&a, 0, sizeof(a));
	err[0] = '\0';
	if (records_parse_query(cmd, query, &q, &a, err, sizeof(err)) < 0) {
		if (!err[0])
			abort();
	} else if (records_stmt_build(cmd, &a, &st, err, sizeof(err)) < 0) {
		if (!err[0])
			abort();
	} else {
		if (!st.query.sql || st.query.nparams < 0 || st.query.nparams > RECORDS_PARAMS_MAX)
			abort();
		records_stmt_clear(&st);
	}
	evhttp_clear_headers(&q);
	free(query);
	return 0;
}
