/*
 * JSON Web Tokens (RFC 7519) in the compact JWS form (RFC 7515), verified
 * against a JSON Web Key Set (RFC 7517) with the algorithms of RFC 7518 and
 * RFC 8037 that idemproxy accepts.
 *
 * A key set is parsed once into OpenSSL keys and never changes, so any
 * number of threads may verify against it; each verification makes its own
 * EVP_MD_CTX. A key has one type (kty and crv together) and every algorithm
 * fits exactly one type, so an HS256 token is never checked with an RSA
 * key's bytes as the HMAC secret (the key-confusion attack).
 *
 * JSON goes through yajl_tree, whose input and strings are C strings and
 * whose tree is freed recursively: documents with a NUL byte, the escape
 * \u0000 (which would cut "a\u0000b" to "a"), a '/' outside strings
 * (yajl_tree allows comments) or nesting deeper than JWT_JSON_DEPTH are
 * refused before yajl sees them. A member that is read here must appear
 * once only, so two readers of one token cannot disagree about it.
 */
#include "proxy/jwt.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/ec.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/param_build.h>
#include <openssl/rsa.h>
#include <openssl/sha.h>
#include <yajl/yajl_tree.h>

#include "proxy/base64.h"

#define JWKS_TEXT_MAX	  (1 << 20) /* longest JWKS document */
#define JWK_OCT_MIN	  16	    /* shortest HMAC secret */
#define JWK_RSA_MIN_BITS  2048
#define JWK_RSA_MAX_BITS  16384 /* OpenSSL's own limit for RSA verification */
#define JWK_COORD_MAX	  48	/* P-384 */
#define JWT_JSON_DEPTH	  32	/* deepest nesting of objects and arrays */
#define JWT_DECODED_MAX	  BASE64_DECODED_MAX(JWT_TOKEN_MAX)
#define JWT_TIME_LIMIT	  ((int64_t)1 << 61) /* times are clamped to +-this, so sums cannot overflow */
#define JWT_PRINT_MAX	  32		     /* bytes of a document's string quoted in a message */
#define JWT_YAJL_ERR_SIZE 256

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

static const struct jwt_alg {
	const char *name;
	enum jwk_type type;
	const EVP_MD *(*md)(void); /* NULL for EdDSA, which hashes by itself */
	int pss;		   /* RSASSA-PSS, MGF1 with md, salt as long as the digest */
} jwt_algs[] = {
	{"HS256", JWK_OCT, EVP_sha256, 0},   {"HS384", JWK_OCT, EVP_sha384, 0},
	{"HS512", JWK_OCT, EVP_sha512, 0},   {"RS256", JWK_RSA, EVP_sha256, 0},
	{"RS384", JWK_RSA, EVP_sha384, 0},   {"RS512", JWK_RSA, EVP_sha512, 0},
	{"PS256", JWK_RSA, EVP_sha256, 1},   {"ES256", JWK_P256, EVP_sha256, 0},
	{"ES384", JWK_P384, EVP_sha384, 0},  {"EdDSA", JWK_ED25519, NULL, 0},
};

#define JWT_NALGS (sizeof(jwt_algs) / sizeof(jwt_algs[0]))

struct jwk {
	enum jwk_type type;
	const struct jwt_alg *alg; /* the key's alg member, NULL when absent */
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

/* Writes the message into err (when there is room for any); returns -1. */
static int jwt_err(char *err, size_t errlen, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static int jwt_err(char *err, size_t errlen, const char *fmt, ...)
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
 * At most JWT_PRINT_MAX bytes of s into buf (JWT_PRINT_MAX + 1 bytes), each
 * byte that is not printable ASCII as '?', so a message stays one line.
 */
static const char *jwt_printable(const char *s, char *buf)
{
	size_t i;

	for (i = 0; s[i] && i < JWT_PRINT_MAX; i++)
		buf[i] = s[i] >= 0x20 && s[i] < 0x7f ? s[i] : '?';
	buf[i] = '\0';
	return buf;
}

/*
 * Returns 0 when yajl_tree may parse the n bytes at s: no NUL byte, no
 * \u0000 escape, no '/' outside strings, nesting at most JWT_JSON_DEPTH
 * deep; else -1. This is not a JSON validator; yajl is.
 */
static int jwt_json_safe(const char *s, size_t n)
{
	int depth = 0, in_string = 0;
	size_t i;

	if (memchr(s, '\0', n))
		return -1;
	for (i = 0; i < n; i++) {
		if (in_string) {
			if (s[i] == '"')
				in_string = 0;
			else if (s[i] == '\\' && ++i < n && s[i] == 'u' && n - i > 4 &&
				 memcmp(s + i + 1, "0000", 4) == 0)
				return -1;
		} else if (s[i] == '"') {
			in_string = 1;
		} else if (s[i] == '{' || s[i] == '[') {
			if (++depth > JWT_JSON_DEPTH)
				return -1;
		} else if (s[i] == '}' || s[i] == ']') {
			depth--;
		} else if (s[i] == '/') {
			return -1;
		}
	}
	return 0;
}

/*
 * The member name of the object v in *out, NULL when absent. Returns 0, or
 * -1 when the member appears more than once.
 */
static int jwt_member(yajl_val v, const char *name, yajl_val *out)
{
	size_t i;

	*out = NULL;
	for (i = 0; i < v->u.object.len; i++) {
		if (strcmp(v->u.object.keys[i], name) != 0)
			continue;
		if (*out)
			return -1;
		*out = v->u.object.values[i];
	}
	return 0;
}

/* The algorithm called name, or NULL. */
static const struct jwt_alg *jwt_alg_find(const char *name)
{
	size_t i;

	for (i = 0; i < JWT_NALGS; i++) {
		if (strcmp(jwt_algs[i].name, name) == 0)
			return &jwt_algs[i];
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
	if (jwt_member(v, name, &m) < 0)
		return jwt_err(err, errlen, "key %d: \"%s\" appears twice", idx, name);
	if (m && !YAJL_IS_STRING(m))
		return jwt_err(err, errlen, "key %d: \"%s\" is not a string", idx, name);
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
		return jwt_err(err, errlen, "key %d: %s key without \"%s\"", idx,
			       jwk_types[type].kty, name);
	n = strlen(s);
	*out = malloc(BASE64_DECODED_MAX(n));
	if (!*out)
		return jwt_err(err, errlen, "out of memory");
	if (base64_decode(s, n, BASE64_URL, *out, BASE64_DECODED_MAX(n), len) < 0 || *len == 0) {
		free(*out);
		*out = NULL;
		return jwt_err(err, errlen, "key %d: \"%s\" is not base64url", idx, name);
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
			jwt_err(err, errlen, "key %d: RSA key of %d bits (%d to %d allowed)", idx,
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
			jwt_err(err, errlen, "key %d: %s coordinates must be %zu bytes", idx, t->crv,
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
		jwt_err(err, errlen, "out of memory");
		goto out;
	}
	if (jwk_fromdata(key, params) < 0) {
		jwt_err(err, errlen, "key %d: not a valid %s public key%s", idx, t->kty,
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
	char p[JWT_PRINT_MAX + 1];
	int t, kty_known = 0;

	if (jwk_string(v, "kty", idx, &kty, err, errlen) < 0 ||
	    jwk_string(v, "crv", idx, &crv, err, errlen) < 0)
		return -1;
	if (!kty)
		return jwt_err(err, errlen, "key %d: no \"kty\"", idx);
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
		return jwt_err(err, errlen, "key %d: unknown kty \"%s\"", idx,
			       jwt_printable(kty, p));
	if (!crv)
		return jwt_err(err, errlen, "key %d: %s key without \"crv\"", idx, kty);
	return jwt_err(err, errlen, "key %d: unknown crv \"%s\"", idx, jwt_printable(crv, p));
}

/*
 * Parses key idx (1-based) into *key. Returns 1 for a key to use, 0 for one
 * with use "enc" (left out; *key untouched), -1 with a message.
 */
static int jwk_parse(yajl_val v, int idx, struct jwk *key, char *err, size_t errlen)
{
	const char *use, *alg, *kid;
	char p[JWT_PRINT_MAX + 1];

	if (!YAJL_IS_OBJECT(v))
		return jwt_err(err, errlen, "key %d: not an object", idx);
	if (jwk_string(v, "use", idx, &use, err, errlen) < 0)
		return -1;
	if (use && strcmp(use, "enc") == 0)
		return 0;
	if (use && strcmp(use, "sig") != 0)
		return jwt_err(err, errlen, "key %d: unknown use \"%s\"", idx,
			       jwt_printable(use, p));
	if (jwk_type_of(v, idx, &key->type, err, errlen) < 0 ||
	    jwk_string(v, "alg", idx, &alg, err, errlen) < 0 ||
	    jwk_string(v, "kid", idx, &kid, err, errlen) < 0)
		return -1;
	if (alg) {
		key->alg = jwt_alg_find(alg);
		if (!key->alg)
			return jwt_err(err, errlen, "key %d: unknown alg \"%s\"", idx,
				       jwt_printable(alg, p));
		if (key->alg->type != key->type)
			return jwt_err(err, errlen, "key %d: alg %s does not fit a %s key", idx,
				       key->alg->name, jwk_types[key->type].kty);
	}
	if (kid && !(key->kid = strdup(kid)))
		return jwt_err(err, errlen, "out of memory");
	if (key->type != JWK_OCT)
		return jwk_public(v, idx, key, err, errlen) < 0 ? -1 : 1;
	if (jwk_bytes(v, "k", idx, key->type, &key->secret, &key->secret_len, err, errlen) < 0)
		return -1;
	if (key->secret_len < JWK_OCT_MIN)
		return jwt_err(err, errlen, "key %d: oct key of %zu bytes (at least %d)", idx,
			       key->secret_len, JWK_OCT_MIN);
	return 1;
}

int jwks_parse(const char *text, size_t len, struct jwks **out, char *err, size_t errlen)
{
	char *copy = NULL, yerr[JWT_YAJL_ERR_SIZE] = "";
	yajl_val doc = NULL, keys = NULL;
	struct jwks *set = NULL;
	size_t i, count;
	int r, j, rc = -1;

	*out = NULL;
	if (len > JWKS_TEXT_MAX) {
		jwt_err(err, errlen, "longer than %d bytes", JWKS_TEXT_MAX);
		goto out;
	}
	if (jwt_json_safe(text, len) < 0) {
		jwt_err(err, errlen, "not JSON, or JSON with NUL, comments or deep nesting");
		goto out;
	}
	copy = malloc(len + 1);
	if (!copy) {
		jwt_err(err, errlen, "out of memory");
		goto out;
	}
	memcpy(copy, text, len);
	copy[len] = '\0';
	doc = yajl_tree_parse(copy, yerr, sizeof(yerr));
	if (!doc) {
		jwt_err(err, errlen, "not JSON: %.*s", (int)strcspn(yerr, "\n"), yerr);
		goto out;
	}
	if (!YAJL_IS_OBJECT(doc) || jwt_member(doc, "keys", &keys) < 0 || !YAJL_IS_ARRAY(keys)) {
		jwt_err(err, errlen, "not an object with one \"keys\" array");
		goto out;
	}
	count = keys->u.array.len;
	if (count == 0) {
		jwt_err(err, errlen, "empty key set");
		goto out;
	}
	if (count > JWKS_KEYS_MAX) {
		jwt_err(err, errlen, "more than %d keys", JWKS_KEYS_MAX);
		goto out;
	}
	set = calloc(1, sizeof(*set) + count * sizeof(set->keys[0]));
	if (!set) {
		jwt_err(err, errlen, "out of memory");
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
				jwt_err(err, errlen, "key %d: kid used twice", (int)i + 1);
				goto out;
			}
		}
	}
	if (set->n == 0) {
		jwt_err(err, errlen, "no key for signatures (all have use \"enc\")");
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
	    jwt_json_safe((char *)buf, len) < 0)
		return JWT_MALFORMED;
	buf[len] = '\0';
	*out = yajl_tree_parse((char *)buf, NULL, 0);
	return YAJL_IS_OBJECT(*out) ? JWT_OK : JWT_MALFORMED;
}

/*
 * Reads the header: no crit, typ absent or JWT or at+jwt, alg a string
 * (*alg NULL when it names no algorithm of ours), kid absent or a string.
 */
static enum jwt_result jwt_header(yajl_val h, const struct jwt_alg **alg, const char **kid)
{
	yajl_val crit, typ, a, k;

	if (jwt_member(h, "crit", &crit) < 0 || crit || jwt_member(h, "typ", &typ) < 0 ||
	    jwt_member(h, "alg", &a) < 0 || jwt_member(h, "kid", &k) < 0)
		return JWT_MALFORMED;
	if (typ && (!YAJL_IS_STRING(typ) || (strcasecmp(typ->u.string, "JWT") != 0 &&
					     strcasecmp(typ->u.string, "at+jwt") != 0)))
		return JWT_MALFORMED;
	if (!YAJL_IS_STRING(a) || (k && !YAJL_IS_STRING(k)))
		return JWT_MALFORMED;
	*alg = jwt_alg_find(a->u.string);
	*kid = k ? k->u.string : NULL;
	return JWT_OK;
}

static int jwk_fits(const struct jwk *key, const struct jwt_alg *alg)
{
	return key->type == alg->type && (!key->alg || key->alg == alg);
}

/* The key named by kid (NULL: the only key that fits alg) in *out. */
static enum jwt_result jwt_select(const struct jwks *keys, const struct jwt_alg *alg,
				  const char *kid, const struct jwk **out)
{
	int i, fit = 0;

	for (i = 0; i < keys->n; i++) {
		const struct jwk *key = &keys->keys[i];

		if (kid && key->kid && strcmp(kid, key->kid) == 0) {
			*out = key;
			return jwk_fits(key, alg) ? JWT_OK : JWT_BAD_ALG;
		}
		if (!kid && jwk_fits(key, alg)) {
			*out = key;
			fit++;
		}
	}
	return fit == 1 ? JWT_OK : JWT_NO_KEY;
}

/* The HMAC of the n bytes at input under the oct key, compared in constant time. */
static enum jwt_result jwt_check_hmac(const struct jwk *key, const struct jwt_alg *alg,
				      const char *input, size_t n, const unsigned char *sig,
				      size_t siglen)
{
	unsigned char mac[EVP_MAX_MD_SIZE];
	unsigned int maclen = 0;

	if (!HMAC(alg->md(), key->secret, (int)key->secret_len, (const unsigned char *)input, n,
		  mac, &maclen))
		return JWT_NOMEM;
	if (siglen != maclen || CRYPTO_memcmp(mac, sig, maclen) != 0)
		return JWT_BAD_SIGNATURE;
	return JWT_OK;
}

/*
 * The JWS signature R || S of an ECDSA key as DER in a new *der (the
 * caller frees it with OPENSSL_free()) of *derlen bytes.
 */
static enum jwt_result jwt_ecdsa_der(const struct jwk *key, const unsigned char *sig,
				     size_t siglen, unsigned char **der, int *derlen)
{
	size_t half = jwk_types[key->type].coord;
	ECDSA_SIG *es;
	BIGNUM *r, *s;

	if (siglen != 2 * half)
		return JWT_BAD_SIGNATURE;
	es = ECDSA_SIG_new();
	r = BN_bin2bn(sig, (int)half, NULL);
	s = BN_bin2bn(sig + half, (int)half, NULL);
	if (!es || !r || !s || ECDSA_SIG_set0(es, r, s) != 1) {
		BN_free(r);
		BN_free(s);
		ECDSA_SIG_free(es);
		return JWT_NOMEM;
	}
	*der = NULL;
	*derlen = i2d_ECDSA_SIG(es, der);
	ECDSA_SIG_free(es);
	return *derlen > 0 ? JWT_OK : JWT_NOMEM;
}

/* Checks sig over the n bytes at input with key, which fits alg. */
static enum jwt_result jwt_check_signature(const struct jwk *key, const struct jwt_alg *alg,
					   const char *input, size_t n, const unsigned char *sig,
					   size_t siglen)
{
	unsigned char *der = NULL;
	EVP_MD_CTX *md = NULL;
	EVP_PKEY_CTX *pctx = NULL;
	enum jwt_result r;
	int derlen = 0;

	if (key->type == JWK_OCT)
		return jwt_check_hmac(key, alg, input, n, sig, siglen);
	if (key->type == JWK_P256 || key->type == JWK_P384) {
		r = jwt_ecdsa_der(key, sig, siglen, &der, &derlen);
		if (r != JWT_OK)
			return r;
		sig = der;
		siglen = (size_t)derlen;
	}
	r = JWT_NOMEM;
	md = EVP_MD_CTX_new();
	if (!md || EVP_DigestVerifyInit(md, &pctx, alg->md ? alg->md() : NULL, NULL, key->pkey) != 1)
		goto out;
	if (alg->pss && (EVP_PKEY_CTX_set_rsa_padding(pctx, RSA_PKCS1_PSS_PADDING) != 1 ||
			 EVP_PKEY_CTX_set_rsa_pss_saltlen(pctx, RSA_PSS_SALTLEN_DIGEST) != 1 ||
			 EVP_PKEY_CTX_set_rsa_mgf1_md(pctx, alg->md()) != 1))
		goto out;
	r = EVP_DigestVerify(md, sig, siglen, (const unsigned char *)input, n) == 1
		    ? JWT_OK
		    : JWT_BAD_SIGNATURE;
out:
	EVP_MD_CTX_free(md);
	OPENSSL_free(der);
	ERR_clear_error();
	return r;
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

/* The actor claim's value as text in a new *out. */
static enum jwt_result jwt_actor(yajl_val v, char **out)
{
	char num[24];
	size_t len;

	if (YAJL_IS_STRING(v)) {
		len = strlen(v->u.string);
		if (len == 0 || len > JWT_ACTOR_MAX)
			return JWT_NO_CLAIM;
		*out = strdup(v->u.string);
	} else if (YAJL_IS_INTEGER(v)) {
		snprintf(num, sizeof(num), "%lld", YAJL_GET_INTEGER(v));
		*out = strdup(num);
	} else {
		return JWT_NO_CLAIM;
	}
	return *out ? JWT_OK : JWT_NOMEM;
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
	if (jwt_member(p, "exp", &exp) < 0 || jwt_member(p, "nbf", &nbf) < 0 ||
	    jwt_member(p, "iat", &iat) < 0 || jwt_member(p, "iss", &iss) < 0 ||
	    jwt_member(p, "aud", &aud) < 0 || jwt_member(p, rules->claim, &actor) < 0 ||
	    jwt_time(exp, &texp) < 0 || jwt_time(nbf, &tnbf) < 0 || jwt_time(iat, &tiat) < 0 ||
	    (iss && !YAJL_IS_STRING(iss)))
		return JWT_MALFORMED;
	if (exp && texp + leeway <= now)
		return JWT_EXPIRED;
	if ((nbf && tnbf - leeway > now) || (iat && tiat - leeway > now))
		return JWT_NOT_YET;
	if (rules->issuer && (!iss || strcmp(iss->u.string, rules->issuer) != 0))
		return JWT_BAD_ISSUER;
	if (rules->audience && !jwt_audience_has(aud, rules->audience))
		return JWT_BAD_AUDIENCE;
	r = jwt_actor(actor, &out->actor);
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
	const struct jwt_alg *alg = NULL;
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
		r = jwt_select(keys, alg, kid, &key);
	/* The signature is checked before the payload is even decoded. */
	if (r == JWT_OK && base64_decode(dot2 + 1, (size_t)(token + n - dot2 - 1), BASE64_URL, buf,
					 JWT_DECODED_MAX, &siglen) < 0)
		r = JWT_MALFORMED;
	if (r == JWT_OK)
		r = jwt_check_signature(key, alg, token, (size_t)(dot2 - token), buf, siglen);
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
	EVP_MD *sha256; /* fetched once: an implicit fetch per digest costs more than the digest */
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
	c->sha256 = EVP_MD_fetch(NULL, "SHA256", NULL);
	if (!c->md || !c->sha256) {
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
	EVP_MD_free(c->sha256);
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

	if (EVP_DigestInit_ex(md, c->sha256, NULL) && jwt_digest_string(md, rules->issuer) &&
	    jwt_digest_string(md, rules->audience) && jwt_digest_string(md, rules->claim) &&
	    EVP_DigestUpdate(md, &rules->leeway_s, sizeof(rules->leeway_s)) &&
	    EVP_DigestUpdate(md, token, n) && EVP_DigestFinal_ex(md, out, NULL))
		return 0;
	return -1;
}

/* Copies src's members into a zeroed *dst; JWT_NOMEM leaves *dst zeroed. */
static enum jwt_result jwt_claims_copy(const struct jwt_claims *src, struct jwt_claims *dst)
{
	dst->issuer = src->issuer ? strdup(src->issuer) : NULL;
	dst->actor = strdup(src->actor);
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
	if (e->serial == keys->serial && now_s < e->until && memcmp(e->key, key, sizeof(key)) == 0)
		return jwt_claims_copy(&e->claims, out);

	r = jwt_verify_until(keys, rules, token, n, now_s, out, &until);
	if (r != JWT_OK)
		return r;
	jwt_claims_clear(&e->claims);
	e->serial = 0;
	if (jwt_claims_copy(out, &e->claims) != JWT_OK)
		return JWT_OK; /* not cached, still verified */
	memcpy(e->key, key, sizeof(key));
	e->serial = keys->serial;
	e->until = until == INT64_MAX ? jwt_clamp(now_s) + JWT_CACHE_NO_EXP_S : until;
	return JWT_OK;
}
