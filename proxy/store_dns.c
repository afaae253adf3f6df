/*
 * The store's host names, looked up with evdns (see store_dns.h).
 *
 * A lookup's query outlives its store_dns when cancelled: libevent calls
 * back once more, later, for a cancelled getaddrinfo, so each query is
 * its own allocation, orphaned (d NULL) on cancel and freed by that last
 * callback.
 */
#include "proxy/store_dns.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/dns.h>
#include <event2/event.h>
#include <event2/util.h>
#include <libpq-fe.h>

#include "proxy/evfree.h"
#include "proxy/log.h"

/* The addresses one name may add (each an entry libpq tries in turn). */
#define STORE_DNS_ADDRS_MAX 16
#define STORE_DNS_ERR_MAX 256
#define STORE_DNS_NO_SERVER "no DNS server to ask (set \"resolver\")"

struct store_dns_query {
	struct store_dns *d; /* NULL: cancelled, the query frees itself */
	struct evdns_getaddrinfo_request *req; /* NULL once answered */
	int err;			       /* EVUTIL_EAI_*, 0: answered */
	int no_server;			       /* failed: the resolver has no server */
	int naddrs;
	char addrs[STORE_DNS_ADDRS_MAX][INET6_ADDRSTRLEN];
};

struct store_dns {
	store_dns_cb cb;
	void *arg;
	struct event *done_ev;
	PQconninfoOption *opts;
	const char *app_name;
	/* The entries of the host, hostaddr and port lists. */
	int n, nhostaddrs, nports;
	char **hosts, **hostaddrs, **ports;
	struct store_dns_query **q; /* per entry; NULL: nothing to look up */
	int pending;
	int starting; /* store_dns_start is still launching queries */
	/* What libpq gets. */
	const char **keywords, **values;
	char *host_list, *hostaddr_list, *port_list;
	char *pending_names;
	char error[STORE_DNS_ERR_MAX];
};

/* The comma-separated entries of s (NULL: none) as *n strings. */
static char **store_dns_split(const char *s, int *n)
{
	int count = 1;
	char **v;

	*n = 0;
	if (!s)
		return NULL;
	for (const char *c = s; *c; c++)
		count += *c == ',';
	v = calloc((size_t)count, sizeof(*v));
	if (!v)
		return NULL;
	for (int i = 0; i < count; i++) {
		size_t len = strcspn(s, ",");

		v[i] = strndup(s, len);
		if (!v[i]) {
			for (int j = 0; j < i; j++)
				free(v[j]);
			free(v);
			return NULL;
		}
		(*n)++;
		s += len + (s[len] == ',');
	}
	return v;
}

static void store_dns_strv_free(char **v, int n)
{
	for (int i = 0; v && i < n; i++)
		free(v[i]);
	free(v);
}

/* 1 when host is an IP address. */
static int store_dns_literal(const char *host)
{
	unsigned char bin[sizeof(struct in6_addr)];

	return inet_pton(AF_INET, host, bin) == 1 || inet_pton(AF_INET6, host, bin) == 1;
}

/* 1 when entry i is a name to look up. */
static int store_dns_wanted(const struct store_dns *d, int i)
{
	const char *h = d->hosts[i];

	if (!*h || h[0] == '/' || h[0] == '@' || store_dns_literal(h))
		return 0;
	return i >= d->nhostaddrs || !*d->hostaddrs[i];
}

/* The value of keyword in the parsed options, or NULL. */
static const char *store_dns_opt(const struct store_dns *d, const char *keyword)
{
	for (const PQconninfoOption *o = d->opts; o->keyword; o++)
		if (!strcmp(o->keyword, keyword))
			return o->val;
	return NULL;
}

/* Append s and a separator to the list at *list (size *len so far). */
static int store_dns_append(char **list, size_t *len, const char *s)
{
	size_t n = strlen(s);
	char *p = realloc(*list, *len + n + 2);

	if (!p)
		return -1;
	*list = p;
	memcpy(p + *len, s, n);
	*len += n;
	p[(*len)++] = ',';
	p[*len] = '\0';
	return 0;
}

/* Add entry host / hostaddr / port (port NULL: not listed) to the lists. */
static int store_dns_entry(struct store_dns *d, size_t len[3], const char *host,
			   const char *hostaddr, const char *port)
{
	if (store_dns_append(&d->host_list, &len[0], host) < 0 ||
	    store_dns_append(&d->hostaddr_list, &len[1], hostaddr) < 0)
		return -1;
	return port ? store_dns_append(&d->port_list, &len[2], port) : 0;
}

/* The answers into the lists and parameters: 0, or -1 with d->error. */
static int store_dns_build(struct store_dns *d)
{
	size_t len[3] = {0, 0, 0};
	int entries = 0, k = 0, failed = 0;
	size_t nopts = 0;

	for (int i = 0; i < d->n; i++) {
		struct store_dns_query *q = d->q[i];
		const char *port = d->nports == d->n && d->n > 1 ? d->ports[i] : NULL;
		if (!q) {
			const char *ha = i < d->nhostaddrs && *d->hostaddrs[i] ? d->hostaddrs[i]
					 : store_dns_literal(d->hosts[i]) ? d->hosts[i]
									  : "";

			if (store_dns_entry(d, len, d->hosts[i], ha, port) < 0)
				goto oom;
			entries++;
			continue;
		}
		if (q->err) {
			if (!failed++)
				snprintf(d->error, sizeof(d->error), "%s: %s", d->hosts[i],
					 q->no_server ? STORE_DNS_NO_SERVER
						      : evutil_gai_strerror(q->err));
			continue;
		}
		for (int a = 0; a < q->naddrs; a++, entries++)
			if (store_dns_entry(d, len, d->hosts[i], q->addrs[a], port) < 0)
				goto oom;
	}
	if (!entries)
		return -1;
	if (failed)
		log_warn(NULL, "store host name lookup failed, the other hosts are tried: %s",
			 d->error);
	d->error[0] = '\0';
	/* Drop the separator after the last entry. */
	d->host_list[len[0] - 1] = '\0';
	d->hostaddr_list[len[1] - 1] = '\0';
	if (d->port_list)
		d->port_list[len[2] - 1] = '\0';
	for (const PQconninfoOption *o = d->opts; o->keyword; o++)
		nopts++;
	d->keywords = calloc(nopts + 5, sizeof(*d->keywords));
	d->values = calloc(nopts + 5, sizeof(*d->values));
	if (!d->keywords || !d->values)
		goto oom;
	for (const PQconninfoOption *o = d->opts; o->keyword; o++) {
		if (!o->val || !strcmp(o->keyword, "host") || !strcmp(o->keyword, "hostaddr") ||
		    !strcmp(o->keyword, "port"))
			continue;
		d->keywords[k] = o->keyword;
		d->values[k++] = o->val;
	}
	d->keywords[k] = "host";
	d->values[k++] = d->host_list;
	d->keywords[k] = "hostaddr";
	d->values[k++] = d->hostaddr_list;
	if (d->port_list || d->nports) {
		d->keywords[k] = "port";
		d->values[k++] = d->port_list ? d->port_list : d->ports[0];
	}
	if (!store_dns_opt(d, "fallback_application_name")) {
		d->keywords[k] = "fallback_application_name";
		d->values[k++] = d->app_name;
	}
	return 0;
oom:
	snprintf(d->error, sizeof(d->error), "out of memory");
	return -1;
}

/* Every lookup answered: tell the owner, from the loop. */
static void store_dns_done_event(evutil_socket_t fd, short what, void *arg)
{
	struct store_dns *d = arg;

	d->cb(d->arg, d, store_dns_build(d) < 0 ? d->error : NULL);
}

static void store_dns_answer(int err, struct evutil_addrinfo *res, void *arg)
{
	struct store_dns_query *q = arg;
	struct store_dns *d = q->d;

	if (!d) {
		if (res)
			evutil_freeaddrinfo(res);
		free(q);
		return;
	}
	q->req = NULL;
	q->err = err;
	for (struct evutil_addrinfo *ai = res; ai && q->naddrs < STORE_DNS_ADDRS_MAX;
	     ai = ai->ai_next) {
		const void *in = ai->ai_family == AF_INET
				     ? (const void *)&((struct sockaddr_in *)ai->ai_addr)->sin_addr
				     : (const void *)&((struct sockaddr_in6 *)ai->ai_addr)->sin6_addr;

		if ((ai->ai_family == AF_INET || ai->ai_family == AF_INET6) &&
		    evutil_inet_ntop(ai->ai_family, in, q->addrs[q->naddrs], INET6_ADDRSTRLEN))
			q->naddrs++;
	}
	if (res)
		evutil_freeaddrinfo(res);
	if (!q->err && !q->naddrs)
		q->err = EVUTIL_EAI_NODATA;
	if (--d->pending == 0 && !d->starting)
		event_active(d->done_ev, EV_TIMEOUT, 1);
}

/* Look up entry i; 0, or -1 when out of memory. */
static int store_dns_query_start(struct store_dns *d, struct evdns_base *dns, int i)
{
	struct evutil_addrinfo hints = {.ai_family = AF_UNSPEC,
					.ai_socktype = SOCK_STREAM,
					.ai_protocol = IPPROTO_TCP};
	struct store_dns_query *q = calloc(1, sizeof(*q));
	struct evdns_getaddrinfo_request *req;

	if (!q)
		return -1;
	q->d = d;
	d->q[i] = q;
	d->pending++;
	/* /etc/hosts (and a bad name) answer at once, from inside the call. */
	req = evdns_getaddrinfo(dns, d->hosts[i], NULL, &hints, store_dns_answer, q);
	if (!req)
		return 0;
	if (evdns_base_count_nameservers(dns) > 0) {
		q->req = req;
		return 0;
	}
	/* Nobody would ever answer: the query waits for a server forever. */
	q->d = NULL;
	evdns_getaddrinfo_cancel(req);
	q = calloc(1, sizeof(*q));
	if (!q)
		return -1;
	q->err = EVUTIL_EAI_FAIL;
	q->no_server = 1;
	d->q[i] = q;
	d->pending--;
	return 0;
}

/* Parse conninfo into d's lists: the number of entries to look up, or -1. */
static int store_dns_parse(struct store_dns *d, const char *conninfo)
{
	const char *host, *hostaddr, *port;
	int wanted = 0;

	d->opts = PQconninfoParse(conninfo, NULL);
	if (!d->opts)
		return 0; /* bad (libpq says why) or out of memory */
	host = store_dns_opt(d, "host");
	hostaddr = store_dns_opt(d, "hostaddr");
	port = store_dns_opt(d, "port");
	/* libpq takes what the conninfo leaves out from the environment. */
	if (!host)
		host = getenv("PGHOST");
	if (!hostaddr)
		hostaddr = getenv("PGHOSTADDR");
	if (!port)
		port = getenv("PGPORT");
	if (!host || !*host)
		return 0;
	d->hosts = store_dns_split(host, &d->n);
	d->hostaddrs = store_dns_split(hostaddr, &d->nhostaddrs);
	d->ports = store_dns_split(port, &d->nports);
	if (!d->hosts || (hostaddr && !d->hostaddrs) || (port && !d->ports))
		return -1;
	/* Lists that do not match are libpq's to refuse. */
	if ((d->nhostaddrs && d->nhostaddrs != d->n) || (d->nports > 1 && d->nports != d->n))
		return 0;
	for (int i = 0; i < d->n; i++)
		wanted += store_dns_wanted(d, i);
	return wanted;
}

struct store_dns *store_dns_start(struct event_base *base, struct evdns_base *dns,
				  const char *conninfo, const char *app_name, store_dns_cb cb,
				  void *arg, int *oom)
{
	struct store_dns *d = calloc(1, sizeof(*d));
	int wanted;

	*oom = 0;
	if (!d)
		goto oom;
	d->cb = cb;
	d->arg = arg;
	d->app_name = app_name;
	wanted = store_dns_parse(d, conninfo ? conninfo : "");
	if (wanted <= 0) {
		store_dns_free(d);
		if (wanted < 0)
			goto oom;
		return NULL;
	}
	d->q = calloc((size_t)d->n, sizeof(*d->q));
	d->done_ev = event_new(base, -1, 0, store_dns_done_event, d);
	if (!d->q || !d->done_ev)
		goto fail;
	d->starting = 1;
	for (int i = 0; i < d->n; i++)
		if (store_dns_wanted(d, i) && store_dns_query_start(d, dns, i) < 0)
			goto fail;
	d->starting = 0;
	if (d->pending == 0)
		event_active(d->done_ev, EV_TIMEOUT, 1);
	return d;
fail:
	store_dns_free(d);
oom:
	*oom = 1;
	return NULL;
}

const char *const *store_dns_keywords(const struct store_dns *d)
{
	return d->keywords;
}

const char *const *store_dns_values(const struct store_dns *d)
{
	return d->values;
}

const char *store_dns_pending(struct store_dns *d)
{
	size_t len = 0;

	free(d->pending_names);
	d->pending_names = NULL;
	for (int i = 0; i < d->n; i++)
		if (d->q[i] && d->q[i]->req &&
		    store_dns_append(&d->pending_names, &len, d->hosts[i]) < 0)
			break;
	if (!d->pending_names)
		return "?";
	if (len)
		d->pending_names[len - 1] = '\0';
	return d->pending_names;
}

void store_dns_free(struct store_dns *d)
{
	if (!d)
		return;
	for (int i = 0; d->q && i < d->n; i++) {
		struct store_dns_query *q = d->q[i];

		if (q && q->req) {
			q->d = NULL;
			evdns_getaddrinfo_cancel(q->req);
		} else {
			free(q);
		}
	}
	free(d->q);
	evfree_event(&d->done_ev);
	PQconninfoFree(d->opts);
	store_dns_strv_free(d->hosts, d->n);
	store_dns_strv_free(d->hostaddrs, d->nhostaddrs);
	store_dns_strv_free(d->ports, d->nports);
	free(d->keywords);
	free(d->values);
	free(d->host_list);
	free(d->hostaddr_list);
	free(d->port_list);
	free(d->pending_names);
	free(d);
}
