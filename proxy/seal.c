/*
 * AES-256-GCM sealing of stored values: the key file parser, seal and open.
 * See seal.h for the key file and the blob layout.
 */
#include "proxy/seal.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>

#include "proxy/base64.h"

/* EVP counts bytes in an int: longer input goes through in pieces this big. */
#define SEAL_PIECE (1 << 30)

/* The key id's length byte and the id follow the magic. */
#define SEAL_ID_OFFSET (SEAL_MAGIC_LEN + 1)

_Static_assert(SEAL_KEY_ID_MAX <= UINT8_MAX, "a key id's length must fit its byte");

struct seal_key {
	char id[SEAL_KEY_ID_MAX + 1];
	size_t id_len;
	size_t line; /* of the key file, for the duplicate message */
	unsigned char key[SEAL_KEY_LEN];
};

/* Immutable after seal_keys_parse(). */
struct seal_keys {
	EVP_CIPHER *cipher; /* AES-256-GCM, fetched once, shared by all calls */
	int nkeys;
	struct seal_key keys[SEAL_KEYS_MAX]; /* keys[0] seals */
};

static const char *const seal_result_names[] = {
	[SEAL_OK] = "ok",		    [SEAL_NOT_SEALED] = "not_sealed",
	[SEAL_UNKNOWN_KEY] = "unknown_key", [SEAL_BAD] = "bad",
	[SEAL_NOMEM] = "nomem",
};

_Static_assert(sizeof(seal_result_names) / sizeof(seal_result_names[0]) == SEAL_NOMEM + 1,
	       "seal_result_names must name every result");

static int seal_is_blank(char c)
{
	return c == ' ' || c == '\t';
}

/* 1 when all n bytes at s are A-Za-z0-9._- (the length is checked apart). */
static int seal_id_chars_ok(const char *s, size_t n)
{
	size_t i;
	char c;

	for (i = 0; i < n; i++) {
		c = s[i];
		if (!(c >= 'A' && c <= 'Z') && !(c >= 'a' && c <= 'z') && !(c >= '0' && c <= '9') &&
		    c != '.' && c != '_' && c != '-')
			return 0;
	}
	return 1;
}

/* The key of k whose id is the n bytes at id, or NULL. */
static const struct seal_key *seal_keys_find(const struct seal_keys *k, const char *id, size_t n)
{
	int i;

	for (i = 0; i < k->nkeys; i++) {
		if (k->keys[i].id_len == n && memcmp(k->keys[i].id, id, n) == 0)
			return &k->keys[i];
	}
	return NULL;
}

/*
 * One line of the key file (n bytes at s, without its LF): nothing for a
 * blank or comment line, else one more key in k. Returns 0, or -1 with
 * "LINE: message" in err.
 */
static int seal_keys_parse_line(struct seal_keys *k, const char *s, size_t n, size_t line,
				char *err, size_t errlen)
{
	const char *b64;
	size_t id_len, b64_len, key_len;
	const struct seal_key *dup;
	struct seal_key *key;

	while (n > 0 && (seal_is_blank(s[n - 1]) || s[n - 1] == '\r'))
		n--;
	while (n > 0 && seal_is_blank(*s)) {
		s++;
		n--;
	}
	if (n == 0 || *s == '#')
		return 0;

	for (id_len = 0; id_len < n && !seal_is_blank(s[id_len]); id_len++)
		;
	b64 = s + id_len;
	b64_len = n - id_len;
	while (b64_len > 0 && seal_is_blank(*b64)) {
		b64++;
		b64_len--;
	}

	if (id_len > SEAL_KEY_ID_MAX) {
		snprintf(err, errlen, "%zu: key id is %zu characters, more than %d", line, id_len,
			 SEAL_KEY_ID_MAX);
		return -1;
	}
	if (!seal_id_chars_ok(s, id_len)) {
		snprintf(err, errlen,
			 "%zu: key id \"%.*s\" has a character other than A-Za-z0-9._-", line,
			 (int)id_len, s);
		return -1;
	}
	if (b64_len == 0) {
		snprintf(err, errlen, "%zu: key \"%.*s\" has no BASE64KEY", line, (int)id_len, s);
		return -1;
	}
	if (memchr(b64, ' ', b64_len) || memchr(b64, '\t', b64_len)) {
		snprintf(err, errlen, "%zu: key \"%.*s\": more than one field after the id", line,
			 (int)id_len, s);
		return -1;
	}
	dup = seal_keys_find(k, s, id_len);
	if (dup) {
		snprintf(err, errlen, "%zu: key \"%.*s\" is already defined on line %zu", line,
			 (int)id_len, s, dup->line);
		return -1;
	}
	if (k->nkeys == SEAL_KEYS_MAX) {
		snprintf(err, errlen, "%zu: more than %d keys", line, SEAL_KEYS_MAX);
		return -1;
	}

	/* Decoded in place: what a failure leaves there is wiped with k. */
	key = &k->keys[k->nkeys];
	if (base64_decode(b64, b64_len, BASE64_STD, key->key, SEAL_KEY_LEN, &key_len) < 0) {
		snprintf(err, errlen, "%zu: key \"%.*s\" is not valid base64", line, (int)id_len,
			 s);
		return -1;
	}
	if (key_len != SEAL_KEY_LEN) {
		snprintf(err, errlen, "%zu: key \"%.*s\" is %zu bytes, not %d", line, (int)id_len,
			 s, key_len, SEAL_KEY_LEN);
		return -1;
	}
	memcpy(key->id, s, id_len);
	key->id[id_len] = '\0';
	key->id_len = id_len;
	key->line = line;
	k->nkeys++;
	return 0;
}

int seal_keys_parse(const char *text, size_t len, struct seal_keys **out, char *err, size_t errlen)
{
	const char *p = text, *end = text + len, *eol;
	struct seal_keys *k;
	size_t line = 0;
	int rc = -1;

	k = calloc(1, sizeof(*k));
	if (!k) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	k->cipher = EVP_CIPHER_fetch(NULL, "AES-256-GCM", NULL);
	if (!k->cipher) {
		snprintf(err, errlen, "OpenSSL has no AES-256-GCM");
		goto out;
	}
	while (p < end) {
		eol = memchr(p, '\n', (size_t)(end - p));
		if (!eol)
			eol = end;
		if (seal_keys_parse_line(k, p, (size_t)(eol - p), ++line, err, errlen) < 0)
			goto out;
		p = eol < end ? eol + 1 : end;
	}
	if (k->nkeys == 0) {
		snprintf(err, errlen, "%zu: no keys (lines \"KEYID BASE64KEY\")", line ? line : 1);
		goto out;
	}
	*out = k;
	k = NULL;
	rc = 0;
out:
	seal_keys_free(k);
	return rc;
}

void seal_keys_free(struct seal_keys *k)
{
	if (!k)
		return;
	EVP_CIPHER_free(k->cipher);
	OPENSSL_cleanse(k, sizeof(*k));
	free(k);
}

const char *seal_keys_current(const struct seal_keys *k)
{
	return k->keys[0].id;
}

int seal_keys_cover(const struct seal_keys *k, const struct seal_keys *old)
{
	int i;

	for (i = 0; old && i < old->nkeys; i++) {
		if (!k || !seal_keys_find(k, old->keys[i].id, old->keys[i].id_len))
			return 0;
	}
	return 1;
}

size_t seal_len(const struct seal_keys *k, size_t plain_len)
{
	return SEAL_OVERHEAD + k->keys[0].id_len + plain_len;
}

const char *seal_result_name(enum seal_result r)
{
	return (unsigned)r <= SEAL_NOMEM ? seal_result_names[r] : "invalid";
}

int seal_version(const void *data, size_t n)
{
	if (n < SEAL_MAGIC_LEN)
		return 0;
	if (memcmp(data, SEAL_MAGIC, SEAL_MAGIC_LEN) == 0)
		return 2;
	return memcmp(data, SEAL_MAGIC_V1, SEAL_MAGIC_LEN) == 0;
}

int seal_is_sealed(const void *data, size_t n)
{
	return seal_version(data, n) != 0;
}

/* 1 when the n bytes at d (n > 0) begin, or are the beginning of, a magic. */
static int seal_magic_prefix(const unsigned char *d, size_t n)
{
	size_t m = n < SEAL_MAGIC_LEN ? n : SEAL_MAGIC_LEN;

	return memcmp(d, SEAL_MAGIC, m) == 0 || memcmp(d, SEAL_MAGIC_V1, m) == 0;
}

/*
 * Feed the n bytes at in through ctx in pieces that fit EVP's int: as
 * associated data when out is NULL, else into out (n bytes: GCM is a stream
 * mode). Returns 0 or -1.
 */
static int seal_cipher_update(EVP_CIPHER_CTX *ctx, unsigned char *out, const unsigned char *in,
			      size_t n)
{
	int piece, outl;

	while (n > 0) {
		piece = n > SEAL_PIECE ? SEAL_PIECE : (int)n;
		if (!EVP_CipherUpdate(ctx, out, &outl, in, piece) || (out && outl != piece))
			return -1;
		in += piece;
		if (out)
			out += piece;
		n -= (size_t)piece;
	}
	return 0;
}

int seal_data(const struct seal_keys *k, const void *aad, size_t aad_len, const void *plain,
	      size_t n, unsigned char *out)
{
	const struct seal_key *key = &k->keys[0];
	unsigned char *nonce = out + SEAL_ID_OFFSET + key->id_len;
	unsigned char *ct = nonce + SEAL_NONCE_LEN, *tag = ct + n;
	EVP_CIPHER_CTX *ctx = NULL;
	int outl, rc = -1;

	memcpy(out, SEAL_MAGIC, SEAL_MAGIC_LEN);
	out[SEAL_MAGIC_LEN] = (unsigned char)key->id_len;
	memcpy(out + SEAL_ID_OFFSET, key->id, key->id_len);
	if (RAND_bytes(nonce, SEAL_NONCE_LEN) != 1)
		goto out;
	ctx = EVP_CIPHER_CTX_new();
	if (!ctx || !EVP_EncryptInit_ex2(ctx, k->cipher, key->key, nonce, NULL) ||
	    seal_cipher_update(ctx, NULL, aad, aad_len) < 0 ||
	    seal_cipher_update(ctx, ct, plain, n) < 0 || !EVP_EncryptFinal_ex(ctx, tag, &outl) ||
	    !EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_AEAD_GET_TAG, SEAL_TAG_LEN, tag))
		goto out;
	rc = 0;
out:
	EVP_CIPHER_CTX_free(ctx);
	return rc;
}

/* Wipe and free n bytes at p (unauthenticated plaintext); NULL accepted. */
static void seal_wipe_free(unsigned char *p, size_t n)
{
	if (!p)
		return;
	OPENSSL_cleanse(p, n);
	free(p);
}

enum seal_result seal_open(const struct seal_keys *k, const void *aad, size_t aad_len,
			   const void *data, size_t n, unsigned char **plain, size_t *plain_len,
			   char key_id[SEAL_KEY_ID_MAX + 1])
{
	const unsigned char *d = data, *nonce, *ct, *tag;
	const struct seal_key *key;
	enum seal_result r = SEAL_BAD;
	EVP_CIPHER_CTX *ctx = NULL;
	unsigned char *buf = NULL;
	size_t id_len, ct_len;
	const char *id;
	int outl;

	if (key_id)
		key_id[0] = '\0';
	if (n > 0 && !seal_magic_prefix(d, n))
		return SEAL_NOT_SEALED;
	if (n < SEAL_ID_OFFSET)
		return SEAL_BAD;
	id = (const char *)d + SEAL_ID_OFFSET;
	id_len = d[SEAL_MAGIC_LEN];
	if (id_len == 0 || id_len > SEAL_KEY_ID_MAX || n - SEAL_ID_OFFSET < id_len ||
	    !seal_id_chars_ok(id, id_len))
		return SEAL_BAD;
	if (key_id) {
		memcpy(key_id, id, id_len);
		key_id[id_len] = '\0';
	}
	if (n < SEAL_OVERHEAD + id_len)
		return SEAL_BAD;
	key = seal_keys_find(k, id, id_len);
	if (!key)
		return SEAL_UNKNOWN_KEY;

	nonce = d + SEAL_ID_OFFSET + id_len;
	ct = nonce + SEAL_NONCE_LEN;
	ct_len = n - SEAL_OVERHEAD - id_len;
	tag = ct + ct_len;
	buf = malloc(ct_len + 1);
	ctx = EVP_CIPHER_CTX_new();
	if (!buf || !ctx) {
		r = SEAL_NOMEM;
		goto out;
	}
	/* Any failure here, the tag check included, is the blob's: SEAL_BAD. */
	if (!EVP_DecryptInit_ex2(ctx, k->cipher, key->key, nonce, NULL) ||
	    seal_cipher_update(ctx, NULL, aad, aad_len) < 0 ||
	    seal_cipher_update(ctx, buf, ct, ct_len) < 0 ||
	    !EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_AEAD_SET_TAG, SEAL_TAG_LEN, (void *)tag) ||
	    EVP_DecryptFinal_ex(ctx, buf + ct_len, &outl) <= 0)
		goto out;
	buf[ct_len] = '\0';
	*plain = buf;
	*plain_len = ct_len;
	buf = NULL;
	r = SEAL_OK;
out:
	EVP_CIPHER_CTX_free(ctx);
	seal_wipe_free(buf, ct_len + 1);
	return r;
}
