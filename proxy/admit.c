/* Owners in flight, per instance and per actor (admit.h). */
#include "proxy/admit.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "proxy/scope.h"

#define ADMIT_BUCKETS 1024 /* a power of two */

/* An actor with owners in flight; removed when the last one ends. */
struct admit_actor {
	struct admit_actor *next;
	uint64_t hash;
	int owners;
	char name[]; /* NUL-terminated */
};

struct admit {
	_Atomic int64_t owners;
	pthread_mutex_t lock; /* the table below */
	int nactors;
	struct admit_actor *buckets[ADMIT_BUCKETS];
};

struct admit *admit_new(void)
{
	struct admit *a = calloc(1, sizeof(*a));

	if (a && pthread_mutex_init(&a->lock, NULL) != 0) {
		free(a);
		return NULL;
	}
	return a;
}

void admit_free(struct admit *a)
{
	struct admit_actor *e, *next;

	if (!a)
		return;
	for (int i = 0; i < ADMIT_BUCKETS; i++)
		for (e = a->buckets[i]; e; e = next) {
			next = e->next;
			free(e);
		}
	pthread_mutex_destroy(&a->lock);
	free(a);
}

/* The actor's hash: the scope hash of the actor alone. */
static uint64_t admit_hash(const char *actor)
{
	return scope_hash(&(struct scope){actor, "", ""});
}

/* The link that points at actor's entry, or at the end of its bucket. Under the lock. */
static struct admit_actor **admit_find(struct admit *a, const char *actor, uint64_t hash)
{
	struct admit_actor **e = &a->buckets[hash & (ADMIT_BUCKETS - 1)];

	while (*e && ((*e)->hash != hash || strcmp((*e)->name, actor) != 0))
		e = &(*e)->next;
	return e;
}

/* One more owner of actor, within actor_max and table_max actors. Under the lock. */
static enum admit_result admit_actor_take(struct admit *a, const char *actor, int actor_max,
					  int table_max)
{
	uint64_t hash = admit_hash(actor);
	struct admit_actor **e = admit_find(a, actor, hash);
	size_t len;

	if (*e) {
		if ((*e)->owners >= actor_max)
			return ADMIT_ACTOR_MAX_OWNERS;
		(*e)->owners++;
		return ADMIT_OK;
	}
	if (a->nactors >= table_max)
		return ADMIT_ACTOR_MAX_OWNERS;
	len = strlen(actor);
	*e = malloc(sizeof(**e) + len + 1);
	if (!*e)
		return ADMIT_NOMEM;
	(*e)->next = NULL;
	(*e)->hash = hash;
	(*e)->owners = 1;
	memcpy((*e)->name, actor, len + 1);
	a->nactors++;
	return ADMIT_OK;
}

enum admit_result admit_take(struct admit *a, int max_owners, const char *actor, int actor_max,
			     int table_max, int *counted)
{
	int64_t n = atomic_fetch_add_explicit(&a->owners, 1, memory_order_relaxed) + 1;
	enum admit_result res = ADMIT_OK;

	*counted = 0;
	if (max_owners > 0 && n > max_owners)
		res = ADMIT_MAX_OWNERS;
	else if (actor_max > 0) {
		pthread_mutex_lock(&a->lock);
		res = admit_actor_take(a, actor, actor_max, table_max);
		pthread_mutex_unlock(&a->lock);
		*counted = res == ADMIT_OK;
	}
	if (res != ADMIT_OK)
		atomic_fetch_sub_explicit(&a->owners, 1, memory_order_relaxed);
	return res;
}

void admit_give(struct admit *a, const char *actor, int counted)
{
	struct admit_actor **e, *gone = NULL;

	atomic_fetch_sub_explicit(&a->owners, 1, memory_order_relaxed);
	if (!counted)
		return;
	pthread_mutex_lock(&a->lock);
	e = admit_find(a, actor, admit_hash(actor));
	if (*e && --(*e)->owners == 0) {
		gone = *e;
		*e = gone->next;
		a->nactors--;
	}
	pthread_mutex_unlock(&a->lock);
	free(gone);
}

int64_t admit_owners(const struct admit *a)
{
	return atomic_load_explicit(&a->owners, memory_order_relaxed);
}

int admit_actors(struct admit *a)
{
	int n;

	pthread_mutex_lock(&a->lock);
	n = a->nactors;
	pthread_mutex_unlock(&a->lock);
	return n;
}
