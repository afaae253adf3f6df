/*
 * Unit tests for proxy/admit.c: the instance's bound, an actor's bound,
 * the bound of the actors' table, places freed by admit_give, and the
 * counts staying exact under threads taking and giving at once; and the
 * forwarded key of a scope (scope.c), which must never change.
 */
#include "proxy/admit.h"
#include "tests/unit/unit.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "proxy/scope.h"

#define THREADS	  4
#define ROUNDS	  20000
#define ACTOR_MAX 3
#define TABLE_MAX 2

static void test_instance_bound(void)
{
	struct admit *a = admit_new();
	int counted = -1;

	CHECK(a != NULL);
	CHECK(admit_take(a, 2, "a", 0, 10, &counted) == ADMIT_OK && counted == 0);
	CHECK(admit_take(a, 2, "b", 0, 10, &counted) == ADMIT_OK);
	CHECK(admit_take(a, 2, "c", 0, 10, &counted) == ADMIT_MAX_OWNERS);
	CHECK(admit_owners(a) == 2);
	/* No limit: counted all the same, so turning max_owners on counts right. */
	CHECK(admit_take(a, 0, "c", 0, 10, &counted) == ADMIT_OK);
	CHECK(admit_owners(a) == 3);
	admit_give(a, "a", 0);
	admit_give(a, "b", 0);
	CHECK(admit_take(a, 3, "c", 0, 10, &counted) == ADMIT_OK);
	admit_give(a, "c", 0);
	admit_give(a, "c", 0);
	CHECK(admit_owners(a) == 0 && admit_actors(a) == 0);
	admit_free(a);
}

static void test_actor_bound(void)
{
	struct admit *a = admit_new();
	int counted = 0;

	for (int i = 0; i < ACTOR_MAX; i++)
		CHECK(admit_take(a, 0, "alice", ACTOR_MAX, 10, &counted) == ADMIT_OK && counted);
	CHECK(admit_take(a, 0, "alice", ACTOR_MAX, 10, &counted) == ADMIT_ACTOR_MAX_OWNERS);
	CHECK(counted == 0);
	CHECK(admit_take(a, 0, "bob", ACTOR_MAX, 10, &counted) == ADMIT_OK && counted);
	CHECK(admit_owners(a) == ACTOR_MAX + 1 && admit_actors(a) == 2);
	/* An owner on a route without actor_max_owners is not the actor's. */
	CHECK(admit_take(a, 0, "alice", 0, 10, &counted) == ADMIT_OK && counted == 0);
	admit_give(a, "alice", 0);
	/* Over the instance's bound first: the actor is not counted. */
	CHECK(admit_take(a, ACTOR_MAX + 1, "carol", ACTOR_MAX, 10, &counted) == ADMIT_MAX_OWNERS);
	CHECK(admit_actors(a) == 2);
	admit_give(a, "alice", 1);
	CHECK(admit_take(a, 0, "alice", ACTOR_MAX, 10, &counted) == ADMIT_OK && counted);
	for (int i = 0; i < ACTOR_MAX; i++)
		admit_give(a, "alice", 1);
	admit_give(a, "bob", 1);
	CHECK(admit_owners(a) == 0 && admit_actors(a) == 0);
	admit_free(a);
}

static void test_table_bound(void)
{
	struct admit *a = admit_new();
	int counted = 0;

	CHECK(admit_take(a, 0, "a", ACTOR_MAX, TABLE_MAX, &counted) == ADMIT_OK);
	CHECK(admit_take(a, 0, "b", ACTOR_MAX, TABLE_MAX, &counted) == ADMIT_OK);
	/* A third actor finds the table full; the two in it still have room. */
	CHECK(admit_take(a, 0, "c", ACTOR_MAX, TABLE_MAX, &counted) == ADMIT_ACTOR_MAX_OWNERS);
	CHECK(admit_take(a, 0, "a", ACTOR_MAX, TABLE_MAX, &counted) == ADMIT_OK);
	CHECK(admit_actors(a) == TABLE_MAX && admit_owners(a) == 3);
	admit_give(a, "b", 1); /* its last owner: its entry goes */
	CHECK(admit_take(a, 0, "c", ACTOR_MAX, TABLE_MAX, &counted) == ADMIT_OK);
	admit_give(a, "c", 1);
	admit_give(a, "a", 1);
	admit_give(a, "a", 1);
	CHECK(admit_owners(a) == 0 && admit_actors(a) == 0);
	admit_free(a);
}

struct worker_arg {
	struct admit *a;
	int id;
	int refused;
};

/* Take and give one actor's places as fast as the others do theirs, and a shared one's. */
static void *worker(void *p)
{
	struct worker_arg *w = p;
	char own[16];
	int counted;

	snprintf(own, sizeof(own), "actor-%d", w->id);
	for (int i = 0; i < ROUNDS; i++) {
		const char *actor = i % 2 ? own : "shared";

		if (admit_take(w->a, 0, actor, ACTOR_MAX, 1000, &counted) == ADMIT_OK)
			admit_give(w->a, actor, counted);
		else
			w->refused++;
	}
	return NULL;
}

static void test_threads(void)
{
	struct admit *a = admit_new();
	struct worker_arg args[THREADS];
	pthread_t t[THREADS];
	int refused = 0;

	for (int i = 0; i < THREADS; i++) {
		args[i] = (struct worker_arg){a, i, 0};
		CHECK(pthread_create(&t[i], NULL, worker, &args[i]) == 0);
	}
	for (int i = 0; i < THREADS; i++) {
		pthread_join(t[i], NULL);
		refused += args[i].refused;
	}
	/* Own actors never reach their bound; only "shared" may refuse. */
	CHECK(refused <= THREADS * ROUNDS / 2);
	CHECK(admit_owners(a) == 0 && admit_actors(a) == 0);
	admit_free(a);
}

static void test_forward_key(void)
{
	char k[SCOPE_FORWARD_KEY_SIZE], other[SCOPE_FORWARD_KEY_SIZE];

	/* The derivation is a contract: upstreams keep these keys. */
	scope_forward_key(&(struct scope){"h:alice", "order.pay", "k-1"}, k);
	CHECK_STR(k, "fbc86910225889da5bcedc1f56d0d3d6b8ffbf7e42f9e70dc72396b2c4ae6398");
	/* Length prefixes: moving a character between parts is another scope. */
	scope_forward_key(&(struct scope){"h:alic", "eorder.pay", "k-1"}, other);
	CHECK(strlen(other) == 64 && strcmp(k, other) != 0);
	scope_forward_key(&(struct scope){"h:alice", "order.pay", "k-2"}, other);
	CHECK(strcmp(k, other) != 0);
}

int main(void)
{
	test_instance_bound();
	test_actor_bound();
	test_table_bound();
	test_threads();
	test_forward_key();
	UNIT_DONE("admit");
}
