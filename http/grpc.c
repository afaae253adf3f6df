/* What a gRPC call's head and body say (see grpc.h). */
#include "http/grpc.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

static const char *const grpc_code_names[GRPC_CODES] = {
    [GRPC_OK] = "OK",
    [GRPC_CANCELLED] = "CANCELLED",
    [GRPC_UNKNOWN] = "UNKNOWN",
    [GRPC_INVALID_ARGUMENT] = "INVALID_ARGUMENT",
    [GRPC_DEADLINE_EXCEEDED] = "DEADLINE_EXCEEDED",
    [GRPC_NOT_FOUND] = "NOT_FOUND",
    [GRPC_ALREADY_EXISTS] = "ALREADY_EXISTS",
    [GRPC_PERMISSION_DENIED] = "PERMISSION_DENIED",
    [GRPC_RESOURCE_EXHAUSTED] = "RESOURCE_EXHAUSTED",
    [GRPC_FAILED_PRECONDITION] = "FAILED_PRECONDITION",
    [GRPC_ABORTED] = "ABORTED",
    [GRPC_OUT_OF_RANGE] = "OUT_OF_RANGE",
    [GRPC_UNIMPLEMENTED] = "UNIMPLEMENTED",
    [GRPC_INTERNAL] = "INTERNAL",
    [GRPC_UNAVAILABLE] = "UNAVAILABLE",
    [GRPC_DATA_LOSS] = "DATA_LOSS",
    [GRPC_UNAUTHENTICATED] = "UNAUTHENTICATED",
};

const char *grpc_code_name(int code)
{
	return code >= 0 && code < GRPC_CODES ? grpc_code_names[code] : NULL;
}

int grpc_code_parse(const char *s)
{
	int code = grpc_status_value(s, strlen(s));

	if (code >= 0)
		return code;
	for (code = 0; code < GRPC_CODES; code++)
		if (strcmp(s, grpc_code_names[code]) == 0)
			return code;
	return -1;
}

int grpc_status_value(const char *v, size_t len)
{
	int code = 0;

	if (len == 0 || len > 2 || (len == 2 && v[0] == '0'))
		return -1;
	for (size_t i = 0; i < len; i++) {
		if (v[i] < '0' || v[i] > '9')
			return -1;
		code = code * 10 + (v[i] - '0');
	}
	return code < GRPC_CODES ? code : -1;
}

int grpc_content_type(const char *v)
{
	static const char type[] = "application/grpc";
	size_t n = sizeof(type) - 1;

	if (!v || strncasecmp(v, type, n) != 0)
		return 0;
	return v[n] == '\0' || v[n] == '+' || v[n] == ';' || v[n] == ' ' || v[n] == '\t';
}

long grpc_messages(const unsigned char *body, size_t len)
{
	long count = 0;
	size_t at = 0, msg;

	while (at < len) {
		if (len - at < GRPC_PREFIX)
			return -1;
		msg = (size_t)body[at + 1] << 24 | (size_t)body[at + 2] << 16 |
		      (size_t)body[at + 3] << 8 | (size_t)body[at + 4];
		at += GRPC_PREFIX;
		if (msg > len - at)
			return -1;
		at += msg;
		count++;
	}
	return count;
}

size_t grpc_message_encode(const char *s, char *out, size_t n)
{
	size_t w = 0;

	if (n == 0)
		return 0;
	for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
		int plain = *p >= 0x20 && *p <= 0x7e && *p != '%';
		size_t need = plain ? 1 : 3;

		if (w + need >= n)
			break;
		if (plain)
			out[w++] = (char)*p;
		else
			w += (size_t)snprintf(out + w, n - w, "%%%02X", *p);
	}
	out[w] = '\0';
	return w;
}
