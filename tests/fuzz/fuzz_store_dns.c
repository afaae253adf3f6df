/*
 * libFuzzer target for the store's conninfo expansion (proxy/store_dns.c):
 * any conninfo either needs no lookup or ends in exactly one answer whose
 * host, hostaddr and port lists have matching entry counts (port: one for
 * all, or one per host). Names resolve from fixed hosts entries; the
 * resolver has no server, so every other name fails at once.
 *   clang -g -O1 -fsanitize=fuzzer,address,undefined -I. -I/usr/include/postgresql \
 *         tests/fuzz/fuzz_store_dns.c proxy/store_dns.c proxy/log.c proxy/digest.c \
 *         proxy/utf8.c -levent -lpq -lcrypto -o fuzz_store_dns
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/dns.h>
#include <event2/event.h>

#include "proxy/log.h"
#include "proxy/store_dns.h"

#define HOSTS "10.0.0.1 a.test\n10.0.0.2 b.test\nfd00::2 b.test\n"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int answers;

static int entries(const char *list)
{
	int n = 1;

	for (; *list; list++)
		n += *list == ',';
	return n;
}

static void answered(void *arg, struct store_dns *d, const char *error)
{
	const char *const *k, *const *v;
	int hosts = -1, addrs = -1, ports = -1;

	answers++;
	if (error)
		return;
	k = store_dns_keywords(d);
	v = store_dns_values(d);
	for (int i = 0; k[i]; i++) {
		if (!strcmp(k[i], "host"))
			hosts = entries(v[i]);
		else if (!strcmp(k[i], "hostaddr"))
			addrs = entries(v[i]);
		else if (!strcmp(k[i], "port"))
			ports = entries(v[i]);
	}
	if (hosts < 1 || addrs != hosts || (ports != -1 && ports != 1 && ports != hosts))
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct event_base *base;
	static struct evdns_base *dns;
	struct store_dns *d;
	char *conninfo;
	int oom;

	if (!base) {
		char hosts[] = "/tmp/fuzz-store-dns-XXXXXX";
		int fd = mkstemp(hosts);

		if (fd < 0 || write(fd, HOSTS, sizeof(HOSTS) - 1) != (ssize_t)(sizeof(HOSTS) - 1))
			abort();
		close(fd);
		log_min_level = LOG_ERROR;
		base = event_base_new();
		dns = evdns_base_new(base, 0);
		if (!base || !dns || evdns_base_load_hosts(dns, hosts) != 0)
			abort();
		unlink(hosts);
	}
	conninfo = malloc(size + 1);
	if (!conninfo)
		return 0;
	memcpy(conninfo, data, size);
	conninfo[size] = '\0';
	answers = 0;
	d = store_dns_start(base, dns, conninfo, "fuzz", answered, NULL, &oom);
	if (d) {
		while (!answers)
			event_base_loop(base, EVLOOP_ONCE);
		if (answers != 1)
			abort();
		store_dns_free(d);
	}
	/* Let cancelled queries' last callbacks run. */
	event_base_loop(base, EVLOOP_NONBLOCK);
	free(conninfo);
	return 0;
}
