/*
 * JSON Web Tokens (RFC 7519) in the compact JWS form (RFC 7515), verified
 * against a JSON Web Key Set (proxy/jwks.h), and a cache of verified tokens.
 *
 * JSON goes through yajl_tree after json_tree_safe() (proxy/json.h). A
 * member that is read here must appear once only, so two readers of one
 * token cannot disagree about it.
 */
#include "proxy/jwt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <openssl/evp.h>
#include <openssl/sha.h>
#include <yajl/yajl_tree.h>

#include "proxy/base64.h"
#include "proxy/digest.h"
#include "proxy/json.h"
#include "proxy/jwks.h"

#define JWT_DECODED_MAX BASE64_DECODED_MAX(JWT_TOKEN_MAX)
#define JWT_TIME_LIMIT	((int64_t)1 << 61) /* times are clamped to +-this, so sums cannot overflow */

static const char *const jwt_result_names[] = {
	[JWT_OK] = "ok",
	[JWT_MALFORMED] = "malformed",
	[JWT_BAD_ALG] = "bad-alg",
	[JWT_NO_KEY] = "no-key",
	[JWT_BAD_SIGNATURE] = "bad-signature",
	[JWT_EXPIRED] = "expired",
	[JWT_NOT_YET] = "not-yet-valid",
	[JWT_BAD_ISSUER] = "bad-issuer",
	[JWT_BAD_AUDIENCE] = "bad-audience",
	[JWT_NO_CLAIM] = "no-claim",
	[JWT_NO_EXP] = "no-exp",
	[JWT_NOMEM] = "out-of-memory",
};
_Static_assert(sizeof(jwt_result_names) / sizeof(jwt_result_names[0]) == JWT_NOMEM + 1,
	       "a name for every jwt_result");

const char *jwt_result_name(enum jwt_result r)
{
	if ((unsigned)r > JWT_NOMEM)
		return "unknown";
	return jwt_result_names[r];
}

/* What jwks_select() and jws_verify() answer, as jwt_results. */
static const enum jwt_result jwt_select_results[] = {
	[JWKS_KEY_FOUND] = JWT_OK,
	[JWKS_KEY_BAD_ALG] = JWT_BAD_ALG,
	[JWKS_KEY_NONE] = JWT_NO_KEY,
};

static const enum jwt_result jwt_jws_results[] = {
	[JWS_VALID] = JWT_OK,
	[JWS_INVALID] = JWT_BAD_SIGNATURE,
	[JWS_NOMEM] = JWT_NOMEM,
};

void jwt_claims_clear(struct jwt_claims *c)
{
	free(c->issuer);
	free(c->actor);
	memset(c, 0, sizeof(*c));
}

/*
 * Decodes the base64url part of n bytes into buf (room for n / 4 * 3 + 3
 * bytes, NUL-terminated after the JSON) and parses it into *out, which must
 * be an object; the caller frees it. Returns JWT_OK or JWT_MALFORMED.
 */
static enum jwt_result jwt_object(const char *part, size_t n, unsigned char *buf, yajl_val *out)
{
	size_t len;

	*out = NULL;
	if (base64_decode(part, n, BASE64_URL, buf, BASE64_DECODED_MAX(n), &len) < 0 ||
	    json_tree_safe((char *)buf, len) < 0)
		return JWT_MALFORMED;
	buf[len] = '\0';
	*out = yajl_tree_parse((char *)buf, NULL, 0);
	return YAJL_IS_OBJECT(*out) ? JWT_OK : JWT_MALFORMED;
}

/*
 * Reads the header: no crit, typ absent or JWT or at+jwt, alg a string
 * (*alg NULL when it names no algorithm of ours), kid absent or a string.
 */
static enum jwt_result jwt_header(yajl_val h, const struct jws_alg **alg, const char **kid)
{
	yajl_val crit, typ, a, k;

	if (json_member(h, "crit", &crit) < 0 || crit || json_member(h, "typ", &typ) < 0 ||
	    json_member(h, "alg", &a) < 0 || json_member(h, "kid", &k) < 0)
		return JWT_MALFORMED;
	if (typ && (!YAJL_IS_STRING(typ) || (strcasecmp(typ->u.string, "JWT") != 0 &&
					     strcasecmp(typ->u.string, "at+jwt") != 0)))
		return JWT_MALFORMED;
	if (!YAJL_IS_STRING(a) || (k && !YAJL_IS_STRING(k)))
		return JWT_MALFORMED;
	*alg = jws_alg_find(a->u.string);
	*kid = k ? k->u.string : NULL;
	return JWT_OK;
}

/*
 * A time member (absent: *t untouched) as whole seconds clamped to
 * +-JWT_TIME_LIMIT. Returns 0, or -1 when it is not a number yajl could
 * read as a long long or a double.
 */
static int jwt_time(yajl_val v, int64_t *t)
{
	double d;

	if (!v)
		return 0;
	if (YAJL_IS_INTEGER(v)) {
		d = (double)YAJL_GET_INTEGER(v);
	} else if (YAJL_IS_DOUBLE(v)) {
		d = YAJL_GET_DOUBLE(v);
	} else {
		return -1;
	}
	if (d > (double)JWT_TIME_LIMIT)
		d = (double)JWT_TIME_LIMIT;
	if (d < -(double)JWT_TIME_LIMIT)
		d = -(double)JWT_TIME_LIMIT;
	*t = (int64_t)d;
	return 0;
}

static int64_t jwt_clamp(int64_t t)
{
	return t > JWT_TIME_LIMIT ? JWT_TIME_LIMIT : t < -JWT_TIME_LIMIT ? -JWT_TIME_LIMIT : t;
}

/* Whether aud (a string or an array of strings) contains want. */
static int jwt_audience_has(yajl_val aud, const char *want)
{
	size_t i;

	if (YAJL_IS_STRING(aud))
		return strcmp(aud->u.string, want) == 0;
	if (!YAJL_IS_ARRAY(aud))
		return 0;
	for (i = 0; i < aud->u.array.len; i++) {
		if (YAJL_IS_STRING(aud->u.array.values[i]) &&
		    strcmp(aud->u.array.values[i]->u.string, want) == 0)
			return 1;
	}
	return 0;
}

/* The actor claim's value as text in a new c->actor, and whether it is an integer. */
static enum jwt_result jwt_actor(yajl_val v, struct jwt_claims *c)
{
	char num[24];
	size_t len;

	if (YAJL_IS_STRING(v)) {
		len = strlen(v->u.string);
		if (len == 0 || len > JWT_ACTOR_MAX)
			return JWT_NO_CLAIM;
		c->actor = strdup(v->u.string);
	} else if (YAJL_IS_INTEGER(v)) {
		snprintf(num, sizeof(num), "%lld", YAJL_GET_INTEGER(v));
		c->actor = strdup(num);
		c->actor_integer = 1;
	} else {
		return JWT_NO_CLAIM;
	}
	return c->actor ? JWT_OK : JWT_NOMEM;
}

/*
 * Checks the payload's claims against rules at now and fills *out (zeroed
 * by the caller); *until is when the answer stops holding: exp + leeway, or
 * INT64_MAX without exp.
 */
static enum jwt_result jwt_claims_check(yajl_val p, const struct jwt_rules *rules, int64_t now,
					struct jwt_claims *out, int64_t *until)
{
	yajl_val exp, nbf, iat, iss, aud, actor;
	int64_t texp = 0, tnbf = 0, tiat = 0, leeway = jwt_clamp(rules->leeway_s);
	enum jwt_result r;

	now = jwt_clamp(now);
	if (leeway < 0)
		leeway = 0;
	if (json_member(p, "exp", &exp) < 0 || json_member(p, "nbf", &nbf) < 0 ||
	    json_member(p, "iat", &iat) < 0 || json_member(p, "iss", &iss) < 0 ||
	    json_member(p, "aud", &aud) < 0 || json_member(p, rules->claim, &actor) < 0 ||
	    jwt_time(exp, &texp) < 0 || jwt_time(nbf, &tnbf) < 0 || jwt_time(iat, &tiat) < 0 ||
	    (iss && !YAJL_IS_STRING(iss)))
		return JWT_MALFORMED;
	if (!exp && rules->require_exp)
		return JWT_NO_EXP;
	if (exp && texp + leeway <= now)
		return JWT_EXPIRED;
	if ((nbf && tnbf - leeway > now) || (iat && tiat - leeway > now))
		return JWT_NOT_YET;
	if (rules->issuer && (!iss || strcmp(iss->u.string, rules->issuer) != 0))
		return JWT_BAD_ISSUER;
	if (rules->audience && !jwt_audience_has(aud, rules->audience))
		return JWT_BAD_AUDIENCE;
	r = jwt_actor(actor, out);
	if (r != JWT_OK)
		return r;
	if (iss && !(out->issuer = strdup(iss->u.string)))
		return JWT_NOMEM;
	out->exp = texp;
	*until = exp ? texp + leeway : INT64_MAX;
	return JWT_OK;
}

/* jwt_verify(), and in *until when a JWT_OK stops holding (see jwt_claims_check()). */
static enum jwt_result jwt_verify_until(const struct jwks *keys, const struct jwt_rules *rules,
					const char *token, size_t n, int64_t now_s,
					struct jwt_claims *out, int64_t *until)
{
	unsigned char buf[JWT_DECODED_MAX + 1];
	const char *dot1, *dot2, *kid = NULL;
	const struct jws_alg *alg = NULL;
	const struct jwk *key = NULL;
	yajl_val header = NULL, payload = NULL;
	size_t siglen;
	enum jwt_result r;

	memset(out, 0, sizeof(*out));
	if (n > JWT_TOKEN_MAX)
		return JWT_MALFORMED;
	dot1 = memchr(token, '.', n);
	dot2 = dot1 ? memchr(dot1 + 1, '.', (size_t)(token + n - dot1 - 1)) : NULL;
	if (!dot2 || memchr(dot2 + 1, '.', (size_t)(token + n - dot2 - 1)))
		return JWT_MALFORMED;

	r = jwt_object(token, (size_t)(dot1 - token), buf, &header);
	if (r == JWT_OK)
		r = jwt_header(header, &alg, &kid);
	if (r == JWT_OK && !alg)
		r = JWT_BAD_ALG;
	if (r == JWT_OK)
		r = jwt_select_results[jwks_select(keys, alg, kid, &key)];
	/* The signature is checked before the payload is even decoded. */
	if (r == JWT_OK && base64_decode(dot2 + 1, (size_t)(token + n - dot2 - 1), BASE64_URL, buf,
					 JWT_DECODED_MAX, &siglen) < 0)
		r = JWT_MALFORMED;
	if (r == JWT_OK)
		r = jwt_jws_results[jws_verify(key, alg, token, (size_t)(dot2 - token), buf,
					       siglen)];
	if (r == JWT_OK)
		r = jwt_object(dot1 + 1, (size_t)(dot2 - dot1 - 1), buf, &payload);
	if (r == JWT_OK)
		r = jwt_claims_check(payload, rules, now_s, out, until);
	if (r != JWT_OK)
		jwt_claims_clear(out);
	yajl_tree_free(header);
	yajl_tree_free(payload);
	return r;
}

enum jwt_result jwt_verify(const struct jwks *keys, const struct jwt_rules *rules, const char *token,
			   size_t n, int64_t now_s, struct jwt_claims *out)
{
	int64_t until;

	return jwt_verify_until(keys, rules, token, n, now_s, out, &until);
}

struct jwt_cache_entry {
	unsigned char key[SHA256_DIGEST_LENGTH]; /* SHA-256 of the rules' content and the token */
	uint64_t serial;			 /* the key set's; 0: the slot is empty */
	int64_t until;				 /* answered while now < until */
	struct jwt_claims claims;
};

struct jwt_cache {
	EVP_MD_CTX *md; /* reused for every lookup's digest */
	size_t n;
	struct jwt_cache_entry e[];
};

struct jwt_cache *jwt_cache_new(size_t entries)
{
	struct jwt_cache *c;

	if (entries == 0 || entries > (SIZE_MAX - sizeof(*c)) / sizeof(c->e[0]))
		return NULL;
	c = calloc(1, sizeof(*c) + entries * sizeof(c->e[0]));
	if (!c)
		return NULL;
	c->n = entries;
	c->md = EVP_MD_CTX_new();
	if (!c->md) {
		jwt_cache_free(c);
		return NULL;
	}
	return c;
}

void jwt_cache_free(struct jwt_cache *c)
{
	size_t i;

	if (!c)
		return;
	for (i = 0; i < c->n; i++)
		jwt_claims_clear(&c->e[i].claims);
	EVP_MD_CTX_free(c->md);
	free(c);
}

/* Adds s to the digest so that NULL, "" and any two strings differ: a tag, the length, the bytes. */
static int jwt_digest_string(EVP_MD_CTX *md, const char *s)
{
	uint64_t len = s ? strlen(s) : 0;
	unsigned char tag = s != NULL;

	return EVP_DigestUpdate(md, &tag, 1) && EVP_DigestUpdate(md, &len, sizeof(len)) &&
	       (!s || EVP_DigestUpdate(md, s, len));
}

/*
 * The cache key of token (n bytes) under rules: the SHA-256 of the rules'
 * content, then the token, into out. Returns 0, or -1.
 */
static int jwt_cache_key(struct jwt_cache *c, const struct jwt_rules *rules, const char *token,
			 size_t n, unsigned char *out)
{
	EVP_MD_CTX *md = c->md;

	if (EVP_DigestInit_ex(md, digest_sha256(), NULL) && jwt_digest_string(md, rules->issuer) &&
	    jwt_digest_string(md, rules->audience) && jwt_digest_string(md, rules->claim) &&
	    EVP_DigestUpdate(md, &rules->leeway_s, sizeof(rules->leeway_s)) &&
	    EVP_DigestUpdate(md, &rules->require_exp, sizeof(rules->require_exp)) &&
	    EVP_DigestUpdate(md, token, n) && EVP_DigestFinal_ex(md, out, NULL))
		return 0;
	return -1;
}

/* Copies src's members into a zeroed *dst; JWT_NOMEM leaves *dst zeroed. */
static enum jwt_result jwt_claims_copy(const struct jwt_claims *src, struct jwt_claims *dst)
{
	dst->issuer = src->issuer ? strdup(src->issuer) : NULL;
	dst->actor = strdup(src->actor);
	dst->actor_integer = src->actor_integer;
	dst->exp = src->exp;
	if (!dst->actor || (src->issuer && !dst->issuer)) {
		jwt_claims_clear(dst);
		return JWT_NOMEM;
	}
	return JWT_OK;
}

enum jwt_result jwt_cache_verify(struct jwt_cache *c, const struct jwks *keys,
				 const struct jwt_rules *rules, const char *token, size_t n,
				 int64_t now_s, struct jwt_claims *out)
{
	unsigned char key[SHA256_DIGEST_LENGTH];
	struct jwt_cache_entry *e;
	enum jwt_result r;
	uint64_t slot;
	int64_t until;

	memset(out, 0, sizeof(*out));
	if (n > JWT_TOKEN_MAX)
		return JWT_MALFORMED;
	if (jwt_cache_key(c, rules, token, n, key) < 0)
		return JWT_NOMEM;
	memcpy(&slot, key, sizeof(slot));
	e = &c->e[slot % c->n];
	if (e->serial == jwks_serial(keys) && now_s < e->until &&
	    memcmp(e->key, key, sizeof(key)) == 0)
		return jwt_claims_copy(&e->claims, out);

	r = jwt_verify_until(keys, rules, token, n, now_s, out, &until);
	if (r != JWT_OK)
		return r;
	jwt_claims_clear(&e->claims);
	e->serial = 0;
	if (jwt_claims_copy(out, &e->claims) != JWT_OK)
		return JWT_OK; /* not cached, still verified */
	memcpy(e->key, key, sizeof(key));
	e->serial = jwks_serial(keys);
	e->until = until == INT64_MAX ? jwt_clamp(now_s) + JWT_CACHE_NO_EXP_S : until;
	return JWT_OK;
}
