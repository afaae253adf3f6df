/*
 * TLS contexts (OpenSSL): the listener's, which presents a certificate, and
 * the upstream's, which verifies one. Connections use them through
 * libevent's OpenSSL bufferevents; handshakes never block a loop.
 */
#ifndef IDEMPROXY_TLS_H
#define IDEMPROXY_TLS_H

#include <stddef.h>
#include <openssl/ssl.h>

/*
 * A server context for TLS 1.2 and later (its certificate:
 * tls_ctx_use_pair): TLS 1.2 with the OpenSSL cipher list ciphers, TLS
 * 1.3 with OpenSSL's suites, ECDHE over X25519, P-256 or P-384, the
 * client's order of preference. NULL with a message in err when no TLS 1.2
 * suite matches ciphers, or out of memory.
 */
SSL_CTX *tls_server_ctx(const char *ciphers, char *err, size_t errlen);

/*
 * What a server context agrees to by ALPN: h2 (when h2) and http/1.1, in
 * that order; a client offering neither gets no ALPN answer.
 */
void tls_server_alpn(SSL_CTX *ctx, int h2);

/*
 * A client context for TLS 1.2 and later that verifies the peer's chain
 * against ca_file (PEM; NULL: the system's CAs). NULL with a message in err.
 */
SSL_CTX *tls_client_ctx(const char *ca_file, char *err, size_t errlen);

/*
 * Present the certificate chain in cert_file with the key in key_file
 * (PEM) from ctx. 0; -1 when the certificate cannot be loaded, -2 when the
 * key cannot, or does not match it; with a message in err.
 */
int tls_ctx_use_pair(SSL_CTX *ctx, const char *cert_file, const char *key_file, char *err,
		     size_t errlen);

/*
 * A client connection of ctx that checks the peer's certificate names
 * name (a DNS name, or an IP address) and sends it as SNI when it is a
 * name. NULL when out of memory.
 */
SSL *tls_client_new(SSL_CTX *ctx, const char *name);

/*
 * 1 when the OpenSSL error err is the peer refusing our certificate (an
 * alert such as certificate_required or bad_certificate). A TLS server
 * hands nothing to its application before it accepts the client's
 * certificate, so the refused connection carried no request, even if TLS
 * 1.3 let us write one before the alert came.
 */
int tls_refused_us(unsigned long err);

/*
 * Why a handshake of ssl failed, into buf: the peer's certificate did not
 * verify (the verify result as text), else the OpenSSL error err. NULL
 * when there is neither (the socket failed before TLS began).
 */
const char *tls_handshake_error(SSL *ssl, unsigned long err, char *buf, size_t len);

/* The last OpenSSL error of this thread as text, and the queue cleared. */
const char *tls_last_error(char *buf, size_t len);

#endif
