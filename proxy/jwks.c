/*
 * JSON Web Key Sets (RFC 7517) and the JWS signatures (RFC 7515) of the
 * algorithms of RFC 7518 and RFC 8037 that idemproxy accepts.
 *
 * A key set is parsed once into OpenSSL keys and never changes, so any
 * number of threads may verify against it; each verification makes its own
 * EVP_MD_CTX. A key has one type (kty and crv together) and every algorithm
 * fits exactly one type, so an HS256 token is never checked with an RSA
 * key's bytes as the HMAC secret (the key-confusion attack).
 *
 * The document goes through yajl_tree after json_tree_safe(); a member that
 * is read here must appear once only.
 */
#include "proxy/jwks.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/ec.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/param_build.h>
#include <openssl/rsa.h>
#include <yajl/yajl_tree.h>

#include "proxy/base64.h"
#include "proxy/json.h"

#define JWKS_TEXT_MAX	   (1 << 20) /* longest JWKS document */
#define JWK_OCT_MIN	   16	     /* shortest HMAC secret */
#define JWK_RSA_MIN_BITS   2048
#define JWK_RSA_MAX_BITS   16384 /* OpenSSL's own limit for RSA verification */
#define JWK_COORD_MAX	   48	 /* P-384 */
#define JWK_PRINT_MAX	   32	 /* bytes of a document's string quoted in a message */
#define JWKS_YAJL_ERR_SIZE 256

/* What a key is, from its kty and crv; each algorithm needs one of these. */
enum jwk_type { JWK_OCT, JWK_RSA, JWK_P256, JWK_P384, JWK_ED25519, JWK_TYPES };

static const struct jwk_type_info {
	const char *kty, *crv; /* crv NULL: the kty has none */
	const char *ossl;      /* OpenSSL key type for EVP_PKEY_fromdata() */
	size_t coord;	       /* bytes of a coordinate (EC) or of the public key (OKP) */
} jwk_types[JWK_TYPES] = {
	[JWK_OCT] = {"oct", NULL, NULL, 0},
	[JWK_RSA] = {"RSA", NULL, "RSA", 0},
	[JWK_P256] = {"EC", "P-256", "EC", 32},
	[JWK_P384] = {"EC", "P-384", "EC", 48},
	[JWK_ED25519] = {"OKP", "Ed25519", "ED25519", 32},
};

static const struct jws_alg {
	const char *name;
	enum jwk_type type;
	const EVP_MD *(*md)(void); /* NULL for EdDSA, which hashes by itself */
	int pss;		   /* RSASSA-PSS, MGF1 with md, salt as long as the digest */
} jws_algs[] = {
	{"HS256", JWK_OCT, EVP_sha256, 0},   {"HS384", JWK_OCT, EVP_sha384, 0},
	{"HS512", JWK_OCT, EVP_sha512, 0},   {"RS256", JWK_RSA, EVP_sha256, 0},
	{"RS384", JWK_RSA, EVP_sha384, 0},   {"RS512", JWK_RSA, EVP_sha512, 0},
	{"PS256", JWK_RSA, EVP_sha256, 1},   {"ES256", JWK_P256, EVP_sha256, 0},
	{"ES384", JWK_P384, EVP_sha384, 0},  {"EdDSA", JWK_ED25519, NULL, 0},
};

#define JWS_NALGS (sizeof(jws_algs) / sizeof(jws_algs[0]))

struct jwk {
	enum jwk_type type;
	const struct jws_alg *alg; /* the key's alg member, NULL when absent */
	char *kid;		   /* NULL when absent */
	unsigned char *secret;	   /* oct */
	size_t secret_len;
	EVP_PKEY *pkey; /* the others */
};

struct jwks {
	uint64_t serial; /* unique per jwks_parse() result, never 0 */
	int n;
	struct jwk keys[];
};

static uint64_t jwks_last_serial;

/* Writes the message into err (when there is room for any); returns -1. */
static int jwk_err(char *err, size_t errlen, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static int jwk_err(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	if (errlen == 0)
		return -1;
	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
	return -1;
}

/*
 * At most JWK_PRINT_MAX bytes of s into buf (JWK_PRINT_MAX + 1 bytes), each
 * byte that is not printable ASCII as '?', so a message stays one line.
 */
static const char *jwk_printable(const char *s, char *buf)
{
	size_t i;

	for (i = 0; s[i] && i < JWK_PRINT_MAX; i++)
		buf[i] = s[i] >= 0x20 && s[i] < 0x7f ? s[i] : '?';
	buf[i] = '\0';
	return buf;
}

const struct jws_alg *jws_alg_find(const char *name)
{
	size_t i;

	for (i = 0; i < JWS_NALGS; i++) {
		if (strcmp(jws_algs[i].name, name) == 0)
			return &jws_algs[i];
	}
	return NULL;
}

/*
 * The string member name of key idx in *out (NULL when absent; it lives as
 * long as v). Returns 0, or -1 with a message when it is repeated or not a
 * string.
 */
static int jwk_string(yajl_val v, const char *name, int idx, const char **out, char *err,
		      size_t errlen)
{
	yajl_val m;

	*out = NULL;
	if (json_member(v, name, &m) < 0)
		return jwk_err(err, errlen, "key %d: \"%s\" appears twice", idx, name);
	if (m && !YAJL_IS_STRING(m))
		return jwk_err(err, errlen, "key %d: \"%s\" is not a string", idx, name);
	*out = m ? m->u.string : NULL;
	return 0;
}

/*
 * The base64url member name of key idx, decoded into a malloc'd *out of
 * *len bytes (the caller frees it). Returns 0, or -1 with a message when it
 * is absent, empty or not base64url, or when out of memory.
 */
static int jwk_bytes(yajl_val v, const char *name, int idx, enum jwk_type type,
		     unsigned char **out, size_t *len, char *err, size_t errlen)
{
	const char *s;
	size_t n;

	if (jwk_string(v, name, idx, &s, err, errlen) < 0)
		return -1;
	if (!s)
		return jwk_err(err, errlen, "key %d: %s key without \"%s\"", idx,
			       jwk_types[type].kty, name);
	n = strlen(s);
	*out = malloc(BASE64_DECODED_MAX(n));
	if (!*out)
		return jwk_err(err, errlen, "out of memory");
	if (base64_decode(s, n, BASE64_URL, *out, BASE64_DECODED_MAX(n), len) < 0 || *len == 0) {
		free(*out);
		*out = NULL;
		return jwk_err(err, errlen, "key %d: \"%s\" is not base64url", idx, name);
	}
	return 0;
}

/*
 * Builds key->pkey, an OpenSSL public key of the key's type from params, and checks
 * it (for RSA: n odd, e odd and at least 65537, no small factors; for EC:
 * the point on the curve). Returns 0, or -1.
 */
static int jwk_fromdata(struct jwk *key, OSSL_PARAM *params)
{
	EVP_PKEY_CTX *ctx = EVP_PKEY_CTX_new_from_name(NULL, jwk_types[key->type].ossl, NULL);
	EVP_PKEY_CTX *check = NULL;
	int rc = -1;

	if (!ctx || EVP_PKEY_fromdata_init(ctx) != 1 ||
	    EVP_PKEY_fromdata(ctx, &key->pkey, EVP_PKEY_PUBLIC_KEY, params) != 1)
		goto out;
	check = EVP_PKEY_CTX_new_from_pkey(NULL, key->pkey, NULL);
	if (check && EVP_PKEY_public_check(check) == 1)
		rc = 0;
out:
	EVP_PKEY_CTX_free(check);
	EVP_PKEY_CTX_free(ctx);
	ERR_clear_error();
	return rc;
}

/*
 * The public key of an RSA, EC or OKP key idx from its members into
 * key->pkey. Returns 0, or -1 with a message.
 */
static int jwk_public(yajl_val v, int idx, struct jwk *key, char *err, size_t errlen)
{
	const struct jwk_type_info *t = &jwk_types[key->type];
	unsigned char *a = NULL, *b = NULL, point[1 + 2 * JWK_COORD_MAX];
	size_t alen = 0, blen = 0;
	BIGNUM *n = NULL, *e = NULL;
	OSSL_PARAM_BLD *bld = OSSL_PARAM_BLD_new();
	OSSL_PARAM *params = NULL;
	int ok = bld != NULL, rc = -1;

	if (key->type == JWK_RSA) {
		if (jwk_bytes(v, "n", idx, key->type, &a, &alen, err, errlen) < 0 ||
		    jwk_bytes(v, "e", idx, key->type, &b, &blen, err, errlen) < 0)
			goto out;
		n = BN_bin2bn(a, (int)alen, NULL);
		e = BN_bin2bn(b, (int)blen, NULL);
		ok = ok && n && e;
		if (ok && (BN_num_bits(n) < JWK_RSA_MIN_BITS || BN_num_bits(n) > JWK_RSA_MAX_BITS)) {
			jwk_err(err, errlen, "key %d: RSA key of %d bits (%d to %d allowed)", idx,
				BN_num_bits(n), JWK_RSA_MIN_BITS, JWK_RSA_MAX_BITS);
			goto out;
		}
		ok = ok && OSSL_PARAM_BLD_push_BN(bld, OSSL_PKEY_PARAM_RSA_N, n) &&
		     OSSL_PARAM_BLD_push_BN(bld, OSSL_PKEY_PARAM_RSA_E, e);
	} else {
		/* EC: the uncompressed point 04 || x || y; OKP: x is the key. */
		if (jwk_bytes(v, "x", idx, key->type, &a, &alen, err, errlen) < 0 ||
		    (key->type != JWK_ED25519 &&
		     jwk_bytes(v, "y", idx, key->type, &b, &blen, err, errlen) < 0))
			goto out;
		if (alen != t->coord || (b && blen != t->coord)) {
			jwk_err(err, errlen, "key %d: %s coordinates must be %zu bytes", idx, t->crv,
				t->coord);
			goto out;
		}
		if (key->type == JWK_ED25519) {
			ok = ok && OSSL_PARAM_BLD_push_octet_string(bld, OSSL_PKEY_PARAM_PUB_KEY, a,
								    alen);
		} else {
			point[0] = POINT_CONVERSION_UNCOMPRESSED;
			memcpy(point + 1, a, alen);
			memcpy(point + 1 + alen, b, blen);
			ok = ok &&
			     OSSL_PARAM_BLD_push_utf8_string(bld, OSSL_PKEY_PARAM_GROUP_NAME, t->crv,
							     0) &&
			     OSSL_PARAM_BLD_push_octet_string(bld, OSSL_PKEY_PARAM_PUB_KEY, point,
							      1 + alen + blen);
		}
	}
	params = ok ? OSSL_PARAM_BLD_to_param(bld) : NULL;
	if (!params) {
		jwk_err(err, errlen, "out of memory");
		goto out;
	}
	if (jwk_fromdata(key, params) < 0) {
		jwk_err(err, errlen, "key %d: not a valid %s public key%s", idx, t->kty,
			key->type == JWK_ED25519 ? "" : " (point not on the curve?)");
		goto out;
	}
	rc = 0;
out:
	OSSL_PARAM_free(params);
	OSSL_PARAM_BLD_free(bld);
	BN_free(n);
	BN_free(e);
	free(a);
	free(b);
	return rc;
}

/*
 * The kty and crv members of key idx as a type in *type. Returns 0, or -1
 * with a message for a missing kty or an unknown kty or crv.
 */
static int jwk_type_of(yajl_val v, int idx, enum jwk_type *type, char *err, size_t errlen)
{
	const char *kty, *crv;
	char p[JWK_PRINT_MAX + 1];
	int t, kty_known = 0;

	if (jwk_string(v, "kty", idx, &kty, err, errlen) < 0 ||
	    jwk_string(v, "crv", idx, &crv, err, errlen) < 0)
		return -1;
	if (!kty)
		return jwk_err(err, errlen, "key %d: no \"kty\"", idx);
	for (t = 0; t < JWK_TYPES; t++) {
		if (strcmp(kty, jwk_types[t].kty) != 0)
			continue;
		kty_known = 1;
		if (!jwk_types[t].crv || (crv && strcmp(crv, jwk_types[t].crv) == 0)) {
			*type = (enum jwk_type)t;
			return 0;
		}
	}
	if (!kty_known)
		return jwk_err(err, errlen, "key %d: unknown kty \"%s\"", idx,
			       jwk_printable(kty, p));
	if (!crv)
		return jwk_err(err, errlen, "key %d: %s key without \"crv\"", idx, kty);
	return jwk_err(err, errlen, "key %d: unknown crv \"%s\"", idx, jwk_printable(crv, p));
}

/*
 * Parses key idx (1-based) into *key. Returns 1 for a key to use, 0 for one
 * with use "enc" (left out; *key untouched), -1 with a message.
 */
static int jwk_parse(yajl_val v, int idx, struct jwk *key, char *err, size_t errlen)
{
	const char *use, *alg, *kid;
	char p[JWK_PRINT_MAX + 1];

	if (!YAJL_IS_OBJECT(v))
		return jwk_err(err, errlen, "key %d: not an object", idx);
	if (jwk_string(v, "use", idx, &use, err, errlen) < 0)
		return -1;
	if (use && strcmp(use, "enc") == 0)
		return 0;
	if (use && strcmp(use, "sig") != 0)
		return jwk_err(err, errlen, "key %d: unknown use \"%s\"", idx,
			       jwk_printable(use, p));
	if (jwk_type_of(v, idx, &key->type, err, errlen) < 0 ||
	    jwk_string(v, "alg", idx, &alg, err, errlen) < 0 ||
	    jwk_string(v, "kid", idx, &kid, err, errlen) < 0)
		return -1;
	if (alg) {
		key->alg = jws_alg_find(alg);
		if (!key->alg)
			return jwk_err(err, errlen, "key %d: unknown alg \"%s\"", idx,
				       jwk_printable(alg, p));
		if (key->alg->type != key->type)
			return jwk_err(err, errlen, "key %d: alg %s does not fit a %s key", idx,
				       key->alg->name, jwk_types[key->type].kty);
	}
	if (kid && !(key->kid = strdup(kid)))
		return jwk_err(err, errlen, "out of memory");
	if (key->type != JWK_OCT)
		return jwk_public(v, idx, key, err, errlen) < 0 ? -1 : 1;
	if (jwk_bytes(v, "k", idx, key->type, &key->secret, &key->secret_len, err, errlen) < 0)
		return -1;
	if (key->secret_len < JWK_OCT_MIN)
		return jwk_err(err, errlen, "key %d: oct key of %zu bytes (at least %d)", idx,
			       key->secret_len, JWK_OCT_MIN);
	return 1;
}

int jwks_parse(const char *text, size_t len, struct jwks **out, char *err, size_t errlen)
{
	char *copy = NULL, yerr[JWKS_YAJL_ERR_SIZE] = "";
	yajl_val doc = NULL, keys = NULL;
	struct jwks *set = NULL;
	size_t i, count;
	int r, j, rc = -1;

	*out = NULL;
	if (len > JWKS_TEXT_MAX) {
		jwk_err(err, errlen, "longer than %d bytes", JWKS_TEXT_MAX);
		goto out;
	}
	if (json_tree_safe(text, len) < 0) {
		jwk_err(err, errlen,
			"not JSON, or JSON with NUL, comments, an unpaired surrogate escape or "
			"deep nesting");
		goto out;
	}
	copy = malloc(len + 1);
	if (!copy) {
		jwk_err(err, errlen, "out of memory");
		goto out;
	}
	memcpy(copy, text, len);
	copy[len] = '\0';
	doc = yajl_tree_parse(copy, yerr, sizeof(yerr));
	if (!doc) {
		jwk_err(err, errlen, "not JSON: %.*s", (int)strcspn(yerr, "\n"), yerr);
		goto out;
	}
	if (!YAJL_IS_OBJECT(doc) || json_member(doc, "keys", &keys) < 0 || !YAJL_IS_ARRAY(keys)) {
		jwk_err(err, errlen, "not an object with one \"keys\" array");
		goto out;
	}
	count = keys->u.array.len;
	if (count == 0) {
		jwk_err(err, errlen, "empty key set");
		goto out;
	}
	if (count > JWKS_KEYS_MAX) {
		jwk_err(err, errlen, "more than %d keys", JWKS_KEYS_MAX);
		goto out;
	}
	set = calloc(1, sizeof(*set) + count * sizeof(set->keys[0]));
	if (!set) {
		jwk_err(err, errlen, "out of memory");
		goto out;
	}
	for (i = 0; i < count; i++) {
		struct jwk *key = &set->keys[set->n];

		r = jwk_parse(keys->u.array.values[i], (int)i + 1, key, err, errlen);
		if (r == 0)
			continue;
		set->n++; /* so that jwks_free() sees a half-made key too */
		if (r < 0)
			goto out;
		for (j = 0; key->kid && j < set->n - 1; j++) {
			if (set->keys[j].kid && strcmp(set->keys[j].kid, key->kid) == 0) {
				jwk_err(err, errlen, "key %d: kid used twice", (int)i + 1);
				goto out;
			}
		}
	}
	if (set->n == 0) {
		jwk_err(err, errlen, "no key for signatures (all have use \"enc\")");
		goto out;
	}
	set->serial = __atomic_add_fetch(&jwks_last_serial, 1, __ATOMIC_RELAXED);
	*out = set;
	set = NULL;
	rc = 0;
out:
	jwks_free(set);
	yajl_tree_free(doc);
	free(copy);
	return rc;
}

void jwks_free(struct jwks *keys)
{
	int i;

	if (!keys)
		return;
	for (i = 0; i < keys->n; i++) {
		free(keys->keys[i].kid);
		if (keys->keys[i].secret)
			OPENSSL_cleanse(keys->keys[i].secret, keys->keys[i].secret_len);
		free(keys->keys[i].secret);
		EVP_PKEY_free(keys->keys[i].pkey);
	}
	free(keys);
}

int jwks_count(const struct jwks *keys)
{
	return keys->n;
}

int jwks_has_secret(const struct jwks *keys)
{
	for (int i = 0; i < keys->n; i++)
		if (keys->keys[i].type == JWK_OCT)
			return 1;
	return 0;
}

uint64_t jwks_serial(const struct jwks *keys)
{
	return keys->serial;
}

static int jwk_fits(const struct jwk *key, const struct jws_alg *alg)
{
	return key->type == alg->type && (!key->alg || key->alg == alg);
}

enum jwks_select_result jwks_select(const struct jwks *keys, const struct jws_alg *alg,
				    const char *kid, const struct jwk **out)
{
	int i, fit = 0;

	for (i = 0; i < keys->n; i++) {
		const struct jwk *key = &keys->keys[i];

		if (kid && key->kid && strcmp(kid, key->kid) == 0) {
			*out = key;
			return jwk_fits(key, alg) ? JWKS_KEY_FOUND : JWKS_KEY_BAD_ALG;
		}
		if (!kid && jwk_fits(key, alg)) {
			*out = key;
			fit++;
		}
	}
	return fit == 1 ? JWKS_KEY_FOUND : JWKS_KEY_NONE;
}

/* The HMAC of the n bytes at input under the oct key, compared in constant time. */
static enum jws_result jws_check_hmac(const struct jwk *key, const struct jws_alg *alg,
				      const char *input, size_t n, const unsigned char *sig,
				      size_t siglen)
{
	unsigned char mac[EVP_MAX_MD_SIZE];
	unsigned int maclen = 0;

	if (!HMAC(alg->md(), key->secret, (int)key->secret_len, (const unsigned char *)input, n,
		  mac, &maclen))
		return JWS_NOMEM;
	if (siglen != maclen || CRYPTO_memcmp(mac, sig, maclen) != 0)
		return JWS_INVALID;
	return JWS_VALID;
}

/*
 * The JWS signature R || S of an ECDSA key as DER in a new *der (the
 * caller frees it with OPENSSL_free()) of *derlen bytes. Returns JWS_VALID
 * when *der is made (it is still to be checked), JWS_INVALID when siglen
 * does not fit the curve, or JWS_NOMEM.
 */
static enum jws_result jws_ecdsa_der(const struct jwk *key, const unsigned char *sig,
				     size_t siglen, unsigned char **der, int *derlen)
{
	size_t half = jwk_types[key->type].coord;
	ECDSA_SIG *es;
	BIGNUM *r, *s;

	if (siglen != 2 * half)
		return JWS_INVALID;
	es = ECDSA_SIG_new();
	r = BN_bin2bn(sig, (int)half, NULL);
	s = BN_bin2bn(sig + half, (int)half, NULL);
	if (!es || !r || !s || ECDSA_SIG_set0(es, r, s) != 1) {
		BN_free(r);
		BN_free(s);
		ECDSA_SIG_free(es);
		return JWS_NOMEM;
	}
	*der = NULL;
	*derlen = i2d_ECDSA_SIG(es, der);
	ECDSA_SIG_free(es);
	return *derlen > 0 ? JWS_VALID : JWS_NOMEM;
}

enum jws_result jws_verify(const struct jwk *key, const struct jws_alg *alg, const char *input,
			   size_t n, const unsigned char *sig, size_t siglen)
{
	unsigned char *der = NULL;
	EVP_MD_CTX *md = NULL;
	EVP_PKEY_CTX *pctx = NULL;
	enum jws_result r;
	int derlen = 0;

	if (key->type == JWK_OCT)
		return jws_check_hmac(key, alg, input, n, sig, siglen);
	if (key->type == JWK_P256 || key->type == JWK_P384) {
		r = jws_ecdsa_der(key, sig, siglen, &der, &derlen);
		if (r != JWS_VALID)
			return r;
		sig = der;
		siglen = (size_t)derlen;
	}
	r = JWS_NOMEM;
	md = EVP_MD_CTX_new();
	if (!md || EVP_DigestVerifyInit(md, &pctx, alg->md ? alg->md() : NULL, NULL, key->pkey) != 1)
		goto out;
	if (alg->pss && (EVP_PKEY_CTX_set_rsa_padding(pctx, RSA_PKCS1_PSS_PADDING) != 1 ||
			 EVP_PKEY_CTX_set_rsa_pss_saltlen(pctx, RSA_PSS_SALTLEN_DIGEST) != 1 ||
			 EVP_PKEY_CTX_set_rsa_mgf1_md(pctx, alg->md()) != 1))
		goto out;
	r = EVP_DigestVerify(md, sig, siglen, (const unsigned char *)input, n) == 1
		    ? JWS_VALID
		    : JWS_INVALID;
out:
	EVP_MD_CTX_free(md);
	OPENSSL_free(der);
	ERR_clear_error();
	return r;
}
