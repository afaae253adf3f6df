/*
 * The directive table, for the modules of conf/ that walk it: the parser
 * (conf.c) and the rendering of a configuration back into its file's
 * syntax (dump.c). One row per directive: where it may appear, how many
 * arguments it takes, the type of its value and the field it fills, its
 * default and whether a reload may change it.
 */
#ifndef IDEMPROXY_CONF_TABLE_H
#define IDEMPROXY_CONF_TABLE_H

#include <stddef.h>

enum conf_where {
	CONF_TOP = 1,
	CONF_ROUTE = 2,
	CONF_BOTH = CONF_TOP | CONF_ROUTE,
};

enum conf_flags {
	CF_RESTART = 1, /* a reload keeps the running value; a restart applies it */
	CF_REPEAT = 2,	/* may appear more than once in one scope */
	CF_BLOCK = 4,	/* the line ends with "{" and opens a block */
	CF_OFF = 8,	/* "off" sets the field's zero value (no address, 0 ms) */
	CF_CLASSES = 16, /* CT_STATUSES: a class such as "4xx" counts as its hundred */
	CF_NONZERO = 32, /* CT_SIZE: 0 is no size for it */
	CF_GRPC = 64,	 /* CT_STATUSES: gRPC status codes (0..16, by name or number), not HTTP's */
};

/* What a directive's field holds; its type's setter parses one argument. */
enum conf_type {
	CT_CUSTOM,   /* no field of its own: the row's setter does everything */
	CT_STRING,   /* char *, any text */
	CT_TOKEN,    /* char *, an HTTP token (a header name) */
	CT_DURATION, /* int64_t milliseconds, greater than 0 */
	CT_SIZE,     /* size_t bytes */
	CT_INT,      /* int (the row's setter parses it) */
	CT_ENUM,     /* int, one of the row's choices */
	CT_ADDR,     /* struct conf_addr */
	CT_STATUSES, /* struct status_set, one argument a status (CF_CLASSES: or a class) */
	CT_FILE,     /* struct conf_file, a path */
};

/* One word a CT_ENUM directive accepts, and the value it stands for. */
struct conf_choice {
	const char *word;
	int value;
};

struct conf_parser;
struct route;

/* Parse ARGV[0..ARGC) (the arguments, without the directive name) into R
 * (a route, or the top-level route defaults) or into p->conf. Returns 0, or
 * -1 with the message in p->err. */
typedef int (*conf_setter)(struct conf_parser *p, struct route *r, int argc, char **argv);

struct conf_directive {
	const char *name;
	enum conf_where where;
	int min_args;
	int max_args; /* CONF_ARGS_ANY: no upper bound */
	enum conf_type type;
	size_t offset;	 /* of the field: in struct conf at top level, else in struct route */
	conf_setter set; /* NULL: the type's setter */
	const char *def; /* parsed by the setter before the file; NULL: none or computed */
	unsigned flags;
	const struct conf_choice *choices; /* CT_ENUM: ends with a NULL word */
	const char *what;		   /* CT_ENUM: the value's name in messages [name] */
};

extern const struct conf_directive conf_directives[];
extern const int conf_ndirectives;

#endif
