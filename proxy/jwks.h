/*
 * JSON Web Key Sets: a parsed set of public keys and HMAC secrets, the JWS
 * algorithms idemproxy accepts, the choice of a key for a token and the
 * check of a JWS signature with it.
 */
#ifndef IDEMPROXY_JWKS_H
#define IDEMPROXY_JWKS_H

#include <stddef.h>
#include <stdint.h>

#define JWKS_KEYS_MAX 64 /* most members of "keys" */

/* A parsed JSON Web Key Set, immutable once made; any thread may use it. */
struct jwks;

/* One key of a set; it lives as long as the set. */
struct jwk;

/*
 * A JWS algorithm: HS256/384/512 (oct), RS256/384/512 and PS256 (RSA),
 * ES256 (P-256), ES384 (P-384), EdDSA (Ed25519). Each fits exactly one type
 * of key. Static: never freed.
 */
struct jws_alg;

/* The algorithm called name, or NULL. */
const struct jws_alg *jws_alg_find(const char *name);

/*
 * Parses the JWKS document {"keys":[...]} of len bytes (no NUL needed).
 * Keys: kty "oct" (k, at least 16 bytes), "RSA" (n, e; 2048 to 16384
 * bits), "EC" with crv "P-256" or "P-384" (x, y: a point on the curve) and
 * "OKP" with crv "Ed25519" (x). Optional members: kid, alg (must name an
 * algorithm of jws_alg_find() fitting the kty) and use ("sig", or "enc" to
 * have the key skipped); key_ops and private members are ignored. An unknown
 * kty or crv, an empty set (after skipping), two keys with the same kid or
 * more than JWKS_KEYS_MAX keys are errors. On success returns 0 and the set
 * in *out (the caller frees it with jwks_free()); on failure returns -1,
 * *out NULL, and a one-line message in err naming the key by its 1-based
 * index, e.g. "key 2: RSA key without \"n\"".
 */
int jwks_parse(const char *text, size_t len, struct jwks **out, char *err, size_t errlen)
	__attribute__((warn_unused_result));
void jwks_free(struct jwks *keys); /* NULL accepted */
int jwks_count(const struct jwks *keys); /* keys used for verification */
int jwks_has_secret(const struct jwks *keys); /* 1: an oct key (an HMAC secret) is among them */

/*
 * A number unique per jwks_parse() result, never 0: tells sets apart where a
 * pointer could not (a new set may be made where a freed one was).
 */
uint64_t jwks_serial(const struct jwks *keys);

enum jwks_select_result {
	JWKS_KEY_FOUND,
	JWKS_KEY_BAD_ALG, /* the key named by kid does not fit alg: its kty or its alg member */
	JWKS_KEY_NONE,	  /* no key with that kid; no kid and not exactly one key that fits alg */
};

/* The key named by kid (NULL: the only key that fits alg, never NULL) in *out. */
enum jwks_select_result jwks_select(const struct jwks *keys, const struct jws_alg *alg,
				    const char *kid, const struct jwk **out)
	__attribute__((warn_unused_result));

enum jws_result {
	JWS_VALID,
	JWS_INVALID, /* includes a signature of the wrong length */
	JWS_NOMEM,
};

/*
 * Checks the signature sig (siglen bytes, as JWS has it: an HMAC, an RSA
 * signature, ECDSA's R || S or an EdDSA signature) over the n bytes at
 * input with key, which fits alg (as jwks_select() found it). An HMAC is
 * compared in constant time. Several threads may check with one key.
 */
enum jws_result jws_verify(const struct jwk *key, const struct jws_alg *alg, const char *input,
			   size_t n, const unsigned char *sig, size_t siglen)
	__attribute__((warn_unused_result));

#endif
