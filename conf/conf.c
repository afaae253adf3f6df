/*
 * Configuration file: lexer, directive table, parser and validation (the
 * directives with setters of their own are in directives.c).
 *
 * Every directive is one row of conf_directives[]: where it may appear, how
 * many arguments it takes, the type of its value and the field it fills,
 * its default and whether a reload may change it. A typed directive is
 * parsed by its type's setter; the others name a setter of their own.
 * Defaults are strings parsed by the same setter as the file, before the
 * file, so the table is the one place that states them; the reload check
 * compares the fields of the restart-only rows, so it cannot miss one.
 * Route directives given at top level are collected in a route of their
 * own and inherited, after the whole file is read, by every route that does
 * not set them.
 */
#include "conf/conf.h"
#include "conf/parser.h"
#include "conf/table.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "http/grpc.h"

#define CONF_FILE_MAX		  (1024 * 1024)
#define CONF_ARGS_ANY		  (-1)
#define CONF_LEASE_MARGIN_MS	  (30 * 1000)
#define CONF_PROBLEM_BASE_DEFAULT "https://idemproxy.dev/problems/"
/* Mozilla's "intermediate" TLS 1.2 suites (guidelines 6.0): ECDHE, AEAD only. */
#define CONF_TLS_CIPHERS_DEFAULT                                                                   \
	"ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:"                               \
	"ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-RSA-AES256-GCM-SHA384:"                               \
	"ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-CHACHA20-POLY1305"

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
	free(r->jwt_keys.path);
	free(r->jwt_issuer);
	free(r->jwt_audience);
	free(r->jwt_claim);
	for (i = 0; i < r->nfields; i++)
		free(r->fields[i].path);
	free(r->fields);
	conf_free_names(r->store_headers, r->nstore_headers);
	free(r->key_from_name);
	conf_free_names(r->fp_headers, r->nfp_headers);
	free(r->forward_key_header);
	free(r->operation_path);
	memset(r, 0, sizeof(*r));
}

/* ---- typed directives ---- */

/* "choice1, choice2 or choice3" */
static void conf_choice_list(const struct conf_choice *c, char *buf, size_t len)
{
	size_t n = 0;

	buf[0] = '\0';
	for (int i = 0; c[i].word && n < len; i++)
		n += (size_t)snprintf(buf + n, len - n, "%s%s", i == 0 ? "" : c[i + 1].word ? ", " : " or ",
				      c[i].word);
}

static int conf_enum_arg(struct conf_parser *p, const char *s, int *out)
{
	const struct conf_directive *d = p->dir;
	char list[CONF_ERR_MAX / 2];

	for (int i = 0; d->choices[i].word; i++) {
		if (strcmp(s, d->choices[i].word) == 0) {
			*out = d->choices[i].value;
			return 0;
		}
	}
	conf_choice_list(d->choices, list, sizeof(list));
	return conf_error(p, "invalid %s \"%s\" (%s)", d->what ? d->what : d->name, s, list);
}

/* The field the current directive fills: in *p->conf at top level, else in r. */
static void *conf_field(struct conf_parser *p, struct route *r)
{
	char *base = p->dir->where & CONF_ROUTE ? (char *)r : (char *)p->conf;

	return base + p->dir->offset;
}

/* The setter of every directive whose type says how to read its value. */
static int conf_set_typed(struct conf_parser *p, struct route *r, int argc, char **argv)
{
	const struct conf_directive *d = p->dir;
	void *field = conf_field(p, r);

	if ((d->flags & CF_OFF) && strcmp(argv[0], "off") == 0) {
		if (d->type == CT_ADDR)
			return conf_set_str(p, &((struct conf_addr *)field)->host, NULL);
		*(int64_t *)field = 0;
		return 0;
	}
	switch (d->type) {
	case CT_STRING:
		return conf_set_str(p, field, argv[0]);
	case CT_TOKEN:
		if (!conf_is_token(argv[0]))
			return conf_error(p, "invalid header name \"%s\"", argv[0]);
		return conf_set_str(p, field, argv[0]);
	case CT_DURATION:
		return conf_duration_arg(p, argv[0], field);
	case CT_SIZE:
		if (conf_size_arg(p, argv[0], field))
			return -1;
		if ((d->flags & CF_NONZERO) && *(size_t *)field == 0)
			return conf_error(p, "\"%s\" must be greater than 0", d->name);
		return 0;
	case CT_ENUM:
		return conf_enum_arg(p, argv[0], field);
	case CT_ADDR:
		return conf_parse_addr(p, argv[0], field);
	case CT_STATUSES:
		return conf_status_set(p, field, argc, argv, d->flags);
	case CT_FILE:
		return conf_set_file(p, field, argv[0]);
	case CT_INT:
	case CT_CUSTOM:
		break;
	}
	return conf_error(p, "\"%s\" has no setter", d->name);
}

static const struct conf_choice conf_mismatch_statuses[] = {{"422", 422}, {"409", 409}, {NULL, 0}};
static const struct conf_choice conf_prepared_modes[] = {
    {"auto", PREPARED_AUTO}, {"on", PREPARED_ON}, {"off", PREPARED_OFF}, {NULL, 0}};
static const struct conf_choice conf_store_modes[] = {
    {"fail-closed", STORE_FAIL_CLOSED}, {"fail-open", STORE_FAIL_OPEN}, {NULL, 0}};
static const struct conf_choice conf_key_modes[] = {
    {"required", KEY_REQUIRED}, {"optional", KEY_OPTIONAL}, {NULL, 0}};
static const struct conf_choice conf_recovery_modes[] = {
    {"hold", RECOVERY_HOLD}, {"forward", RECOVERY_FORWARD}, {NULL, 0}};
static const struct conf_choice conf_errors_modes[] = {
    {"problem", ERRORS_PROBLEM}, {"stripe", ERRORS_STRIPE}, {NULL, 0}};
static const struct conf_choice conf_log_levels[] = {
    {"debug", CONF_LOG_DEBUG}, {"info", CONF_LOG_INFO}, {"warn", CONF_LOG_WARN},
    {"error", CONF_LOG_ERROR}, {NULL, 0}};
static const struct conf_choice conf_on_off[] = {{"off", 0}, {"on", 1}, {NULL, 0}};
static const struct conf_choice conf_match_cases[] = {
    {"insensitive", MATCH_CASE_INSENSITIVE}, {"sensitive", MATCH_CASE_SENSITIVE}, {NULL, 0}};

#define TOP(field)   offsetof(struct conf, field)
#define ROUTE(field) offsetof(struct route, field)

/* A row: name, where, arguments (min, max), type, field, setter (NULL: the type's), default, flags. */
#define CONF_ROW(n, w, min, max, t, off, s, d, f)                                               \
	{.name = (n), .where = (w), .min_args = (min), .max_args = (max), .type = (t),          \
	 .offset = (off), .set = (s), .def = (d), .flags = (f)}
/* A row of one word from choices; what names the value in messages (NULL: the name). */
#define CONF_ENUM_ROW(n, w, off, d, c, wh, f)                                                   \
	{.name = (n), .where = (w), .min_args = 1, .max_args = 1, .type = CT_ENUM,              \
	 .offset = (off), .def = (d), .choices = (c), .what = (wh), .flags = (f)}

/*
 * The directives. Keep one row per line starting with `CONF_ROW("name",` or
 * `CONF_ENUM_ROW("name",`: scripts/check-conf-doc.sh reads the names from
 * here.
 */
/* clang-format off */
const struct conf_directive conf_directives[] = {
    CONF_ROW("listen", CONF_TOP, 1, 1, CT_ADDR, TOP(listen), NULL, "127.0.0.1:8080", CF_RESTART),
    CONF_ROW("upstream", CONF_TOP, 1, 1, CT_STRING, TOP(upstream_url), conf_set_upstream, NULL, CF_RESTART),
    CONF_ENUM_ROW("upstream_http2", CONF_TOP, TOP(upstream_http2), "off", conf_on_off, NULL, CF_RESTART),
    CONF_ROW("upstream_ca", CONF_TOP, 1, 1, CT_FILE, TOP(upstream_ca), NULL, NULL, CF_RESTART),
    CONF_ROW("upstream_server_name", CONF_TOP, 1, 1, CT_STRING, TOP(upstream_server_name), NULL, NULL, CF_RESTART),
    CONF_ROW("upstream_client_certificate", CONF_TOP, 2, 2, CT_FILE, TOP(upstream_client_cert), conf_set_client_cert, NULL, CF_RESTART),
    CONF_ROW("tls_certificate", CONF_TOP, 1, 1, CT_FILE, TOP(tls_certificate), NULL, NULL, 0),
    CONF_ROW("tls_certificate_key", CONF_TOP, 1, 1, CT_FILE, TOP(tls_certificate_key), NULL, NULL, 0),
    CONF_ROW("tls_ciphers", CONF_TOP, 1, 1, CT_STRING, TOP(tls_ciphers), NULL, CONF_TLS_CIPHERS_DEFAULT, 0),
    CONF_ROW("database", CONF_TOP, 1, 1, CT_STRING, TOP(database), NULL, NULL, CF_RESTART),
    CONF_ENUM_ROW("prepared_statements", CONF_TOP, TOP(prepared_statements), "auto", conf_prepared_modes, NULL, CF_RESTART),
    CONF_ROW("admin", CONF_TOP, 1, 1, CT_ADDR, TOP(admin), NULL, "off", CF_RESTART | CF_OFF),
    CONF_ROW("admin_token", CONF_TOP, 1, 1, CT_FILE, TOP(admin_token), NULL, NULL, 0),
    CONF_ROW("body_encryption", CONF_TOP, 1, 1, CT_FILE, TOP(body_encryption), NULL, NULL, 0),
    CONF_ROW("workers", CONF_TOP, 1, 1, CT_INT, TOP(workers), conf_set_workers, "auto", CF_RESTART),
    CONF_ROW("key_header", CONF_TOP, 1, 1, CT_TOKEN, TOP(key_header), NULL, "Idempotency-Key", 0),
    CONF_ENUM_ROW("mismatch_status", CONF_TOP, TOP(mismatch_status), "422", conf_mismatch_statuses, NULL, 0),
    CONF_ROW("upstream_timeout", CONF_TOP, 1, 1, CT_DURATION, TOP(upstream_timeout_ms), NULL, "30s", 0),
    CONF_ROW("client_timeout", CONF_TOP, 1, 1, CT_DURATION, TOP(client_timeout_ms), NULL, "60s", 0),
    CONF_ROW("store_timeout", CONF_TOP, 1, 1, CT_DURATION, TOP(store_timeout_ms), NULL, "5s", CF_RESTART),
    CONF_ROW("resolver", CONF_TOP, 1, CONF_ARGS_ANY, CT_STRING, TOP(resolver), conf_set_resolver, NULL, CF_RESTART),
    CONF_ROW("resolver_timeout", CONF_TOP, 1, 1, CT_DURATION, TOP(resolver_timeout_ms), NULL, "5s", CF_RESTART),
    CONF_ROW("lease", CONF_TOP, 1, 1, CT_DURATION, TOP(lease_ms), NULL, NULL, 0), /* upstream_timeout + 30s */
    CONF_ROW("shutdown_timeout", CONF_TOP, 1, 1, CT_DURATION, TOP(shutdown_timeout_ms), NULL, "20s", 0),
    CONF_ROW("sweep_interval", CONF_TOP, 1, 1, CT_DURATION, TOP(sweep_interval_ms), NULL, "10s", CF_OFF),
    CONF_ROW("actor_max_records", CONF_TOP, 1, 1, CT_CUSTOM, 0, conf_set_actor_max_records, "0", 0),
    CONF_ROW("actor_max_stored_bytes", CONF_TOP, 1, 1, CT_SIZE, TOP(actor_max_stored_bytes), NULL, "0", 0),
    CONF_ROW("quota_refresh", CONF_TOP, 1, 1, CT_DURATION, TOP(quota_refresh_ms), NULL, "5s", 0),
    CONF_ROW("max_request_body", CONF_TOP, 1, 1, CT_SIZE, TOP(max_request_body), NULL, "1m", CF_NONZERO),
    CONF_ROW("max_stored_body", CONF_TOP, 1, 1, CT_SIZE, TOP(max_stored_body), NULL, "1m", CF_NONZERO),
    CONF_ROW("replay_cache", CONF_TOP, 1, 1, CT_SIZE, TOP(replay_cache), NULL, "4m", CF_RESTART),
    CONF_ROW("relay_buffer", CONF_TOP, 1, 1, CT_SIZE, TOP(relay_buffer), NULL, "256k", CF_NONZERO),
    CONF_ROW("relay_budget", CONF_TOP, 1, 1, CT_SIZE, TOP(relay_budget), NULL, "256m", 0),
    CONF_ROW("relay_budget_per_peer", CONF_TOP, 1, 1, CT_SIZE, TOP(relay_budget_per_peer), NULL, "64m", 0),
    CONF_ROW("tunnel_timeout", CONF_TOP, 1, 1, CT_DURATION, TOP(tunnel_timeout_ms), NULL, "1h", 0),
    CONF_ROW("tunnel_upgrades", CONF_TOP, 1, CONF_ARGS_ANY, CT_CUSTOM, 0, conf_set_tunnel_upgrades, "websocket", 0),
    CONF_ROW("max_connections", CONF_TOP, 1, 1, CT_INT, TOP(max_connections), conf_set_max_connections, "8000", 0),
    CONF_ROW("max_owners", CONF_TOP, 1, 1, CT_INT, TOP(max_owners), conf_set_max_owners, "off", 0),
    CONF_ROW("trusted_proxies", CONF_TOP, 1, CONF_ARGS_ANY, CT_CUSTOM, 0, conf_set_trusted_proxies, NULL, 0),
    CONF_ENUM_ROW("underscores_in_headers", CONF_TOP, TOP(underscores_in_headers), "off", conf_on_off, NULL, 0),
    CONF_ENUM_ROW("http2", CONF_TOP, TOP(http2), "on", conf_on_off, NULL, 0),
    CONF_ROW("http2_max_concurrent_streams", CONF_TOP, 1, 1, CT_INT, TOP(http2_max_concurrent_streams), conf_set_h2_streams, "128", 0),
    CONF_ENUM_ROW("store_unavailable", CONF_TOP, TOP(store_unavailable), "fail-closed", conf_store_modes, NULL, 0),
    CONF_ENUM_ROW("log_level", CONF_TOP, TOP(log_level), "info", conf_log_levels, NULL, 0),
    CONF_ROW("problem_base", CONF_TOP, 1, 1, CT_STRING, TOP(problem_base), conf_set_problem_base, CONF_PROBLEM_BASE_DEFAULT, 0),
    CONF_ROW("route", CONF_TOP, 1, 1, CT_CUSTOM, 0, conf_open_route, NULL, CF_BLOCK | CF_REPEAT),
    CONF_ROW("match", CONF_ROUTE, 2, 2, CT_CUSTOM, 0, conf_set_match, NULL, CF_REPEAT),
    CONF_ROW("actor", CONF_BOTH, 1, CONF_ARGS_ANY, CT_CUSTOM, 0, conf_set_actor, NULL, 0),
    CONF_ENUM_ROW("key", CONF_BOTH, ROUTE(key), "required", conf_key_modes, "key mode", 0),
    CONF_ROW("fingerprint", CONF_BOTH, 1, CONF_ARGS_ANY, CT_CUSTOM, 0, conf_set_fingerprint, "json", 0),
    CONF_ROW("retention", CONF_BOTH, 1, 1, CT_DURATION, ROUTE(retention_ms), NULL, "24h", 0),
    CONF_ROW("release_on", CONF_BOTH, 1, CONF_ARGS_ANY, CT_STATUSES, ROUTE(release_on), NULL, "4xx 503", CF_CLASSES),
    CONF_ROW("unknown_on", CONF_BOTH, 1, CONF_ARGS_ANY, CT_STATUSES, ROUTE(unknown_on), NULL, "502 504", 0),
    CONF_ROW("grpc_release_on", CONF_BOTH, 1, CONF_ARGS_ANY, CT_STATUSES, ROUTE(grpc_release_on), NULL, "INVALID_ARGUMENT NOT_FOUND ALREADY_EXISTS PERMISSION_DENIED FAILED_PRECONDITION OUT_OF_RANGE UNAUTHENTICATED RESOURCE_EXHAUSTED UNAVAILABLE", CF_GRPC),
    CONF_ROW("grpc_unknown_on", CONF_BOTH, 1, CONF_ARGS_ANY, CT_STATUSES, ROUTE(grpc_unknown_on), NULL, "DEADLINE_EXCEEDED CANCELLED UNKNOWN", CF_GRPC),
    CONF_ROW("grpc", CONF_BOTH, 2, 2, CT_CUSTOM, 0, conf_set_grpc, "streaming record", 0),
    CONF_ROW("store_headers", CONF_BOTH, 1, CONF_ARGS_ANY, CT_CUSTOM, 0, conf_set_store_headers, NULL, 0),
    CONF_ROW("in_progress", CONF_BOTH, 1, 2, CT_CUSTOM, 0, conf_set_in_progress, "reject", 0),
    CONF_ROW("actor_max_owners", CONF_BOTH, 1, 1, CT_CUSTOM, 0, conf_set_actor_max_owners, "off", 0),
    CONF_ROW("forward_key", CONF_BOTH, 1, 2, CT_CUSTOM, 0, conf_set_forward_key, "off", 0),
    CONF_ROW("expired_keys", CONF_BOTH, 1, 2, CT_CUSTOM, 0, conf_set_expired_keys, "run", 0),
    CONF_ENUM_ROW("recovery", CONF_BOTH, ROUTE(recovery), "hold", conf_recovery_modes, NULL, 0),
    CONF_ENUM_ROW("match_case", CONF_BOTH, ROUTE(match_case), "insensitive", conf_match_cases, NULL, 0),
    CONF_ROW("key_from", CONF_BOTH, 2, 2, CT_CUSTOM, 0, conf_set_key_from, NULL, 0),
    CONF_ROW("operation_from", CONF_ROUTE, 1, 2, CT_CUSTOM, 0, conf_set_operation_from, NULL, 0),
    CONF_ROW("fingerprint_headers", CONF_BOTH, 1, CONF_ARGS_ANY, CT_CUSTOM, 0, conf_set_fp_headers, NULL, 0),
    CONF_ENUM_ROW("errors", CONF_BOTH, ROUTE(errors), "problem", conf_errors_modes, NULL, 0),
    CONF_ROW("contract_url", CONF_TOP, 1, 1, CT_STRING, TOP(contract_url), conf_set_contract_url, NULL, 0),
    CONF_ROW("contract_server", CONF_TOP, 1, 1, CT_STRING, TOP(contract_server), conf_set_contract_server, NULL, 0),
};
/* clang-format on */

#undef TOP
#undef ROUTE
#undef CONF_ROW
#undef CONF_ENUM_ROW

#define CONF_NDIRECTIVES ((int)(sizeof(conf_directives) / sizeof(conf_directives[0])))

const int conf_ndirectives = CONF_NDIRECTIVES;

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
	return (d->set ? d->set : conf_set_typed)(p, p->route ? p->route : p->defaults, argc - 1,
						  argv + 1);
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
		if ((d->set ? d->set : conf_set_typed)(p, p->builtin, p->argc, p->argv))
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

/* A list of names (store_headers, fingerprint_headers) DST lacks, copied from SRC's. */
static int conf_inherit_names(struct conf_parser *p, char ***dst, int *ndst, char *const *src,
			      int nsrc)
{
	if (*ndst || !nsrc)
		return 0;
	*dst = calloc((size_t)nsrc, sizeof(**dst));
	if (!*dst)
		return conf_error(p, "out of memory");
	for (; *ndst < nsrc; (*ndst)++) {
		if (conf_set_str(p, &(*dst)[*ndst], src[*ndst]))
			return -1;
	}
	return 0;
}

/* Copy into DST every route setting it lacks and SRC has. Returns 0 or -1. */
static int conf_route_inherit(struct conf_parser *p, struct route *dst, const struct route *src)
{
	int i;

	if (!dst->actor && src->actor) {
		dst->actor = src->actor;
		dst->jwt_keys.line = src->jwt_keys.line;
		dst->jwt_leeway_ms = src->jwt_leeway_ms;
		dst->jwt_require_exp = src->jwt_require_exp;
		if (conf_set_str(p, &dst->actor_header, src->actor_header) ||
		    conf_set_str(p, &dst->jwt_keys.path, src->jwt_keys.path) ||
		    conf_set_str(p, &dst->jwt_issuer, src->jwt_issuer) ||
		    conf_set_str(p, &dst->jwt_audience, src->jwt_audience) ||
		    conf_set_str(p, &dst->jwt_claim, src->jwt_claim))
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
	if (!dst->grpc_release_on.set)
		dst->grpc_release_on = src->grpc_release_on;
	if (!dst->grpc_unknown_on.set)
		dst->grpc_unknown_on = src->grpc_unknown_on;
	if (!dst->grpc_streaming)
		dst->grpc_streaming = src->grpc_streaming;
	if (conf_inherit_names(p, &dst->store_headers, &dst->nstore_headers, src->store_headers,
			       src->nstore_headers) < 0)
		return -1;
	if (!dst->in_progress) {
		dst->in_progress = src->in_progress;
		dst->in_progress_wait_ms = src->in_progress_wait_ms;
	}
	if (!dst->expired_keys) {
		dst->expired_keys = src->expired_keys;
		dst->expired_keys_ms = src->expired_keys_ms;
	}
	if (!dst->recovery)
		dst->recovery = src->recovery;
	if (!dst->match_case)
		dst->match_case = src->match_case;
	if (!dst->errors)
		dst->errors = src->errors;
	if (!dst->actor_max_owners)
		dst->actor_max_owners = src->actor_max_owners;
	if (!dst->forward_key && src->forward_key) {
		dst->forward_key = src->forward_key;
		if (conf_set_str(p, &dst->forward_key_header, src->forward_key_header))
			return -1;
	}
	if (!dst->key_from && src->key_from) {
		dst->key_from = src->key_from;
		if (conf_set_str(p, &dst->key_from_name, src->key_from_name))
			return -1;
	}
	return conf_inherit_names(p, &dst->fp_headers, &dst->nfp_headers, src->fp_headers,
				  src->nfp_headers);
}

/* Give R its inherited settings and check what only the whole file decides. */
static int conf_finish_route(struct conf_parser *p, struct route *r)
{
	int st;

	if (conf_route_inherit(p, r, p->defaults) || conf_route_inherit(p, r, p->builtin))
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
	for (st = 0; st < GRPC_CODES; st++) {
		if (status_set_has(&r->grpc_release_on, st) && status_set_has(&r->grpc_unknown_on, st))
			return conf_error_at(p, r->line,
					     "route \"%s\": gRPC status %s is in both "
					     "\"grpc_release_on\" and \"grpc_unknown_on\"",
					     r->operation, grpc_code_name(st));
	}
	return 0;
}

/* 1 for a method RFC 9110 9.2.1 calls safe: one that passes through without a key. */
static int conf_safe_method(const char *m)
{
	static const char *const safe[] = {"GET", "HEAD", "OPTIONS", "TRACE"};

	for (size_t i = 0; i < sizeof(safe) / sizeof(safe[0]); i++)
		if (strcmp(m, safe[i]) == 0)
			return 1;
	return 0;
}

/*
 * What route r can never do, given the routes before it: enforce anything
 * when its match lines name only safe methods (they pass through as they
 * are), or be reached by a match an earlier route has too (the first route
 * that matches wins).
 */
static int conf_route_reachable(struct conf_parser *p, const struct conf *c, int ri)
{
	const struct route *r = &c->routes[ri], *e;
	const struct route_match *m, *em;
	int unsafe = 0;

	for (int j = 0; j < r->nmatches; j++)
		unsafe |= !conf_safe_method(r->matches[j].method);
	if (r->nmatches && !unsafe)
		return conf_error_at(p, r->line,
				     "route \"%s\" matches only safe methods (GET, HEAD, OPTIONS, "
				     "TRACE), which pass through without a key: it can never "
				     "enforce anything",
				     r->operation);
	for (int j = 0; j < r->nmatches; j++) {
		m = &r->matches[j];
		for (int ei = 0; ei < ri; ei++) {
			e = &c->routes[ei];
			for (int k = 0; k < e->nmatches; k++) {
				em = &e->matches[k];
				if (strcmp(m->method, em->method) == 0 &&
				    route_template_same(em->segs, em->nsegs, m->segs, m->nsegs,
							e->match_case == MATCH_CASE_INSENSITIVE))
					return conf_error_at(
					    p, m->line,
					    "route \"%s\": this match is the same as route "
					    "\"%s\"'s at line %d, which comes first and wins: "
					    "it is never reached",
					    r->operation, e->operation, em->line);
			}
		}
	}
	return 0;
}

static int conf_finish(struct conf_parser *p)
{
	struct conf *c = p->conf;
	int i;

	if (!c->upstream_url)
		return conf_error(p, "\"upstream\" is required");
	if (!c->lease_ms) {
		c->lease_ms = c->upstream_timeout_ms + CONF_LEASE_MARGIN_MS;
		if (c->lease_ms <= c->upstream_timeout_ms + c->store_timeout_ms)
			return conf_error_at(p, conf_top_line(p, "store_timeout"),
					     "the default \"lease\" (upstream_timeout + 30s = %lldms) "
					     "must be longer than \"upstream_timeout\" plus "
					     "\"store_timeout\" (%lldms): set \"lease\"",
					     (long long)c->lease_ms,
					     (long long)(c->upstream_timeout_ms + c->store_timeout_ms));
	} else if (c->lease_ms <= c->upstream_timeout_ms + c->store_timeout_ms) {
		return conf_error_at(p, conf_top_line(p, "lease"),
				     "\"lease\" (%lldms) must be longer than \"upstream_timeout\" "
				     "plus \"store_timeout\" (%lldms)",
				     (long long)c->lease_ms,
				     (long long)(c->upstream_timeout_ms + c->store_timeout_ms));
	}
	if (c->admin.host && c->admin.port == c->listen.port &&
	    strcmp(c->admin.host, c->listen.host) == 0)
		return conf_error_at(p, conf_top_line(p, "admin"),
				     "\"admin\" and \"listen\" use the same address");
	if (c->admin.host && !c->admin_token.path && !conf_loopback(c->admin.host, strlen(c->admin.host)))
		return conf_error_at(p, conf_top_line(p, "admin"),
				     "\"admin %s\" is not a loopback address: set \"admin_token\" "
				     "so that the records API needs a key",
				     c->admin.host);
	if (!c->tls_certificate.path != !c->tls_certificate_key.path)
		return conf_error_at(p, c->tls_certificate.line + c->tls_certificate_key.line,
				     "\"tls_certificate\" and \"tls_certificate_key\" go together"); /* one is 0 */
	/* The list itself is OpenSSL's to judge, when the secrets load. */
	c->tls_ciphers_line = conf_top_line(p, "tls_ciphers");
	if (c->tls_ciphers_line && !c->tls_certificate.path)
		return conf_error_at(p, c->tls_ciphers_line,
				     "\"tls_ciphers\" needs \"tls_certificate\"");
	if (!c->upstream_tls) {
		static const char *const tls_only[] = {"upstream_ca", "upstream_server_name",
						       "upstream_client_certificate"};

		for (i = 0; i < 3; i++) {
			if (conf_top_line(p, tls_only[i]))
				return conf_error_at(p, conf_top_line(p, tls_only[i]),
						     "\"%s\" needs an https:// upstream",
						     tls_only[i]);
		}
		/* h2c:// speaks HTTP/2 already; http:// never negotiates it. */
		if (c->upstream_http2)
			return conf_error_at(p, conf_top_line(p, "upstream_http2"),
					     "\"upstream_http2 on\" needs an https:// upstream "
					     "(h2c:// is cleartext HTTP/2)");
	}
	for (i = 0; i < c->nroutes; i++) {
		if (conf_finish_route(p, &c->routes[i]) || conf_route_reachable(p, c, i))
			return -1;
	}
	return 0;
}

/*
 * The table's own rules, checked before every parse so that a row that
 * breaks them fails every test at once: a restart-only directive has a
 * top-level field the reload check can compare, a typed row without a
 * setter has a type with a setter, and an enum has its choices.
 */
static int conf_table_check(struct conf_parser *p)
{
	for (int i = 0; i < CONF_NDIRECTIVES; i++) {
		const struct conf_directive *d = &conf_directives[i];

		if ((d->flags & CF_RESTART) && (d->where != CONF_TOP || d->type == CT_CUSTOM))
			return conf_error(p, "directive table: \"%s\" is restart-only without a field",
					  d->name);
		if (!d->set && (d->type == CT_CUSTOM || d->type == CT_INT))
			return conf_error(p, "directive table: \"%s\" has no setter", d->name);
		if (d->type == CT_ENUM && !d->choices)
			return conf_error(p, "directive table: \"%s\" has no choices", d->name);
	}
	return 0;
}

int conf_parse(const char *name, const char *text, size_t len, struct conf **out, char *err,
	       size_t errlen)
{
	struct conf_parser p;
	struct route defaults, builtin;
	int rc = -1;

	memset(&p, 0, sizeof(p));
	memset(&defaults, 0, sizeof(defaults));
	memset(&builtin, 0, sizeof(builtin));
	p.defaults = &defaults;
	p.builtin = &builtin;
	p.name = name;
	p.err = err;
	p.errlen = errlen;
	p.conf = calloc(1, sizeof(*p.conf));
	if (!p.conf) {
		conf_error(&p, "out of memory");
		goto out;
	}
	if (conf_table_check(&p) || conf_set_str(&p, &p.conf->file, name) || conf_apply_defaults(&p) ||
	    conf_read_lines(&p, text, len) || conf_finish(&p))
		goto out;
	*out = p.conf;
	p.conf = NULL;
	rc = 0;
out:
	conf_free(p.conf);
	conf_route_clear(&defaults);
	conf_route_clear(&builtin);
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
		snprintf(err, errlen, "%s: cannot open: %s", file, strerror(errno));
		goto out;
	}
	text = malloc(CONF_FILE_MAX + 1);
	if (!text) {
		snprintf(err, errlen, "%s: out of memory", file);
		goto out;
	}
	len = fread(text, 1, CONF_FILE_MAX + 1, f);
	if (ferror(f)) {
		snprintf(err, errlen, "%s: cannot read: %s", file, strerror(errno));
		goto out;
	}
	if (len > CONF_FILE_MAX) {
		snprintf(err, errlen, "%s: file is larger than %d bytes", file, CONF_FILE_MAX);
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
	free(conf->listen.host);
	free(conf->upstream_url);
	free(conf->upstream_host);
	free(conf->upstream_hostport);
	free(conf->upstream_ca.path);
	free(conf->upstream_server_name);
	free(conf->upstream_client_cert.path);
	free(conf->upstream_client_key.path);
	free(conf->tls_certificate.path);
	free(conf->tls_certificate_key.path);
	free(conf->tls_ciphers);
	free(conf->admin_token.path);
	free(conf->body_encryption.path);
	free(conf->trusted_proxies);
	conf_free_names(conf->tunnel_upgrades, conf->ntunnel_upgrades);
	free(conf->database);
	free(conf->resolver);
	free(conf->admin.host);
	free(conf->key_header);
	free(conf->problem_base);
	free(conf->contract_url);
	free(conf->contract_server);
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

/* 1 when the top-level field of d differs between a and b. */
static int conf_field_differs(const struct conf_directive *d, const struct conf *a,
			      const struct conf *b)
{
	const char *x = (const char *)a + d->offset, *y = (const char *)b + d->offset;
	const struct conf_addr *ax = (const void *)x, *ay = (const void *)y;

	switch (d->type) {
	case CT_STRING:
	case CT_TOKEN:
		return conf_str_differs(*(char *const *)x, *(char *const *)y);
	case CT_DURATION:
		return *(const int64_t *)x != *(const int64_t *)y;
	case CT_SIZE:
		return *(const size_t *)x != *(const size_t *)y;
	case CT_INT:
	case CT_ENUM:
		return *(const int *)x != *(const int *)y;
	case CT_ADDR:
		return conf_str_differs(ax->host, ay->host) || ax->port != ay->port;
	case CT_STATUSES:
		return memcmp(x, y, sizeof(struct status_set)) != 0;
	case CT_FILE:
		return conf_str_differs(((const struct conf_file *)x)->path,
					((const struct conf_file *)y)->path);
	case CT_CUSTOM:
		break;
	}
	return 1; /* conf_table_check() keeps restart-only rows off this path */
}

const char *conf_restart_only_change(const struct conf *old, const struct conf *new)
{
	for (int i = 0; i < CONF_NDIRECTIVES; i++) {
		const struct conf_directive *d = &conf_directives[i];

		if ((d->flags & CF_RESTART) && conf_field_differs(d, old, new))
			return d->name;
	}
	return NULL;
}

/* 1 when route r takes tokens meant for any service: actor jwt without audience=. */
static int conf_jwt_any_audience(const struct route *r)
{
	return r->actor == ACTOR_JWT && !r->jwt_audience;
}

void conf_warnings(const struct conf *conf, conf_warning_fn say, void *arg)
{
	char line[CONF_ERR_MAX];
	const struct route *r;
	int i, j;

	for (i = 0; i < conf->nroutes; i++) {
		r = &conf->routes[i];
		if (!conf_jwt_any_audience(r))
			continue;
		/* Routes that inherit one "actor jwt" share its line: said once. */
		for (j = 0; j < i; j++) {
			if (conf_jwt_any_audience(&conf->routes[j]) &&
			    conf->routes[j].jwt_keys.line == r->jwt_keys.line)
				break;
		}
		if (j < i)
			continue;
		snprintf(line, sizeof(line),
			 "%s:%d: warning: \"actor jwt\" without audience= takes tokens its issuer "
			 "made for any other service too",
			 conf->file, r->jwt_keys.line);
		say(line, arg);
	}
}
