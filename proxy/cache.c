/*
 * The per-worker replay cache.
 *
 * A chained hash table keyed by the scope finds an entry; a doubly linked
 * list in recency order says which entry to evict. Each entry is one
 * allocation: the node, then the three scope strings, the headers and the
 * body, so a put is one malloc, a drop is one free and a get allocates
 * nothing. The table doubles when it is as full as it has buckets and never
 * shrinks; each entry is charged its share of it, so the byte budget bounds
 * everything that grows with the number of entries.
 */
#include "proxy/cache.h"

#include <stdlib.h>
#include <string.h>


#define CACHE_BUCKETS_INITIAL 64
/* An entry may use at most 1/CACHE_ENTRY_MAX_SHARE of the budget. */
#define CACHE_ENTRY_MAX_SHARE 8
/* Doubling at load 1 leaves at most two buckets per entry held at the peak. */
#define CACHE_SLOTS_PER_ENTRY 2
#define CACHE_TABLE_SHARE     (CACHE_SLOTS_PER_ENTRY * sizeof(struct cache_node *))

struct cache_node {
	struct cache_node *lru_prev; /* more recently used, NULL at the head */
	struct cache_node *lru_next; /* less recently used, NULL at the tail */
	struct cache_node *chain_next;
	uint64_t hash;
	int64_t expires_us;
	int64_t record_expires_us;   /* when the record itself expires (ttl_us) */
	size_t cost;
	size_t actor_len, operation_len, key_len;
	struct record entry;
	char data[]; /* actor NUL operation NUL key NUL headers NUL body */
};

struct cache {
	size_t budget;
	int64_t max_age_us;
	struct cache_node **buckets;
	size_t nbuckets; /* 0 until the first put, then a power of two */
	struct cache_node *lru_head, *lru_tail;
	size_t bytes, count;
	uint64_t hits, misses;
};

/* A scope being looked up: borrowed strings, their lengths and hash. */
struct cache_scope {
	const char *actor, *operation, *key;
	size_t actor_len, operation_len, key_len;
	uint64_t hash;
};

/* Fills s from the borrowed scope sc. */
static void cache_scope_init(struct cache_scope *s, const struct scope *sc)
{
	s->actor = sc->actor;
	s->operation = sc->operation;
	s->key = sc->key;
	s->actor_len = strlen(sc->actor);
	s->operation_len = strlen(sc->operation);
	s->key_len = strlen(sc->key);
	s->hash = scope_hash(sc);
}

/* Returns 1 when node n holds scope s. */
static int cache_node_matches(const struct cache_node *n, const struct cache_scope *s)
{
	const char *p = n->data;

	if (n->hash != s->hash || n->actor_len != s->actor_len ||
	    n->operation_len != s->operation_len || n->key_len != s->key_len)
		return 0;
	if (memcmp(p, s->actor, s->actor_len) != 0)
		return 0;
	p += s->actor_len + 1;
	if (memcmp(p, s->operation, s->operation_len) != 0)
		return 0;
	p += s->operation_len + 1;
	return memcmp(p, s->key, s->key_len) == 0;
}

/* Returns the node holding scope s, or NULL. */
static struct cache_node *cache_find(const struct cache *c, const struct cache_scope *s)
{
	struct cache_node *n;

	if (c->nbuckets == 0)
		return NULL;
	for (n = c->buckets[s->hash & (c->nbuckets - 1)]; n; n = n->chain_next) {
		if (cache_node_matches(n, s))
			return n;
	}
	return NULL;
}

static void cache_lru_unlink(struct cache *c, struct cache_node *n)
{
	if (n->lru_prev)
		n->lru_prev->lru_next = n->lru_next;
	else
		c->lru_head = n->lru_next;
	if (n->lru_next)
		n->lru_next->lru_prev = n->lru_prev;
	else
		c->lru_tail = n->lru_prev;
	n->lru_prev = NULL;
	n->lru_next = NULL;
}

static void cache_lru_push_front(struct cache *c, struct cache_node *n)
{
	n->lru_prev = NULL;
	n->lru_next = c->lru_head;
	if (c->lru_head)
		c->lru_head->lru_prev = n;
	else
		c->lru_tail = n;
	c->lru_head = n;
}

/* Unlinks node n (which the cache holds) from both structures and frees it. */
static void cache_drop(struct cache *c, struct cache_node *n)
{
	struct cache_node **link = &c->buckets[n->hash & (c->nbuckets - 1)];

	while (*link != n)
		link = &(*link)->chain_next;
	*link = n->chain_next;
	cache_lru_unlink(c, n);
	c->bytes -= n->cost;
	c->count--;
	free(n);
}

/*
 * Makes room in the table for one more entry: allocates it on first use and
 * doubles it at load 1. Returns 0, or -1 when there is no table at all; a
 * failed doubling keeps the old table, whose chains just get longer.
 */
static int cache_table_reserve(struct cache *c)
{
	struct cache_node **buckets, *n, *next;
	size_t nbuckets, i;

	if (c->nbuckets == 0) {
		c->buckets = calloc(CACHE_BUCKETS_INITIAL, sizeof(*c->buckets));
		if (!c->buckets)
			return -1;
		c->nbuckets = CACHE_BUCKETS_INITIAL;
		return 0;
	}
	if (c->count < c->nbuckets)
		return 0;
	nbuckets = c->nbuckets * 2;
	buckets = calloc(nbuckets, sizeof(*buckets));
	if (!buckets)
		return 0;
	for (i = 0; i < c->nbuckets; i++) {
		for (n = c->buckets[i]; n; n = next) {
			next = n->chain_next;
			n->chain_next = buckets[n->hash & (nbuckets - 1)];
			buckets[n->hash & (nbuckets - 1)] = n;
		}
	}
	free(c->buckets);
	c->buckets = buckets;
	c->nbuckets = nbuckets;
	return 0;
}

/* Room for a copy of the string s (NULL: none). */
static size_t cache_str_size(const char *s)
{
	return s ? strlen(s) + 1 : 0;
}

/* A copy of s (NULL: none) at *p, which moves past it; returns the copy. */
static const char *cache_str_copy(char **p, const char *s)
{
	char *at = *p;
	size_t n = cache_str_size(s);

	if (!s)
		return NULL;
	memcpy(at, s, n);
	*p += n;
	return at;
}

/*
 * Size of the single allocation holding scope s and record e, written to
 * *size. Returns 0, or -1 when the size does not fit in a size_t.
 */
static int cache_node_size(const struct cache_scope *s, const struct record *e, size_t *size)
{
	size_t n = sizeof(struct cache_node);

	if (__builtin_add_overflow(n, s->actor_len + 1, &n) ||
	    __builtin_add_overflow(n, s->operation_len + 1, &n) ||
	    __builtin_add_overflow(n, s->key_len + 1, &n) ||
	    __builtin_add_overflow(n, e->headers_len, &n) || __builtin_add_overflow(n, 1, &n) ||
	    __builtin_add_overflow(n, e->body_len, &n) ||
	    __builtin_add_overflow(n, cache_str_size(e->request_id), &n) ||
	    __builtin_add_overflow(n, cache_str_size(e->trace_id), &n))
		return -1;
	*size = n;
	return 0;
}

/*
 * Allocates a node of size bytes holding copies of scope s and record e;
 * it is linked nowhere yet. Returns NULL when out of memory.
 */
static struct cache_node *cache_node_new(const struct cache_scope *s, const struct record *e,
					 size_t size)
{
	struct cache_node *n = malloc(size);
	char *p;

	if (!n)
		return NULL;
	n->lru_prev = NULL;
	n->lru_next = NULL;
	n->chain_next = NULL;
	n->hash = s->hash;
	n->actor_len = s->actor_len;
	n->operation_len = s->operation_len;
	n->key_len = s->key_len;
	memset(&n->entry, 0, sizeof(n->entry));
	memcpy(n->entry.fingerprint, e->fingerprint, RECORD_FINGERPRINT_LEN);
	n->entry.state = RECORD_COMPLETED;
	n->entry.status = e->status;
	n->entry.headers_len = e->headers_len;
	n->entry.body_len = e->body_len;
	n->entry.body_omitted = e->body_omitted;

	p = n->data;
	memcpy(p, s->actor, s->actor_len + 1);
	p += s->actor_len + 1;
	memcpy(p, s->operation, s->operation_len + 1);
	p += s->operation_len + 1;
	memcpy(p, s->key, s->key_len + 1);
	p += s->key_len + 1;
	if (e->headers_len > 0)
		memcpy(p, e->headers, e->headers_len);
	p[e->headers_len] = '\0';
	n->entry.headers = p;
	p += e->headers_len + 1;
	if (e->body_len > 0)
		memcpy(p, e->body, e->body_len);
	n->entry.body = (const unsigned char *)p;
	p += e->body_len;
	n->entry.request_id = cache_str_copy(&p, e->request_id);
	n->entry.trace_id = cache_str_copy(&p, e->trace_id);
	return n;
}

/* See cache.h. The struct is allocated even when disabled so callers need
 * no special case. */
struct cache *cache_new(size_t budget_bytes, int64_t max_age_us)
{
	struct cache *c = calloc(1, sizeof(*c));

	if (!c)
		return NULL;
	c->budget = budget_bytes;
	c->max_age_us = max_age_us;
	return c;
}

void cache_free(struct cache *c)
{
	struct cache_node *n, *next;

	if (!c)
		return;
	for (n = c->lru_head; n; n = next) {
		next = n->lru_next;
		free(n);
	}
	free(c->buckets);
	c->buckets = NULL;
	free(c);
}

/* See cache.h; the returned record belongs to the cache. */
const struct record *cache_get(struct cache *c, const struct scope *sc, int64_t now_us)
{
	struct cache_scope s;
	struct cache_node *n;

	if (c->count == 0) {
		c->misses++;
		return NULL;
	}
	cache_scope_init(&s, sc);
	n = cache_find(c, &s);
	if (!n) {
		c->misses++;
		return NULL;
	}
	if (now_us >= n->expires_us) {
		cache_drop(c, n);
		c->misses++;
		return NULL;
	}
	cache_lru_unlink(c, n);
	cache_lru_push_front(c, n);
	c->hits++;
	n->entry.expires_in_ms = (n->record_expires_us - now_us) / 1000;
	return &n->entry;
}

/* See cache.h; e and the scope's strings stay owned by the caller. */
void cache_put(struct cache *c, const struct scope *sc, const struct record *e, int64_t ttl_us,
	       int64_t now_us)
{
	struct cache_scope s;
	struct cache_node *n;
	int64_t life;
	size_t size, cost;

	if (c->budget == 0)
		return;
	cache_scope_init(&s, sc);
	n = cache_find(c, &s);
	if (n)
		cache_drop(c, n);

	life = ttl_us < c->max_age_us ? ttl_us : c->max_age_us;
	if (life <= 0)
		return;
	if (cache_node_size(&s, e, &size) < 0)
		return;
	if (__builtin_add_overflow(size, CACHE_TABLE_SHARE, &cost) ||
	    cost > c->budget / CACHE_ENTRY_MAX_SHARE)
		return;
	if (cache_table_reserve(c) < 0)
		return;
	n = cache_node_new(&s, e, size);
	if (!n)
		return;
	n->cost = cost;
	n->expires_us = now_us > INT64_MAX - life ? INT64_MAX : now_us + life;
	n->record_expires_us = now_us > INT64_MAX - ttl_us ? INT64_MAX : now_us + ttl_us;

	while (c->bytes + cost > c->budget)
		cache_drop(c, c->lru_tail);
	n->chain_next = c->buckets[s.hash & (c->nbuckets - 1)];
	c->buckets[s.hash & (c->nbuckets - 1)] = n;
	cache_lru_push_front(c, n);
	c->bytes += cost;
	c->count++;
}

void cache_remove(struct cache *c, const struct scope *sc)
{
	struct cache_scope s;
	struct cache_node *n;

	if (c->count == 0)
		return;
	cache_scope_init(&s, sc);
	n = cache_find(c, &s);
	if (n)
		cache_drop(c, n);
}

size_t cache_bytes(const struct cache *c)
{
	return c->bytes;
}

size_t cache_count(const struct cache *c)
{
	return c->count;
}

uint64_t cache_hits(const struct cache *c)
{
	return c->hits;
}

uint64_t cache_misses(const struct cache *c)
{
	return c->misses;
}
