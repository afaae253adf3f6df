/*
 * The scope of an idempotency record: (actor, operation, key). Two requests
 * share a record exactly when their three strings are equal; the hash and
 * the token are two names for a scope, one for hash tables and one for the
 * store's notifications.
 */
#ifndef IDEMPROXY_SCOPE_H
#define IDEMPROXY_SCOPE_H

#include <stdint.h>

/* The strings are borrowed: whoever fills a scope keeps them alive. */
struct scope {
	const char *actor;
	const char *operation;
	const char *key;
};

/* A scope's token: hex MD5, plus NUL. */
#define SCOPE_TOKEN_SIZE 33

/* SQL computing the token of the record aliased r, as scope_token() does. */
#define SCOPE_SQL_TOKEN(r) "md5(" r ".actor || E'\\n' || " r ".operation || E'\\n' || " r ".idem_key)"

/* A 64-bit hash of sc (FNV-1a over the parts, NUL separated), for hash tables. */
uint64_t scope_hash(const struct scope *sc);

/* 1 when a and b name the same scope. */
int scope_equal(const struct scope *a, const struct scope *b);

/* A total order of scopes: by actor, then operation, then key (strcmp). */
int scope_cmp(const struct scope *a, const struct scope *b);

/*
 * md5(actor || "\n" || operation || "\n" || key) in hex, the name the
 * store's notifications give a scope (see SCOPE_SQL_TOKEN); "" if OpenSSL
 * fails.
 */
void scope_token(const struct scope *sc, char token[SCOPE_TOKEN_SIZE]);

/* A scope's forwarded key (forward_key scoped): hex SHA-256, plus NUL. */
#define SCOPE_FORWARD_KEY_SIZE 65

/*
 * The key forward_key scoped sends upstream for sc: the SHA-256, in hex,
 * of a label and each part of sc prefixed by its length (4 bytes, big
 * endian), so no two scopes share one and no part can run into the next.
 * The same for every attempt at one scope, on every instance. "" if
 * OpenSSL fails.
 */
void scope_forward_key(const struct scope *sc, char out[SCOPE_FORWARD_KEY_SIZE]);

#endif
