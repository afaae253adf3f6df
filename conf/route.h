/*
 * Route path templates: "/" followed by segments separated by "/", each
 * literal text, "{name}" for exactly one non-empty segment, or a final "*"
 * for zero or more remaining segments. Templates are written normalised
 * (http/path.h) and match normalised request paths.
 */
#ifndef IDEMPROXY_ROUTE_H
#define IDEMPROXY_ROUTE_H

#include <stddef.h>

enum path_seg_kind {
	SEG_LITERAL,
	SEG_PARAM,  /* {name}: exactly one non-empty segment */
	SEG_REST,   /* final *: zero or more remaining segments */
};

struct path_seg {
	enum path_seg_kind kind;
	char *text;   /* literal text or parameter name; NULL for SEG_REST */
	size_t len;
};

/*
 * Parse tmpl into a new array *segs of *nsegs segments (free it with
 * route_template_free). Returns 0, or -1 with the reason in err.
 */
int route_template_parse(const char *tmpl, struct path_seg **segs, int *nsegs,
			 char *err, size_t errlen);

/*
 * 1 when path (path_len bytes, normalised, no query) matches the template,
 * ASCII letters of literal segments in either case when icase. On a match
 * with spelled (NULL, or path_len bytes holding path, which may be path
 * itself), the literal segments there are rewritten in the template's
 * spelling.
 */
int route_template_match(const struct path_seg *segs, int nsegs, const char *path,
			 size_t path_len, int icase, char *spelled);

/*
 * 1 when templates a and b match the same paths: the same segments, literal
 * ones alike (ASCII letters in either case when icase), parameters in the
 * same places whatever their names.
 */
int route_template_same(const struct path_seg *a, int na, const struct path_seg *b, int nb,
			int icase);

void route_template_free(struct path_seg *segs, int nsegs);

#endif
