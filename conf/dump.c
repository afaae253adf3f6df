/*
 * The effective configuration in its file's syntax, walked from the
 * directive table: a typed row is written by its type's writer from the
 * field the row names, so a new typed directive appears without code here;
 * a row with a setter of its own (actor, fingerprint, match...) has a
 * writer of its own in dump_custom[], and a row with neither is written as
 * a comment that says so (tests/unit/test_dump.c fails on one).
 */
#include "conf/dump.h"

#include <arpa/inet.h>
#include <libpq-fe.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "conf/table.h"
#include "http/grpc.h"

/* A growing string; oom set once an append failed. */
struct dump {
	char *s;
	size_t len, cap;
	int oom;
	const struct conf *conf;
};

static void dump_grow(struct dump *d, size_t more)
{
	size_t cap = d->cap ? d->cap : 4096;
	char *s;

	while (cap < d->len + more + 1)
		cap *= 2;
	if (cap == d->cap)
		return;
	s = realloc(d->s, cap);
	if (!s) {
		d->oom = 1;
		return;
	}
	d->s = s;
	d->cap = cap;
}

static void dump_put(struct dump *d, const char *s, size_t n)
{
	if (d->oom)
		return;
	dump_grow(d, n);
	if (d->oom)
		return;
	memcpy(d->s + d->len, s, n);
	d->len += n;
	d->s[d->len] = '\0';
}

static void dump_printf(struct dump *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void dump_printf(struct dump *d, const char *fmt, ...)
{
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (n < 0 || d->oom) {
		d->oom = 1;
		return;
	}
	dump_grow(d, (size_t)n);
	if (d->oom)
		return;
	va_start(ap, fmt);
	vsnprintf(d->s + d->len, (size_t)n + 1, fmt, ap);
	va_end(ap);
	d->len += (size_t)n;
}

static void dump_str(struct dump *d, const char *s)
{
	dump_put(d, s, strlen(s));
}

/* One argument, after a blank: bare when the lexer takes it so, else quoted. */
static void dump_arg(struct dump *d, const char *s)
{
	int quote = *s == '\0' || strcmp(s, "{") == 0 || strcmp(s, "}") == 0 ||
		    strpbrk(s, " \t\r#\"\\") != NULL;

	dump_str(d, " ");
	if (!quote) {
		dump_put(d, s, strlen(s));
		return;
	}
	dump_put(d, "\"", 1);
	for (; *s; s++) {
		if (*s == '"' || *s == '\\')
			dump_put(d, "\\", 1);
		dump_put(d, s, 1);
	}
	dump_put(d, "\"", 1);
}

/* One argument, NAME and VALUE joined (\"issuer=\" and the issuer), quoted as a whole. */
static void dump_opt(struct dump *d, const char *name, const char *value)
{
	char *arg = malloc(strlen(name) + strlen(value) + 1);

	if (!arg) {
		d->oom = 1;
		return;
	}
	sprintf(arg, "%s%s", name, value);
	dump_arg(d, arg);
	free(arg);
}

/* A file's path as it was opened: a relative one from the working directory. */
static void dump_path(struct dump *d, const char *path)
{
	char cwd[PATH_MAX], *full;

	if (path[0] == '/' || !getcwd(cwd, sizeof(cwd))) {
		dump_arg(d, path);
		return;
	}
	full = malloc(strlen(cwd) + 1 + strlen(path) + 1);
	if (!full) {
		d->oom = 1;
		return;
	}
	sprintf(full, "%s/%s", cwd, path);
	dump_arg(d, full);
	free(full);
}

/* ms in the largest unit that holds it whole: "30s", "24h", "250ms". */
static void dump_duration_text(int64_t ms, char *buf, size_t len)
{
	static const struct {
		const char *unit;
		int64_t ms;
	} units[] = {{"d", 86400000}, {"h", 3600000}, {"m", 60000}, {"s", 1000}};

	for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
		if (ms && ms % units[i].ms == 0) {
			snprintf(buf, len, "%lld%s", (long long)(ms / units[i].ms), units[i].unit);
			return;
		}
	}
	snprintf(buf, len, "%lldms", (long long)ms);
}

static void dump_duration(struct dump *d, int64_t ms)
{
	char buf[32];

	dump_duration_text(ms, buf, sizeof(buf));
	dump_arg(d, buf);
}

static void dump_size(struct dump *d, size_t n)
{
	static const struct {
		const char *unit;
		size_t n;
	} units[] = {{"g", 1024 * 1024 * 1024}, {"m", 1024 * 1024}, {"k", 1024}};

	for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
		if (n && n % units[i].n == 0) {
			dump_printf(d, " %zu%s", n / units[i].n, units[i].unit);
			return;
		}
	}
	dump_printf(d, " %zu", n);
}

static void dump_addr(struct dump *d, const struct conf_addr *a)
{
	if (!a->host)
		dump_str(d, " off");
	else if (strchr(a->host, ':'))
		dump_printf(d, " [%s]:%d", a->host, a->port);
	else
		dump_printf(d, " %s:%d", a->host, a->port);
}

/* A status set, a whole hundred as its class when classes. */
static void dump_statuses(struct dump *d, const struct status_set *set, int classes)
{
	int st = 100, all;

	while (st < 600) {
		all = classes && st % 100 == 0;
		for (int k = st; all && k < st + 100; k++)
			all = status_set_has(set, k);
		if (all) {
			dump_printf(d, " %dxx", st / 100);
			st += 100;
			continue;
		}
		if (status_set_has(set, st))
			dump_printf(d, " %d", st);
		st++;
	}
}

/* A set of gRPC codes, by name. */
static void dump_grpc_codes(struct dump *d, const struct status_set *set)
{
	for (int code = 0; code < GRPC_CODES; code++)
		if (status_set_has(set, code))
			dump_arg(d, grpc_code_name(code));
}

/* One libpq option into conninfo syntax: 'value' with ' and \ escaped. */
static void dump_conninfo_value(struct dump *d, const char *v)
{
	dump_put(d, "'", 1);
	for (; *v; v++) {
		if (*v == '\'' || *v == '\\')
			dump_put(d, "\\", 1);
		dump_put(d, v, 1);
	}
	dump_put(d, "'", 1);
}

/* database: the options libpq reads from it (either form), the password masked. */
static void dump_database(struct dump *d, const char *conninfo)
{
	struct dump info = {0};
	PQconninfoOption *opts = PQconninfoParse(conninfo, NULL), *o;

	if (!opts) {
		dump_str(d, " \"" CONF_DUMP_MASK "\" # libpq cannot read it");
		return;
	}
	for (o = opts; o->keyword; o++) {
		if (!o->val)
			continue;
		if (info.len)
			dump_put(&info, " ", 1);
		dump_put(&info, o->keyword, strlen(o->keyword));
		dump_put(&info, "=", 1);
		dump_conninfo_value(&info, strcmp(o->keyword, "password") == 0 ? CONF_DUMP_MASK
										 : o->val);
	}
	PQconninfoFree(opts);
	d->oom |= info.oom;
	dump_arg(d, info.s ? info.s : "");
	free(info.s);
}

/* The field of row r: in the conf at top level, else in route rt. */
static const void *dump_field(const struct dump *d, const struct conf_directive *r,
			      const struct route *rt)
{
	return (const char *)(rt ? (const void *)rt : (const void *)d->conf) + r->offset;
}

/* A typed row's value; 0, or -1 when it has none (not set). */
static int dump_typed(struct dump *d, const struct conf_directive *r, const struct route *rt)
{
	const void *f = dump_field(d, r, rt);
	const char *s;

	switch (r->type) {
	case CT_STRING:
	case CT_TOKEN:
		s = *(char *const *)f;
		if (!s)
			return -1;
		if (!rt && r->offset == offsetof(struct conf, database))
			dump_database(d, s);
		else
			dump_arg(d, s);
		return 0;
	case CT_DURATION:
		if (*(const int64_t *)f == 0) {
			if (!(r->flags & CF_OFF))
				return -1;
			dump_str(d, " off");
			return 0;
		}
		dump_duration(d, *(const int64_t *)f);
		return 0;
	case CT_SIZE:
		dump_size(d, *(const size_t *)f);
		return 0;
	case CT_INT:
		dump_printf(d, " %d", *(const int *)f);
		return 0;
	case CT_ENUM:
		for (const struct conf_choice *c = r->choices; c->word; c++) {
			if (c->value == *(const int *)f) {
				dump_arg(d, c->word);
				return 0;
			}
		}
		return -1;
	case CT_ADDR:
		if (!((const struct conf_addr *)f)->host && !(r->flags & CF_OFF))
			return -1;
		dump_addr(d, f);
		return 0;
	case CT_STATUSES:
		if (!((const struct status_set *)f)->set)
			return -1;
		if (r->flags & CF_GRPC)
			dump_grpc_codes(d, f);
		else
			dump_statuses(d, f, (r->flags & CF_CLASSES) != 0);
		return 0;
	case CT_FILE:
		s = ((const struct conf_file *)f)->path;
		if (!s)
			return -1;
		dump_path(d, s);
		return 0;
	case CT_CUSTOM:
		break;
	}
	return -1;
}

/* ---- the rows with setters of their own ---- */

/* What a writer returns besides 0 and -1 (no value): */
#define DUMP_NO_WRITER (-2) /* no writer knows the row */
#define DUMP_UNUSED    (-3) /* a value that does not apply (tls_ciphers without TLS) */

static int dump_client_cert(struct dump *d, const struct route *rt)
{
	if (!d->conf->upstream_client_cert.path)
		return -1;
	dump_path(d, d->conf->upstream_client_cert.path);
	dump_path(d, d->conf->upstream_client_key.path);
	return 0;
}

/* tls_ciphers: a file without tls_certificate may not set it. */
static int dump_tls_ciphers(struct dump *d, const struct route *rt)
{
	if (!d->conf->tls_certificate.path)
		return DUMP_UNUSED;
	dump_arg(d, d->conf->tls_ciphers);
	return 0;
}

static void dump_names(struct dump *d, char *const *names, int n)
{
	for (int i = 0; i < n; i++)
		dump_arg(d, names[i]);
}

static int dump_tunnel_upgrades(struct dump *d, const struct route *rt)
{
	if (!d->conf->ntunnel_upgrades)
		return -1;
	dump_names(d, d->conf->tunnel_upgrades, d->conf->ntunnel_upgrades);
	return 0;
}

/* The servers are kept as one blank-separated string: one word each. */
static int dump_resolver(struct dump *d, const struct route *rt)
{
	const char *s = d->conf->resolver;

	if (!s || !*s)
		return -1;
	while (*s) {
		size_t n = strcspn(s, " ");

		dump_put(d, " ", 1);
		dump_put(d, s, n);
		s += n + strspn(s + n, " ");
	}
	return 0;
}

static int dump_trusted_proxies(struct dump *d, const struct route *rt)
{
	char host[INET6_ADDRSTRLEN];

	if (!d->conf->ntrusted_proxies)
		return -1;
	for (int i = 0; i < d->conf->ntrusted_proxies; i++) {
		const struct conf_cidr *c = &d->conf->trusted_proxies[i];

		if (!inet_ntop(c->family, c->addr, host, sizeof(host)))
			continue;
		dump_printf(d, " %s/%d", host, c->bits);
	}
	return 0;
}

static int dump_actor(struct dump *d, const struct route *rt)
{
	char leeway[32];

	switch (rt->actor) {
	case ACTOR_HEADER:
		dump_str(d, " header");
		dump_arg(d, rt->actor_header);
		return 0;
	case ACTOR_ANONYMOUS:
		dump_str(d, " anonymous");
		return 0;
	case ACTOR_AUTHORIZATION:
		dump_str(d, " authorization");
		return 0;
	case ACTOR_JWT:
		dump_str(d, " jwt");
		dump_path(d, rt->jwt_keys.path);
		if (rt->jwt_issuer)
			dump_opt(d, "issuer=", rt->jwt_issuer);
		if (rt->jwt_audience)
			dump_opt(d, "audience=", rt->jwt_audience);
		if (rt->jwt_claim)
			dump_opt(d, "claim=", rt->jwt_claim);
		dump_duration_text(rt->jwt_leeway_ms, leeway, sizeof(leeway));
		dump_opt(d, "leeway=", leeway);
		if (rt->actor_header)
			dump_opt(d, "header=", rt->actor_header);
		if (rt->jwt_require_exp)
			dump_str(d, " require=exp");
		return 0;
	case ACTOR_UNSET:
		break;
	}
	return -1;
}

static int dump_fingerprint(struct dump *d, const struct route *rt)
{
	static const char *const transforms[] = {
	    [FPT_NONE] = "", [FPT_TRIM] = ":trim", [FPT_LOWER] = ":lower",
	    [FPT_INT] = ":int", [FPT_NUMBER] = ":number", [FPT_STRING] = ":string",
	};

	switch (rt->fingerprint) {
	case FP_BODY:
		dump_str(d, " body");
		return 0;
	case FP_NONE:
		dump_str(d, " none");
		return 0;
	case FP_JSON:
		dump_str(d, " json");
		for (int i = 0; i < rt->nfields; i++)
			dump_opt(d, rt->fields[i].path, transforms[rt->fields[i].transform]);
		return 0;
	case FP_UNSET:
		break;
	}
	return -1;
}

static int dump_store_headers(struct dump *d, const struct route *rt)
{
	if (!rt->nstore_headers)
		return -1;
	dump_names(d, rt->store_headers, rt->nstore_headers);
	return 0;
}

static int dump_fp_headers(struct dump *d, const struct route *rt)
{
	if (!rt->nfp_headers)
		return -1;
	dump_names(d, rt->fp_headers, rt->nfp_headers);
	return 0;
}

static int dump_in_progress(struct dump *d, const struct route *rt)
{
	if (rt->in_progress == IN_PROGRESS_WAIT) {
		dump_str(d, " wait");
		dump_duration(d, rt->in_progress_wait_ms);
		return 0;
	}
	dump_str(d, " reject");
	return 0;
}

static int dump_expired_keys(struct dump *d, const struct route *rt)
{
	if (rt->expired_keys == EXPIRED_KEYS_REFUSE) {
		dump_str(d, " refuse");
		dump_duration(d, rt->expired_keys_ms);
		return 0;
	}
	dump_str(d, " run");
	return 0;
}

static int dump_actor_max_records(struct dump *d, const struct route *rt)
{
	dump_printf(d, " %lld", (long long)d->conf->actor_max_records);
	return 0;
}

static int dump_grpc(struct dump *d, const struct route *rt)
{
	dump_str(d, rt->grpc_streaming == GRPC_STREAMING_PASS ? " streaming pass"
							       : " streaming record");
	return 0;
}

static int dump_key_from(struct dump *d, const struct route *rt)
{
	static const char *const kinds[] = {
	    [KEY_FROM_HEADER] = " header", [KEY_FROM_JSON] = " json", [KEY_FROM_QUERY] = " query"};

	if (rt->key_from == KEY_FROM_UNSET)
		return -1;
	dump_put(d, kinds[rt->key_from], strlen(kinds[rt->key_from]));
	dump_arg(d, rt->key_from_name);
	return 0;
}

/* A count of owners, or off for none. */
static void dump_owners(struct dump *d, int n)
{
	if (n > 0)
		dump_printf(d, " %d", n);
	else
		dump_str(d, " off");
}

static int dump_max_owners(struct dump *d, const struct route *rt)
{
	dump_owners(d, d->conf->max_owners);
	return 0;
}

static int dump_actor_max_owners(struct dump *d, const struct route *rt)
{
	dump_owners(d, rt->actor_max_owners);
	return 0;
}

static int dump_forward_key(struct dump *d, const struct route *rt)
{
	if (rt->forward_key != FORWARD_KEY_SCOPED && rt->forward_key != FORWARD_KEY_RAW) {
		dump_str(d, " off");
		return 0;
	}
	dump_arg(d, rt->forward_key_header);
	dump_str(d, rt->forward_key == FORWARD_KEY_RAW ? " raw" : " scoped");
	return 0;
}

static int dump_operation_from(struct dump *d, const struct route *rt)
{
	switch (rt->operation_from) {
	case OPFROM_JSON:
	case OPFROM_JSONRPC:
		dump_str(d, rt->operation_from == OPFROM_JSON ? " json" : " jsonrpc");
		dump_arg(d, rt->operation_path);
		return 0;
	case OPFROM_GRAPHQL:
		dump_str(d, " graphql");
		return 0;
	default:
		return -1;
	}
}

/* A row written by a function of its own: 0, or -1 when it has no value. */
struct dump_writer {
	const char *name;
	int (*write)(struct dump *d, const struct route *rt);
};

static const struct dump_writer dump_custom[] = {
    {"upstream_client_certificate", dump_client_cert},
    {"tls_ciphers", dump_tls_ciphers},
    {"tunnel_upgrades", dump_tunnel_upgrades},
    {"resolver", dump_resolver},
    {"trusted_proxies", dump_trusted_proxies},
    {"actor", dump_actor},
    {"fingerprint", dump_fingerprint},
    {"store_headers", dump_store_headers},
    {"fingerprint_headers", dump_fp_headers},
    {"in_progress", dump_in_progress},
    {"expired_keys", dump_expired_keys},
    {"actor_max_records", dump_actor_max_records},
    {"key_from", dump_key_from},
    {"operation_from", dump_operation_from},
    {"grpc", dump_grpc},
    {"max_owners", dump_max_owners},
    {"actor_max_owners", dump_actor_max_owners},
    {"forward_key", dump_forward_key},
};

/* Row r (of route rt, NULL: top level) on a line of its own, indented in a route. */
static void dump_row(struct dump *d, const struct conf_directive *r, const struct route *rt)
{
	const char *indent = rt ? "    " : "";
	size_t mark = d->len;
	int rc = DUMP_NO_WRITER;

	dump_printf(d, "%s%s", indent, r->name);
	for (size_t i = 0; i < sizeof(dump_custom) / sizeof(dump_custom[0]); i++)
		if (strcmp(dump_custom[i].name, r->name) == 0)
			rc = dump_custom[i].write(d, rt);
	if (rc == DUMP_NO_WRITER && r->type != CT_CUSTOM)
		rc = dump_typed(d, r, rt);
	if (rc < 0 && !d->oom) {
		d->len = mark;
		dump_printf(d, "%s#%s %s", indent, r->name,
			    rc == DUMP_NO_WRITER ? "(idemproxy cannot show it)"
			    : rc == DUMP_UNUSED	 ? "(not used: no tls_certificate)"
						 : "(not set)");
	}
	dump_put(d, "\n", 1);
}

/* A match template back in its written form. */
static void dump_match(struct dump *d, const struct route_match *m)
{
	dump_printf(d, "    match %s ", m->method);
	if (m->nsegs == 0)
		dump_put(d, "/", 1);
	for (int i = 0; i < m->nsegs; i++) {
		dump_put(d, "/", 1);
		if (m->segs[i].kind == SEG_REST)
			dump_put(d, "*", 1);
		else if (m->segs[i].kind == SEG_PARAM)
			dump_printf(d, "{%.*s}", (int)m->segs[i].len, m->segs[i].text);
		else
			dump_put(d, m->segs[i].text, m->segs[i].len);
	}
	dump_put(d, "\n", 1);
}

char *conf_dump(const struct conf *conf, size_t *len)
{
	struct dump d = {.conf = conf};

	dump_printf(&d, "# idemproxy %s: the effective configuration of ", IDEMPROXY_VERSION);
	dump_str(&d, conf->file);
	dump_str(&d, "\n# defaults included; files are named, not read; the database password "
		     "is masked\n");
	for (int i = 0; i < conf_ndirectives; i++) {
		const struct conf_directive *r = &conf_directives[i];

		if (r->where == CONF_TOP && !(r->flags & CF_BLOCK))
			dump_row(&d, r, NULL);
	}
	for (int k = 0; k < conf->nroutes; k++) {
		const struct route *rt = &conf->routes[k];

		dump_printf(&d, "\nroute %s {\n", rt->operation);
		for (int j = 0; j < rt->nmatches; j++)
			dump_match(&d, &rt->matches[j]);
		for (int i = 0; i < conf_ndirectives; i++) {
			const struct conf_directive *r = &conf_directives[i];

			if ((r->where & CONF_ROUTE) && !(r->flags & CF_REPEAT))
				dump_row(&d, r, rt);
		}
		dump_put(&d, "}\n", 2);
	}
	if (d.oom) {
		free(d.s);
		return NULL;
	}
	*len = d.len;
	return d.s;
}
