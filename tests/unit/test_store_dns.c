/*
 * Unit tests for proxy/store_dns.c: which host entries are looked up, how
 * the answers become aligned host / hostaddr / port lists, a name that
 * fails among others, and a lookup cancelled while pending. Names come
 * from a hosts file of the test's own (answered at once, no DNS server).
 */
#include "proxy/store_dns.h"
#include "tests/unit/unit.h"

#include <event2/dns.h>
#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define APP "idemproxy-test"

static struct event_base *base;
static struct evdns_base *dns;

/* What the last lookup reported. */
static int done;
static char error[256];
static char got_host[256], got_hostaddr[256], got_port[64], got_dbname[64], got_app[64],
    got_sslmode[32];

static void copy_value(const struct store_dns *d, const char *keyword, char *out, size_t n)
{
	const char *const *k = store_dns_keywords(d), *const *v = store_dns_values(d);

	out[0] = '\0';
	for (int i = 0; k[i]; i++)
		if (!strcmp(k[i], keyword))
			snprintf(out, n, "%s", v[i]);
}

static void answered(void *arg, struct store_dns *d, const char *err)
{
	done++;
	snprintf(error, sizeof(error), "%s", err ? err : "");
	if (err)
		return;
	copy_value(d, "host", got_host, sizeof(got_host));
	copy_value(d, "hostaddr", got_hostaddr, sizeof(got_hostaddr));
	copy_value(d, "port", got_port, sizeof(got_port));
	copy_value(d, "dbname", got_dbname, sizeof(got_dbname));
	copy_value(d, "fallback_application_name", got_app, sizeof(got_app));
	copy_value(d, "sslmode", got_sslmode, sizeof(got_sslmode));
}

/* Look conninfo up and run the loop until it answers: 1 when it had something to look up. */
static int lookup(const char *conninfo)
{
	int oom = 0;
	struct store_dns *d;

	done = 0;
	d = store_dns_start(base, dns, conninfo, APP, answered, NULL, &oom);
	CHECK(!oom);
	if (!d)
		return 0;
	/* Never from inside the call. */
	CHECK(done == 0);
	while (!done)
		event_base_loop(base, EVLOOP_ONCE);
	CHECK(done == 1);
	store_dns_free(d);
	return 1;
}

static void test_nothing_to_look_up(void)
{
	CHECK(!lookup("host=/var/run/postgresql dbname=x"));
	CHECK(!lookup("host=10.0.0.9 port=5432"));
	CHECK(!lookup("host=::1"));
	CHECK(!lookup("host=@abstract"));
	CHECK(!lookup("host=db.one hostaddr=10.1.1.1"));
	CHECK(!lookup("dbname=x"));
	CHECK(!lookup("host='unterminated")); /* libpq's to refuse */
	/* Lists that do not match are libpq's to refuse. */
	CHECK(!lookup("host=db.one,db.two port=1,2,3"));
}

static void test_one_name(void)
{
	CHECK(lookup("host=db.one port=5432 dbname=x sslmode=require"));
	CHECK_STR(error, "");
	CHECK_STR(got_host, "db.one");
	CHECK_STR(got_hostaddr, "10.0.0.1");
	CHECK_STR(got_port, "5432");
	CHECK_STR(got_dbname, "x");
	CHECK_STR(got_sslmode, "require");
	CHECK_STR(got_app, APP);
	/* A URI, and the conninfo's own application name wins. */
	CHECK(lookup("postgresql://db.one:6000/y?fallback_application_name=mine"));
	CHECK_STR(got_host, "db.one");
	CHECK_STR(got_hostaddr, "10.0.0.1");
	CHECK_STR(got_port, "6000");
	CHECK_STR(got_dbname, "y");
	CHECK_STR(got_app, "mine");
}

static void test_lists_stay_aligned(void)
{
	/* Two addresses: the entry is repeated, its port with it. */
	CHECK(lookup("host=db.two,/tmp,127.0.0.1 port=1,2,3"));
	CHECK_STR(got_host, "db.two,db.two,/tmp,127.0.0.1");
	CHECK_STR(got_hostaddr, "10.0.0.2,fd00::2,,127.0.0.1");
	CHECK_STR(got_port, "1,1,2,3");
	/* One port for all stays one. */
	CHECK(lookup("host=db.one,db.two port=7"));
	CHECK_STR(got_host, "db.one,db.two,db.two");
	CHECK_STR(got_hostaddr, "10.0.0.1,10.0.0.2,fd00::2");
	CHECK_STR(got_port, "7");
	/* An entry with a hostaddr of its own keeps it. */
	CHECK(lookup("host=db.one,db.two hostaddr=,10.9.9.9"));
	CHECK_STR(got_host, "db.one,db.two");
	CHECK_STR(got_hostaddr, "10.0.0.1,10.9.9.9");
}

static void test_failed_names(void)
{
	/* No DNS server: a name not in the hosts file fails at once. */
	CHECK(lookup("host=db.none,db.one port=5,6"));
	CHECK_STR(error, "");
	CHECK_STR(got_host, "db.one");
	CHECK_STR(got_hostaddr, "10.0.0.1");
	CHECK_STR(got_port, "6");
	CHECK(lookup("host=db.none"));
	CHECK(strstr(error, "db.none: no DNS server") == error);
}

/* A lookup cancelled while its question is out: no callback, nothing leaks
 * once the loop lets libevent's deferred cancellation run. */
static void test_cancel_pending(void)
{
	struct evdns_base *silent = evdns_base_new(base, 0);
	struct store_dns *d;
	int oom = 0;

	CHECK(silent && evdns_base_nameserver_ip_add(silent, "127.0.0.1:9") == 0);
	done = 0;
	d = store_dns_start(base, silent, "host=db.never.test", APP, answered, NULL, &oom);
	CHECK(d != NULL && !oom);
	CHECK_STR(store_dns_pending(d), "db.never.test");
	store_dns_free(d);
	event_base_loop(base, EVLOOP_NONBLOCK);
	CHECK(done == 0);
	evdns_base_free(silent, 0);
}

int main(void)
{
	char hosts[] = "/tmp/idemproxy-hosts-XXXXXX";
	int fd = mkstemp(hosts);
	static const char text[] = "10.0.0.1 db.one\n10.0.0.2 db.two\nfd00::2 db.two\n";

	CHECK(fd >= 0 && write(fd, text, sizeof(text) - 1) == (ssize_t)(sizeof(text) - 1));
	close(fd);
	unsetenv("PGHOST");
	unsetenv("PGHOSTADDR");
	unsetenv("PGPORT");
	base = event_base_new();
	dns = evdns_base_new(base, 0);
	CHECK(base && dns && evdns_base_load_hosts(dns, hosts) == 0);
	test_nothing_to_look_up();
	test_one_name();
	test_lists_stay_aligned();
	test_failed_names();
	test_cancel_pending();
	evdns_base_free(dns, 0);
	event_base_free(base);
	unlink(hosts);
	UNIT_DONE("store_dns");
}
