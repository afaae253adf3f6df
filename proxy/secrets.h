/*
 * What the files a configuration names hold, read and checked whole when
 * the configuration is loaded (start, -t, every reload): JWT key sets, the
 * admin token, the body encryption keys and the TLS contexts. A reload
 * whose files do not load is refused like one whose text does not parse,
 * and a generation's secrets live and die with it (conf_gen.h).
 */
#ifndef IDEMPROXY_SECRETS_H
#define IDEMPROXY_SECRETS_H

#include <stddef.h>
#include <stdint.h>
#include <openssl/ssl.h>

struct conf;
struct jwks;
struct seal_keys;

#define SECRETS_TOKEN_MAX 4096 /* bytes of an admin token */

struct secrets {
	struct jwks **route_keys; /* [route index]: actor jwt's key set, else NULL */
	int nroutes;
	char *admin_token;	  /* NULL: no admin_token */
	size_t admin_token_len;
	struct seal_keys *seal;	  /* NULL: bodies are stored in plaintext */
	int64_t keys_since_us;	  /* clock_now_us(): since then the key set (seal, NULL
				   * an empty one) has lost no key id (secrets_follow) */
	int64_t sealing_since_us; /* with seal: since then this process has sealed
				   * what it stores, without a break */
	SSL_CTX *listen_tls;	  /* NULL: the listener speaks plain HTTP */
	SSL_CTX *upstream_tls;	  /* NULL: http:// upstream */
};

/*
 * Read every file conf names. 0 and *out, or -1 with "FILE:LINE: message"
 * in err (FILE the configuration, LINE the directive naming the file).
 */
int secrets_load(const struct conf *conf, struct secrets **out, char *err, size_t errlen)
	__attribute__((warn_unused_result));

/*
 * Each secret file of conf (s, its secrets as loaded) that others may read
 * or write, or its group write, handed to say as one line "FILE:LINE:
 * warning: secret file ...": the admin token, the body encryption keys,
 * the TLS keys and each JWT key set holding an oct key (once, however many
 * routes read it). The modes are read now, by stat(2).
 */
typedef void (*secrets_warning_fn)(const char *line, void *arg);
void secrets_warnings(const struct conf *conf, const struct secrets *s, secrets_warning_fn say,
		      void *arg);

void secrets_free(struct secrets *s); /* NULL accepted */

/*
 * s replaces prev on a reload: s keeps prev's keys_since_us when it still
 * has every key id prev had, and prev's sealing_since_us when both seal,
 * so that a reload which removes no key and keeps encryption on changes
 * neither time. (secrets_load sets both to the time it ran.)
 */
void secrets_follow(struct secrets *s, const struct secrets *prev);

/*
 * Only conf's body_encryption keys (NULL when it names none): for
 * `idemproxy records`, which seals what it stores and needs no other file.
 * 0, or -1 with err as secrets_load.
 */
int secrets_load_seal(const struct conf *conf, struct seal_keys **out, char *err, size_t errlen)
	__attribute__((warn_unused_result));

/* 1 when the n bytes at token are the admin token (constant time in n). */
int secrets_admin_token_ok(const struct secrets *s, const char *token, size_t n);

#endif
