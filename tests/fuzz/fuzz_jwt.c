/*
 * libFuzzer target for JWKS parsing and JWT verification (proxy/jwt.c).
 * The first byte says what the rest is (mod 3), and which rules apply
 * (its next bit: none, or an issuer and an audience):
 *   0: a JWKS document for jwks_parse();
 *   1: a token for jwt_verify() against a fixed key set (an oct key "h"
 *      and a P-256 key "e");
 *   2: "header.payload", which the target signs with the oct key (HS256)
 *      itself so that the payload's claims are reached; it is verified
 *      directly and twice through a cache, and all three must agree.
 * A JWT_OK must carry an actor of 1 to JWT_ACTOR_MAX bytes; anything else
 * must leave the claims zeroed.
 *   clang -g -O1 -fsanitize=fuzzer,address,undefined -I. tests/fuzz/fuzz_jwt.c \
 *         proxy/jwt.c -lyajl -lcrypto -o fuzz_jwt
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>
#include <openssl/hmac.h>

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
	{NULL, NULL, "sub", 60},
	{"https://issuer.example", "api", "sub", 60},
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fuzz_check(enum jwt_result r, const struct jwt_claims *c)
{
	size_t len;

	if (r != JWT_OK) {
		if (c->issuer || c->actor || c->exp)
			abort();
		return;
	}
	len = c->actor ? strlen(c->actor) : 0;
	if (len < 1 || len > JWT_ACTOR_MAX)
		abort();
}

static int fuzz_same(const struct jwt_claims *a, const struct jwt_claims *b)
{
	if (a->exp != b->exp || !a->issuer != !b->issuer)
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
		break;
	case 1:
		r = jwt_verify(keys, rules, (const char *)data, size, FUZZ_NOW, &c);
		fuzz_check(r, &c);
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
		fuzz_check(r, &c);
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
