/*
 * JSON Web Tokens: verification of compact JWS tokens against a JSON Web Key
 * Set, and a per-thread cache of verified tokens.
 */
#ifndef IDEMPROXY_JWT_H
#define IDEMPROXY_JWT_H

#include <stddef.h>
#include <stdint.h>

#include "proxy/jwks.h" /* struct jwks, and jwks_parse() to make one */

#define JWT_TOKEN_MAX 8192 /* longer tokens are JWT_MALFORMED */
#define JWT_ACTOR_MAX 200  /* longest string value of the actor claim */

/* What a verified token must satisfy. The strings are the caller's. */
struct jwt_rules {
	const char *issuer;   /* NULL: any (token's iss still qualifies the actor) */
	const char *audience; /* NULL: not checked; else aud (string or array of strings) must contain it */
	const char *claim;    /* the actor claim, e.g. "sub" (never NULL) */
	int64_t leeway_s;     /* clock skew allowed for exp/nbf/iat, >= 0 */
	int require_exp;      /* 1: a token without exp is JWT_NO_EXP */
};

enum jwt_result {
	JWT_OK,
	JWT_MALFORMED,	   /* not three base64url parts, bad JSON, crit, typ not JWT/at+jwt... */
	JWT_BAD_ALG,	   /* none, unknown, or not fitting the key's kty / the key's alg member */
	JWT_NO_KEY,	   /* no key with that kid; no kid and not exactly one key that fits the alg */
	JWT_BAD_SIGNATURE, /* includes a signature of the wrong length */
	JWT_EXPIRED,	   /* exp + leeway <= now */
	JWT_NOT_YET,	   /* nbf - leeway > now, or iat - leeway > now */
	JWT_BAD_ISSUER,
	JWT_BAD_AUDIENCE,
	JWT_NO_CLAIM, /* claim absent, not a string or integer, or a string not 1..JWT_ACTOR_MAX bytes */
	JWT_NO_EXP,   /* rules->require_exp and the token has no exp */
	JWT_NOMEM,
};

/* A short name for logs: "ok", "malformed", "bad-alg", ... */
const char *jwt_result_name(enum jwt_result r);

/* What a verified token says. */
struct jwt_claims {
	char *issuer; /* iss, NULL when absent (malloc'd) */
	char *actor;  /* the claim's value as text: a string as is, an integer in decimal (malloc'd) */
	int actor_integer; /* 1 when the claim is an integer: 123 and "123" are two actors */
	int64_t exp;  /* seconds, 0 when absent */
};

void jwt_claims_clear(struct jwt_claims *c); /* frees the members and zeroes c */

/*
 * Verifies the compact JWS token (n bytes, not NUL-terminated) against keys
 * and rules at now_s (unix seconds). Algorithms: HS256/384/512 (oct),
 * RS256/384/512 and PS256 (RSA), ES256 (P-256), ES384 (P-384), EdDSA
 * (Ed25519). The key is the one named by the header's kid, or without kid
 * the only key that fits the alg. exp, nbf and iat may be integers or reals
 * (fractions of a second are dropped); a member read here appears once,
 * and neither part's JSON may hold what yajl would repair (json.h): a
 * subject "a\ud800" is malformed, never "a?". On JWT_OK *out holds the
 * claims (the caller clears them); on anything else *out is zeroed.
 * Several threads may verify against one key set.
 */
enum jwt_result jwt_verify(const struct jwks *keys, const struct jwt_rules *rules, const char *token,
			   size_t n, int64_t now_s, struct jwt_claims *out)
	__attribute__((warn_unused_result));

/* A bounded cache of verified tokens (one per worker thread; not thread-safe). */
struct jwt_cache;

/* A cache of at most entries (>= 1) tokens; NULL when out of memory or entries is 0. */
struct jwt_cache *jwt_cache_new(size_t entries);
void jwt_cache_free(struct jwt_cache *c); /* NULL accepted */

/*
 * jwt_verify() through the cache. A token verified before against the same
 * key set (the same jwks_parse() result: sets are told apart by a serial
 * number, never by pointer) and rules of the same content is answered from
 * the cache until its exp + leeway, or for JWT_CACHE_NO_EXP_S when it has no
 * exp. Entries are keyed by the token's SHA-256 (compared in full) and
 * direct-mapped: a new token replaces the one in its slot. Only JWT_OK is
 * cached. On a hit *out gets fresh copies (the caller clears them).
 */
#define JWT_CACHE_NO_EXP_S 300
enum jwt_result jwt_cache_verify(struct jwt_cache *c, const struct jwks *keys,
				 const struct jwt_rules *rules, const char *token, size_t n,
				 int64_t now_s, struct jwt_claims *out)
	__attribute__((warn_unused_result));

#endif
