/*
 * idemproxy: command line, configuration, signals and the worker's loop.
 *
 *   idemproxy -c FILE            run in the foreground
 *   idemproxy -t -c FILE         check the configuration
 *   idemproxy migrate -c FILE    apply pending schema migrations
 *   idemproxy --version
 */
#include <errno.h>
#include <event2/dns.h>
#include <event2/event.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "proxy/idemproxy.h"
#include "proxy/log.h"
#include "proxy/migrate.h"
#include "proxy/store.h"
#include "proxy/upstream.h"

#define DEFAULT_CONF "idemproxy.conf"
#define DRAIN_CHECK_MS 50

static void usage(FILE *f)
{
	fprintf(f, "usage: idemproxy [-c FILE]          run in the foreground (default ./" DEFAULT_CONF ")\n"
		   "       idemproxy -t [-c FILE]       check the configuration and exit\n"
		   "       idemproxy migrate [-c FILE]  apply pending migrations and exit\n"
		   "       idemproxy --version\n");
}

struct shutdown_ctx {
	struct worker *w;
	int64_t deadline_us;
};

/* Exit the loop once every request has finished, or at the deadline. */
static void drain_cb(evutil_socket_t fd, short what, void *arg)
{
	struct shutdown_ctx *sd = arg;
	struct worker *w = sd->w;
	struct timeval tv = { 0, DRAIN_CHECK_MS * 1000 };

	conn_close_idle(w);
	if ((LIST_EMPTY(&w->requests) && LIST_EMPTY(&w->conns)) || now_us() >= sd->deadline_us) {
		event_base_loopbreak(w->base);
		return;
	}
	evtimer_add(w->drain_timer, &tv);
}

static void signal_stop_cb(evutil_socket_t sig, short what, void *arg)
{
	struct shutdown_ctx *sd = arg;
	struct worker *w = sd->w;

	if (w->draining) {
		log_warn(NULL, "second stop signal: exiting now");
		event_base_loopbreak(w->base);
		return;
	}
	log_info(NULL, "stopping: waiting up to %lld ms for in-flight requests",
		 (long long)w->conf->shutdown_timeout_ms);
	w->draining = 1;
	sd->deadline_us = now_us() + w->conf->shutdown_timeout_ms * 1000;
	listener_stop(w);
	drain_cb(-1, 0, sd);
}

static void signal_hup_cb(evutil_socket_t sig, short what, void *arg)
{
	log_warn(NULL, "SIGHUP: configuration reload is not available in this version; "
		       "restart to apply changes");
}

static int worker_init(struct worker *w, const struct conf *conf)
{
	char host[64] = "localhost";

	memset(w, 0, sizeof(*w));
	LIST_INIT(&w->conns);
	LIST_INIT(&w->requests);
	w->conf = conf;
	gethostname(host, sizeof(host) - 1);
	snprintf(w->owner_id, sizeof(w->owner_id), "%s:%d:%d", host, (int)getpid(), w->id);
	w->base = event_base_new();
	if (!w->base)
		return -1;
	w->dns = evdns_base_new(w->base, EVDNS_BASE_INITIALIZE_NAMESERVERS);
	w->store = store_new(w->base, conf->database, conf->store_timeout_ms, w->owner_id);
	w->pool = upstream_pool_new(w->base, w->dns, conf->upstream_host, conf->upstream_port);
	if (!w->dns || !w->store || !w->pool)
		return -1;
	return listener_start(w);
}

static void worker_free(struct worker *w)
{
	listener_stop(w);
	request_free_all(w);
	conn_free_all(w);
	upstream_pool_free(w->pool);
	store_free(w->store);
	if (w->drain_timer)
		event_free(w->drain_timer);
	if (w->dns)
		evdns_base_free(w->dns, 0);
	if (w->base)
		event_base_free(w->base);
}

static int run(const struct conf *conf)
{
	struct worker w;
	struct shutdown_ctx sd = { &w, 0 };
	struct event *sigterm = NULL, *sigint = NULL, *sighup = NULL;
	int rc = 1;

	if (worker_init(&w, conf) < 0)
		goto out;
	w.drain_timer = evtimer_new(w.base, drain_cb, &sd);
	sigterm = evsignal_new(w.base, SIGTERM, signal_stop_cb, &sd);
	sigint = evsignal_new(w.base, SIGINT, signal_stop_cb, &sd);
	sighup = evsignal_new(w.base, SIGHUP, signal_hup_cb, NULL);
	if (!w.drain_timer || !sigterm || !sigint || !sighup || evsignal_add(sigterm, NULL) < 0 ||
	    evsignal_add(sigint, NULL) < 0 || evsignal_add(sighup, NULL) < 0)
		goto out;
	if (conf->admin_host)
		log_warn(NULL, "admin listener is not available in this version; ignoring admin %s:%d",
			 conf->admin_host, conf->admin_port);
	if (conf->workers > 1)
		log_info(NULL, "running 1 worker (workers %d: multiple workers are not available yet)",
			 conf->workers);
	log_info(NULL, "idemproxy %s listening on %s:%d, upstream %s", IDEMPROXY_VERSION,
		 conf->listen_host, conf->listen_port, conf->upstream_url);
	if (event_base_dispatch(w.base) < 0)
		goto out;
	log_info(NULL, "stopped");
	rc = 0;
out:
	if (sigterm)
		event_free(sigterm);
	if (sigint)
		event_free(sigint);
	if (sighup)
		event_free(sighup);
	worker_free(&w);
	return rc;
}

int main(int argc, char **argv)
{
	const char *file = DEFAULT_CONF;
	int test_only = 0, migrate = 0, opt, rc = 1;
	struct conf *conf = NULL;
	char err[CONF_ERR_MAX];

	if (argc > 1 && !strcmp(argv[1], "--version")) {
		printf("idemproxy %s\n", IDEMPROXY_VERSION);
		return 0;
	}
	if (argc > 1 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
		usage(stdout);
		return 0;
	}
	if (argc > 1 && !strcmp(argv[1], "migrate")) {
		migrate = 1;
		argv++;
		argc--;
	}
	while ((opt = getopt(argc, argv, "c:t")) != -1) {
		switch (opt) {
		case 'c':
			file = optarg;
			break;
		case 't':
			test_only = 1;
			break;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind != argc) {
		usage(stderr);
		return 2;
	}
	if (conf_load(file, &conf, err, sizeof(err)) < 0) {
		fprintf(stderr, "%s\n", err);
		return 1;
	}
	if (test_only) {
		printf("%s: configuration ok\n", file);
		rc = 0;
	} else if (migrate) {
		rc = migrate_apply(conf->database, err, sizeof(err)) < 0 ? 1 : 0;
		if (rc)
			fprintf(stderr, "migrate: %s\n", err);
	} else {
		signal(SIGPIPE, SIG_IGN);
		rc = run(conf);
	}
	conf_free(conf);
	return rc;
}
