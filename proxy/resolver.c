/*
 * The DNS servers an event loop asks (see resolver.h). libevent 2.1's evdns
 * keeps no cache of answers: every lookup asks the servers again, so a name
 * that moves is followed at the next lookup, whatever its TTL.
 */
#include "proxy/resolver.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/dns.h>
#include <event2/event.h>

#include "conf/conf.h"
#include "proxy/log.h"

#define RESOLV_CONF "/etc/resolv.conf"
#define RESOLVER_HOSTS "/etc/hosts"
/* Each query is sent up to this many times, a resolver_timeout / 2 apart:
 * the store's own deadline (resolver_timeout) ends a lookup first. */
#define RESOLVER_ATTEMPTS "3"
#define RESOLVER_TRY_SHARE 2
#define RESOLVER_ADDR_MAX 64

/* The "no resolver" line is said by the first loop that finds none. */
static atomic_int resolver_told;

/* Set evdns option name (with its colon) to seconds. */
static int resolver_seconds(struct evdns_base *dns, const char *name, int64_t ms)
{
	char val[32];

	snprintf(val, sizeof(val), "%lld.%03lld", (long long)(ms / 1000), (long long)(ms % 1000));
	return evdns_base_set_option(dns, name, val);
}

/* Add the space-separated servers of list to dns: 0, or -1 (logged). */
static int resolver_add(struct evdns_base *dns, const char *list)
{
	char addr[RESOLVER_ADDR_MAX];

	while (*list) {
		size_t n = strcspn(list, " ");

		if (n >= sizeof(addr)) {
			log_error(NULL, "resolver %.*s: address too long", (int)n, list);
			return -1;
		}
		memcpy(addr, list, n);
		addr[n] = '\0';
		if (evdns_base_nameserver_ip_add(dns, addr) != 0) {
			log_error(NULL, "resolver %s: evdns refused the address", addr);
			return -1;
		}
		list += n;
		list += strspn(list, " ");
	}
	return 0;
}

struct evdns_base *resolver_new(struct event_base *base, const struct conf *conf)
{
	struct evdns_base *dns = evdns_base_new(base, 0);
	int parsed = 0;

	if (!dns) {
		log_error(NULL, "cannot set up name resolution (evdns): out of memory");
		return NULL;
	}
	if (conf->resolver) {
		if (resolver_add(dns, conf->resolver) < 0)
			goto fail;
		evdns_base_load_hosts(dns, RESOLVER_HOSTS);
	} else {
		/* Not EVDNS_BASE_INITIALIZE_NAMESERVERS: it fails the whole
		 * base when the file is missing or names no server, and would
		 * otherwise fall back to 127.0.0.1 without a word. */
		parsed = evdns_base_resolv_conf_parse(
		    dns, DNS_OPTIONS_ALL | DNS_OPTION_NAMESERVERS_NO_DEFAULT, RESOLV_CONF);
	}
	if (resolver_seconds(dns, "timeout:", conf->resolver_timeout_ms / RESOLVER_TRY_SHARE) < 0 ||
	    evdns_base_set_option(dns, "attempts:", RESOLVER_ATTEMPTS) < 0 ||
	    resolver_seconds(dns, "getaddrinfo-allow-skew:",
			     conf->resolver_timeout_ms / RESOLVER_TRY_SHARE) < 0) {
		log_error(NULL, "cannot set up name resolution (evdns options)");
		goto fail;
	}
	if (evdns_base_count_nameservers(dns) == 0 && !atomic_exchange(&resolver_told, 1))
		log_warn(NULL, "no resolver: %s %s; host names in the store or upstream will not "
			       "resolve (IP addresses and /etc/hosts still work); set \"resolver\"",
			 RESOLV_CONF, parsed == 1 ? "cannot be read" : "names no server");
	return dns;
fail:
	evdns_base_free(dns, 0);
	return NULL;
}

void resolver_free(struct event_base *base, struct evdns_base **dns)
{
	if (!*dns)
		return;
	event_base_loop(base, EVLOOP_NONBLOCK);
	evdns_base_free(*dns, 0);
	*dns = NULL;
}
