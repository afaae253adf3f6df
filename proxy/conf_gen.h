/*
 * Configuration generations: a configuration in use, and who holds it.
 *
 * The main thread and every worker hold the running generation; a worker
 * keeps holding a replaced one while its requests still use it, and the
 * last release frees it (nginx's cycles, pgbouncer's reload). A struct
 * conf_gens is one thread's view: the generation new requests get, and the
 * replaced ones its requests still hold. Only its own thread touches it;
 * the holder count is the only thing threads share.
 */
#ifndef IDEMPROXY_CONF_GEN_H
#define IDEMPROXY_CONF_GEN_H

#include <stdatomic.h>
#include <sys/queue.h>

struct conf;
struct secrets;

struct conf_gen {
	struct conf *conf;
	struct secrets *secrets; /* what conf's files hold (secrets.h) */
	atomic_int holders;
};

/* A generation of conf and its secrets (taken over: freed with the generation), one holder. */
struct conf_gen *conf_gen_new(struct conf *conf, struct secrets *secrets);
void conf_gen_acquire(struct conf_gen *gen);
/* Drop one hold; the last frees the generation and its conf. NULL is accepted. */
void conf_gen_release(struct conf_gen *gen);

struct conf_gen_retired;

struct conf_gens {
	struct conf_gen *gen; /* what new requests get */
	int requests;	      /* requests that hold gen */
	LIST_HEAD(, conf_gen_retired) retired;
};

/* Start with gen (acquired here). */
void conf_gens_init(struct conf_gens *g, struct conf_gen *gen);
/* The configuration new requests get, and its secrets. */
const struct conf *conf_gens_conf(const struct conf_gens *g);
const struct secrets *conf_gens_secrets(const struct conf_gens *g);
/* The generation a new request holds until it ends (conf_gens_drop). */
struct conf_gen *conf_gens_hold(struct conf_gens *g);
void conf_gens_drop(struct conf_gens *g, struct conf_gen *gen);
/* New requests get gen from now on; takes over one hold of gen. */
void conf_gens_switch(struct conf_gens *g, struct conf_gen *gen);
/* Release the current generation (every request has ended). */
void conf_gens_clear(struct conf_gens *g);

#endif
