/*
 * The configuration directives that have setters of their own (the typed
 * ones are parsed by conf.c's conf_set_typed): top-level ones, then route
 * ones, each named by its row of conf_directives[].
 */
#include "conf/parser.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <errno.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "conf/conf.h"
#include "conf/table.h"
#include "http/grpc.h"
#include "http/header.h"

#define CONF_OPERATION_MAX 128
#define CONF_PROTOCOL_MAX 64 /* an Upgrade protocol's name */
#define CONF_WORKERS_MAX 256
#define CONF_CONNECTIONS_MAX 1000000
/* HTTP/2 streams per connection: nghttp2 takes any 31-bit count; more than this is no sidecar's. */
#define CONF_H2_STREAMS_MAX 65536
#define CONF_HOSTNAME_MAX 253
#define CONF_HTTP_DEFAULT_PORT 80
#define CONF_HTTPS_DEFAULT_PORT 443
#define CONF_JWT_LEEWAY_DEFAULT_MS 30000

/* upstream_client_certificate CERT KEY */
int conf_set_client_cert(struct conf_parser *p, struct route *r, int argc, char **argv)
{
	if (conf_set_file(p, &p->conf->upstream_client_cert, argv[0]))
		return -1;
	return conf_set_file(p, &p->conf->upstream_client_key, argv[1]);
}

/* Whether S is an Upgrade protocol (RFC 9110 7.8): a token, optionally "/" and a token. */
static int conf_is_protocol(const char *s)
{
	const char *slash = strchr(s, '/');
	char name[CONF_PROTOCOL_MAX + 1];
	size_t n = slash ? (size_t)(slash - s) : strlen(s);

	if (n == 0 || n > CONF_PROTOCOL_MAX)
		return 0;
	memcpy(name, s, n);
	name[n] = '\0';
	return conf_is_token(name) && (!slash || conf_is_token(slash + 1));
}

/* ---- top-level directives ---- */

/*
 * resolver ADDRESS[:PORT]...: numeric DNS servers ("a.b.c.d", "::1",
 * "a.b.c.d:port" or "[ipv6]:port"), kept as one space-separated string,
 * the form evdns_base_nameserver_ip_add takes one at a time.
 */
int conf_set_resolver(struct conf_parser *p, struct route *r, int argc, char **argv)
{
	unsigned char bin[sizeof(struct in6_addr)];
	struct conf_addr a = {0};
	size_t len = 0;
	char *joined;

	for (int i = 0; i < argc; i++) {
		if (inet_pton(AF_INET, argv[i], bin) != 1 && inet_pton(AF_INET6, argv[i], bin) != 1) {
			if (conf_parse_addr(p, argv[i], &a) < 0)
				return conf_error(p, "invalid resolver \"%s\" (expected a numeric "
						     "address: \"a.b.c.d[:port]\" or \"[ipv6][:port]\")",
						  argv[i]);
			free(a.host);
			a.host = NULL;
		}
		len += strlen(argv[i]) + 1;
	}
	joined = malloc(len);
	if (!joined)
		return conf_error(p, "out of memory");
	len = 0;
	for (int i = 0; i < argc; i++) {
		size_t n = strlen(argv[i]);

		memcpy(joined + len, argv[i], n);
		len += n;
		joined[len++] = i + 1 < argc ? ' ' : '\0';
	}
	free(p->conf->resolver);
	p->conf->resolver = joined;
	return 0;
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
 * upstream http[s]://HOST[:PORT][/] or h2c://HOST[:PORT][/] (cleartext
 * HTTP/2 with prior knowledge, port 80 by default): HOST is a name, an IPv4
 * address or a bracketed IPv6 address.
 */
int conf_set_upstream(struct conf_parser *p, struct route *r, int argc, char **argv)
{
	struct conf *c = p->conf;
	const char *url = argv[0], *auth, *end, *host, *host_end, *port = NULL;
	unsigned char bin[sizeof(struct in6_addr)];
	char addr[INET6_ADDRSTRLEN];
	int n;

	c->upstream_tls = 0;
	c->upstream_h2c = 0;
	if (strncasecmp(url, "https://", 8) == 0) {
		c->upstream_tls = 1;
		n = CONF_HTTPS_DEFAULT_PORT;
		auth = url + 8;
	} else if (strncasecmp(url, "http://", 7) == 0) {
		n = CONF_HTTP_DEFAULT_PORT;
		auth = url + 7;
	} else if (strncasecmp(url, "h2c://", 6) == 0) {
		c->upstream_h2c = 1;
		n = CONF_HTTP_DEFAULT_PORT;
		auth = url + 6;
	} else {
		return conf_error(p, "invalid upstream \"%s\" (expected http[s]://HOST[:PORT] or "
				     "h2c://HOST[:PORT])",
				  url);
	}
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

int conf_set_workers(struct conf_parser *p, struct route *r, int argc, char **argv)
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

int conf_set_max_connections(struct conf_parser *p, struct route *r, int argc, char **argv)
{
	if (conf_parse_int(argv[0], 1, CONF_CONNECTIONS_MAX, &p->conf->max_connections))
		return conf_error(p, "invalid max_connections \"%s\" (1-%d)", argv[0],
				  CONF_CONNECTIONS_MAX);
	return 0;
}

/* "off" or 0, or a count from 1 to max, into *out (off: 0). */
static int conf_owners_arg(const char *arg, int max, int *out)
{
	if (strcmp(arg, "off") == 0) {
		*out = 0;
		return 0;
	}
	return conf_parse_int(arg, 0, max, out);
}

int conf_set_max_owners(struct conf_parser *p, struct route *r, int argc, char **argv)
{
	if (conf_owners_arg(argv[0], CONF_CONNECTIONS_MAX, &p->conf->max_owners))
		return conf_error(p, "invalid max_owners \"%s\" (off, or 0-%d; 0 is off)", argv[0],
				  CONF_CONNECTIONS_MAX);
	return 0;
}

/* actor_max_owners off|N: kept as -1 for off, so that a route's off wins over the top's N. */
int conf_set_actor_max_owners(struct conf_parser *p, struct route *r, int argc,
				     char **argv)
{
	int n;

	if (conf_owners_arg(argv[0], CONF_CONNECTIONS_MAX, &n))
		return conf_error(p, "invalid actor_max_owners \"%s\" (off, or 0-%d; 0 is off)",
				  argv[0], CONF_CONNECTIONS_MAX);
	r->actor_max_owners = n ? n : -1;
	return 0;
}

/* 1 for a header idemproxy itself writes or drops on the way upstream: Host,
 * the hop-by-hop ones, the rebuilt ones (framing, forwarding) and its markers. */
static int conf_header_reserved(const char *name)
{
	return strcasecmp(name, "Host") == 0 ||
	       (header_flags(name, strlen(name)) & (HEADER_HOP | HEADER_MARKER | HEADER_REBUILT));
}

/* forward_key off | HEADER [scoped|raw]. */
int conf_set_forward_key(struct conf_parser *p, struct route *r, int argc, char **argv)
{
	if (strcmp(argv[0], "off") == 0) {
		if (argc != 1)
			return conf_error(p, "\"forward_key off\" takes no arguments");
		r->forward_key = FORWARD_KEY_OFF;
		return conf_set_str(p, &r->forward_key_header, NULL);
	}
	if (!conf_is_token(argv[0]))
		return conf_error(p, "invalid header name \"%s\"", argv[0]);
	if (conf_header_reserved(argv[0]))
		return conf_error(p, "forward_key cannot set \"%s\": idemproxy writes that header "
				     "itself",
				  argv[0]);
	if (argc == 1 || strcmp(argv[1], "scoped") == 0)
		r->forward_key = FORWARD_KEY_SCOPED;
	else if (strcmp(argv[1], "raw") == 0)
		r->forward_key = FORWARD_KEY_RAW;
	else
		return conf_error(p, "invalid forward_key mode \"%s\" (scoped or raw)", argv[1]);
	return conf_set_str(p, &r->forward_key_header, argv[0]);
}

int conf_set_h2_streams(struct conf_parser *p, struct route *r, int argc, char **argv)
{
	if (conf_parse_int(argv[0], 1, CONF_H2_STREAMS_MAX, &p->conf->http2_max_concurrent_streams))
		return conf_error(p, "invalid http2_max_concurrent_streams \"%s\" (1-%d)", argv[0],
				  CONF_H2_STREAMS_MAX);
	return 0;
}

/* One CIDR block ("10.0.0.0/8", "::1", "fd00::/8") into *out. Returns 0 or -1. */
static int conf_parse_cidr(const char *s, struct conf_cidr *out)
{
	char host[INET6_ADDRSTRLEN];
	const char *slash = strchr(s, '/');
	size_t len = slash ? (size_t)(slash - s) : strlen(s);
	int max, bits;

	if (len == 0 || len >= sizeof(host))
		return -1;
	memcpy(host, s, len);
	host[len] = '\0';
	memset(out, 0, sizeof(*out));
	if (inet_pton(AF_INET, host, out->addr) == 1) {
		out->family = AF_INET;
		max = 32;
	} else if (inet_pton(AF_INET6, host, out->addr) == 1) {
		out->family = AF_INET6;
		max = 128;
	} else {
		return -1;
	}
	bits = max;
	if (slash && conf_parse_int(slash + 1, 0, max, &bits))
		return -1;
	/* The bits past the prefix must be zero: 10.1.2.3/8 is most likely a typo. */
	for (int i = bits; i < max; i++) {
		if (out->addr[i / 8] & (0x80 >> (i % 8)))
			return -1;
	}
	out->bits = bits;
	return 0;
}

/* trusted_proxies CIDR...: peers whose X-Forwarded-* and Forwarded headers are kept. */
int conf_set_trusted_proxies(struct conf_parser *p, struct route *r, int argc, char **argv)
{
	struct conf *c = p->conf;

	free(c->trusted_proxies);
	c->ntrusted_proxies = 0;
	c->trusted_proxies = calloc((size_t)argc, sizeof(*c->trusted_proxies));
	if (!c->trusted_proxies)
		return conf_error(p, "out of memory");
	for (int i = 0; i < argc; i++) {
		if (conf_parse_cidr(argv[i], &c->trusted_proxies[i]))
			return conf_error(p,
					  "invalid trusted_proxies block \"%s\" (an IPv4 or IPv6 "
					  "address, /BITS optional, with no bits set past the prefix)",
					  argv[i]);
		c->ntrusted_proxies++;
	}
	return 0;
}

/* problem_base is a URI prefix placed into JSON: visible ASCII only. */
int conf_set_problem_base(struct conf_parser *p, struct route *r, int argc, char **argv)
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

/* contract_url: an absolute http(s) URL that can stand in a Link header. */
int conf_set_contract_url(struct conf_parser *p, struct route *r, int argc, char **argv)
{
	const unsigned char *c = (const unsigned char *)argv[0];

	if (strncmp(argv[0], "https://", 8) != 0 && strncmp(argv[0], "http://", 7) != 0)
		return conf_error(p, "\"contract_url\" must be an http:// or https:// URL");
	for (; *c; c++) {
		if (*c <= 0x20 || *c >= 0x7f || *c == '"' || *c == '<' || *c == '>' || *c == '\\')
			return conf_error(p, "invalid contract_url \"%s\"", argv[0]);
	}
	return conf_set_str(p, &p->conf->contract_url, argv[0]);
}

/* contract_server: the base URL clients reach the API at, the OpenAPI
 * document's servers; an absolute http(s) URL without a query or fragment. */
int conf_set_contract_server(struct conf_parser *p, struct route *r, int argc, char **argv)
{
	const char *u = argv[0];
	size_t scheme = strncmp(u, "https://", 8) == 0 ? 8 : strncmp(u, "http://", 7) == 0 ? 7 : 0;

	if (!scheme)
		return conf_error(p, "\"contract_server\" must be an http:// or https:// URL");
	if (u[scheme] == '\0' || u[scheme] == '/')
		return conf_error(p, "contract_server \"%s\" has no host", u);
	for (const unsigned char *c = (const unsigned char *)u; *c; c++) {
		if (*c <= 0x20 || *c >= 0x7f || *c == '"' || *c == '<' || *c == '>' || *c == '\\' ||
		    *c == '?' || *c == '#' || *c == '{' || *c == '}')
			return conf_error(p, "invalid contract_server \"%s\"", u);
	}
	return conf_set_str(p, &p->conf->contract_server, u);
}

/* ---- route directives ---- */

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
int conf_open_route(struct conf_parser *p, struct route *r, int argc, char **argv)
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
int conf_set_match(struct conf_parser *p, struct route *r, int argc, char **argv)
{
	struct route_match *matches, *m;
	char reason[CONF_ERR_MAX];
	char *c;

	for (c = argv[0]; *c; c++) {
		if (!((*c >= 'A' && *c <= 'Z') || (*c >= 'a' && *c <= 'z') || *c == '-' || *c == '_'))
			return conf_error(p,
					  "invalid method \"%s\" (letters, \"-\" and \"_\": requests "
					  "with any other method are refused)",
					  argv[0]);
	}
	if (!*argv[0])
		return conf_error(p, "invalid method \"\"");
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

/*
 * The options of "actor jwt KEYFILE [issuer=ISS] [audience=AUD] [claim=NAME]
 * [leeway=DUR] [header=NAME] [require=exp]", each at most once.
 */
static int conf_set_jwt_options(struct conf_parser *p, struct route *r, int argc, char **argv)
{
	static const char *const names[] = {"issuer", "audience", "claim",
					    "leeway", "header",	  "require"};
	enum { NAMES = sizeof(names) / sizeof(names[0]) };
	int seen[NAMES] = {0}, i, k;

	for (i = 2; i < argc; i++) {
		const char *eq = strchr(argv[i], '='), *v = eq ? eq + 1 : NULL;

		for (k = 0; k < NAMES; k++) {
			if (eq && (size_t)(eq - argv[i]) == strlen(names[k]) &&
			    strncmp(argv[i], names[k], eq - argv[i]) == 0)
				break;
		}
		if (k == NAMES)
			return conf_error(p, "unknown \"actor jwt\" option \"%s\" (issuer=, audience=, "
					     "claim=, leeway=, header= or require=)", argv[i]);
		if (seen[k]++)
			return conf_error(p, "\"actor jwt\" option \"%s\" given twice", names[k]);
		if (*v == '\0')
			return conf_error(p, "\"actor jwt\" option \"%s\" needs a value", names[k]);
		switch (k) {
		case 0:
			if (conf_set_str(p, &r->jwt_issuer, v))
				return -1;
			break;
		case 1:
			if (conf_set_str(p, &r->jwt_audience, v))
				return -1;
			break;
		case 2:
			if (conf_set_str(p, &r->jwt_claim, v))
				return -1;
			break;
		case 3:
			if (conf_duration_arg(p, v, &r->jwt_leeway_ms))
				return -1;
			break;
		case 5:
			if (strcmp(v, "exp") != 0)
				return conf_error(p, "\"actor jwt\" option require= takes \"exp\", not "
						     "\"%s\"", v);
			r->jwt_require_exp = 1;
			break;
		default:
			if (!conf_is_token(v))
				return conf_error(p, "invalid header name \"%s\"", v);
			if (conf_set_str(p, &r->actor_header, v))
				return -1;
			break;
		}
	}
	return 0;
}

/* actor header NAME | actor anonymous | actor authorization | actor jwt KEYFILE [OPTION=VALUE...] */
int conf_set_actor(struct conf_parser *p, struct route *r, int argc, char **argv)
{
	if (strcmp(argv[0], "header") == 0) {
		if (argc != 2)
			return conf_error(p, "\"actor header\" needs 1 header name");
		if (!conf_is_token(argv[1]))
			return conf_error(p, "invalid header name \"%s\"", argv[1]);
		r->actor = ACTOR_HEADER;
		return conf_set_str(p, &r->actor_header, argv[1]);
	}
	if (strcmp(argv[0], "anonymous") == 0 || strcmp(argv[0], "authorization") == 0) {
		if (argc != 1)
			return conf_error(p, "\"actor %s\" takes no arguments", argv[0]);
		r->actor = argv[0][0] == 'a' && argv[0][1] == 'n' ? ACTOR_ANONYMOUS
								 : ACTOR_AUTHORIZATION;
		return 0;
	}
	if (strcmp(argv[0], "jwt") == 0) {
		if (argc < 2)
			return conf_error(p, "\"actor jwt\" needs a key file (a JWKS document)");
		r->actor = ACTOR_JWT;
		r->jwt_leeway_ms = CONF_JWT_LEEWAY_DEFAULT_MS;
		if (conf_set_file(p, &r->jwt_keys, argv[1]) || conf_set_str(p, &r->jwt_claim, "sub"))
			return -1;
		return conf_set_jwt_options(p, r, argc, argv);
	}
	return conf_error(p, "unknown actor source \"%s\" (header, jwt, authorization or anonymous)",
			  argv[0]);
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
int conf_set_fingerprint(struct conf_parser *p, struct route *r, int argc, char **argv)
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

/* store_headers: names a record may keep, so none the header-policy table says no record keeps. */
int conf_set_store_headers(struct conf_parser *p, struct route *r, int argc, char **argv)
{
	const struct header_policy *row;
	int i;

	r->store_headers = calloc(argc, sizeof(*r->store_headers));
	if (!r->store_headers)
		return conf_error(p, "out of memory");
	for (i = 0; i < argc; i++) {
		if (!conf_is_token(argv[i]))
			return conf_error(p, "invalid header name \"%s\"", argv[i]);
		row = header_policy(argv[i], strlen(argv[i]));
		if (row && (row->flags & HEADER_NEVER_STORED))
			return conf_error(p, "header \"%s\" is never stored (%s)", argv[i], row->why);
		if (conf_set_str(p, &r->store_headers[i], argv[i]))
			return -1;
		r->nstore_headers++;
	}
	return 0;
}

/*
 * tunnel_upgrades PROTOCOL...: the protocols a pass-through upgrade may
 * switch to (names compared case-insensitively, a "/version" kept). h2c is
 * never one: HTTP/2 by upgrade is gone from HTTP/2 (RFC 9113), and a
 * tunnelled h2c connection would carry requests past enforcement.
 */
int conf_set_tunnel_upgrades(struct conf_parser *p, struct route *r, int argc, char **argv)
{
	struct conf *c = p->conf;
	char **list = calloc(argc, sizeof(*list));
	int i;

	if (!list)
		return conf_error(p, "out of memory");
	conf_free_names(c->tunnel_upgrades, c->ntunnel_upgrades);
	c->tunnel_upgrades = list;
	c->ntunnel_upgrades = 0;
	for (i = 0; i < argc; i++) {
		if (!conf_is_protocol(argv[i]))
			return conf_error(p, "invalid protocol \"%s\" (a token, optionally /VERSION)",
					  argv[i]);
		if (strncasecmp(argv[i], "h2c", 3) == 0 && (!argv[i][3] || argv[i][3] == '/'))
			return conf_error(p, "protocol \"%s\" is never tunnelled (HTTP/2 by upgrade "
					     "would carry requests past enforcement)",
					  argv[i]);
		if (conf_set_str(p, &list[i], argv[i]))
			return -1;
		c->ntunnel_upgrades++;
	}
	return 0;
}

/* key_from header NAME | json PATH | query NAME */
int conf_set_key_from(struct conf_parser *p, struct route *r, int argc, char **argv)
{
	const char *c;

	if (strcmp(argv[0], "header") == 0) {
		if (!conf_is_token(argv[1]))
			return conf_error(p, "invalid header name \"%s\"", argv[1]);
		r->key_from = KEY_FROM_HEADER;
	} else if (strcmp(argv[0], "query") == 0) {
		for (c = argv[1]; *c; c++)
			if (*c <= 0x20 || *c >= 0x7f || *c == '&' || *c == '=' || *c == '#')
				break;
		if (!*argv[1] || *c)
			return conf_error(p, "invalid query parameter name \"%s\"", argv[1]);
		r->key_from = KEY_FROM_QUERY;
	} else if (strcmp(argv[0], "json") == 0) {
		if (!*argv[1] || argv[1][0] == '.' || argv[1][strlen(argv[1]) - 1] == '.' ||
		    strstr(argv[1], ".."))
			return conf_error(p, "invalid JSON path \"%s\" (names separated by \".\")",
					  argv[1]);
		r->key_from = KEY_FROM_JSON;
	} else {
		return conf_error(p, "\"key_from\" takes header NAME, json PATH or query NAME");
	}
	return conf_set_str(p, &r->key_from_name, argv[1]);
}

/*
 * operation_from json PATH | jsonrpc [PATH] | graphql: the scope's operation
 * is the route's name, ":" and the string at PATH of the JSON body (jsonrpc:
 * "method" unless PATH is given), or the GraphQL mutation's name. PATH is a
 * dot path as key_from json and fingerprint json take.
 */
int conf_set_operation_from(struct conf_parser *p, struct route *r, int argc, char **argv)
{
	const char *path = argc > 1 ? argv[1] : NULL;

	if (strcmp(argv[0], "graphql") == 0) {
		if (path)
			return conf_error(p, "\"operation_from graphql\" takes no path");
		r->operation_from = OPFROM_GRAPHQL;
		return 0;
	}
	if (strcmp(argv[0], "json") == 0) {
		if (!path)
			return conf_error(p, "\"operation_from json\" needs a JSON path (e.g. "
					     "action or params.name)");
		r->operation_from = OPFROM_JSON;
	} else if (strcmp(argv[0], "jsonrpc") == 0) {
		r->operation_from = OPFROM_JSONRPC;
		if (!path)
			path = "method";
	} else {
		return conf_error(p, "\"operation_from\" takes json PATH, jsonrpc [PATH] or "
				     "graphql");
	}
	if (!*path || path[0] == '.' || path[strlen(path) - 1] == '.' || strstr(path, ".."))
		return conf_error(p, "invalid JSON path \"%s\" (names separated by \".\")", path);
	return conf_set_str(p, &r->operation_path, path);
}

/* fingerprint_headers NAME...: request headers whose values join the fingerprint. */
int conf_set_fp_headers(struct conf_parser *p, struct route *r, int argc, char **argv)
{
	r->fp_headers = calloc(argc, sizeof(*r->fp_headers));
	if (!r->fp_headers)
		return conf_error(p, "out of memory");
	for (int i = 0; i < argc; i++) {
		if (!conf_is_token(argv[i]))
			return conf_error(p, "invalid header name \"%s\"", argv[i]);
		if (conf_set_str(p, &r->fp_headers[i], argv[i]))
			return -1;
		r->nfp_headers++;
	}
	return 0;
}

int conf_set_in_progress(struct conf_parser *p, struct route *r, int argc, char **argv)
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

/* expired_keys run | refuse DURATION. */
int conf_set_expired_keys(struct conf_parser *p, struct route *r, int argc, char **argv)
{
	if (strcmp(argv[0], "refuse") == 0) {
		if (argc != 2)
			return conf_error(p, "\"expired_keys refuse\" takes a duration");
		r->expired_keys = EXPIRED_KEYS_REFUSE;
		return conf_duration_arg(p, argv[1], &r->expired_keys_ms);
	}
	if (strcmp(argv[0], "run") != 0)
		return conf_error(p, "invalid expired_keys \"%s\" (run or refuse DUR)", argv[0]);
	if (argc != 1)
		return conf_error(p, "\"expired_keys run\" takes no arguments");
	r->expired_keys = EXPIRED_KEYS_RUN;
	return 0;
}

/* actor_max_records N (0: no quota). */
int conf_set_actor_max_records(struct conf_parser *p, struct route *r, int argc,
				      char **argv)
{
	int n;

	if (conf_parse_int(argv[0], 0, INT_MAX, &n))
		return conf_error(p, "invalid actor_max_records \"%s\" (0-%d)", argv[0], INT_MAX);
	p->conf->actor_max_records = n;
	return 0;
}

/* grpc streaming record|pass. */
int conf_set_grpc(struct conf_parser *p, struct route *r, int argc, char **argv)
{
	if (argc != 2 || strcmp(argv[0], "streaming") != 0)
		return conf_error(p, "\"grpc\" takes \"streaming record\" or \"streaming pass\"");
	if (strcmp(argv[1], "record") == 0)
		r->grpc_streaming = GRPC_STREAMING_RECORD;
	else if (strcmp(argv[1], "pass") == 0)
		r->grpc_streaming = GRPC_STREAMING_PASS;
	else
		return conf_error(p, "invalid grpc streaming \"%s\" (record or pass)", argv[1]);
	return 0;
}

