/*
 * The admin listener (`admin ADDR:PORT`), on the main thread's loop with
 * libevent's evhttp: low traffic, so its convenience is worth more here
 * than the request path's hand-made HTTP.
 *
 *   GET  /healthz                 200 while the process serves
 *   GET  /readyz                  200 while this instance should get traffic, else
 *                                 503 with a one-line reason (admin_ready)
 *   GET  /metrics                 Prometheus text (stats.c), the last reload's result,
 *                                 readiness (admin_ready_gauge), the process (procstat.c)
 *   GET  /config                  the running configuration (conf/dump.c) below the
 *                                 last reload's time and result
 *   GET  /contract                the idempotency contract, Markdown (contract.c)
 *   GET  /contract/openapi.json   the same as an OpenAPI 3.1 document
 *   GET  /records[?limit=N]       records that need an operator
 *   GET  /records/scope?actor=A&operation=O&key=K
 *   POST /records/release?actor=A&operation=O&key=K
 *   POST /records/resolve?actor=A&operation=O&key=K&status=S[&retention=DUR]
 *        (body: the stored body; Content-Type: the stored Content-Type)
 *   GET  /ui, /ui/NAME            the operator page and its files (ui.c), which hold
 *                                 no data: the page calls the paths above
 *
 * Record statements come from records.c and run through the main thread's
 * store, so nothing here blocks. ACTOR is the stored form ("h:alice").
 *
 * Access (admin_access): with admin_token /config and every /records path
 * need "Authorization: Bearer TOKEN", and health, readiness, metrics and the
 * contract stay open for probes, scrapers and the clients the contract is
 * published to, as does the operator page's static files; without it every
 * path is served only to loopback peers that name a loopback Host (a
 * DNS-rebinding page names its own). A POST with an Origin other than the
 * listener's own (the operator page's) is always refused.
 *
 * HEAD is answered like GET, without the body; a known path asked with
 * another method gets 405 with Allow.
 */
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/queue.h>
#include <time.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/listener.h>
#include <event2/keyvalq_struct.h>
#include <libpq-fe.h>

#include "conf/conf.h"
#include "conf/dump.h"
#include "proxy/admin.h"
#include "proxy/budget.h"
#include "proxy/clock.h"
#include "proxy/contract.h"
#include "proxy/evfree.h"
#include "proxy/log.h"
#include "proxy/migrate.h"
#include "proxy/procstat.h"
#include "proxy/records.h"
#include "proxy/secrets.h"
#include "proxy/stats.h"
#include "proxy/quota.h"
#include "proxy/sweeper.h"
#include "proxy/ui.h"

#define ADMIN_TIMEOUT_S	     10
#define ADMIN_ACCEPT_PAUSE_MS 100     /* accept(2) failed (descriptors): pause this long */
#define ADMIN_WARN_INTERVAL_US 1000000
#define ADMIN_HEADERS_MAX    8192
#define ADMIN_ERR_MAX	     256
#define ADMIN_JSON	     "application/json"
#define ADMIN_HINT_INTERVAL_US 60000000 /* the schema hint: once a minute */
#define ADMIN_NAMES_MAX      512

struct admin {
	struct evhttp *http;
	const struct conf *conf;
	const struct secrets *secrets; /* conf's: the admin token */
	struct store *store;
	struct stats *const *each; /* the workers' counters */
	int nworkers;
	struct sweeper *sweeper;
	struct quota *quota; /* the quota refresher's counters, NULL: none */
	int draining; /* stopping: not ready, whatever the store says */
	int ready;    /* the last readiness check's verdict: 1 ready, 0 not, -1 none yet */
	int checking; /* a scrape's readiness check is in flight */
	LIST_HEAD(, admin_call) calls;
	/* The last reload: none yet (reload_at 0), applied, or refused with why. */
	time_t reload_at, success_at; /* success_at: start, then each applied reload */
	int reload_ok;
	char reload_err[CONF_ERR_MAX];
};

/* A records API call or a readiness check waiting for its statement. */
struct admin_call {
	LIST_ENTRY(admin_call) link;
	struct admin *a;
	struct evhttp_request *req; /* NULL: a scrape's readiness check, answered to nobody */
	enum records_cmd cmd;
	struct records_args args;
	struct records_stmt stmt;
	struct evkeyvalq query;
	unsigned char *body;
};

static void admin_reply(struct evhttp_request *req, int status, const char *type, const char *text,
			size_t len)
{
	struct evbuffer *out = evbuffer_new();

	evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type", type);
	evhttp_add_header(evhttp_request_get_output_headers(req), "Cache-Control", "no-store");
	if (out)
		evbuffer_add(out, text, len);
	evhttp_send_reply(req, status, NULL, out);
	evfree_evbuffer(&out);
}

/* {"error": msg} with status; msg is escaped for JSON, control bytes dropped. */
static void admin_error(struct evhttp_request *req, int status, const char *msg)
{
	char json[2 * ADMIN_ERR_MAX + 16];
	size_t n = 0;

	n += (size_t)snprintf(json, sizeof(json), "{\"error\":\"");
	for (; *msg && n < sizeof(json) - 8; msg++) {
		if ((unsigned char)*msg < 0x20)
			continue;
		if (*msg == '"' || *msg == '\\')
			json[n++] = '\\';
		json[n++] = *msg;
	}
	n += (size_t)snprintf(json + n, sizeof(json) - n, "\"}\n");
	admin_reply(req, status, ADMIN_JSON, json, n);
}

static void admin_call_free(struct admin_call *call)
{
	LIST_REMOVE(call, link);
	records_stmt_clear(&call->stmt);
	evhttp_clear_headers(&call->query);
	free(call->body);
	free(call);
}

/* A call waiting for a store statement: freed with the admin if it never ends. */
static struct admin_call *admin_call_new(struct admin *a, struct evhttp_request *req)
{
	struct admin_call *call = calloc(1, sizeof(*call));

	if (!call)
		return NULL;
	TAILQ_INIT(&call->query);
	LIST_INSERT_HEAD(&a->calls, call, link);
	call->a = a;
	call->req = req;
	return call;
}

static void admin_records_done(void *arg, enum store_result res, const PGresult *result)
{
	struct admin_call *call = arg;
	char token[SCOPE_TOKEN_SIZE];
	const char *tokens[] = {token};
	int status = 0;
	size_t len = 0;
	char *json = NULL;

	if (res == STORE_OK)
		json = records_render(call->cmd, result, &status, &len);
	if (res == STORE_OK && records_changed(call->cmd, &call->args, result, token))
		store_notify(call->a->store, tokens, 1);
	/* Operator actions leave a trace; the scope's actor and key stay out of it. */
	if (json && (call->cmd == RECORDS_RELEASE || call->cmd == RECORDS_RESOLVE))
		log_info(NULL, "admin: %s of a record of operation %s answered %d",
			 call->cmd == RECORDS_RELEASE ? "release" : "resolve", call->args.operation,
			 status);
	if (json)
		admin_reply(call->req, status, ADMIN_JSON, json, len);
	else if (res == STORE_OK)
		admin_error(call->req, 500, "unexpected result");
	else
		admin_error(call->req, 503, "the store is unavailable");
	free(json);
	admin_call_free(call);
}

/* The body of a resolve: the stored body, as sent. */
static int admin_take_body(struct admin_call *call)
{
	struct evbuffer *in = evhttp_request_get_input_buffer(call->req);
	size_t len = evbuffer_get_length(in);

	call->body = malloc(len + 1);
	if (!call->body)
		return -1;
	evbuffer_remove(in, call->body, len);
	call->args.body = call->body;
	call->args.body_len = len;
	call->args.content_type =
		evhttp_find_header(evhttp_request_get_input_headers(call->req), "Content-Type");
	return 0;
}

/*
 * Parse the call's query and body into args; -1 with a message in err. A
 * resolve without ?retention= gets its operation's route's retention (0
 * when no route has that name: records_stmt_build asks for one).
 */
static int admin_call_args(struct admin *a, struct admin_call *call, const char *query, char *err,
			   size_t errlen)
{
	if (records_parse_query(call->cmd, query, &call->query, &call->args, err, errlen) < 0)
		return -1;
	if (call->cmd != RECORDS_RESOLVE)
		return 0;
	if (admin_take_body(call) < 0) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	if (!call->args.retention_ms && call->args.operation)
		call->args.retention_ms = records_retention(a->conf, call->args.operation);
	return 0;
}

/* A resolve's new generation arrived: complete its statement and send it. */
static void admin_resolve_generation(void *arg, enum store_result res, const PGresult *result)
{
	struct admin_call *call = arg;
	char err[ADMIN_ERR_MAX];
	int64_t generation;

	if (res != STORE_OK || records_generation(result, &generation) < 0) {
		admin_error(call->req, 503, "the store is unavailable");
		admin_call_free(call);
		return;
	}
	if (records_stmt_resolve(&call->stmt, &call->args, call->a->secrets->seal, generation, err,
				 sizeof(err)) < 0) {
		admin_error(call->req, 500, err);
		admin_call_free(call);
		return;
	}
	store_query(call->a->store, &call->stmt.query, admin_records_done, call);
}

static void admin_records(struct admin *a, struct evhttp_request *req, enum records_cmd cmd)
{
	static const struct store_stmt generation = {
	    RECORDS_SQL_GENERATION, 0, NULL, NULL, NULL, NULL};

	struct admin_call *call = admin_call_new(a, req);
	const char *query = evhttp_uri_get_query(evhttp_request_get_evhttp_uri(req));
	char err[ADMIN_ERR_MAX];

	if (!call) {
		admin_error(req, 500, "out of memory");
		return;
	}
	call->cmd = cmd;
	if (admin_call_args(a, call, query, err, sizeof(err)) < 0 ||
	    records_stmt_build(cmd, &call->args, &call->stmt, err, sizeof(err)) < 0) {
		admin_error(req, 400, err);
		goto fail;
	}
	/* A resolve seals what it stores for the record's new generation. */
	if (cmd == RECORDS_RESOLVE)
		store_query(a->store, &generation, admin_resolve_generation, call);
	else
		store_query(a->store, &call->stmt.query, admin_records_done, call);
	return;
fail:
	admin_call_free(call);
}

static struct log_limit admin_schema_hints;

/* Not ready for reason: kept for idemproxy_ready, and answered when a request asked. */
static void admin_not_ready(struct admin *a, struct evhttp_request *req, const char *reason)
{
	char line[ADMIN_ERR_MAX + ADMIN_NAMES_MAX];
	int n = snprintf(line, sizeof(line), "not ready: %s\n", reason);

	a->ready = 0;
	if (req)
		admin_reply(req, 503, "text/plain", line,
			    (size_t)n < sizeof(line) ? (size_t)n : sizeof(line) - 1);
}

/* A readiness check is over. */
static void admin_ready_end(struct admin_call *call)
{
	if (!call->req)
		call->a->checking = 0;
	admin_call_free(call);
}

/* The schema is not what this binary needs: say so in the log too, now and then. */
static void admin_schema_not_ready(struct admin *a, struct evhttp_request *req,
				   const char *reason)
{
	int skipped;

	if (log_limit_pass(&admin_schema_hints, clock_now_us(), ADMIN_HINT_INTERVAL_US, &skipped))
		log_warn(NULL, "not ready: %s: run \"idemproxy migrate -c FILE\" against the "
			       "configured database", reason);
	admin_not_ready(a, req, reason);
}

static void admin_ready_applied(void *arg, enum store_result res, const PGresult *result)
{
	struct admin_call *call = arg;
	char names[ADMIN_NAMES_MAX], reason[ADMIN_NAMES_MAX + 64];
	int pending;

	if (res != STORE_OK) {
		admin_not_ready(call->a, call->req, "the store is unreachable");
	} else if ((pending = migrate_pending(result, names, sizeof(names))) > 0) {
		snprintf(reason, sizeof(reason), "%d migration%s pending (%s)", pending,
			 pending == 1 ? "" : "s", names);
		admin_schema_not_ready(call->a, call->req, reason);
	} else {
		call->a->ready = 1;
		if (call->req)
			admin_reply(call->req, 200, "text/plain", "ready\n", 6);
	}
	admin_ready_end(call);
}

static void admin_ready_schema(void *arg, enum store_result res, const PGresult *result)
{
	static const struct store_stmt applied = {MIGRATE_SQL_APPLIED, 0, NULL, NULL, NULL, NULL};
	struct admin_call *call = arg;

	if (res != STORE_OK || PQntuples(result) != 1)
		admin_not_ready(call->a, call->req, "the store is unreachable");
	else if (strcmp(PQgetvalue(result, 0, 0), "off") != 0)
		admin_not_ready(call->a, call->req, "the store is read-only (a standby?)");
	else if (strcmp(PQgetvalue(result, 0, 1), "t") != 0)
		admin_schema_not_ready(call->a, call->req, "the schema is missing");
	else {
		store_query(call->a->store, &applied, admin_ready_applied, call);
		return;
	}
	admin_ready_end(call);
}

/* Draining, or some worker's store connection is down: not ready, asking nothing. */
static const char *admin_not_ready_now(const struct admin *a)
{
	if (a->draining)
		return "draining: idemproxy is stopping";
	for (int i = 0; i < a->nworkers; i++)
		if (!atomic_load_explicit(&a->each[i]->store_connected, memory_order_relaxed))
			return "the store is unreachable";
	return NULL;
}

/*
 * Ready (docs/operations.md, "Readiness"): not draining, every worker's store connection
 * up, the server takes writes, and every migration compiled in is applied. With req
 * NULL (a scrape's check), the verdict is only kept.
 */
static void admin_ready(struct admin *a, struct evhttp_request *req)
{
	static const struct store_stmt schema = {MIGRATE_SQL_SCHEMA, 0, NULL, NULL, NULL, NULL};
	const char *why = admin_not_ready_now(a);
	struct admin_call *call;

	if (why) {
		admin_not_ready(a, req, why);
		return;
	}
	call = admin_call_new(a, req);
	if (!call) {
		if (req)
			admin_error(req, 500, "out of memory");
		return;
	}
	if (!req)
		a->checking = 1;
	store_query(a->store, &schema, admin_ready_schema, call);
}

/*
 * idemproxy_ready: 0 at once while draining or with a worker's store connection down,
 * else the verdict of the last readiness check (a /readyz or the scrape before this
 * one: each scrape starts one, unless the last is still in flight); 0 before any.
 */
static int admin_ready_gauge(struct admin *a)
{
	int ready = !admin_not_ready_now(a) && a->ready == 1;

	if (!a->checking)
		admin_ready(a, NULL);
	return ready;
}

static void admin_metrics(struct admin *a, struct evhttp_request *req)
{
	struct evbuffer *out = evbuffer_new();

	if (!out) {
		admin_error(req, 500, "out of memory");
		return;
	}
	struct stats_limits limits = {
		.version = IDEMPROXY_VERSION,
		.workers = a->nworkers,
		.max_connections = a->conf->max_connections,
		.replay_cache_bytes = (int64_t)a->conf->replay_cache * a->nworkers,
	};

	stats_render(out, a->each, a->nworkers, &limits);
	stats_metric(out, "idemproxy_ready", "gauge",
		     "1 while /readyz answers 200 (as of the last check), else 0.",
		     admin_ready_gauge(a));
	procstat_render(out);
	evbuffer_add_printf(out,
			    "# HELP idemproxy_config_last_reload_successful Whether the last "
			    "reload applied its file (1 at start).\n"
			    "# TYPE idemproxy_config_last_reload_successful gauge\n"
			    "idemproxy_config_last_reload_successful %d\n"
			    "# HELP idemproxy_config_last_reload_success_timestamp_seconds When the "
			    "running configuration was loaded (start or the last applied reload).\n"
			    "# TYPE idemproxy_config_last_reload_success_timestamp_seconds gauge\n"
			    "idemproxy_config_last_reload_success_timestamp_seconds %lld\n",
			    a->reload_ok, (long long)a->success_at);
	budget_render(out, a->conf->relay_budget);
	if (a->sweeper)
		sweeper_render(a->sweeper, out);
	if (a->quota)
		quota_render(a->quota, out);
	evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type",
			  "text/plain; version=0.0.4");
	evhttp_send_reply(req, 200, NULL, out);
	evbuffer_free(out);
}

/* T as RFC 3339 UTC, into buf. */
static void admin_time(time_t t, char *buf, size_t len)
{
	struct tm tm;

	gmtime_r(&t, &tm);
	strftime(buf, len, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

/*
 * The running configuration as -T prints it, below comments that say when
 * it was loaded and how the last reload went: the body still reads back as
 * a configuration file.
 */
static void admin_config(struct admin *a, struct evhttp_request *req)
{
	struct evbuffer *out = evbuffer_new();
	char when[32], ok[32];
	size_t len = 0;
	char *text = conf_dump(a->conf, &len);

	if (!out || !text) {
		admin_error(req, 500, "out of memory");
		goto out;
	}
	admin_time(a->success_at, ok, sizeof(ok));
	if (!a->reload_at) {
		evbuffer_add_printf(out, "# last reload: none; loaded at start, %s\n", ok);
	} else if (a->reload_ok) {
		admin_time(a->reload_at, when, sizeof(when));
		evbuffer_add_printf(out, "# last reload: %s ok\n", when);
	} else {
		admin_time(a->reload_at, when, sizeof(when));
		evbuffer_add_printf(out,
				    "# last reload: %s error: %s\n"
				    "# the configuration below (loaded %s) stays\n",
				    when, a->reload_err, ok);
	}
	evbuffer_add(out, text, len);
	evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type",
			  "text/plain; charset=utf-8");
	evhttp_send_reply(req, 200, NULL, out);
out:
	free(text);
	if (out)
		evbuffer_free(out);
}

/* 1 when the Host header names a loopback address or localhost, with any port. */
static int admin_loopback_host(const char *host)
{
	const char *end;

	if (!host)
		return 0;
	if (*host == '[') {
		end = strchr(host, ']');
		return end && (end[1] == '\0' || end[1] == ':') &&
		       conf_loopback(host + 1, (size_t)(end - host - 1));
	}
	end = strchr(host, ':');
	return conf_loopback(host, end ? (size_t)(end - host) : strlen(host));
}

/* 1 when the peer of req is on a loopback address. */
static int admin_loopback_peer(struct evhttp_request *req)
{
	struct evhttp_connection *conn = evhttp_request_get_connection(req);
	const struct sockaddr *sa = conn ? evhttp_connection_get_addr(conn) : NULL;
	char addr[INET6_ADDRSTRLEN];

	if (!sa)
		return 0;
	if (sa->sa_family == AF_INET)
		inet_ntop(AF_INET, &((const struct sockaddr_in *)sa)->sin_addr, addr, sizeof(addr));
	else if (sa->sa_family == AF_INET6)
		inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)sa)->sin6_addr, addr,
			  sizeof(addr));
	else
		return 0;
	return conf_loopback(addr, strlen(addr));
}

/* Does req carry the admin token? 1, or 0 with the 401 sent. */
static int admin_token_given(struct admin *a, struct evhttp_request *req)
{
	const char *auth =
	    evhttp_find_header(evhttp_request_get_input_headers(req), "Authorization");

	if (auth && strncasecmp(auth, "Bearer ", 7) == 0 &&
	    secrets_admin_token_ok(a->secrets, auth + 7, strlen(auth + 7)))
		return 1;
	evhttp_add_header(evhttp_request_get_output_headers(req), "WWW-Authenticate",
			  auth ? "Bearer error=\"invalid_token\"" : "Bearer");
	admin_error(req, 401, "the records API needs the admin token");
	return 0;
}

/*
 * 1 when origin (a POST's Origin) is this listener's own as the browser
 * names it: "http://" and the request's Host, the origin of a page that
 * the listener served under that name (the operator page). "null", and
 * every page of another scheme, host or port, is someone else's.
 */
static int admin_own_origin(const char *origin, const char *host)
{
	static const char scheme[] = "http://";
	size_t n = sizeof(scheme) - 1;

	return host && *host && strncasecmp(origin, scheme, n) == 0 &&
	       strcasecmp(origin + n, host) == 0;
}

/*
 * May req to path be served? The admin listener's one access decision,
 * made before the path is even looked up: 1, or 0 with the refusal sent.
 * A POST with an Origin (a web page's) other than the listener's own is
 * refused whatever else it has: a page elsewhere can send a form here, but
 * only the operator page may act, and only with what else it needs.
 * With admin_token the records API (every /records path) needs the token
 * and the rest is open, as probes and scrapers send the pod's address as
 * Host. Without it every path answers only a loopback peer that names a
 * loopback Host: a page whose own name was rebound to 127.0.0.1 sends that
 * name, and learns nothing (not the metrics, not the contract).
 */
static int admin_access(struct admin *a, struct evhttp_request *req, const char *path)
{
	struct evkeyvalq *in = evhttp_request_get_input_headers(req);
	/* The configuration names the files and database an attacker would want. */
	int records = strcmp(path, "/records") == 0 || strncmp(path, "/records/", 9) == 0 ||
		      strcmp(path, "/config") == 0;
	const char *origin = evhttp_find_header(in, "Origin");

	if (evhttp_request_get_command(req) == EVHTTP_REQ_POST && origin &&
	    !admin_own_origin(origin, evhttp_find_header(in, "Host"))) {
		admin_error(req, 403, "requests from web pages are not accepted");
		return 0;
	}
	if (a->secrets->admin_token)
		return !records || admin_token_given(a, req);
	if (!admin_loopback_peer(req) || !admin_loopback_host(evhttp_find_header(in, "Host"))) {
		admin_error(req, 403,
			    "without admin_token the admin listener answers loopback "
			    "clients that name a loopback Host only");
		return 0;
	}
	return 1;
}

static void admin_healthz(struct admin *a, struct evhttp_request *req)
{
	admin_reply(req, 200, "text/plain", "ok\n", 3);
}

/* The contract of the running configuration: a reload changes it. */
static void admin_contract_send(struct admin *a, struct evhttp_request *req,
				enum contract_format fmt)
{
	size_t len = 0;
	char *text = contract_render(a->conf, fmt, &len);

	if (!text) {
		admin_error(req, 500, "cannot render the contract");
		return;
	}
	admin_reply(req, 200, contract_media_type(fmt), text, len);
	free(text);
}

static void admin_contract(struct admin *a, struct evhttp_request *req)
{
	admin_contract_send(a, req, CONTRACT_MARKDOWN);
}

static void admin_contract_openapi(struct admin *a, struct evhttp_request *req)
{
	admin_contract_send(a, req, CONTRACT_OPENAPI);
}

static void admin_list(struct admin *a, struct evhttp_request *req)
{
	admin_records(a, req, RECORDS_LIST);
}

static void admin_show(struct admin *a, struct evhttp_request *req)
{
	admin_records(a, req, RECORDS_SHOW);
}

static void admin_release(struct admin *a, struct evhttp_request *req)
{
	admin_records(a, req, RECORDS_RELEASE);
}

static void admin_resolve(struct admin *a, struct evhttp_request *req)
{
	admin_records(a, req, RECORDS_RESOLVE);
}

/*
 * The operator page's file the path names, with headers that keep it
 * self-contained: its own files only (no inline script, no other site),
 * never framed (a frame could lure a click on its buttons), its types as
 * sent.
 */
static void admin_ui(struct admin *a, struct evhttp_request *req)
{
	const char *path = evhttp_uri_get_path(evhttp_request_get_evhttp_uri(req));
	const char *type = NULL;
	const struct ui_file *f = ui_lookup(path ? path : "", &type);
	struct evkeyvalq *out = evhttp_request_get_output_headers(req);

	if (!f) {
		admin_error(req, 404, "no such file of the operator page");
		return;
	}
	evhttp_add_header(out, "Content-Security-Policy", UI_CSP);
	evhttp_add_header(out, "X-Content-Type-Options", "nosniff");
	evhttp_add_header(out, "Referrer-Policy", "no-referrer");
	admin_reply(req, 200, type, (const char *)f->data, f->len);
}

/* What the admin listener serves: a path, its method, its handler. */
static const struct admin_path {
	const char *path;
	int post;	/* 1: POST; 0: GET and HEAD */
	int tree;	/* 1: the path and every path under it */
	void (*serve)(struct admin *a, struct evhttp_request *req);
} admin_paths[] = {
	{"/healthz", 0, 0, admin_healthz},
	{"/readyz", 0, 0, admin_ready},
	{"/metrics", 0, 0, admin_metrics},
	{"/config", 0, 0, admin_config},
	{"/contract", 0, 0, admin_contract},
	{"/contract/openapi.json", 0, 0, admin_contract_openapi},
	{"/records", 0, 0, admin_list},
	{"/records/scope", 0, 0, admin_show},
	{"/records/release", 1, 0, admin_release},
	{"/records/resolve", 1, 0, admin_resolve},
	{UI_PATH, 0, 1, admin_ui},
};

/* 1 when path is p's. */
static int admin_path_is(const struct admin_path *p, const char *path)
{
	size_t n = strlen(p->path);

	if (!p->tree)
		return strcmp(path, p->path) == 0;
	return strncmp(path, p->path, n) == 0 && (path[n] == '\0' || path[n] == '/');
}

/* Routes the admin path to its handler; the method must fit. */
static void admin_request(struct evhttp_request *req, void *arg)
{
	struct admin *a = arg;
	const char *path = evhttp_uri_get_path(evhttp_request_get_evhttp_uri(req));
	enum evhttp_cmd_type method = evhttp_request_get_command(req);
	const struct admin_path *p = NULL;

	if (!path)
		path = "";
	/* Nothing, not even which paths exist, is told without access. */
	if (!admin_access(a, req, path))
		return;
	for (size_t i = 0; !p && i < sizeof(admin_paths) / sizeof(admin_paths[0]); i++)
		if (admin_path_is(&admin_paths[i], path))
			p = &admin_paths[i];
	if (!p) {
		admin_error(req, 404, "no such admin endpoint");
		return;
	}
	if (p->post ? method != EVHTTP_REQ_POST
		    : method != EVHTTP_REQ_GET && method != EVHTTP_REQ_HEAD) {
		evhttp_add_header(evhttp_request_get_output_headers(req), "Allow",
				  p->post ? "POST" : "GET, HEAD");
		admin_error(req, 405, "method not allowed");
		return;
	}
	p->serve(a, req);
}

static struct log_limit admin_accept_warnings;

static void admin_resume_cb(evutil_socket_t fd, short what, void *arg)
{
	evconnlistener_enable(arg);
}

/*
 * accept(2) failed (out of descriptors, most likely): pause instead of
 * spinning on it. (arg is evhttp's; the listener lives as long as the
 * admin, and so as the loop, so the one-shot timer may hold it.)
 */
static void admin_accept_error(struct evconnlistener *l, void *arg)
{
	struct timeval tv = {0, ADMIN_ACCEPT_PAUSE_MS * 1000};
	int err = EVUTIL_SOCKET_ERROR(), skipped;

	evconnlistener_disable(l);
	event_base_once(evconnlistener_get_base(l), -1, EV_TIMEOUT, admin_resume_cb, l, &tv);
	if (log_limit_pass(&admin_accept_warnings, clock_now_us(), ADMIN_WARN_INTERVAL_US,
			   &skipped))
		log_warn(NULL, "admin: cannot accept connections: %s; pausing accepts for %dms "
			       "(%d more failures since the last message)",
			 evutil_socket_error_to_string(err), ADMIN_ACCEPT_PAUSE_MS, skipped);
}

/* Listen on the admin address, accepting for a->http. Returns 0 or -1. */
static int admin_listen(struct admin *a, struct event_base *base, const struct conf *conf)
{
	struct evconnlistener *l;
	struct sockaddr_storage ss;
	int sslen = sizeof(ss);
	char addr[300];

	if (strchr(conf->admin.host, ':'))
		snprintf(addr, sizeof(addr), "[%s]:%d", conf->admin.host, conf->admin.port);
	else
		snprintf(addr, sizeof(addr), "%s:%d", conf->admin.host, conf->admin.port);
	if (evutil_parse_sockaddr_port(addr, (struct sockaddr *)&ss, &sslen) < 0)
		return -1;
	l = evconnlistener_new_bind(base, NULL, NULL,
				    LEV_OPT_CLOSE_ON_FREE | LEV_OPT_REUSEABLE | LEV_OPT_CLOSE_ON_EXEC |
					LEV_OPT_DISABLED,
				    -1, (struct sockaddr *)&ss, sslen);
	if (!l)
		return -1;
	/* From here the listener is evhttp's: freed with it. */
	if (!evhttp_bind_listener(a->http, l)) {
		evconnlistener_free(l);
		return -1;
	}
	evconnlistener_set_error_cb(l, admin_accept_error);
	return evconnlistener_enable(l);
}

struct admin *admin_new(struct event_base *base, const struct conf *conf,
			const struct secrets *secrets, struct store *st, struct stats *const *each,
			int n, struct sweeper *sw)
{
	struct admin *a = calloc(1, sizeof(*a));

	if (!a)
		return NULL;
	a->conf = conf;
	a->secrets = secrets;
	a->store = st;
	a->each = each;
	a->nworkers = n;
	a->sweeper = sw;
	a->success_at = time(NULL);
	a->reload_ok = 1;
	a->ready = -1;
	LIST_INIT(&a->calls);
	a->http = evhttp_new(base);
	if (!a->http)
		goto fail;
	evhttp_set_timeout(a->http, ADMIN_TIMEOUT_S);
	evhttp_set_max_headers_size(a->http, ADMIN_HEADERS_MAX);
	/* A resolve's body becomes a stored body: the same limit. */
	evhttp_set_max_body_size(a->http, (ev_ssize_t)conf->max_stored_body);
	/* Every method libevent knows reaches admin_request, which answers
	 * 405 for those a path does not serve (not libevent's 501 page). */
	evhttp_set_allowed_methods(a->http, EVHTTP_REQ_GET | EVHTTP_REQ_POST | EVHTTP_REQ_HEAD |
						    EVHTTP_REQ_PUT | EVHTTP_REQ_DELETE |
						    EVHTTP_REQ_OPTIONS | EVHTTP_REQ_TRACE |
						    EVHTTP_REQ_CONNECT | EVHTTP_REQ_PATCH);
	evhttp_set_gencb(a->http, admin_request, a);
	if (admin_listen(a, base, conf) < 0) {
		log_error(NULL, "admin: cannot listen on %s:%d", conf->admin.host, conf->admin.port);
		goto fail;
	}
	log_info(NULL, "admin listening on %s:%d", conf->admin.host, conf->admin.port);
	return a;
fail:
	admin_free(a);
	return NULL;
}

void admin_reload(struct admin *a, const struct conf *conf, const struct secrets *secrets)
{
	a->conf = conf;
	a->secrets = secrets;
	evhttp_set_max_body_size(a->http, (ev_ssize_t)conf->max_stored_body);
	a->reload_at = a->success_at = time(NULL);
	a->reload_ok = 1;
	a->reload_err[0] = '\0';
}

void admin_reload_failed(struct admin *a, const char *err)
{
	char *c;

	a->reload_at = time(NULL);
	a->reload_ok = 0;
	snprintf(a->reload_err, sizeof(a->reload_err), "%s", err);
	/* One comment line in GET /config, whatever a file name holds. */
	for (c = a->reload_err; *c; c++)
		if (*c == '\n' || *c == '\r')
			*c = ' ';
}

void admin_draining(struct admin *a)
{
	a->draining = 1;
}

/* The store is gone (see admin.h): calls still waiting get no answer. */
void admin_free(struct admin *a)
{
	if (!a)
		return;
	while (!LIST_EMPTY(&a->calls))
		admin_call_free(LIST_FIRST(&a->calls));
	evfree_http(&a->http);
	free(a);
}

void admin_set_quota(struct admin *a, struct quota *q)
{
	a->quota = q;
}
