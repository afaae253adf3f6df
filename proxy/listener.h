/*
 * The client listener of one worker (listener.c): accepts connections on
 * the configured address (SO_REUSEPORT, so every worker binds it), reads
 * each request with the strict parser and hands it to request.c.
 */
#ifndef IDEMPROXY_LISTENER_H
#define IDEMPROXY_LISTENER_H

struct budget_queue;
struct conf_gens;
struct event_base;
struct listener;
struct request_ctx;

/*
 * Listen on the listen address of gens' configuration, on base; requests
 * go to reqs; what waits unsent to each client counts against budget.
 * gens, reqs and budget must outlive the listener. NULL, with the reason
 * logged, when it cannot listen.
 */
struct listener *listener_new(struct event_base *base, const struct conf_gens *gens,
			      struct request_ctx *reqs, struct budget_queue *budget);

/* Stop accepting (shutdown); open connections go on. */
void listener_stop(struct listener *l);

/*
 * Shutdown: close every idle connection; the others close once their
 * current response is written. Call it until listener_conns() is 0.
 */
void listener_drain(struct listener *l);

/* Open client connections. */
int listener_conns(const struct listener *l);

/* Close every connection, whatever it is doing, and free the listener. NULL is accepted. */
void listener_free(struct listener *l);

#endif
