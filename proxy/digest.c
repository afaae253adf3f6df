/*
 * OpenSSL 3 looks an algorithm up in its provider store, under a lock, at
 * every EVP_DigestInit_ex given EVP_sha256() and at every SHA256() call:
 * on a replay, with its fingerprint, key hash and scope token, those
 * lookups cost more than the hashing. The algorithms are fetched once here
 * and handed out already resolved (EVP_MD_fetch; the legacy objects when a
 * fetch fails). Each thread also keeps one digest context to begin and
 * finish digests in (digest_thread_ctx): a context made and freed per
 * digest cost as much again as hashing a key.
 */
#include "proxy/digest.h"

#include <pthread.h>
#include <string.h>

static pthread_once_t digest_once = PTHREAD_ONCE_INIT;
static const EVP_MD *digest_sha256_md, *digest_md5_md;
static pthread_key_t digest_ctx_key; /* the thread's EVP_MD_CTX, freed when it ends */
static int digest_ctx_keyed;

static void digest_ctx_free(void *ctx)
{
	EVP_MD_CTX_free(ctx);
}

static void digest_fetch(void)
{
	digest_ctx_keyed = pthread_key_create(&digest_ctx_key, digest_ctx_free) == 0;
	EVP_MD *sha256 = EVP_MD_fetch(NULL, "SHA256", NULL);
	EVP_MD *md5 = EVP_MD_fetch(NULL, "MD5", NULL);

	digest_sha256_md = sha256 ? sha256 : EVP_sha256();
	digest_md5_md = md5 ? md5 : EVP_md5();
}

const EVP_MD *digest_sha256(void)
{
	pthread_once(&digest_once, digest_fetch);
	return digest_sha256_md;
}

const EVP_MD *digest_md5(void)
{
	pthread_once(&digest_once, digest_fetch);
	return digest_md5_md;
}

EVP_MD_CTX *digest_thread_ctx(void)
{
	EVP_MD_CTX *ctx;

	pthread_once(&digest_once, digest_fetch);
	if (!digest_ctx_keyed)
		return NULL;
	ctx = pthread_getspecific(digest_ctx_key);
	if (!ctx && (ctx = EVP_MD_CTX_new()) && pthread_setspecific(digest_ctx_key, ctx) != 0) {
		EVP_MD_CTX_free(ctx);
		ctx = NULL;
	}
	return ctx;
}

int digest_sha256_of(const void *data, size_t len, unsigned char out[DIGEST_SHA256_LEN])
{
	EVP_MD_CTX *ctx = digest_thread_ctx();

	if (!ctx)
		return EVP_Digest(data, len, out, NULL, digest_sha256(), NULL) == 1 ? 0 : -1;
	return EVP_DigestInit_ex(ctx, digest_sha256(), NULL) == 1 &&
		       EVP_DigestUpdate(ctx, data, len) == 1 &&
		       EVP_DigestFinal_ex(ctx, out, NULL) == 1
		   ? 0
		   : -1;
}

int digest_sha1_of(const void *data, size_t len, unsigned char out[DIGEST_SHA1_LEN])
{
	/* Once per WebSocket handshake: not worth a fetched algorithm. */
	return EVP_Digest(data, len, out, NULL, EVP_sha1(), NULL) == 1 ? 0 : -1;
}

void digest_short_hex(const void *data, size_t len, char out[DIGEST_SHORT_HEX + 1])
{
	static const char hex[] = "0123456789abcdef";
	unsigned char md[DIGEST_SHA256_LEN];

	if (digest_sha256_of(data, len, md) < 0)
		memset(md, 0, sizeof(md));
	for (int i = 0; i < DIGEST_SHORT_BYTES; i++) {
		out[2 * i] = hex[md[i] >> 4];
		out[2 * i + 1] = hex[md[i] & 15];
	}
	out[DIGEST_SHORT_HEX] = '\0';
}
