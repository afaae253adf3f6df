/* Loading the files a configuration names. */
#include "proxy/secrets.h"

#include <errno.h>
#include <openssl/crypto.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "conf/conf.h"
#include "proxy/clock.h"
#include "proxy/jwks.h"
#include "proxy/seal.h"
#include "proxy/tls.h"

#define SECRETS_FILE_MAX (1 << 20) /* bytes of a key set or key file */

/* "CONF:LINE: what \"PATH\": reason" into err; returns -1. */
static int secrets_error(const struct conf *conf, const struct conf_file *f, char *err,
			 size_t errlen, const char *what, const char *reason)
{
	snprintf(err, errlen, "%s:%d: %s \"%s\": %s", conf->file, f->line, what, f->path, reason);
	return -1;
}

/*
 * The whole of file f, NUL-terminated, in *text (length *len), in a buffer
 * the size of the file. 0, or -1 with err.
 */
static int secrets_read(const struct conf *conf, const struct conf_file *f, const char *what,
			char **text, size_t *len, char *err, size_t errlen)
{
	FILE *fp = fopen(f->path, "r");
	const char *why = NULL;
	struct stat st;
	char *buf = NULL;
	size_t size = 0, n = 0;

	if (!fp)
		return secrets_error(conf, f, err, errlen, what, strerror(errno));
	if (fstat(fileno(fp), &st) < 0) {
		why = strerror(errno);
		goto out;
	}
	if (st.st_size > SECRETS_FILE_MAX) {
		why = "file is larger than 1 MiB";
		goto out;
	}
	size = (size_t)st.st_size;
	buf = malloc(size + 1);
	if (!buf) {
		why = "out of memory";
		goto out;
	}
	/* One byte more than it had: a file that grew while read is refused. */
	n = fread(buf, 1, size + 1, fp);
	if (ferror(fp))
		why = strerror(errno);
	else if (n > size)
		why = "file changed while it was read";
out:
	fclose(fp);
	if (why) {
		free(buf);
		return secrets_error(conf, f, err, errlen, what, why);
	}
	buf[n] = '\0';
	*text = buf;
	*len = n;
	return 0;
}

/* The admin token: the file's first line, without surrounding blanks. */
static int secrets_admin_token(const struct conf *conf, struct secrets *s, char *err,
			       size_t errlen)
{
	const struct conf_file *f = &conf->admin_token;
	char *text, *p, *end;
	size_t len;

	if (secrets_read(conf, f, "admin token", &text, &len, err, errlen) < 0)
		return -1;
	for (p = text; *p == ' ' || *p == '\t'; p++)
		;
	end = p + strcspn(p, "\r\n");
	while (end > p && (end[-1] == ' ' || end[-1] == '\t'))
		end--;
	len = (size_t)(end - p);
	if (len < 16 || len > SECRETS_TOKEN_MAX || memchr(p, '\0', len)) {
		OPENSSL_cleanse(text, strlen(text));
		free(text);
		return secrets_error(conf, f, err, errlen, "admin token",
				     "the first line must be a token of 16 to 4096 bytes");
	}
	memmove(text, p, len);
	text[len] = '\0';
	s->admin_token = text;
	s->admin_token_len = len;
	return 0;
}

/* Each actor jwt route's key set. */
static int secrets_route_keys(const struct conf *conf, struct secrets *s, char *err,
			      size_t errlen)
{
	char reason[CONF_ERR_MAX];
	char *text;
	size_t len;

	s->route_keys = calloc(conf->nroutes ? conf->nroutes : 1, sizeof(*s->route_keys));
	if (!s->route_keys) {
		snprintf(err, errlen, "%s: out of memory", conf->file);
		return -1;
	}
	s->nroutes = conf->nroutes;
	for (int i = 0; i < conf->nroutes; i++) {
		const struct conf_file *f = &conf->routes[i].jwt_keys;
		int rc;

		if (conf->routes[i].actor != ACTOR_JWT)
			continue;
		if (secrets_read(conf, f, "JWT key set", &text, &len, err, errlen) < 0)
			return -1;
		rc = jwks_parse(text, len, &s->route_keys[i], reason, sizeof(reason));
		OPENSSL_cleanse(text, len); /* oct keys are secrets */
		free(text);
		if (rc < 0)
			return secrets_error(conf, f, err, errlen, "JWT key set", reason);
	}
	return 0;
}

int secrets_load_seal(const struct conf *conf, struct seal_keys **out, char *err, size_t errlen)
{
	const struct conf_file *f = &conf->body_encryption;
	char reason[CONF_ERR_MAX], line[CONF_ERR_MAX + 32];
	char *text;
	size_t len;
	int rc;

	*out = NULL;
	if (!f->path)
		return 0;
	if (secrets_read(conf, f, "body encryption keys", &text, &len, err, errlen) < 0)
		return -1;
	rc = seal_keys_parse(text, len, out, reason, sizeof(reason));
	OPENSSL_cleanse(text, len);
	free(text);
	if (rc < 0) {
		snprintf(line, sizeof(line), "line %s", reason);
		return secrets_error(conf, f, err, errlen, "body encryption keys", line);
	}
	return 0;
}

/*
 * Load cert's chain and key's key into ctx; an error names the line of the
 * file that failed (tls.c's message names the file).
 */
static int secrets_tls_pair(const struct conf *conf, SSL_CTX *ctx, const struct conf_file *cert,
			    const struct conf_file *key, char *err, size_t errlen)
{
	char reason[CONF_ERR_MAX];
	int rc = tls_ctx_use_pair(ctx, cert->path, key->path, reason, sizeof(reason));

	if (rc < 0)
		snprintf(err, errlen, "%s:%d: %s", conf->file, rc == -1 ? cert->line : key->line,
			 reason);
	return rc < 0 ? -1 : 0;
}

/* The listener's and the upstream's TLS contexts. */
static int secrets_tls(const struct conf *conf, struct secrets *s, char *err, size_t errlen)
{
	char reason[CONF_ERR_MAX];

	if (conf->tls_certificate.path) {
		s->listen_tls = tls_server_ctx(conf->tls_ciphers, reason, sizeof(reason));
		if (!s->listen_tls) {
			/* The default list has no line: the certificate's turns it on. */
			snprintf(err, errlen, "%s:%d: %s", conf->file,
				 conf->tls_ciphers_line ? conf->tls_ciphers_line
							: conf->tls_certificate.line,
				 reason);
			return -1;
		}
		tls_server_alpn(s->listen_tls, conf->http2);
		if (secrets_tls_pair(conf, s->listen_tls, &conf->tls_certificate,
				     &conf->tls_certificate_key, err, errlen) < 0)
			return -1;
	}
	if (!conf->upstream_tls)
		return 0;
	s->upstream_tls = tls_client_ctx(conf->upstream_ca.path, reason, sizeof(reason));
	if (!s->upstream_tls) {
		/* Without upstream_ca, the system's CAs: no line names them. */
		snprintf(err, errlen, "%s:%d: %s", conf->file,
			 conf->upstream_ca.line ? conf->upstream_ca.line : 1, reason);
		return -1;
	}
	if (conf->upstream_client_cert.path)
		return secrets_tls_pair(conf, s->upstream_tls, &conf->upstream_client_cert,
					&conf->upstream_client_key, err, errlen);
	return 0;
}

/*
 * Say so when the secret file f can be read or written by others, or
 * written by its group: other users of the host could read or swap the
 * key. Its group may read it (0640 gives the key to a service's group). A
 * file stat(2) cannot see is not judged.
 */
static void secrets_check_mode(const struct conf *conf, const struct conf_file *f,
			       secrets_warning_fn say, void *arg)
{
	char msg[2 * CONF_ERR_MAX];
	const char *how;
	struct stat st;

	if (stat(f->path, &st) < 0)
		return;
	how = (st.st_mode & S_IROTH)   ? "readable by others"
	      : (st.st_mode & S_IWOTH) ? "writable by others"
	      : (st.st_mode & S_IWGRP) ? "writable by its group"
				       : NULL;
	if (!how)
		return;
	snprintf(msg, sizeof(msg),
		 "%s:%d: warning: secret file \"%s\" is %s (mode %04o); chmod 600", conf->file,
		 f->line, f->path, how, (unsigned)(st.st_mode & 07777));
	say(msg, arg);
}

/* 1 when a route before route i reads the JWT key set route i reads. */
static int secrets_keys_read_before(const struct conf *conf, const struct secrets *s, int i)
{
	for (int j = 0; j < i; j++)
		if (s->route_keys[j] &&
		    strcmp(conf->routes[j].jwt_keys.path, conf->routes[i].jwt_keys.path) == 0)
			return 1;
	return 0;
}

void secrets_warnings(const struct conf *conf, const struct secrets *s, secrets_warning_fn say,
		      void *arg)
{
	const struct conf_file *files[] = {&conf->admin_token, &conf->body_encryption,
					   &conf->tls_certificate_key, &conf->upstream_client_key};

	for (size_t k = 0; k < sizeof(files) / sizeof(files[0]); k++)
		if (files[k]->path)
			secrets_check_mode(conf, files[k], say, arg);
	for (int i = 0; i < s->nroutes; i++)
		if (s->route_keys[i] && jwks_has_secret(s->route_keys[i]) &&
		    !secrets_keys_read_before(conf, s, i))
			secrets_check_mode(conf, &conf->routes[i].jwt_keys, say, arg);
}

int secrets_load(const struct conf *conf, struct secrets **out, char *err, size_t errlen)
{
	struct secrets *s = calloc(1, sizeof(*s));

	if (!s) {
		snprintf(err, errlen, "%s: out of memory", conf->file);
		return -1;
	}
	if (secrets_route_keys(conf, s, err, errlen) < 0 ||
	    (conf->admin_token.path && secrets_admin_token(conf, s, err, errlen) < 0) ||
	    secrets_load_seal(conf, &s->seal, err, errlen) < 0 ||
	    secrets_tls(conf, s, err, errlen) < 0) {
		secrets_free(s);
		return -1;
	}
	s->keys_since_us = s->sealing_since_us = clock_now_us();
	*out = s;
	return 0;
}

void secrets_follow(struct secrets *s, const struct secrets *prev)
{
	if (seal_keys_cover(s->seal, prev->seal))
		s->keys_since_us = prev->keys_since_us;
	if (s->seal && prev->seal)
		s->sealing_since_us = prev->sealing_since_us;
}

void secrets_free(struct secrets *s)
{
	if (!s)
		return;
	for (int i = 0; i < s->nroutes; i++)
		jwks_free(s->route_keys[i]);
	free(s->route_keys);
	if (s->admin_token) {
		OPENSSL_cleanse(s->admin_token, s->admin_token_len);
		free(s->admin_token);
	}
	seal_keys_free(s->seal);
	SSL_CTX_free(s->listen_tls);
	SSL_CTX_free(s->upstream_tls);
	free(s);
}

int secrets_admin_token_ok(const struct secrets *s, const char *token, size_t n)
{
	return s->admin_token && n == s->admin_token_len &&
	       CRYPTO_memcmp(token, s->admin_token, n) == 0;
}
