/*
 * libFuzzer target for JWKS parsing and JWT verification (proxy/jwt.c).
 * The first byte says what the rest is (mod 3), and which rules apply
 * (its next bit: none, or an issuer, an audience and require_exp):
 *   0: a JWKS document for jwks_parse(); the same bytes are also a JSON
 *      document whose strings, when json_tree_safe() lets yajl read it,
 *      must be exactly those a strict decoder reads (no surrogate repaired),
 *      and the payload of a token the target signs (HS256) and verifies;
 *   1: a token for jwt_verify() against a fixed key set (an oct key "h"
 *      and a P-256 key "e");
 *   2: "header.payload", which the target signs with the oct key (HS256)
 *      itself so that the payload's claims are reached; it is verified
 *      directly and twice through a cache, and all three must agree.
 * A JWT_OK must carry an actor of 1 to JWT_ACTOR_MAX bytes (an integer one
 * in decimal), and an exp when the rules require one; anything else must
 * leave the claims zeroed.
 * Built by `make fuzz` from the Makefile's FUZZ_SRC_fuzz_jwt.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <yajl/yajl_tree.h>

#include "proxy/json.h"
#include "proxy/jwt.h"

#define FUZZ_NOW    INT64_C(1700000000)
#define FUZZ_SECRET "idemproxy-fuzz-hmac-secret-32byte"

static const char fuzz_jwks[] =
	"{\"keys\":[{\"kty\":\"oct\",\"kid\":\"h\",\"k\":"
	"\"aWRlbXByb3h5LWZ1enotaG1hYy1zZWNyZXQtMzJieXRl\"},"
	"{\"kty\":\"EC\",\"crv\":\"P-256\",\"kid\":\"e\",\"alg\":\"ES256\","
	"\"x\":\"5qy6sW6Kkm7GG6KuoBXxifxcS5J1oE4zdZFyZU1XIl0\","
	"\"y\":\"LswQx_C1YuCVyFowlXLv4zIgw71wx2BwiPva3sZ1KHQ\"}]}";

static const struct jwt_rules fuzz_rules[2] = {
	{NULL, NULL, "sub", 60, 0},
	{"https://issuer.example", "api", "sub", 60, 1},
};

/* The base64url of {"alg":"HS256"}: the header of the tokens case 0 makes. */
#define FUZZ_HS256_HEADER "eyJhbGciOiJIUzI1NiJ9"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fuzz_check(enum jwt_result r, const struct jwt_rules *rules, const struct jwt_claims *c)
{
	size_t len;

	if (r != JWT_OK) {
		if (c->issuer || c->actor || c->exp || c->actor_integer)
			abort();
		return;
	}
	len = c->actor ? strlen(c->actor) : 0;
	if (len < 1 || len > JWT_ACTOR_MAX)
		abort();
	if (c->actor_integer &&
	    strspn(c->actor + (c->actor[0] == '-'), "0123456789") != len - (c->actor[0] == '-'))
		abort();
	if (rules->require_exp && c->exp == 0)
		abort();
}

static int fuzz_same(const struct jwt_claims *a, const struct jwt_claims *b)
{
	if (a->exp != b->exp || !a->issuer != !b->issuer || a->actor_integer != b->actor_integer)
		return 0;
	if (a->issuer && strcmp(a->issuer, b->issuer) != 0)
		return 0;
	return !a->actor == !b->actor && (!a->actor || strcmp(a->actor, b->actor) == 0);
}

/* Appends to the n bytes at token "." and their base64url HMAC-SHA256; returns the new length. */
static size_t fuzz_sign(char *token, size_t n)
{
	static const char d[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
	unsigned char mac[EVP_MAX_MD_SIZE];
	unsigned int maclen = 0, i, bits = 0;
	uint32_t acc = 0;

	HMAC(EVP_sha256(), FUZZ_SECRET, (int)strlen(FUZZ_SECRET), (const unsigned char *)token, n,
	     mac, &maclen);
	token[n++] = '.';
	for (i = 0; i < maclen; i++) {
		acc = acc << 8 | mac[i];
		bits += 8;
		while (bits >= 6) {
			bits -= 6;
			token[n++] = d[(acc >> bits) & 63];
		}
	}
	if (bits)
		token[n++] = d[(acc << (6 - bits)) & 63];
	return n;
}

/* The code unit of the \\uXXXX whose digits start at s, or -1. */
static long fuzz_hex4(const char *s, const char *end)
{
	static const char hex[] = "0123456789abcdef";
	long v = 0;

	if (end - s < 4)
		return -1;
	for (int k = 0; k < 4; k++) {
		const char *digit =
		    strchr(hex, s[k] >= 'A' && s[k] <= 'F' ? s[k] - 'A' + 'a' : s[k]);

		if (!s[k] || !digit)
			return -1;
		v = v << 4 | (digit - hex);
	}
	return v;
}

/* Appends code point cp as UTF-8 at o; returns the new end. */
static char *fuzz_utf8(char *o, long cp)
{
	if (cp < 0x80) {
		*o++ = (char)cp;
	} else if (cp < 0x800) {
		*o++ = (char)(0xc0 | cp >> 6);
		*o++ = (char)(0x80 | (cp & 0x3f));
	} else if (cp < 0x10000) {
		*o++ = (char)(0xe0 | cp >> 12);
		*o++ = (char)(0x80 | ((cp >> 6) & 0x3f));
		*o++ = (char)(0x80 | (cp & 0x3f));
	} else {
		*o++ = (char)(0xf0 | cp >> 18);
		*o++ = (char)(0x80 | ((cp >> 12) & 0x3f));
		*o++ = (char)(0x80 | ((cp >> 6) & 0x3f));
		*o++ = (char)(0x80 | (cp & 0x3f));
	}
	return o;
}

/*
 * Strictly decodes the string whose opening quote is at *p (a document yajl
 * accepted) into out (room for its length), NUL-terminated; *p ends past
 * the closing quote. A surrogate outside a pair aborts: json_tree_safe()
 * let the document through.
 */
static void fuzz_decode(const char **p, const char *end, char *out)
{
	const char *s = *p + 1;
	long cp, low;

	while (s < end && *s != '"') {
		if (*s != '\\') {
			*out++ = *s++;
			continue;
		}
		s++;
		switch (*s) {
		case 'b':
			*out++ = '\b';
			break;
		case 'f':
			*out++ = '\f';
			break;
		case 'n':
			*out++ = '\n';
			break;
		case 'r':
			*out++ = '\r';
			break;
		case 't':
			*out++ = '\t';
			break;
		case 'u':
			cp = fuzz_hex4(s + 1, end);
			s += 4;
			if (cp >= 0xdc00 && cp <= 0xdfff)
				abort();
			if (cp >= 0xd800 && cp <= 0xdbff) {
				low = s + 2 < end && s[1] == '\\' && s[2] == 'u'
					  ? fuzz_hex4(s + 3, end)
					  : -1;
				if (low < 0xdc00 || low > 0xdfff)
					abort();
				cp = 0x10000 + ((cp - 0xd800) << 10) + (low - 0xdc00);
				s += 6;
			}
			out = fuzz_utf8(out, cp);
			break;
		default:
			*out++ = *s;
			break;
		}
		s++;
	}
	*out = '\0';
	*p = s + 1;
}

/* The next string at *p, strictly decoded, must be s. */
static void fuzz_next_string(const char **p, const char *end, char *buf, const char *s)
{
	*p = memchr(*p, '"', (size_t)(end - *p));
	if (!*p)
		abort();
	fuzz_decode(p, end, buf);
	if (strcmp(buf, s) != 0)
		abort();
}

/* Every string of the tree v, in document order, must be the next one decoded at *p. */
static void fuzz_strings_match(yajl_val v, const char **p, const char *end, char *buf)
{
	size_t i;

	if (YAJL_IS_STRING(v)) {
		fuzz_next_string(p, end, buf, v->u.string);
	} else if (YAJL_IS_OBJECT(v)) {
		for (i = 0; i < v->u.object.len; i++) {
			fuzz_next_string(p, end, buf, v->u.object.keys[i]);
			fuzz_strings_match(v->u.object.values[i], p, end, buf);
		}
	} else if (YAJL_IS_ARRAY(v)) {
		for (i = 0; i < v->u.array.len; i++)
			fuzz_strings_match(v->u.array.values[i], p, end, buf);
	}
}

/* A document json_tree_safe() lets through reads in yajl as it is spelled. */
static void fuzz_strings(const uint8_t *data, size_t size)
{
	char *text, *buf;
	const char *p;
	yajl_val doc;

	if (json_tree_safe((const char *)data, size) < 0)
		return;
	text = malloc(size + 1);
	buf = malloc(size + 1);
	if (!text || !buf)
		abort();
	memcpy(text, data, size);
	text[size] = '\0';
	doc = yajl_tree_parse(text, NULL, 0);
	if (doc) {
		p = text;
		fuzz_strings_match(doc, &p, text + size, buf);
		yajl_tree_free(doc);
	}
	free(text);
	free(buf);
}

/* The base64url of the n bytes at p at out (room for n / 3 * 4 + 4); returns its length. */
static size_t fuzz_b64(const uint8_t *p, size_t n, char *out)
{
	static const char d[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
	uint32_t acc = 0;
	size_t i, o = 0;
	unsigned bits = 0;

	for (i = 0; i < n; i++) {
		acc = acc << 8 | p[i];
		bits += 8;
		while (bits >= 6) {
			bits -= 6;
			out[o++] = d[(acc >> bits) & 63];
		}
	}
	if (bits)
		out[o++] = d[(acc << (6 - bits)) & 63];
	return o;
}

/* data as the payload of an HS256 token, verified directly and through a cache. */
static void fuzz_payload(const struct jwks *keys, const struct jwt_rules *rules,
			 const uint8_t *data, size_t size, char *token)
{
	struct jwt_claims c, c1;
	struct jwt_cache *cache;
	enum jwt_result r, r1;
	size_t n = strlen(FUZZ_HS256_HEADER);

	if (n + 1 + size / 3 * 4 + 4 > JWT_TOKEN_MAX)
		return;
	memcpy(token, FUZZ_HS256_HEADER ".", n + 1);
	n += 1 + fuzz_b64(data, size, token + n + 1);
	n = fuzz_sign(token, n);
	cache = jwt_cache_new(1);
	if (!cache)
		abort();
	r = jwt_verify(keys, rules, token, n, FUZZ_NOW, &c);
	r1 = jwt_cache_verify(cache, keys, rules, token, n, FUZZ_NOW, &c1);
	fuzz_check(r, rules, &c);
	if (r != r1 || !fuzz_same(&c, &c1))
		abort();
	/* A token whose JSON yajl would repair never verifies. */
	if (r == JWT_OK && json_tree_safe((const char *)data, size) < 0)
		abort();
	jwt_claims_clear(&c);
	jwt_claims_clear(&c1);
	jwt_cache_free(cache);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct jwks *keys;
	static char token[JWT_TOKEN_MAX + 64];
	struct jwt_claims c, c1, c2;
	const struct jwt_rules *rules;
	struct jwt_cache *cache;
	struct jwks *parsed;
	enum jwt_result r, r1, r2;
	char err[256];
	size_t n;

	if (!keys && jwks_parse(fuzz_jwks, strlen(fuzz_jwks), &keys, err, sizeof(err)) != 0)
		abort();
	if (size == 0)
		return 0;
	rules = &fuzz_rules[(data[0] / 3) & 1];
	data++;
	size--;

	switch (data[-1] % 3) {
	case 0:
		if (jwks_parse((const char *)data, size, &parsed, err, sizeof(err)) == 0) {
			if (jwks_count(parsed) < 1 || jwks_count(parsed) > JWKS_KEYS_MAX)
				abort();
			jwks_free(parsed);
		} else if (parsed || !err[0] || strchr(err, '\n')) {
			abort();
		}
		fuzz_strings(data, size);
		fuzz_payload(keys, rules, data, size, token);
		break;
	case 1:
		r = jwt_verify(keys, rules, (const char *)data, size, FUZZ_NOW, &c);
		fuzz_check(r, rules, &c);
		jwt_claims_clear(&c);
		break;
	default:
		if (size > JWT_TOKEN_MAX)
			return 0;
		memcpy(token, data, size);
		n = fuzz_sign(token, size);
		cache = jwt_cache_new(2);
		if (!cache)
			abort();
		r = jwt_verify(keys, rules, token, n, FUZZ_NOW, &c);
		r1 = jwt_cache_verify(cache, keys, rules, token, n, FUZZ_NOW, &c1);
		r2 = jwt_cache_verify(cache, keys, rules, token, n, FUZZ_NOW, &c2);
		fuzz_check(r, rules, &c);
		if (r != r1 || r != r2 || !fuzz_same(&c, &c1) || !fuzz_same(&c, &c2))
			abort();
		jwt_claims_clear(&c);
		jwt_claims_clear(&c1);
		jwt_claims_clear(&c2);
		jwt_cache_free(cache);
		break;
	}
	return 0;
}
