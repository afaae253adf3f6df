/*
 * Unit tests for proxy/jwt.c: JWKS parsing, token verification for every
 * algorithm, the key-confusion attack, key selection, time and claim rules,
 * malformed tokens and the verified-token cache. Keys are generated here,
 * their public parts exported to JWKS text and tokens signed here, so
 * nothing outside the process is needed.
 */
#include "proxy/jwt.h"
#include "tests/unit/unit.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/core_names.h>
#include <openssl/ec.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/rsa.h>

#define NOW	  INT64_C(1700000000)
#define ARENA_MAX 8192
#define THREADS	  4
#define THREAD_ROUNDS 50

/* Every string made here lives until the end of main(). */
static char *arena[ARENA_MAX];
static int narena;

static char *keep(char *s)
{
	if (!s || narena == ARENA_MAX)
		abort();
	arena[narena++] = s;
	return s;
}

static char *fmt(const char *f, ...) __attribute__((format(printf, 1, 2)));

static char *fmt(const char *f, ...)
{
	va_list ap;
	char *s = NULL;

	va_start(ap, f);
	if (vasprintf(&s, f, ap) < 0)
		abort();
	va_end(ap);
	return keep(s);
}

static const char b64_digits[] =
	"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

static char *b64url(const unsigned char *p, size_t n)
{
	const char *d = b64_digits;
	char *s = keep(malloc(n / 3 * 4 + 5)), *o = s;
	size_t i;

	for (i = 0; i + 2 < n; i += 3) {
		*o++ = d[p[i] >> 2];
		*o++ = d[(p[i] & 3) << 4 | p[i + 1] >> 4];
		*o++ = d[(p[i + 1] & 15) << 2 | p[i + 2] >> 6];
		*o++ = d[p[i + 2] & 63];
	}
	if (i < n) {
		*o++ = d[p[i] >> 2];
		if (i + 1 < n) {
			*o++ = d[(p[i] & 3) << 4 | p[i + 1] >> 4];
			*o++ = d[(p[i + 1] & 15) << 2];
		} else {
			*o++ = d[(p[i] & 3) << 4];
		}
	}
	*o = '\0';
	return s;
}

static char *b64str(const char *s)
{
	return b64url((const unsigned char *)s, strlen(s));
}

static char *b64bn(const BIGNUM *bn, int pad)
{
	unsigned char buf[1024];
	int n = pad ? BN_bn2binpad(bn, buf, pad) : BN_bn2bin(bn, buf);

	return b64url(buf, (size_t)n);
}

/* Generated keys and the HMAC secret. */
static EVP_PKEY *rsa1, *rsa2, *p256, *p384, *ed;
static unsigned char hs[32], hs_other[32];

/* Who signs a token: alg, its key (pkey or secret) and the kid to name. */
struct signer {
	const char *alg;
	EVP_PKEY *pkey;
	const unsigned char *secret;
	size_t slen;
	const char *kid;
	int salt; /* PS256: the salt length, 0 for the digest's */
};

static const EVP_MD *md_of(const char *alg)
{
	if (strstr(alg, "256"))
		return EVP_sha256();
	if (strstr(alg, "384"))
		return EVP_sha384();
	if (strstr(alg, "512"))
		return EVP_sha512();
	return NULL;
}

/* The base64url JWS signature of input by k. */
static char *signature(const struct signer *k, const char *input)
{
	unsigned char sig[1024], raw[96];
	unsigned int hlen = 0;
	size_t len = sizeof(sig), half;
	const unsigned char *p = sig;
	const BIGNUM *r, *s;
	EVP_MD_CTX *ctx;
	EVP_PKEY_CTX *pctx = NULL;
	ECDSA_SIG *es;

	if (strncmp(k->alg, "HS", 2) == 0) {
		HMAC(md_of(k->alg), k->secret, (int)k->slen, (const unsigned char *)input,
		     strlen(input), sig, &hlen);
		return b64url(sig, hlen);
	}
	ctx = EVP_MD_CTX_new();
	if (!ctx || EVP_DigestSignInit(ctx, &pctx, md_of(k->alg), NULL, k->pkey) != 1)
		abort();
	if (strncmp(k->alg, "PS", 2) == 0 &&
	    (EVP_PKEY_CTX_set_rsa_padding(pctx, RSA_PKCS1_PSS_PADDING) != 1 ||
	     EVP_PKEY_CTX_set_rsa_pss_saltlen(pctx, k->salt ? k->salt : RSA_PSS_SALTLEN_DIGEST) != 1))
		abort();
	if (EVP_DigestSign(ctx, sig, &len, (const unsigned char *)input, strlen(input)) != 1)
		abort();
	EVP_MD_CTX_free(ctx);
	if (strncmp(k->alg, "ES", 2) != 0)
		return b64url(sig, len);
	half = strcmp(k->alg, "ES256") == 0 ? 32 : 48;
	es = d2i_ECDSA_SIG(NULL, &p, (long)len);
	if (!es)
		abort();
	ECDSA_SIG_get0(es, &r, &s);
	BN_bn2binpad(r, raw, (int)half);
	BN_bn2binpad(s, raw + half, (int)half);
	ECDSA_SIG_free(es);
	return b64url(raw, 2 * half);
}

/* A token of the header and payload JSON, signed by k. */
static char *sign(const struct signer *k, const char *header, const char *payload)
{
	char *input = fmt("%s.%s", b64str(header), b64str(payload));

	return fmt("%s.%s", input, signature(k, input));
}

/* A token with the usual header (alg, typ JWT, k's kid) for payload. */
static char *tok(const struct signer *k, const char *payload)
{
	const char *kid = k->kid ? fmt(",\"kid\":\"%s\"", k->kid) : "";

	return sign(k, fmt("{\"alg\":\"%s\",\"typ\":\"JWT\"%s}", k->alg, kid), payload);
}

static const char *payload_ok(void)
{
	return fmt("{\"sub\":\"alice\",\"exp\":%lld,\"iat\":%lld}", (long long)NOW + 600,
		   (long long)NOW);
}

static const char *kid_member(const char *kid)
{
	return kid ? fmt(",\"kid\":\"%s\"", kid) : "";
}

static char *jwk_oct(const unsigned char *secret, size_t n, const char *kid, const char *extra)
{
	return fmt("{\"kty\":\"oct\"%s,\"k\":\"%s\"%s}", kid_member(kid), b64url(secret, n), extra);
}

static char *jwk_rsa(EVP_PKEY *k, const char *kid, const char *extra)
{
	BIGNUM *n = NULL, *e = NULL;
	char *s;

	if (EVP_PKEY_get_bn_param(k, OSSL_PKEY_PARAM_RSA_N, &n) != 1 ||
	    EVP_PKEY_get_bn_param(k, OSSL_PKEY_PARAM_RSA_E, &e) != 1)
		abort();
	s = fmt("{\"kty\":\"RSA\"%s,\"n\":\"%s\",\"e\":\"%s\"%s}", kid_member(kid), b64bn(n, 0),
		b64bn(e, 0), extra);
	BN_free(n);
	BN_free(e);
	return s;
}

/* An EC key's JWK; bad_y moves the point off the curve. */
static char *jwk_ec(EVP_PKEY *k, const char *crv, const char *kid, const char *extra, int bad_y)
{
	BIGNUM *x = NULL, *y = NULL;
	int size = EVP_PKEY_get_bits(k) / 8; /* of the key's curve, whatever crv says */
	char *s;

	if (EVP_PKEY_get_bn_param(k, OSSL_PKEY_PARAM_EC_PUB_X, &x) != 1 ||
	    EVP_PKEY_get_bn_param(k, OSSL_PKEY_PARAM_EC_PUB_Y, &y) != 1)
		abort();
	if (bad_y)
		BN_add_word(y, 1);
	s = fmt("{\"kty\":\"EC\",\"crv\":\"%s\"%s,\"x\":\"%s\",\"y\":\"%s\"%s}", crv, kid_member(kid),
		b64bn(x, size), b64bn(y, size), extra);
	BN_free(x);
	BN_free(y);
	return s;
}

static char *jwk_ed(EVP_PKEY *k, const char *kid, const char *extra)
{
	unsigned char x[32];
	size_t len = sizeof(x);

	if (EVP_PKEY_get_raw_public_key(k, x, &len) != 1)
		abort();
	return fmt("{\"kty\":\"OKP\",\"crv\":\"Ed25519\"%s,\"x\":\"%s\"%s}", kid_member(kid),
		   b64url(x, len), extra);
}

/* A key set that must parse. */
static struct jwks *set_of(const char *json)
{
	struct jwks *keys = NULL;
	char err[256] = "";

	if (jwks_parse(json, strlen(json), &keys, err, sizeof(err)) != 0) {
		fprintf(stderr, "jwks_parse: %s\n", err);
		abort();
	}
	return keys;
}

static struct jwt_rules rules = {NULL, NULL, "sub", 30, 0};

/* jwt_verify() at NOW with rules r; the actor, if any, into actor (200 + 1 bytes). */
static enum jwt_result verify_with(const struct jwks *keys, const struct jwt_rules *r,
				   const char *token, int64_t now, char *actor)
{
	struct jwt_claims c = {NULL, NULL, 0, 0};
	enum jwt_result res = jwt_verify(keys, r, token, strlen(token), now, &c);

	if (actor)
		snprintf(actor, JWT_ACTOR_MAX + 1, "%s", c.actor ? c.actor : "");
	if (res != JWT_OK && (c.actor || c.issuer || c.exp || c.actor_integer))
		res = JWT_NOMEM; /* a failure must leave the claims zeroed */
	jwt_claims_clear(&c);
	return res;
}

static enum jwt_result verify(const struct jwks *keys, const char *token)
{
	return verify_with(keys, &rules, token, NOW, NULL);
}

/* token with the character at i of its signature changed. */
static char *flip_sig(const char *token, size_t i)
{
	char *t = fmt("%s", token), *p = strrchr(t, '.') + 1 + i;

	*p = *p == 'A' ? 'B' : 'A';
	return t;
}

static struct jwks *all;	  /* h1, r1, r2, e256, e384, ed */
static const char *all_json;

static const struct signer s_hs256 = {"HS256", NULL, hs, sizeof(hs), "h1", 0};
static const struct signer signers[] = {
	{"HS256", NULL, hs, sizeof(hs), "h1", 0}, {"HS384", NULL, hs, sizeof(hs), "h1", 0},
	{"HS512", NULL, hs, sizeof(hs), "h1", 0}, {"RS256", NULL, NULL, 0, "r1", 0},
	{"RS384", NULL, NULL, 0, "r1", 0},	       {"RS512", NULL, NULL, 0, "r2", 0},
	{"PS256", NULL, NULL, 0, "r2", 0},	       {"ES256", NULL, NULL, 0, "e256", 0},
	{"ES384", NULL, NULL, 0, "e384", 0},      {"EdDSA", NULL, NULL, 0, "ed", 0},
};
#define NSIGNERS (sizeof(signers) / sizeof(signers[0]))

static struct signer signer_at(size_t i)
{
	struct signer k = signers[i];

	k.pkey = k.kid[0] == 'r' ? (k.kid[1] == '1' ? rsa1 : rsa2)
		 : strcmp(k.kid, "e256") == 0 ? p256
		 : strcmp(k.kid, "e384") == 0 ? p384
		 : strcmp(k.kid, "ed") == 0   ? ed
					      : NULL;
	return k;
}

static void setup(void)
{
	if (RAND_bytes(hs, sizeof(hs)) != 1 || RAND_bytes(hs_other, sizeof(hs_other)) != 1)
		abort();
	rsa1 = EVP_PKEY_Q_keygen(NULL, NULL, "RSA", (size_t)2048);
	rsa2 = EVP_PKEY_Q_keygen(NULL, NULL, "RSA", (size_t)2048);
	p256 = EVP_PKEY_Q_keygen(NULL, NULL, "EC", "P-256");
	p384 = EVP_PKEY_Q_keygen(NULL, NULL, "EC", "P-384");
	ed = EVP_PKEY_Q_keygen(NULL, NULL, "ED25519");
	if (!rsa1 || !rsa2 || !p256 || !p384 || !ed)
		abort();
	all_json = fmt("{\"keys\":[%s,%s,%s,%s,%s,%s]}", jwk_oct(hs, sizeof(hs), "h1", ""),
		       jwk_rsa(rsa1, "r1", ",\"use\":\"sig\""), jwk_rsa(rsa2, "r2", ""),
		       jwk_ec(p256, "P-256", "e256", "", 0), jwk_ec(p384, "P-384", "e384", "", 0),
		       jwk_ed(ed, "ed", ",\"key_ops\":[\"verify\"]"));
	all = set_of(all_json);
}

static void test_algorithms(void)
{
	char actor[JWT_ACTOR_MAX + 1];
	size_t i;

	CHECK(jwks_count(all) == 6);
	for (i = 0; i < NSIGNERS; i++) {
		struct signer k = signer_at(i);
		char *t = tok(&k, payload_ok());
		int ok = verify_with(all, &rules, t, NOW, actor) == JWT_OK;

		CHECK(ok);
		CHECK_STR(actor, "alice");
		if (!ok)
			fprintf(stderr, "  %s failed\n", k.alg);
		CHECK(verify(all, flip_sig(t, 0)) == JWT_BAD_SIGNATURE);
		CHECK(verify(all, flip_sig(t, 10)) == JWT_BAD_SIGNATURE);
		/* A changed payload byte breaks the signature too. */
		t = fmt("%s", t);
		*(strchr(t, '.') + 2) ^= 1;
		CHECK(verify(all, t) == JWT_BAD_SIGNATURE);
	}
}

static void test_bad_alg(void)
{
	const char *p = b64str(payload_ok());
	struct signer k = s_hs256;
	struct jwks *rsa_only;
	unsigned char nbytes[512];
	BIGNUM *n = NULL;
	BIO *bio;
	char *pem;
	long pemlen;

	CHECK(verify(all, fmt("%s.%s.", b64str("{\"alg\":\"none\",\"typ\":\"JWT\"}"), p)) ==
	      JWT_BAD_ALG);
	CHECK(verify(all, fmt("%s.%s.", b64str("{\"alg\":\"none\",\"kid\":\"h1\"}"), p)) ==
	      JWT_BAD_ALG);
	CHECK(verify(all, fmt("%s.%s.AAAA", b64str("{\"alg\":\"HS1024\"}"), p)) == JWT_BAD_ALG);
	CHECK(verify(all, fmt("%s.%s.AAAA", b64str("{\"alg\":\"hs256\"}"), p)) == JWT_BAD_ALG);

	/* The key-confusion attack: HS256 keyed with the RSA public key's bytes. */
	rsa_only = set_of(fmt("{\"keys\":[%s]}", jwk_rsa(rsa1, "r1", "")));
	if (EVP_PKEY_get_bn_param(rsa1, OSSL_PKEY_PARAM_RSA_N, &n) != 1)
		abort();
	k.secret = nbytes;
	k.slen = (size_t)BN_bn2bin(n, nbytes);
	BN_free(n);
	k.kid = "r1";
	CHECK(verify(rsa_only, tok(&k, payload_ok())) == JWT_BAD_ALG);
	k.kid = NULL;
	CHECK(verify(rsa_only, tok(&k, payload_ok())) == JWT_NO_KEY);
	bio = BIO_new(BIO_s_mem());
	if (!bio || PEM_write_bio_PUBKEY(bio, rsa1) != 1)
		abort();
	pemlen = BIO_get_mem_data(bio, &pem);
	k.secret = (const unsigned char *)pem;
	k.slen = (size_t)pemlen;
	k.kid = "r1";
	CHECK(verify(rsa_only, tok(&k, payload_ok())) == JWT_BAD_ALG);
	BIO_free(bio);
	jwks_free(rsa_only);

	/* An ES384 token naming the P-256 key; RS256 naming the Ed25519 key. */
	k = signer_at(8);
	k.kid = "e256";
	CHECK(verify(all, tok(&k, payload_ok())) == JWT_BAD_ALG);
	k = signer_at(3);
	k.kid = "ed";
	CHECK(verify(all, tok(&k, payload_ok())) == JWT_BAD_ALG);

	/* PS256 takes a salt as long as the digest, no other. */
	k = signer_at(6);
	k.salt = 20;
	CHECK(verify(all, tok(&k, payload_ok())) == JWT_BAD_SIGNATURE);
	k.salt = RSA_PSS_SALTLEN_MAX;
	CHECK(verify(all, tok(&k, payload_ok())) == JWT_BAD_SIGNATURE);
	k.salt = 32;
	CHECK(verify(all, tok(&k, payload_ok())) == JWT_OK);
}

static void test_key_selection(void)
{
	struct signer k = signer_at(3); /* RS256 */
	struct jwks *two, *mixed, *pinned;
	char actor[JWT_ACTOR_MAX + 1];

	k.pkey = rsa2;
	k.kid = "r2";
	CHECK(verify(all, tok(&k, payload_ok())) == JWT_OK);
	k.kid = "r1";
	CHECK(verify(all, tok(&k, payload_ok())) == JWT_BAD_SIGNATURE);
	k.kid = "nope";
	CHECK(verify(all, tok(&k, payload_ok())) == JWT_NO_KEY);
	k.kid = NULL;
	CHECK(verify(all, tok(&k, payload_ok())) == JWT_NO_KEY); /* r1 and r2 both fit */
	k = signer_at(9);					 /* EdDSA */
	k.kid = NULL;
	CHECK(verify(all, tok(&k, payload_ok())) == JWT_OK);

	two = set_of(fmt("{\"keys\":[%s,%s]}", jwk_rsa(rsa1, NULL, ""), jwk_rsa(rsa2, NULL, "")));
	k = signer_at(3);
	k.kid = NULL;
	CHECK(verify(two, tok(&k, payload_ok())) == JWT_NO_KEY);
	jwks_free(two);

	mixed = set_of(fmt("{\"keys\":[%s,%s]}", jwk_oct(hs, sizeof(hs), NULL, ""),
			   jwk_rsa(rsa1, NULL, "")));
	CHECK(verify_with(mixed, &rules, tok(&k, payload_ok()), NOW, actor) == JWT_OK);
	CHECK_STR(actor, "alice");
	k = s_hs256;
	k.kid = NULL;
	CHECK(verify(mixed, tok(&k, payload_ok())) == JWT_OK);
	jwks_free(mixed);

	/* A key's alg member pins the algorithm. */
	pinned = set_of(fmt("{\"keys\":[%s]}", jwk_rsa(rsa1, "r1", ",\"alg\":\"RS256\"")));
	k = signer_at(3);
	CHECK(verify(pinned, tok(&k, payload_ok())) == JWT_OK);
	k = signer_at(4); /* RS384 */
	CHECK(verify(pinned, tok(&k, payload_ok())) == JWT_BAD_ALG);
	k.alg = "PS256";
	CHECK(verify(pinned, tok(&k, payload_ok())) == JWT_BAD_ALG);
	k.alg = "RS384";
	k.kid = NULL;
	CHECK(verify(pinned, tok(&k, payload_ok())) == JWT_NO_KEY);
	jwks_free(pinned);
}

/* HS256 token of the payload, verified at NOW with rules r. */
static enum jwt_result claims_with(const struct jwt_rules *r, const char *payload, char *actor)
{
	return verify_with(all, r, tok(&s_hs256, payload), NOW, actor);
}

static enum jwt_result claims(const char *payload)
{
	return claims_with(&rules, payload, NULL);
}

static void test_times(void)
{
	struct jwt_claims c;
	const char *t;

	CHECK(claims(fmt("{\"sub\":\"a\",\"exp\":%lld}", (long long)NOW - 31)) == JWT_EXPIRED);
	CHECK(claims(fmt("{\"sub\":\"a\",\"exp\":%lld}", (long long)NOW - 30)) == JWT_EXPIRED);
	CHECK(claims(fmt("{\"sub\":\"a\",\"exp\":%lld}", (long long)NOW - 29)) == JWT_OK);
	CHECK(claims(fmt("{\"sub\":\"a\",\"nbf\":%lld}", (long long)NOW + 31)) == JWT_NOT_YET);
	CHECK(claims(fmt("{\"sub\":\"a\",\"nbf\":%lld}", (long long)NOW + 30)) == JWT_OK);
	CHECK(claims(fmt("{\"sub\":\"a\",\"iat\":%lld}", (long long)NOW + 100)) == JWT_NOT_YET);
	CHECK(claims(fmt("{\"sub\":\"a\",\"iat\":%lld}", (long long)NOW + 29)) == JWT_OK);
	CHECK(claims(fmt("{\"sub\":\"a\",\"exp\":%lld.75}", (long long)NOW + 1)) == JWT_OK);
	CHECK(claims("{\"sub\":\"a\",\"exp\":1e300,\"nbf\":-1e300}") == JWT_OK);
	CHECK(claims("{\"sub\":\"a\",\"exp\":99999999999999999999999}") == JWT_OK);
	CHECK(claims("{\"sub\":\"a\",\"exp\":-9223372036854775807}") == JWT_EXPIRED);
	CHECK(claims("{\"sub\":\"a\",\"exp\":\"soon\"}") == JWT_MALFORMED);
	CHECK(claims("{\"sub\":\"a\",\"nbf\":true}") == JWT_MALFORMED);
	CHECK(claims("{\"sub\":\"a\",\"iat\":null}") == JWT_MALFORMED);
	CHECK(claims(fmt("{\"sub\":\"a\",\"exp\":%lld,\"exp\":1}", (long long)NOW + 9)) ==
	      JWT_MALFORMED);

	t = tok(&s_hs256, fmt("{\"sub\":\"a\",\"exp\":%lld.5}", (long long)NOW + 100));
	CHECK(jwt_verify(all, &rules, t, strlen(t), NOW, &c) == JWT_OK);
	CHECK(c.exp == NOW + 100 && c.issuer == NULL);
	jwt_claims_clear(&c);
	CHECK(c.actor == NULL && c.exp == 0);
	t = tok(&s_hs256, "{\"sub\":\"a\"}");
	CHECK(jwt_verify(all, &rules, t, strlen(t), NOW, &c) == JWT_OK);
	CHECK(c.exp == 0);
	jwt_claims_clear(&c);
}

/* require_exp: a token without exp is refused; one with exp is judged by it as before. */
static void test_require_exp(void)
{
	struct jwt_rules r = rules;

	r.require_exp = 1;
	CHECK(claims_with(&r, "{\"sub\":\"a\"}", NULL) == JWT_NO_EXP);
	CHECK(claims_with(&r, "{\"sub\":\"a\",\"iat\":1}", NULL) == JWT_NO_EXP);
	CHECK(claims_with(&r, fmt("{\"sub\":\"a\",\"exp\":%lld}", (long long)NOW + 60), NULL) ==
	      JWT_OK);
	CHECK(claims_with(&r, fmt("{\"sub\":\"a\",\"exp\":%lld}", (long long)NOW - 60), NULL) ==
	      JWT_EXPIRED);
	CHECK(claims_with(&r, "{\"sub\":\"a\",\"exp\":null}", NULL) == JWT_MALFORMED);
	CHECK(claims("{\"sub\":\"a\"}") == JWT_OK);
	CHECK_STR(jwt_result_name(JWT_NO_EXP), "no-exp");
}

static void test_issuer_audience(void)
{
	struct jwt_rules r = rules;
	struct jwt_claims c;
	const char *t;

	r.issuer = "https://idp.example";
	t = tok(&s_hs256, "{\"sub\":\"a\",\"iss\":\"https://idp.example\"}");
	CHECK(jwt_verify(all, &r, t, strlen(t), NOW, &c) == JWT_OK);
	CHECK_STR(c.issuer, "https://idp.example");
	jwt_claims_clear(&c);
	CHECK(claims_with(&r, "{\"sub\":\"a\",\"iss\":\"https://evil.example\"}", NULL) ==
	      JWT_BAD_ISSUER);
	CHECK(claims_with(&r, "{\"sub\":\"a\",\"iss\":\"https://idp.example/\"}", NULL) ==
	      JWT_BAD_ISSUER);
	CHECK(claims_with(&r, "{\"sub\":\"a\"}", NULL) == JWT_BAD_ISSUER);
	CHECK(claims("{\"sub\":\"a\",\"iss\":5}") == JWT_MALFORMED);
	t = tok(&s_hs256, "{\"sub\":\"a\",\"iss\":\"other\"}");
	CHECK(jwt_verify(all, &rules, t, strlen(t), NOW, &c) == JWT_OK);
	CHECK_STR(c.issuer, "other");
	jwt_claims_clear(&c);

	r = rules;
	r.audience = "api";
	CHECK(claims_with(&r, "{\"sub\":\"a\",\"aud\":\"api\"}", NULL) == JWT_OK);
	CHECK(claims_with(&r, "{\"sub\":\"a\",\"aud\":[\"web\",7,\"api\"]}", NULL) == JWT_OK);
	CHECK(claims_with(&r, "{\"sub\":\"a\",\"aud\":[\"web\"]}", NULL) == JWT_BAD_AUDIENCE);
	CHECK(claims_with(&r, "{\"sub\":\"a\",\"aud\":\"apix\"}", NULL) == JWT_BAD_AUDIENCE);
	CHECK(claims_with(&r, "{\"sub\":\"a\",\"aud\":[]}", NULL) == JWT_BAD_AUDIENCE);
	CHECK(claims_with(&r, "{\"sub\":\"a\"}", NULL) == JWT_BAD_AUDIENCE);
	CHECK(claims("{\"sub\":\"a\",\"aud\":7}") == JWT_OK);
}

/* Whether the actor of the HS256 token of payload is an integer (-1: it does not verify). */
static int actor_integer(const char *payload)
{
	const char *t = tok(&s_hs256, payload);
	struct jwt_claims c;
	int integer;

	if (jwt_verify(all, &rules, t, strlen(t), NOW, &c) != JWT_OK)
		return -1;
	integer = c.actor_integer;
	jwt_claims_clear(&c);
	return integer;
}

static void test_actor(void)
{
	struct jwt_rules r = rules;
	char actor[JWT_ACTOR_MAX + 1], long_sub[JWT_ACTOR_MAX + 2];

	CHECK(claims_with(&rules, "{\"sub\":12345}", actor) == JWT_OK);
	CHECK_STR(actor, "12345");
	CHECK(actor_integer("{\"sub\":12345}") == 1);
	CHECK(actor_integer("{\"sub\":\"12345\"}") == 0);
	CHECK(claims_with(&rules, "{\"sub\":-7}", actor) == JWT_OK);
	CHECK_STR(actor, "-7");
	CHECK(claims_with(&rules, "{\"sub\":\"caf\\u00e9\"}", actor) == JWT_OK);
	CHECK_STR(actor, "caf\xc3\xa9");
	CHECK(claims("{\"name\":\"a\"}") == JWT_NO_CLAIM);
	CHECK(claims("{\"sub\":{}}") == JWT_NO_CLAIM);
	CHECK(claims("{\"sub\":[\"a\"]}") == JWT_NO_CLAIM);
	CHECK(claims("{\"sub\":\"\"}") == JWT_NO_CLAIM);
	CHECK(claims("{\"sub\":1.5}") == JWT_NO_CLAIM);
	CHECK(claims("{\"sub\":true}") == JWT_NO_CLAIM);
	CHECK(claims("{\"sub\":null}") == JWT_NO_CLAIM);
	CHECK(claims("{\"sub\":\"a\",\"sub\":\"b\"}") == JWT_MALFORMED);
	CHECK(claims("{\"sub\":\"a\\u0000b\"}") == JWT_MALFORMED);
	/* What yajl would repair never becomes an actor: "a\ud800" is not "a?". */
	CHECK(claims("{\"sub\":\"a\\ud800\"}") == JWT_MALFORMED);
	CHECK(claims("{\"sub\":\"a\\ud800b\"}") == JWT_MALFORMED);
	CHECK(claims("{\"sub\":\"a\\uDBFF\\u0041\"}") == JWT_MALFORMED);
	CHECK(claims("{\"sub\":\"a\\udc00\"}") == JWT_MALFORMED);
	CHECK(claims("{\"sub\":\"\\udc00\\ud800\"}") == JWT_MALFORMED);
	CHECK(claims("{\"sub\":\"a\",\"name\":\"\\ud800\"}") == JWT_MALFORMED);
	CHECK(claims("{\"sub\":\"a\",\"\\ud800\":1}") == JWT_MALFORMED);
	CHECK(claims_with(&rules, "{\"sub\":\"a?\"}", actor) == JWT_OK);
	CHECK_STR(actor, "a?");
	CHECK(claims_with(&rules, "{\"sub\":\"a\\ud83d\\ude00\"}", actor) == JWT_OK);
	CHECK_STR(actor, "a\xf0\x9f\x98\x80");
	CHECK(claims_with(&rules, "{\"sub\":\"\\\\ud800\"}", actor) == JWT_OK);
	CHECK_STR(actor, "\\ud800");
	memset(long_sub, 'x', JWT_ACTOR_MAX);
	long_sub[JWT_ACTOR_MAX] = '\0';
	CHECK(claims(fmt("{\"sub\":\"%s\"}", long_sub)) == JWT_OK);
	long_sub[JWT_ACTOR_MAX] = 'x';
	long_sub[JWT_ACTOR_MAX + 1] = '\0';
	CHECK(claims(fmt("{\"sub\":\"%s\"}", long_sub)) == JWT_NO_CLAIM);

	r.claim = "email";
	CHECK(claims_with(&r, "{\"sub\":\"a\",\"email\":\"a@example.com\"}", actor) == JWT_OK);
	CHECK_STR(actor, "a@example.com");
	CHECK(claims_with(&r, "{\"sub\":\"a\"}", NULL) == JWT_NO_CLAIM);
}

static void test_malformed(void)
{
	const char *good = tok(&s_hs256, payload_ok()), *h = b64str("{\"alg\":\"HS256\"}");
	const char *p = b64str(payload_ok()), *dot = strchr(good, '.');
	const char *deep_open = "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[";
	const char *deep_close = "]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]";
	unsigned char zero[63] = {0};
	struct signer k = s_hs256;
	char *t, *big;
	size_t pad;

	CHECK(verify(all, good) == JWT_OK);
	CHECK(verify(all, "") == JWT_MALFORMED);
	CHECK(verify(all, "..") == JWT_MALFORMED);
	CHECK(verify(all, fmt("%s.%s", h, p)) == JWT_MALFORMED);
	CHECK(verify(all, fmt("%s.x", good)) == JWT_MALFORMED);
	CHECK(verify(all, fmt("*%s", good + 1)) == JWT_MALFORMED);
	CHECK(verify(all, fmt("%s=%s", h, dot)) == JWT_MALFORMED);
	CHECK(verify(all, fmt("%s==", good)) == JWT_MALFORMED);
	CHECK(verify(all, fmt("+%s", good + 1)) == JWT_MALFORMED);
	CHECK(verify(all, fmt("/%s", good + 1)) == JWT_MALFORMED);
	CHECK(verify(all, fmt("%sA%s", h, dot)) == JWT_MALFORMED); /* length 4n + 1 */
	CHECK(verify(all, fmt("%s %s", h, dot)) == JWT_MALFORMED);
	/* A set unused bit in the last digit of the 32-byte signature. */
	t = fmt("%s", good);
	t[strlen(t) - 1] = b64_digits[(strchr(b64_digits, t[strlen(t) - 1]) - b64_digits) ^ 1];
	CHECK(verify(all, t) == JWT_MALFORMED);

	CHECK(verify(all, sign(&k, "[\"alg\",\"HS256\"]", payload_ok())) == JWT_MALFORMED);
	CHECK(verify(all, sign(&k, "{\"alg\":\"HS256\"", payload_ok())) == JWT_MALFORMED);
	CHECK(verify(all, sign(&k, "{\"alg\":\"HS256\",\"crit\":[\"exp\"]}", payload_ok())) ==
	      JWT_MALFORMED);
	CHECK(verify(all, sign(&k, "{\"alg\":\"HS256\",\"typ\":\"JOSE\"}", payload_ok())) ==
	      JWT_MALFORMED);
	CHECK(verify(all, sign(&k, "{\"alg\":\"HS256\",\"typ\":1}", payload_ok())) == JWT_MALFORMED);
	CHECK(verify(all, sign(&k, "{\"alg\":\"HS256\",\"typ\":\"jwt\"}", payload_ok())) == JWT_OK);
	CHECK(verify(all, sign(&k, "{\"alg\":\"HS256\",\"typ\":\"at+jwt\"}", payload_ok())) ==
	      JWT_OK);
	CHECK(verify(all, sign(&k, "{\"alg\":\"HS256\",\"kid\":5}", payload_ok())) == JWT_MALFORMED);
	CHECK(verify(all, sign(&k, "{\"typ\":\"JWT\"}", payload_ok())) == JWT_MALFORMED);
	CHECK(verify(all, sign(&k, "{\"alg\":256}", payload_ok())) == JWT_MALFORMED);
	CHECK(verify(all, sign(&k, "{\"alg\":\"HS256\",\"alg\":\"none\"}", payload_ok())) ==
	      JWT_MALFORMED);
	CHECK(verify(all, sign(&k, "{\"alg\":\"HS256\"} /* x */", payload_ok())) == JWT_MALFORMED);
	CHECK(verify(all, sign(&k, "{\"alg\":\"HS256\"}", "[1]")) == JWT_MALFORMED);
	CHECK(verify(all, sign(&k, "{\"alg\":\"HS256\"}", "{\"sub\":")) == JWT_MALFORMED);
	CHECK(verify(all, sign(&k, "{\"alg\":\"HS256\"}", "")) == JWT_MALFORMED);
	/* The payload object and 31 arrays in it are allowed, 32 are not. */
	CHECK(verify(all, sign(&k, "{\"alg\":\"HS256\"}",
			       fmt("{\"sub\":\"a\",\"x\":%.31s1%.31s}", deep_open, deep_close))) ==
	      JWT_OK);
	CHECK(verify(all, sign(&k, "{\"alg\":\"HS256\"}",
			       fmt("{\"sub\":\"a\",\"x\":%.32s1%.32s}", deep_open, deep_close))) ==
	      JWT_MALFORMED);

	/* An ECDSA signature of the wrong length is a bad signature. */
	k = signer_at(7);
	t = tok(&k, payload_ok());
	*strrchr(t, '.') = '\0';
	CHECK(verify(all, fmt("%s.%s", t, b64url(zero, sizeof(zero)))) == JWT_BAD_SIGNATURE);
	CHECK(verify(all, fmt("%s.", t)) == JWT_BAD_SIGNATURE);

	/* JWT_TOKEN_MAX bytes are allowed, one more is not. */
	big = keep(malloc(JWT_TOKEN_MAX + 1));
	for (pad = 5900;; pad++) {
		memset(big, 'p', pad);
		big[pad] = '\0';
		t = tok(&s_hs256, fmt("{\"sub\":\"a\",\"pad\":\"%s\"}", big));
		if (strlen(t) >= JWT_TOKEN_MAX - 2)
			break;
	}
	CHECK(strlen(t) <= JWT_TOKEN_MAX && verify(all, t) == JWT_OK);
	for (;; pad++) {
		memset(big, 'p', pad);
		big[pad] = '\0';
		t = tok(&s_hs256, fmt("{\"sub\":\"a\",\"pad\":\"%s\"}", big));
		if (strlen(t) > JWT_TOKEN_MAX)
			break;
	}
	CHECK(verify(all, t) == JWT_MALFORMED);
}

/* jwks_parse() of json must fail with a one-line message; returns it. */
static const char *jwks_error(const char *json)
{
	static char err[256];
	struct jwks *keys = (struct jwks *)&err; /* must be reset to NULL */

	err[0] = '\0';
	if (jwks_parse(json, strlen(json), &keys, err, sizeof(err)) == 0) {
		jwks_free(keys);
		return "(parsed)";
	}
	if (keys != NULL || err[0] == '\0' || strchr(err, '\n'))
		return "(bad failure)";
	return err;
}

static void test_jwks_errors(void)
{
	const char *oct = jwk_oct(hs, sizeof(hs), NULL, "");
	EVP_PKEY *small = EVP_PKEY_Q_keygen(NULL, NULL, "RSA", (size_t)1024);
	struct jwks *keys;
	char *many;
	int i;

	CHECK_STR(jwks_error("{\"keys\":[]}"), "empty key set");
	CHECK_STR(jwks_error("{\"keys\":[{\"kty\":\"XYZ\"}]}"), "key 1: unknown kty \"XYZ\"");
	CHECK_STR(jwks_error("{\"keys\":[{\"kty\":\"X\\nY\"}]}"), "key 1: unknown kty \"X?Y\"");
	CHECK_STR(jwks_error("{\"keys\":[{\"kty\":\"EC\",\"crv\":\"P-521\",\"x\":\"AA\",\"y\":"
			     "\"AA\"}]}"),
		  "key 1: unknown crv \"P-521\"");
	CHECK_STR(jwks_error("{\"keys\":[{\"kty\":\"OKP\",\"crv\":\"Ed448\",\"x\":\"AA\"}]}"),
		  "key 1: unknown crv \"Ed448\"");
	CHECK_STR(jwks_error("{\"keys\":[{\"kty\":\"EC\",\"x\":\"AA\"}]}"),
		  "key 1: EC key without \"crv\"");
	CHECK_STR(jwks_error(fmt("{\"keys\":[%s,{\"kty\":\"RSA\",\"e\":\"AQAB\"}]}", oct)),
		  "key 2: RSA key without \"n\"");
	if (!small)
		abort();
	CHECK_STR(jwks_error(fmt("{\"keys\":[%s]}", jwk_rsa(small, NULL, ""))),
		  "key 1: RSA key of 1024 bits (2048 to 16384 allowed)");
	EVP_PKEY_free(small);
	CHECK_STR(jwks_error(fmt("{\"keys\":[%s]}", jwk_ec(p256, "P-256", NULL, "", 1))),
		  "key 1: not a valid EC public key (point not on the curve?)");
	CHECK_STR(jwks_error(fmt("{\"keys\":[%s]}", jwk_ec(p384, "P-256", NULL, "", 0))),
		  "key 1: P-256 coordinates must be 32 bytes");
	CHECK_STR(jwks_error(fmt("{\"keys\":[%s,%s]}", jwk_rsa(rsa1, "same", ""),
				 jwk_ec(p256, "P-256", "same", "", 0))),
		  "key 2: kid used twice");
	CHECK_STR(jwks_error(fmt("{\"keys\":[%s]}", jwk_oct(hs, 15, NULL, ""))),
		  "key 1: oct key of 15 bytes (at least 16)");
	CHECK_STR(jwks_error("{\"keys\":[{\"kty\":\"oct\",\"k\":\"AAAA=\"}]}"),
		  "key 1: \"k\" is not base64url");
	CHECK_STR(jwks_error("{\"keys\":[{\"kty\":\"oct\",\"k\":\"\"}]}"),
		  "key 1: \"k\" is not base64url");
	CHECK_STR(jwks_error(fmt("{\"keys\":[%s]}", jwk_oct(hs, sizeof(hs), NULL,
							   ",\"alg\":\"RS256\""))),
		  "key 1: alg RS256 does not fit a oct key");
	CHECK_STR(jwks_error(fmt("{\"keys\":[%s]}", jwk_oct(hs, sizeof(hs), NULL,
							   ",\"alg\":\"none\""))),
		  "key 1: unknown alg \"none\"");
	CHECK_STR(jwks_error(fmt("{\"keys\":[%s]}", jwk_oct(hs, sizeof(hs), NULL,
							   ",\"use\":\"both\""))),
		  "key 1: unknown use \"both\"");
	CHECK_STR(jwks_error(fmt("{\"keys\":[%s]}", jwk_oct(hs, sizeof(hs), "k", ",\"kid\":\"j\""))),
		  "key 1: \"kid\" appears twice");
	CHECK_STR(jwks_error(fmt("{\"keys\":[%s]}", jwk_oct(hs, sizeof(hs), NULL,
							   ",\"use\":\"enc\""))),
		  "no key for signatures (all have use \"enc\")");
	CHECK_STR(jwks_error("{\"keys\":[5]}"), "key 1: not an object");
	CHECK_STR(jwks_error("{\"keys\":[{\"k\":\"AAAA\"}]}"), "key 1: no \"kty\"");
	CHECK_STR(jwks_error("{\"keys\":{}}"), "not an object with one \"keys\" array");
	CHECK_STR(jwks_error("[]"), "not an object with one \"keys\" array");
	CHECK(strncmp(jwks_error("not json"), "not JSON", 8) == 0);
	CHECK(strncmp(jwks_error("{\"keys\":[]} x"), "not JSON", 8) == 0);
	CHECK(strncmp(jwks_error("{\"keys\":[] /* c */}"), "not JSON", 8) == 0);
	CHECK(strncmp(jwks_error(""), "not JSON", 8) == 0);
	many = fmt("{\"keys\":[%s", oct);
	for (i = 1; i < JWKS_KEYS_MAX + 1; i++)
		many = fmt("%s,%s", many, oct);
	CHECK_STR(jwks_error(fmt("%s]}", many)), "more than 64 keys");
	CHECK(jwks_parse("{\"keys\":[]}", 3, &keys, NULL, 0) == -1 && keys == NULL);

	/* Keys for encryption are left out; private members are ignored. */
	keys = set_of(fmt("{\"keys\":[%s,%s]}",
			  jwk_oct(hs_other, sizeof(hs_other), "e", ",\"use\":\"enc\""),
			  jwk_rsa(rsa1, "e", ",\"d\":\"AAAA\",\"p\":\"x\",\"alg\":\"PS256\"")));
	CHECK(jwks_count(keys) == 1);
	jwks_free(keys);
	jwks_free(NULL);
}

static enum jwt_result cached(struct jwt_cache *c, const struct jwks *keys,
			      const struct jwt_rules *r, const char *token, int64_t now,
			      char *actor)
{
	struct jwt_claims cl;
	enum jwt_result res = jwt_cache_verify(c, keys, r, token, strlen(token), now, &cl);

	if (actor)
		snprintf(actor, JWT_ACTOR_MAX + 1, "%s", cl.actor ? cl.actor : "");
	jwt_claims_clear(&cl);
	return res;
}

static void test_cache(void)
{
	struct jwt_rules r = {NULL, NULL, "sub", 0, 0}, same = {NULL, NULL, NULL, 0, 0}, iss = r;
	struct jwt_cache *c = jwt_cache_new(16), *small = jwt_cache_new(4);
	struct jwt_claims a, b;
	struct jwks *k1, *k2, *k3;
	const char *t, *tokens[100];
	char actor[JWT_ACTOR_MAX + 1], claim[] = "sub";
	int i, bad = 0;

	CHECK(jwt_cache_new(0) == NULL);
	if (!c || !small)
		abort();
	t = tok(&s_hs256, fmt("{\"sub\":\"bob\",\"iss\":\"i\",\"exp\":%lld}", (long long)NOW + 100));
	CHECK(jwt_cache_verify(c, all, &r, t, strlen(t), NOW, &a) == JWT_OK);
	CHECK(jwt_cache_verify(c, all, &r, t, strlen(t), NOW + 1, &b) == JWT_OK);
	CHECK_STR(b.actor, "bob");
	CHECK_STR(b.issuer, "i");
	CHECK(a.actor != b.actor && a.issuer != b.issuer && b.exp == NOW + 100);
	jwt_claims_clear(&a);
	jwt_claims_clear(&b);
	CHECK(cached(c, all, &r, t, NOW + 99, NULL) == JWT_OK);
	CHECK(cached(c, all, &r, t, NOW + 100, NULL) == JWT_EXPIRED);
	CHECK(cached(c, all, &r, t, NOW + 1000, NULL) == JWT_EXPIRED);

	/* Rules are compared by content. */
	CHECK(cached(c, all, &r, t, NOW, NULL) == JWT_OK);
	iss.require_exp = 1;
	CHECK(cached(c, all, &iss, tok(&s_hs256, "{\"sub\":\"bob\"}"), NOW, NULL) == JWT_NO_EXP);
	iss.require_exp = 0;
	CHECK(cached(c, all, &iss, tok(&s_hs256, "{\"sub\":\"bob\"}"), NOW, NULL) == JWT_OK);
	iss.require_exp = 1;
	CHECK(cached(c, all, &iss, tok(&s_hs256, "{\"sub\":\"bob\"}"), NOW, NULL) == JWT_NO_EXP);
	iss.require_exp = 0;
	iss.issuer = "other";
	CHECK(cached(c, all, &iss, t, NOW, NULL) == JWT_BAD_ISSUER);
	same.claim = claim;
	CHECK(cached(c, all, &same, t, NOW, actor) == JWT_OK);
	CHECK_STR(actor, "bob");
	same.leeway_s = 1000;
	CHECK(cached(c, all, &same, t, NOW + 1000, NULL) == JWT_OK);
	CHECK(cached(c, all, &r, t, NOW + 1000, NULL) == JWT_EXPIRED);

	/* Key sets are told apart by serial: a new set at the old address is a miss. */
	k1 = set_of(all_json);
	k2 = set_of(all_json);
	CHECK(cached(c, k1, &r, t, NOW, NULL) == JWT_OK);
	CHECK(cached(c, k2, &r, t, NOW, NULL) == JWT_OK);
	jwks_free(k1);
	k3 = set_of(fmt("{\"keys\":[%s]}", jwk_oct(hs_other, sizeof(hs_other), "h1", "")));
	CHECK(cached(c, k3, &r, t, NOW, NULL) == JWT_BAD_SIGNATURE);
	jwks_free(k2);
	jwks_free(k3);

	/* An integer subject is one on a hit too. */
	t = tok(&s_hs256, "{\"sub\":42}");
	for (i = 0; i < 2; i++) {
		CHECK(jwt_cache_verify(c, all, &r, t, strlen(t), NOW, &a) == JWT_OK);
		CHECK(a.actor_integer == 1);
		CHECK_STR(a.actor, "42");
		jwt_claims_clear(&a);
	}

	/* A token without exp, and a failure, which is never cached. */
	t = tok(&s_hs256, "{\"sub\":\"carol\"}");
	CHECK(cached(c, all, &r, t, NOW, NULL) == JWT_OK);
	CHECK(cached(c, all, &r, t, NOW + JWT_CACHE_NO_EXP_S + 1, actor) == JWT_OK);
	CHECK_STR(actor, "carol");
	t = tok(&s_hs256, fmt("{\"sub\":\"dan\",\"nbf\":%lld}", (long long)NOW + 100));
	CHECK(cached(c, all, &r, t, NOW, NULL) == JWT_NOT_YET);
	CHECK(cached(c, all, &r, t, NOW + 100, NULL) == JWT_OK);
	CHECK(cached(c, all, &r, flip_sig(t, 3), NOW + 100, NULL) == JWT_BAD_SIGNATURE);

	/* Four entries, a hundred tokens: every answer still right. */
	for (i = 0; i < 100; i++)
		tokens[i] = tok(&s_hs256, fmt("{\"sub\":\"user-%d\",\"exp\":%lld}", i,
					      (long long)NOW + 100 + i));
	for (i = 0; i < 300; i++) {
		if (cached(small, all, &r, tokens[i % 100], NOW, actor) != JWT_OK ||
		    strcmp(actor, fmt("user-%d", i % 100)) != 0)
			bad++;
	}
	for (i = 0; i < 100; i++) {
		if (cached(small, all, &r, tokens[i], NOW + 100 + i, NULL) != JWT_EXPIRED)
			bad++;
	}
	CHECK(bad == 0);
	jwt_cache_free(c);
	jwt_cache_free(small);
	jwt_cache_free(NULL);
}

/* Verifies every algorithm's token THREAD_ROUNDS times; returns the failures. */
static void *verify_thread(void *arg)
{
	const char **tokens = arg;
	size_t i, round;
	intptr_t bad = 0;

	for (round = 0; round < THREAD_ROUNDS; round++) {
		for (i = 0; i < NSIGNERS; i++)
			bad += verify(all, tokens[i]) != JWT_OK;
	}
	return (void *)bad;
}

static void test_threads(void)
{
	const char *tokens[NSIGNERS];
	pthread_t th[THREADS];
	void *bad;
	size_t i;
	int failures = 0;

	for (i = 0; i < NSIGNERS; i++) {
		struct signer k = signer_at(i);

		tokens[i] = tok(&k, payload_ok());
	}
	for (i = 0; i < THREADS; i++) {
		if (pthread_create(&th[i], NULL, verify_thread, tokens) != 0)
			abort();
	}
	for (i = 0; i < THREADS; i++) {
		pthread_join(th[i], &bad);
		failures += (int)(intptr_t)bad;
	}
	CHECK(failures == 0);
}

static void test_names(void)
{
	CHECK_STR(jwt_result_name(JWT_OK), "ok");
	CHECK_STR(jwt_result_name(JWT_MALFORMED), "malformed");
	CHECK_STR(jwt_result_name(JWT_BAD_ALG), "bad-alg");
	CHECK_STR(jwt_result_name(JWT_NOMEM), "out-of-memory");
	CHECK_STR(jwt_result_name((enum jwt_result)99), "unknown");
}

int main(void)
{
	int i;

	setup();
	test_algorithms();
	test_bad_alg();
	test_key_selection();
	test_times();
	test_require_exp();
	test_issuer_audience();
	test_actor();
	test_malformed();
	test_jwks_errors();
	test_cache();
	test_threads();
	test_names();

	jwks_free(all);
	EVP_PKEY_free(rsa1);
	EVP_PKEY_free(rsa2);
	EVP_PKEY_free(p256);
	EVP_PKEY_free(p384);
	EVP_PKEY_free(ed);
	for (i = 0; i < narena; i++)
		free(arena[i]);
	UNIT_DONE("jwt");
}
