/* Schema migrations: the `migrate` command (blocking; never in the loop). */
#ifndef IDEMPROXY_MIGRATE_H
#define IDEMPROXY_MIGRATE_H

#include <stddef.h>

/*
 * Applies every compiled-in sql/NNN_*.sql not yet recorded, each in its own
 * transaction, and prints one line per applied file to stdout. Returns 0 or -1
 * with a message in err.
 */
int migrate_apply(const char *conninfo, char *err, size_t errlen);

#endif
