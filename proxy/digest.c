/*
 * OpenSSL 3 looks an algorithm up in its provider store, under a lock, at
 * every EVP_DigestInit_ex given EVP_sha256() and at every SHA256() call:
 * on a replay, with its fingerprint, key hash and scope token, those
 * lookups cost more than the hashing. The algorithms are fetched once here
 * and handed out already resolved (EVP_MD_fetch; the legacy objects when a
 * fetch fails).
 */
#include "proxy/digest.h"

#include <pthread.h>
#include <string.h>

static pthread_once_t digest_once = PTHREAD_ONCE_INIT;
static const EVP_MD *digest_sha256_md, *digest_md5_md;

static void digest_fetch(void)
{
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

int digest_sha256_of(const void *data, size_t len, unsigned char out[DIGEST_SHA256_LEN])
{
	return EVP_Digest(data, len, out, NULL, digest_sha256(), NULL) == 1 ? 0 : -1;
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
