/*
 * idemproxy: command line, configuration, signals and the worker's loop.
 *
 *   idemproxy -c FILE            run in the foreground
 *   idemproxy -t -c FILE         check the configuration
 *   idemproxy -T -c FILE         check it and print the effective configuration
 *   idemproxy migrate -c FILE    apply pending schema migrations
 *   idemproxy migrate --hash-partitions N -c FILE
 *   idemproxy migrate --distribute -c FILE
 *                                and partition the record table by hash
 *   idemproxy migrate status -c FILE   list them; exit 1 when one is pending
 *   idemproxy describe -c FILE [--format markdown|openapi]
 *                                print every route's idempotency contract
 *   idemproxy records ...        inspect, release or resolve stuck records
 *   idemproxy --version
 */
#include <errno.h>
#include <event2/event.h>
#include <event2/thread.h>
#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "conf/conf.h"
#include "conf/dump.h"
#include "proxy/admin.h"
#include "proxy/clock.h"
#include "proxy/conf_gen.h"
#include "proxy/contract.h"
#include "proxy/evalloc.h"
#include "proxy/evfree.h"
#include "proxy/log.h"
#include "proxy/migrate.h"
#include "proxy/notify.h"
#include "proxy/pace.h"
#include "proxy/admit.h"
#include "proxy/records_cli.h"
#include "proxy/resolver.h"
#include "proxy/secrets.h"
#include "proxy/stats.h"
#include "proxy/store.h"
#include "proxy/quota.h"
#include "proxy/sweeper.h"
#include "proxy/upstream.h"
#include "proxy/worker.h"

#define DEFAULT_CONF "idemproxy.conf"
#define OWNER_ID_MAX 96
/* Descriptors besides connections: per worker (loop, wake-ups, listening
 * socket, store, resolver) and for the whole process. */
#define FD_PER_WORKER 8
#define FD_FIXED 32

/* Give each route of conf its counters' row, before any worker sees it. */
static void register_routes(struct conf *conf)
{
	for (int i = 0; i < conf->nroutes; i++)
		conf->routes[i].stats_id = stats_route_id(conf->routes[i].operation);
}

struct supervisor {
	struct event_base *base;
	struct conf_gen *gen;       /* the running configuration */
	struct worker *workers;     /* nworkers of them, the first started running */
	struct stats **each;        /* the workers' counters, for the admin */
	int nworkers;
	int started;
	int stopping;
	struct evdns_base *dns;     /* its host names */
	struct store *store;        /* the sweeper's and the admin's */
	struct sweeper *sweeper;
	struct quota *quota;        /* reads the actors over a quota */
	struct pace *pace;          /* owner durations, shared by the workers */
	struct admit *admit;        /* owners in flight, shared by the workers */
	struct admin *admin;        /* NULL: no admin listener */
	struct event *signals[3];   /* SIGTERM, SIGINT, SIGHUP */
	struct event *ready_ev;     /* polls for every worker's first store connection */
	int ready;                  /* READY=1 sent */
};

/* SIGTERM/SIGINT: every worker drains; a second signal stops them at once. */
static void signal_stop_cb(evutil_socket_t sig, short what, void *arg)
{
	struct supervisor *sv = arg;

	if (sv->stopping) {
		log_warn(NULL, "second stop signal: exiting now");
	} else {
		log_info(NULL, "stopping: waiting up to %lld ms for in-flight requests",
			 (long long)sv->gen->conf->shutdown_timeout_ms);
		notify_send("STOPPING=1");
		if (sv->admin)
			admin_draining(sv->admin);
	}
	sv->stopping = 1;
	for (int i = 0; i < sv->nworkers; i++)
		worker_stop(&sv->workers[i]);
}

/* A configuration warning in the log (start-up, reload). */
static void warning_log(const char *line, void *arg)
{
	log_warn(NULL, "%s", line);
}

/*
 * Read FILE and every file it names. 0 with *conf and *secrets, or -1 with
 * "FILE:LINE: message" in err.
 */
static int load(const char *file, struct conf **conf, struct secrets **secrets, char *err,
		size_t errlen)
{
	if (conf_load(file, conf, err, errlen) < 0)
		return -1;
	if (secrets_load(*conf, secrets, err, errlen) < 0) {
		conf_free(*conf);
		*conf = NULL;
		return -1;
	}
	return 0;
}

/*
 * SIGHUP: build and check a whole new configuration, then hand it to every
 * worker; new requests use it, requests in flight finish under theirs. A
 * file that does not load, or that changes what only a restart can apply,
 * leaves the running configuration in place.
 */
static void reload(struct supervisor *sv)
{
	const char *file = sv->gen->conf->file;
	struct conf *conf = NULL;
	struct secrets *secrets = NULL;
	struct conf_gen *gen;
	const char *changed;
	char err[CONF_ERR_MAX];

	if (load(file, &conf, &secrets, err, sizeof(err)) < 0) {
		log_error(NULL, "reload failed, the running configuration stays: %s", err);
		if (sv->admin)
			admin_reload_failed(sv->admin, err);
		return;
	}
	conf_warnings(conf, warning_log, NULL);
	secrets_warnings(conf, secrets, warning_log, NULL);
	changed = conf_restart_only_change(sv->gen->conf, conf);
	if (changed) {
		log_error(NULL, "reload refused: \"%s\" changed, which needs a restart; "
				"the running configuration stays", changed);
		snprintf(err, sizeof(err), "\"%s\" changed, which needs a restart", changed);
		if (sv->admin)
			admin_reload_failed(sv->admin, err);
		conf_free(conf);
		secrets_free(secrets);
		return;
	}
	secrets_follow(secrets, sv->gen->secrets);
	register_routes(conf);
	gen = conf_gen_new(conf, secrets);
	if (!gen) {
		log_error(NULL, "reload failed: out of memory");
		if (sv->admin)
			admin_reload_failed(sv->admin, "out of memory");
		conf_free(conf);
		secrets_free(secrets);
		return;
	}
	for (int i = 0; i < sv->nworkers; i++)
		worker_reload(&sv->workers[i], gen);
	sweeper_set_interval(sv->sweeper, conf->sweep_interval_ms);
	quota_configure(sv->quota, conf->actor_max_records, conf->actor_max_stored_bytes,
			conf->quota_refresh_ms);
	log_set_level((enum log_level)conf->log_level);
	if (sv->admin)
		admin_reload(sv->admin, conf, secrets);
	/* file is the old configuration's: it may go with the release. */
	log_info(NULL, "configuration reloaded from %s", conf->file);
	conf_gen_release(sv->gen);
	sv->gen = gen;
}

/* SIGHUP: a reload, told to the service manager around it. */
static void signal_hup_cb(evutil_socket_t sig, short what, void *arg)
{
	struct supervisor *sv = arg;

	if (sv->stopping)
		return;
	/* Before the first READY=1 the service manager still waits for it. */
	if (sv->ready)
		notify_reloading();
	reload(sv);
	if (sv->ready)
		notify_send("READY=1");
}

/* How often the supervisor looks whether every worker's store is up, at start. */
#define READY_POLL_MS 20

/*
 * At start: READY=1 once every worker's store connection is up (until then
 * keyed requests wait for it, and /readyz says 503), looked at every
 * READY_POLL_MS. With PostgreSQL down the service manager keeps waiting,
 * up to its start timeout.
 */
static void ready_poll_cb(evutil_socket_t fd, short what, void *arg)
{
	struct supervisor *sv = arg;

	for (int i = 0; i < sv->nworkers; i++)
		if (!atomic_load_explicit(&sv->each[i]->store_connected, memory_order_relaxed))
			return;
	event_del(sv->ready_ev);
	sv->ready = 1;
	notify_send("READY=1");
	log_info(NULL, "ready: every worker's store connection is up");
}

/* Start waiting for readiness (ready_poll_cb). Returns 0 or -1. */
static int supervisor_wait_ready(struct supervisor *sv)
{
	struct timeval tv = clock_tv(READY_POLL_MS);

	sv->ready_ev = event_new(sv->base, -1, EV_PERSIST, ready_poll_cb, sv);
	if (!sv->ready_ev || event_add(sv->ready_ev, &tv) < 0)
		return -1;
	return 0;
}

/* A thread that waits for the workers and ends the supervisor's loop. */
static void *joiner_main(void *arg)
{
	struct supervisor *sv = arg;

	for (int i = 0; i < sv->nworkers; i++)
		worker_join(&sv->workers[i]);
	event_base_loopbreak(sv->base);
	return NULL;
}

/* Signals as events of the supervisor's loop. Returns 0 or -1. */
static int supervisor_signals(struct supervisor *sv)
{
	static const int sigs[] = {SIGTERM, SIGINT, SIGHUP};

	for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++) {
		sv->signals[i] = evsignal_new(sv->base, sigs[i],
					      sigs[i] == SIGHUP ? signal_hup_cb : signal_stop_cb, sv);
		if (!sv->signals[i] || evsignal_add(sv->signals[i], NULL) < 0)
			return -1;
	}
	return 0;
}

/*
 * Raises the soft descriptor limit to the hard limit (as haproxy does; not
 * just to the need, since max_connections is reloadable and this runs once)
 * and warns when that cannot hold what max_connections can open: each
 * client connection and the upstream connection it may use, each worker's
 * idle upstream pool and store connection, and a few of the process's own.
 * The defaults (max_connections 8000) fit a hard limit of 20000 with up to
 * 48 workers.
 */
static void raise_fd_limit(const struct conf *conf)
{
	struct rlimit rl;
	long long need = 2LL * conf->max_connections +
			 (long long)conf->workers * (UPSTREAM_MAX_IDLE + FD_PER_WORKER) + FD_FIXED;

	if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
		return;
	if (rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		if (setrlimit(RLIMIT_NOFILE, &rl) < 0)
			getrlimit(RLIMIT_NOFILE, &rl);
	}
	if (rl.rlim_cur != RLIM_INFINITY && (long long)rl.rlim_cur < need)
		log_warn(NULL,
			 "the descriptor limit (%lld) is below the %lld that max_connections %d "
			 "with %d workers may need, and its hard limit does not allow more; "
			 "accepts pause when descriptors run out: raise it (ulimit -Hn, "
			 "LimitNOFILE=) or lower max_connections",
			 (long long)rl.rlim_cur, need, conf->max_connections, conf->workers);
}

/*
 * Everything serving conf (taken over) needs, from the signals to running
 * workers. Returns 0, or -1 with what was set up left for
 * supervisor_free().
 */
static int supervisor_start(struct supervisor *sv, struct conf *conf, struct secrets *secrets)
{
	char owner_id[OWNER_ID_MAX], host[OWNER_ID_MAX / 2] = "localhost";

	register_routes(conf);
	raise_fd_limit(conf);
	sv->gen = conf_gen_new(conf, secrets);
	if (!sv->gen) {
		conf_free(conf);
		secrets_free(secrets);
		log_error(NULL, "cannot start: out of memory");
		return -1;
	}
	sv->nworkers = conf->workers;
	sv->workers = calloc((size_t)sv->nworkers, sizeof(*sv->workers));
	sv->each = calloc((size_t)sv->nworkers, sizeof(*sv->each));
	sv->base = event_base_new();
	sv->pace = pace_new(STATS_ROUTES_MAX + 1);
	sv->admit = admit_new();
	if (!sv->workers || !sv->each || !sv->base || !sv->pace || !sv->admit ||
	    supervisor_signals(sv) < 0) {
		log_error(NULL, "cannot start: no memory for the workers, or the main event loop "
				"or its signal events failed");
		return -1;
	}
	/* Every listener is bound before any thread runs: a bad address fails
	 * start-up as a whole. worker_init says why it failed. */
	for (int i = 0; i < sv->nworkers; i++) {
		sv->each[i] = &sv->workers[i].stats;
		if (worker_init(&sv->workers[i], i, sv->gen, sv->pace, sv->admit) < 0)
			return -1;
	}
	gethostname(host, sizeof(host) - 1);
	snprintf(owner_id, sizeof(owner_id), "%s:%d:main", host, (int)getpid());
	sv->dns = resolver_new(sv->base, conf);
	if (!sv->dns)
		return -1;
	sv->store = store_new(sv->base, sv->dns, conf->resolver_timeout_ms, conf->database,
			      conf->store_timeout_ms, owner_id, 0);
	sv->sweeper = sv->store ? sweeper_new(sv->base, sv->store, conf->sweep_interval_ms) : NULL;
	sv->quota = sv->store ? quota_new(sv->base, sv->store) : NULL;
	if (!sv->sweeper || !sv->quota) {
		log_error(NULL, "cannot start: the sweeper's store: out of memory");
		return -1;
	}
	quota_configure(sv->quota, conf->actor_max_records, conf->actor_max_stored_bytes,
			conf->quota_refresh_ms);
	if (conf->admin.host) {
		sv->admin = admin_new(sv->base, conf, sv->gen->secrets, sv->store, sv->each, sv->nworkers, sv->sweeper);
		if (!sv->admin)
			return -1;
		admin_set_quota(sv->admin, sv->quota);
	}
	for (; sv->started < sv->nworkers; sv->started++) {
		if (worker_start(&sv->workers[sv->started]) < 0) {
			log_error(NULL, "cannot start worker %d: %s", sv->started, strerror(errno));
			return -1;
		}
	}
	log_info(NULL, "idemproxy %s listening on %s:%d with %d workers, upstream %s",
		 IDEMPROXY_VERSION, conf->listen.host, conf->listen.port, sv->nworkers,
		 conf->upstream_url);
	return 0;
}

static void supervisor_free(struct supervisor *sv)
{
	/* Start-up failed after some workers ran: nothing is in flight yet,
	 * so their drain ends at once. */
	for (int i = 0; i < sv->started; i++) {
		worker_stop(&sv->workers[i]);
		worker_join(&sv->workers[i]);
	}
	for (int i = 0; sv->workers && i < sv->nworkers; i++)
		worker_free(&sv->workers[i]);
	/* The store first: it drops the sweeper's and the admin's calls. */
	store_free(sv->store);
	sweeper_free(sv->sweeper);
	quota_free(sv->quota);
	admin_free(sv->admin);
	conf_gen_release(sv->gen);
	for (size_t i = 0; i < sizeof(sv->signals) / sizeof(sv->signals[0]); i++)
		evfree_event(&sv->signals[i]);
	evfree_event(&sv->ready_ev);
	resolver_free(sv->base, &sv->dns);
	evfree_base(&sv->base);
	free(sv->workers);
	free(sv->each);
	pace_free(sv->pace);
	admit_free(sv->admit);
}

_Static_assert((int)CONF_LOG_DEBUG == (int)LOG_DEBUG && (int)CONF_LOG_INFO == (int)LOG_INFO &&
		   (int)CONF_LOG_WARN == (int)LOG_WARN && (int)CONF_LOG_ERROR == (int)LOG_ERROR,
	       "log_level's values are enum log_level's");

/* libevent's own messages, as log lines like every other. */
static void libevent_log(int severity, const char *msg)
{
	enum log_level level = severity >= EVENT_LOG_ERR ? LOG_ERROR
			       : severity == EVENT_LOG_WARN ? LOG_WARN
							    : LOG_DEBUG;

	if (log_enabled(level))
		log_write(level, NULL, "libevent: %s", msg);
}

/* Serve with conf (run takes it over) until stopped; the exit status. */
static int run(struct conf *conf, struct secrets *secrets)
{
	struct supervisor sv = {0};
	pthread_t joiner;
	int rc = 1;

	log_set_level((enum log_level)conf->log_level);
	event_set_log_callback(libevent_log);
	if (evthread_use_pthreads() < 0) {
		log_error(NULL, "cannot start: libevent's thread support failed");
		return 1;
	}
	conf_warnings(conf, warning_log, NULL);
	secrets_warnings(conf, secrets, warning_log, NULL);
	/* supervisor_start says why it failed. */
	if (supervisor_start(&sv, conf, secrets) == 0) {
		int err = 0;

		if (supervisor_wait_ready(&sv) < 0)
			log_error(NULL, "cannot start: out of memory");
		else if ((err = pthread_create(&joiner, NULL, joiner_main, &sv)))
			log_error(NULL, "cannot start: a thread: %s", strerror(err));
		else {
			/* Every listener is open: traffic may come, and waits for the store. */
			event_base_dispatch(sv.base);
			pthread_join(joiner, NULL);
			sv.started = 0;
			log_info(NULL, "stopped");
			rc = 0;
		}
	}
	supervisor_free(&sv);
	return rc;
}

/* TEXT (len bytes, taken over) on stdout for the command WHAT: the exit status. */
static int print_text(const char *what, char *text, size_t len)
{
	int rc = 0;

	if (fwrite(text, 1, len, stdout) != len || fflush(stdout) != 0) {
		fprintf(stderr, "idemproxy: %s: cannot write: %s\n", what, strerror(errno));
		rc = 1;
	}
	free(text);
	return rc;
}

/* describe: the contract of every route, on stdout. The exit status. */
static int describe(const struct conf *conf, enum contract_format fmt)
{
	size_t len = 0;
	char *text = contract_render(conf, fmt, &len);

	if (!text) {
		fprintf(stderr, "idemproxy: describe: cannot render the contract (out of memory, or "
				"a configured string is not UTF-8)\n");
		return 1;
	}
	return print_text("describe", text, len);
}

/* A configuration warning on stderr (-t). */
static void warning_print(const char *line, void *arg)
{
	fprintf(stderr, "%s\n", line);
}

/*
 * -t: the file loads; a file without a route intercepts nothing, and a
 * secret file others may read is no secret, which are worth a word.
 * -T (dump): then the effective configuration.
 */
static int check_only(const char *file, const struct conf *conf, const struct secrets *secrets,
		      int dump)
{
	char *text;
	size_t len = 0;

	conf_warnings(conf, warning_print, NULL);
	secrets_warnings(conf, secrets, warning_print, NULL);
	if (conf->nroutes == 0)
		fprintf(stderr, "%s: warning: no route: every request is relayed as it is and "
				"nothing is intercepted\n", file);
	/* -T: the configuration alone on stdout, so that it can be saved and read back. */
	fprintf(dump ? stderr : stdout, "%s: configuration ok\n", file);
	if (!dump)
		return 0;
	text = conf_dump(conf, &len);
	if (!text) {
		fprintf(stderr, "idemproxy: -T: out of memory\n");
		return 1;
	}
	return print_text("-T", text, len);
}

/* What the command line asks for. */
struct options {
	const char *file;
	const char *format; /* describe --format as given, NULL: not given */
	enum contract_format fmt;
	int test_only, dump, migrate, status, describe;
	int help, version; /* --help, --version: anywhere among the options */
	const char *partitions_arg; /* migrate --hash-partitions as given, NULL: not given */
	int partitions;
	int distribute; /* migrate --distribute */
};

/* The usage of the subcommand o names (NULL: every command) on f. */
static void usage_of(FILE *f, const struct options *o)
{
	int all = !o || !(o->migrate || o->describe);

	fprintf(f, "usage:");
	if (all)
		fprintf(f, " idemproxy [-c FILE]          run in the foreground (default ./" DEFAULT_CONF ")\n"
			   "       idemproxy -t [-c FILE]       check the configuration and exit\n"
			   "       idemproxy -T [-c FILE]       check it, then print the effective configuration\n"
			   "                                    (defaults included, secrets masked)\n"
			   "      ");
	if (all || o->migrate)
		fprintf(f, " idemproxy migrate [-c FILE]  apply pending migrations and exit\n"
			   "       idemproxy migrate --hash-partitions N [-c FILE]\n"
			   "                                    then hash-partition the records (N: 2-1024)\n"
			   "       idemproxy migrate --distribute [-c FILE]\n"
			   "                                    then distribute the records on Citus\n"
			   "       idemproxy migrate status [-c FILE]\n"
			   "                                    list migrations; exit 1 when one is pending\n"
			   "      ");
	if (all || o->describe)
		fprintf(f, " idemproxy describe [-c FILE] [--format markdown|openapi]\n"
			   "                                    print every route's idempotency contract\n"
			   "      ");
	if (all)
		fprintf(f, " idemproxy records --help     inspect, release or resolve stuck records\n"
			   "       idemproxy --version\n"
			   "       idemproxy [SUBCOMMAND] --help\n");
	else
		fprintf(f, " (-c FILE is --config FILE; options in any order)\n");
}

static void usage(FILE *f)
{
	usage_of(f, NULL);
}

/* A subcommand word at argv[1]: 1 (and argv shifted past it) or 0. */
static int take_word(int *argc, char ***argv, const char *word)
{
	if (*argc < 2 || strcmp((*argv)[1], word) != 0)
		return 0;
	(*argv)++;
	(*argc)--;
	return 1;
}

/* A --hash-partitions count: 0 with *n, or -1 when text is not one. */
static int parse_partitions(const char *text, int *n)
{
	char *end;
	long v;

	errno = 0;
	v = strtol(text, &end, 10);
	if (errno || end == text || *end || v < MIGRATE_PARTITIONS_MIN ||
	    v > MIGRATE_PARTITIONS_MAX)
		return -1;
	*n = (int)v;
	return 0;
}

/* The subcommand and options of argv into *o: 0, or 2 after saying what is wrong. */
static int parse_options(int argc, char **argv, struct options *o)
{
	static const struct option longopts[] = {
		{"config", required_argument, NULL, 'c'},
		{"test", no_argument, NULL, 't'},
		{"format", required_argument, NULL, 'f'}, /* describe only */
		{"hash-partitions", required_argument, NULL, 'p'}, /* migrate only */
		{"distribute", no_argument, NULL, 'D'}, /* migrate only */
		{"help", no_argument, NULL, 'h'},
		{"version", no_argument, NULL, 'V'},
		{NULL, 0, NULL, 0},
	};
	int opt;

	o->describe = take_word(&argc, &argv, "describe");
	o->migrate = !o->describe && take_word(&argc, &argv, "migrate");
	o->status = o->migrate && take_word(&argc, &argv, "status");
	opterr = 0;
	while ((opt = getopt_long(argc, argv, "c:tTh", longopts, NULL)) != -1) {
		switch (opt) {
		case 'c':
			o->file = optarg;
			break;
		case 't':
			o->test_only = 1;
			break;
		case 'T':
			o->test_only = o->dump = 1;
			break;
		case 'f':
			o->format = optarg;
			break;
		case 'p':
			o->partitions_arg = optarg;
			break;
		case 'D':
			o->distribute = 1;
			break;
		case 'h':
			o->help = 1;
			break;
		case 'V':
			o->version = 1;
			break;
		default:
			if (optopt == 'c')
				fprintf(stderr, "idemproxy: option -c needs a file name\n");
			else if (optopt == 'f' && !strncmp(argv[optind - 1], "--format", 8))
				fprintf(stderr, "idemproxy: option --format needs " CONTRACT_FORMATS "\n");
			else if (optopt == 'p' &&
				 !strncmp(argv[optind - 1], "--hash-partitions", 17))
				fprintf(stderr,
					"idemproxy: option --hash-partitions needs a number\n");
			else if (optopt)
				fprintf(stderr, "idemproxy: unknown option -%c\n", optopt);
			else
				fprintf(stderr, "idemproxy: unknown option %s\n", argv[optind - 1]);
			usage(stderr);
			return 2;
		}
	}
	/* Asked for, they are answered whatever else the line holds. */
	if (o->help || o->version)
		return 0;
	if (o->format && !o->describe) {
		fprintf(stderr, "idemproxy: --format is for describe only\n");
		return 2;
	}
	if (o->partitions_arg && (!o->migrate || o->status)) {
		fprintf(stderr,
			"idemproxy: --hash-partitions is for migrate only (not migrate status)\n");
		return 2;
	}
	if (o->distribute && (!o->migrate || o->status || o->partitions_arg)) {
		fprintf(stderr, "idemproxy: --distribute is for migrate only (not migrate status, "
				"nor with --hash-partitions)\n");
		return 2;
	}
	if (o->partitions_arg && parse_partitions(o->partitions_arg, &o->partitions) < 0) {
		fprintf(stderr,
			"idemproxy: --hash-partitions needs a number from %d to %d, not \"%s\"\n",
			MIGRATE_PARTITIONS_MIN, MIGRATE_PARTITIONS_MAX, o->partitions_arg);
		return 2;
	}
	if (optind != argc) {
		fprintf(stderr, "idemproxy: unexpected argument \"%s\"\n", argv[optind]);
		usage(stderr);
		return 2;
	}
	if (o->describe && o->test_only) {
		usage(stderr);
		return 2;
	}
	if (o->format && contract_format_parse(o->format, &o->fmt) < 0) {
		fprintf(stderr, "idemproxy: unknown format \"%s\" (" CONTRACT_FORMATS ")\n",
			o->format);
		return 2;
	}
	return 0;
}

int main(int argc, char **argv)
{
	struct options o = {.file = DEFAULT_CONF, .fmt = CONTRACT_MARKDOWN};
	struct conf *conf = NULL;
	struct secrets *secrets = NULL;
	char err[CONF_ERR_MAX];
	int rc;

	evalloc_install();
	if (argc > 1 && !strcmp(argv[1], "records"))
		return records_main(argc - 1, argv + 1);
	rc = parse_options(argc, argv, &o);
	if (rc)
		return rc;
	if (o.version) {
		printf("idemproxy %s\n", IDEMPROXY_VERSION);
		return 0;
	}
	if (o.help) {
		usage_of(stdout, &o);
		return 0;
	}
	if (load(o.file, &conf, &secrets, err, sizeof(err)) < 0) {
		fprintf(stderr, "%s\n", err);
		return 1;
	}
	if (o.test_only) {
		rc = check_only(o.file, conf, secrets, o.dump);
	} else if (o.describe) {
		rc = describe(conf, o.fmt);
	} else if (o.migrate) {
		if (o.status)
			rc = migrate_status(conf->database, err, sizeof(err));
		else if (o.distribute)
			rc = migrate_distribute(conf->database, err, sizeof(err));
		else if (o.partitions_arg)
			rc = migrate_hash_partition(conf->database, o.partitions, err, sizeof(err));
		else
			rc = migrate_apply(conf->database, err, sizeof(err));
		if (rc < 0)
			fprintf(stderr, "migrate: %s\n", err);
		rc = rc != 0;
	} else {
		signal(SIGPIPE, SIG_IGN);
		return run(conf, secrets);
	}
	conf_free(conf);
	secrets_free(secrets);
	return rc;
}
