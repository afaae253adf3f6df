/*
 * `idemproxy records`: the operator's record operations (records.c) from
 * the shell, against the configured database. Besides migrate.c, the only
 * module that uses blocking libpq: it runs outside any event loop and never
 * in the proxy.
 */
#include "proxy/records_cli.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <libpq-fe.h>

#include "conf/conf.h"
#include "proxy/actor.h"
#include "proxy/records.h"
#include "proxy/seal.h"
#include "proxy/secrets.h"

#define RECORDS_MSG_MAX	     1024
#define RECORDS_READ_CHUNK   65536
#define RECORDS_MS_PER_S     1000
#define RECORDS_DEFAULT_CONF "idemproxy.conf"
#define RECORDS_APP_NAME     "idemproxy-records"

#define RECORDS_EXIT_OK	   0
#define RECORDS_EXIT_FAIL  1
#define RECORDS_EXIT_USAGE 2

/* The options a command may take (getopt_long values, and masks). */
enum records_opt {
	OPT_LIMIT = 1 << 0,
	OPT_BODY_FILE = 1 << 1,
	OPT_CONTENT_TYPE = 1 << 2,
	OPT_RETENTION = 1 << 3,
	OPT_EXPIRED = 1 << 4,
};

static const struct records_cli_cmd {
	const char *name;
	enum records_cmd cmd;
	int nargs;     /* positional arguments after the name */
	unsigned opts; /* the records_opt it accepts */
} records_cli_cmds[] = {
    {"list", RECORDS_LIST, 0, OPT_LIMIT | OPT_EXPIRED},
    {"show", RECORDS_SHOW, 3, 0},
    {"release", RECORDS_RELEASE, 3, 0},
    {"resolve", RECORDS_RESOLVE, 4, OPT_BODY_FILE | OPT_CONTENT_TYPE | OPT_RETENTION},
};

static const struct option records_options[] = {
    {"limit", required_argument, NULL, OPT_LIMIT},
    {"body-file", required_argument, NULL, OPT_BODY_FILE},
    {"content-type", required_argument, NULL, OPT_CONTENT_TYPE},
    {"retention", required_argument, NULL, OPT_RETENTION},
    {"expired", no_argument, NULL, OPT_EXPIRED},
    {"help", no_argument, NULL, 'h'},
    {NULL, 0, NULL, 0},
};

/* What the command line asked for; the strings point into argv. */
struct records_cli {
	const char *file;
	const struct records_cli_cmd *cmd;
	char **args; /* the command's positional arguments */
	unsigned opts;
	const char *limit, *body_file, *content_type, *retention;
};

static const char records_synopsis[] =
    "usage: idemproxy records [-c FILE] list [--limit N] [--expired]\n"
    "       idemproxy records [-c FILE] show ACTOR OPERATION KEY\n"
    "       idemproxy records [-c FILE] release ACTOR OPERATION KEY\n"
    "       idemproxy records [-c FILE] resolve ACTOR OPERATION KEY STATUS\n"
    "                 [--body-file PATH|-] [--content-type TYPE] [--retention DUR]\n";

static void records_help(void)
{
	printf("%s\n"
	       "ACTOR is the stored form: \"h:\" and the actor header's value (h:alice),\n"
	       "or \"anonymous\". Put \"--\" before arguments that start with \"-\".\n"
	       "  list     unknown records and in-progress ones whose lease ran out,\n"
	       "           oldest first (at most N: default %d, up to %d); with\n"
	       "           --expired the tombstones of expired_keys refuse instead,\n"
	       "           the next to be deleted first\n"
	       "  show     the scope's record, whatever its state\n"
	       "  release  delete a stuck record, so a retry runs the request again\n"
	       "  resolve  make a stuck record completed with STATUS, the body read from\n"
	       "           PATH (- for stdin; default empty) and TYPE as its Content-Type;\n"
	       "           retries then replay it. It expires after DUR (default: the\n"
	       "           route's retention for OPERATION)\n"
	       "Prints the result as JSON. Exit status: 0 done, 1 no such record, record\n"
	       "not stuck (completed, or its lease is live) or an error, 2 bad usage.\n",
	       records_synopsis, RECORDS_LIST_DEFAULT, RECORDS_LIST_MAX);
}

/*
 * Read argv into cli. Returns 0, 1 when help was asked for, or -1 on a usage
 * error (with its message on stderr).
 */
static int records_cli_parse(int argc, char **argv, struct records_cli *cli)
{
	const struct option *o;
	unsigned extra;
	int opt, nargs;
	size_t i;

	memset(cli, 0, sizeof(*cli));
	cli->file = RECORDS_DEFAULT_CONF;
	/* 0, not 1: glibc then starts over, whatever getopt ran before. */
	optind = 0;
	while ((opt = getopt_long(argc, argv, "c:h", records_options, NULL)) != -1) {
		switch (opt) {
		case 'c':
			cli->file = optarg;
			break;
		case 'h':
			return 1;
		case OPT_LIMIT:
			cli->limit = optarg;
			break;
		case OPT_BODY_FILE:
			cli->body_file = optarg;
			break;
		case OPT_CONTENT_TYPE:
			cli->content_type = optarg;
			break;
		case OPT_RETENTION:
			cli->retention = optarg;
			break;
		case OPT_EXPIRED:
			break;
		default:
			return -1;
		}
		if (opt != 'c')
			cli->opts |= (unsigned)opt;
	}
	if (optind == argc) {
		fprintf(stderr, "records: a command is required\n");
		return -1;
	}
	for (i = 0; i < sizeof(records_cli_cmds) / sizeof(records_cli_cmds[0]); i++) {
		if (strcmp(argv[optind], records_cli_cmds[i].name) == 0)
			cli->cmd = &records_cli_cmds[i];
	}
	if (!cli->cmd) {
		fprintf(stderr, "records: unknown command \"%s\"\n", argv[optind]);
		return -1;
	}
	nargs = argc - optind - 1;
	if (nargs != cli->cmd->nargs) {
		fprintf(stderr, "records: %s takes %d arguments, not %d\n", cli->cmd->name,
			cli->cmd->nargs, nargs);
		return -1;
	}
	extra = cli->opts & ~cli->cmd->opts;
	for (o = records_options; extra && o->name; o++) {
		if (extra & (unsigned)o->val) {
			fprintf(stderr, "records: --%s does not apply to %s\n", o->name,
				cli->cmd->name);
			return -1;
		}
	}
	cli->args = argv + optind + 1;
	return 0;
}

/*
 * The arguments of cli that need no configuration, into a. Returns 0, or -1
 * with the usage error in err.
 */
static int records_cli_args(const struct records_cli *cli, struct records_args *a, char *err,
			    size_t errlen)
{
	memset(a, 0, sizeof(*a));
	a->expired = (cli->opts & OPT_EXPIRED) != 0;
	if (cli->limit && conf_parse_int(cli->limit, 1, RECORDS_LIST_MAX, &a->limit) < 0) {
		snprintf(err, errlen, "--limit must be 1..%d", RECORDS_LIST_MAX);
		return -1;
	}
	if (cli->cmd->nargs == 0)
		return 0;
	a->actor = cli->args[0];
	a->operation = cli->args[1];
	a->key = cli->args[2];
	if (cli->cmd->cmd != RECORDS_RESOLVE)
		return 0;
	if (conf_parse_int(cli->args[3], RECORDS_STATUS_MIN, RECORDS_STATUS_MAX, &a->status) <
	    0) {
		snprintf(err, errlen, "STATUS must be %d..%d", RECORDS_STATUS_MIN,
			 RECORDS_STATUS_MAX);
		return -1;
	}
	if (cli->retention &&
	    (conf_parse_duration(cli->retention, &a->retention_ms) < 0 || a->retention_ms <= 0)) {
		snprintf(err, errlen, "--retention: invalid duration \"%s\"", cli->retention);
		return -1;
	}
	a->content_type = cli->content_type;
	return 0;
}

/*
 * Read all of path ("-": stdin), at most max bytes, into a new buffer in
 * *out (the caller frees it) and its length in *len. Returns 0, or -1 with
 * a message in err.
 */
static int records_read_body(const char *path, size_t max, unsigned char **out, size_t *len,
			     char *err, size_t errlen)
{
	FILE *f = strcmp(path, "-") == 0 ? stdin : fopen(path, "rb");
	unsigned char *buf = NULL, *grown;
	size_t n = 0, cap = 0, got;
	int rc = -1;

	if (!f) {
		snprintf(err, errlen, "cannot open %s: %s", path, strerror(errno));
		return -1;
	}
	for (;;) {
		if (cap - n < RECORDS_READ_CHUNK) {
			grown = realloc(buf, cap + RECORDS_READ_CHUNK);
			if (!grown) {
				snprintf(err, errlen, "out of memory");
				goto out;
			}
			buf = grown;
			cap += RECORDS_READ_CHUNK;
		}
		got = fread(buf + n, 1, RECORDS_READ_CHUNK, f);
		n += got;
		if (n > max) {
			snprintf(err, errlen, "%s is larger than max_stored_body (%zu bytes)", path,
				 max);
			goto out;
		}
		if (got < RECORDS_READ_CHUNK)
			break;
	}
	if (ferror(f)) {
		snprintf(err, errlen, "cannot read %s: %s", path, strerror(errno));
		goto out;
	}
	*out = buf;
	*len = n;
	buf = NULL;
	rc = 0;
out:
	free(buf);
	if (f != stdin)
		fclose(f);
	return rc;
}

/*
 * After a release or resolve that changed the record: wake the scope's
 * waiters (a failure only means they wait for their own deadline).
 */
static void records_cli_notify(PGconn *conn, enum records_cmd cmd, const struct records_args *a,
			       const PGresult *res)
{
	static const Oid types[] = {STORE_OID_TEXT_ARRAY};
	char token[SCOPE_TOKEN_SIZE];
	const char *tokens[] = {token};
	const char *values[1];
	PGresult *done;

	if (!records_changed(cmd, a, res, token) || !(values[0] = store_tokens_array(tokens, 1)))
		return;
	done = PQexecParams(conn, STORE_SQL_NOTIFY, 1, types, values, NULL, NULL, 0);
	PQclear(done);
	free((char *)values[0]);
}

/*
 * A resolve's new generation from conn, and st completed with it, sealed
 * under keys (NULL: encryption off). Returns 0, or -1 with err.
 */
static int records_cli_resolve(PGconn *conn, const struct records_args *a,
			       const struct seal_keys *keys, struct records_stmt *st, char *err,
			       size_t errlen)
{
	PGresult *res = PQexec(conn, RECORDS_SQL_GENERATION);
	int64_t generation;
	int rc = -1;

	if (records_generation(res, &generation) < 0)
		snprintf(err, errlen, "database error: %s", PQerrorMessage(conn));
	else
		rc = records_stmt_resolve(st, a, keys, generation, err, errlen);
	PQclear(res);
	return rc;
}

/*
 * Connect to conf's database, run st (a resolve completed first, sealed
 * under seal) and render its result for cmd into *doc (the caller frees
 * it), *len and *http_status. Returns 0, or -1 with a message in err.
 */
static int records_exec(const struct conf *conf, enum records_cmd cmd, const struct records_args *a,
			const struct seal_keys *seal, struct records_stmt *st, char **doc,
			size_t *len, int *http_status, char *err, size_t errlen)
{
	/* Ours first: a connect_timeout or application_name in the
	 * configured conninfo (expanded from dbname) overrides them. */
	const char *keys[] = {"connect_timeout", "fallback_application_name", "dbname", NULL};
	const char *values[] = {NULL, RECORDS_APP_NAME, conf->database, NULL};
	char timeout[RECORDS_NUM_MAX];
	PGresult *res = NULL;
	PGconn *conn;
	int rc = -1;

	snprintf(timeout, sizeof(timeout), "%" PRId64,
		 (conf->store_timeout_ms + RECORDS_MS_PER_S - 1) / RECORDS_MS_PER_S);
	values[0] = timeout;
	if (!conf->database)
		keys[2] = NULL;
	/* A blocking command outside any event loop: libpq may look host
	 * names up itself (the store does it with evdns, store_dns.c). */
	conn = PQconnectdbParams(keys, values, 1);
	if (PQstatus(conn) != CONNECTION_OK) {
		snprintf(err, errlen, "cannot connect to the database: %s", PQerrorMessage(conn));
		goto out;
	}
	if (cmd == RECORDS_RESOLVE && records_cli_resolve(conn, a, seal, st, err, errlen) < 0)
		goto out;
	res = PQexecParams(conn, st->query.sql, st->query.nparams, st->query.types,
			   st->query.values, st->query.lengths, st->query.formats, STORE_FORMAT_TEXT);
	if (PQresultStatus(res) != PGRES_TUPLES_OK) {
		snprintf(err, errlen, "database error: %s", PQerrorMessage(conn));
		goto out;
	}
	*doc = records_render(cmd, res, http_status, len);
	if (!*doc) {
		snprintf(err, errlen, "cannot render the result");
		goto out;
	}
	records_cli_notify(conn, cmd, a, res);
	rc = 0;
out:
	err[strcspn(err, "\n")] = '\0';
	PQclear(res);
	PQfinish(conn);
	return rc;
}

int records_main(int argc, char **argv)
{
	struct records_cli cli;
	struct records_args a;
	struct records_stmt st = {0};
	struct conf *conf = NULL;
	struct seal_keys *keys = NULL;
	unsigned char *body = NULL;
	char err[RECORDS_MSG_MAX] = "", *doc = NULL;
	int parsed, http_status = 0, rc = RECORDS_EXIT_USAGE;
	size_t len = 0;

	parsed = records_cli_parse(argc, argv, &cli);
	if (parsed > 0) {
		records_help();
		return RECORDS_EXIT_OK;
	}
	if (parsed < 0) {
		fputs(records_synopsis, stderr);
		return RECORDS_EXIT_USAGE;
	}
	if (records_cli_args(&cli, &a, err, sizeof(err)) < 0)
		goto out;
	rc = RECORDS_EXIT_FAIL;
	if (conf_load(cli.file, &conf, err, sizeof(err)) < 0)
		goto out;
	if (cli.cmd->cmd == RECORDS_RESOLVE && !a.retention_ms) {
		a.retention_ms = records_retention(conf, a.operation);
		if (!a.retention_ms) {
			snprintf(err, sizeof(err), "%s has no route \"%s\": give --retention",
				 cli.file, a.operation);
			rc = RECORDS_EXIT_USAGE;
			goto out;
		}
	}
	if (cli.body_file) {
		if (records_read_body(cli.body_file, conf->max_stored_body, &body, &a.body_len, err,
				      sizeof(err)) < 0)
			goto out;
		a.body = body;
	}
	if (records_stmt_build(cli.cmd->cmd, &a, &st, err, sizeof(err)) < 0) {
		rc = RECORDS_EXIT_USAGE;
		goto out;
	}
	/* A resolve seals what it stores as the proxy would. */
	if (cli.cmd->cmd == RECORDS_RESOLVE && secrets_load_seal(conf, &keys, err, sizeof(err)) < 0)
		goto out;
	if (records_exec(conf, cli.cmd->cmd, &a, keys, &st, &doc, &len, &http_status, err,
			 sizeof(err)) < 0)
		goto out;
	fwrite(doc, 1, len, stdout);
	putchar('\n');
	if (fflush(stdout) != 0 || ferror(stdout)) {
		snprintf(err, sizeof(err), "cannot write the result: %s", strerror(errno));
		goto out;
	}
	if (http_status == RECORDS_HTTP_NOT_FOUND && a.actor && !actor_stored_form(a.actor))
		snprintf(err, sizeof(err),
			 "no such record; ACTOR is the stored form, which names where the actor "
			 "came from: \"h:%s\" for an actor header (see records --help)",
			 a.actor);
	else if (http_status == RECORDS_HTTP_NOT_FOUND)
		snprintf(err, sizeof(err), "no such record");
	else if (http_status == RECORDS_HTTP_CONFLICT)
		snprintf(err, sizeof(err),
			 "record is not stuck: it is completed or its lease is live");
	else
		rc = RECORDS_EXIT_OK;
out:
	if (err[0])
		fprintf(stderr, "records: %s\n", err);
	if (rc == RECORDS_EXIT_USAGE)
		fputs(records_synopsis, stderr);
	free(doc);
	free(body);
	records_stmt_clear(&st);
	seal_keys_free(keys);
	conf_free(conf);
	return rc;
}
