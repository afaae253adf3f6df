/* Actor sources. */
#include "proxy/actor.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "conf/conf.h"
#include "proxy/conf_gen.h"
#include "proxy/digest.h"
#include "proxy/http.h"
#include "proxy/jwt.h"
#include "proxy/secrets.h"
#include "proxy/utf8.h"

/* Verified tokens a worker remembers (actor jwt). */
#define ACTOR_JWT_CACHE 4096

/* Each source's actors have their own prefix: two sources never share a slot. */
#define ACTOR_HEADER_PREFIX	   "h:"
#define ACTOR_JWT_PREFIX	   "j:"
#define ACTOR_AUTHORIZATION_PREFIX "a:"
#define ACTOR_ANONYMOUS_ID	   "anonymous"

/* What follows a JWT actor's issuer: its claim is a string, or an integer. */
#define ACTOR_JWT_STRING  ':'
#define ACTOR_JWT_INTEGER '#'

struct actor_ctx {
	struct jwt_cache *jwt; /* the worker's verified tokens */
};

struct actor_ctx *actor_ctx_new(void)
{
	struct actor_ctx *ax = calloc(1, sizeof(*ax));

	if (ax && !(ax->jwt = jwt_cache_new(ACTOR_JWT_CACHE))) {
		free(ax);
		ax = NULL;
	}
	return ax;
}

void actor_ctx_free(struct actor_ctx *ax)
{
	if (!ax)
		return;
	jwt_cache_free(ax->jwt);
	free(ax);
}

int actor_value_ok(const char *s, size_t n)
{
	const unsigned char *p = (const unsigned char *)s;
	size_t k;

	if (n < 1 || n > ACTOR_MAX)
		return 0;
	while (n > 0) {
		k = utf8_seq(p, n);
		if (k == 0 || p[0] < 0x20 || p[0] == 0x7f)
			return 0;
		/* C1 controls: U+0080..U+009F, encoded 0xc2 0x80..0x9f. */
		if (k == 2 && p[0] == 0xc2 && p[1] < 0xa0)
			return 0;
		p += k;
		n -= k;
	}
	return 1;
}

#define ACTOR_BLANK(c) ((c) == ' ' || (c) == '\t')

/*
 * The canonical form of the Authorization value v in a new *out (*len
 * bytes): its scheme in lower case, one blank, its credential as sent, so
 * that "bearer K" and "Bearer  K" are one actor while the credential's own
 * case counts. Returns ACTOR_INVALID when no credential follows the scheme.
 */
static enum actor_result actor_canonical_authorization(const char *v, char **out, size_t *len)
{
	const char *scheme, *cred, *end;
	size_t slen, clen, i;

	while (ACTOR_BLANK(*v))
		v++;
	for (scheme = v; *v && !ACTOR_BLANK(*v); v++)
		;
	slen = (size_t)(v - scheme);
	while (ACTOR_BLANK(*v))
		v++;
	cred = v;
	for (end = cred + strlen(cred); end > cred && ACTOR_BLANK(end[-1]); end--)
		;
	clen = (size_t)(end - cred);
	if (slen == 0 || clen == 0)
		return ACTOR_INVALID;
	*len = slen + 1 + clen;
	*out = malloc(*len + 1);
	if (!*out)
		return ACTOR_NOMEM;
	for (i = 0; i < slen; i++)
		(*out)[i] = scheme[i] >= 'A' && scheme[i] <= 'Z' ? (char)(scheme[i] - 'A' + 'a')
								 : scheme[i];
	(*out)[slen] = ' ';
	memcpy(*out + slen + 1, cred, clen);
	(*out)[*len] = '\0';
	return ACTOR_OK;
}

/* "a:" and the hex SHA-256 of the Authorization value's canonical form. */
static enum actor_result actor_authorization(const struct http_msg *m, char **actor,
					     const char **why)
{
	static const char hex[] = "0123456789abcdef";
	unsigned char md[DIGEST_SHA256_LEN];
	const char *value = http_msg_header(m, "Authorization");
	char *canon = NULL, *out;
	enum actor_result res;
	size_t len = 0;
	int failed;

	if (!value)
		return ACTOR_ABSENT;
	if (http_msg_header_count(m, "Authorization") > 1) {
		*why = "credential given twice";
		return ACTOR_INVALID;
	}
	res = actor_canonical_authorization(value, &canon, &len);
	if (res == ACTOR_INVALID)
		*why = "no credential after the Authorization scheme";
	if (res != ACTOR_OK)
		return res;
	failed = digest_sha256_of(canon, len, md) < 0;
	free(canon);
	if (failed)
		return ACTOR_NOMEM;
	out = malloc(strlen(ACTOR_AUTHORIZATION_PREFIX) + 2 * sizeof(md) + 1);
	if (!out)
		return ACTOR_NOMEM;
	strcpy(out, ACTOR_AUTHORIZATION_PREFIX);
	for (size_t i = 0, o = strlen(out); i < sizeof(md); i++) {
		out[o++] = hex[md[i] >> 4];
		out[o++] = hex[md[i] & 15];
		out[o] = '\0';
	}
	*actor = out;
	return ACTOR_OK;
}

/*
 * The token of an actor jwt route: the whole value of its header=, or the
 * credential of "Authorization: Bearer TOKEN". NULL when there is none;
 * *twice when the header was given more than once.
 */
static const char *actor_token(const struct route *r, const struct http_msg *m, size_t *len,
			       int *twice)
{
	const char *name = r->actor_header ? r->actor_header : "Authorization";
	const char *v = http_msg_header(m, name);

	*twice = v && http_msg_header_count(m, name) > 1;
	if (!v)
		return NULL;
	if (!r->actor_header) {
		if (strncasecmp(v, "Bearer", 6) != 0 || (v[6] != ' ' && v[6] != '\t'))
			return NULL;
		v += 6;
		while (*v == ' ' || *v == '\t')
			v++;
	}
	*len = strlen(v);
	while (*len > 0 && (v[*len - 1] == ' ' || v[*len - 1] == '\t'))
		(*len)--;
	return *len ? v : NULL;
}

/*
 * "j:" LEN ":" ISSUER ":" CLAIM, or "#" INTEGER for an integer claim, from
 * a token verified against keys (through ax's cache) at the wall clock's
 * time, for exp / nbf / iat.
 */
static enum actor_result actor_jwt(const struct route *r, struct actor_ctx *ax,
				   const struct jwks *keys, const struct http_msg *m, char **actor,
				   const char **why)
{
	struct jwt_rules rules = {
	    .issuer = r->jwt_issuer,
	    .audience = r->jwt_audience,
	    .claim = r->jwt_claim,
	    .leeway_s = r->jwt_leeway_ms / 1000,
	    .require_exp = r->jwt_require_exp,
	};
	struct jwt_claims claims = {0};
	enum jwt_result res;
	const char *token, *iss;
	size_t len = 0;
	int twice, n;

	token = actor_token(r, m, &len, &twice);
	if (twice) {
		*why = "credential given twice";
		return ACTOR_INVALID;
	}
	if (!token)
		return ACTOR_ABSENT;
	res = jwt_cache_verify(ax->jwt, keys, &rules, token, len, (int64_t)time(NULL), &claims);
	if (res == JWT_NOMEM)
		return ACTOR_NOMEM;
	if (res != JWT_OK) {
		*why = jwt_result_name(res);
		return ACTOR_INVALID;
	}
	iss = claims.issuer ? claims.issuer : "";
	n = asprintf(actor, ACTOR_JWT_PREFIX "%zu:%s%c%s", strlen(iss), iss,
		     claims.actor_integer ? ACTOR_JWT_INTEGER : ACTOR_JWT_STRING, claims.actor);
	jwt_claims_clear(&claims);
	if (n < 0)
		return ACTOR_NOMEM;
	if (!actor_value_ok(*actor, (size_t)n)) {
		free(*actor);
		*actor = NULL;
		*why = "issuer and claim do not make an actor (too long, or control characters)";
		return ACTOR_INVALID;
	}
	return ACTOR_OK;
}

enum actor_result actor_from_request(struct actor_ctx *ax, const struct conf_gen *gen,
				     const struct route *r, const struct http_msg *m, char **actor,
				     const char **why)
{
	const char *value, *unused;
	size_t len;

	if (!why)
		why = &unused;
	*why = "not an actor value";
	switch (r->actor) {
	case ACTOR_ANONYMOUS:
		*actor = strdup(ACTOR_ANONYMOUS_ID);
		return *actor ? ACTOR_OK : ACTOR_NOMEM;
	case ACTOR_AUTHORIZATION:
		return actor_authorization(m, actor, why);
	case ACTOR_JWT:
		return actor_jwt(r, ax, gen->secrets->route_keys[r - gen->conf->routes], m, actor,
				 why);
	case ACTOR_HEADER:
	case ACTOR_UNSET:
		break;
	}
	value = http_msg_header(m, r->actor_header);
	if (!value)
		return ACTOR_ABSENT;
	if (http_msg_header_count(m, r->actor_header) > 1 || !actor_value_ok(value, strlen(value)))
		return ACTOR_INVALID;
	len = strlen(ACTOR_HEADER_PREFIX) + strlen(value) + 1;
	*actor = malloc(len);
	if (!*actor)
		return ACTOR_NOMEM;
	snprintf(*actor, len, ACTOR_HEADER_PREFIX "%s", value);
	return ACTOR_OK;
}

const char *actor_refusal(const struct route *r, enum actor_result res, const char *why, char *buf,
			  size_t len)
{
	int credential = r->actor == ACTOR_JWT || r->actor == ACTOR_AUTHORIZATION;

	if (res == ACTOR_ABSENT)
		return credential ? "the request carries no credential"
				  : "the request names no actor";
	if (!credential)
		return "an actor is one value of 1 to 256 bytes of UTF-8 without control "
		       "characters";
	snprintf(buf, len, "the %s is not valid: %s",
		 r->actor == ACTOR_JWT ? "bearer token" : "credential", why);
	return buf;
}

int actor_stored_form(const char *s)
{
	return strncmp(s, ACTOR_HEADER_PREFIX, strlen(ACTOR_HEADER_PREFIX)) == 0 ||
	       strncmp(s, ACTOR_JWT_PREFIX, strlen(ACTOR_JWT_PREFIX)) == 0 ||
	       strncmp(s, ACTOR_AUTHORIZATION_PREFIX, strlen(ACTOR_AUTHORIZATION_PREFIX)) == 0 ||
	       strcmp(s, ACTOR_ANONYMOUS_ID) == 0;
}
