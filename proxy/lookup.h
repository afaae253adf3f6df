/*
 * What a request looks up in the configuration while it is served: its
 * route, and whether its peer is a trusted proxy. The configuration itself
 * (conf/) only parses a file into an immutable struct conf; these read it.
 */
#ifndef IDEMPROXY_LOOKUP_H
#define IDEMPROXY_LOOKUP_H

#include <stddef.h>

struct conf;
struct route;
struct sockaddr;

/*
 * The first route whose match accepts METHOD and PATH (normalised, no
 * query: http.h), or NULL. With spelled (NULL, or path_len bytes holding
 * the path, which may be path itself), the winning match rewrites the
 * literal segments there in its template's spelling: the path the
 * fingerprint takes.
 */
const struct route *lookup_route(const struct conf *conf, const char *method, const char *path,
				 size_t path_len, char *spelled);

/* 1 when the peer address sa (AF_INET or AF_INET6) is in trusted_proxies. */
int lookup_trusted_proxy(const struct conf *conf, const struct sockaddr *sa);

#endif
