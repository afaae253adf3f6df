/* The headers only idemproxy sets. */
#include "proxy/marker.h"

#include <strings.h>

int marker_header(const char *name)
{
	static const char *const names[] = {
	    MARKER_REPLAYED,
	    MARKER_ENFORCED,
	    MARKER_BODY_OMITTED,
	    MARKER_KEY_EXPIRES,
	};

	/* All four start with "Idempoten": most names are out at once. */
	if ((name[0] | 0x20) != 'i' || strncasecmp(name, "Idempoten", 9) != 0)
		return 0;
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		if (strcasecmp(name, names[i]) == 0)
			return 1;
	}
	return 0;
}
