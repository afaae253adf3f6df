/* A completed record sent as the answer to a retry. */
#ifndef IDEMPROXY_REPLAY_H
#define IDEMPROXY_REPLAY_H

struct client_conn;
struct record;

/*
 * 1 when a replay of a stored response of status says X-Should-Retry:
 * false: a 5xx, which SDKs retry, though retrying its replay gets the same
 * stored response again.
 */
int replay_says_final(int status);

/*
 * The stored status, headers and body of the completed record rec on c,
 * with Idempotent-Replayed: true (and Idempotency-Body-Omitted: true with
 * an empty body when the body was too large to keep). A replay_says_final
 * status gets X-Should-Retry: false, and Stripe-Should-Retry: false when
 * stripe (a route's `errors stripe`), in place of any stored ones. rec is
 * copied; c may be NULL (nothing is written). Returns the status.
 */
int replay_send(struct client_conn *c, const struct record *rec, int flags, int stripe);

#endif
