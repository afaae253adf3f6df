/*
 * The DNS servers an event loop asks (evdns): those `resolver` names, or
 * /etc/resolv.conf's (its nameservers, search list and options) when it
 * names none; /etc/hosts either way. Workers use theirs for the upstream's
 * and the store's host names, the main thread for the store of its
 * sweeper and admin listener.
 */
#ifndef IDEMPROXY_RESOLVER_H
#define IDEMPROXY_RESOLVER_H

struct conf;
struct event_base;
struct evdns_base;

/*
 * An evdns base on base set up from conf's resolver and resolver_timeout,
 * or NULL when out of memory or a resolver address is refused (logged).
 * Without a DNS server to ask (no /etc/resolv.conf, or one naming none)
 * it still works for IP literals and /etc/hosts, and says so in the log
 * once per process. Free it with resolver_free.
 */
struct evdns_base *resolver_new(struct event_base *base, const struct conf *conf);

/*
 * Free dns, after letting the lookups cancelled on it report back: libevent
 * defers a cancelled lookup's last callback, and what it holds is freed
 * there. Call it when nothing else on base may run, just before freeing base.
 */
void resolver_free(struct event_base *base, struct evdns_base **dns);

#endif
