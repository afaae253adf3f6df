/*
 * The record store against a real PostgreSQL. Runs only when
 * IDEMPROXY_TEST_DSN names a database it may write to (the migrations are
 * applied there); otherwise it runs only the checks of its statements and
 * decoders (store_sql.h), which need no database.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>
#include <libpq-fe.h>

#include "proxy/fingerprint.h"
#include "proxy/migrate.h"
#include "proxy/quota.h"
#include "proxy/store.h"
#include "proxy/store_sql.h"
#include "tests/unit/unit.h"

#define TEST_TIMEOUT_MS	      2000
#define TEST_WAIT_MS	      5000
#define TEST_TICK_MS	      5
#define TEST_LEASE_MS	      60000
#define TEST_RETENTION_MS     3600000
#define TEST_QUEUED_CLAIMS    20
#define TEST_RACERS	      8
#define TEST_RACE_ROUNDS      20
#define TEST_BATCH_OPS	      200 /* more than one statement carries (STORE_BATCH_MAX) */
#define TEST_BATCH_STATEMENTS 3	  /* a lone first statement, then the rest */
#define TEST_BAD_BATCH	      5
#define TEST_BENCH_SLOTS      64 /* scopes in flight, unless IDEMPROXY_STORE_BENCH_CONC says */
#define TEST_BENCH_MS	      5000

/* What one callback reported. */
struct result {
	int called;
	int sync; /* ran inside the call that queued it */
	enum store_result res;
	int64_t generation;
	struct record rec;
	char headers[256];
	unsigned char body[256];
	char request_id[64]; /* rec's claimant's ids; "-": NULL */
	char trace_id[64];
	char completed_at[64]; /* a tombstone's, "-": NULL */
	int rows;	       /* a query's */
	char first[128];       /* its first row's first column */
};

static struct event_base *base;
static int in_call;
static char actor[64];

static void tick(evutil_socket_t fd, short what, void *arg)
{
}

/* Run the loop until *flag is set or ms pass; returns *flag. */
static int run_until(const int *flag, int ms)
{
	struct timeval tv = {0, TEST_TICK_MS * 1000};
	struct event *ev = event_new(base, -1, EV_PERSIST, tick, NULL);
	struct timespec start, now;

	event_add(ev, &tv);
	clock_gettime(CLOCK_MONOTONIC, &start);
	while (!*flag) {
		clock_gettime(CLOCK_MONOTONIC, &now);
		if ((now.tv_sec - start.tv_sec) * 1000 + (now.tv_nsec - start.tv_nsec) / 1000000 >
		    ms)
			break;
		event_base_loop(base, EVLOOP_ONCE);
	}
	event_free(ev);
	return *flag;
}

/* Run the loop for ms. */
static void run_for(int ms)
{
	int never = 0;

	run_until(&never, ms);
}

static int wait_ready(struct store *st)
{
	struct timespec start, now;

	clock_gettime(CLOCK_MONOTONIC, &start);
	while (!store_ready(st)) {
		clock_gettime(CLOCK_MONOTONIC, &now);
		if ((now.tv_sec - start.tv_sec) * 1000 + (now.tv_nsec - start.tv_nsec) / 1000000 >
		    TEST_WAIT_MS)
			return 0;
		run_for(TEST_TICK_MS);
	}
	return 1;
}

static void claim_cb(void *arg, enum store_result res, int64_t generation, const struct record *rec)
{
	struct result *r = arg;

	r->called++;
	r->sync = in_call;
	r->res = res;
	r->generation = generation;
	if (rec) {
		r->rec = *rec;
		snprintf(r->headers, sizeof(r->headers), "%.*s", (int)rec->headers_len,
			 rec->headers);
		if (rec->body && rec->body_len <= sizeof(r->body))
			memcpy(r->body, rec->body, rec->body_len);
		r->rec.headers = NULL;
		r->rec.body = NULL;
		snprintf(r->request_id, sizeof(r->request_id), "%s",
			 rec->request_id ? rec->request_id : "-");
		snprintf(r->trace_id, sizeof(r->trace_id), "%s", rec->trace_id ? rec->trace_id : "-");
		r->rec.request_id = NULL;
		r->rec.trace_id = NULL;
		snprintf(r->completed_at, sizeof(r->completed_at), "%s",
			 rec->completed_at ? rec->completed_at : "-");
		r->rec.completed_at = NULL;
	}
}

static void done_cb(void *arg, enum store_result res)
{
	struct result *r = arg;

	r->called++;
	r->sync = in_call;
	r->res = res;
}

/* A query of one number: its value in generation. */
static void query_cb(void *arg, enum store_result res, const PGresult *result)
{
	struct result *r = arg;

	r->called++;
	r->res = res;
	if (res == STORE_OK && PQntuples(result) == 1)
		r->generation = strtoll(PQgetvalue(result, 0, 0), NULL, 10);
}

/*
 * The end of a call made with in_call set: run the loop until its callback
 * came, which must be once and not from inside the call.
 */
static void await_result(struct result *r)
{
	in_call = 0;
	run_until(&r->called, TEST_WAIT_MS);
	CHECK(r->called == 1 && !r->sync);
}

/* A claim by the request of request_id and trace_id (each NULL: none). */
static struct result claim_as(struct store *st, const struct scope *sc, const unsigned char *fp,
			      const char *request_id, const char *trace_id, int64_t lease_ms)
{
	struct result r = {0};

	in_call = 1;
	store_claim(st, sc, fp, request_id, trace_id, lease_ms, 0, claim_cb, &r);
	await_result(&r);
	return r;
}

static struct result claim(struct store *st, const struct scope *sc, const unsigned char *fp,
			   int64_t lease_ms)
{
	return claim_as(st, sc, fp, NULL, NULL, lease_ms);
}

static enum store_result finish(struct store *st, const struct scope *sc, int64_t gen, int status,
				const char *headers, const char *body, int omitted,
				int64_t retention_ms)
{
	struct result r = {0};

	in_call = 1;
	store_finish(st, sc, gen, status, headers, strlen(headers), (const unsigned char *)body,
		     body ? strlen(body) : 0, omitted, NULL, retention_ms, 0, 0, done_cb, &r);
	await_result(&r);
	return r.res;
}

/* store_release and store_mark_unknown take the same arguments. */
typedef void (*fence_fn)(struct store *st, const struct scope *sc, int64_t generation, int flags,
			 store_done_cb cb, void *arg);

static enum store_result fenced(fence_fn fn, struct store *st, const struct scope *sc,
				int64_t gen)
{
	struct result r = {0};

	in_call = 1;
	fn(st, sc, gen, 0, done_cb, &r);
	await_result(&r);
	return r.res;
}

static enum store_result release(struct store *st, const struct scope *sc, int64_t gen)
{
	return fenced(store_release, st, sc, gen);
}

static enum store_result mark_unknown(struct store *st, const struct scope *sc, int64_t gen)
{
	return fenced(store_mark_unknown, st, sc, gen);
}

static void test_migrate(const char *dsn)
{
	char err[512] = "";

	CHECK(migrate_apply(dsn, err, sizeof(err)) == 0);
	if (err[0])
		fprintf(stderr, "migrate: %s\n", err);
	CHECK(migrate_apply(dsn, err, sizeof(err)) == 0);
	CHECK(migrate_apply("host=127.0.0.1 port=1", err, sizeof(err)) == -1);
	CHECK(strstr(err, "cannot connect") != NULL);
}

static void test_claim_finish(struct store *st, const unsigned char *fp, const unsigned char *fp2)
{
	struct scope sc = {actor, "order.pay", "key-1"};
	struct scope other = {"other-actor", "order.pay", "key-1"};
	const char *headers = "Content-Type: application/json\r\nLocation: /o/1\r\n";
	const char *body = "{\"id\":1,\"caf\xc3\xa9\":true}";
	struct result r;
	int64_t g;

	r = claim(st, &sc, fp, TEST_LEASE_MS);
	CHECK(r.res == STORE_OK && r.generation > 0);
	g = r.generation;

	r = claim(st, &sc, fp2, TEST_LEASE_MS);
	CHECK(r.res == STORE_EXISTS);
	CHECK(r.rec.state == RECORD_IN_PROGRESS && r.rec.generation == g);
	CHECK(memcmp(r.rec.fingerprint, fp, FINGERPRINT_LEN) == 0);
	CHECK(!r.rec.lease_expired);
	CHECK(r.rec.lease_remaining_ms > TEST_LEASE_MS - 10000 &&
	      r.rec.lease_remaining_ms <= TEST_LEASE_MS);

	/* Another actor's slot for the same key is separate. */
	r = claim(st, &other, fp2, TEST_LEASE_MS);
	CHECK(r.res == STORE_OK && r.generation != g);
	CHECK(release(st, &other, r.generation) == STORE_OK);

	CHECK(finish(st, &sc, g + 1, 201, headers, body, 0, TEST_RETENTION_MS) == STORE_FENCED);
	CHECK(finish(st, &sc, g, 201, headers, body, 0, TEST_RETENTION_MS) == STORE_OK);
	CHECK(finish(st, &sc, g, 500, "", "x", 0, TEST_RETENTION_MS) == STORE_FENCED);

	r = claim(st, &sc, fp, TEST_LEASE_MS);
	CHECK(r.res == STORE_EXISTS && r.rec.state == RECORD_COMPLETED);
	CHECK(r.rec.generation == g && r.rec.status == 201 && !r.rec.body_omitted);
	CHECK_STR(r.headers, headers);
	CHECK(r.rec.body_len == strlen(body) && memcmp(r.body, body, strlen(body)) == 0);
	CHECK(release(st, &sc, g) == STORE_FENCED);
	CHECK(mark_unknown(st, &sc, g) == STORE_FENCED);
}

static void test_release_unknown(struct store *st, const unsigned char *fp)
{
	struct scope rel = {actor, "order.pay", "key-release"};
	struct scope unk = {actor, "order.pay", "key-unknown"};
	struct scope omit = {actor, "order.pay", "key-omitted"};
	struct result r;
	int64_t g;

	r = claim(st, &rel, fp, TEST_LEASE_MS);
	CHECK(r.res == STORE_OK);
	g = r.generation;
	CHECK(release(st, &rel, g + 1) == STORE_FENCED);
	CHECK(release(st, &rel, g) == STORE_OK);
	/* A new claim of a released slot never reuses a generation: a late
	 * write of the first owner cannot land on the second's record. */
	r = claim(st, &rel, fp, TEST_LEASE_MS);
	CHECK(r.res == STORE_OK && r.generation > g);
	CHECK(release(st, &rel, g) == STORE_FENCED);
	CHECK(finish(st, &rel, g, 200, "", "", 0, TEST_RETENTION_MS) == STORE_FENCED);

	r = claim(st, &unk, fp, TEST_LEASE_MS);
	CHECK(r.res == STORE_OK);
	g = r.generation;
	CHECK(mark_unknown(st, &unk, g) == STORE_OK);
	CHECK(mark_unknown(st, &unk, g + 1) == STORE_FENCED);
	r = claim(st, &unk, fp, TEST_LEASE_MS);
	CHECK(r.res == STORE_EXISTS && r.rec.state == RECORD_UNKNOWN && r.rec.generation == g);
	/* Marked unknown (by the sweeper, when the lease ran out) but never
	 * taken over: the owner's own late outcome still lands; a stale
	 * generation never does. */
	CHECK(finish(st, &unk, g + 1, 200, "", "", 0, TEST_RETENTION_MS) == STORE_FENCED);
	CHECK(finish(st, &unk, g, 200, "", "late", 0, TEST_RETENTION_MS) == STORE_OK);
	CHECK(finish(st, &unk, g, 200, "", "again", 0, TEST_RETENTION_MS) == STORE_FENCED);
	r = claim(st, &unk, fp, TEST_LEASE_MS);
	CHECK(r.res == STORE_EXISTS && r.rec.state == RECORD_COMPLETED && r.rec.body_len == 4 &&
	      memcmp(r.body, "late", 4) == 0);

	r = claim(st, &omit, fp, TEST_LEASE_MS);
	CHECK(r.res == STORE_OK);
	CHECK(finish(st, &omit, r.generation, 200, "ETag: \"x\"\r\n", NULL, 1, TEST_RETENTION_MS) ==
	      STORE_OK);
	r = claim(st, &omit, fp, TEST_LEASE_MS);
	CHECK(r.res == STORE_EXISTS && r.rec.state == RECORD_COMPLETED);
	CHECK(r.rec.body_omitted && r.rec.body_len == 0 && r.rec.status == 200);
	CHECK_STR(r.headers, "ETag: \"x\"\r\n");
}

static void test_expiry(struct store *st, const unsigned char *fp, const unsigned char *fp2)
{
	struct scope take = {actor, "order.pay", "key-takeover"};
	struct scope lease = {actor, "order.pay", "key-lease"};
	struct result r;
	int64_t g;

	r = claim(st, &take, fp, TEST_LEASE_MS);
	CHECK(r.res == STORE_OK);
	g = r.generation;
	CHECK(finish(st, &take, g, 200, "", "old", 0, 1) == STORE_OK);
	run_for(20);
	r = claim(st, &take, fp2, TEST_LEASE_MS);
	CHECK(r.res == STORE_OK && r.generation > g);
	CHECK(finish(st, &take, g, 200, "", "stale", 0, TEST_RETENTION_MS) == STORE_FENCED);
	g = r.generation;
	r = claim(st, &take, fp, TEST_LEASE_MS);
	CHECK(r.res == STORE_EXISTS && r.rec.state == RECORD_IN_PROGRESS);
	CHECK(r.rec.generation == g && memcmp(r.rec.fingerprint, fp2, FINGERPRINT_LEN) == 0);

	r = claim(st, &lease, fp, 1);
	CHECK(r.res == STORE_OK);
	run_for(20);
	r = claim(st, &lease, fp, TEST_LEASE_MS);
	CHECK(r.res == STORE_EXISTS && r.rec.state == RECORD_IN_PROGRESS);
	CHECK(r.rec.lease_expired && r.rec.lease_remaining_ms == 0);
}

/* A claim with flags (STORE_PEEK, STORE_RECOVER). */
static struct result claim_flags(struct store *st, const struct scope *sc,
				 const unsigned char *fp, int flags)
{
	struct result r = {0};

	in_call = 1;
	store_claim(st, sc, fp, NULL, NULL, TEST_LEASE_MS, flags, claim_cb, &r);
	await_result(&r);
	return r;
}

/*
 * STORE_PEEK (a claim a limit refused) writes nothing: a free slot, an
 * expired completed record and one recovery would take over are vacant
 * and stay as they were; a record that holds the slot is reported as a
 * claim reports it.
 */
static void test_peek(struct store *st, const unsigned char *fp, const unsigned char *fp2)
{
	struct scope free_sc = {actor, "order.peek", "key-free"};
	struct scope held = {actor, "order.peek", "key-held"};
	struct scope old = {actor, "order.peek", "key-old"};
	struct scope unk = {actor, "order.peek", "key-unknown"};
	struct result r;
	int64_t g;

	r = claim_flags(st, &free_sc, fp, STORE_PEEK);
	CHECK(r.res == STORE_VACANT && r.generation == 0);
	r = claim_flags(st, &free_sc, fp, STORE_PEEK | STORE_RECOVER);
	CHECK(r.res == STORE_VACANT);
	r = claim(st, &free_sc, fp, TEST_LEASE_MS); /* the peeks left nothing behind */
	CHECK(r.res == STORE_OK);
	CHECK(release(st, &free_sc, r.generation) == STORE_OK);

	r = claim(st, &held, fp, TEST_LEASE_MS);
	CHECK(r.res == STORE_OK);
	g = r.generation;
	r = claim_flags(st, &held, fp2, STORE_PEEK);
	CHECK(r.res == STORE_EXISTS && r.rec.state == RECORD_IN_PROGRESS && r.rec.generation == g);
	CHECK(finish(st, &held, g, 201, "", "done", 0, TEST_RETENTION_MS) == STORE_OK);
	r = claim_flags(st, &held, fp, STORE_PEEK);
	CHECK(r.res == STORE_EXISTS && r.rec.state == RECORD_COMPLETED && r.rec.body_len == 4 &&
	      memcmp(r.body, "done", 4) == 0);

	r = claim(st, &old, fp, TEST_LEASE_MS);
	CHECK(r.res == STORE_OK);
	g = r.generation;
	CHECK(finish(st, &old, g, 200, "", "old", 0, 1) == STORE_OK);
	run_for(20);
	r = claim_flags(st, &old, fp2, STORE_PEEK);
	CHECK(r.res == STORE_VACANT);
	r = claim(st, &old, fp2, TEST_LEASE_MS); /* still the expired record: taken over now */
	CHECK(r.res == STORE_OK && r.generation > g);

	r = claim(st, &unk, fp, TEST_LEASE_MS);
	CHECK(r.res == STORE_OK);
	g = r.generation;
	CHECK(mark_unknown(st, &unk, g) == STORE_OK);
	r = claim_flags(st, &unk, fp, STORE_PEEK | STORE_RECOVER);
	CHECK(r.res == STORE_VACANT);
	r = claim_flags(st, &unk, fp, STORE_PEEK);
	CHECK(r.res == STORE_EXISTS && r.rec.state == RECORD_UNKNOWN && r.rec.generation == g);
}

static enum store_result finish_keeping(struct store *st, const struct scope *sc, int64_t gen,
					int64_t retention_ms, int64_t tombstone_ms)
{
	struct result r = {0};

	in_call = 1;
	store_finish(st, sc, gen, 201, "ETag: \"t\"\r\n", 11, (const unsigned char *)"kept", 4, 0,
		     NULL, retention_ms, tombstone_ms, 0, done_cb, &r);
	await_result(&r);
	return r.res;
}

/* A text query's row count and first value. */
static void rows_cb(void *arg, enum store_result res, const PGresult *result)
{
	struct result *r = arg;

	r->called++;
	r->res = res;
	if (res != STORE_OK)
		return;
	r->rows = PQntuples(result);
	for (int i = 0; i < r->rows; i++)
		if (strcmp(PQgetvalue(result, i, 0), actor) == 0)
			snprintf(r->first, sizeof(r->first), "%s %s", PQgetvalue(result, i, 1),
				 PQgetisnull(result, i, 2) ? "null" : "ms");
}

/*
 * expired_keys refuse: a record finished with a tombstone window is
 * reported expired (with its completion time) from its expiry until the
 * window's end, then taken over; one without is taken over at its expiry.
 * STORE_PEEK reads and never claims.
 */
static void test_tombstones(struct store *st, const unsigned char *fp, const unsigned char *fp2)
{
	struct scope kept = {actor, "order.pay", "key-tombstone"};
	struct scope brief = {actor, "order.pay", "key-tombstone-brief"};
	struct scope none = {actor, "order.pay", "key-peek-none"};
	struct result r;
	int64_t g;

	r = claim_flags(st, &none, fp, STORE_PEEK);
	CHECK(r.res == STORE_VACANT);
	r = claim_flags(st, &none, fp, STORE_PEEK);
	CHECK(r.res == STORE_VACANT); /* nothing was inserted */

	r = claim(st, &kept, fp, TEST_LEASE_MS);
	CHECK(r.res == STORE_OK);
	g = r.generation;
	r = claim_flags(st, &kept, fp, STORE_PEEK);
	CHECK(r.res == STORE_EXISTS && r.rec.state == RECORD_IN_PROGRESS);
	CHECK(finish_keeping(st, &kept, g, 1, TEST_RETENTION_MS) == STORE_OK);
	run_for(20);
	r = claim(st, &kept, fp, TEST_LEASE_MS);
	CHECK(r.res == STORE_EXISTS && r.rec.state == RECORD_EXPIRED);
	CHECK(strlen(r.completed_at) == 24 && r.completed_at[10] == 'T' && r.completed_at[23] == 'Z');
	r = claim(st, &kept, fp2, TEST_LEASE_MS); /* another request: refused alike */
	CHECK(r.res == STORE_EXISTS && r.rec.state == RECORD_EXPIRED);
	r = claim_flags(st, &kept, fp, STORE_PEEK);
	CHECK(r.res == STORE_EXISTS && r.rec.state == RECORD_EXPIRED);

	r = claim(st, &brief, fp, TEST_LEASE_MS);
	CHECK(r.res == STORE_OK);
	g = r.generation;
	CHECK(finish_keeping(st, &brief, g, 1, 1) == STORE_OK);
	r = claim_flags(st, &brief, fp, STORE_PEEK);
	CHECK(r.res == STORE_EXISTS && r.rec.state == RECORD_COMPLETED);
	run_for(20);
	r = claim_flags(st, &brief, fp, STORE_PEEK); /* could be taken over: a peek does not */
	CHECK(r.res == STORE_VACANT);
	r = claim(st, &brief, fp, TEST_LEASE_MS);
	CHECK(r.res == STORE_OK && r.generation > g);
}

/* The quota's statement names an actor at or above a quota, and no other. */
static void test_quota_sql(struct store *st)
{
	static const Oid types[] = {STORE_OID_INT8, STORE_OID_INT8, STORE_OID_INT8};
	const char *over[] = {"2", "0", "100000"}, *under[] = {"1000000", "0", "100000"},
		   *bytes[] = {"0", "1", "100000"};
	const char *const *sets[] = {over, under, bytes};
	const char *want[] = {"t ms", "", "f ms"};

	for (int i = 0; i < 3; i++) {
		struct store_stmt stmt = {quota_sql, 3, types, sets[i], NULL, NULL};
		struct result r = {0};

		store_query(st, &stmt, rows_cb, &r);
		run_until(&r.called, TEST_WAIT_MS);
		CHECK(r.called == 1 && r.res == STORE_OK);
		CHECK_STR(r.first, want[i]);
	}
}

/* A record names the request that claimed it, in every state; a takeover the taker. */
static void test_claimant_ids(struct store *st, const unsigned char *fp)
{
	struct scope sc = {actor, "order.pay", "key-claimant"};
	struct result r;
	int64_t g;

	r = claim_as(st, &sc, fp, "owner-1", "4bf92f3577b34da6a3ce929d0e0e4736", TEST_LEASE_MS);
	CHECK(r.res == STORE_OK);
	g = r.generation;
	r = claim_as(st, &sc, fp, "retry-1", NULL, TEST_LEASE_MS);
	CHECK(r.res == STORE_EXISTS && r.rec.state == RECORD_IN_PROGRESS);
	CHECK_STR(r.request_id, "owner-1");
	CHECK_STR(r.trace_id, "4bf92f3577b34da6a3ce929d0e0e4736");
	CHECK(finish(st, &sc, g, 201, "", "done", 0, 1) == STORE_OK);
	run_for(20);
	/* Expired: taken over by a request without a trace. */
	r = claim_as(st, &sc, fp, "taker-2", NULL, TEST_LEASE_MS);
	CHECK(r.res == STORE_OK && r.generation > g);
	g = r.generation;
	CHECK(finish(st, &sc, g, 201, "", "again", 0, TEST_RETENTION_MS) == STORE_OK);
	r = claim(st, &sc, fp, TEST_LEASE_MS);
	CHECK(r.res == STORE_EXISTS && r.rec.state == RECORD_COMPLETED);
	CHECK_STR(r.request_id, "taker-2");
	CHECK_STR(r.trace_id, "-");
}

/* Many operations queued at once all answer, in order. */
static void test_queue(struct store *st, const unsigned char *fp)
{
	struct result r[TEST_QUEUED_CLAIMS] = {0};
	struct scope sc[TEST_QUEUED_CLAIMS];
	char keys[TEST_QUEUED_CLAIMS][16];
	int ok = 0;

	in_call = 1;
	for (int i = 0; i < TEST_QUEUED_CLAIMS; i++) {
		snprintf(keys[i], sizeof(keys[i]), "q-%d", i % (TEST_QUEUED_CLAIMS / 2));
		sc[i] = (struct scope){actor, "order.pay", keys[i]};
		store_claim(st, &sc[i], fp, NULL, NULL, TEST_LEASE_MS, 0, claim_cb, &r[i]);
	}
	in_call = 0;
	CHECK(store_pending(st) == TEST_QUEUED_CLAIMS);
	run_until(&r[TEST_QUEUED_CLAIMS - 1].called, TEST_WAIT_MS);
	for (int i = 0; i < TEST_QUEUED_CLAIMS; i++) {
		CHECK(r[i].called == 1 && !r[i].sync);
		ok += r[i].res == STORE_OK;
		CHECK(r[i].res == (i < TEST_QUEUED_CLAIMS / 2 ? STORE_OK : STORE_EXISTS));
	}
	CHECK(ok == TEST_QUEUED_CLAIMS / 2);
	CHECK(store_pending(st) == 0);
}

/* Queue a claim on a scope of its own: it goes out alone, so the operations
 * queued right after it wait and form one batch. */
static void queue_leader(struct store *st, struct scope *sc, char *key, size_t size,
			 const unsigned char *fp, struct result *r)
{
	static int n;

	snprintf(key, size, "leader-%d", n++);
	*sc = (struct scope){actor, "order.batch", key};
	store_claim(st, sc, fp, NULL, NULL, TEST_LEASE_MS, 0, claim_cb, r);
}

/*
 * Claims and finishes queued at once on distinct scopes share statements:
 * every one gets its own answer, in far fewer statements than operations.
 */
static void test_coalesce(struct store *st, const unsigned char *fp)
{
	static struct result r[TEST_BATCH_OPS], f[TEST_BATCH_OPS];
	static char keys[TEST_BATCH_OPS][32];
	static struct scope sc[TEST_BATCH_OPS];
	int64_t batches = store_batches(st), ops = store_batched_ops(st);
	int owners = 0, written = 0;

	memset(r, 0, sizeof(r));
	memset(f, 0, sizeof(f));
	in_call = 1;
	for (int i = 0; i < TEST_BATCH_OPS; i++) {
		snprintf(keys[i], sizeof(keys[i]), "coalesce-%d", i);
		sc[i] = (struct scope){actor, "order.batch", keys[i]};
		store_claim(st, &sc[i], fp, NULL, NULL, TEST_LEASE_MS, 0, claim_cb, &r[i]);
	}
	in_call = 0;
	run_until(&r[TEST_BATCH_OPS - 1].called, TEST_WAIT_MS);
	for (int i = 0; i < TEST_BATCH_OPS; i++)
		owners +=
		    r[i].called == 1 && !r[i].sync && r[i].res == STORE_OK && r[i].generation > 0;
	CHECK(owners == TEST_BATCH_OPS);
	CHECK(store_batched_ops(st) - ops == TEST_BATCH_OPS);
	CHECK(store_batches(st) - batches <= TEST_BATCH_STATEMENTS);

	batches = store_batches(st);
	in_call = 1;
	for (int i = 0; i < TEST_BATCH_OPS; i++)
		store_finish(st, &sc[i], r[i].generation, 201, "", 0, (const unsigned char *)"ok", 2,
			     0, NULL, TEST_RETENTION_MS, 0, 0, done_cb, &f[i]);
	in_call = 0;
	run_until(&f[TEST_BATCH_OPS - 1].called, TEST_WAIT_MS);
	for (int i = 0; i < TEST_BATCH_OPS; i++)
		written += f[i].called == 1 && !f[i].sync && f[i].res == STORE_OK;
	CHECK(written == TEST_BATCH_OPS);
	CHECK(store_batches(st) - batches <= TEST_BATCH_STATEMENTS);

	/* A batch of fences: the stale generation is fenced, the rest released. */
	batches = store_batches(st);
	in_call = 1;
	for (int i = 0; i < TEST_BATCH_OPS; i++) {
		memset(&f[i], 0, sizeof(f[i]));
		store_release(st, &sc[i], i == 1 ? 2 : 1, 0, done_cb, &f[i]);
	}
	in_call = 0;
	run_until(&f[TEST_BATCH_OPS - 1].called, TEST_WAIT_MS);
	written = 0;
	for (int i = 0; i < TEST_BATCH_OPS; i++)
		written += f[i].called == 1 && f[i].res == STORE_FENCED;
	/* Completed records are not in_progress: every release is fenced. */
	CHECK(written == TEST_BATCH_OPS);
	CHECK(store_batches(st) - batches <= TEST_BATCH_STATEMENTS);
	CHECK(store_pending(st) == 0);
}

/*
 * Two claims of one scope queued together never share a statement: exactly
 * one owns it, the other sees its record; the claim between them still
 * rides along with the first. The second one's insert finds the slot taken
 * and a lookup reads the record: three statements in all.
 */
static void test_same_scope(struct store *st, const unsigned char *fp, const unsigned char *fp2)
{
	struct scope lead, sc = {actor, "order.batch", "same-scope"};
	struct scope mid = {actor, "order.batch", "same-scope-mid"};
	struct result l = {0}, a = {0}, m = {0}, b = {0};
	char key[32];
	int64_t batches;

	queue_leader(st, &lead, key, sizeof(key), fp, &l);
	batches = store_batches(st);
	store_claim(st, &sc, fp, NULL, NULL, TEST_LEASE_MS, 0, claim_cb, &a);
	store_claim(st, &mid, fp, NULL, NULL, TEST_LEASE_MS, 0, claim_cb, &m);
	store_claim(st, &sc, fp2, NULL, NULL, TEST_LEASE_MS, 0, claim_cb, &b);
	run_until(&b.called, TEST_WAIT_MS);
	CHECK(l.res == STORE_OK && a.called == 1 && m.called == 1 && b.called == 1);
	CHECK(a.res == STORE_OK && m.res == STORE_OK);
	CHECK(b.res == STORE_EXISTS && b.rec.state == RECORD_IN_PROGRESS);
	CHECK(b.rec.generation == a.generation && memcmp(b.rec.fingerprint, fp, FINGERPRINT_LEN) == 0);
	CHECK(store_batches(st) - batches == 3);
}

/*
 * A statement that fails for one operation's sake (a key that is not
 * UTF-8, which the server rejects) does not fail the others of its batch:
 * they run again one by one and only the guilty one is unavailable.
 */
static void test_batch_error(struct store *st, const unsigned char *fp)
{
	struct result l = {0}, r[TEST_BAD_BATCH] = {0}, f[TEST_BAD_BATCH] = {0};
	struct scope lead, sc[TEST_BAD_BATCH];
	char key[32], keys[TEST_BAD_BATCH][32];
	int bad = TEST_BAD_BATCH / 2, ok = 0;

	queue_leader(st, &lead, key, sizeof(key), fp, &l);
	for (int i = 0; i < TEST_BAD_BATCH; i++) {
		snprintf(keys[i], sizeof(keys[i]), i == bad ? "bad-\xff\xfe-%d" : "good-%d", i);
		sc[i] = (struct scope){actor, "order.batch", keys[i]};
		store_claim(st, &sc[i], fp, NULL, NULL, TEST_LEASE_MS, 0, claim_cb, &r[i]);
	}
	run_until(&r[TEST_BAD_BATCH - 1].called, TEST_WAIT_MS);
	for (int i = 0; i < TEST_BAD_BATCH; i++)
		ok += r[i].called == 1 && r[i].res == (i == bad ? STORE_UNAVAILABLE : STORE_OK);
	CHECK(ok == TEST_BAD_BATCH);
	CHECK(store_ready(st));

	/* The same for finishes: the bad scope's finish alone fails. */
	queue_leader(st, &lead, key, sizeof(key), fp, &l);
	for (int i = 0; i < TEST_BAD_BATCH; i++)
		store_finish(st, &sc[i], r[i].generation, 200, "", 0, NULL, 0, 0, NULL, TEST_RETENTION_MS, 0,
			     0, done_cb, &f[i]);
	run_until(&f[TEST_BAD_BATCH - 1].called, TEST_WAIT_MS);
	ok = 0;
	for (int i = 0; i < TEST_BAD_BATCH; i++)
		ok += f[i].called == 1 && f[i].res == (i == bad ? STORE_UNAVAILABLE : STORE_OK);
	CHECK(ok == TEST_BAD_BATCH);
	CHECK(store_ready(st) && store_pending(st) == 0);
}

/*
 * Header values may hold obs-text bytes that are not UTF-8: they are
 * stored and read back as bytes. A completed record tells how long it has
 * left before it expires.
 */
static void test_header_bytes(struct store *st, const unsigned char *fp)
{
	struct scope sc = {actor, "order.pay", "key-obs-text"};
	const char *headers = "X-Name: caf\xe9 \x80\xff\r\nContent-Type: text/plain\r\n";
	struct result r;

	r = claim(st, &sc, fp, TEST_LEASE_MS);
	CHECK(r.res == STORE_OK);
	CHECK(finish(st, &sc, r.generation, 200, headers, "body", 0, TEST_RETENTION_MS) == STORE_OK);
	r = claim(st, &sc, fp, TEST_LEASE_MS);
	CHECK(r.res == STORE_EXISTS && r.rec.state == RECORD_COMPLETED);
	CHECK(r.rec.headers_len == strlen(headers) && strcmp(r.headers, headers) == 0);
	CHECK(r.rec.expires_in_ms > TEST_RETENTION_MS - 10000 &&
	      r.rec.expires_in_ms <= TEST_RETENTION_MS);
}

/* A connection that cannot be made: answers later, never inside the call. */
static void test_unavailable(const unsigned char *fp)
{
	struct store *st = store_new(base, NULL, 0, "host=127.0.0.1 port=1", 500, "test", -1);
	struct scope sc = {actor, "order.pay", "key-down"};
	struct result r;

	CHECK(st != NULL);
	CHECK(!store_ready(st));
	r = claim(st, &sc, fp, TEST_LEASE_MS);
	CHECK(r.res == STORE_UNAVAILABLE && r.generation == 0);
	run_for(100);
	CHECK(!store_ready(st));
	CHECK(finish(st, &sc, 1, 200, "", "", 0, TEST_RETENTION_MS) == STORE_UNAVAILABLE);
	CHECK(release(st, &sc, 1) == STORE_UNAVAILABLE);
	CHECK(store_pending(st) == 0);
	store_free(st);
}

/*
 * 1 when sessions opened with PGOPTIONS opts really get them (a pooler
 * such as pgbouncer may drop startup options).
 */
static int options_reach_server(const char *dsn, const char *opts)
{
	PGconn *conn;
	PGresult *res;
	int on;

	setenv("PGOPTIONS", opts, 1);
	conn = PQconnectdb(dsn);
	unsetenv("PGOPTIONS");
	res = PQexec(conn, "SHOW default_transaction_read_only");
	on = PQresultStatus(res) == PGRES_TUPLES_OK && strcmp(PQgetvalue(res, 0, 0), "on") == 0;
	PQclear(res);
	PQfinish(conn);
	return on;
}

/* A read-only server (a standby after failover) is unavailable. */
static void test_read_only(const char *dsn, const unsigned char *fp)
{
	const char *opts = "-c default_transaction_read_only=on";
	struct scope sc = {actor, "order.pay", "key-ro"};
	struct store *st;
	struct result r;

	if (!options_reach_server(dsn, opts)) {
		fprintf(stderr,
			"store: read-only test skipped, PGOPTIONS do not reach the server\n");
		return;
	}
	setenv("PGOPTIONS", opts, 1);
	st = store_new(base, NULL, 0, dsn, TEST_TIMEOUT_MS, "test", -1);
	unsetenv("PGOPTIONS");
	CHECK(wait_ready(st));
	r = claim(st, &sc, fp, TEST_LEASE_MS);
	CHECK(r.res == STORE_UNAVAILABLE);
	CHECK(!store_ready(st));
	store_free(st);
}

/*
 * A statement blocked on a row lock passes its deadline: it fails, the
 * server cancelled it too (statement_timeout: no backend of ours is left
 * waiting on the lock), and the store works again.
 */
static void test_timeout(const char *dsn, const unsigned char *fp)
{
	struct scope sc = {actor, "order.pay", "key-locked"};
	struct scope next = {actor, "order.pay", "key-after-lock"};
	struct store *st = store_new(base, NULL, 0, dsn, 300, "test", -1);
	struct result a = {0}, r;
	PGconn *locker = PQconnectdb(dsn);
	const char *values[3] = {actor, sc.operation, sc.key};
	PGresult *res;

	CHECK(wait_ready(st));
	r = claim(st, &sc, fp, TEST_LEASE_MS);
	CHECK(r.res == STORE_OK);
	PQclear(PQexec(locker, "BEGIN"));
	res = PQexecParams(locker,
			   "SELECT 1 FROM idempotency_records WHERE actor = $1 AND operation = $2"
			   " AND idem_key = $3 FOR UPDATE",
			   3, NULL, values, NULL, NULL, 0);
	CHECK(PQntuples(res) == 1);
	PQclear(res);

	store_release(st, &sc, r.generation, 0, done_cb, &a);
	run_until(&a.called, TEST_WAIT_MS);
	CHECK(a.called == 1 && a.res == STORE_UNAVAILABLE);
	run_for(TEST_TICK_MS);
	res = PQexec(locker, "SELECT count(*) FROM pg_stat_activity WHERE application_name ="
			     " 'idemproxy' AND wait_event_type = 'Lock'");
	CHECK(PQntuples(res) == 1 && strcmp(PQgetvalue(res, 0, 0), "0") == 0);
	PQclear(res);
	PQclear(PQexec(locker, "ROLLBACK"));
	PQfinish(locker);

	CHECK(wait_ready(st));
	r = claim(st, &next, fp, TEST_LEASE_MS);
	CHECK(r.res == STORE_OK);
	store_free(st);
}

/*
 * The server ends our session. Connected directly, the store notices, drops
 * the connection and reconnects; behind a pooler the client session may
 * survive. Either way the next claim must succeed, which a dead connection
 * left in place would not allow.
 */
static void test_lost(const char *dsn, const unsigned char *fp)
{
	struct scope sc = {actor, "order.pay", "key-lost"};
	const char *values[1] = {actor};
	PGconn *admin = PQconnectdb(dsn);
	struct store *st;
	PGresult *res;
	struct result r;
	int killed;

	setenv("PGAPPNAME", actor, 1);
	st = store_new(base, NULL, 0, dsn, TEST_TIMEOUT_MS, "test", -1);
	unsetenv("PGAPPNAME");
	CHECK(wait_ready(st));
	res = PQexecParams(admin,
			   "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
			   " WHERE application_name = $1",
			   1, NULL, values, NULL, NULL, 0);
	killed = PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) >= 1;
	PQclear(res);
	PQfinish(admin);
	if (!killed) {
		/* A pooler may not pass our application_name to its backends. */
		fprintf(stderr, "store: lost-connection test skipped, no backend found\n");
		store_free(st);
		return;
	}
	for (int i = 0; i < TEST_WAIT_MS / TEST_TICK_MS && store_ready(st); i++)
		run_for(TEST_TICK_MS);
	CHECK(wait_ready(st));
	r = claim(st, &sc, fp, TEST_LEASE_MS);
	CHECK(r.res == STORE_OK);
	store_free(st);
}

/*
 * The server ends our session while a batch waits on a row lock: every
 * operation of the batch, and the one queued behind it, is unavailable;
 * the store reconnects and works again.
 */
static void test_lost_mid_batch(const char *dsn, const unsigned char *fp)
{
	struct scope sc[TEST_BAD_BATCH], lead, after = {actor, "order.batch", "lost-after"};
	struct result r[TEST_BAD_BATCH] = {0}, l = {0}, a = {0}, c;
	char key[32], keys[TEST_BAD_BATCH][32], app[96];
	const char *values[3] = {app};
	PGconn *locker = PQconnectdb(dsn), *admin = PQconnectdb(dsn);
	struct store *st;
	PGresult *res;
	int64_t batches, gens[TEST_BAD_BATCH];
	int killed = 0, unavailable = 0;

	snprintf(app, sizeof(app), "%s-lost", actor);
	setenv("PGAPPNAME", app, 1);
	st = store_new(base, NULL, 0, dsn, TEST_WAIT_MS, "test", -1);
	unsetenv("PGAPPNAME");
	CHECK(wait_ready(st));
	for (int i = 0; i < TEST_BAD_BATCH; i++) {
		snprintf(keys[i], sizeof(keys[i]), "lost-%d", i);
		sc[i] = (struct scope){actor, "order.batch", keys[i]};
		c = claim(st, &sc[i], fp, TEST_LEASE_MS);
		CHECK(c.res == STORE_OK);
		gens[i] = c.generation;
	}
	values[0] = actor;
	values[1] = sc[0].operation;
	values[2] = sc[0].key;
	PQclear(PQexec(locker, "BEGIN"));
	res = PQexecParams(locker,
			   "SELECT 1 FROM idempotency_records WHERE actor = $1 AND operation = $2"
			   " AND idem_key = $3 FOR UPDATE",
			   3, NULL, values, NULL, NULL, 0);
	CHECK(PQntuples(res) == 1);
	PQclear(res);

	batches = store_batches(st);
	queue_leader(st, &lead, key, sizeof(key), fp, &l);
	for (int i = TEST_BAD_BATCH - 1; i >= 0; i--)
		store_finish(st, &sc[i], gens[i], 200, "", 0, NULL, 0, 0, NULL, TEST_RETENTION_MS, 0, 0,
			     done_cb, &r[i]);
	run_until(&l.called, TEST_WAIT_MS);
	run_for(TEST_TICK_MS);
	store_claim(st, &after, fp, NULL, NULL, TEST_LEASE_MS, 0, claim_cb, &a);
	values[0] = app;
	for (int i = 0; i < TEST_WAIT_MS / TEST_TICK_MS && !killed; i++) {
		res = PQexecParams(admin,
				   "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
				   " WHERE application_name = $1 AND wait_event_type = 'Lock'",
				   1, NULL, values, NULL, NULL, 0);
		killed = PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1;
		PQclear(res);
		if (!killed)
			run_for(TEST_TICK_MS);
	}
	CHECK(killed);
	CHECK(store_batches(st) - batches == 2);
	run_until(&a.called, TEST_WAIT_MS);
	for (int i = 0; i < TEST_BAD_BATCH; i++)
		unavailable += r[i].called == 1 && r[i].res == STORE_UNAVAILABLE;
	CHECK(unavailable == TEST_BAD_BATCH);
	CHECK(a.called == 1 && a.res == STORE_UNAVAILABLE);
	PQclear(PQexec(locker, "ROLLBACK"));
	PQfinish(locker);
	PQfinish(admin);

	CHECK(wait_ready(st));
	CHECK(finish(st, &sc[0], gens[0], 200, "", "", 0, TEST_RETENTION_MS) == STORE_OK);
	c = claim(st, &after, fp, TEST_LEASE_MS);
	CHECK(c.res == STORE_OK);
	store_free(st);
}

/* Append " name='value'" to buf, quoted as conninfo wants. */
static void conninfo_add(char *buf, size_t size, const char *name, const char *value)
{
	size_t len = strlen(buf);

	len += (size_t)snprintf(buf + len, size - len, " %s='", name);
	for (; *value && len + 3 < size; value++) {
		if (*value == '\\' || *value == '\'')
			buf[len++] = '\\';
		buf[len++] = *value;
	}
	snprintf(buf + len, size - len, "'");
}

/* Multi-host conninfo whose first host refuses: libpq moves to the second
 * on a new socket, and the store follows it. */
static void test_multi_host(const char *dsn, const unsigned char *fp)
{
	struct scope sc = {actor, "order.pay", "key-multi"};
	PGconn *conn = PQconnectdb(dsn);
	char info[1024] = "", hosts[512], ports[64];
	struct store *st;
	struct result r;

	snprintf(hosts, sizeof(hosts), "127.0.0.1,%s", PQhost(conn));
	snprintf(ports, sizeof(ports), "1,%s", PQport(conn));
	conninfo_add(info, sizeof(info), "host", hosts);
	conninfo_add(info, sizeof(info), "port", ports);
	conninfo_add(info, sizeof(info), "dbname", PQdb(conn));
	conninfo_add(info, sizeof(info), "user", PQuser(conn));
	if (PQpass(conn) && PQpass(conn)[0])
		conninfo_add(info, sizeof(info), "password", PQpass(conn));
	PQfinish(conn);
	st = store_new(base, NULL, 0, info, TEST_TIMEOUT_MS, "test", -1);
	CHECK(wait_ready(st));
	r = claim(st, &sc, fp, TEST_LEASE_MS);
	CHECK(r.res == STORE_OK);
	store_free(st);
}

static void free_in_callback(void *arg, enum store_result res, int64_t generation,
			     const struct record *rec)
{
	struct store **st = arg;

	store_free(*st);
	*st = NULL;
}

/* store_free from inside a callback drops the rest without running them.
 * The store never connects: the claims wait for a first connection until
 * their store_timeout (100 ms), then fail. */
static void test_free_in_callback(const char *dsn, const unsigned char *fp)
{
	struct scope sc = {actor, "order.pay", "key-free"};
	struct store *st = store_new(base, NULL, 0, "host=127.0.0.1 port=1", 100, "test", -1);
	struct result r = {0};

	store_claim(st, &sc, fp, NULL, NULL, TEST_LEASE_MS, 0, free_in_callback, &st);
	store_claim(st, &sc, fp, NULL, NULL, TEST_LEASE_MS, 0, claim_cb, &r);
	run_for(500);
	CHECK(st == NULL);
	CHECK(r.called == 0);
}

/* Claim scope sc from every store at once; count owners and other answers. */
static void race_round(struct store **st, const struct scope *sc, const unsigned char *fp,
		       int *owners, int *unavailable, int64_t *generation)
{
	struct result r[TEST_RACERS] = {0};

	for (int i = 0; i < TEST_RACERS; i++)
		store_claim(st[i], sc, fp, NULL, NULL, TEST_LEASE_MS, 0, claim_cb, &r[i]);
	for (int i = 0; i < TEST_RACERS; i++)
		run_until(&r[i].called, TEST_WAIT_MS);
	*owners = *unavailable = 0;
	for (int i = 0; i < TEST_RACERS; i++) {
		if (r[i].res == STORE_OK) {
			(*owners)++;
			*generation = r[i].generation;
		}
		*unavailable += r[i].res == STORE_UNAVAILABLE;
	}
}

/*
 * Stores on separate connections race for new scopes and for expired
 * completed records: PostgreSQL picks exactly one owner each time, and the
 * losers see the winner's record (a claim that finds no row looks again).
 */
/* What a listening store heard: the tokens and the reconnect marks. */
struct heard {
	int tokens, reconnects;
	char last[SCOPE_TOKEN_SIZE];
};

static void heard_cb(void *arg, const char *token)
{
	struct heard *h = arg;

	if (!token) {
		h->reconnects++;
		return;
	}
	h->tokens++;
	snprintf(h->last, sizeof(h->last), "%s", token);
}

/*
 * A store that LISTENs hears another store's notifying writes, named by
 * the token scope_token gives the scope; writes without
 * STORE_NOTIFY and claims stay silent. A query runs alone with text
 * results.
 */
static void test_notify(const char *dsn, struct store *st, const unsigned char *fp)
{
	struct scope sc = {actor, "order.wait", "key-notify"};
	struct scope quiet = {actor, "order.wait", "key-quiet"};
	struct store *ear = store_new(base, NULL, 0, dsn, TEST_TIMEOUT_MS, "ear", -1);
	struct heard h = {0};
	struct result q = {0}, n = {0}, c;
	char token[SCOPE_TOKEN_SIZE];
	struct store_stmt one = {"SELECT 41 + 1", 0, NULL, NULL, NULL, NULL};

	store_listen(ear, heard_cb, &h);
	CHECK(wait_ready(ear));
	run_until(&h.reconnects, TEST_WAIT_MS);
	CHECK(h.reconnects == 1);
	/* The LISTEN was queued before the reconnect mark: a query answered
	 * after it proves the server runs it before the notifying write. */
	store_query(ear, &one, query_cb, &n);
	run_until(&n.called, TEST_WAIT_MS);
	CHECK(n.called == 1 && n.res == STORE_OK);
	n = (struct result){0};

	c = claim(st, &quiet, fp, TEST_LEASE_MS);
	CHECK(c.res == STORE_OK);
	CHECK(finish(st, &quiet, c.generation, 200, "", "", 0, TEST_RETENTION_MS) == STORE_OK);
	c = claim(st, &sc, fp, TEST_LEASE_MS);
	CHECK(c.res == STORE_OK);
	store_finish(st, &sc, c.generation, 201, "", 0, NULL, 0, 0, NULL, TEST_RETENTION_MS, 0, STORE_NOTIFY,
		     done_cb, &q);
	/* The notification can reach ear before st's own answer reaches it. */
	run_until(&h.tokens, TEST_WAIT_MS);
	run_until(&q.called, TEST_WAIT_MS);
	CHECK(q.called == 1 && q.res == STORE_OK);
	scope_token(&sc, token);
	CHECK(strlen(token) == SCOPE_TOKEN_SIZE - 1);
	CHECK(h.tokens == 1);
	CHECK_STR(h.last, token);

	store_query(ear, &one, query_cb, &n);
	run_until(&n.called, TEST_WAIT_MS);
	CHECK(n.called == 1 && n.res == STORE_OK && n.generation == 42);
	store_free(ear);
}

static void test_race(const char *dsn, const unsigned char *fp)
{
	struct store *st[TEST_RACERS];
	int owners, unavailable, bad = 0;
	int64_t gen = 0, first;
	char key[32];

	for (int i = 0; i < TEST_RACERS; i++) {
		st[i] = store_new(base, NULL, 0, dsn, TEST_TIMEOUT_MS, "racer", -1);
		CHECK(wait_ready(st[i]));
	}
	for (int round = 0; round < TEST_RACE_ROUNDS; round++) {
		struct scope sc = {actor, "order.race", key};

		snprintf(key, sizeof(key), "race-%d", round);
		race_round(st, &sc, fp, &owners, &unavailable, &gen);
		bad += owners != 1 || unavailable != 0 || gen <= 0;
		first = gen;
		CHECK(finish(st[0], &sc, first, 200, "", "", 0, 1) == STORE_OK);
		run_for(5);
		race_round(st, &sc, fp, &owners, &unavailable, &gen);
		bad += owners != 1 || unavailable != 0 || gen <= first;
	}
	CHECK(bad == 0);
	for (int i = 0; i < TEST_RACERS; i++)
		store_free(st[i]);
}

/* The benchmark: up to TEST_BENCH_SLOTS scopes in flight, each claimed then finished. */
struct bench_slot {
	struct store *st;
	struct scope sc;
	char key[64];
	int64_t generation;
	int seq;
	int busy;
};

static int bench_stop;
static long bench_pairs, bench_errors;
static const unsigned char *bench_fp;

static void bench_next(struct bench_slot *s);

static void bench_finish_cb(void *arg, enum store_result res)
{
	struct bench_slot *s = arg;

	if (res == STORE_OK)
		bench_pairs++;
	else
		bench_errors++;
	bench_next(s);
}

static void bench_claim_cb(void *arg, enum store_result res, int64_t generation,
			   const struct record *rec)
{
	struct bench_slot *s = arg;

	if (res != STORE_OK) {
		bench_errors++;
		bench_next(s);
		return;
	}
	store_finish(s->st, &s->sc, generation, 201, "Content-Type: application/json\r\n",
		     strlen("Content-Type: application/json\r\n"),
		     (const unsigned char *)"{\"id\":1}", strlen("{\"id\":1}"), 0,
		     NULL, TEST_RETENTION_MS, 0, 0, bench_finish_cb, s);
}

/* Claim the slot's next fresh scope, or go idle once the run is over. */
static void bench_next(struct bench_slot *s)
{
	if (bench_stop) {
		s->busy = 0;
		return;
	}
	snprintf(s->key, sizeof(s->key), "bench-%p-%d", (void *)s, s->seq++);
	s->sc = (struct scope){actor, "order.bench", s->key};
	store_claim(s->st, &s->sc, bench_fp, NULL, NULL, TEST_LEASE_MS, 0, bench_claim_cb, s);
}

/*
 * IDEMPROXY_STORE_BENCH=1: claim+finish pairs per second through one store,
 * with IDEMPROXY_STORE_BENCH_CONC (1 .. TEST_BENCH_SLOTS, default
 * TEST_BENCH_SLOTS) scopes in flight.
 */
static void bench(const char *dsn, const unsigned char *fp)
{
	static struct bench_slot slots[TEST_BENCH_SLOTS];
	const char *conc_env = getenv("IDEMPROXY_STORE_BENCH_CONC");
	int conc = conc_env ? atoi(conc_env) : TEST_BENCH_SLOTS;
	struct store *st = store_new(base, NULL, 0, dsn, TEST_TIMEOUT_MS, "bench", -1);
	struct timespec start, now;
	int64_t batches, ops;
	double secs;
	int busy;

	if (conc < 1 || conc > TEST_BENCH_SLOTS) {
		fprintf(stderr, "IDEMPROXY_STORE_BENCH_CONC must be 1 .. %d\n", TEST_BENCH_SLOTS);
		conc = TEST_BENCH_SLOTS;
	}
	CHECK(wait_ready(st));
	bench_fp = fp;
	clock_gettime(CLOCK_MONOTONIC, &start);
	for (int i = 0; i < conc; i++) {
		slots[i].st = st;
		slots[i].busy = 1;
		bench_next(&slots[i]);
	}
	do {
		event_base_loop(base, EVLOOP_ONCE);
		clock_gettime(CLOCK_MONOTONIC, &now);
		secs = (double)(now.tv_sec - start.tv_sec) + (now.tv_nsec - start.tv_nsec) / 1e9;
		bench_stop = secs * 1000 >= TEST_BENCH_MS;
		busy = 0;
		for (int i = 0; i < conc; i++)
			busy += slots[i].busy;
	} while (busy);
	batches = store_batches(st);
	ops = store_batched_ops(st);
	printf("store bench: %d scopes, %.1f s: %.0f claim+finish pairs/s (%.0f ops/s),"
	       " %.2f ops per statement, %ld errors\n",
	       conc, secs, bench_pairs / secs, 2 * bench_pairs / secs,
	       batches ? (double)ops / (double)batches : 0.0, bench_errors);
	CHECK(bench_pairs > 0 && bench_errors == 0);
	store_free(st);
}

/* The kinds of operation that are a row of one of the store's statements. */
static const enum store_op_kind row_kinds[] = {
    STORE_OP_CLAIM,   STORE_OP_LOOKUP, STORE_OP_FINISH,	  STORE_OP_UNKNOWN,
    STORE_OP_RELEASE, STORE_OP_FORGET, STORE_OP_TAKEOVER,
};
#define ROW_KINDS (int)(sizeof(row_kinds) / sizeof(row_kinds[0]))

/*
 * 1 when sql numbers its parameters $1 .. $n, each once, in rows rows
 * (after "VALUES (" or "), ("); rows that start with an ordinal (all but
 * a claim's insert, which names its rows by their scope) number 0 ..
 * rows - 1 in order.
 */
static int numbered(const char *sql, int n, int rows)
{
	static unsigned char seen[STORE_PARAMS_MAX + 1];
	const char *p = sql;
	int row = 0, count = 0, ordinals = -1;
	long v;

	memset(seen, 0, sizeof(seen));
	while ((p = strchr(p, '$'))) {
		v = strtol(p + 1, (char **)&p, 10);
		if (v < 1 || v > n || seen[v]++)
			return 0;
		count++;
	}
	for (p = sql; (p = strstr(p, row ? "), (" : "VALUES (")); row++) {
		p += row ? 4 : 8;
		if (ordinals < 0)
			ordinals = *p != '$';
		if (ordinals ? strtol(p, NULL, 10) != row || *p == '$' : *p != '$')
			return 0;
	}
	return count == n && row == rows;
}

/* sql without the key list Citus's form adds (" AND r.idem_key IN (...)"), in place. */
static char *without_keys(char *sql)
{
	char *at = strstr(sql, " AND r.idem_key IN ("), *end = at ? strchr(at, ')') : NULL;

	if (end)
		memmove(at, end + 1, strlen(end + 1) + 1);
	return sql;
}

/*
 * The statement table holds together: each statement of each kind, for
 * one row and for the most rows a batch carries, fits its buffer and
 * numbers every parameter the row writes exactly once (a '?' too many or
 * too few in a row template shows here); the named statements of every
 * kind, part and row count have ids and names of their own.
 */
static void test_statements(void)
{
	static char sql[STORE_SQL_MAX], names[STORE_NAMED_IDS][STORE_NAME_MAX];
	static unsigned char used[STORE_NAMED_IDS];
	const char *values[STORE_ROW_PARAMS_MAX];
	int lengths[STORE_ROW_PARAMS_MAX], formats[STORE_ROW_PARAMS_MAX];
	Oid types[STORE_ROW_PARAMS_MAX];
	char nums[STORE_OP_NUMS][STORE_NUM_MAX];
	unsigned char fp[RECORD_FINGERPRINT_LEN] = {0};
	struct store_ask ask = {.sc = {"a", "o", "k"}, .token = "owner:0:1", .fp = fp};
	int params, id, unique = 1;

	for (int k = 0; k < ROW_KINDS; k++) {
		params = store_sql_row(row_kinds[k], &ask, nums, values, lengths, types, formats);
		CHECK(params > 0 && params <= STORE_ROW_PARAMS_MAX);
		CHECK(store_sql_has_part(row_kinds[k], STORE_PART_MAIN));
		for (int part = 0; part < STORE_PARTS; part++) {
			if (!store_sql_has_part(row_kinds[k], (enum store_part)part))
				continue;
			for (int citus = 0; citus < 2; citus++) {
				store_sql_write(sql, row_kinds[k], (enum store_part)part, 1, citus);
				CHECK(numbered(without_keys(sql), params, 1));
				store_sql_write(sql, row_kinds[k], (enum store_part)part,
						STORE_BATCH_MAX, citus);
				CHECK(strlen(sql) < STORE_SQL_MAX - 1);
				CHECK(numbered(without_keys(sql), params * STORE_BATCH_MAX,
					       STORE_BATCH_MAX));
				for (int rows = 1; rows <= STORE_NAMED_ROWS + 1; rows++) {
					id = store_sql_id(row_kinds[k], (enum store_part)part, rows,
							  citus);
					if (rows > STORE_NAMED_ROWS) {
						CHECK(id == -1);
						continue;
					}
					CHECK(id >= STORE_ID_BATCHES && id < STORE_NAMED_IDS);
					unique &= id >= 0 && id < STORE_NAMED_IDS && !used[id]++;
				}
			}
		}
	}
	CHECK(unique);
	CHECK(!store_sql_has_part(STORE_OP_QUERY, STORE_PART_MAIN));
	CHECK(store_sql_id(STORE_OP_QUERY, STORE_PART_MAIN, 1, 0) == -1);
	for (id = 0; id < STORE_NAMED_IDS; id++) {
		store_sql_name(id, names[id]);
		for (int other = 0; other < id; other++)
			unique &= strcmp(names[id], names[other]) != 0;
	}
	CHECK(unique);
	CHECK_STR(names[STORE_ID_TIMEOUT], "idemproxy_timeout");
	CHECK_STR(names[STORE_ID_TIMEOUT_ROWS], "idemproxy_timeout_rows");
	CHECK_STR(names[store_sql_id(STORE_OP_CLAIM, STORE_PART_MAIN, 1, 0)], "idemproxy_0_1");
	CHECK_STR(names[store_sql_id(STORE_OP_FORGET, STORE_PART_FIRST, 16, 0)],
		  "idemproxy_5_16_first");
	CHECK_STR(names[store_sql_id(STORE_OP_FINISH, STORE_PART_MAIN, 2, 1)],
		  "idemproxy_2_2_citus");
}

/* Citus's form: the joined statements name their rows' keys, the inserts do not. */
static void test_statements_citus(void)
{
	static char plain[STORE_SQL_MAX], sql[STORE_SQL_MAX];

	store_sql_write(sql, STORE_OP_FINISH, STORE_PART_MAIN, 2, 1);
	CHECK(strstr(sql, " AND r.idem_key IN ($3, $14) RETURNING v.ord") != NULL);
	store_sql_write(sql, STORE_OP_LOOKUP, STORE_PART_MAIN, 1, 1);
	CHECK(strstr(sql, "r.idem_key = v.idem_key AND r.idem_key IN ($3)") != NULL);
	CHECK(sql[strlen(sql) - 1] == ')');
	store_sql_write(sql, STORE_OP_RELEASE, STORE_PART_MAIN, 3, 1);
	CHECK(strstr(sql, "IN ($3, $7, $11) RETURNING") != NULL);
	store_sql_write(sql, STORE_OP_FORGET, STORE_PART_SIDE, 1, 1);
	CHECK(strstr(sql, "IN ($3) RETURNING") != NULL);
	for (int part = 0; part < STORE_PARTS; part++) {
		if (!store_sql_has_part(STORE_OP_FORGET, part))
			continue;
		store_sql_write(plain, STORE_OP_FORGET, part, 4, 0);
		store_sql_write(sql, STORE_OP_FORGET, part, 4, 1);
		CHECK((strcmp(plain, sql) == 0) == (part == STORE_PART_FIRST));
		CHECK(strstr(plain, "idem_key IN (") == NULL);
	}
	store_sql_write(plain, STORE_OP_CLAIM, STORE_PART_MAIN, 5, 0);
	store_sql_write(sql, STORE_OP_CLAIM, STORE_PART_MAIN, 5, 1);
	CHECK_STR(sql, plain);
}

/* A binary int4 or int8 column value, as the server sends it. */
static void put_int(PGresult *res, int row, int col, int64_t v, int len)
{
	unsigned char b[8];

	for (int i = 0; i < len; i++)
		b[i] = (unsigned char)(v >> (8 * (len - 1 - i)));
	PQsetvalue(res, row, col, (char *)b, len);
}

/* A result of ncols binary columns with no rows yet. */
static PGresult *binary_result(int ncols)
{
	PGresult *res = PQmakeEmptyPGresult(NULL, PGRES_TUPLES_OK);
	PGresAttDesc attrs[24];
	char names[24][16];

	for (int i = 0; i < ncols; i++) {
		snprintf(names[i], sizeof(names[i]), "c%d", i);
		attrs[i] = (PGresAttDesc){.name = names[i], .format = STORE_FORMAT_BINARY};
	}
	PQsetResultAttrs(res, ncols, attrs);
	return res;
}

/*
 * A lookup result row as the statement selects it (17 columns): ord, take,
 * generation, state, fingerprint, status, headers, body, omitted, lease
 * expired, lease remaining, expires in, sealed, completed ago, request id,
 * trace id, a tombstone's completion (NULL here unless set).
 */
static void lookup_row(PGresult *res, int row, int take, const char *state, int status)
{
	unsigned char fp[RECORD_FINGERPRINT_LEN];
	const char f = 0, t = 1;

	memset(fp, 0xab, sizeof(fp));
	put_int(res, row, 0, row, 4);
	PQsetvalue(res, row, 1, take ? (char *)&t : (char *)&f, 1);
	put_int(res, row, 2, 7, 8);
	PQsetvalue(res, row, 3, (char *)state, (int)strlen(state));
	PQsetvalue(res, row, 4, (char *)fp, sizeof(fp));
	if (status)
		put_int(res, row, 5, status, 4);
	PQsetvalue(res, row, 6, "ETag: \"1\"\r\n", 11);
	PQsetvalue(res, row, 7, "ok", 2);
	PQsetvalue(res, row, 8, (char *)&f, 1);
	PQsetvalue(res, row, 9, (char *)&f, 1);
	put_int(res, row, 10, 0, 8);
	put_int(res, row, 11, 1000, 8);
	put_int(res, row, 13, 5, 8); /* sealed, column 12, stays NULL */
	PQsetvalue(res, row, 14, "req-1", 5); /* the trace id, column 15, stays NULL */
}

/* The decoders read the rows the statements return, and nothing else. */
static void test_decoders(void)
{
	PGresult *res = binary_result(17);
	struct record rec;
	int64_t gen = 0;

	lookup_row(res, 0, 0, "completed", 201);
	lookup_row(res, 1, 1, "completed", 201);
	lookup_row(res, 2, 0, "in_progress", 0);
	lookup_row(res, 3, 0, "done", 201);    /* no such state */
	lookup_row(res, 4, 0, "completed", 0); /* completed without a status */
	lookup_row(res, 5, 0, "expired", 201); /* a tombstone: no response read */
	PQsetvalue(res, 5, 16, "2026-12-04T10:00:00.123Z", 24);
	CHECK(store_sql_lookup_record(res, 0, &rec) == 0);
	CHECK(rec.state == RECORD_COMPLETED && rec.status == 201 && rec.generation == 7);
	CHECK(rec.headers_len == 11 && rec.body_len == 2 && memcmp(rec.body, "ok", 2) == 0);
	CHECK(rec.sealed == NULL && rec.expires_in_ms == 1000 && rec.completed_ms_ago == 5);
	CHECK(rec.request_id && strcmp(rec.request_id, "req-1") == 0 && rec.trace_id == NULL);
	CHECK(store_sql_lookup_record(res, 1, &rec) == 1);
	CHECK(store_sql_lookup_record(res, 2, &rec) == 0 && rec.state == RECORD_IN_PROGRESS);
	CHECK(store_sql_lookup_record(res, 3, &rec) == -1);
	CHECK(store_sql_lookup_record(res, 4, &rec) == -1);
	CHECK(store_sql_lookup_record(res, 5, &rec) == 0 && rec.state == RECORD_EXPIRED);
	CHECK(rec.completed_at && strcmp(rec.completed_at, "2026-12-04T10:00:00.123Z") == 0);
	CHECK(rec.body == NULL && rec.headers_len == 0);
	CHECK(store_sql_ord(res, 2, 3) == 2 && store_sql_ord(res, 3, 3) == -1);
	PQclear(res);

	res = binary_result(2); /* a takeover's: ord, generation */
	put_int(res, 0, 0, 1, 4);
	put_int(res, 0, 1, 42, 8);
	put_int(res, 1, 0, 0, 4);
	put_int(res, 1, 1, 42, 4); /* a generation of the wrong width */
	CHECK(store_sql_takeover_ord(res, 0, 2, &gen) == 1 && gen == 42);
	CHECK(store_sql_takeover_ord(res, 0, 1, &gen) == -1);
	CHECK(store_sql_takeover_ord(res, 1, 2, &gen) == -1);
	CHECK(store_sql_lookup_record(res, 0, &rec) == -1);
	PQclear(res);

	res = binary_result(4); /* an insert's: actor, operation, key, generation */
	PQsetvalue(res, 0, 0, "a", 1);
	PQsetvalue(res, 0, 1, "o", 1);
	PQsetvalue(res, 0, 2, "k", 1);
	put_int(res, 0, 3, 9, 8);
	CHECK(store_sql_insert_columns(res));
	CHECK(store_sql_insert_scope(res, 0, &(struct scope){"a", "o", "k"}));
	CHECK(!store_sql_insert_scope(res, 0, &(struct scope){"a", "o", "kk"}));
	CHECK(store_sql_insert_generation(res, 0, &gen) == 0 && gen == 9);
	PQclear(res);
}

/* The notification's text[] literal: scope tokens only, nothing to quote. */
static void test_tokens_array(void)
{
	const char *two[] = {"0123456789abcdef0123456789abcdef", "ffffffffffffffffffffffffffffffff"};
	const char *odd[] = {"", "0123456789abcdef0123456789abcdef0", "00000000000000000000000000000000"};
	char *s;

	s = store_tokens_array(two, 2);
	CHECK_STR(s, "{0123456789abcdef0123456789abcdef,ffffffffffffffffffffffffffffffff}");
	free(s);
	s = store_tokens_array(two, 1);
	CHECK_STR(s, "{0123456789abcdef0123456789abcdef}");
	free(s);
	/* an empty token and one too long for a scope token are left out */
	s = store_tokens_array(odd, 3);
	CHECK_STR(s, "{00000000000000000000000000000000}");
	free(s);
	s = store_tokens_array(odd, 1);
	CHECK_STR(s, "{}");
	free(s);
}

static void cleanup(const char *dsn)
{
	PGconn *conn = PQconnectdb(dsn);
	const char *values[2] = {actor, "other-actor"};

	PQclear(PQexecParams(conn, "DELETE FROM idempotency_records WHERE actor IN ($1, $2)", 2,
			     NULL, values, NULL, NULL, 0));
	PQfinish(conn);
}

int main(void)
{
	const char *dsn = getenv("IDEMPROXY_TEST_DSN");
	unsigned char fp[FINGERPRINT_LEN], fp2[FINGERPRINT_LEN];
	struct store *st;

	test_tokens_array();
	test_statements();
	test_statements_citus();
	test_decoders();
	if (!dsn)
		UNIT_DONE("store");
	snprintf(actor, sizeof(actor), "test-store-%ld-%ld", (long)getpid(), (long)time(NULL));
	for (int i = 0; i < FINGERPRINT_LEN; i++) {
		fp[i] = (unsigned char)i; /* includes a NUL byte: bytea goes binary */
		fp2[i] = (unsigned char)(0xff - i);
	}
	base = event_base_new();

	test_migrate(dsn);
	cleanup(dsn);
	if (getenv("IDEMPROXY_STORE_BENCH")) {
		bench(dsn, fp);
		cleanup(dsn);
		event_base_free(base);
		UNIT_DONE("store bench");
	}
	st = store_new(base, NULL, 0, dsn, TEST_TIMEOUT_MS, "test-owner", -1);
	CHECK(st != NULL);
	CHECK(wait_ready(st));
	test_claim_finish(st, fp, fp2);
	test_release_unknown(st, fp);
	test_expiry(st, fp, fp2);
	test_peek(st, fp, fp2);
	test_claimant_ids(st, fp);
	test_tombstones(st, fp, fp2);
	test_quota_sql(st);
	test_queue(st, fp);
	test_coalesce(st, fp);
	test_same_scope(st, fp, fp2);
	test_batch_error(st, fp);
	test_header_bytes(st, fp);
	test_notify(dsn, st, fp);
	CHECK(store_pending(st) == 0);
	store_free(st);

	test_race(dsn, fp);
	test_unavailable(fp);
	test_read_only(dsn, fp);
	test_timeout(dsn, fp);
	test_lost(dsn, fp);
	test_lost_mid_batch(dsn, fp);
	test_multi_host(dsn, fp);
	test_free_in_callback(dsn, fp);
	cleanup(dsn);

	event_base_free(base);
	UNIT_DONE("store");
}
