/*
 * Encryption at rest of stored response headers and bodies: AES-256-GCM
 * under keys read from a key file, with associated data the caller chooses
 * (record.c: what the blob is bound to), so that a blob moved to another
 * place fails to open.
 *
 * A key file has one key a line, "KEYID BASE64KEY" (blanks around and
 * between the two fields are ignored, so are a trailing CR, blank lines and
 * lines whose first non-blank character is '#'). KEYID is 1..32 characters
 * of A-Za-z0-9._- and unique in the file; BASE64KEY is 32 bytes in standard
 * base64 with padding. The first key seals, every key opens: to rotate, put
 * the new key first and keep the old ones while blobs sealed under them are
 * still stored.
 *
 * A sealed blob describes itself:
 *
 *   "IPS2" | key id length (1 byte) | key id | nonce (12 bytes, random) |
 *   ciphertext (as long as the plaintext) | tag (16 bytes)
 *
 * The magic is the format's version, and the version says what the
 * associated data is: seal_data() writes SEAL_MAGIC, seal_open() opens
 * SEAL_MAGIC_V1 blobs too (the same layout, written by earlier versions
 * with other associated data), and seal_version() tells the caller which
 * associated data to give.
 *
 * The keys are immutable once parsed: seal_data() and seal_open() may run
 * on one struct seal_keys from several threads at once.
 */
#ifndef IDEMPROXY_SEAL_H
#define IDEMPROXY_SEAL_H

#include <stddef.h>

#define SEAL_MAGIC	"IPS2"
#define SEAL_MAGIC_V1	"IPS1"
#define SEAL_MAGIC_LEN	4
#define SEAL_KEY_LEN	32 /* AES-256 */
#define SEAL_KEY_ID_MAX 32
#define SEAL_KEYS_MAX	64
#define SEAL_NONCE_LEN	12
#define SEAL_TAG_LEN	16
/* The bytes a blob adds to its plaintext, besides the key id. */
#define SEAL_OVERHEAD (SEAL_MAGIC_LEN + 1 + SEAL_NONCE_LEN + SEAL_TAG_LEN)

struct seal_keys;

/*
 * Parse the key file text (len bytes, NUL not needed). On success returns 0
 * and a new struct seal_keys in *out, which the caller frees with
 * seal_keys_free(). On failure returns -1 and writes "LINE: message" into err
 * (errlen bytes, no trailing newline), LINE being the 1-based line of the
 * file, e.g. "3: key \"k2\" is 31 bytes, not 32"; "no keys" names the last
 * line (1 for an empty file). Messages never contain key material. The two
 * failures that are not about a line, out of memory and an OpenSSL without
 * AES-256-GCM, have no LINE.
 */
int seal_keys_parse(const char *text, size_t len, struct seal_keys **out, char *err, size_t errlen)
	__attribute__((warn_unused_result));

/* Wipe the key bytes (OPENSSL_cleanse) and free k; NULL is accepted. */
void seal_keys_free(struct seal_keys *k);

/* The id of the key that seals (the file's first), valid as long as k. */
const char *seal_keys_current(const struct seal_keys *k);

/*
 * 1 when k has every key id old has (the key bytes are not compared), else
 * 0. NULL is a set of no keys: a NULL old is covered by any k.
 */
int seal_keys_cover(const struct seal_keys *k, const struct seal_keys *old);

/*
 * The size of the blob that seals plain_len bytes under the current key:
 * SEAL_OVERHEAD + strlen(seal_keys_current(k)) + plain_len. plain_len must
 * leave room for the overhead in a size_t.
 */
size_t seal_len(const struct seal_keys *k, size_t plain_len);

/*
 * Seal the n bytes at plain under the current key, as a SEAL_MAGIC blob,
 * with the aad_len bytes at aad (may be NULL when aad_len is 0) as
 * associated data,
 * into out: seal_len(k, n) bytes the caller provides, not overlapping plain.
 * A fresh random nonce (RAND_bytes) each call; random 96-bit nonces stay
 * safe for about 2^32 seals under one key, so rotate well before that.
 * Returns 0, or -1 when RAND_bytes or OpenSSL's cipher fails (out is then
 * garbage).
 */
int seal_data(const struct seal_keys *k, const void *aad, size_t aad_len, const void *plain,
	      size_t n, unsigned char *out) __attribute__((warn_unused_result));

/*
 * 1 when the n bytes at data begin with SEAL_MAGIC or SEAL_MAGIC_V1, else
 * 0. A hint only: a plaintext record (stored before encryption was turned
 * on) may begin with "IPS2" too, so the store keeps whether a value is
 * sealed in a column of its own and does not rely on this.
 */
int seal_is_sealed(const void *data, size_t n);

/* The version of the blob of n bytes at data: 2 (SEAL_MAGIC), 1 (SEAL_MAGIC_V1) or 0. */
int seal_version(const void *data, size_t n);

enum seal_result {
	SEAL_OK,
	SEAL_NOT_SEALED,  /* data does not begin with either magic (nor part of one) */
	SEAL_UNKNOWN_KEY, /* sealed under a key id the key file does not have */
	SEAL_BAD,	  /* truncated, garbled, wrong aad, or the tag does not match */
	SEAL_NOMEM,
};

/* "ok", "not_sealed", "unknown_key", "bad" or "nomem", for logs. */
const char *seal_result_name(enum seal_result r);

/*
 * Open the blob of n bytes at data with the associated data it was sealed
 * with. On SEAL_OK *plain is a malloc'ed copy of the plaintext, *plain_len
 * bytes followed by one NUL not counted, which the caller frees; on any other
 * result *plain and *plain_len are untouched and no plaintext is kept.
 * key_id, when not NULL, receives the blob's NUL-terminated key id whenever
 * the blob is whole up to it (also with SEAL_UNKNOWN_KEY and a failed tag),
 * else "". Data shorter than a magic that is a prefix of one counts as a
 * truncated blob (SEAL_BAD), not as SEAL_NOT_SEALED. aad is what the blob's
 * version (seal_version) was sealed with: other bytes fail the tag.
 * SEAL_NOMEM also covers OpenSSL failing to allocate its cipher context.
 */
enum seal_result seal_open(const struct seal_keys *k, const void *aad, size_t aad_len,
			   const void *data, size_t n, unsigned char **plain, size_t *plain_len,
			   char key_id[SEAL_KEY_ID_MAX + 1]) __attribute__((warn_unused_result));

#endif
