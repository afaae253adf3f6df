/*
 * A configuration rendered back into its file's syntax: the effective
 * configuration, every directive with its value (defaults included), which
 * `idemproxy -T` prints and the admin's GET /config answers.
 *
 * Secrets stay out of it: files (admin_token, body_encryption, TLS keys,
 * JWT key sets) are named, never read; the database password (password=,
 * or the userinfo of a postgresql:// URI) is written as CONF_DUMP_MASK.
 */
#ifndef IDEMPROXY_CONF_DUMP_H
#define IDEMPROXY_CONF_DUMP_H

#include <stddef.h>

#include "conf/conf.h"

#define CONF_DUMP_MASK "<masked>"

/*
 * conf as a configuration file that loads back into the same settings: a
 * new NUL-terminated string of *len bytes (free it), or NULL when out of
 * memory. A directive without a value is a comment "#name (not set)";
 * route directives are written in every route, inherited values included.
 */
char *conf_dump(const struct conf *conf, size_t *len);

#endif
