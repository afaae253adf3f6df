/*
 * Configuration file: lexer, directive table, parser and validation.
 *
 * Every directive is one row of conf_directives[]: where it may appear, how
 * many arguments it takes, the function that parses them, its default and
 * whether a reload may change it. Defaults are strings parsed by the same
 * function as the file, before the file, so the table is the one place that
 * states them. Route directives given at top level are collected in a route
 * of their own and inherited, after the whole file is read, by every route
 * that does not set them.
 */
#include "conf/conf.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#define CONF_FILE_MAX		  (1024 * 1024)
#define CONF_DIRECTIVES_MAX	  32
#define CONF_ARGS_ANY		  (-1)
#define CONF_OPERATION_MAX	  128
#define CONF_WORKERS_MAX	  256
#define CONF_PORT_MAX		  65535
#define CONF_HOSTNAME_MAX	  253
#define CONF_LEASE_MARGIN_MS	  (30 * 1000)
#define CONF_DURATION_MAX_MS	  ((int64_t)36500 * 24 * 3600 * 1000)
#define CONF_STATUS_MIN		  100
#define CONF_STATUS_MAX		  599
#define CONF_HTTP_DEFAULT_PORT	  80
#define CONF_PROBLEM_BASE_DEFAULT "https://idemproxy.dev/problems/"

enum conf_where {
	CONF_TOP = 1,
	CONF_ROUTE = 2,
	CONF_BOTH = CONF_TOP | CONF_ROUTE,
};

enum conf_flags {
	CF_RESTART = 1, /* a reload keeps the running value; a restart applies it */
	CF_REPEAT = 2,	/* may appear more than once in one scope */
	CF_BLOCK = 4,	/* the line ends with "{" and opens a block */
};

struct conf_parser;

/* Parse ARGV[0..ARGC) (the arguments, without the directive name) into R
 * (a route, or the top-level route defaults) or into p->conf. Returns 0, or
 * -1 with the message in p->err. */
typedef int (*conf_setter)(struct conf_parser *p, struct route *r, int argc, char **argv);

struct conf_directive {
	const char *name;
	enum conf_where where;
	int min_args;
	int max_args; /* CONF_ARGS_ANY: no upper bound */
	conf_setter set;
	const char *def; /* parsed by set() before the file; NULL: none or computed */
	unsigned flags;
};

struct conf_parser {
	const char *name;
	char *err;
	size_t errlen;
	int line;

	struct conf *conf;
	struct route defaults; /* route directives set at top level */
	struct route builtin;  /* route directives' table defaults */
	struct route *route;   /* the open block, or NULL */
	const struct conf_directive *dir;
	int top_seen[CONF_DIRECTIVES_MAX]; /* first line of each directive, 0: unset */
	int route_seen[CONF_DIRECTIVES_MAX];

	char *buf; /* the current line's arguments, NUL-separated */
	size_t bufcap;
	char **argv;
	unsigned char *quoted;
	int argc, argvcap;
};

static int conf_error(struct conf_parser *p, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static int conf_error_at(struct conf_parser *p, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

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
static int conf_error(struct conf_parser *p, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	conf_verror(p, p->line, fmt, ap);
	va_end(ap);
	return -1;
}

/* Same as conf_error for a given LINE; returns -1. */
static int conf_error_at(struct conf_parser *p, int line, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	conf_verror(p, line, fmt, ap);
	va_end(ap);
	return -1;
}

/* Replace *DST with a copy of S (NULL clears it). Returns 0 or -1. */
static int conf_set_str(struct conf_parser *p, char **dst, const char *s)
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

/* Parse S, only decimal digits, as an integer in [MIN, MAX]. Returns 0 or -1. */
static int conf_parse_int(const char *s, int min, int max, int *out)
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
static int conf_is_token(const char *s)
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
 * Parse a numeric listening address S, "a.b.c.d:port" or "[v6]:port", into a
 * new string in *host (without brackets; the old one is freed) and *port.
 * Returns 0, or -1 with the message written.
 */
static int conf_parse_addr(struct conf_parser *p, const char *s, char **host, int *port)
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
	*port = n;
	return conf_set_str(p, host, addr);
bad:
	return conf_error(p,
			  "invalid address \"%s\" (expected numeric \"a.b.c.d:port\" or "
			  "\"[ipv6]:port\")",
			  s);
}

/* ---- top-level directives ---- */

static int conf_set_listen(struct conf_parser *p, struct route *r, int argc, char **argv)
{
	return conf_parse_addr(p, argv[0], &p->conf->listen_host, &p->conf->listen_port);
}

static int conf_hostname_ok(const char *s, size_t len)
{
	size_t i;

	if (len == 0 || len > CONF_HOSTNAME_MAX)
		return 0;
	for (i = 0; i < len; i++) {
		if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') ||
		      (s[i] >= '0' && s[i] <= '9') || s[i] == '.' || s[i] == '-'))
			return 0;
	}
	return 1;
}

/*
 * upstream http://HOST[:PORT][/]: HOST is a name, an IPv4 address or a
 * bracketed IPv6 address.
 */
static int conf_set_upstream(struct conf_parser *p, struct route *r, int argc, char **argv)
{
	static const char scheme[] = "http://";
	struct conf *c = p->conf;
	const char *url = argv[0], *auth, *end, *host, *host_end, *port = NULL;
	unsigned char bin[sizeof(struct in6_addr)];
	char addr[INET6_ADDRSTRLEN];
	int n = CONF_HTTP_DEFAULT_PORT;

	if (strncasecmp(url, "https://", 8) == 0)
		return conf_error(p, "https upstreams are not supported yet");
	if (strncasecmp(url, scheme, sizeof(scheme) - 1) != 0)
		return conf_error(p, "invalid upstream \"%s\" (expected http://HOST[:PORT])", url);
	auth = url + sizeof(scheme) - 1;
	end = auth + strcspn(auth, "/?#");
	if (*end != '\0' && strcmp(end, "/") != 0)
		return conf_error(p, "upstream \"%s\" has a path; only \"/\" is supported", url);
	host = auth;
	host_end = memchr(auth, ':', end - auth);
	if (*auth == '[') {
		host = auth + 1;
		host_end = memchr(host, ']', end - host);
		if (!host_end || (size_t)(host_end - host) >= sizeof(addr))
			goto bad_host;
		memcpy(addr, host, host_end - host);
		addr[host_end - host] = '\0';
		if (inet_pton(AF_INET6, addr, bin) != 1)
			goto bad_host;
		if (host_end + 1 != end && host_end[1] != ':')
			goto bad_host;
		if (host_end[1] == ':')
			port = host_end + 2;
	} else {
		if (host_end)
			port = host_end + 1;
		else
			host_end = end;
		if (!conf_hostname_ok(host, host_end - host))
			goto bad_host;
	}
	if (port) {
		char digits[sizeof("65535")] = "";

		if ((size_t)(end - port) >= sizeof(digits))
			return conf_error(p, "invalid port in upstream \"%s\" (1-65535)", url);
		memcpy(digits, port, end - port);
		digits[end - port] = '\0';
		if (conf_parse_int(digits, 1, CONF_PORT_MAX, &n))
			return conf_error(p, "invalid port in upstream \"%s\" (1-65535)", url);
	}
	if (conf_set_str(p, &c->upstream_url, url))
		return -1;
	free(c->upstream_host);
	c->upstream_host = strndup(host, host_end - host);
	free(c->upstream_hostport);
	c->upstream_hostport = strndup(auth, end - auth);
	if (!c->upstream_host || !c->upstream_hostport)
		return conf_error(p, "out of memory");
	c->upstream_port = n;
	return 0;
bad_host:
	return conf_error(p, "invalid host in upstream \"%s\"", url);
}

static int conf_set_database(struct conf_parser *p, struct route *r, int argc, char **argv)
{
	return conf_set_str(p, &p->conf->database, argv[0]);
}

static int conf_set_admin(struct conf_parser *p, struct route *r, int argc, char **argv)
{
	if (strcmp(argv[0], "off") == 0)
		return conf_set_str(p, &p->conf->admin_host, NULL);
	return conf_parse_addr(p, argv[0], &p->conf->admin_host, &p->conf->admin_port);
}

static int conf_set_workers(struct conf_parser *p, struct route *r, int argc, char **argv)
{
	long cpus;

	if (strcmp(argv[0], "auto") == 0) {
		cpus = sysconf(_SC_NPROCESSORS_ONLN);
		if (cpus < 1)
			cpus = 1;
		if (cpus > CONF_WORKERS_MAX)
			cpus = CONF_WORKERS_MAX;
		p->conf->workers = (int)cpus;
		return 0;
	}
	if (conf_parse_int(argv[0], 1, CONF_WORKERS_MAX, &p->conf->workers))
		return conf_error(p, "invalid workers \"%s\" (auto or 1-%d)", argv[0],
				  CONF_WORKERS_MAX);
	return 0;
}

static int conf_set_key_header(struct conf_parser *p, struct route *r, int argc, char **argv)
{
	if (!conf_is_token(argv[0]))
		return conf_error(p, "invalid header name \"%s\"", argv[0]);
	return conf_set_str(p, &p->conf->key_header, argv[0]);
}

static int conf_set_mismatch_status(struct conf_parser *p, struct route *r, int argc, char **argv)
{
	if (strcmp(argv[0], "422") == 0)
		p->conf->mismatch_status = 422;
	else if (strcmp(argv[0], "409") == 0)
		p->conf->mismatch_status = 409;
	else
		return conf_error(p, "invalid mismatch_status \"%s\" (422 or 409)", argv[0]);
	return 0;
}

/* Parse the duration S for the current directive into *MS; it must be > 0. */
static int conf_duration_arg(struct conf_parser *p, const char *s, int64_t *ms)
{
	int64_t v;

	if (conf_parse_duration(s, &v))
		return conf_error(p, "invalid duration \"%s\"", s);
	if (v == 0)
		return conf_error(p, "\"%s\" must be greater than 0", p->dir->name);
	*ms = v;
	return 0;
}

static int conf_set_upstream_timeout(struct conf_parser *p, struct route *r, int argc, char **argv)
{
	return conf_duration_arg(p, argv[0], &p->conf->upstream_timeout_ms);
}

static int conf_set_client_timeout(struct conf_parser *p, struct route *r, int argc, char **argv)
{
	return conf_duration_arg(p, argv[0], &p->conf->client_timeout_ms);
}

static int conf_set_store_timeout(struct conf_parser *p, struct route *r, int argc, char **argv)
{
	return conf_duration_arg(p, argv[0], &p->conf->store_timeout_ms);
}

static int conf_set_lease(struct conf_parser *p, struct route *r, int argc, char **argv)
{
	return conf_duration_arg(p, argv[0], &p->conf->lease_ms);
}

static int conf_set_shutdown_timeout(struct conf_parser *p, struct route *r, int argc, char **argv)
{
	return conf_duration_arg(p, argv[0], &p->conf->shutdown_timeout_ms);
}

/* "off": this instance leaves sweeping to others sharing the database. */
static int conf_set_sweep_interval(struct conf_parser *p, struct route *r, int argc, char **argv)
{
	if (strcmp(argv[0], "off") == 0) {
		p->conf->sweep_interval_ms = 0;
		return 0;
	}
	return conf_duration_arg(p, argv[0], &p->conf->sweep_interval_ms);
}

static int conf_size_arg(struct conf_parser *p, const char *s, size_t *bytes)
{
	if (conf_parse_size(s, bytes))
		return conf_error(p, "invalid size \"%s\"", s);
	return 0;
}

static int conf_set_max_request_body(struct conf_parser *p, struct route *r, int argc, char **argv)
{
	return conf_size_arg(p, argv[0], &p->conf->max_request_body);
}

static int conf_set_replay_cache(struct conf_parser *p, struct route *r, int argc, char **argv)
{
	return conf_size_arg(p, argv[0], &p->conf->replay_cache);
}

static int conf_set_max_stored_body(struct conf_parser *p, struct route *r, int argc, char **argv)
{
	return conf_size_arg(p, argv[0], &p->conf->max_stored_body);
}

static int conf_set_store_unavailable(struct conf_parser *p, struct route *r, int argc, char **argv)
{
	if (strcmp(argv[0], "fail-closed") == 0)
		p->conf->store_unavailable = STORE_FAIL_CLOSED;
	else if (strcmp(argv[0], "fail-open") == 0)
		p->conf->store_unavailable = STORE_FAIL_OPEN;
	else
		return conf_error(p, "invalid store_unavailable \"%s\" (fail-closed or fail-open)",
				  argv[0]);
	return 0;
}

/* problem_base is a URI prefix placed into JSON: visible ASCII only. */
static int conf_set_problem_base(struct conf_parser *p, struct route *r, int argc, char **argv)
{
	const unsigned char *c = (const unsigned char *)argv[0];

	if (*c == '\0')
		return conf_error(p, "\"problem_base\" must not be empty");
	for (; *c; c++) {
		if (*c <= 0x20 || *c >= 0x7f || *c == '"' || *c == '\\')
			return conf_error(p, "invalid problem_base \"%s\"", argv[0]);
	}
	return conf_set_str(p, &p->conf->problem_base, argv[0]);
}

/* ---- routes ---- */

/* Free everything R owns and zero it. */
static void conf_route_clear(struct route *r)
{
	int i;

	free(r->operation);
	for (i = 0; i < r->nmatches; i++) {
		free(r->matches[i].method);
		route_template_free(r->matches[i].segs, r->matches[i].nsegs);
	}
	free(r->matches);
	free(r->actor_header);
	for (i = 0; i < r->nfields; i++)
		free(r->fields[i].path);
	free(r->fields);
	for (i = 0; i < r->nstore_headers; i++)
		free(r->store_headers[i]);
	free(r->store_headers);
	memset(r, 0, sizeof(*r));
}

static int conf_operation_ok(const char *s)
{
	size_t len = strlen(s), i;

	if (len == 0 || len > CONF_OPERATION_MAX)
		return 0;
	for (i = 0; i < len; i++) {
		if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') ||
		      (s[i] >= '0' && s[i] <= '9') || strchr("._:-", s[i])))
			return 0;
	}
	return 1;
}

/* route NAME {: append a route to the conf and make it the open block. */
static int conf_open_route(struct conf_parser *p, struct route *r, int argc, char **argv)
{
	struct conf *c = p->conf;
	struct route *routes;
	int i;

	if (!conf_operation_ok(argv[0]))
		return conf_error(p,
				  "invalid operation name \"%s\" (1-%d characters of A-Z a-z "
				  "0-9 . _ : -)",
				  argv[0], CONF_OPERATION_MAX);
	for (i = 0; i < c->nroutes; i++) {
		if (strcmp(c->routes[i].operation, argv[0]) == 0)
			return conf_error(p, "duplicate route \"%s\" (first defined at line %d)",
					  argv[0], c->routes[i].line);
	}
	routes = realloc(c->routes, (c->nroutes + 1) * sizeof(*routes));
	if (!routes)
		return conf_error(p, "out of memory");
	c->routes = routes;
	p->route = &routes[c->nroutes++];
	memset(p->route, 0, sizeof(*p->route));
	p->route->line = p->line;
	memset(p->route_seen, 0, sizeof(p->route_seen));
	return conf_set_str(p, &p->route->operation, argv[0]);
}

/* match METHOD PATH */
static int conf_set_match(struct conf_parser *p, struct route *r, int argc, char **argv)
{
	struct route_match *matches, *m;
	char reason[CONF_ERR_MAX];
	char *c;

	if (!conf_is_token(argv[0]))
		return conf_error(p, "invalid method \"%s\"", argv[0]);
	matches = realloc(r->matches, (r->nmatches + 1) * sizeof(*matches));
	if (!matches)
		return conf_error(p, "out of memory");
	r->matches = matches;
	m = &matches[r->nmatches];
	memset(m, 0, sizeof(*m));
	m->line = p->line;
	if (route_template_parse(argv[1], &m->segs, &m->nsegs, reason, sizeof(reason)))
		return conf_error(p, "invalid path template \"%s\": %s", argv[1], reason);
	m->method = strdup(argv[0]);
	r->nmatches++;
	if (!m->method)
		return conf_error(p, "out of memory");
	for (c = m->method; *c; c++) {
		if (*c >= 'a' && *c <= 'z')
			*c = (char)(*c - 'a' + 'A');
	}
	return 0;
}

/* actor header NAME | actor anonymous */
static int conf_set_actor(struct conf_parser *p, struct route *r, int argc, char **argv)
{
	if (strcmp(argv[0], "header") == 0) {
		if (argc != 2)
			return conf_error(p, "\"actor header\" needs 1 header name");
		if (!conf_is_token(argv[1]))
			return conf_error(p, "invalid header name \"%s\"", argv[1]);
		r->actor = ACTOR_HEADER;
		return conf_set_str(p, &r->actor_header, argv[1]);
	}
	if (strcmp(argv[0], "anonymous") == 0) {
		if (argc != 1)
			return conf_error(p, "\"actor anonymous\" takes no arguments");
		r->actor = ACTOR_ANONYMOUS;
		return 0;
	}
	if (strcmp(argv[0], "jwt") == 0 || strcmp(argv[0], "authorization") == 0)
		return conf_error(p, "actor source \"%s\" is not supported yet", argv[0]);
	return conf_error(p, "unknown actor source \"%s\" (header or anonymous)", argv[0]);
}

static int conf_set_key(struct conf_parser *p, struct route *r, int argc, char **argv)
{
	if (strcmp(argv[0], "required") == 0)
		r->key = KEY_REQUIRED;
	else if (strcmp(argv[0], "optional") == 0)
		r->key = KEY_OPTIONAL;
	else
		return conf_error(p, "invalid key mode \"%s\" (required or optional)", argv[0]);
	return 0;
}

/*
 * Parse FIELD[:TRANSFORM] from S into F (F->path is a new string). FIELD is a
 * dot path of non-empty names.
 */
static int conf_parse_field(struct conf_parser *p, const char *s, struct fp_field *f)
{
	static const struct {
		const char *name;
		enum fp_transform t;
	} transforms[] = {
	    {"trim", FPT_TRIM},	    {"lower", FPT_LOWER},   {"int", FPT_INT},
	    {"number", FPT_NUMBER}, {"string", FPT_STRING},
	};
	const char *colon = strchr(s, ':');
	size_t len = colon ? (size_t)(colon - s) : strlen(s), i;

	if (len == 0 || s[0] == '.' || s[len - 1] == '.' || memmem(s, len, "..", 2))
		return conf_error(
		    p, "invalid fingerprint field \"%s\" (a dot path of non-empty names)", s);
	f->transform = FPT_NONE;
	if (colon) {
		for (i = 0; i < sizeof(transforms) / sizeof(transforms[0]); i++) {
			if (strcmp(colon + 1, transforms[i].name) == 0)
				break;
		}
		if (i == sizeof(transforms) / sizeof(transforms[0]))
			return conf_error(p,
					  "invalid transform \"%s\" in \"%s\" (trim, lower, int, "
					  "number or string)",
					  colon + 1, s);
		f->transform = transforms[i].t;
	}
	f->path = strndup(s, len);
	if (!f->path)
		return conf_error(p, "out of memory");
	return 0;
}

/* fingerprint json [FIELD[:TRANSFORM]...] | fingerprint body | fingerprint none */
static int conf_set_fingerprint(struct conf_parser *p, struct route *r, int argc, char **argv)
{
	int i, j;

	if (strcmp(argv[0], "body") == 0 || strcmp(argv[0], "none") == 0) {
		if (argc != 1)
			return conf_error(p, "\"fingerprint %s\" takes no fields", argv[0]);
		r->fingerprint = argv[0][0] == 'b' ? FP_BODY : FP_NONE;
		return 0;
	}
	if (strcmp(argv[0], "json") != 0)
		return conf_error(p, "invalid fingerprint \"%s\" (json, body or none)", argv[0]);
	r->fingerprint = FP_JSON;
	if (argc == 1)
		return 0;
	r->fields = calloc(argc - 1, sizeof(*r->fields));
	if (!r->fields)
		return conf_error(p, "out of memory");
	for (i = 1; i < argc; i++) {
		if (conf_parse_field(p, argv[i], &r->fields[r->nfields]))
			return -1;
		r->nfields++;
		for (j = 0; j < r->nfields - 1; j++) {
			if (strcmp(r->fields[j].path, r->fields[r->nfields - 1].path) == 0)
				return conf_error(p, "duplicate fingerprint field \"%s\"",
						  r->fields[j].path);
		}
	}
	return 0;
}

static int conf_set_retention(struct conf_parser *p, struct route *r, int argc, char **argv)
{
	return conf_duration_arg(p, argv[0], &r->retention_ms);
}

/*
 * Fill SET from ARGV: each a status 100-599 or, when CLASSES, a class "4xx".
 */
static int conf_status_set(struct conf_parser *p, struct status_set *set, int argc, char **argv,
			   int classes)
{
	const char *s;
	int i, lo, hi, st;

	memset(set, 0, sizeof(*set));
	set->set = 1;
	for (i = 0; i < argc; i++) {
		s = argv[i];
		if (classes && strlen(s) == 3 && s[0] >= '1' && s[0] <= '5' &&
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

static int conf_set_release_on(struct conf_parser *p, struct route *r, int argc, char **argv)
{
	return conf_status_set(p, &r->release_on, argc, argv, 1);
}

static int conf_set_unknown_on(struct conf_parser *p, struct route *r, int argc, char **argv)
{
	return conf_status_set(p, &r->unknown_on, argc, argv, 0);
}

/* Headers that carry credentials or belong to one hop are never stored. */
static int conf_header_storable(const char *name)
{
	static const char *const never[] = {
	    "authorization",
	    "proxy-authorization",
	    "cookie",
	    "set-cookie",
	    "connection",
	    "keep-alive",
	    "proxy-authenticate",
	    "proxy-connection",
	    "te",
	    "trailer",
	    "transfer-encoding",
	    "upgrade",
	};
	size_t i;

	for (i = 0; i < sizeof(never) / sizeof(never[0]); i++) {
		if (strcasecmp(name, never[i]) == 0)
			return 0;
	}
	return 1;
}

static int conf_set_store_headers(struct conf_parser *p, struct route *r, int argc, char **argv)
{
	int i;

	r->store_headers = calloc(argc, sizeof(*r->store_headers));
	if (!r->store_headers)
		return conf_error(p, "out of memory");
	for (i = 0; i < argc; i++) {
		if (!conf_is_token(argv[i]))
			return conf_error(p, "invalid header name \"%s\"", argv[i]);
		if (!conf_header_storable(argv[i]))
			return conf_error(p,
					  "header \"%s\" is never stored (credentials and "
					  "hop-by-hop headers)",
					  argv[i]);
		if (conf_set_str(p, &r->store_headers[i], argv[i]))
			return -1;
		r->nstore_headers++;
	}
	return 0;
}

static int conf_set_in_progress(struct conf_parser *p, struct route *r, int argc, char **argv)
{
	if (strcmp(argv[0], "wait") == 0) {
		if (argc != 2)
			return conf_error(p, "\"in_progress wait\" takes a duration");
		r->in_progress = IN_PROGRESS_WAIT;
		return conf_duration_arg(p, argv[1], &r->in_progress_wait_ms);
	}
	if (strcmp(argv[0], "reject") != 0)
		return conf_error(p, "invalid in_progress \"%s\" (reject or wait DUR)", argv[0]);
	if (argc != 1)
		return conf_error(p, "\"in_progress reject\" takes no arguments");
	r->in_progress = IN_PROGRESS_REJECT;
	return 0;
}

static int conf_set_recovery(struct conf_parser *p, struct route *r, int argc, char **argv)
{
	if (strcmp(argv[0], "forward") == 0)
		r->recovery = RECOVERY_FORWARD;
	else if (strcmp(argv[0], "hold") == 0)
		r->recovery = RECOVERY_HOLD;
	else
		return conf_error(p, "invalid recovery \"%s\" (hold or forward)", argv[0]);
	return 0;
}

/*
 * The directives. Keep one entry per line starting with `{ "name",`:
 * scripts/check-conf-doc.sh reads the names from here.
 */
static const struct conf_directive conf_directives[] = {
    {"listen", CONF_TOP, 1, 1, conf_set_listen, "127.0.0.1:8080", CF_RESTART},
    {"upstream", CONF_TOP, 1, 1, conf_set_upstream, NULL, CF_RESTART},
    {"database", CONF_TOP, 1, 1, conf_set_database, NULL, CF_RESTART},
    {"admin", CONF_TOP, 1, 1, conf_set_admin, "off", CF_RESTART},
    {"workers", CONF_TOP, 1, 1, conf_set_workers, "auto", CF_RESTART},
    {"key_header", CONF_TOP, 1, 1, conf_set_key_header, "Idempotency-Key", 0},
    {"mismatch_status", CONF_TOP, 1, 1, conf_set_mismatch_status, "422", 0},
    {"upstream_timeout", CONF_TOP, 1, 1, conf_set_upstream_timeout, "30s", 0},
    {"client_timeout", CONF_TOP, 1, 1, conf_set_client_timeout, "60s", 0},
    {"store_timeout", CONF_TOP, 1, 1, conf_set_store_timeout, "5s", CF_RESTART},
    {"lease", CONF_TOP, 1, 1, conf_set_lease, NULL, 0}, /* upstream_timeout + 30s */
    {"shutdown_timeout", CONF_TOP, 1, 1, conf_set_shutdown_timeout, "30s", 0},
    {"sweep_interval", CONF_TOP, 1, 1, conf_set_sweep_interval, "10s", 0},
    {"max_request_body", CONF_TOP, 1, 1, conf_set_max_request_body, "1m", 0},
    {"max_stored_body", CONF_TOP, 1, 1, conf_set_max_stored_body, "1m", 0},
    {"replay_cache", CONF_TOP, 1, 1, conf_set_replay_cache, "4m", CF_RESTART},
    {"store_unavailable", CONF_TOP, 1, 1, conf_set_store_unavailable, "fail-closed", 0},
    {"problem_base", CONF_TOP, 1, 1, conf_set_problem_base, CONF_PROBLEM_BASE_DEFAULT, 0},
    {"route", CONF_TOP, 1, 1, conf_open_route, NULL, CF_BLOCK | CF_REPEAT},
    {"match", CONF_ROUTE, 2, 2, conf_set_match, NULL, CF_REPEAT},
    {"actor", CONF_BOTH, 1, CONF_ARGS_ANY, conf_set_actor, NULL, 0},
    {"key", CONF_BOTH, 1, 1, conf_set_key, "required", 0},
    {"fingerprint", CONF_BOTH, 1, CONF_ARGS_ANY, conf_set_fingerprint, "json", 0},
    {"retention", CONF_BOTH, 1, 1, conf_set_retention, "24h", 0},
    {"release_on", CONF_BOTH, 1, CONF_ARGS_ANY, conf_set_release_on, "4xx 503", 0},
    {"unknown_on", CONF_BOTH, 1, CONF_ARGS_ANY, conf_set_unknown_on, "502 504", 0},
    {"store_headers", CONF_BOTH, 1, CONF_ARGS_ANY, conf_set_store_headers, NULL, 0},
    {"in_progress", CONF_BOTH, 1, 2, conf_set_in_progress, "reject", 0},
    {"recovery", CONF_BOTH, 1, 1, conf_set_recovery, "hold", 0},
};

#define CONF_NDIRECTIVES ((int)(sizeof(conf_directives) / sizeof(conf_directives[0])))

_Static_assert(sizeof(conf_directives) / sizeof(conf_directives[0]) <= CONF_DIRECTIVES_MAX,
	       "raise CONF_DIRECTIVES_MAX");

static const struct conf_directive *conf_directive_find(const char *name)
{
	int i;

	for (i = 0; i < CONF_NDIRECTIVES; i++) {
		if (strcmp(conf_directives[i].name, name) == 0)
			return &conf_directives[i];
	}
	return NULL;
}

/* The line where NAME was first set at top level, or 0. */
static int conf_top_line(const struct conf_parser *p, const char *name)
{
	return p->top_seen[conf_directive_find(name) - conf_directives];
}

/* ---- lexer ---- */

static int conf_blank(char c)
{
	return c == ' ' || c == '\t' || c == '\r';
}

static int conf_push_arg(struct conf_parser *p, char *arg, int quoted)
{
	char **argv;
	unsigned char *q;
	int cap;

	if (p->argc == p->argvcap) {
		cap = p->argvcap ? p->argvcap * 2 : 8;
		argv = realloc(p->argv, cap * sizeof(*argv));
		if (!argv)
			return conf_error(p, "out of memory");
		p->argv = argv;
		q = realloc(p->quoted, cap);
		if (!q)
			return conf_error(p, "out of memory");
		p->quoted = q;
		p->argvcap = cap;
	}
	p->argv[p->argc] = arg;
	p->quoted[p->argc] = (unsigned char)quoted;
	p->argc++;
	return 0;
}

static int conf_bad_char(struct conf_parser *p, unsigned char c)
{
	if ((c < 0x20 && c != '\t') || c == 0x7f)
		return conf_error(p, "invalid character 0x%02x", c);
	return 0;
}

/*
 * Split the line S (N bytes, no newline) into p->argv: blanks separate
 * arguments, "#" outside quotes starts a comment, a double-quoted argument
 * may hold blanks and "#" and the escapes \" and \\. Returns 0 or -1.
 */
static int conf_tokenize(struct conf_parser *p, const char *s, size_t n)
{
	size_t i = 0;
	char *out, *nbuf;
	unsigned char c;

	if (n + 1 > p->bufcap) {
		nbuf = realloc(p->buf, n + 1);
		if (!nbuf)
			return conf_error(p, "out of memory");
		p->buf = nbuf;
		p->bufcap = n + 1;
	}
	out = p->buf;
	p->argc = 0;
	while (i < n) {
		if (conf_blank(s[i])) {
			i++;
			continue;
		}
		if (s[i] == '#')
			break;
		if (conf_push_arg(p, out, s[i] == '"'))
			return -1;
		if (s[i] == '"') {
			for (i++;; i++) {
				if (i == n)
					return conf_error(p, "unterminated quoted argument");
				c = (unsigned char)s[i];
				if (c == '"')
					break;
				if (c == '\\') {
					if (++i == n)
						return conf_error(p,
								  "unterminated quoted argument");
					c = (unsigned char)s[i];
					if (c != '"' && c != '\\')
						return conf_error(
						    p, "invalid escape in quoted argument "
						       "(only \\\" and \\\\)");
				}
				if (conf_bad_char(p, c))
					return -1;
				*out++ = (char)c;
			}
			i++;
			if (i < n && !conf_blank(s[i]) && s[i] != '#')
				return conf_error(p,
						  "a quoted argument must be followed by a blank");
		} else {
			for (; i < n && !conf_blank(s[i]) && s[i] != '#'; i++) {
				c = (unsigned char)s[i];
				if (c == '"')
					return conf_error(p, "unexpected \" inside an argument "
							     "(quote the whole argument)");
				if (conf_bad_char(p, c))
					return -1;
				*out++ = (char)c;
			}
		}
		*out++ = '\0';
	}
	return 0;
}

/* ---- parser ---- */

static int conf_close_block(struct conf_parser *p)
{
	if (p->argc > 1)
		return conf_error(p, "\"}\" must be alone on its line");
	if (!p->route)
		return conf_error(p, "\"}\" without an open block");
	if (p->route->nmatches == 0)
		return conf_error_at(p, p->route->line, "route \"%s\" has no \"match\"",
				     p->route->operation);
	p->route = NULL;
	return 0;
}

static int conf_check_argc(struct conf_parser *p, const struct conf_directive *d, int argc)
{
	if (argc >= d->min_args && (d->max_args == CONF_ARGS_ANY || argc <= d->max_args))
		return 0;
	if (d->min_args == d->max_args)
		return conf_error(p, "\"%s\" needs %d argument%s", d->name, d->min_args,
				  d->min_args == 1 ? "" : "s");
	if (d->max_args == CONF_ARGS_ANY)
		return conf_error(p, "\"%s\" needs at least %d argument%s", d->name, d->min_args,
				  d->min_args == 1 ? "" : "s");
	return conf_error(p, "\"%s\" needs %d to %d arguments", d->name, d->min_args, d->max_args);
}

/* Apply the tokenized line in p->argv. Returns 0 or -1. */
static int conf_dispatch(struct conf_parser *p)
{
	const struct conf_directive *d;
	char **argv = p->argv;
	int argc = p->argc, block = 0, *seen, idx;

	if (argc == 0)
		return 0;
	if (!p->quoted[0] && strcmp(argv[0], "}") == 0)
		return conf_close_block(p);
	if (!p->quoted[0] && strcmp(argv[0], "{") == 0)
		return conf_error(p, "\"{\" must end the line that opens the block");
	d = conf_directive_find(argv[0]);
	if (!d)
		return conf_error(p, "unknown directive \"%s\"", argv[0]);
	if (argc > 1 && !p->quoted[argc - 1] && strcmp(argv[argc - 1], "{") == 0) {
		block = 1;
		argc--;
	}
	if (block && !(d->flags & CF_BLOCK))
		return conf_error(p, "\"%s\" cannot open a block", d->name);
	if (block && p->route)
		return conf_error(p,
				  "nested blocks are not allowed (\"route %s\" opened at line %d)",
				  p->route->operation, p->route->line);
	if (!block && (d->flags & CF_BLOCK))
		return conf_error(p, "\"%s\" must open a block: %s NAME {", d->name, d->name);
	if (p->route && !(d->where & CONF_ROUTE))
		return conf_error(p, "\"%s\" is not allowed inside a route block", d->name);
	if (!p->route && !(d->where & CONF_TOP))
		return conf_error(p, "\"%s\" is only allowed inside a route block", d->name);
	if (conf_check_argc(p, d, argc - 1))
		return -1;
	idx = (int)(d - conf_directives);
	seen = p->route ? p->route_seen : p->top_seen;
	if (seen[idx] && !(d->flags & CF_REPEAT))
		return conf_error(p, "duplicate directive \"%s\" (first set at line %d)", d->name,
				  seen[idx]);
	if (!seen[idx])
		seen[idx] = p->line;
	p->dir = d;
	return d->set(p, p->route ? p->route : &p->defaults, argc - 1, argv + 1);
}

/* Parse every directive's default: top-level ones into the conf, route ones
 * into p->builtin. */
static int conf_apply_defaults(struct conf_parser *p)
{
	const struct conf_directive *d;
	int i;

	for (i = 0; i < CONF_NDIRECTIVES; i++) {
		d = &conf_directives[i];
		if (!d->def)
			continue;
		if (conf_tokenize(p, d->def, strlen(d->def)))
			return -1;
		p->dir = d;
		if (d->set(p, &p->builtin, p->argc, p->argv))
			return -1;
	}
	return 0;
}

static int conf_read_lines(struct conf_parser *p, const char *text, size_t len)
{
	const char *nl;
	size_t pos = 0, end;

	while (pos < len) {
		nl = memchr(text + pos, '\n', len - pos);
		end = nl ? (size_t)(nl - text) : len;
		p->line++;
		if (conf_tokenize(p, text + pos, end - pos) || conf_dispatch(p))
			return -1;
		pos = end + 1;
	}
	if (p->line == 0)
		p->line = 1;
	if (p->route)
		return conf_error(p, "unterminated block \"route %s\" opened at line %d",
				  p->route->operation, p->route->line);
	return 0;
}

/* Copy into DST every route setting it lacks and SRC has. Returns 0 or -1. */
static int conf_route_inherit(struct conf_parser *p, struct route *dst, const struct route *src)
{
	int i;

	if (!dst->actor && src->actor) {
		dst->actor = src->actor;
		if (conf_set_str(p, &dst->actor_header, src->actor_header))
			return -1;
	}
	if (!dst->key)
		dst->key = src->key;
	if (!dst->fingerprint && src->fingerprint) {
		dst->fingerprint = src->fingerprint;
		if (src->nfields) {
			dst->fields = calloc(src->nfields, sizeof(*dst->fields));
			if (!dst->fields)
				return conf_error(p, "out of memory");
			for (; dst->nfields < src->nfields; dst->nfields++) {
				i = dst->nfields;
				dst->fields[i].transform = src->fields[i].transform;
				if (conf_set_str(p, &dst->fields[i].path, src->fields[i].path))
					return -1;
			}
		}
	}
	if (!dst->retention_ms)
		dst->retention_ms = src->retention_ms;
	if (!dst->release_on.set)
		dst->release_on = src->release_on;
	if (!dst->unknown_on.set)
		dst->unknown_on = src->unknown_on;
	if (!dst->nstore_headers && src->nstore_headers) {
		dst->store_headers = calloc(src->nstore_headers, sizeof(*dst->store_headers));
		if (!dst->store_headers)
			return conf_error(p, "out of memory");
		for (; dst->nstore_headers < src->nstore_headers; dst->nstore_headers++) {
			i = dst->nstore_headers;
			if (conf_set_str(p, &dst->store_headers[i], src->store_headers[i]))
				return -1;
		}
	}
	if (!dst->in_progress) {
		dst->in_progress = src->in_progress;
		dst->in_progress_wait_ms = src->in_progress_wait_ms;
	}
	if (!dst->recovery)
		dst->recovery = src->recovery;
	return 0;
}

/* Give R its inherited settings and check what only the whole file decides. */
static int conf_finish_route(struct conf_parser *p, struct route *r)
{
	int st;

	if (conf_route_inherit(p, r, &p->defaults) || conf_route_inherit(p, r, &p->builtin))
		return -1;
	if (!r->actor)
		return conf_error_at(p, r->line,
				     "route \"%s\" has no actor source (set \"actor\" in the "
				     "route or at top level)",
				     r->operation);
	for (st = CONF_STATUS_MIN; st <= CONF_STATUS_MAX; st++) {
		if (status_set_has(&r->release_on, st) && status_set_has(&r->unknown_on, st))
			return conf_error_at(p, r->line,
					     "route \"%s\": status %d is in both \"release_on\" "
					     "and \"unknown_on\"",
					     r->operation, st);
	}
	return 0;
}

static int conf_finish(struct conf_parser *p)
{
	struct conf *c = p->conf;
	int i;

	if (!c->upstream_url)
		return conf_error(p, "\"upstream\" is required");
	if (!c->lease_ms)
		c->lease_ms = c->upstream_timeout_ms + CONF_LEASE_MARGIN_MS;
	else if (c->lease_ms <= c->upstream_timeout_ms)
		return conf_error_at(p, conf_top_line(p, "lease"),
				     "\"lease\" (%lldms) must be longer than \"upstream_timeout\" "
				     "(%lldms)",
				     (long long)c->lease_ms, (long long)c->upstream_timeout_ms);
	if (c->admin_host && c->admin_port == c->listen_port &&
	    strcmp(c->admin_host, c->listen_host) == 0)
		return conf_error_at(p, conf_top_line(p, "admin"),
				     "\"admin\" and \"listen\" use the same address");
	for (i = 0; i < c->nroutes; i++) {
		if (conf_finish_route(p, &c->routes[i]))
			return -1;
	}
	return 0;
}

int conf_parse(const char *name, const char *text, size_t len, struct conf **out, char *err,
	       size_t errlen)
{
	struct conf_parser p;
	int rc = -1;

	memset(&p, 0, sizeof(p));
	p.name = name;
	p.err = err;
	p.errlen = errlen;
	p.conf = calloc(1, sizeof(*p.conf));
	if (!p.conf) {
		conf_error(&p, "out of memory");
		goto out;
	}
	if (conf_set_str(&p, &p.conf->file, name) || conf_apply_defaults(&p) ||
	    conf_read_lines(&p, text, len) || conf_finish(&p))
		goto out;
	*out = p.conf;
	p.conf = NULL;
	rc = 0;
out:
	conf_free(p.conf);
	conf_route_clear(&p.defaults);
	conf_route_clear(&p.builtin);
	free(p.buf);
	free(p.argv);
	free(p.quoted);
	return rc;
}

int conf_load(const char *file, struct conf **out, char *err, size_t errlen)
{
	FILE *f;
	char *text = NULL;
	size_t len;
	int rc = -1;

	f = fopen(file, "r");
	if (!f) {
		snprintf(err, errlen, "%s:1: cannot open: %s", file, strerror(errno));
		goto out;
	}
	text = malloc(CONF_FILE_MAX + 1);
	if (!text) {
		snprintf(err, errlen, "%s:1: out of memory", file);
		goto out;
	}
	len = fread(text, 1, CONF_FILE_MAX + 1, f);
	if (ferror(f)) {
		snprintf(err, errlen, "%s:1: cannot read: %s", file, strerror(errno));
		goto out;
	}
	if (len > CONF_FILE_MAX) {
		snprintf(err, errlen, "%s:1: file is larger than %d bytes", file, CONF_FILE_MAX);
		goto out;
	}
	rc = conf_parse(file, text, len, out, err, errlen);
out:
	if (f)
		fclose(f);
	free(text);
	return rc;
}

void conf_free(struct conf *conf)
{
	int i;

	if (!conf)
		return;
	free(conf->file);
	free(conf->listen_host);
	free(conf->upstream_url);
	free(conf->upstream_host);
	free(conf->upstream_hostport);
	free(conf->database);
	free(conf->admin_host);
	free(conf->key_header);
	free(conf->problem_base);
	for (i = 0; i < conf->nroutes; i++)
		conf_route_clear(&conf->routes[i]);
	free(conf->routes);
	free(conf);
}

static int conf_str_differs(const char *a, const char *b)
{
	if (!a || !b)
		return a != b;
	return strcmp(a, b) != 0;
}

const char *conf_restart_only_change(const struct conf *old, const struct conf *new)
{
	if (conf_str_differs(old->listen_host, new->listen_host) ||
	    old->listen_port != new->listen_port)
		return "listen";
	if (old->workers != new->workers)
		return "workers";
	if (conf_str_differs(old->admin_host, new->admin_host) || old->admin_port != new->admin_port)
		return "admin";
	if (conf_str_differs(old->upstream_url, new->upstream_url))
		return "upstream";
	if (conf_str_differs(old->database, new->database))
		return "database";
	if (old->store_timeout_ms != new->store_timeout_ms)
		return "store_timeout";
	if (old->replay_cache != new->replay_cache)
		return "replay_cache";
	return NULL;
}
