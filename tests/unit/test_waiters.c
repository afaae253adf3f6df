/*
 * Unit tests for proxy/waiters.c: which waiters a wake-up reaches, whether
 * one came since a claim, the table's bound and the end of a wait.
 */
#include "proxy/waiters.h"
#include "tests/unit/unit.h"

#include <event2/event.h>
#include <stdio.h>
#include <string.h>

#include "proxy/clock.h"

#define NWAITERS      8
#define MAX_CONNS     64 /* with WORKERS: a table of 8 waiters */
#define WORKERS	      4
#define TABLE_MAX     (MAX_CONNS / (2 * WORKERS))
#define LONG_WAIT_US  (3600 * 1000000LL)
#define SHORT_WAIT_US 1000
#define RING	      256 /* the wake-ups a table remembers */

static struct waiters *table;
static int woken[NWAITERS];

/* A test's waiter: its index is its arg, its owner removes it when woken. */
static struct waiter ws[NWAITERS];

static void wake(void *arg)
{
	struct waiter *x = arg;

	woken[x - ws]++;
	waiters_remove(table, x);
}

/* ws[i] of scope token, waiting for wait_us from now (not yet held). */
static void waiter_init(int i, const char *token, int64_t wait_us)
{
	memset(&ws[i], 0, sizeof(ws[i]));
	snprintf(ws[i].token, sizeof(ws[i].token), "%s", token);
	ws[i].deadline_us = clock_now_us() + wait_us;
	ws[i].arg = &ws[i];
}

/* ws[i] claims, then holds and waits: 1 when it was held. */
static int waiter_wait(int i)
{
	waiters_claiming(table, &ws[i]);
	if (waiters_hold(table, &ws[i], MAX_CONNS, WORKERS) != WAITERS_HELD)
		return 0;
	waiters_add(table, &ws[i]);
	return 1;
}

static void forget_all(void)
{
	for (int i = 0; i < NWAITERS; i++)
		waiters_forget(&ws[i]);
	memset(woken, 0, sizeof(woken));
}

static void test_wake_by_token(struct event_base *base)
{
	table = waiters_new(base, wake);
	CHECK(table != NULL);
	waiter_init(0, "aaaa0000000000000000000000000000", LONG_WAIT_US);
	waiter_init(1, "aaaa0000000000000000000000000001", LONG_WAIT_US); /* same bucket */
	waiter_init(2, "bbbb0000000000000000000000000000", LONG_WAIT_US);
	CHECK(waiter_wait(0) && waiter_wait(1) && waiter_wait(2));
	waiters_wake(table, "aaaa0000000000000000000000000001");
	CHECK(woken[0] == 0 && woken[1] == 1 && woken[2] == 0);
	waiters_wake(table, "cccc0000000000000000000000000000");
	CHECK(woken[0] == 0 && woken[2] == 0);
	waiters_wake(table, NULL); /* every scope */
	CHECK(woken[0] == 1 && woken[1] == 1 && woken[2] == 1);
	waiters_wake(table, NULL); /* nobody is left */
	CHECK(woken[0] == 1 && woken[1] == 1 && woken[2] == 1);
	forget_all();
	waiters_free(table);
}

static void test_woken_since_claim(struct event_base *base)
{
	char token[SCOPE_TOKEN_SIZE];

	table = waiters_new(base, wake);
	waiter_init(0, "aaaa0000000000000000000000000000", LONG_WAIT_US);
	waiters_claiming(table, &ws[0]);
	waiters_wake(table, "bbbb0000000000000000000000000000"); /* another scope */
	CHECK(waiters_hold(table, &ws[0], MAX_CONNS, WORKERS) == WAITERS_HELD);
	waiters_claiming(table, &ws[0]);
	waiters_wake(table, ws[0].token); /* its own, while its claim was out */
	CHECK(waiters_hold(table, &ws[0], MAX_CONNS, WORKERS) == WAITERS_WOKEN);
	waiters_claiming(table, &ws[0]);
	waiters_wake(table, NULL); /* every scope */
	CHECK(waiters_hold(table, &ws[0], MAX_CONNS, WORKERS) == WAITERS_WOKEN);
	/* More wake-ups than the ring holds: too many to tell, look again. */
	waiters_claiming(table, &ws[0]);
	for (int i = 0; i <= RING; i++) {
		snprintf(token, sizeof(token), "cccc%028d", i);
		waiters_wake(table, token);
	}
	CHECK(waiters_hold(table, &ws[0], MAX_CONNS, WORKERS) == WAITERS_WOKEN);
	forget_all();
	waiters_free(table);
}

static void test_bound_and_deadline(struct event_base *base)
{
	char token[SCOPE_TOKEN_SIZE];
	struct waiter extra[TABLE_MAX];

	table = waiters_new(base, wake);
	waiter_init(0, "aaaa0000000000000000000000000000", 0);
	CHECK(waiters_hold(table, &ws[0], MAX_CONNS, WORKERS) == WAITERS_OVER); /* wait over */
	for (int i = 0; i < TABLE_MAX; i++) {
		memset(&extra[i], 0, sizeof(extra[i]));
		snprintf(extra[i].token, sizeof(token), "dddd%028d", i);
		extra[i].deadline_us = clock_now_us() + LONG_WAIT_US;
		waiters_claiming(table, &extra[i]);
		CHECK(waiters_hold(table, &extra[i], MAX_CONNS, WORKERS) == WAITERS_HELD);
		waiters_add(table, &extra[i]);
	}
	waiter_init(1, "aaaa0000000000000000000000000000", LONG_WAIT_US);
	CHECK(waiters_hold(table, &ws[1], MAX_CONNS, WORKERS) == WAITERS_OVER); /* full */
	/* A tiny share still holds one waiter. */
	CHECK(waiters_hold(table, &ws[1], 1, WORKERS) == WAITERS_OVER);
	for (int i = 0; i < TABLE_MAX; i++) {
		waiters_remove(table, &extra[i]);
		waiters_forget(&extra[i]);
	}
	CHECK(waiters_hold(table, &ws[1], 1, WORKERS) == WAITERS_HELD);
	forget_all();
	waiters_free(table);
}

static void test_wait_ends(struct event_base *base)
{
	table = waiters_new(base, wake);
	waiter_init(0, "aaaa0000000000000000000000000000", SHORT_WAIT_US);
	waiter_init(1, "bbbb0000000000000000000000000000", LONG_WAIT_US);
	CHECK(waiter_wait(0) && waiter_wait(1));
	/* Until the short wait ends; the long one's timer keeps the loop from emptying. */
	while (!woken[0])
		event_base_loop(base, EVLOOP_ONCE);
	CHECK(woken[0] == 1 && woken[1] == 0);
	/* A removed waiter's timer is stopped: nothing is left pending. */
	waiters_remove(table, &ws[1]);
	CHECK(event_base_loop(base, EVLOOP_NONBLOCK) == 1);
	CHECK(woken[1] == 0);
	forget_all();
	CHECK(ws[0].timer == NULL && ws[1].timer == NULL);
	waiters_free(table);
}

int main(void)
{
	struct event_base *base = event_base_new();

	CHECK(base != NULL);
	test_wake_by_token(base);
	test_woken_since_claim(base);
	test_bound_and_deadline(base);
	test_wait_ends(base);
	event_base_free(base);
	waiters_free(NULL);
	UNIT_DONE("waiters");
}
