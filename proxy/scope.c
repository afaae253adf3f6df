/* Scopes: equality, order, hash and notification token. */
#include "proxy/scope.h"

#include <string.h>

#include <openssl/evp.h>

#include "proxy/digest.h"

#define SCOPE_FNV_OFFSET 14695981039346656037ULL
#define SCOPE_FNV_PRIME	 1099511628211ULL

uint64_t scope_hash(const struct scope *sc)
{
	const char *parts[] = {sc->actor, sc->operation, sc->key};
	uint64_t h = SCOPE_FNV_OFFSET;

	for (size_t i = 0; i < sizeof(parts) / sizeof(parts[0]); i++) {
		for (const unsigned char *p = (const unsigned char *)parts[i]; *p; p++)
			h = (h ^ *p) * SCOPE_FNV_PRIME;
		h *= SCOPE_FNV_PRIME;
	}
	return h;
}

int scope_equal(const struct scope *a, const struct scope *b)
{
	return strcmp(a->key, b->key) == 0 && strcmp(a->operation, b->operation) == 0 &&
	       strcmp(a->actor, b->actor) == 0;
}

int scope_cmp(const struct scope *a, const struct scope *b)
{
	int c = strcmp(a->actor, b->actor);

	if (!c)
		c = strcmp(a->operation, b->operation);
	if (!c)
		c = strcmp(a->key, b->key);
	return c;
}

/* The len bytes at md in lowercase hex into out (size bytes, NUL-terminated; "" for len 0). */
static void scope_hex(const unsigned char *md, unsigned int len, char *out, size_t size)
{
	static const char hex[] = "0123456789abcdef";
	unsigned int i;

	for (i = 0; i < len && 2 * i + 2 < size; i++) {
		out[2 * i] = hex[md[i] >> 4];
		out[2 * i + 1] = hex[md[i] & 15];
	}
	out[2 * i] = '\0';
}

void scope_token(const struct scope *sc, char token[SCOPE_TOKEN_SIZE])
{
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int len = 0;
	EVP_MD_CTX *ctx = EVP_MD_CTX_new();

	if (!ctx || !EVP_DigestInit_ex(ctx, digest_md5(), NULL) ||
	    !EVP_DigestUpdate(ctx, sc->actor, strlen(sc->actor)) ||
	    !EVP_DigestUpdate(ctx, "\n", 1) ||
	    !EVP_DigestUpdate(ctx, sc->operation, strlen(sc->operation)) ||
	    !EVP_DigestUpdate(ctx, "\n", 1) || !EVP_DigestUpdate(ctx, sc->key, strlen(sc->key)) ||
	    !EVP_DigestFinal_ex(ctx, md, &len))
		len = 0;
	EVP_MD_CTX_free(ctx);
	scope_hex(md, len, token, SCOPE_TOKEN_SIZE);
}

/* The label that starts a forwarded key's digest: no other digest of a scope starts so. */
#define SCOPE_FORWARD_LABEL "idemproxy forward_key v1"

/* One part of a scope into the digest: its length (4 bytes, big endian), then its bytes. */
static int scope_digest_part(EVP_MD_CTX *ctx, const char *s)
{
	size_t n = strlen(s);
	unsigned char len[4] = {(unsigned char)(n >> 24), (unsigned char)(n >> 16),
				(unsigned char)(n >> 8), (unsigned char)n};

	return EVP_DigestUpdate(ctx, len, sizeof(len)) && EVP_DigestUpdate(ctx, s, n);
}

void scope_forward_key(const struct scope *sc, char out[SCOPE_FORWARD_KEY_SIZE])
{
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int len = 0;
	EVP_MD_CTX *ctx = EVP_MD_CTX_new();

	if (!ctx || !EVP_DigestInit_ex(ctx, digest_sha256(), NULL) ||
	    !scope_digest_part(ctx, SCOPE_FORWARD_LABEL) || !scope_digest_part(ctx, sc->actor) ||
	    !scope_digest_part(ctx, sc->operation) || !scope_digest_part(ctx, sc->key) ||
	    !EVP_DigestFinal_ex(ctx, md, &len))
		len = 0;
	EVP_MD_CTX_free(ctx);
	scope_hex(md, len, out, SCOPE_FORWARD_KEY_SIZE);
}
