/* Unit tests for conf/conf.c: the file format, directives, defaults, errors. */
#include "conf/conf.h"
#include "http/header.h"
#include "proxy/lookup.h"
#include "tests/unit/unit.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <unistd.h>

#define UPSTREAM "upstream http://127.0.0.1:3000\n"

static char err[CONF_ERR_MAX];

/* Parse TEXT as "t.conf"; returns the conf or NULL (message in err). */
static struct conf *parse(const char *text)
{
	struct conf *c = NULL;

	err[0] = '\0';
	if (conf_parse("t.conf", text, strlen(text), &c, err, sizeof(err)))
		return NULL;
	return c;
}

/* Parse TEXT, which must fail with exactly WANT. */
static void bad(const char *text, const char *want, int line)
{
	struct conf *c = parse(text);

	if (c) {
		unit_failed++;
		fprintf(stderr, "%s:%d: parsed but expected \"%s\"\n", __FILE__, line, want);
		conf_free(c);
		return;
	}
	if (strcmp(err, want) == 0) {
		unit_passed++;
		return;
	}
	unit_failed++;
	fprintf(stderr, "%s:%d: got \"%s\", want \"%s\"\n", __FILE__, line, err, want);
}

#define BAD(text, want) bad(text, want, __LINE__)

static void test_durations(void)
{
	int64_t ms = -1;
	size_t sz = 1;

	CHECK(conf_parse_duration("250ms", &ms) == 0 && ms == 250);
	CHECK(conf_parse_duration("30s", &ms) == 0 && ms == 30000);
	CHECK(conf_parse_duration("5m", &ms) == 0 && ms == 300000);
	CHECK(conf_parse_duration("24h", &ms) == 0 && ms == 86400000);
	CHECK(conf_parse_duration("7d", &ms) == 0 && ms == 7LL * 86400000);
	CHECK(conf_parse_duration("0s", &ms) == 0 && ms == 0);
	CHECK(conf_parse_duration("30", &ms) == -1);
	CHECK(conf_parse_duration("5x", &ms) == -1);
	CHECK(conf_parse_duration("", &ms) == -1);
	CHECK(conf_parse_duration("s", &ms) == -1);
	CHECK(conf_parse_duration("-5s", &ms) == -1);
	CHECK(conf_parse_duration("+5s", &ms) == -1);
	CHECK(conf_parse_duration("5 s", &ms) == -1);
	CHECK(conf_parse_duration("5S", &ms) == -1);
	CHECK(conf_parse_duration("1h30m", &ms) == -1);
	CHECK(conf_parse_duration("99999999999999999999d", &ms) == -1);
	CHECK(conf_parse_duration("9223372036854775807ms", &ms) == -1);
	CHECK(conf_parse_duration("36500d", &ms) == 0);
	CHECK(conf_parse_duration("36501d", &ms) == -1);

	CHECK(conf_parse_size("512", &sz) == 0 && sz == 512);
	CHECK(conf_parse_size("64k", &sz) == 0 && sz == 65536);
	CHECK(conf_parse_size("64K", &sz) == 0 && sz == 65536);
	CHECK(conf_parse_size("1m", &sz) == 0 && sz == 1048576);
	CHECK(conf_parse_size("1M", &sz) == 0 && sz == 1048576);
	CHECK(conf_parse_size("1g", &sz) == 0 && sz == 1073741824);
	CHECK(conf_parse_size("0", &sz) == 0 && sz == 0);
	CHECK(conf_parse_size("-1", &sz) == -1);
	CHECK(conf_parse_size("", &sz) == -1);
	CHECK(conf_parse_size("k", &sz) == -1);
	CHECK(conf_parse_size("1kb", &sz) == -1);
	CHECK(conf_parse_size("1t", &sz) == -1);
	CHECK(conf_parse_size("1.5m", &sz) == -1);
	CHECK(conf_parse_size("99999999999999999999", &sz) == -1);
	CHECK(conf_parse_size("18014398509481984k", &sz) == -1);
}

static void test_defaults(void)
{
	struct conf *c = parse(UPSTREAM);
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);

	CHECK(c != NULL);
	if (!c)
		return;
	CHECK_STR(c->file, "t.conf");
	CHECK_STR(c->listen.host, "127.0.0.1");
	CHECK(c->listen.port == 8080);
	CHECK_STR(c->upstream_url, "http://127.0.0.1:3000");
	CHECK_STR(c->upstream_host, "127.0.0.1");
	CHECK(c->upstream_port == 3000);
	CHECK_STR(c->upstream_hostport, "127.0.0.1:3000");
	CHECK(c->database == NULL);
	CHECK(c->admin.host == NULL);
	CHECK(c->workers == (cpus < 1 ? 1 : cpus > 256 ? 256 : cpus));
	CHECK_STR(c->key_header, "Idempotency-Key");
	CHECK(c->mismatch_status == 422);
	CHECK(c->upstream_timeout_ms == 30000);
	CHECK(c->client_timeout_ms == 60000);
	CHECK(c->store_timeout_ms == 5000);
	CHECK(c->lease_ms == 60000);
	CHECK(c->shutdown_timeout_ms == 20000);
	CHECK(c->sweep_interval_ms == 10000);
	CHECK(c->max_request_body == 1048576);
	CHECK(c->max_stored_body == 1048576);
	CHECK(c->relay_budget == 256u << 20);
	CHECK(c->relay_budget_per_peer == 64u << 20);
	CHECK(c->store_unavailable == STORE_FAIL_CLOSED);
	CHECK_STR(c->problem_base, "https://idemproxy.dev/problems/");
	CHECK(c->max_connections == 8000);
	CHECK(c->ntrusted_proxies == 0);
	CHECK(c->underscores_in_headers == 0);
	CHECK(c->nroutes == 0);
	conf_free(c);

	c = parse(UPSTREAM "underscores_in_headers on\n");
	CHECK(c && c->underscores_in_headers == 1);
	conf_free(c);
	BAD(UPSTREAM "underscores_in_headers yes\n",
	    "t.conf:2: invalid underscores_in_headers \"yes\" (off or on)");

	/* an implicit lease follows upstream_timeout */
	c = parse(UPSTREAM "upstream_timeout 2m\n");
	CHECK(c && c->lease_ms == 150000);
	conf_free(c);
}

static void test_top_level(void)
{
	struct conf *c = parse("# a comment\n"
			       "listen 0.0.0.0:80\n"
			       "upstream http://api.internal:8000/\n"
			       "database \"host=/var/run/postgresql dbname=idem\"\n"
			       "admin [::1]:9901\n"
			       "workers 3\n"
			       "key_header X-Idem-Key\n"
			       "mismatch_status 409\n"
			       "upstream_timeout 10s\n"
			       "client_timeout 1m\n"
			       "store_timeout 250ms\n"
			       "lease 1h\n"
			       "shutdown_timeout 5s\n"
			       "max_request_body 64k\n"
			       "max_stored_body 2M\n"
			       "store_unavailable fail-open\n"
			       "problem_base https://example.com/p/\n");

	CHECK(c != NULL);
	if (!c) {
		fprintf(stderr, "%s\n", err);
		return;
	}
	CHECK_STR(c->listen.host, "0.0.0.0");
	CHECK(c->listen.port == 80);
	CHECK_STR(c->upstream_host, "api.internal");
	CHECK(c->upstream_port == 8000);
	CHECK_STR(c->upstream_hostport, "api.internal:8000");
	CHECK_STR(c->database, "host=/var/run/postgresql dbname=idem");
	CHECK_STR(c->admin.host, "::1");
	CHECK(c->admin.port == 9901);
	CHECK(c->workers == 3);
	CHECK_STR(c->key_header, "X-Idem-Key");
	CHECK(c->mismatch_status == 409);
	CHECK(c->upstream_timeout_ms == 10000);
	CHECK(c->client_timeout_ms == 60000);
	CHECK(c->store_timeout_ms == 250);
	CHECK(c->lease_ms == 3600000);
	CHECK(c->shutdown_timeout_ms == 5000);
	CHECK(c->max_request_body == 65536);
	CHECK(c->max_stored_body == 2097152);
	CHECK(c->store_unavailable == STORE_FAIL_OPEN);
	CHECK_STR(c->problem_base, "https://example.com/p/");
	conf_free(c);

	/* the relay budget: sizes, 0 turns either off */
	c = parse(UPSTREAM "relay_budget 4m\nrelay_budget_per_peer 0\n");
	CHECK(c && c->relay_budget == 4u << 20 && c->relay_budget_per_peer == 0);
	conf_free(c);

	c = parse("upstream http://example.com\nadmin off\nworkers auto\n");
	CHECK(c && c->upstream_port == 80 && strcmp(c->upstream_hostport, "example.com") == 0);
	CHECK(c && c->admin.host == NULL && c->workers >= 1);
	conf_free(c);

	c = parse("upstream HTTP://[::1]:3000\nlisten [::]:8080\n");
	CHECK(c && strcmp(c->upstream_host, "::1") == 0 && c->upstream_port == 3000);
	CHECK(c && strcmp(c->upstream_hostport, "[::1]:3000") == 0);
	CHECK(c && strcmp(c->listen.host, "::") == 0 && c->listen.port == 8080);
	conf_free(c);
}

static void test_routes(void)
{
	const struct route *r;
	struct conf *c = parse(UPSTREAM "actor header X-Actor-Id\n"
					"route course.create {\n"
					"\tmatch post /api/courses\n"
					"\tmatch PUT /api/courses/{id}\n"
					"\tkey optional\n"
					"\tfingerprint json title:trim topic lessons:int a.b:lower "
					"n:number s:string\n"
					"\tretention 7d\n"
					"\trelease_on 4xx 501 200\n"
					"\tunknown_on 599\n"
					"\tstore_headers X-Cost Retry-After\n"
					"\tin_progress reject\n"
					"\trecovery hold\n"
					"\tactor anonymous\n"
					"}\n"
					"route b { # comment after the brace\n"
					"  match POST /b\n"
					"}\n"
					"retention 1h\n"
					"fingerprint body\n"
					"key required\n"
					"release_on 409\n"
					"unknown_on 500\n"
					"store_headers X-Top\n");

	CHECK(c != NULL);
	if (!c) {
		fprintf(stderr, "%s\n", err);
		return;
	}
	CHECK(c->nroutes == 2);
	r = &c->routes[0];
	CHECK_STR(r->operation, "course.create");
	CHECK(r->line == 3);
	CHECK(r->nmatches == 2);
	CHECK_STR(r->matches[0].method, "POST");
	CHECK(r->matches[0].line == 4);
	CHECK_STR(r->matches[1].method, "PUT");
	CHECK(r->matches[1].nsegs == 3 && r->matches[1].segs[2].kind == SEG_PARAM);
	CHECK(r->actor == ACTOR_ANONYMOUS && r->actor_header == NULL);
	CHECK(r->key == KEY_OPTIONAL);
	CHECK(r->fingerprint == FP_JSON);
	CHECK(r->nfields == 6);
	if (r->nfields == 6) {
		CHECK_STR(r->fields[0].path, "title");
		CHECK(r->fields[0].transform == FPT_TRIM);
		CHECK_STR(r->fields[1].path, "topic");
		CHECK(r->fields[1].transform == FPT_NONE);
		CHECK(r->fields[2].transform == FPT_INT);
		CHECK_STR(r->fields[3].path, "a.b");
		CHECK(r->fields[3].transform == FPT_LOWER);
		CHECK(r->fields[4].transform == FPT_NUMBER);
		CHECK(r->fields[5].transform == FPT_STRING);
	}
	CHECK(r->retention_ms == 7LL * 86400000);
	CHECK(status_set_has(&r->release_on, 400) && status_set_has(&r->release_on, 499));
	CHECK(status_set_has(&r->release_on, 501) && !status_set_has(&r->release_on, 599));
	CHECK(status_set_has(&r->release_on, 200) && !status_set_has(&r->release_on, 201));
	CHECK(!status_set_has(&r->release_on, 399) && !status_set_has(&r->release_on, 600));
	CHECK(status_set_has(&r->unknown_on, 599) && !status_set_has(&r->unknown_on, 502));
	CHECK(r->nstore_headers == 2);
	CHECK(r->nstore_headers == 2 && strcmp(r->store_headers[1], "Retry-After") == 0);
	CHECK(r->in_progress == IN_PROGRESS_REJECT);
	CHECK(r->recovery == RECOVERY_HOLD);

	/* route b takes every top-level default, even those set after it */
	r = &c->routes[1];
	CHECK_STR(r->operation, "b");
	CHECK(r->actor == ACTOR_HEADER);
	CHECK_STR(r->actor_header, "X-Actor-Id");
	CHECK(r->key == KEY_REQUIRED);
	CHECK(r->fingerprint == FP_BODY && r->nfields == 0);
	CHECK(r->retention_ms == 3600000);
	CHECK(status_set_has(&r->release_on, 409) && !status_set_has(&r->release_on, 400));
	CHECK(status_set_has(&r->unknown_on, 500) && !status_set_has(&r->unknown_on, 502));
	CHECK(r->nstore_headers == 1 && strcmp(r->store_headers[0], "X-Top") == 0);
	conf_free(c);
}

static void test_route_defaults(void)
{
	const struct route *r;
	struct conf *c = parse(UPSTREAM "route x {\nmatch POST /x\nactor header A\n}\n"
					"fingerprint json a:trim b\n"
					"route y {\nmatch POST /y\nrecovery forward\n}\n"
					"actor anonymous\nin_progress wait 1500ms\n"
					"sweep_interval off\n");
	int st;

	CHECK(c && c->nroutes == 2);
	if (!c) {
		fprintf(stderr, "%s\n", err);
		return;
	}
	r = &c->routes[0];
	CHECK(r->actor == ACTOR_HEADER && strcmp(r->actor_header, "A") == 0);
	CHECK(r->key == KEY_REQUIRED);
	CHECK(r->fingerprint == FP_JSON && r->nfields == 2);
	CHECK(r->nfields == 2 && strcmp(r->fields[0].path, "a") == 0 &&
	      r->fields[0].transform == FPT_TRIM && strcmp(r->fields[1].path, "b") == 0);
	CHECK(r->retention_ms == 86400000);
	for (st = 100; st < 600; st++) {
		if (status_set_has(&r->release_on, st) != ((st >= 400 && st < 500) || st == 503))
			break;
		if (status_set_has(&r->unknown_on, st) != (st == 502 || st == 504))
			break;
	}
	CHECK(st == 600);
	CHECK(r->nstore_headers == 0 && r->store_headers == NULL);
	CHECK(r->in_progress == IN_PROGRESS_WAIT && r->in_progress_wait_ms == 1500);
	CHECK(r->recovery == RECOVERY_HOLD);
	CHECK(c->sweep_interval_ms == 0);
	r = &c->routes[1];
	CHECK(r->in_progress == IN_PROGRESS_WAIT && r->in_progress_wait_ms == 1500);
	CHECK(r->recovery == RECOVERY_FORWARD);
	CHECK(r->actor == ACTOR_ANONYMOUS);
	CHECK(r->nfields == 2);
	conf_free(c);

	c = parse(UPSTREAM "actor anonymous\nroute z {\nmatch POST /z\n}\n");
	CHECK(c && c->routes[0].fingerprint == FP_JSON && c->routes[0].nfields == 0);
	CHECK(c && c->routes[0].fields == NULL);
	conf_free(c);
}

/* max_owners, actor_max_owners and forward_key: defaults, inheritance, a route's own off. */
static void test_admission(void)
{
	const struct route *r;
	struct conf *c = parse(UPSTREAM "actor anonymous\nroute a {\nmatch POST /a\n}\n");

	CHECK(c && c->max_owners == 0 && c->routes[0].actor_max_owners == -1);
	CHECK(c && c->routes[0].forward_key == FORWARD_KEY_OFF &&
	      c->routes[0].forward_key_header == NULL);
	conf_free(c);
	c = parse(UPSTREAM "actor anonymous\nmax_owners 50\nactor_max_owners 4\n"
			   "forward_key X-Upstream-Key\n"
			   "route a {\nmatch POST /a\n}\n"
			   "route b {\nmatch POST /b\nactor_max_owners off\nforward_key off\n}\n"
			   "route c {\nmatch POST /c\nactor_max_owners 9\n"
			   "forward_key Idempotency-Key raw\n}\n"
			   "route d {\nmatch POST /d\nactor_max_owners 0\n}\n");
	CHECK(c && c->nroutes == 4);
	if (!c) {
		fprintf(stderr, "%s\n", err);
		return;
	}
	CHECK(c->max_owners == 50);
	r = c->routes;
	CHECK(r[0].actor_max_owners == 4 && r[0].forward_key == FORWARD_KEY_SCOPED &&
	      strcmp(r[0].forward_key_header, "X-Upstream-Key") == 0);
	CHECK(r[1].actor_max_owners == -1 && r[1].forward_key == FORWARD_KEY_OFF);
	CHECK(r[2].actor_max_owners == 9 && r[2].forward_key == FORWARD_KEY_RAW &&
	      strcmp(r[2].forward_key_header, "Idempotency-Key") == 0);
	CHECK(r[3].actor_max_owners == -1 && r[3].forward_key == FORWARD_KEY_SCOPED);
	conf_free(c);
	c = parse(UPSTREAM "actor anonymous\nmax_owners 0\nroute a {\nmatch POST /a\n}\n");
	CHECK(c && c->max_owners == 0);
	conf_free(c);

	BAD(UPSTREAM "max_owners -1\n",
	    "t.conf:2: invalid max_owners \"-1\" (off, or 0-1000000; 0 is off)");
	BAD(UPSTREAM "max_owners 1 2\n", "t.conf:2: \"max_owners\" needs 1 argument");
	BAD(UPSTREAM "route x {\nmatch POST /x\nactor_max_owners lots\n}\n",
	    "t.conf:4: invalid actor_max_owners \"lots\" (off, or 0-1000000; 0 is off)");
	BAD(UPSTREAM "route x {\nmatch POST /x\nmax_owners 3\n}\n",
	    "t.conf:4: \"max_owners\" is not allowed inside a route block");
	BAD(UPSTREAM "forward_key Bad:Name\n", "t.conf:2: invalid header name \"Bad:Name\"");
	BAD(UPSTREAM "forward_key Host\n",
	    "t.conf:2: forward_key cannot set \"Host\": idemproxy writes that header itself");
	BAD(UPSTREAM "forward_key X-Request-Id\n",
	    "t.conf:2: forward_key cannot set \"X-Request-Id\": idemproxy writes that header "
	    "itself");
	BAD(UPSTREAM "forward_key Connection\n",
	    "t.conf:2: forward_key cannot set \"Connection\": idemproxy writes that header itself");
	BAD(UPSTREAM "forward_key X-Key digest\n",
	    "t.conf:2: invalid forward_key mode \"digest\" (scoped or raw)");
	BAD(UPSTREAM "forward_key off scoped\n", "t.conf:2: \"forward_key off\" takes no arguments");
	BAD(UPSTREAM "forward_key a b c\n", "t.conf:2: \"forward_key\" needs 1 to 2 arguments");
}

/* Quotas (top level) and expired_keys (top level, inherited by routes). */
static void test_quotas(void)
{
	struct conf *c = parse(UPSTREAM);

	CHECK(c && c->actor_max_records == 0 && c->actor_max_stored_bytes == 0 &&
	      c->quota_refresh_ms == 5000);
	conf_free(c);
	c = parse(UPSTREAM "actor_max_records 1000\nactor_max_stored_bytes 64m\n"
			   "quota_refresh 250ms\nexpired_keys refuse 1h\nactor anonymous\n"
			   "route x {\nmatch POST /x\n}\n"
			   "route y {\nmatch POST /y\nexpired_keys run\n}\n"
			   "route z {\nmatch POST /z\nexpired_keys refuse 90s\n}\n");
	CHECK(c != NULL);
	if (!c) {
		fprintf(stderr, "%s\n", err);
		return;
	}
	CHECK(c->actor_max_records == 1000);
	CHECK(c->actor_max_stored_bytes == 64u << 20);
	CHECK(c->quota_refresh_ms == 250);
	CHECK(c->routes[0].expired_keys == EXPIRED_KEYS_REFUSE &&
	      c->routes[0].expired_keys_ms == 3600000);
	CHECK(c->routes[1].expired_keys == EXPIRED_KEYS_RUN);
	CHECK(c->routes[2].expired_keys == EXPIRED_KEYS_REFUSE &&
	      c->routes[2].expired_keys_ms == 90000);
	conf_free(c);
	c = parse(UPSTREAM "actor anonymous\nroute x {\nmatch POST /x\n}\n");
	CHECK(c && c->routes[0].expired_keys == EXPIRED_KEYS_RUN);
	conf_free(c);
	BAD(UPSTREAM "actor_max_records -1\n",
	    "t.conf:2: invalid actor_max_records \"-1\" (0-2147483647)");
	BAD(UPSTREAM "actor_max_records many\n",
	    "t.conf:2: invalid actor_max_records \"many\" (0-2147483647)");
	BAD(UPSTREAM "actor_max_stored_bytes lots\n", "t.conf:2: invalid size \"lots\"");
	BAD(UPSTREAM "quota_refresh 0s\n", "t.conf:2: \"quota_refresh\" must be greater than 0");
	BAD(UPSTREAM "expired_keys refuse\n", "t.conf:2: \"expired_keys refuse\" takes a duration");
	BAD(UPSTREAM "expired_keys refuse 0s\n",
	    "t.conf:2: \"expired_keys\" must be greater than 0");
	BAD(UPSTREAM "expired_keys keep\n",
	    "t.conf:2: invalid expired_keys \"keep\" (run or refuse DUR)");
	BAD(UPSTREAM "expired_keys run 5s\n", "t.conf:2: \"expired_keys run\" takes no arguments");
	BAD(UPSTREAM "route x {\nmatch POST /x\nexpired_keys refuse 1h 2h\n}\n",
	    "t.conf:4: \"expired_keys\" needs 1 to 2 arguments");
}

static void test_lexer(void)
{
	struct conf *c;

	c = parse("upstream http://h:1 # trailing comment\n"
		  "   \t  \n"
		  "#only a comment\n"
		  "database \"a \\\"quoted\\\" \\\\ value # not a comment\"  # comment\n"
		  "problem_base \"x#y\"\r\n"
		  "key_header\tX-K\n"
		  "listen 127.0.0.1:1#comment right after\n"
		  "admin 127.0.0.1:2");
	CHECK(c != NULL);
	if (!c) {
		fprintf(stderr, "%s\n", err);
		return;
	}
	CHECK_STR(c->database, "a \"quoted\" \\ value # not a comment");
	CHECK_STR(c->problem_base, "x#y");
	CHECK_STR(c->key_header, "X-K");
	CHECK(c->listen.port == 1);
	CHECK(c->admin.port == 2);
	conf_free(c);

	c = parse(UPSTREAM "database \"\"\n");
	CHECK(c && c->database && c->database[0] == '\0');
	conf_free(c);

	BAD(UPSTREAM "database \"abc\n", "t.conf:2: unterminated quoted argument");
	BAD(UPSTREAM "database \"abc\\\"\n", "t.conf:2: unterminated quoted argument");
	BAD(UPSTREAM "database \"a\\nb\"\n",
	    "t.conf:2: invalid escape in quoted argument (only \\\" and \\\\)");
	BAD(UPSTREAM "database \"a\"b\n",
	    "t.conf:2: a quoted argument must be followed by a blank");
	BAD(UPSTREAM "database a\"b\"\n",
	    "t.conf:2: unexpected \" inside an argument (quote the whole argument)");
	BAD(UPSTREAM "database a\001b\n", "t.conf:2: invalid character 0x01");
	BAD(UPSTREAM "database \"a\001b\"\n", "t.conf:2: invalid character 0x01");
	{
		static const char nul[] = "upstream http://h\nkey\0required\n";
		struct conf *n = NULL;

		CHECK(conf_parse("t.conf", nul, sizeof(nul) - 1, &n, err, sizeof(err)) == -1);
		CHECK_STR(err, "t.conf:2: invalid character 0x00");
	}
}

static void test_errors(void)
{
	BAD("", "t.conf:1: \"upstream\" is required");
	BAD("listen 127.0.0.1:1\n\n", "t.conf:2: \"upstream\" is required");
	BAD(UPSTREAM "foo bar\n", "t.conf:2: unknown directive \"foo\"");
	BAD(UPSTREAM "retention\n", "t.conf:2: \"retention\" needs 1 argument");
	BAD(UPSTREAM "retention 1h 2h\n", "t.conf:2: \"retention\" needs 1 argument");
	BAD(UPSTREAM "route x {\nmatch POST\n}\n", "t.conf:3: \"match\" needs 2 arguments");
	BAD(UPSTREAM "release_on\n", "t.conf:2: \"release_on\" needs at least 1 argument");
	BAD(UPSTREAM "in_progress a b c\n", "t.conf:2: \"in_progress\" needs 1 to 2 arguments");
	BAD(UPSTREAM "retention 5x\n", "t.conf:2: invalid duration \"5x\"");
	BAD(UPSTREAM "retention 30\n", "t.conf:2: invalid duration \"30\"");
	BAD(UPSTREAM "retention 99999999999999999999s\n",
	    "t.conf:2: invalid duration \"99999999999999999999s\"");
	BAD(UPSTREAM "retention 0s\n", "t.conf:2: \"retention\" must be greater than 0");
	BAD(UPSTREAM "store_timeout 0ms\n", "t.conf:2: \"store_timeout\" must be greater than 0");
	BAD(UPSTREAM "max_request_body -1\n", "t.conf:2: invalid size \"-1\"");
	BAD(UPSTREAM "max_request_body 0\n", "t.conf:2: \"max_request_body\" must be greater than 0");
	BAD(UPSTREAM "max_stored_body 0\n", "t.conf:2: \"max_stored_body\" must be greater than 0");
	BAD(UPSTREAM "max_connections 0\n", "t.conf:2: invalid max_connections \"0\" (1-1000000)");
	BAD(UPSTREAM "trusted_proxies 10.0.0.0/8 10.1.2.3/8\n",
	    "t.conf:2: invalid trusted_proxies block \"10.1.2.3/8\" (an IPv4 or IPv6 address, "
	    "/BITS optional, with no bits set past the prefix)");
	BAD(UPSTREAM "trusted_proxies 10.0.0.0/33\n",
	    "t.conf:2: invalid trusted_proxies block \"10.0.0.0/33\" (an IPv4 or IPv6 address, "
	    "/BITS optional, with no bits set past the prefix)");
	BAD(UPSTREAM "trusted_proxies proxy.local\n",
	    "t.conf:2: invalid trusted_proxies block \"proxy.local\" (an IPv4 or IPv6 address, "
	    "/BITS optional, with no bits set past the prefix)");
	BAD(UPSTREAM "max_stored_body 1x\n", "t.conf:2: invalid size \"1x\"");
	BAD(UPSTREAM "release_on 99\n", "t.conf:2: invalid status \"99\"");
	BAD(UPSTREAM "release_on 600\n", "t.conf:2: invalid status \"600\"");
	BAD(UPSTREAM "release_on 6xx\n", "t.conf:2: invalid status \"6xx\"");
	BAD(UPSTREAM "release_on 4x\n", "t.conf:2: invalid status \"4x\"");
	BAD(UPSTREAM "unknown_on 5xx\n", "t.conf:2: invalid status \"5xx\"");
	BAD(UPSTREAM "unknown_on 0502\n", "t.conf:2: invalid status \"0502\"");

	/* route structure */
	BAD(UPSTREAM "actor anonymous\nroute x {\n}\n", "t.conf:3: route \"x\" has no \"match\"");
	BAD(UPSTREAM "route x {\nmatch POST /x\n}\n",
	    "t.conf:2: route \"x\" has no actor source (set \"actor\" in the route or at top "
	    "level)");
	BAD(UPSTREAM "actor anonymous\n"
		     "route course.create {\nmatch POST /a\n}\n"
		     "route course.create {\nmatch POST /b\n}\n",
	    "t.conf:6: duplicate route \"course.create\" (first defined at line 3)");
	BAD(UPSTREAM "route x {\nmatch POST api\n}\n",
	    "t.conf:3: invalid path template \"api\": must start with \"/\"");
	BAD(UPSTREAM "}\n", "t.conf:2: \"}\" without an open block");
	BAD(UPSTREAM "route x {\nmatch POST /x\n} x\n",
	    "t.conf:4: \"}\" must be alone on its line");
	BAD(UPSTREAM "route x {\nmatch POST /x\n",
	    "t.conf:3: unterminated block \"route x\" opened at line 2");
	BAD(UPSTREAM "route x {\nmatch POST /x\nroute y {\n",
	    "t.conf:4: nested blocks are not allowed (\"route x\" opened at line 2)");
	BAD(UPSTREAM "listen 127.0.0.1:1 {\n", "t.conf:2: \"listen\" cannot open a block");
	BAD(UPSTREAM "route x\n", "t.conf:2: \"route\" must open a block: route NAME {");
	BAD(UPSTREAM "route {\n", "t.conf:2: \"route\" needs 1 argument");
	BAD(UPSTREAM "route x \"{\"\n", "t.conf:2: \"route\" must open a block: route NAME {");
	BAD(UPSTREAM "route x\n{\n", "t.conf:2: \"route\" must open a block: route NAME {");
	BAD(UPSTREAM "{\n", "t.conf:2: \"{\" must end the line that opens the block");
	BAD(UPSTREAM "route \"a b\" {\n",
	    "t.conf:2: invalid operation name \"a b\" (1-128 characters of A-Z a-z 0-9 . _ : "
	    "-)");
	BAD(UPSTREAM "route \"\" {\n",
	    "t.conf:2: invalid operation name \"\" (1-128 characters of A-Z a-z 0-9 . _ : -)");
	BAD(UPSTREAM "route x {\nlisten 127.0.0.1:1\n",
	    "t.conf:3: \"listen\" is not allowed inside a route block");
	BAD(UPSTREAM "match POST /x\n", "t.conf:2: \"match\" is only allowed inside a route block");
	BAD(UPSTREAM "retention 1h\nretention 2h\n",
	    "t.conf:3: duplicate directive \"retention\" (first set at line 2)");
	BAD(UPSTREAM "route x {\nkey required\nkey optional\n",
	    "t.conf:4: duplicate directive \"key\" (first set at line 3)");
	BAD(UPSTREAM UPSTREAM, "t.conf:2: duplicate directive \"upstream\" (first set at line 1)");

	/* directive values */
	BAD(UPSTREAM "actor jwt\n", "t.conf:2: \"actor jwt\" needs a key file (a JWKS document)");
	BAD(UPSTREAM "actor jwt k.json iss=x\n",
	    "t.conf:2: unknown \"actor jwt\" option \"iss=x\" (issuer=, audience=, claim=, "
	    "leeway=, header= or require=)");
	BAD(UPSTREAM "actor jwt k.json claim=a claim=b\n",
	    "t.conf:2: \"actor jwt\" option \"claim\" given twice");
	BAD(UPSTREAM "actor jwt k.json audience=\n",
	    "t.conf:2: \"actor jwt\" option \"audience\" needs a value");
	BAD(UPSTREAM "actor jwt k.json leeway=30\n",
	    "t.conf:2: invalid duration \"30\"");
	BAD(UPSTREAM "actor jwt k.json \"header=X Y\"\n", "t.conf:2: invalid header name \"X Y\"");
	BAD(UPSTREAM "actor jwt k.json require=nbf\n",
	    "t.conf:2: \"actor jwt\" option require= takes \"exp\", not \"nbf\"");
	BAD(UPSTREAM "actor jwt k.json require=exp require=exp\n",
	    "t.conf:2: \"actor jwt\" option \"require\" given twice");
	BAD(UPSTREAM "actor authorization x\n",
	    "t.conf:2: \"actor authorization\" takes no arguments");
	BAD(UPSTREAM "actor cookie\n",
	    "t.conf:2: unknown actor source \"cookie\" (header, jwt, authorization or anonymous)");
	BAD(UPSTREAM "actor header\n", "t.conf:2: \"actor header\" needs 1 header name");
	BAD(UPSTREAM "actor header \"X A\"\n", "t.conf:2: invalid header name \"X A\"");
	BAD(UPSTREAM "actor anonymous x\n", "t.conf:2: \"actor anonymous\" takes no arguments");
	BAD(UPSTREAM "in_progress wait\n", "t.conf:2: \"in_progress wait\" takes a duration");
	BAD(UPSTREAM "in_progress wait 0s\n", "t.conf:2: \"in_progress\" must be greater than 0");
	BAD(UPSTREAM "in_progress wait x\n", "t.conf:2: invalid duration \"x\"");
	BAD(UPSTREAM "in_progress hold\n",
	    "t.conf:2: invalid in_progress \"hold\" (reject or wait DUR)");
	BAD(UPSTREAM "sweep_interval soon\n", "t.conf:2: invalid duration \"soon\"");
	BAD(UPSTREAM "in_progress reject 5s\n",
	    "t.conf:2: \"in_progress reject\" takes no arguments");
	BAD(UPSTREAM "recovery x\n", "t.conf:2: invalid recovery \"x\" (hold or forward)");
	BAD(UPSTREAM "key maybe\n", "t.conf:2: invalid key mode \"maybe\" (required or optional)");
	BAD(UPSTREAM "fingerprint xml\n",
	    "t.conf:2: invalid fingerprint \"xml\" (json, body or none)");
	BAD(UPSTREAM "fingerprint body a\n", "t.conf:2: \"fingerprint body\" takes no fields");
	BAD(UPSTREAM "fingerprint json a..b\n",
	    "t.conf:2: invalid fingerprint field \"a..b\" (a dot path of non-empty names)");
	BAD(UPSTREAM "fingerprint json .a\n",
	    "t.conf:2: invalid fingerprint field \".a\" (a dot path of non-empty names)");
	BAD(UPSTREAM "fingerprint json :trim\n",
	    "t.conf:2: invalid fingerprint field \":trim\" (a dot path of non-empty names)");
	BAD(UPSTREAM "fingerprint json a:upper\n",
	    "t.conf:2: invalid transform \"upper\" in \"a:upper\" (trim, lower, int, number or "
	    "string)");
	BAD(UPSTREAM "fingerprint json a a:trim\n", "t.conf:2: duplicate fingerprint field \"a\"");
	BAD(UPSTREAM "store_headers Set-Cookie\n",
	    "t.conf:2: header \"Set-Cookie\" is never stored (credentials and hop-by-hop "
	    "headers)");
	BAD(UPSTREAM "store_headers X-A \"X B\"\n", "t.conf:2: invalid header name \"X B\"");
	BAD(UPSTREAM "actor anonymous\nrelease_on 5xx\nroute x {\nmatch POST /x\n}\n",
	    "t.conf:4: route \"x\": status 502 is in both \"release_on\" and \"unknown_on\"");
	BAD(UPSTREAM "route x {\nmatch \"PO ST\" /x\n",
	    "t.conf:3: invalid method \"PO ST\" (letters, \"-\" and \"_\": requests with any "
	    "other method are refused)");
	BAD(UPSTREAM "route x {\nmatch PO.ST /x\n",
	    "t.conf:3: invalid method \"PO.ST\" (letters, \"-\" and \"_\": requests with any "
	    "other method are refused)");
	BAD(UPSTREAM "route x {\nmatch POST /x/\n",
	    "t.conf:3: invalid path template \"/x/\": requests are compared normalised: write "
	    "\"/x\"");
	BAD(UPSTREAM "route x {\nmatch POST /x\nmatch_case upper\n",
	    "t.conf:4: invalid match_case \"upper\" (insensitive or sensitive)");

	/* top-level values */
	BAD("upstream ftp://api\n",
	    "t.conf:1: invalid upstream \"ftp://api\" (expected http[s]://HOST[:PORT] or "
	    "h2c://HOST[:PORT])");
	BAD("upstream h2c://api/v1\n",
	    "t.conf:1: upstream \"h2c://api/v1\" has a path; only \"/\" is supported");
	BAD("upstream h2c://api:0\n", "t.conf:1: invalid port in upstream \"h2c://api:0\" (1-65535)");
	BAD(UPSTREAM "actor anonymous\nupstream_http2 on\n",
	    "t.conf:3: \"upstream_http2 on\" needs an https:// upstream (h2c:// is cleartext "
	    "HTTP/2)");
	BAD("upstream h2c://api\nactor anonymous\nupstream_http2 on\n",
	    "t.conf:3: \"upstream_http2 on\" needs an https:// upstream (h2c:// is cleartext "
	    "HTTP/2)");
	BAD("upstream https://api\nactor anonymous\nupstream_http2 maybe\n",
	    "t.conf:3: invalid upstream_http2 \"maybe\" (off or on)");
	BAD(UPSTREAM "actor anonymous\nupstream_ca ca.pem\n",
	    "t.conf:3: \"upstream_ca\" needs an https:// upstream");
	BAD(UPSTREAM "actor anonymous\nupstream_client_certificate a b\n",
	    "t.conf:3: \"upstream_client_certificate\" needs an https:// upstream");
	BAD(UPSTREAM "actor anonymous\ntls_certificate c.pem\n",
	    "t.conf:3: \"tls_certificate\" and \"tls_certificate_key\" go together");
	BAD(UPSTREAM "actor anonymous\ntls_certificate_key k.pem\n",
	    "t.conf:3: \"tls_certificate\" and \"tls_certificate_key\" go together");
	BAD(UPSTREAM "actor anonymous\nadmin 0.0.0.0:9901\n",
	    "t.conf:3: \"admin 0.0.0.0\" is not a loopback address: set \"admin_token\" so that "
	    "the records API needs a key");
	BAD(UPSTREAM "actor anonymous\nadmin [::]:9901\n",
	    "t.conf:3: \"admin ::\" is not a loopback address: set \"admin_token\" so that the "
	    "records API needs a key");
	BAD("upstream http://api/v1\n",
	    "t.conf:1: upstream \"http://api/v1\" has a path; only \"/\" is supported");
	BAD("upstream http://api?x=1\n",
	    "t.conf:1: upstream \"http://api?x=1\" has a path; only \"/\" is supported");
	BAD("upstream http://api:0\n",
	    "t.conf:1: invalid port in upstream \"http://api:0\" (1-65535)");
	BAD("upstream http://api:65536\n",
	    "t.conf:1: invalid port in upstream \"http://api:65536\" (1-65535)");
	BAD("upstream http://api:\n",
	    "t.conf:1: invalid port in upstream \"http://api:\" (1-65535)");
	BAD("upstream http://\n", "t.conf:1: invalid host in upstream \"http://\"");
	BAD("upstream http://u@api\n", "t.conf:1: invalid host in upstream \"http://u@api\"");
	BAD("upstream http://[zz]:1\n", "t.conf:1: invalid host in upstream \"http://[zz]:1\"");
	BAD(UPSTREAM "listen localhost:8080\n",
	    "t.conf:2: invalid address \"localhost:8080\" (expected numeric \"a.b.c.d:port\" or "
	    "\"[ipv6]:port\")");
	BAD(UPSTREAM "listen 127.0.0.1\n",
	    "t.conf:2: invalid address \"127.0.0.1\" (expected numeric \"a.b.c.d:port\" or "
	    "\"[ipv6]:port\")");
	BAD(UPSTREAM "listen 127.0.0.1:0\n", "t.conf:2: invalid port in \"127.0.0.1:0\" (1-65535)");
	BAD(UPSTREAM "admin ::1:80\n",
	    "t.conf:2: invalid address \"::1:80\" (expected numeric \"a.b.c.d:port\" or "
	    "\"[ipv6]:port\")");
	BAD(UPSTREAM "admin 127.0.0.1:8080\n",
	    "t.conf:2: \"admin\" and \"listen\" use the same address");
	BAD(UPSTREAM "workers 0\n", "t.conf:2: invalid workers \"0\" (auto or 1-256)");
	BAD(UPSTREAM "workers 257\n", "t.conf:2: invalid workers \"257\" (auto or 1-256)");
	BAD(UPSTREAM "key_header \"Idem Key\"\n", "t.conf:2: invalid header name \"Idem Key\"");
	BAD(UPSTREAM "mismatch_status 400\n",
	    "t.conf:2: invalid mismatch_status \"400\" (422 or 409)");
	BAD(UPSTREAM "store_unavailable open\n",
	    "t.conf:2: invalid store_unavailable \"open\" (fail-closed or fail-open)");
	BAD(UPSTREAM "problem_base \"\"\n", "t.conf:2: \"problem_base\" must not be empty");
	BAD(UPSTREAM "problem_base \"a b\"\n", "t.conf:2: invalid problem_base \"a b\"");
	BAD(UPSTREAM "lease 30s\n",
	    "t.conf:2: \"lease\" (30000ms) must be longer than \"upstream_timeout\" plus "
	    "\"store_timeout\" (35000ms)");
	/* The claim's round trip counts too: 31s is more than 30s but not than 30s + 5s. */
	BAD(UPSTREAM "lease 35s\n",
	    "t.conf:2: \"lease\" (35000ms) must be longer than \"upstream_timeout\" plus "
	    "\"store_timeout\" (35000ms)");
	BAD(UPSTREAM "store_timeout 40s\n",
	    "t.conf:2: the default \"lease\" (upstream_timeout + 30s = 60000ms) must be longer "
	    "than \"upstream_timeout\" plus \"store_timeout\" (70000ms): set \"lease\"");
	BAD(UPSTREAM "lease 5s\n\nupstream_timeout 1s\nlease 2s\n",
	    "t.conf:5: duplicate directive \"lease\" (first set at line 2)");
	BAD(UPSTREAM "upstream_timeout 2m\nlease 1m\n",
	    "t.conf:3: \"lease\" (60000ms) must be longer than \"upstream_timeout\" plus "
	    "\"store_timeout\" (125000ms)");
}

static void test_names(void)
{
	char name[200];
	char text[400];
	struct conf *c;

	memset(name, 'a', 128);
	name[128] = '\0';
	snprintf(text, sizeof(text), UPSTREAM "actor anonymous\nroute %s {\nmatch POST /\n}\n",
		 name);
	c = parse(text);
	CHECK(c && strlen(c->routes[0].operation) == 128);
	conf_free(c);
	name[128] = 'a';
	name[129] = '\0';
	snprintf(text, sizeof(text), UPSTREAM "actor anonymous\nroute %s {\nmatch POST /\n}\n",
		 name);
	c = parse(text);
	CHECK(c == NULL);
	c = parse(UPSTREAM "actor anonymous\nroute A-z_0.9:x {\nmatch POST /\n}\n");
	CHECK(c != NULL);
	conf_free(c);
}

/*
 * store_headers takes a name exactly when a record would keep it: every
 * name the header-policy table says no record keeps is refused, naming
 * why; every other row's name is taken.
 */
static void test_store_headers(void)
{
	char text[200], want[200];
	struct conf *c;

	for (size_t i = 0; i < header_npolicies; i++) {
		const struct header_policy *r = &header_policies[i];
		snprintf(text, sizeof(text),
			 UPSTREAM "actor anonymous\nroute x {\nmatch POST /x\nstore_headers X-A %s\n}\n",
			 r->name);
		if (r->flags & HEADER_NEVER_STORED) {
			snprintf(want, sizeof(want), "t.conf:5: header \"%s\" is never stored (%s)",
				 r->name, r->why);
			bad(text, want, __LINE__);
		} else {
			c = parse(text);
			CHECK(c && c->routes[0].nstore_headers == 2 &&
			      strcmp(c->routes[0].store_headers[1], r->name) == 0);
			conf_free(c);
		}
	}
	BAD(UPSTREAM "store_headers www-authenticate\n",
	    "t.conf:2: header \"www-authenticate\" is never stored (credentials and hop-by-hop "
	    "headers)");
	BAD(UPSTREAM "store_headers Content-Length\n",
	    "t.conf:2: header \"Content-Length\" is never stored (a replay frames the stored "
	    "body itself)");
}

static void test_find(void)
{
	const struct route *r;
	struct conf *c = parse(UPSTREAM "actor anonymous\n"
					"route one {\nmatch POST /a/{id}\nmatch DELETE /d\n}\n"
					"route two {\nmatch POST /a/*\n}\n");

	CHECK(c != NULL);
	if (!c)
		return;
	r = lookup_route(c, "POST", "/a/1", 4, NULL);
	CHECK(r && strcmp(r->operation, "one") == 0);
	r = lookup_route(c, "POST", "/a/1/x", 6, NULL);
	CHECK(r && strcmp(r->operation, "two") == 0);
	r = lookup_route(c, "POST", "/a", 2, NULL);
	CHECK(r && strcmp(r->operation, "two") == 0);
	r = lookup_route(c, "DELETE", "/d", 2, NULL);
	CHECK(r && strcmp(r->operation, "one") == 0);
	CHECK(lookup_route(c, "delete", "/d", 2, NULL) == NULL);
	CHECK(lookup_route(c, "GET", "/a/1", 4, NULL) == NULL);
	CHECK(lookup_route(c, "POST", "/b", 2, NULL) == NULL);
	conf_free(c);
}

static void test_load(void)
{
	struct conf *c = NULL;
	const struct route *r;
	char path[] = "/tmp/idemproxy-test-conf-XXXXXX";
	int fd;

	CHECK(conf_load("idemproxy.conf.example", &c, err, sizeof(err)) == 0);
	if (!c) {
		fprintf(stderr, "%s\n", err);
	} else {
		CHECK_STR(c->listen.host, "127.0.0.1");
		CHECK(c->listen.port == 8080);
		CHECK_STR(c->upstream_hostport, "127.0.0.1:3000");
		CHECK(c->database == NULL);
		CHECK(c->nroutes == 1);
		r = lookup_route(c, "POST", "/api/courses", 12, NULL);
		CHECK(r && strcmp(r->operation, "course.create") == 0);
		CHECK(r && r->actor == ACTOR_HEADER && strcmp(r->actor_header, "X-Actor-Id") == 0);
		CHECK(r && r->key == KEY_REQUIRED && r->fingerprint == FP_JSON && r->nfields == 3);
		CHECK(r && r->retention_ms == 86400000);
		conf_free(c);
	}

	c = NULL;
	CHECK(conf_load("/nonexistent/idemproxy.conf", &c, err, sizeof(err)) == -1);
	CHECK_STR(err, "/nonexistent/idemproxy.conf: cannot open: No such file or directory");
	CHECK(c == NULL);

	fd = mkstemp(path);
	CHECK(fd >= 0);
	if (fd < 0)
		return;
	CHECK(write(fd, "upstream http://h\n\nbogus\n", 25) == 25);
	close(fd);
	CHECK(conf_load(path, &c, err, sizeof(err)) == -1);
	{
		char want[128];

		snprintf(want, sizeof(want), "%s:3: unknown directive \"bogus\"", path);
		CHECK_STR(err, want);
	}
	unlink(path);
}

/* What a SIGHUP reload may apply, and what only a restart can. */
/* A configuration prepended to base, and the restart-only directive it changes (NULL: none). */
struct restart_case {
	const char *extra;
	const char *want;
};

/* Each case's file against base: conf_restart_only_change names what it wants. */
static void check_restart(const char *base, const struct restart_case *cases, size_t n)
{
	char text[512];
	struct conf *old = parse(base), *c;

	CHECK(old != NULL);
	for (size_t i = 0; old && i < n; i++) {
		snprintf(text, sizeof(text), "%s%s", cases[i].extra, base);
		c = parse(text);
		CHECK(c != NULL);
		if (!c)
			continue;
		if (cases[i].want)
			CHECK_STR(conf_restart_only_change(old, c), cases[i].want);
		else
			CHECK(conf_restart_only_change(old, c) == NULL);
		conf_free(c);
	}
	conf_free(old);
}

static void test_restart_only(void)
{
	static const char base[] = "upstream http://127.0.0.1:3000\n"
				   "actor anonymous\n"
				   "route a {\n match POST /a\n}\n";
	static const struct restart_case cases[] = {
		{"", NULL},
		{"mismatch_status 409\n", NULL},
		{"retention 1h\nupstream_timeout 5s\n", NULL},
		{"listen 127.0.0.1:9999\n", "listen"},
		{"workers 7\n", "workers"},
		{"admin 127.0.0.1:9901\n", "admin"},
		{"database \"dbname=x\"\n", "database"},
		{"store_timeout 2s\n", "store_timeout"},
		{"replay_cache 1m\n", "replay_cache"},
	};
	/* The upstream's TLS settings need a restart; the listener's certificate does not. */
	static const char tls[] = "upstream https://api\nactor anonymous\nroute a {\n match POST /a\n}\n";
	static const struct restart_case tls_cases[] = {
		{"upstream_ca b.pem\n", "upstream_ca"},
		{"upstream_server_name api.internal\n", "upstream_server_name"},
		{"upstream_client_certificate c.pem k.pem\n", "upstream_client_certificate"},
		{"tls_certificate t.crt\ntls_certificate_key t.key\n", NULL},
		{"body_encryption b.keys\nadmin_token t\n", NULL},
	};
	struct conf *old = parse(base), *c;

	check_restart(base, cases, sizeof(cases) / sizeof(cases[0]));
	check_restart(tls, tls_cases, sizeof(tls_cases) / sizeof(tls_cases[0]));
	/* A different upstream URL, the rest equal. */
	c = parse("upstream http://127.0.0.1:3001\nactor anonymous\nroute a {\n match POST /a\n}\n");
	CHECK(c && old && conf_restart_only_change(old, c) &&
	      strcmp(conf_restart_only_change(old, c), "upstream") == 0);
	conf_free(c);
	conf_free(old);
}

/* trusted_proxies: which peers' forwarding headers are kept. */
static void test_trusted_proxies(void)
{
	struct conf *c = parse(UPSTREAM "trusted_proxies 10.0.0.0/8 192.168.1.7 fd00::/8 ::1 "
					"172.16.0.0/12 0.0.0.0/0\n");
	struct sockaddr_in v4 = {.sin_family = AF_INET};
	struct sockaddr_in6 v6 = {.sin6_family = AF_INET6};
	static const struct {
		const char *addr;
		int trusted;
	} peers[] = {
	    {"10.1.2.3", 1},  {"11.0.0.1", 0}, {"192.168.1.7", 1}, {"192.168.1.8", 0},
	    {"172.31.255.255", 1}, {"172.32.0.0", 0}, {"fd12::1", 1}, {"fe80::1", 0},
	    {"::1", 1},	 {"::2", 0}, {"::ffff:10.9.9.9", 1}, {"::ffff:11.9.9.9", 0},
	};

	CHECK(c && c->ntrusted_proxies == 6);
	if (!c)
		return;
	/* 0.0.0.0/0 would trust every IPv4 peer: drop it for the rest. */
	c->ntrusted_proxies = 5;
	for (size_t i = 0; i < sizeof(peers) / sizeof(peers[0]); i++) {
		int got;

		if (inet_pton(AF_INET, peers[i].addr, &v4.sin_addr) == 1)
			got = lookup_trusted_proxy(c, (struct sockaddr *)&v4);
		else if (inet_pton(AF_INET6, peers[i].addr, &v6.sin6_addr) == 1)
			got = lookup_trusted_proxy(c, (struct sockaddr *)&v6);
		else
			got = -1;
		if (got != peers[i].trusted)
			fprintf(stderr, "peer %s: trusted %d\n", peers[i].addr, got);
		CHECK(got == peers[i].trusted);
	}
	c->ntrusted_proxies = 6;
	CHECK(inet_pton(AF_INET, "203.0.113.9", &v4.sin_addr) == 1);
	CHECK(lookup_trusted_proxy(c, (struct sockaddr *)&v4) == 1);
	conf_free(c);

	c = parse(UPSTREAM "max_connections 20\nactor anonymous\nmatch_case sensitive\n"
			   "route a {\nmatch POST /a\n}\nroute b {\nmatch POST /b\nmatch_case "
			   "insensitive\n}\n");
	CHECK(c && c->max_connections == 20 && c->nroutes == 2);
	if (c && c->nroutes == 2) {
		CHECK(c->routes[0].match_case == MATCH_CASE_SENSITIVE);
		CHECK(c->routes[1].match_case == MATCH_CASE_INSENSITIVE);
		CHECK(lookup_route(c, "POST", "/A", 2, NULL) == NULL);
		CHECK(lookup_route(c, "POST", "/B", 2, NULL) == &c->routes[1]);
	}
	conf_free(c);
}

/* Identity, access and TLS settings, and the files they name. */
static void test_identity(void)
{
	struct conf *c;

	c = parse("upstream https://api.example\nadmin 0.0.0.0:9901\nadmin_token /etc/t\n"
		  "upstream_ca ca.pem\nupstream_server_name api.internal\n"
		  "upstream_client_certificate c.pem /k.pem\ntls_certificate dir/t.crt\n"
		  "tls_certificate_key t.key\nbody_encryption b.keys\n"
		  "actor jwt keys.json issuer=https://i audience=api claim=uid leeway=5s "
		  "header=X-Token\nroute a {\nmatch POST /a\n}\n"
		  "route b {\nmatch POST /b\nactor authorization\n}\n");
	CHECK(c != NULL);
	if (!c) {
		fprintf(stderr, "%s\n", err);
		return;
	}
	CHECK(c->upstream_tls == 1 && c->upstream_port == 443);
	CHECK_STR(c->upstream_host, "api.example");
	CHECK_STR(c->admin_token.path, "/etc/t");
	CHECK(c->admin_token.line == 3);
	/* Relative to the configuration file's directory ("t.conf": none). */
	CHECK_STR(c->upstream_ca.path, "ca.pem");
	CHECK_STR(c->upstream_server_name, "api.internal");
	CHECK_STR(c->upstream_client_cert.path, "c.pem");
	CHECK_STR(c->upstream_client_key.path, "/k.pem");
	CHECK(c->upstream_client_key.line == 6);
	CHECK_STR(c->tls_certificate.path, "dir/t.crt");
	CHECK_STR(c->body_encryption.path, "b.keys");
	CHECK(c->nroutes == 2);
	if (c->nroutes == 2) {
		const struct route *a = &c->routes[0], *b = &c->routes[1];

		CHECK(a->actor == ACTOR_JWT && a->jwt_keys.line == 10);
		CHECK_STR(a->jwt_keys.path, "keys.json");
		CHECK_STR(a->jwt_issuer, "https://i");
		CHECK_STR(a->jwt_audience, "api");
		CHECK_STR(a->jwt_claim, "uid");
		CHECK_STR(a->actor_header, "X-Token");
		CHECK(a->jwt_leeway_ms == 5000);
		CHECK(a->jwt_require_exp == 0);
		CHECK(b->actor == ACTOR_AUTHORIZATION);
	}
	conf_free(c);

	/* require=exp, inherited like the other options. */
	c = parse(UPSTREAM "actor jwt k.json require=exp\nroute a {\nmatch POST /a\n}\n"
			   "route b {\nmatch POST /b\nactor jwt k.json\n}\n");
	CHECK(c && c->nroutes == 2);
	if (c && c->nroutes == 2)
		CHECK(c->routes[0].jwt_require_exp == 1 && c->routes[1].jwt_require_exp == 0);
	conf_free(c);

	/* Defaults, and paths taken from the configuration file's directory. */
	c = NULL;
	CHECK(conf_parse("/etc/idemproxy/i.conf",
			 UPSTREAM "actor jwt k.json\nroute a {\nmatch POST /a\n}\n",
			 strlen(UPSTREAM "actor jwt k.json\nroute a {\nmatch POST /a\n}\n"), &c, err,
			 sizeof(err)) == 0);
	if (c && c->nroutes == 1) {
		CHECK_STR(c->routes[0].jwt_keys.path, "/etc/idemproxy/k.json");
		CHECK_STR(c->routes[0].jwt_claim, "sub");
		CHECK(c->routes[0].jwt_leeway_ms == 30000);
		CHECK(c->routes[0].jwt_issuer == NULL && c->routes[0].actor_header == NULL);
		CHECK(c->upstream_tls == 0 && c->upstream_port == 3000);
		CHECK(c->upstream_h2c == 0 && c->upstream_http2 == 0);
	}
	conf_free(c);

	/* h2c://: cleartext HTTP/2, port 80 unless given; upstream_http2 with https. */
	c = parse("upstream h2c://grpc.internal\nactor anonymous\n");
	CHECK(c && c->upstream_h2c == 1 && c->upstream_tls == 0 && c->upstream_port == 80);
	if (c)
		CHECK_STR(c->upstream_hostport, "grpc.internal");
	conf_free(c);
	c = parse("upstream H2C://[::1]:50051/\nactor anonymous\n");
	CHECK(c && c->upstream_h2c == 1 && c->upstream_port == 50051);
	if (c)
		CHECK_STR(c->upstream_host, "::1");
	conf_free(c);
	c = parse("upstream https://api\nupstream_http2 on\nactor anonymous\n");
	CHECK(c && c->upstream_tls == 1 && c->upstream_h2c == 0 && c->upstream_http2 == 1);
	conf_free(c);
}

static void collect_warning(const char *line, void *arg)
{
	char *all = arg;
	size_t n = strlen(all);

	snprintf(all + n, CONF_ERR_MAX * 4 - n, "%s\n", line);
}

/* conf_warnings(): an actor jwt without audience=, once per directive line. */
static void test_warnings(void)
{
	static char said[CONF_ERR_MAX * 4];
	struct conf *c;

	c = parse(UPSTREAM "actor jwt k.json\n"
			   "route a {\nmatch POST /a\n}\n"
			   "route b {\nmatch POST /b\n}\n"
			   "route c {\nmatch POST /c\nactor jwt k.json audience=api\n}\n"
			   "route d {\nmatch POST /d\nactor jwt k.json require=exp\n}\n"
			   "route e {\nmatch POST /e\nactor authorization\n}\n");
	CHECK(c != NULL);
	if (!c)
		return;
	said[0] = '\0';
	conf_warnings(c, collect_warning, said);
	CHECK_STR(said, "t.conf:2: warning: \"actor jwt\" without audience= takes tokens its "
			"issuer made for any other service too\n"
			"t.conf:15: warning: \"actor jwt\" without audience= takes tokens its "
			"issuer made for any other service too\n");
	conf_free(c);

	c = parse(UPSTREAM "actor jwt k.json audience=api\nroute a {\nmatch POST /a\n}\n");
	CHECK(c != NULL);
	said[0] = '\0';
	if (c)
		conf_warnings(c, collect_warning, said);
	CHECK_STR(said, "");
	conf_free(c);
}

/* Routes that can never act: only safe methods, or a match an earlier route already has. */
static void test_unreachable_routes(void)
{
	struct conf *c;

	BAD(UPSTREAM "actor anonymous\nroute r {\n match GET /x\n match head /x\n}\n",
	    "t.conf:3: route \"r\" matches only safe methods (GET, HEAD, OPTIONS, TRACE), "
	    "which pass through without a key: it can never enforce anything");
	BAD(UPSTREAM "actor anonymous\nroute a {\n match POST /o/{id}\n}\n"
		     "route b {\n match PUT /p\n match POST /O/{x}\n}\n",
	    "t.conf:8: route \"b\": this match is the same as route \"a\"'s at line 4, "
	    "which comes first and wins: it is never reached");
	/* A case-sensitive first route does not catch other spellings. */
	c = parse(UPSTREAM "actor anonymous\nroute a {\n match POST /o\n match_case sensitive\n}\n"
			   "route b {\n match POST /O\n}\n");
	CHECK(c != NULL);
	conf_free(c);
	/* Safe methods beside an unsafe one, another method, a longer path: fine. */
	c = parse(UPSTREAM "actor anonymous\nroute a {\n match GET /o\n match POST /o\n}\n"
			   "route b {\n match PUT /o\n match POST /o/*\n}\n");
	CHECK(c != NULL);
	conf_free(c);
}

/* operation_from json PATH | jsonrpc [PATH] | graphql, in a route only, each error at its line. */
static void test_operation_from(void)
{
	struct conf *c = parse(UPSTREAM "actor anonymous\n"
				       "route g {\n    match POST /g\n    operation_from graphql\n}\n"
				       "route r {\n    match POST /r\n    operation_from jsonrpc\n}\n"
				       "route m {\n    match POST /m\n"
				       "    operation_from jsonrpc params.name\n}\n"
				       "route j {\n    match POST /j\n    operation_from json a.b\n}\n"
				       "route p {\n    match POST /p\n}\n");

	CHECK(c != NULL);
	if (c) {
		CHECK(c->nroutes == 5);
		CHECK(c->routes[0].operation_from == OPFROM_GRAPHQL && !c->routes[0].operation_path);
		CHECK(c->routes[1].operation_from == OPFROM_JSONRPC);
		CHECK_STR(c->routes[1].operation_path, "method");
		CHECK(c->routes[2].operation_from == OPFROM_JSONRPC);
		CHECK_STR(c->routes[2].operation_path, "params.name");
		CHECK(c->routes[3].operation_from == OPFROM_JSON);
		CHECK_STR(c->routes[3].operation_path, "a.b");
		CHECK(c->routes[4].operation_from == OPFROM_UNSET && !c->routes[4].operation_path);
		conf_free(c);
	}
	BAD(UPSTREAM "operation_from graphql\n",
	    "t.conf:2: \"operation_from\" is only allowed inside a route block");
	BAD(UPSTREAM "route x {\nmatch POST /x\noperation_from\n}\n",
	    "t.conf:4: \"operation_from\" needs 1 to 2 arguments");
	BAD(UPSTREAM "route x {\nmatch POST /x\noperation_from xml a\n}\n",
	    "t.conf:4: \"operation_from\" takes json PATH, jsonrpc [PATH] or graphql");
	BAD(UPSTREAM "route x {\nmatch POST /x\noperation_from json\n}\n",
	    "t.conf:4: \"operation_from json\" needs a JSON path (e.g. action or params.name)");
	BAD(UPSTREAM "route x {\nmatch POST /x\noperation_from graphql query\n}\n",
	    "t.conf:4: \"operation_from graphql\" takes no path");
	BAD(UPSTREAM "route x {\nmatch POST /x\noperation_from jsonrpc .method\n}\n",
	    "t.conf:4: invalid JSON path \".method\" (names separated by \".\")");
	BAD(UPSTREAM "route x {\nmatch POST /x\noperation_from json a..b\n}\n",
	    "t.conf:4: invalid JSON path \"a..b\" (names separated by \".\")");
	BAD(UPSTREAM "route x {\nmatch POST /x\noperation_from graphql\n"
		     "operation_from json a\n}\n",
	    "t.conf:5: duplicate directive \"operation_from\" (first set at line 4)");
}

int main(void)
{
	test_durations();
	test_defaults();
	test_top_level();
	test_routes();
	test_route_defaults();
	test_admission();
	test_lexer();
	test_quotas();
	test_errors();
	test_names();
	test_store_headers();
	test_find();
	test_trusted_proxies();
	test_identity();
	test_warnings();
	test_load();
	test_restart_only();
	test_unreachable_routes();
	test_operation_from();
	UNIT_DONE("conf");
}
