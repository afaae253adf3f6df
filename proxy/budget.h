/*
 * The relay budget (budget.c): bytes waiting unsent on idemproxy's side of
 * its sockets, counted for the whole process and per peer address, so that
 * relayed reads stop before they could take either count past its limit
 * (relay_budget, relay_budget_per_peer) instead of memory growing with the
 * number of slow readers.
 *
 * What holds such bytes (a client connection's output, an exchange's
 * request body or tunnel bytes on their way upstream) keeps a meter: what
 * it has added to the counts. The counts are shared by every worker as
 * atomics, without a lock. Peers are counted in a fixed table of
 * BUDGET_PEER_SLOTS counters indexed by a hash of the address, seeded at
 * start; an IPv6 peer is counted by its /64, an IPv4-mapped one as IPv4.
 * Peers that share a slot share its limit, which only makes it stricter.
 *
 * A worker's queue holds the limits of its configuration and the
 * exchanges of that worker whose reads wait for the budget. It retries
 * them when bytes drain on that worker and take a count down to its resume
 * mark, and every BUDGET_RETRY_MS while any wait (drains on other
 * workers).
 */
#ifndef IDEMPROXY_BUDGET_H
#define IDEMPROXY_BUDGET_H

#include <stddef.h>
#include <sys/queue.h>
#include <sys/socket.h>

struct event_base;
struct evbuffer;
struct budget_queue;

#define BUDGET_PEER_SLOTS 4096u
#define BUDGET_NO_PEER	  BUDGET_PEER_SLOTS /* a meter counted for the process only */
#define BUDGET_RETRY_MS	  10		    /* how often waiting exchanges look again */

/* What one more read would take past: nothing, the process's budget, its peer's. */
enum budget_verdict {
	BUDGET_ROOM,
	BUDGET_PROCESS,
	BUDGET_PEER,
};

/* What one holder of buffered bytes has added to the counts. */
struct budget_meter {
	struct budget_queue *q; /* its worker's; NULL: counts nothing */
	unsigned slot;		/* its peer's counter, or BUDGET_NO_PEER */
	size_t charged;
};

/* An exchange whose reads wait for the budget, on its worker's queue. */
struct budget_wait {
	TAILQ_ENTRY(budget_wait) link;
	struct budget_queue *q;
	void (*retry)(void *arg); /* the counts fell: look again (see budget_wait_start) */
	void *arg;
	int queued;
};

/* A worker's queue on base, with no limit until budget_queue_limits. NULL when out of memory. */
struct budget_queue *budget_queue_new(struct event_base *base);
/* Every wait must have ended, every meter of q be back at 0. NULL is accepted. */
void budget_queue_free(struct budget_queue *q);

/* The limits of the worker's configuration, in bytes (0: none). */
void budget_queue_limits(struct budget_queue *q, size_t process, size_t peer);

/*
 * A meter on q for peer (NULL: counted for the process only), charged
 * nothing; twin makes one for the same peer as of.
 */
void budget_meter_init(struct budget_meter *m, struct budget_queue *q, const struct sockaddr *peer);
void budget_meter_twin(struct budget_meter *m, const struct budget_meter *of);

/* m's holder has bytes waiting now: the counts follow. */
void budget_meter_set(struct budget_meter *m, size_t bytes);

/* A read of up to bytes was let go on m's behalf: counted until m is set again. */
void budget_meter_reserve(struct budget_meter *m, size_t bytes);

/*
 * Whether the counts have room for more bytes on m's behalf: within the
 * limits, or, for a read that was stopped (resuming), within three
 * quarters of them, so that reads stopped on the budget go on only once
 * it has room for more than a read or two.
 */
enum budget_verdict budget_check(const struct budget_meter *m, size_t more, int resuming);

/* A read stopped on the budget for why (counted for the metrics). */
void budget_paused(enum budget_verdict why);

/*
 * w waits on m's queue for retry(arg) once started; start and end may be
 * called again and again. retry runs from q's event, never from inside a
 * call of the exchange's, and may end its own wait but no other.
 */
void budget_wait_init(struct budget_wait *w, const struct budget_meter *m, void (*retry)(void *),
		      void *arg);
void budget_wait_start(struct budget_wait *w);
void budget_wait_end(struct budget_wait *w);

/* The bytes counted now, all workers together. */
size_t budget_bytes(void);

/* The budget's metrics, limit being relay_budget. */
void budget_render(struct evbuffer *out, size_t limit);

#endif
