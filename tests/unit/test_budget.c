/* Unit tests of proxy/budget.c: peer slots, meters, verdicts, waits. */
#include "proxy/budget.h"

#include <arpa/inet.h>
#include <event2/buffer.h>
#include <event2/event.h>
#include <netinet/in.h>
#include <string.h>

#include "tests/unit/unit.h"

#define KIB 1024u

static struct sockaddr_in v4(const char *a)
{
	struct sockaddr_in sa;

	memset(&sa, 0, sizeof(sa));
	sa.sin_family = AF_INET;
	inet_pton(AF_INET, a, &sa.sin_addr);
	return sa;
}

static struct sockaddr_in6 v6(const char *a)
{
	struct sockaddr_in6 sa;

	memset(&sa, 0, sizeof(sa));
	sa.sin6_family = AF_INET6;
	inet_pton(AF_INET6, a, &sa.sin6_addr);
	return sa;
}

static unsigned slot_of(struct budget_queue *q, const void *sa)
{
	struct budget_meter m;

	budget_meter_init(&m, q, sa);
	return m.slot;
}

/* IPv4 by its address, IPv4-mapped IPv6 as IPv4, IPv6 by its /64, none without an address. */
static void test_slots(struct budget_queue *q)
{
	struct sockaddr_in a = v4("192.0.2.7");
	struct sockaddr_in6 mapped = v6("::ffff:192.0.2.7"), x1 = v6("2001:db8:1:2::1"),
			    x2 = v6("2001:db8:1:2:ffff::9");
	struct budget_meter m, twin;
	unsigned distinct = 0, first = slot_of(q, &a);
	char text[32];

	CHECK(slot_of(q, &a) < BUDGET_PEER_SLOTS);
	CHECK(slot_of(q, &a) == slot_of(q, &mapped));
	CHECK(slot_of(q, &x1) == slot_of(q, &x2));
	CHECK(slot_of(q, &x1) < BUDGET_PEER_SLOTS);
	CHECK(slot_of(q, NULL) == BUDGET_NO_PEER);
	/* addresses spread over the slots */
	for (int i = 0; i < 64; i++) {
		snprintf(text, sizeof(text), "10.0.%d.%d", i / 8, i);
		a = v4(text);
		distinct += slot_of(q, &a) != first;
	}
	CHECK(distinct >= 60);
	budget_meter_init(&m, q, (const struct sockaddr *)&mapped);
	budget_meter_twin(&twin, &m);
	CHECK(twin.q == q && twin.slot == m.slot && twin.charged == 0);
}

/* Meters move the counts by what they hold; verdicts name the limit a read would pass. */
static void test_meters(struct budget_queue *q)
{
	struct sockaddr_in a = v4("198.51.100.1"), b;
	struct budget_meter ma, mb, process, none;
	char text[32];

	budget_queue_limits(q, 100 * KIB, 40 * KIB);
	budget_meter_init(&ma, q, (const struct sockaddr *)&a);
	/* another peer, in another slot (the hash is seeded: any two may share one) */
	for (int i = 2; i < 10; i++) {
		snprintf(text, sizeof(text), "198.51.100.%d", i);
		b = v4(text);
		budget_meter_init(&mb, q, (const struct sockaddr *)&b);
		if (mb.slot != ma.slot)
			break;
	}
	budget_meter_init(&process, q, NULL);
	memset(&none, 0, sizeof(none));
	CHECK(ma.slot != mb.slot);
	CHECK(budget_bytes() == 0);
	budget_meter_set(&ma, 30 * KIB);
	CHECK(budget_bytes() == 30 * KIB);
	CHECK(budget_check(&ma, 10 * KIB, 0) == BUDGET_ROOM);
	CHECK(budget_check(&ma, 11 * KIB, 0) == BUDGET_PEER);
	/* resuming needs three quarters: 30k, 40k's mark */
	CHECK(budget_check(&ma, 1 * KIB, 1) == BUDGET_PEER);
	CHECK(budget_check(&mb, 30 * KIB, 0) == BUDGET_ROOM);
	budget_meter_set(&process, 60 * KIB);
	CHECK(budget_bytes() == 90 * KIB);
	CHECK(budget_check(&mb, 10 * KIB, 0) == BUDGET_ROOM);
	CHECK(budget_check(&mb, 11 * KIB, 0) == BUDGET_PROCESS);
	CHECK(budget_check(&process, 1, 1) == BUDGET_PROCESS);
	CHECK(budget_check(&none, 1u << 30, 0) == BUDGET_ROOM);
	budget_meter_set(&none, 5 * KIB);
	CHECK(budget_bytes() == 90 * KIB);
	/* a reservation counts until the meter is set again */
	budget_meter_reserve(&mb, 4 * KIB);
	CHECK(budget_bytes() == 94 * KIB);
	budget_meter_set(&mb, 1 * KIB);
	CHECK(budget_bytes() == 91 * KIB);
	budget_meter_set(&mb, 0);
	budget_meter_set(&ma, 0);
	budget_meter_set(&process, 0);
	CHECK(budget_bytes() == 0);
	/* no limit: always room */
	budget_queue_limits(q, 0, 0);
	budget_meter_set(&ma, 1u << 30);
	CHECK(budget_check(&ma, 1u << 30, 1) == BUDGET_ROOM);
	budget_meter_set(&ma, 0);
}

struct waiter {
	struct budget_wait w;
	int retries;
	int stay; /* retries after which it ends its wait */
};

static void waiter_retry(void *arg)
{
	struct waiter *x = arg;

	if (++x->retries >= x->stay)
		budget_wait_end(&x->w);
}

/*
 * A fall to a count's resume mark wakes the waits of its worker from the
 * loop; the timer goes on while any waits; an ended wait is not retried.
 */
static void test_waits(struct event_base *base, struct budget_queue *q)
{
	struct sockaddr_in a = v4("203.0.113.5");
	struct budget_meter m;
	struct waiter one = {.stay = 1}, two = {.stay = 3};

	budget_queue_limits(q, 0, 40 * KIB);
	budget_meter_init(&m, q, (const struct sockaddr *)&a);
	budget_wait_init(&one.w, &m, waiter_retry, &one);
	budget_wait_init(&two.w, &m, waiter_retry, &two);
	budget_meter_set(&m, 40 * KIB);
	budget_wait_start(&one.w);
	budget_wait_start(&one.w); /* again: once on the queue */
	budget_wait_start(&two.w);
	/* a fall to the mark (30k) wakes them, from the loop, not from the call */
	budget_meter_set(&m, 31 * KIB);
	budget_meter_set(&m, 30 * KIB);
	CHECK(one.retries == 0);
	event_base_loop(base, EVLOOP_NONBLOCK);
	CHECK(one.retries == 1 && two.retries == 1);
	CHECK(!one.w.queued && two.w.queued);
	/* the timer goes on for the one still waiting, until it ends */
	event_base_loop(base, EVLOOP_ONCE);
	CHECK(one.retries == 1 && two.retries == 2);
	event_base_loop(base, EVLOOP_ONCE);
	CHECK(two.retries == 3 && !two.w.queued);
	budget_wait_end(&two.w);			    /* ended: again is nothing */
	CHECK(event_base_loop(base, EVLOOP_NONBLOCK) == 1); /* no event left */
	budget_meter_set(&m, 0);
}

/* The metrics: every series from the start, the pauses counted by limit. */
static void test_render(void)
{
	struct evbuffer *out = evbuffer_new();
	char text[4096];
	size_t n;

	budget_paused(BUDGET_PEER);
	budget_paused(BUDGET_PEER);
	budget_render(out, 4u << 20);
	n = evbuffer_remove(out, text, sizeof(text) - 1);
	text[n] = '\0';
	CHECK(strstr(text, "\nidemproxy_relay_budget_bytes 0\n") != NULL);
	CHECK(strstr(text, "\nidemproxy_relay_budget_bytes_limit 4194304\n") != NULL);
	CHECK(strstr(text, "\nidemproxy_relay_budget_pauses_total{limit=\"process\"} 0\n") != NULL);
	CHECK(strstr(text, "\nidemproxy_relay_budget_pauses_total{limit=\"peer\"} 2\n") != NULL);
	CHECK(strstr(text, "# TYPE idemproxy_relay_budget_pauses_total counter\n") != NULL);
	evbuffer_free(out);
}

int main(void)
{
	struct event_base *base = event_base_new();
	struct budget_queue *q = base ? budget_queue_new(base) : NULL;

	CHECK(q != NULL);
	if (q) {
		test_slots(q);
		test_meters(q);
		test_waits(base, q);
		test_render();
	}
	budget_queue_free(q);
	if (base)
		event_base_free(base);
	UNIT_DONE("budget");
}
