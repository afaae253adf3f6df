/*
 * Reading untrusted JSON with yajl_tree, whose input and strings are C
 * strings and whose tree is freed recursively: documents with a NUL byte,
 * the escape \u0000 (which would cut "a\u0000b" to "a"), a surrogate
 * escape outside a high-low pair (yajl reads "a\ud800" as "a?" and
 * "\ud800\u0041" as U+10041), a '/' outside strings (yajl_tree allows
 * comments) or nesting deeper than JSON_TREE_DEPTH are refused before yajl
 * sees them: every string yajl hands back is the one the document spells. A member is looked up
 * so that one appearing twice is noticed: a caller that refuses those makes
 * sure two readers of one document cannot disagree about it.
 */
#ifndef IDEMPROXY_JSON_H
#define IDEMPROXY_JSON_H

#include <stddef.h>

#include <yajl/yajl_tree.h>

#define JSON_TREE_DEPTH 32 /* deepest nesting of objects and arrays */

/*
 * Returns 0 when yajl_tree may parse the n bytes at s: no NUL byte, no
 * \u0000 escape, no unpaired surrogate escape, no '/' outside strings,
 * nesting at most JSON_TREE_DEPTH deep; else -1. This is not a JSON validator; yajl is.
 */
int json_tree_safe(const char *s, size_t n) __attribute__((warn_unused_result));

/*
 * The member name of the object v in *out, NULL when absent (it lives as
 * long as v). Returns 0, or -1 when the member appears more than once.
 */
int json_member(yajl_val v, const char *name, yajl_val *out) __attribute__((warn_unused_result));

#endif
