/* Unit tests for proxy/seal.c: the key file, sealing and opening. */
#include "proxy/base64.h"
#include "proxy/seal.h"
#include "tests/unit/unit.h"

#include <stdlib.h>
#include <string.h>

#define SCOPE "actor-1\nPOST /orders\nkey-1"

/* "ID BASE64\n" for a key of n bytes, all of them fill; into buf (size bytes). */
static const char *key_line(char *buf, size_t size, const char *id, unsigned char fill, size_t n)
{
	unsigned char key[64];
	size_t len;
	char *b64;

	memset(key, fill, n);
	b64 = base64_encode(key, n, &len);
	snprintf(buf, size, "%s %s\n", id, b64 ? b64 : "(oom)");
	free(b64);
	return buf;
}

/* Parses the NUL-terminated text; NULL with the message in err on failure. */
static struct seal_keys *parse(const char *text, char *err, size_t errlen)
{
	struct seal_keys *k = NULL;

	err[0] = '\0';
	if (seal_keys_parse(text, strlen(text), &k, err, errlen) < 0) {
		CHECK(k == NULL);
		return NULL;
	}
	return k;
}

/* The key file of one key "id" filled with fill. */
static struct seal_keys *one_key(const char *id, unsigned char fill)
{
	char line[128], err[256];

	return parse(key_line(line, sizeof(line), id, fill, 32), err, sizeof(err));
}

/* Checks that text fails to parse with exactly the message want. */
static void parse_fails(const char *text, const char *want)
{
	char err[256];
	struct seal_keys *k = parse(text, err, sizeof(err));

	CHECK(k == NULL);
	CHECK_STR(err, want);
	seal_keys_free(k);
}

/* Seals n bytes under k; a malloc'ed blob of *len bytes, or NULL. */
static unsigned char *seal(const struct seal_keys *k, const char *aad, const void *plain, size_t n,
			   size_t *len)
{
	unsigned char *blob;

	*len = seal_len(k, n);
	blob = malloc(*len);
	if (blob && seal_data(k, aad, strlen(aad), plain, n, blob) < 0) {
		free(blob);
		blob = NULL;
	}
	CHECK(blob != NULL);
	return blob;
}

/* seal_open() on a malloc'ed copy of n bytes (so ASan sees any over-read). */
static enum seal_result open_copy(const struct seal_keys *k, const char *aad,
				  const unsigned char *data, size_t n, char *key_id)
{
	unsigned char *copy = malloc(n ? n : 1), *plain = (unsigned char *)"untouched";
	size_t plain_len = 12345;
	enum seal_result r;

	if (!copy)
		return SEAL_NOMEM;
	memcpy(copy, data, n);
	r = seal_open(k, aad, strlen(aad), copy, n, &plain, &plain_len, key_id);
	if (r == SEAL_OK) {
		free(plain);
	} else {
		CHECK_STR((const char *)plain, "untouched");
		CHECK(plain_len == 12345);
	}
	free(copy);
	return r;
}

static void test_parse_good(void)
{
	char text[1024], l1[128], l2[128], err[256];
	struct seal_keys *k, *k2;
	unsigned char *blob, *plain = NULL;
	size_t len, plain_len;
	char id[SEAL_KEY_ID_MAX + 1];

	key_line(l1, sizeof(l1), "k1.new_A-9", 1, 32);
	key_line(l2, sizeof(l2), "k2", 2, 32);
	l1[strlen(l1) - 1] = '\0';
	l2[strlen(l2) - 1] = '\0';
	snprintf(text, sizeof(text), "# keys\r\n\r\n  # indented comment\n\t%s \t\r\n\n%s", l1, l2);
	k = parse(text, err, sizeof(err));
	CHECK(k != NULL);
	CHECK_STR(err, "");
	if (!k)
		return;
	CHECK_STR(seal_keys_current(k), "k1.new_A-9");
	CHECK(seal_len(k, 0) == 4 + 1 + 10 + 12 + 16);
	CHECK(seal_len(k, 100) == 4 + 1 + 10 + 12 + 100 + 16);

	/* The second key opens what a file with it first sealed. */
	k2 = one_key("k2", 2);
	CHECK(k2 != NULL);
	blob = k2 ? seal(k2, SCOPE, "hello", 5, &len) : NULL;
	if (blob) {
		CHECK(seal_open(k, SCOPE, strlen(SCOPE), blob, len, &plain, &plain_len, id) ==
		      SEAL_OK);
		CHECK(plain && plain_len == 5 && memcmp(plain, "hello", 5) == 0);
		CHECK_STR(id, "k2");
		free(plain);
	}
	free(blob);
	seal_keys_free(k2);
	seal_keys_free(k);

	/* An id of exactly SEAL_KEY_ID_MAX characters. */
	k = one_key("abcdefghijklmnopqrstuvwxyz012345", 3);
	CHECK(k != NULL);
	if (k)
		CHECK(seal_len(k, 0) == SEAL_OVERHEAD + SEAL_KEY_ID_MAX);
	seal_keys_free(k);
	seal_keys_free(NULL);
}

static void test_parse_errors(void)
{
	char text[8192], line[128];
	int i;

	key_line(line, sizeof(line), "k1", 1, 32);
	parse_fails("", "1: no keys (lines \"KEYID BASE64KEY\")");
	parse_fails("# only\n\n# comments\n", "3: no keys (lines \"KEYID BASE64KEY\")");
	parse_fails("# a\nk1\n", "2: key \"k1\" has no BASE64KEY");
	parse_fails("\n\nk1 AAAA!AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=\n",
		    "3: key \"k1\" is not valid base64");
	parse_fails("k1 AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA\n",
		    "1: key \"k1\" is not valid base64");
	parse_fails("k1 AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=AAAA\n",
		    "1: key \"k1\" is not valid base64");
	parse_fails("k1 AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA== AAAA\n",
		    "1: key \"k1\": more than one field after the id");

	snprintf(text, sizeof(text), "%s#\n", line);
	key_line(text + strlen(text), sizeof(text) - strlen(text), "k2", 2, 31);
	parse_fails(text, "3: key \"k2\" is 31 bytes, not 32");
	key_line(text, sizeof(text), "k2", 2, 33);
	parse_fails(text, "1: key \"k2\" is 33 bytes, not 32");

	key_line(text, sizeof(text), "k@1", 1, 32);
	parse_fails(text, "1: key id \"k@1\" has a character other than A-Za-z0-9._-");
	key_line(text, sizeof(text), "abcdefghijklmnopqrstuvwxyz0123456", 1, 32);
	parse_fails(text, "1: key id is 33 characters, more than 32");

	snprintf(text, sizeof(text), "%s\n%s%s", line, line, line);
	parse_fails(text, "3: key \"k1\" is already defined on line 1");

	/* SEAL_KEYS_MAX keys parse; one more does not. */
	text[0] = '\0';
	for (i = 0; i < SEAL_KEYS_MAX; i++) {
		char id[16];

		snprintf(id, sizeof(id), "k%d", i);
		key_line(text + strlen(text), sizeof(text) - strlen(text), id, (unsigned char)i,
			 32);
	}
	{
		char err[256];
		struct seal_keys *k = parse(text, err, sizeof(err));

		CHECK(k != NULL);
		CHECK_STR(err, "");
		seal_keys_free(k);
	}
	key_line(text + strlen(text), sizeof(text) - strlen(text), "extra", 9, 32);
	parse_fails(text, "65: more than 64 keys");
}

static void test_round_trip(void)
{
	static const size_t sizes[] = {0, 1, 15, 16, 17, 100000};
	struct seal_keys *k = one_key("k1", 1);
	unsigned char *plain, *blob, *out;
	size_t i, j, len, out_len;
	char id[SEAL_KEY_ID_MAX + 1];

	CHECK(k != NULL);
	plain = malloc(100000);
	if (!k || !plain)
		goto out;
	for (j = 0; j < 100000; j++)
		plain[j] = (unsigned char)(j * 7 + 3);
	for (i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		blob = seal(k, SCOPE, plain, sizes[i], &len);
		if (!blob)
			continue;
		CHECK(len == SEAL_OVERHEAD + 2 + sizes[i]);
		CHECK(seal_is_sealed(blob, len));
		out = NULL;
		out_len = 0;
		CHECK(seal_open(k, SCOPE, strlen(SCOPE), blob, len, &out, &out_len, id) == SEAL_OK);
		CHECK(out && out_len == sizes[i] && memcmp(out, plain, sizes[i]) == 0);
		CHECK(out && out[sizes[i]] == '\0');
		CHECK_STR(id, "k1");
		free(out);
		free(blob);
	}

	/* No associated data at all, and a NULL key_id. */
	blob = malloc(seal_len(k, 3));
	if (blob) {
		CHECK(seal_data(k, NULL, 0, "abc", 3, blob) == 0);
		out = NULL;
		CHECK(seal_open(k, NULL, 0, blob, seal_len(k, 3), &out, &out_len, NULL) == SEAL_OK);
		CHECK(out && out_len == 3 && strcmp((char *)out, "abc") == 0);
		free(out);
		CHECK(open_copy(k, "x", blob, seal_len(k, 3), id) == SEAL_BAD);
	}
	free(blob);
out:
	free(plain);
	seal_keys_free(k);
}

static void test_tamper(void)
{
	static const char body[] = "{\"id\":42,\"status\":\"paid\"}";
	struct seal_keys *k = one_key("k1", 1);
	size_t i, len, n = sizeof(body) - 1;
	char id[SEAL_KEY_ID_MAX + 1];
	enum seal_result r;
	unsigned char *blob;

	CHECK(k != NULL);
	blob = k ? seal(k, SCOPE, body, n, &len) : NULL;
	if (!blob)
		goto out;
	CHECK(open_copy(k, SCOPE, blob, len, id) == SEAL_OK);

	/* Another scope, or the same one a byte shorter. */
	CHECK(open_copy(k, "actor-2\nPOST /orders\nkey-1", blob, len, id) == SEAL_BAD);
	CHECK_STR(id, "k1");
	CHECK(open_copy(k, "actor-1\nPOST /orders\nkey-", blob, len, id) == SEAL_BAD);
	CHECK(open_copy(k, "", blob, len, id) == SEAL_BAD);

	/* A flipped byte of the nonce, the ciphertext, the tag. */
	blob[4 + 1 + 2] ^= 0x01;
	CHECK(open_copy(k, SCOPE, blob, len, id) == SEAL_BAD);
	blob[4 + 1 + 2] ^= 0x01;
	blob[4 + 1 + 2 + 12 + 5] ^= 0x80;
	CHECK(open_copy(k, SCOPE, blob, len, id) == SEAL_BAD);
	blob[4 + 1 + 2 + 12 + 5] ^= 0x80;
	blob[len - 1] ^= 0x01;
	CHECK(open_copy(k, SCOPE, blob, len, id) == SEAL_BAD);
	CHECK_STR(id, "k1");
	blob[len - 1] ^= 0x01;
	CHECK(open_copy(k, SCOPE, blob, len, id) == SEAL_OK);

	/* Any one flipped bit anywhere: never opens. */
	for (i = 0; i < len * 8; i++) {
		blob[i / 8] ^= (unsigned char)(1u << (i % 8));
		r = open_copy(k, SCOPE, blob, len, id);
		CHECK(r != SEAL_OK);
		CHECK(i >= 4 * 8 || r == SEAL_NOT_SEALED);
		blob[i / 8] ^= (unsigned char)(1u << (i % 8));
	}

	/* Every truncation, below the minimum blob size and above it. */
	for (i = 0; i < len; i++)
		CHECK(open_copy(k, SCOPE, blob, i, id) == SEAL_BAD);
	CHECK(open_copy(k, SCOPE, blob, 4, id) == SEAL_BAD);
	CHECK_STR(id, "");
	CHECK(open_copy(k, SCOPE, blob, 4 + 1 + 1, id) == SEAL_BAD);
	CHECK_STR(id, "");
	CHECK(open_copy(k, SCOPE, blob, 4 + 1 + 2, id) == SEAL_BAD);
	CHECK_STR(id, "k1");
	free(blob);

	/* The smallest blob (an empty plaintext) cut at every length. */
	blob = seal(k, SCOPE, "", 0, &len);
	for (i = 0; blob && i < len; i++)
		CHECK(open_copy(k, SCOPE, blob, i, id) == SEAL_BAD);
	if (blob)
		CHECK(open_copy(k, SCOPE, blob, len, id) == SEAL_OK);
	free(blob);
out:
	seal_keys_free(k);
}

static void test_rotation(void)
{
	char text[256], line[128];
	struct seal_keys *old = one_key("k1", 1), *rotated, *without;
	unsigned char *blob, *blob2;
	char err[256], id[SEAL_KEY_ID_MAX + 1];
	size_t len, len2;

	key_line(text, sizeof(text), "k2", 2, 32);
	strcat(text, key_line(line, sizeof(line), "k1", 1, 32));
	rotated = parse(text, err, sizeof(err));
	without = one_key("k2", 2);
	CHECK(old && rotated && without);
	if (!old || !rotated || !without)
		goto out;

	blob = seal(old, SCOPE, "old body", 8, &len);
	CHECK(blob && open_copy(rotated, SCOPE, blob, len, id) == SEAL_OK);
	CHECK_STR(id, "k1");
	CHECK(blob && open_copy(without, SCOPE, blob, len, id) == SEAL_UNKNOWN_KEY);
	CHECK_STR(id, "k1");

	CHECK_STR(seal_keys_current(rotated), "k2");
	blob2 = seal(rotated, SCOPE, "new body", 8, &len2);
	CHECK(blob2 && len2 == len);
	CHECK(blob2 && memcmp(blob2 + 5, "k2", 2) == 0);
	CHECK(blob2 && open_copy(without, SCOPE, blob2, len2, id) == SEAL_OK);
	CHECK_STR(id, "k2");
	CHECK(blob2 && open_copy(old, SCOPE, blob2, len2, id) == SEAL_UNKNOWN_KEY);
	CHECK_STR(id, "k2");
	free(blob2);
	free(blob);
out:
	seal_keys_free(without);
	seal_keys_free(rotated);
	seal_keys_free(old);
}

static void test_nonce_and_secrecy(void)
{
	static const char body[] =
	    "the plaintext of a stored response body, 64 bytes long.........";
	struct seal_keys *k = one_key("k1", 1);
	unsigned char *a = NULL, *b = NULL;
	size_t len_a, len_b, n = sizeof(body) - 1;

	CHECK(k != NULL);
	if (!k)
		return;
	a = seal(k, SCOPE, body, n, &len_a);
	b = seal(k, SCOPE, body, n, &len_b);
	CHECK(a && b && len_a == len_b);
	if (a && b) {
		CHECK(memcmp(a, b, len_a) != 0);
		CHECK(memcmp(a + 7, b + 7, SEAL_NONCE_LEN) != 0);
		CHECK(memmem(a, len_a, body, n) == NULL);
		CHECK(memmem(b, len_b, body, n) == NULL);
		CHECK(memmem(a, len_a, "plaintext", 9) == NULL);
		CHECK(memmem(a, len_a, SCOPE, strlen(SCOPE)) == NULL);
	}
	free(a);
	free(b);
	seal_keys_free(k);
}

static void test_not_sealed(void)
{
	struct seal_keys *k = one_key("k1", 1);
	char id[SEAL_KEY_ID_MAX + 1] = "junk";

	CHECK(k != NULL);
	CHECK(seal_is_sealed("IPS1", 4));
	CHECK(seal_is_sealed("IPS1{}", 6));
	CHECK(!seal_is_sealed("IPS", 3));
	CHECK(!seal_is_sealed("", 0));
	CHECK(!seal_is_sealed("{\"a\":1}", 7));
	if (k) {
		CHECK(open_copy(k, SCOPE, (const unsigned char *)"{\"a\":1}", 7, id) ==
		      SEAL_NOT_SEALED);
		CHECK_STR(id, "");
		CHECK(open_copy(k, SCOPE, (const unsigned char *)"IPX", 3, id) == SEAL_NOT_SEALED);
		CHECK(open_copy(k, SCOPE, (const unsigned char *)"IP", 2, id) == SEAL_BAD);
		CHECK(open_copy(k, SCOPE, (const unsigned char *)"IPS1\x03k\x01", 7, id) ==
		      SEAL_BAD);
		CHECK(open_copy(k, SCOPE, (const unsigned char *)"IPS1\x00", 5, id) == SEAL_BAD);
	}
	seal_keys_free(k);

	CHECK_STR(seal_result_name(SEAL_OK), "ok");
	CHECK_STR(seal_result_name(SEAL_NOT_SEALED), "not_sealed");
	CHECK_STR(seal_result_name(SEAL_UNKNOWN_KEY), "unknown_key");
	CHECK_STR(seal_result_name(SEAL_BAD), "bad");
	CHECK_STR(seal_result_name(SEAL_NOMEM), "nomem");
}

int main(void)
{
	test_parse_good();
	test_parse_errors();
	test_round_trip();
	test_tamper();
	test_rotation();
	test_nonce_and_secrecy();
	test_not_sealed();
	UNIT_DONE("seal");
}
