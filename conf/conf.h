/*
 * idemproxy configuration: an immutable tree built by conf_load().
 *
 * A struct conf is built whole, validated, and only then handed to the
 * proxy; nothing in it changes afterwards, so a reload can build a second
 * one and swap the pointer while in-flight requests keep the old one.
 */
#ifndef IDEMPROXY_CONF_H
#define IDEMPROXY_CONF_H

#include <stddef.h>
#include <stdint.h>

#include "conf/route.h"

#define CONF_ERR_MAX 512

enum actor_source {
	ACTOR_UNSET = 0,
	ACTOR_HEADER,
	ACTOR_ANONYMOUS,
	ACTOR_JWT,           /* a verified JSON Web Token */
	ACTOR_AUTHORIZATION, /* a hash of the Authorization value */
};

/*
 * A file the configuration names: its path (a relative one resolved from
 * the configuration file's directory) and the line that names it, for
 * "FILE:LINE: message" when it cannot be read. path NULL: not set.
 */
struct conf_file {
	char *path;
	int line;
};

enum key_mode {
	KEY_UNSET = 0,
	KEY_REQUIRED,
	KEY_OPTIONAL,
};

enum fp_mode {
	FP_UNSET = 0,
	FP_JSON,
	FP_BODY,
	FP_NONE,
};

enum fp_transform {
	FPT_NONE = 0,
	FPT_TRIM,
	FPT_LOWER,
	FPT_INT,
	FPT_NUMBER,
	FPT_STRING,
};

/* prepared_statements: the values are store_new's named argument. */
enum prepared_mode {
	PREPARED_AUTO = -1, /* named unless the connection goes through a pooler */
	PREPARED_OFF = 0,
	PREPARED_ON = 1,
};

/* log_level: the values are enum log_level's (proxy/log.h). */
enum conf_log_level {
	CONF_LOG_DEBUG,
	CONF_LOG_INFO,
	CONF_LOG_WARN,
	CONF_LOG_ERROR,
};

enum store_unavailable_mode {
	STORE_FAIL_CLOSED = 0,
	STORE_FAIL_OPEN,
};

/* key_from: where a request's key comes from. */
enum key_from {
	KEY_FROM_UNSET = 0, /* the key_header header */
	KEY_FROM_HEADER,
	KEY_FROM_JSON,      /* a string or integer at a dot path in the JSON body */
	KEY_FROM_QUERY,
};

/* errors: the dialect of error bodies. */
enum errors_mode {
	ERRORS_UNSET = 0,
	ERRORS_PROBLEM,     /* RFC 9457 problem+json */
	ERRORS_STRIPE,      /* {"error": {"type", "code", "message"}} */
};

/* grpc streaming: what a matched route does with gRPC calls. */
enum grpc_streaming_mode {
	GRPC_STREAMING_UNSET = 0,
	GRPC_STREAMING_RECORD, /* unary and server-streaming calls recorded; more than one request message refused */
	GRPC_STREAMING_PASS,   /* every gRPC call passes through unenforced */
};

/* What an owner's request tells the upstream of its key (forward_key). */
enum forward_key_mode {
	FORWARD_KEY_UNSET = 0,
	FORWARD_KEY_OFF,
	FORWARD_KEY_SCOPED, /* a digest of actor, operation and key */
	FORWARD_KEY_RAW,    /* the client's key as sent */
};

/* operation_from: what names a request's operation in its scope. */
enum operation_from {
	OPFROM_UNSET = 0,   /* the route's name alone */
	OPFROM_JSON,        /* the route's name, ":", the string at a dot path of the JSON body */
	OPFROM_JSONRPC,     /* as OPFROM_JSON (path "method" by default), and the body's "id" is
			     * the call's: not fingerprinted, a replay carries the retry's */
	OPFROM_GRAPHQL,     /* mutations: the route's name, ":", the operation's name;
			     * queries and subscriptions pass through */
};

enum in_progress_mode {
	IN_PROGRESS_UNSET = 0,
	IN_PROGRESS_REJECT,
	IN_PROGRESS_WAIT,   /* hold a duplicate up to in_progress_wait_ms */
};

/* What a key retried after its record's retention meets (expired_keys). */
enum expired_keys_mode {
	EXPIRED_KEYS_UNSET = 0,
	EXPIRED_KEYS_RUN,    /* the key runs again */
	EXPIRED_KEYS_REFUSE, /* a tombstone refuses it for expired_keys_ms more */
};

enum recovery_mode {
	RECOVERY_UNSET = 0,
	RECOVERY_HOLD,
	RECOVERY_FORWARD,   /* take over and forward again, same key */
};

enum match_case {
	MATCH_CASE_UNSET = 0,
	MATCH_CASE_INSENSITIVE, /* ASCII letters of match paths in either case */
	MATCH_CASE_SENSITIVE,
};

/* One selected JSON field: a dot path ("a.b.c") and its transform. */
struct fp_field {
	char *path;
	enum fp_transform transform;
};

/* A set of HTTP status codes 100..599; a class (4xx) sets a hundred of them. */
struct status_set {
	int set;                  /* 1 when the directive appeared */
	uint8_t bits[600 / 8];
};

static inline int status_set_has(const struct status_set *s, int status)
{
	return status >= 0 && status < 600 && (s->bits[status / 8] >> (status % 8)) & 1;
}

struct route_match {
	char *method;          /* upper case, e.g. "POST" */
	struct path_seg *segs;
	int nsegs;
	int line;
};

struct route {
	char *operation;
	int line;                      /* line of "route NAME {" */
	int stats_id;                  /* its counters' row (proxy/stats.c) */

	struct route_match *matches;
	int nmatches;

	enum actor_source actor;
	char *actor_header;            /* ACTOR_HEADER; ACTOR_JWT: header=, NULL: Authorization Bearer */
	struct conf_file jwt_keys;     /* ACTOR_JWT: the JWKS file */
	char *jwt_issuer;              /* ACTOR_JWT: issuer=, NULL: any */
	char *jwt_audience;            /* ACTOR_JWT: audience=, NULL: not checked */
	char *jwt_claim;               /* ACTOR_JWT: claim= [sub] */
	int64_t jwt_leeway_ms;         /* ACTOR_JWT: leeway= [30s] */
	int jwt_require_exp;           /* ACTOR_JWT: require=exp, tokens without exp refused */

	enum key_mode key;
	enum fp_mode fingerprint;
	struct fp_field *fields;       /* FP_JSON with fields; NULL = whole body */
	int nfields;

	int64_t retention_ms;
	struct status_set release_on;
	struct status_set unknown_on;
	char **store_headers;          /* extra header names, as written */
	int nstore_headers;
	enum in_progress_mode in_progress;
	int64_t in_progress_wait_ms;   /* IN_PROGRESS_WAIT only */
	enum expired_keys_mode expired_keys;
	int64_t expired_keys_ms;       /* EXPIRED_KEYS_REFUSE: the tombstone's window */
	enum recovery_mode recovery;
	enum match_case match_case;
	enum key_from key_from;
	char *key_from_name;           /* KEY_FROM_HEADER/QUERY: the name; JSON: the path */
	char **fp_headers;             /* fingerprint_headers, as written */
	int nfp_headers;
	enum errors_mode errors;
	struct status_set grpc_release_on; /* gRPC codes 0..16, as status_set bits */
	struct status_set grpc_unknown_on;
	enum grpc_streaming_mode grpc_streaming;
	int actor_max_owners;          /* an actor's owners in flight; -1: off, 0: unset */
	enum forward_key_mode forward_key;
	char *forward_key_header;      /* FORWARD_KEY_SCOPED/RAW: the header set upstream */
	enum operation_from operation_from;
	char *operation_path;          /* OPFROM_JSON, OPFROM_JSONRPC: the dot path */
};

/* An address block of trusted_proxies: family AF_INET or AF_INET6, the first bits of addr. */
struct conf_cidr {
	int family;
	unsigned char addr[16];
	int bits;
};

/* A numeric listening address; host NULL: off. */
struct conf_addr {
	char *host;                    /* without brackets */
	int port;
};

struct conf {
	char *file;                    /* as given on the command line */

	struct conf_addr listen;

	char *upstream_url;
	char *upstream_host;           /* host part of the URL */
	int upstream_port;
	char *upstream_hostport;       /* "host:port" as written, for Host fallback */
	int upstream_tls;              /* https:// */
	int upstream_h2c;              /* h2c://: cleartext HTTP/2, prior knowledge */
	int upstream_http2;            /* upstream_http2 on: https:// offers h2 by ALPN */
	struct conf_file upstream_ca;  /* NULL path: the system's CAs */
	char *upstream_server_name;    /* verified and sent as SNI; NULL: the URL's host */
	struct conf_file upstream_client_cert, upstream_client_key;

	struct conf_file tls_certificate, tls_certificate_key; /* the listener speaks TLS */
	char *tls_ciphers;             /* its TLS 1.2 suites, an OpenSSL cipher list */
	int tls_ciphers_line;          /* where it is set; 0: the default */
	struct conf_file admin_token;  /* the records API's bearer token */
	struct conf_file body_encryption; /* keys sealing stored bodies and headers */

	char *database;                /* NULL: libpq defaults and PG* env */
	char *resolver;                /* DNS servers, space-separated; NULL: /etc/resolv.conf's */
	int64_t resolver_timeout_ms;   /* one connect's host name lookups */

	struct conf_addr admin;        /* host NULL: off */

	int workers;

	char *key_header;
	int mismatch_status;           /* 422 or 409 */

	int64_t upstream_timeout_ms;
	int64_t client_timeout_ms;
	int64_t store_timeout_ms;
	enum prepared_mode prepared_statements;
	int64_t lease_ms;
	int64_t shutdown_timeout_ms;
	int64_t sweep_interval_ms;     /* 0: this instance does not sweep */
	int64_t actor_max_records;     /* per actor across instances, 0: no quota */
	size_t actor_max_stored_bytes; /* per actor across instances, 0: no quota */
	int64_t quota_refresh_ms;      /* how often the actors over a quota are read */

	size_t max_request_body;       /* intercepted requests only */
	size_t max_stored_body;
	size_t relay_buffer;           /* unsent bytes per direction of a relayed exchange */
	size_t relay_budget;           /* unsent bytes of the whole process; 0 = none */
	size_t relay_budget_per_peer;  /* ... of one peer address (IPv6: /64); 0 = none */
	int64_t tunnel_timeout_ms;     /* idle limit of an upgraded connection */
	char **tunnel_upgrades;        /* protocols a pass-through upgrade may switch to */
	int ntunnel_upgrades;
	size_t replay_cache;           /* bytes per worker; 0 = off */

	enum store_unavailable_mode store_unavailable;
	enum conf_log_level log_level; /* the least level logged */
	char *problem_base;
	char *contract_url;            /* NULL: no Link header on problems */
	char *contract_server;         /* NULL: the OpenAPI document names no server */

	int max_connections;           /* client connections, all workers together */
	int max_owners;                /* owners in flight, all workers together; 0: off */
	struct conf_cidr *trusted_proxies; /* peers whose forwarding headers are kept */
	int ntrusted_proxies;
	int underscores_in_headers;    /* header names holding '_' go upstream */
	int http2;                     /* the listener speaks HTTP/2 (ALPN h2, prior knowledge) */
	int http2_max_concurrent_streams; /* open streams per HTTP/2 connection */

	struct route *routes;          /* file order; the first match wins */
	int nroutes;
};

/*
 * Read and validate FILE. On success returns 0 and stores a new conf in *out
 * (the caller frees it with conf_free). On failure returns -1 and writes
 * "FILE:LINE: message" (FILE as given) into err, or "FILE: message" with the
 * system's reason when FILE cannot be read (missing, not readable, a
 * directory, too large); *out is untouched.
 */
int conf_load(const char *file, struct conf **out, char *err, size_t errlen)
	__attribute__((warn_unused_result));

/* Same as conf_load, from a string; name is used in messages. */
int conf_parse(const char *name, const char *text, size_t len, struct conf **out,
	       char *err, size_t errlen) __attribute__((warn_unused_result));

void conf_free(struct conf *conf);

/*
 * The first directive whose value differs between old and new and that
 * only a restart can apply (the directive table's restart-only ones:
 * listen, workers, admin, upstream and its TLS settings, database,
 * store_timeout, replay_cache),
 * or NULL when a reload may apply new.
 */
const char *conf_restart_only_change(const struct conf *old, const struct conf *new);

/*
 * What conf accepts but is likely a mistake, each handed to say as one line
 * "FILE:LINE: warning: ..." (FILE as given): an "actor jwt" without
 * audience=, which takes a token its issuer made for another service.
 * A directive that several routes inherit is said once.
 */
typedef void (*conf_warning_fn)(const char *line, void *arg);
void conf_warnings(const struct conf *conf, conf_warning_fn say, void *arg);

/*
 * 1 when the n bytes at name are "localhost" (any case) or a numeric
 * loopback address (127.0.0.0/8, ::1).
 */
int conf_loopback(const char *name, size_t n);

/* Value parsers, shared with the command line and tests. Return 0 on
 * success, -1 on bad input. */
int conf_parse_duration(const char *s, int64_t *ms);
int conf_parse_size(const char *s, size_t *bytes);
/* Decimal digits only, in [min, max]. */
int conf_parse_int(const char *s, int min, int max, int *out);

#endif
