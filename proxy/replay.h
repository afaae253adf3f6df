/* A completed record sent as the answer to a retry. */
#ifndef IDEMPROXY_REPLAY_H
#define IDEMPROXY_REPLAY_H

struct client_conn;
struct record;

/*
 * The stored status, headers and body of the completed record rec on c,
 * with Idempotent-Replayed: true (and Idempotency-Body-Omitted: true with
 * an empty body when the body was too large to keep). rec is copied; c may
 * be NULL (nothing is written). Returns the status.
 */
int replay_send(struct client_conn *c, const struct record *rec, int flags);

#endif
