/*
 * Unit tests for proxy/seal.c (the key file, sealing and opening) and for
 * what proxy/record.c binds a stored record's blobs to and checks before a
 * replay.
 */
#include "conf/conf.h"
#include "proxy/base64.h"
#include "proxy/clock.h"
#include "proxy/http.h"
#include "proxy/record.h"
#include "proxy/scope.h"
#include "proxy/seal.h"
#include "proxy/secrets.h"
#include "tests/unit/unit.h"

#include <event2/buffer.h>
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

static void test_versions(void)
{
	struct seal_keys *k = one_key("k1", 1), *two = NULL, *none = NULL;
	char text[256], line[128], err[256], id[SEAL_KEY_ID_MAX + 1];
	unsigned char *blob;
	size_t len;

	CHECK(k != NULL);
	blob = k ? seal(k, SCOPE, "x", 1, &len) : NULL;
	CHECK(blob && memcmp(blob, "IPS2", 4) == 0);
	CHECK(blob && seal_version(blob, len) == 2);
	CHECK(seal_version("IPS1", 4) == 1);
	CHECK(seal_version("IPS3", 4) == 0 && seal_version("IPS", 3) == 0);
	CHECK(seal_is_sealed("IPS2", 4) && !seal_is_sealed("IPS3", 4));
	/* A version's associated data is the caller's (record.c): here, where it
	 * is the same for both, a relabelled blob still opens. */
	if (blob) {
		blob[3] = '1';
		CHECK(open_copy(k, SCOPE, blob, len, id) == SEAL_OK);
	}
	CHECK(open_copy(k, SCOPE, (const unsigned char *)"IPS", 3, id) == SEAL_BAD);
	free(blob);

	/* seal_keys_cover: every id of the old set is still there. */
	key_line(text, sizeof(text), "k2", 2, 32);
	strcat(text, key_line(line, sizeof(line), "k1", 1, 32));
	two = parse(text, err, sizeof(err));
	CHECK(two != NULL);
	CHECK(seal_keys_cover(two, k) && !seal_keys_cover(k, two));
	CHECK(seal_keys_cover(k, k) && seal_keys_cover(k, none) && seal_keys_cover(none, none));
	CHECK(!seal_keys_cover(none, k));
	seal_keys_free(two);
	seal_keys_free(k);
}

/* ---- record.c: sealed records ---- */

#define REC_STATUS  201
#define REC_GEN	    42
#define REC_HEADERS "Content-Type: application/json\r\nLocation: /courses/7\r\n"
#define REC_BODY    "{\"id\":7}"

static const struct scope rec_scope = {"h:alice", "course.create", "key-1"};

/* A completed record of rec_scope sealed under k: its blobs in *s. */
static struct record sealed_record(const struct seal_keys *k, struct record_sealed *s)
{
	struct record r = {.state = RECORD_COMPLETED, .status = REC_STATUS, .generation = REC_GEN};

	CHECK(record_seal(k, &rec_scope, REC_STATUS, REC_GEN, REC_HEADERS, strlen(REC_HEADERS),
			  (const unsigned char *)REC_BODY, strlen(REC_BODY), s) == 0);
	r.headers = (const char *)s->headers;
	r.headers_len = s->headers_len;
	r.body = s->body;
	r.body_len = s->body_len;
	r.sealed = seal_keys_current(k);
	r.completed_ms_ago = 1000;
	return r;
}

/* record_read of in for sc by rd; the why of a refusal into *why. */
static enum record_read read_one(const struct record_reader *rd, const struct scope *sc,
				 const struct record *in, const char **why)
{
	struct record out;
	void *mem = NULL;
	enum record_read r;

	*why = "";
	r = record_read(rd, sc, in, &out, &mem, why);
	if (r == RECORD_READ_OK) {
		CHECK(out.headers_len == strlen(REC_HEADERS) &&
		      memcmp(out.headers, REC_HEADERS, out.headers_len) == 0);
		CHECK(out.body_len == strlen(REC_BODY) &&
		      memcmp(out.body, REC_BODY, out.body_len) == 0);
		CHECK(out.sealed == NULL);
	} else {
		CHECK(mem == NULL);
	}
	free(mem);
	return r;
}

static void test_record_binding(void)
{
	struct seal_keys *k = one_key("k1", 1);
	struct record_reader rd = {.keys_ms = 5000, .sealing_ms = 5000, .retention_ms = 86400000};
	struct scope other = rec_scope;
	struct record_sealed s = {0};
	struct record in, t;
	const char *why;

	CHECK(k != NULL);
	if (!k)
		return;
	rd.seal = k;
	in = sealed_record(k, &s);
	CHECK(read_one(&rd, &rec_scope, &in, &why) == RECORD_READ_OK);

	/* Which blob: the headers blob in the body column and the other way round. */
	t = in;
	t.headers = (const char *)s.body;
	t.headers_len = s.body_len;
	t.body = s.headers;
	t.body_len = s.headers_len;
	CHECK(read_one(&rd, &rec_scope, &t, &why) == RECORD_READ_REFUSED);
	CHECK(strstr(why, "authentication tag") != NULL);

	/* The status, the generation, the scope. */
	t = in;
	t.status = 200;
	CHECK(read_one(&rd, &rec_scope, &t, &why) == RECORD_READ_REFUSED);
	t = in;
	t.generation = REC_GEN + 1;
	CHECK(read_one(&rd, &rec_scope, &t, &why) == RECORD_READ_REFUSED);
	other.key = "key-2";
	CHECK(read_one(&rd, &other, &in, &why) == RECORD_READ_REFUSED);

	/* Relabelled IPS1, a blob is opened with the scope alone: it fails. */
	s.headers[3] = '1';
	CHECK(read_one(&rd, &rec_scope, &in, &why) == RECORD_READ_REFUSED);
	s.headers[3] = '2';
	CHECK(read_one(&rd, &rec_scope, &in, &why) == RECORD_READ_OK);

	/* A dropped body: refused whether body_omitted says so or not. */
	t = in;
	t.body = NULL;
	t.body_len = 0;
	CHECK(read_one(&rd, &rec_scope, &t, &why) == RECORD_READ_REFUSED);
	CHECK(strstr(why, "body_omitted") != NULL);
	t.body_omitted = 1;
	CHECK(read_one(&rd, &rec_scope, &t, &why) == RECORD_READ_REFUSED);
	CHECK(strstr(why, "authentication tag") != NULL);

	record_sealed_free(&s);
	seal_keys_free(k);
}

/* An IPS1 blob: the scope alone as associated data, as earlier versions sealed. */
static unsigned char *ips1(const struct seal_keys *k, const char *plain, size_t *len)
{
	static const char aad[] = "h:alice\0course.create\0key-1";
	unsigned char *blob;

	*len = seal_len(k, strlen(plain));
	blob = malloc(*len);
	CHECK(blob && seal_data(k, aad, sizeof(aad) - 1, plain, strlen(plain), blob) == 0);
	if (blob)
		memcpy(blob, "IPS1", 4);
	return blob;
}

static void test_record_ips1(void)
{
	struct seal_keys *k = one_key("k1", 1);
	struct record_reader rd = {.keys_ms = 5000, .sealing_ms = 5000, .retention_ms = 86400000};
	struct record in = {.state = RECORD_COMPLETED, .status = REC_STATUS, .generation = REC_GEN};
	unsigned char *h, *b;
	size_t hlen, blen;
	const char *why;

	CHECK(k != NULL);
	if (!k)
		return;
	rd.seal = k;
	/* seal_data writes IPS2: relabelling it IPS1 gives what an IPS1 seal of
	 * the same associated data would be, since the layouts are one. */
	h = ips1(k, REC_HEADERS, &hlen);
	b = ips1(k, REC_BODY, &blen);
	in.headers = (const char *)h;
	in.headers_len = hlen;
	in.body = b;
	in.body_len = blen;
	in.sealed = "k1";
	CHECK(h && b && read_one(&rd, &rec_scope, &in, &why) == RECORD_READ_OK);
	free(h);
	free(b);
	seal_keys_free(k);
}

static void test_record_unknown_key(void)
{
	struct seal_keys *k1 = one_key("k1", 1), *k2 = one_key("k2", 2);
	struct record_reader rd = {.keys_ms = 5000, .sealing_ms = 5000, .retention_ms = 86400000};
	struct record_sealed s = {0};
	struct record in;
	const char *why;

	CHECK(k1 && k2);
	if (!k1 || !k2)
		goto out;
	in = sealed_record(k2, &s);
	rd.seal = k1;
	/* Completed after this instance's keys: another instance is ahead. */
	in.completed_ms_ago = 4999;
	CHECK(read_one(&rd, &rec_scope, &in, &why) == RECORD_READ_LATER);
	CHECK(strstr(why, "rotation is in progress") != NULL);
	/* Before them: the key was removed. */
	in.completed_ms_ago = 5000;
	CHECK(read_one(&rd, &rec_scope, &in, &why) == RECORD_READ_REFUSED);
	CHECK(strstr(why, "the key was removed") != NULL);
	/* No keys at all is a key set without this one. */
	rd.seal = NULL;
	in.completed_ms_ago = 10;
	CHECK(read_one(&rd, &rec_scope, &in, &why) == RECORD_READ_LATER);
	in.completed_ms_ago = 6000;
	CHECK(read_one(&rd, &rec_scope, &in, &why) == RECORD_READ_REFUSED);
	rd.seal = k2;
	CHECK(read_one(&rd, &rec_scope, &in, &why) == RECORD_READ_OK);
out:
	record_sealed_free(&s);
	seal_keys_free(k1);
	seal_keys_free(k2);
}

static void test_record_plaintext(void)
{
	struct seal_keys *k = one_key("k1", 1);
	struct record_reader rd = {.keys_ms = 5000, .sealing_ms = 5000, .retention_ms = 60000};
	struct record in = {
	    .state = RECORD_COMPLETED,
	    .status = REC_STATUS,
	    .headers = REC_HEADERS,
	    .headers_len = strlen(REC_HEADERS),
	    .body = (const unsigned char *)REC_BODY,
	    .body_len = strlen(REC_BODY),
	};
	const char *why;

	/* Encryption off: plaintext is what every record is. */
	CHECK(read_one(&rd, &rec_scope, &in, &why) == RECORD_READ_OK);
	rd.seal = k;
	in.completed_ms_ago = 5001; /* before encryption was turned on */
	CHECK(read_one(&rd, &rec_scope, &in, &why) == RECORD_READ_OK);
	in.completed_ms_ago = 5000;
	CHECK(read_one(&rd, &rec_scope, &in, &why) == RECORD_READ_REFUSED);
	CHECK(strstr(why, "completed after body_encryption was turned on") != NULL);
	/* Past the route's retention no record from before can be live. */
	in.completed_ms_ago = 365LL * 86400000;
	rd.sealing_ms = 60000;
	CHECK(read_one(&rd, &rec_scope, &in, &why) == RECORD_READ_REFUSED);
	CHECK(strstr(why, "longer than the route's retention") != NULL);
	seal_keys_free(k);
}

/* record_headers_valid of the NUL-terminated lines, with one extra name. */
static int headers_ok(const char *lines)
{
	char *extra[] = {"X-Request-Cost"};
	const char *why = NULL;
	int ok = record_headers_valid(lines, strlen(lines), extra, 1, &why);

	CHECK(ok || (why && *why));
	return ok;
}

static void test_record_headers_valid(void)
{
	const char *why;

	CHECK(headers_ok(""));
	CHECK(headers_ok("Content-Type: application/json\r\n"));
	CHECK(headers_ok("content-type: a\r\nLOCATION: /x\r\nETag: \"\xe9\"\r\n"));
	CHECK(headers_ok("X-Request-Cost: 7\tunits\r\nLast-Modified: \r\n"));
	/* Names a record never keeps, or this route does not. */
	CHECK(!headers_ok("Set-Cookie: a=b\r\n"));
	CHECK(!headers_ok("Content-Length: 0\r\n"));
	CHECK(!headers_ok("Transfer-Encoding: chunked\r\n"));
	CHECK(!headers_ok("Idempotent-Replayed: true\r\n"));
	CHECK(!headers_ok("X-Other: 1\r\n"));
	CHECK(!headers_ok("Content-Type2: a\r\n"));
	/* Not "Name: value\r\n". */
	CHECK(!headers_ok("Content-Type: a"));
	CHECK(!headers_ok("Content-Type: a\r"));
	CHECK(!headers_ok("Content-Type: a\n"));
	CHECK(!headers_ok("Content-Type:a\r\n"));
	CHECK(!headers_ok("Content-Type : a\r\n"));
	CHECK(!headers_ok(": a\r\n"));
	CHECK(!headers_ok("\r\n"));
	CHECK(!headers_ok("Content Type: a\r\n"));
	CHECK(!headers_ok(" Content-Type: a\r\n"));
	CHECK(!headers_ok("Content-Type: a\r\n\r\n"));
	/* A split inside a value. */
	CHECK(!headers_ok("Location: /x\nSet-Cookie: a=b\r\n"));
	CHECK(!headers_ok("Location: /x\rSet-Cookie: a=b\r\n"));
	CHECK(!headers_ok("Location: /x\x01y\r\n"));
	CHECK(!headers_ok("Location: /x\x7fy\r\n"));
	CHECK(record_headers_valid("Location: /x\0y\r\n", 15, NULL, 0, &why) == 0);
	CHECK(strstr(why, "CR, LF, NUL") != NULL);
}

/* Trailers after one blank line: kept by the same rule as headers. */
static void test_record_trailers_valid(void)
{
	CHECK(headers_ok("Content-Type: application/grpc\r\n\r\ngrpc-status: 0\r\n"));
	CHECK(headers_ok("\r\ngrpc-status: 13\r\ngrpc-message: x%20y\r\nX-Request-Cost: 1\r\n"));
	CHECK(headers_ok("grpc-status: 5\r\ngrpc-message: gone\r\n"));
	CHECK(!headers_ok("Content-Type: a\r\n\r\n\r\ngrpc-status: 0\r\n"));
	CHECK(!headers_ok("Content-Type: a\r\n\r\nSet-Cookie: a=b\r\n"));
	CHECK(!headers_ok("Content-Type: a\r\n\r\ngrpc-status: 0\r\n\r\n"));
	CHECK(!headers_ok("Content-Type: a\r\n\r\ngrpc-status: 0\n"));
	CHECK(record_trailers_at("A: b\r\n\r\nC: d\r\n", 16) == 6);
	CHECK(record_trailers_at("\r\nC: d\r\n", 8) == 0);
	CHECK(record_trailers_at("A: b\r\nC: d\r\n", 12) == 12);
	CHECK(record_trailers_at("", 0) == 0);
}

/* ---- record.c: the record an owner stores, the record a duplicate replays ---- */

#define REC_RESPONSE                                                                               \
	"HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nLocation: /courses/7\r\n"       \
	"Set-Cookie: s=1\r\nContent-Length: 8\r\n\r\n" REC_BODY
#define REC_RETENTION_MS 86400000
#define REC_SINCE_US	 5000000 /* the secrets' keys and sealing: this long ago */

/* The response REC_RESPONSE, parsed; NULL on failure. */
static struct http_msg *rec_response(void)
{
	struct http_parser *p = http_parser_new(HTTP_RESPONSE, 1000);
	struct evbuffer *in = evbuffer_new();
	struct http_msg *m = NULL;

	if (p && in && evbuffer_add(in, REC_RESPONSE, strlen(REC_RESPONSE)) == 0 &&
	    http_parser_feed(p, in) == HTTP_DONE)
		m = http_parser_take(p);
	evbuffer_free(in);
	http_parser_free(p);
	return m;
}

/* 1 when s begins with prefix. */
static int starts(const char *s, const char *prefix)
{
	return strncmp(s, prefix, strlen(prefix)) == 0;
}

/* The record st as the store hands it back, completed ms_ago. */
static struct record rec_as_read(const struct record_stored *st, int64_t ms_ago)
{
	return (struct record){
	    .state = RECORD_COMPLETED,
	    .status = st->plain.status,
	    .generation = st->plain.generation,
	    .headers = st->headers,
	    .headers_len = st->headers_len,
	    .body = st->body,
	    .body_len = st->body_len,
	    .body_omitted = st->plain.body_omitted,
	    .sealed = st->key_id,
	    .completed_ms_ago = ms_ago,
	};
}

static void test_record_to_store(void)
{
	struct http_msg *resp = rec_response();
	struct secrets sec = {0};
	struct route r = {.retention_ms = REC_RETENTION_MS};
	unsigned char fp[RECORD_FINGERPRINT_LEN];
	struct record_stored st;

	CHECK(resp != NULL);
	if (!resp)
		return;
	memset(fp, 7, sizeof(fp));
	/* Plaintext: the kept headers and the body, as they are. */
	CHECK(record_to_store(&sec, &r, &rec_scope, REC_GEN, fp, resp, 0, &st) == RECORD_STORE_OK);
	CHECK(st.plain.state == RECORD_COMPLETED && st.plain.status == REC_STATUS &&
	      st.plain.generation == REC_GEN && memcmp(st.plain.fingerprint, fp, sizeof(fp)) == 0);
	CHECK(st.headers == st.plain.headers && st.key_id == NULL);
	CHECK_STR(st.headers, REC_HEADERS);
	CHECK(st.body_len == strlen(REC_BODY) && memcmp(st.body, REC_BODY, st.body_len) == 0);
	record_stored_free(&st);
	/* Omitted: no body at all; an empty one kept is "" (not omitted). */
	CHECK(record_to_store(&sec, &r, &rec_scope, REC_GEN, fp, resp, 1, &st) == RECORD_STORE_OK);
	CHECK(st.body == NULL && st.body_len == 0 && st.plain.body_omitted);
	record_stored_free(&st);
	evbuffer_drain(resp->body, evbuffer_get_length(resp->body));
	CHECK(record_to_store(&sec, &r, &rec_scope, REC_GEN, fp, resp, 0, &st) == RECORD_STORE_OK);
	CHECK(st.body != NULL && st.body_len == 0 && !st.plain.body_omitted);
	record_stored_free(&st);
	http_msg_free(resp);
}

/* A response's trailers a record keeps go after its headers and a blank line. */
static void test_record_to_store_trailers(void)
{
	struct http_msg *resp = rec_response();
	struct secrets sec = {0};
	char *extra[] = {"x-kept"};
	struct route r = {.retention_ms = REC_RETENTION_MS, .store_headers = extra,
			  .nstore_headers = 1};
	unsigned char fp[RECORD_FINGERPRINT_LEN] = {0};
	struct record_stored st;
	const char *why = NULL;

	CHECK(resp != NULL);
	if (!resp)
		return;
	resp->trailers = evbuffer_new();
	evbuffer_add_printf(resp->trailers, "grpc-status: 13\r\ngrpc-message: no\r\n"
					    "x-dropped: 1\r\nx-kept: 2\r\n");
	CHECK(record_to_store(&sec, &r, &rec_scope, REC_GEN, fp, resp, 0, &st) == RECORD_STORE_OK);
	CHECK_STR(st.headers, REC_HEADERS "\r\ngrpc-status: 13\r\ngrpc-message: no\r\nx-kept: 2\r\n");
	CHECK(record_trailers_at(st.headers, st.headers_len) == strlen(REC_HEADERS));
	CHECK(record_headers_valid(st.headers, st.headers_len, extra, 1, &why));
	record_stored_free(&st);
	/* None kept: no blank line. */
	evbuffer_drain(resp->trailers, evbuffer_get_length(resp->trailers));
	evbuffer_add_printf(resp->trailers, "x-dropped: 1\r\n");
	CHECK(record_to_store(&sec, &r, &rec_scope, REC_GEN, fp, resp, 0, &st) == RECORD_STORE_OK);
	CHECK_STR(st.headers, REC_HEADERS);
	record_stored_free(&st);
	http_msg_free(resp);
}

static void test_record_to_store_sealed(void)
{
	struct seal_keys *k1 = one_key("k1", 1), *k2 = one_key("k2", 2);
	struct http_msg *resp = rec_response();
	struct secrets sec = {.keys_since_us = clock_now_us() - REC_SINCE_US,
			      .sealing_since_us = clock_now_us() - REC_SINCE_US};
	struct route r = {.retention_ms = REC_RETENTION_MS};
	unsigned char fp[RECORD_FINGERPRINT_LEN] = {0};
	struct scope other = rec_scope;
	struct record_stored st;
	struct record in, out;
	char why[RECORD_WHY_MAX];
	void *mem = NULL;

	CHECK(k1 && k2 && resp);
	if (!k1 || !k2 || !resp)
		goto out;
	sec.seal = k1;
	CHECK(record_to_store(&sec, &r, &rec_scope, REC_GEN, fp, resp, 0, &st) == RECORD_STORE_OK);
	CHECK_STR(st.key_id, "k1");
	CHECK(st.headers != st.plain.headers && seal_version(st.headers, st.headers_len) == 2);
	CHECK(seal_version(st.body, st.body_len) == 2);
	CHECK_STR(st.plain.headers, REC_HEADERS);
	/* What the store hands back is replayed as the plaintext it was. */
	in = rec_as_read(&st, 1000);
	CHECK(record_to_replay(&sec, &r, &rec_scope, &in, &out, &mem, why, sizeof(why)) ==
	      RECORD_READ_OK);
	CHECK(out.sealed == NULL && out.headers_len == strlen(REC_HEADERS) &&
	      memcmp(out.headers, REC_HEADERS, out.headers_len) == 0);
	CHECK(out.body_len == strlen(REC_BODY) && memcmp(out.body, REC_BODY, out.body_len) == 0);
	free(mem);
	/* Not replayed: what the log is told names the key and the reason. */
	other.key = "key-2";
	CHECK(record_to_replay(&sec, &r, &other, &in, &out, &mem, why, sizeof(why)) ==
	      RECORD_READ_REFUSED);
	CHECK(
	    starts(why, "stored record sealed with key \"k1\" cannot be read: its authentication"));
	sec.seal = k2; /* k1 is newer than these keys: a rotation is reaching them */
	CHECK(record_to_replay(&sec, &r, &rec_scope, &in, &out, &mem, why, sizeof(why)) ==
	      RECORD_READ_LATER);
	CHECK(starts(why, "stored record sealed with key \"k1\" cannot be read yet: unknown key"));
	in = (struct record){.state = RECORD_COMPLETED,
			     .status = REC_STATUS,
			     .headers = "",
			     .body = (const unsigned char *)""};
	CHECK(record_to_replay(&sec, &r, &rec_scope, &in, &out, &mem, why, sizeof(why)) ==
	      RECORD_READ_REFUSED);
	CHECK(starts(why, "stored record is not replayed: it is plaintext"));
	record_stored_free(&st);
out:
	http_msg_free(resp);
	seal_keys_free(k1);
	seal_keys_free(k2);
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
	test_versions();
	test_record_binding();
	test_record_ips1();
	test_record_unknown_key();
	test_record_plaintext();
	test_record_headers_valid();
	test_record_trailers_valid();
	test_record_to_store_trailers();
	test_record_to_store();
	test_record_to_store_sealed();
	UNIT_DONE("seal");
}
