/*
 * The headers only idemproxy sets: it writes them on its own responses and
 * removes them wherever else they appear, from client requests before they
 * go upstream and from upstream responses before they are relayed or
 * recorded, so that no client and no upstream can fake them.
 */
#ifndef IDEMPROXY_MARKER_H
#define IDEMPROXY_MARKER_H

#define MARKER_REPLAYED	    "Idempotent-Replayed"     /* true: a stored response */
#define MARKER_ENFORCED	    "Idempotency-Enforced"    /* false: forwarded while the store was out */
#define MARKER_BODY_OMITTED "Idempotency-Body-Omitted" /* true: the body was too large to keep */
#define MARKER_KEY_EXPIRES  "Idempotency-Key-Expires" /* when the record goes */

/* 1 when name (any case) is one of the headers above. */
int marker_header(const char *name);

#endif
