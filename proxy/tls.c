/* TLS contexts and client connections (OpenSSL). */
#include "proxy/tls.h"

#include <arpa/inet.h>
#include <errno.h>
#include <openssl/err.h>
#include <openssl/x509v3.h>
#include <stdio.h>
#include <string.h>

const char *tls_last_error(char *buf, size_t len)
{
	unsigned long e = ERR_peek_last_error();

	if (e)
		ERR_error_string_n(e, buf, len);
	else
		snprintf(buf, len, "unknown error");
	ERR_clear_error();
	return buf;
}

const char *tls_handshake_error(SSL *ssl, unsigned long err, char *buf, size_t len)
{
	long verify = ssl ? SSL_get_verify_result(ssl) : X509_V_OK;

	if (verify != X509_V_OK)
		snprintf(buf, len, "certificate verify failed: %s",
			 X509_verify_cert_error_string(verify));
	else if (err)
		ERR_error_string_n(err, buf, len);
	else
		return NULL;
	return buf;
}

int tls_refused_us(unsigned long err)
{
	switch (ERR_GET_LIB(err) == ERR_LIB_SSL ? ERR_GET_REASON(err) : 0) {
	case SSL_R_TLSV13_ALERT_CERTIFICATE_REQUIRED:
	case SSL_R_SSLV3_ALERT_BAD_CERTIFICATE:
	case SSL_R_SSLV3_ALERT_UNSUPPORTED_CERTIFICATE:
	case SSL_R_SSLV3_ALERT_CERTIFICATE_REVOKED:
	case SSL_R_SSLV3_ALERT_CERTIFICATE_EXPIRED:
	case SSL_R_SSLV3_ALERT_CERTIFICATE_UNKNOWN:
	case SSL_R_TLSV1_ALERT_UNKNOWN_CA:
	case SSL_R_TLSV1_ALERT_ACCESS_DENIED:
	case SSL_R_SSLV3_ALERT_HANDSHAKE_FAILURE:
		return 1;
	default:
		return 0;
	}
}

/* Settings both kinds of context share: TLS 1.2 and later, no renegotiation. */
static SSL_CTX *tls_ctx_new(const SSL_METHOD *method)
{
	SSL_CTX *ctx = SSL_CTX_new(method);

	if (!ctx)
		return NULL;
	SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
	SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION | SSL_OP_NO_COMPRESSION);
	SSL_CTX_set_mode(ctx, SSL_MODE_RELEASE_BUFFERS);
	return ctx;
}

/* ALPN protocol lists (RFC 7301 wire format), in the server's order of preference. */
static const unsigned char tls_alpn_h2[] = "\x02h2\x08http/1.1";
static const unsigned char tls_alpn_h1[] = "\x08http/1.1";

/* The first protocol of the server's list (arg: h2 offered) the client
 * offers too; none in common: no ALPN. */
static int tls_alpn_select(SSL *ssl, const unsigned char **out, unsigned char *outlen,
			   const unsigned char *in, unsigned int inlen, void *arg)
{
	const unsigned char *list = arg ? tls_alpn_h2 : tls_alpn_h1;
	unsigned int len = arg ? sizeof(tls_alpn_h2) - 1 : sizeof(tls_alpn_h1) - 1;
	unsigned char *chosen;

	if (SSL_select_next_proto(&chosen, outlen, list, len, in, inlen) != OPENSSL_NPN_NEGOTIATED)
		return SSL_TLSEXT_ERR_NOACK;
	*out = chosen;
	return SSL_TLSEXT_ERR_OK;
}

void tls_server_alpn(SSL_CTX *ctx, int h2)
{
	SSL_CTX_set_alpn_select_cb(ctx, tls_alpn_select, h2 ? (void *)tls_alpn_h2 : NULL);
}

/*
 * Whether the WHAT file PATH can be read, as OpenSSL's own errors do not
 * say why not (a missing file, a directory, no permission): 0, or -1 with
 * "cannot read WHAT "PATH": the system's reason" in err.
 */
static int tls_file_readable(const char *what, const char *path, char *err, size_t errlen)
{
	FILE *f = fopen(path, "r");
	int saved;

	if (f && (fgetc(f) != EOF || !ferror(f))) {
		fclose(f);
		return 0;
	}
	saved = errno;
	if (f)
		fclose(f);
	snprintf(err, errlen, "cannot read %s \"%s\": %s", what, path, strerror(saved));
	return -1;
}

int tls_ctx_use_pair(SSL_CTX *ctx, const char *cert_file, const char *key_file, char *err,
			size_t errlen)
{
	char e[256];

	if (tls_file_readable("certificate", cert_file, err, errlen) < 0)
		return -1;
	if (tls_file_readable("key", key_file, err, errlen) < 0)
		return -2;
	if (SSL_CTX_use_certificate_chain_file(ctx, cert_file) != 1) {
		snprintf(err, errlen, "cannot load certificate \"%s\": %s", cert_file,
			 tls_last_error(e, sizeof(e)));
		return -1;
	}
	if (SSL_CTX_use_PrivateKey_file(ctx, key_file, SSL_FILETYPE_PEM) != 1) {
		snprintf(err, errlen, "cannot load key \"%s\": %s", key_file,
			 tls_last_error(e, sizeof(e)));
		return -2;
	}
	if (SSL_CTX_check_private_key(ctx) != 1) {
		snprintf(err, errlen, "key \"%s\" does not match certificate \"%s\"", key_file,
			 cert_file);
		ERR_clear_error();
		return -2;
	}
	return 0;
}

/*
 * Key exchange groups the listener offers, most preferred first: the first
 * list this OpenSSL knows every name of (the hybrid post-quantum group
 * needs OpenSSL 3.5).
 */
static const char *const tls_server_groups[] = {
    "X25519MLKEM768:X25519:prime256v1:secp384r1",
    "X25519:prime256v1:secp384r1",
};

SSL_CTX *tls_server_ctx(const char *ciphers, char *err, size_t errlen)
{
	SSL_CTX *ctx = tls_ctx_new(TLS_server_method());
	char e[256];
	size_t i;

	if (!ctx) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	/* TLS 1.3 keeps OpenSSL's suites (all AEAD); the client's order
	 * decides, as SSL_OP_CIPHER_SERVER_PREFERENCE stays off. */
	if (SSL_CTX_set_cipher_list(ctx, ciphers) != 1) {
		snprintf(err, errlen, "\"tls_ciphers %s\": no TLS 1.2 cipher suite matches: %s",
			 ciphers, tls_last_error(e, sizeof(e)));
		SSL_CTX_free(ctx);
		return NULL;
	}
	for (i = 0; i < sizeof(tls_server_groups) / sizeof(tls_server_groups[0]); i++)
		if (SSL_CTX_set1_groups_list(ctx, tls_server_groups[i]) == 1)
			break;
	ERR_clear_error(); /* a list this OpenSSL did not know */
	if (i == sizeof(tls_server_groups) / sizeof(tls_server_groups[0])) {
		snprintf(err, errlen, "cannot set the key exchange groups");
		SSL_CTX_free(ctx);
		return NULL;
	}
	return ctx;
}

SSL_CTX *tls_client_ctx(const char *ca_file, char *err, size_t errlen)
{
	SSL_CTX *ctx = tls_ctx_new(TLS_client_method());
	char e[256];

	if (!ctx) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
	if (ca_file && tls_file_readable("CA certificates", ca_file, err, errlen) < 0) {
		SSL_CTX_free(ctx);
		return NULL;
	}
	if (ca_file ? SSL_CTX_load_verify_locations(ctx, ca_file, NULL) != 1
		    : SSL_CTX_set_default_verify_paths(ctx) != 1) {
		snprintf(err, errlen, "cannot load CA certificates \"%s\": %s",
			 ca_file ? ca_file : "(system)", tls_last_error(e, sizeof(e)));
		SSL_CTX_free(ctx);
		return NULL;
	}
	return ctx;
}

SSL *tls_client_new(SSL_CTX *ctx, const char *name)
{
	unsigned char addr[16];
	SSL *ssl = SSL_new(ctx);
	int ip;

	if (!ssl)
		return NULL;
	ip = inet_pton(AF_INET, name, addr) == 1 || inet_pton(AF_INET6, name, addr) == 1;
	if (ip ? X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), name) != 1
	       : SSL_set1_host(ssl, name) != 1 || SSL_set_tlsext_host_name(ssl, name) != 1) {
		SSL_free(ssl);
		return NULL;
	}
	return ssl;
}
