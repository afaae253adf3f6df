/* Unit tests for conf/dump.c: the effective configuration reads back as itself. */
#include "conf/dump.h"
#include "tests/unit/unit.h"

#include <stdlib.h>

static char err[CONF_ERR_MAX];

/* Every directive set, most away from their defaults. */
static const char full[] =
    "listen [::1]:8443\n"
    "upstream https://api.internal:9443/\n"
    "upstream_ca /etc/ca.pem\n"
    "upstream_server_name api.example\n"
    "upstream_client_certificate /etc/c.pem \"/etc/my key.pem\"\n"
    "tls_certificate /etc/t.pem\n"
    "tls_certificate_key /etc/t.key\n"
    "tls_ciphers ECDHE+AESGCM\n"
    "database \"host=db port=5433 user=u password='s3cr et\\\\x' dbname=d\"\n"
    "prepared_statements off\n"
    "admin 127.0.0.2:9902\n"
    "admin_token /etc/admin.token\n"
    "body_encryption /etc/keys\n"
    "workers 3\n"
    "key_header X-Key\n"
    "mismatch_status 409\n"
    "upstream_timeout 1500ms\n"
    "client_timeout 90s\n"
    "store_timeout 2s\n"
    "lease 2m\n"
    "shutdown_timeout 1h\n"
    "sweep_interval off\n"
    "max_request_body 65537\n"
    "max_stored_body 2g\n"
    "replay_cache 0\n"
    "relay_buffer 64k\n"
    "relay_budget 0\n"
    "relay_budget_per_peer 1m\n"
    "tunnel_timeout 2d\n"
    "tunnel_upgrades websocket foo/2\n"
    "max_connections 77\n"
    "trusted_proxies 10.0.0.0/8 fd00::/8 127.0.0.1\n"
    "resolver 127.0.0.1:5353 [::1]:53 10.0.0.2\n"
    "underscores_in_headers on\n"
    "store_unavailable fail-open\n"
    "problem_base https://p.example/\n"
    "contract_url https://c.example/contract\n"
    "contract_server https://api.example/v1\n"
    "actor jwt /etc/jwks.json \"issuer=the iss\" audience=api claim=uid leeway=5s header=X-T "
    "require=exp\n"
    "route a.b {\n"
    "    match POST /o/{id}/*\n"
    "    match put /\n"
    "    key optional\n"
    "    fingerprint json a.b:trim c:int d\n"
    "    retention 36h\n"
    "    release_on 4xx 500\n"
    "    unknown_on 502 599\n"
    "    store_headers Location ETag\n"
    "    in_progress wait 3s\n"
    "    recovery forward\n"
    "    match_case sensitive\n"
    "    key_from json meta.key\n"
    "    fingerprint_headers X-Tenant\n"
    "    errors stripe\n"
    "    operation_from jsonrpc params.name\n"
    "}\n"
    "route c {\n    match DELETE /c\n    actor anonymous\n    fingerprint body\n"
    "    key_from query idem\n    operation_from graphql\n}\n"
    "route d {\n    match PATCH /d\n    actor header \"X-A\"\n    fingerprint none\n"
    "    operation_from json action\n}\n";

static struct conf *parse(const char *text)
{
	struct conf *c = NULL;

	if (conf_parse("/t/t.conf", text, strlen(text), &c, err, sizeof(err))) {
		fprintf(stderr, "%s\n", err);
		return NULL;
	}
	return c;
}

static void has(const char *text, const char *needle, int want, int line)
{
	if (!!strstr(text, needle) == want) {
		unit_passed++;
		return;
	}
	unit_failed++;
	fprintf(stderr, "%s:%d: %s \"%s\"\n", __FILE__, line, want ? "no" : "unexpected", needle);
}

#define HAS(t, n)   has(t, n, 1, __LINE__)
#define LACKS(t, n) has(t, n, 0, __LINE__)

/* Every directive written, none it cannot show; read back, the same text. */
static void test_round_trip(void)
{
	struct conf *c = parse(full), *again;
	char *text, *text2;
	size_t len, len2;

	CHECK(c != NULL);
	if (!c)
		return;
	text = conf_dump(c, &len);
	CHECK(text && strlen(text) == len);
	if (!text)
		return;
	LACKS(text, "cannot show");
	/* Every top-level directive and every one of route a.b has a value. */
	CHECK(strstr(text, "(not set)") == NULL || strstr(text, "(not set)") > strstr(text, "route c"));
	LACKS(text, "s3cr");
	HAS(text, "password='" CONF_DUMP_MASK "'");
	HAS(text, "listen [::1]:8443\n");
	HAS(text, "upstream_client_certificate /etc/c.pem \"/etc/my key.pem\"\n");
	HAS(text, "upstream_timeout 1500ms\n");
	HAS(text, "contract_server https://api.example/v1\n");
	HAS(text, "sweep_interval off\n");
	HAS(text, "max_stored_body 2g\n");
	HAS(text, "max_request_body 65537\n");
	HAS(text, "trusted_proxies 10.0.0.0/8 fd00::/8 127.0.0.1/32\n");
	HAS(text, "resolver 127.0.0.1:5353 [::1]:53 10.0.0.2\n");
	HAS(text, "actor jwt /etc/jwks.json \"issuer=the iss\" audience=api claim=uid leeway=5s "
		  "header=X-T require=exp\n");
	HAS(text, "    match POST /o/{id}/*\n    match PUT /\n");
	HAS(text, "    fingerprint json a.b:trim c:int d\n");
	HAS(text, "    release_on 4xx 500\n");
	HAS(text, "    in_progress wait 3s\n");
	HAS(text, "    key_from query idem\n");
	HAS(text, "    operation_from jsonrpc params.name\n");
	HAS(text, "    operation_from graphql\n");
	HAS(text, "    operation_from json action\n");
	HAS(text, "route c {\n");
	again = parse(text);
	CHECK(again != NULL);
	if (again) {
		text2 = conf_dump(again, &len2);
		CHECK(text2 && len2 == len && strcmp(text, text2) == 0);
		free(text2);
		conf_free(again);
	}
	free(text);
	conf_free(c);
}

/* The defaults are written; what has none is a comment; a URI's password is masked. */
static void test_defaults_and_uri(void)
{
	struct conf *c = parse("upstream http://127.0.0.1:3000\n"
			       "database postgresql://u:hunter2@db:5432/d?sslmode=require\n");
	char *text;
	size_t len;

	CHECK(c != NULL);
	if (!c)
		return;
	text = conf_dump(c, &len);
	CHECK(text != NULL);
	if (text) {
		HAS(text, "listen 127.0.0.1:8080\n");
		HAS(text, "admin off\n");
		HAS(text, "max_connections 8000\n");
		HAS(text, "upstream_timeout 30s\n");
		HAS(text, "#tls_ciphers (not used: no tls_certificate)\n");
		HAS(text, "#admin_token (not set)\n");
		HAS(text, "password='" CONF_DUMP_MASK "'");
		HAS(text, "sslmode='require'");
		LACKS(text, "hunter2");
		LACKS(text, "route ");
	}
	free(text);
	conf_free(c);
}

int main(void)
{
	test_round_trip();
	test_defaults_and_uri();
	UNIT_DONE("dump");
}
