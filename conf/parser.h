/*
 * The configuration parser's state and the helpers its halves share
 * (conf.c: lexer, table, parser, validation; directives.c: the directives
 * with setters of their own; args.c: errors and argument values, used by
 * both). Private to conf/.
 */
#ifndef IDEMPROXY_CONF_PARSER_H
#define IDEMPROXY_CONF_PARSER_H

#include <stddef.h>
#include <stdint.h>

struct conf;
struct conf_addr;
struct conf_directive;
struct conf_file;
struct route;
struct status_set;

#define CONF_DIRECTIVES_MAX 96
#define CONF_PORT_MAX	    65535
#define CONF_STATUS_MIN	    100
#define CONF_STATUS_MAX	    599

struct conf_parser {
	const char *name;
	char *err;
	size_t errlen;
	int line;

	struct conf *conf;
	struct route *defaults; /* route directives set at top level */
	struct route *builtin;	/* route directives' table defaults */
	struct route *route;	/* the open block, or NULL */
	const struct conf_directive *dir;
	int top_seen[CONF_DIRECTIVES_MAX]; /* first line of each directive, 0: unset */
	int route_seen[CONF_DIRECTIVES_MAX];

	char *buf; /* the current line's arguments, NUL-separated */
	size_t bufcap;
	char **argv;
	unsigned char *quoted;
	int argc, argvcap;
};

/* Write "FILE:LINE: message" for the current line into p->err; returns -1. */
int conf_error(struct conf_parser *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Same as conf_error for a given LINE; returns -1. */
int conf_error_at(struct conf_parser *p, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Free names[0..n-1] and names. */
void conf_free_names(char **names, int n);
int conf_set_str(struct conf_parser *p, char **dst, const char *s);
int conf_set_file(struct conf_parser *p, struct conf_file *f, const char *path);
int conf_is_token(const char *s);
int conf_parse_addr(struct conf_parser *p, const char *s, struct conf_addr *a);
int conf_duration_arg(struct conf_parser *p, const char *s, int64_t *ms);
int conf_size_arg(struct conf_parser *p, const char *s, size_t *bytes);
int conf_status_set(struct conf_parser *p, struct status_set *set, int argc, char **argv,
		    int flags);

/* The setters of conf_directives[] (directives.c): (p, r, argc, argv) as conf_setter_fn. */
int conf_set_resolver(struct conf_parser *p, struct route *r, int argc, char **argv);
int conf_set_upstream(struct conf_parser *p, struct route *r, int argc, char **argv);
int conf_set_workers(struct conf_parser *p, struct route *r, int argc, char **argv);
int conf_set_max_connections(struct conf_parser *p, struct route *r, int argc, char **argv);
int conf_set_max_owners(struct conf_parser *p, struct route *r, int argc, char **argv);
int conf_set_actor_max_owners(struct conf_parser *p, struct route *r, int argc, char **argv);
int conf_set_forward_key(struct conf_parser *p, struct route *r, int argc, char **argv);
int conf_set_h2_streams(struct conf_parser *p, struct route *r, int argc, char **argv);
int conf_set_trusted_proxies(struct conf_parser *p, struct route *r, int argc, char **argv);
int conf_set_problem_base(struct conf_parser *p, struct route *r, int argc, char **argv);
int conf_set_contract_url(struct conf_parser *p, struct route *r, int argc, char **argv);
int conf_set_contract_server(struct conf_parser *p, struct route *r, int argc, char **argv);
int conf_open_route(struct conf_parser *p, struct route *r, int argc, char **argv);
int conf_set_match(struct conf_parser *p, struct route *r, int argc, char **argv);
int conf_set_actor(struct conf_parser *p, struct route *r, int argc, char **argv);
int conf_set_fingerprint(struct conf_parser *p, struct route *r, int argc, char **argv);
int conf_set_store_headers(struct conf_parser *p, struct route *r, int argc, char **argv);
int conf_set_tunnel_upgrades(struct conf_parser *p, struct route *r, int argc, char **argv);
int conf_set_key_from(struct conf_parser *p, struct route *r, int argc, char **argv);
int conf_set_operation_from(struct conf_parser *p, struct route *r, int argc, char **argv);
int conf_set_fp_headers(struct conf_parser *p, struct route *r, int argc, char **argv);
int conf_set_in_progress(struct conf_parser *p, struct route *r, int argc, char **argv);
int conf_set_expired_keys(struct conf_parser *p, struct route *r, int argc, char **argv);
int conf_set_actor_max_records(struct conf_parser *p, struct route *r, int argc, char **argv);
int conf_set_grpc(struct conf_parser *p, struct route *r, int argc, char **argv);
int conf_set_client_cert(struct conf_parser *p, struct route *r, int argc, char **argv);

#endif
