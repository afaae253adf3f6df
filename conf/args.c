/*
 * The helpers the configuration's two halves share (conf.c's typed
 * directives and parser, directives.c's setters): errors with FILE:LINE,
 * strings and files, and the values an argument may hold -- durations,
 * sizes, integers, tokens, addresses, status sets. They use nothing of
 * either half, so both depend on this file and not on each other.
 */
#include "conf/conf.h"
#include "conf/parser.h"
#include "conf/table.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#include "http/grpc.h"

#define CONF_DURATION_MAX_MS ((int64_t)36500 * 24 * 3600 * 1000)

static int conf_verror(struct conf_parser *p, int line, const char *fmt, va_list ap)
{
	int n;

	if (!p->err || p->errlen == 0)
		return -1;
	n = snprintf(p->err, p->errlen, "%s:%d: ", p->name, line);
	if (n >= 0 && (size_t)n < p->errlen)
		vsnprintf(p->err + n, p->errlen - n, fmt, ap);
	return -1;
}

/* Write "FILE:LINE: message" for the current line into p->err; returns -1. */
int conf_error(struct conf_parser *p, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	conf_verror(p, p->line, fmt, ap);
	va_end(ap);
	return -1;
}

int conf_error_at(struct conf_parser *p, int line, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	conf_verror(p, line, fmt, ap);
	va_end(ap);
	return -1;
}

/* Replace *DST with a copy of S (NULL clears it). Returns 0 or -1. */
int conf_set_str(struct conf_parser *p, char **dst, const char *s)
{
	char *copy = NULL;

	if (s) {
		copy = strdup(s);
		if (!copy)
			return conf_error(p, "out of memory");
	}
	free(*dst);
	*dst = copy;
	return 0;
}

/*
 * Set F to the file PATH named on the current line: a relative PATH is
 * taken from the configuration file's directory, as a service manager
 * starts idemproxy from anywhere.
 */
int conf_set_file(struct conf_parser *p, struct conf_file *f, const char *path)
{
	const char *slash = strrchr(p->name, '/');
	char *full;
	int n;

	if (*path == '\0')
		return conf_error(p, "empty file name");
	if (path[0] == '/' || !slash) {
		full = strdup(path);
	} else {
		n = (int)(slash - p->name);
		full = malloc(n + 1 + strlen(path) + 1);
		if (full)
			sprintf(full, "%.*s/%s", n, p->name, path);
	}
	if (!full)
		return conf_error(p, "out of memory");
	free(f->path);
	f->path = full;
	f->line = p->line;
	return 0;
}

int conf_loopback(const char *name, size_t n)
{
	unsigned char a[sizeof(struct in6_addr)];
	char host[INET6_ADDRSTRLEN];

	if (n == 9 && strncasecmp(name, "localhost", 9) == 0)
		return 1;
	if (n == 0 || n >= sizeof(host))
		return 0;
	memcpy(host, name, n);
	host[n] = '\0';
	if (inet_pton(AF_INET, host, a) == 1)
		return a[0] == 127;
	return inet_pton(AF_INET6, host, a) == 1 && memcmp(a, &in6addr_loopback, 16) == 0;
}


/* ---- value parsers ---- */

int conf_parse_duration(const char *s, int64_t *ms)
{
	static const struct {
		const char *unit;
		int64_t ms;
	} units[] = {
	    {"ms", 1}, {"s", 1000}, {"m", 60 * 1000}, {"h", 3600 * 1000}, {"d", 86400 * 1000},
	};
	int64_t n = 0;
	size_t i;

	if (*s < '0' || *s > '9')
		return -1;
	for (; *s >= '0' && *s <= '9'; s++) {
		if (n > (CONF_DURATION_MAX_MS - (*s - '0')) / 10)
			return -1;
		n = n * 10 + (*s - '0');
	}
	for (i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
		if (strcmp(s, units[i].unit) != 0)
			continue;
		if (n > CONF_DURATION_MAX_MS / units[i].ms)
			return -1;
		*ms = n * units[i].ms;
		return 0;
	}
	return -1;
}

int conf_parse_size(const char *s, size_t *bytes)
{
	size_t n = 0, mult = 1;

	if (*s < '0' || *s > '9')
		return -1;
	for (; *s >= '0' && *s <= '9'; s++) {
		if (n > (SIZE_MAX - (size_t)(*s - '0')) / 10)
			return -1;
		n = n * 10 + (size_t)(*s - '0');
	}
	if (*s != '\0') {
		switch (*s) {
		case 'k':
		case 'K':
			mult = 1024;
			break;
		case 'm':
		case 'M':
			mult = 1024 * 1024;
			break;
		case 'g':
		case 'G':
			mult = 1024 * 1024 * 1024;
			break;
		default:
			return -1;
		}
		if (s[1] != '\0')
			return -1;
	}
	if (n > SIZE_MAX / mult)
		return -1;
	*bytes = n * mult;
	return 0;
}

int conf_parse_int(const char *s, int min, int max, int *out)
{
	long n = 0;

	if (*s == '\0')
		return -1;
	for (; *s; s++) {
		if (*s < '0' || *s > '9')
			return -1;
		n = n * 10 + (*s - '0');
		if (n > max)
			return -1;
	}
	if (n < min)
		return -1;
	*out = (int)n;
	return 0;
}

/* Whether S is a non-empty HTTP token (RFC 9110 tchar). */
int conf_is_token(const char *s)
{
	const unsigned char *c = (const unsigned char *)s;

	if (*c == '\0')
		return 0;
	for (; *c; c++) {
		if ((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') ||
		    (*c >= '0' && *c <= '9'))
			continue;
		if (!strchr("!#$%&'*+-.^_`|~", *c))
			return 0;
	}
	return 1;
}


/*
 * Parse a numeric listening address S, "a.b.c.d:port" or "[v6]:port", into
 * *a: a new host string (without brackets; the old one is freed) and port.
 * Returns 0, or -1 with the message written.
 */
int conf_parse_addr(struct conf_parser *p, const char *s, struct conf_addr *a)
{
	char addr[INET6_ADDRSTRLEN];
	unsigned char bin[sizeof(struct in6_addr)];
	const char *start = s, *end, *colon;
	int family = AF_INET, n;

	if (*s == '[') {
		family = AF_INET6;
		start = s + 1;
		end = strchr(start, ']');
		colon = end && end[1] == ':' ? end + 1 : NULL;
	} else {
		colon = strrchr(s, ':');
		end = colon;
	}
	if (!end || !colon || (size_t)(end - start) >= sizeof(addr))
		goto bad;
	memcpy(addr, start, end - start);
	addr[end - start] = '\0';
	if (inet_pton(family, addr, bin) != 1)
		goto bad;
	if (conf_parse_int(colon + 1, 1, CONF_PORT_MAX, &n))
		return conf_error(p, "invalid port in \"%s\" (1-65535)", s);
	a->port = n;
	return conf_set_str(p, &a->host, addr);
bad:
	return conf_error(p,
			  "invalid address \"%s\" (expected numeric \"a.b.c.d:port\" or "
			  "\"[ipv6]:port\")",
			  s);
}

void conf_free_names(char **names, int n)
{
	for (int i = 0; i < n; i++)
		free(names[i]);
	free(names);
}

/* Parse the duration S for the current directive into *MS; it must be > 0. */
int conf_duration_arg(struct conf_parser *p, const char *s, int64_t *ms)
{
	int64_t v;

	if (conf_parse_duration(s, &v))
		return conf_error(p, "invalid duration \"%s\"", s);
	if (v == 0)
		return conf_error(p, "\"%s\" must be greater than 0", p->dir->name);
	*ms = v;
	return 0;
}

int conf_size_arg(struct conf_parser *p, const char *s, size_t *bytes)
{
	if (conf_parse_size(s, bytes))
		return conf_error(p, "invalid size \"%s\"", s);
	return 0;
}

/*
 * Fill SET from ARGV: each a status 100-599 or, with CF_CLASSES, a class
 * "4xx"; with CF_GRPC a gRPC code (grpc_code_parse) instead.
 */
int conf_status_set(struct conf_parser *p, struct status_set *set, int argc, char **argv,
			   int flags)
{
	const char *s;
	int i, lo, hi, st;

	memset(set, 0, sizeof(*set));
	set->set = 1;
	for (i = 0; i < argc; i++) {
		s = argv[i];
		if (flags & CF_GRPC) {
			if ((lo = hi = grpc_code_parse(s)) < 0)
				return conf_error(p, "invalid gRPC status code \"%s\" (a name such as "
						     "UNAVAILABLE, or 0-16)", s);
		} else if ((flags & CF_CLASSES) && strlen(s) == 3 && s[0] >= '1' && s[0] <= '5' &&
		    (s[1] == 'x' || s[1] == 'X') && (s[2] == 'x' || s[2] == 'X')) {
			lo = (s[0] - '0') * 100;
			hi = lo + 99;
		} else if (strlen(s) == 3 &&
			   conf_parse_int(s, CONF_STATUS_MIN, CONF_STATUS_MAX, &lo) == 0) {
			hi = lo;
		} else {
			return conf_error(p, "invalid status \"%s\"", s);
		}
		for (st = lo; st <= hi; st++)
			set->bits[st / 8] |= (uint8_t)(1u << (st % 8));
	}
	return 0;
}
