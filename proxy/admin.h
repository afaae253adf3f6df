/*
 * The admin listener (admin.c): health, readiness, metrics and the records
 * API, served from the main thread's loop.
 */
#ifndef IDEMPROXY_ADMIN_H
#define IDEMPROXY_ADMIN_H

struct admin;
struct conf;
struct event_base;
struct store;
struct sweeper;
struct worker;

/*
 * Listen on conf's admin address. st (the main thread's store), workers
 * and sw (may be NULL) must outlive the admin; free st before the admin so
 * no call answers into a freed listener. NULL when it cannot listen.
 */
struct admin *admin_new(struct event_base *base, const struct conf *conf, struct store *st,
			struct worker *workers, int nworkers, struct sweeper *sw);
/* A reload's configuration (resolve's default retention, body limit). */
void admin_reload(struct admin *a, const struct conf *conf);
void admin_free(struct admin *a);

#endif
