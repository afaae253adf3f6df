/*
 * JSON with yajl, both ways.
 *
 * Reading untrusted JSON with yajl_tree, whose input and strings are C
 * strings and whose tree is freed recursively: documents with a NUL byte,
 * the escape \u0000 (which would cut "a\u0000b" to "a"), a surrogate
 * escape outside a high-low pair (yajl reads "a\ud800" as "a?" and
 * "\ud800\u0041" as U+10041), a '/' outside strings (yajl_tree allows
 * comments) or nesting deeper than JSON_TREE_DEPTH are refused before yajl
 * sees them: every string yajl hands back is the one the document spells. A member is looked up
 * so that one appearing twice is noticed: a caller that refuses those makes
 * sure two readers of one document cannot disagree about it.
 *
 * Writing JSON into memory with a json_writer (yajl_gen underneath), for
 * every document idemproxy makes: problem bodies, the records API, the
 * OpenAPI contract. A writer latches its first failure (out of memory, a
 * string that is not UTF-8, a value out of place): every later call does
 * nothing and json_writer_finish returns NULL, so a caller checks once, at
 * the end. The text grows in the generator's own buffer, which doubles as
 * needed: a call allocates nothing unless that buffer must grow, and a
 * document costs the generator, its buffer and finish's one copy.
 */
#ifndef IDEMPROXY_JSON_H
#define IDEMPROXY_JSON_H

#include <stddef.h>

#include <yajl/yajl_gen.h>
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

/* json_writer_init's flags. */
#define JSON_PRETTY  0x1 /* members and elements on lines of their own, indented by two blanks */
#define JSON_NEWLINE 0x2 /* the text ends with a newline */

/* A JSON text being written; its members are the writer's own. */
struct json_writer {
	yajl_gen g; /* NULL once finished, or when it could not be made */
	int flags;
	int failed;
};

/*
 * Start a text in w (flags: JSON_PRETTY, JSON_NEWLINE or 0). Strings are
 * checked to be UTF-8. Out of memory, w starts failed. Whatever happens
 * next, w is ended by json_writer_finish.
 */
void json_writer_init(struct json_writer *w, int flags);

/* Latch a failure of the caller's own (a string it could not make). */
void json_writer_fail(struct json_writer *w);

/*
 * The values. Once w failed their arguments are not looked at: a string
 * the caller could not make (NULL) may be passed after json_writer_fail.
 */
void json_strn(struct json_writer *w, const char *s, size_t n); /* n bytes of UTF-8 */
void json_str(struct json_writer *w, const char *s);
void json_int(struct json_writer *w, long long v);
void json_number(struct json_writer *w, const char *s, size_t n); /* a number's text, as is */
void json_bool(struct json_writer *w, int v);
void json_null(struct json_writer *w);
void json_map_open(struct json_writer *w);
void json_map_close(struct json_writer *w);
void json_array_open(struct json_writer *w);
void json_array_close(struct json_writer *w);

/* An object's member: its name, then its value (json_key_map: an object, closed by
 * json_map_close). */
void json_key_str(struct json_writer *w, const char *key, const char *value);
void json_key_int(struct json_writer *w, const char *key, long long value);
void json_key_bool(struct json_writer *w, const char *key, int value);
void json_key_map(struct json_writer *w, const char *key);

/*
 * End w: the text as a malloc'd NUL-terminated string the caller frees,
 * its length in *len; NULL when anything failed. The generator is freed
 * either way.
 */
char *json_writer_finish(struct json_writer *w, size_t *len) __attribute__((warn_unused_result));

#endif
