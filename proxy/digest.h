/*
 * Message digests (digest.c) with their algorithms fetched once per
 * process.
 */
#ifndef IDEMPROXY_DIGEST_H
#define IDEMPROXY_DIGEST_H

#include <stddef.h>

#include <openssl/evp.h>

#define DIGEST_SHA256_LEN 32
#define DIGEST_SHA1_LEN	  20
/* The bytes of a SHA-256 a short hash keeps (digest_short_hex). */
#define DIGEST_SHORT_BYTES 6
#define DIGEST_SHORT_HEX   (2 * DIGEST_SHORT_BYTES)

/* SHA-256 and MD5 for EVP_DigestInit_ex; never NULL. */
const EVP_MD *digest_sha256(void);
const EVP_MD *digest_md5(void);

/*
 * The calling thread's digest context, made on first use and freed when
 * the thread ends (NULL when OpenSSL has no memory): for a digest begun
 * (EVP_DigestInit_ex) and finished (EVP_DigestFinal_ex) with no other
 * digest of this module's in between.
 */
EVP_MD_CTX *digest_thread_ctx(void);

/* out = SHA-256 of the len bytes at data; 0, or -1 when OpenSSL failed. */
int digest_sha256_of(const void *data, size_t len, unsigned char out[DIGEST_SHA256_LEN]);

/*
 * out = the first DIGEST_SHORT_BYTES of the SHA-256 of the len bytes at
 * data, in lowercase hex, NUL-terminated: how the log, the records API and
 * `records` name a key or an actor without showing it (all zeros when
 * OpenSSL failed).
 */
void digest_short_hex(const void *data, size_t len, char out[DIGEST_SHORT_HEX + 1]);

/*
 * out = SHA-1 of the len bytes at data (the WebSocket handshake's, and
 * nothing that needs collision resistance); 0, or -1 when OpenSSL failed.
 */
int digest_sha1_of(const void *data, size_t len, unsigned char out[DIGEST_SHA1_LEN]);

#endif
