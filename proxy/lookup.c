/* The configuration as a request reads it: its route, its peer's trust. */
#include "proxy/lookup.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <string.h>

#include "conf/conf.h"
#include "conf/route.h"

const struct route *lookup_route(const struct conf *conf, const char *method, const char *path,
				 size_t path_len, char *spelled)
{
	const struct route *r;
	const struct route_match *m;
	int i, j;

	for (i = 0; i < conf->nroutes; i++) {
		r = &conf->routes[i];
		for (j = 0; j < r->nmatches; j++) {
			m = &r->matches[j];
			if (strcmp(m->method, method) == 0 &&
			    route_template_match(m->segs, m->nsegs, path, path_len,
						 r->match_case != MATCH_CASE_SENSITIVE, spelled))
				return r;
		}
	}
	return NULL;
}

int lookup_trusted_proxy(const struct conf *conf, const struct sockaddr *sa)
{
	static const unsigned char v4_mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
	const unsigned char *addr;
	const struct conf_cidr *b;
	int family, i, bits;

	if (sa->sa_family == AF_INET) {
		family = AF_INET;
		addr = (const unsigned char *)&((const struct sockaddr_in *)sa)->sin_addr;
	} else if (sa->sa_family == AF_INET6) {
		addr = ((const struct sockaddr_in6 *)sa)->sin6_addr.s6_addr;
		family = AF_INET6;
		if (memcmp(addr, v4_mapped, sizeof(v4_mapped)) == 0) {
			family = AF_INET; /* ::ffff:a.b.c.d is the IPv4 peer a.b.c.d */
			addr += sizeof(v4_mapped);
		}
	} else {
		return 0;
	}
	for (i = 0; i < conf->ntrusted_proxies; i++) {
		b = &conf->trusted_proxies[i];
		if (b->family != family)
			continue;
		bits = b->bits;
		if (memcmp(addr, b->addr, (size_t)(bits / 8)) != 0)
			continue;
		if (bits % 8 == 0 ||
		    ((addr[bits / 8] ^ b->addr[bits / 8]) & (0xff00 >> (bits % 8))) == 0)
			return 1;
	}
	return 0;
}
