/*
 * The admin listener (admin.c): health, readiness, metrics, the contract and the records
 * API, served from the main thread's loop.
 */
#ifndef IDEMPROXY_ADMIN_H
#define IDEMPROXY_ADMIN_H

struct admin;
struct conf;
struct event_base;
struct secrets;
struct stats;
struct store;
struct sweeper;

/*
 * Listen on conf's admin address; secrets (conf's, for the admin token)
 * live as long as conf. st (the main thread's store), each (the
 * n workers' counters) and sw (may be NULL) must outlive the admin; free st
 * before the admin so no call answers into a freed listener. NULL when it
 * cannot listen.
 */
struct admin *admin_new(struct event_base *base, const struct conf *conf,
			const struct secrets *secrets, struct store *st, struct stats *const *each,
			int n, struct sweeper *sw);
/*
 * A reload's configuration (resolve's default retention, body limit, admin
 * token, GET /config), and the time it came: the last reload succeeded.
 */
void admin_reload(struct admin *a, const struct conf *conf, const struct secrets *secrets);
/*
 * A reload that did not apply: err ("FILE:LINE: message", or why it needs a
 * restart) for GET /config and the last-reload metrics; the running
 * configuration stays.
 */
void admin_reload_failed(struct admin *a, const char *err);
/* Stopping: /readyz answers 503 from now on. */
void admin_draining(struct admin *a);
void admin_free(struct admin *a);

/* The quota refresher whose counters /metrics shows. */
struct quota;
void admin_set_quota(struct admin *a, struct quota *q);

#endif
