/*
 * The store's host names, looked up without blocking before each connect:
 * the conninfo is parsed (PQconninfoParse, key=value or URI), every `host`
 * entry that is a name (not an IP address, not a Unix socket directory
 * starting with '/' or '@') and has no `hostaddr` of its own is looked up
 * with evdns, and the connection parameters come back with `hostaddr` set
 * to the addresses and `host` kept (for TLS verification and the server's
 * messages). The host, hostaddr and port lists stay aligned entry by
 * entry: a name with several addresses becomes several entries, its host
 * and port repeated. Nothing is cached from one lookup to the next.
 */
#ifndef IDEMPROXY_STORE_DNS_H
#define IDEMPROXY_STORE_DNS_H

struct event_base;
struct evdns_base;
struct store_dns;

/* The lookups of a store_dns ended: error NULL, or why none of its
 * entries can be connected to ("db.example: name not known"). */
typedef void (*store_dns_cb)(void *arg, struct store_dns *d, const char *error);

/*
 * Look up conninfo's host names on dns (base's); app_name is passed as
 * fallback_application_name. Returns NULL when there is nothing
 * to look up (only addresses and sockets, or a conninfo libpq refuses,
 * which it then reports itself): connect with conninfo as it is. Otherwise
 * a store_dns whose cb runs once, later, from the event loop, unless
 * store_dns_free comes first; *oom is set when memory ran out.
 */
struct store_dns *store_dns_start(struct event_base *base, struct evdns_base *dns,
				  const char *conninfo, const char *app_name, store_dns_cb cb,
				  void *arg, int *oom);

/* The parameters for PQconnectStartParams (expand_dbname 0), valid until
 * store_dns_free, once cb reported no error. */
const char *const *store_dns_keywords(const struct store_dns *d);
const char *const *store_dns_values(const struct store_dns *d);

/* The names still being looked up, comma-separated, for a timeout's message. */
const char *store_dns_pending(struct store_dns *d);

/* Cancel what is still being looked up (evdns_getaddrinfo_cancel) and free
 * d; cb does not run. NULL is fine. */
void store_dns_free(struct store_dns *d);

#endif
